"""What ``h5lens index --for browser`` checks before it scans: the source's URL.

A manifest for the web must name its source as the browser will fetch it: an absolute
``http(s)://`` URL. A relative URL would be resolved against the page that loads the
manifest, not against the manifest; a local path or an ``s3://`` URL is not something a
browser's ``fetch`` reads (``@zarrita/storage`` rewrites ``s3://`` to the public AWS
endpoint, which is wrong for any other endpoint). NaN and infinities become the
convention's strings through the proposal profile (``convention="proposal"``), which
every h5lens reader reads back as floats.
"""

from __future__ import annotations

from h5lens.browser.readers import BROWSER_SCHEMES
from h5lens.errors import InvalidOptionError

# the convention profile a manifest for browsers is written in: NaN and infinities as the
# strings "NaN", "Infinity", "-Infinity", which JSON.parse reads
BROWSER_CONVENTION = "proposal"


def browser_url(url: str | None, source: str) -> str:
    """``url`` if a browser can fetch it as it stands, else an :class:`InvalidOptionError`
    saying what to give instead (``source``: the file being indexed, for the message)."""
    if url is None:
        said = f"{source}: a manifest for browsers needs the https:// URL the browser will fetch the file from"
        raise InvalidOptionError(f'{said} (url="https://HOST/PATH")').at_cli(f"{said} (--url https://HOST/PATH)")
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme:
        said = f"{url}: a relative URL in a manifest for browsers is resolved against the page, not the manifest"
        raise InvalidOptionError(f"{said}; give the absolute one").at_cli(f"{said}; give the absolute one (--url https://HOST/PATH)")
    if scheme not in BROWSER_SCHEMES:
        said = f"{url}: a browser fetches http(s) URLs only; give the https:// URL the file is served at"
        raise InvalidOptionError(said).at_cli(f"{said} (--url https://HOST/PATH)")
    return url
