"""Where a manifest is written: never over data, and checked before any scan starts.

A manifest written over the HDF5 file it describes, or over any other file that is not a
manifest (a neighbouring ``.h5ad`` named by a slip of the shell), destroys data; a
destination that cannot be written (no such directory, no such bucket, no credentials,
an endpoint that does not answer) should fail in the first seconds, naming the cause, not
after a long scan. A manifest may replace a manifest: that is what indexing again does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from h5lens.errors import AccessDeniedError, H5LensError, InvalidOptionError, StorageError
from h5lens.fetch.backend_errors import anon_requested, probe_options, storage_error
from h5lens.manifest.locations import is_remote, local_path, same_location, scheme

# Protocols whose first path component is a bucket (or container) that must exist.
_BUCKET_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2"})
_HEAD = 4096  # bytes of an existing file read to tell a manifest from data
_COMPACT_MAGIC = b"H5LENS-COMPACT\x00"
# A reference manifest's JSON opens with one of its own keys (h5lens's, or kerchunk's).
_REFERENCE_JSON = re.compile(rb'\A\s*\{\s*"(h5lens|version|refs|templates)"\s*:')
_REPORT_JSON = re.compile(rb'\A\s*\{\s*"indexed"\s*:')  # index-many's report: many.run.write_report


def refuse_sources(destination: str, sources: Iterable[str | None]) -> None:
    """Raise :class:`InvalidOptionError` if ``destination`` is one of ``sources``."""
    for source in sources:
        if source and same_location(destination, source):
            raise InvalidOptionError(
                f"{destination}: this is the source {source}; writing the manifest there would overwrite the data"
            )


def is_manifest_head(head: bytes) -> bool:
    """Whether a file starting with ``head`` may be replaced by a manifest: it is one (the
    compact form, or reference JSON from h5lens or kerchunk), or it is empty."""
    return not head.strip() or head.startswith(_COMPACT_MAGIC) or bool(_REFERENCE_JSON.match(head))


def is_report_head(head: bytes) -> bool:
    """Whether a file starting with ``head`` is an ``index-many`` report (or empty)."""
    return not head.strip() or bool(_REPORT_JSON.match(head))


def refuse_overwrite(destination: str, head: bytes | None, *, what: str = "a manifest") -> None:
    """Refuse to replace an existing file (``head``: its first bytes; None: there is none)
    that is not ``what`` (a manifest, or an index-many report)."""
    replaceable = is_report_head if what == "a report" else is_manifest_head
    if head is None or replaceable(head):
        return
    said = f"{destination}: an existing file that is not {what} ({_looks_like(head)})"
    raise InvalidOptionError(f"{said}; pass force=True to replace it").at_cli(f"{said}; pass --force to replace it")


def existing_head(destination: str, storage_options: dict[str, Any] | None = None) -> bytes | None:
    """The first bytes of the file at ``destination``, or None if there is none (read through
    :mod:`h5lens.fetch`, as every byte h5lens reads; a first request: a destination that
    does not answer fails within seconds)."""
    from h5lens.fetch.clients import read_head

    try:
        return read_head(destination, _HEAD, storage_options)
    except H5LensError:
        raise
    except Exception as e:  # noqa: BLE001 - every backend failure, named with the URL
        raise storage_error(e, destination, "checking the destination", anon=anon_requested(storage_options)) from e


def _looks_like(head: bytes) -> str:
    if head.startswith(b"\x89HDF\r\n\x1a\n") or b"\x89HDF\r\n\x1a\n" in head[:4096]:
        return "an HDF5 file"
    if head.startswith(b"PK\x03\x04"):
        return "a zip file"
    return "its first bytes are no manifest's"


def check_destination(
    destination: str,
    *,
    sources: Iterable[str | None] = (),
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    what: str = "a manifest",
) -> None:
    """Refuse a destination that is a source, that holds data, or that cannot be written,
    before any work (``what`` may replace what is there: a manifest, or a report).

    Local: its directory must exist and be writable, and it must not be a directory.
    Object storage: its bucket must exist and be reachable with these options (writing
    rights show only when writing; the write itself is still atomic). An existing file
    that is not a manifest is replaced only with ``force``."""
    refuse_sources(destination, sources)
    if not is_remote(destination):
        _check_local(destination, force, what)
        return
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(destination, **probe_options(destination, storage_options))
        check_bucket(destination, fs, path)
        if fs.isdir(path):
            raise InvalidOptionError(f"{destination}: a directory (prefix); give the manifest a file name")
        if not force:
            refuse_overwrite(destination, existing_head(destination, storage_options), what=what)
    except H5LensError:
        raise
    except Exception as e:  # noqa: BLE001 - every backend failure, named with the URL
        raise storage_error(e, destination, "checking the destination", anon=anon_requested(storage_options)) from e


def check_bucket(url: str, fs: Any, path: str) -> None:
    """On object storage, the bucket of ``url`` (``path`` on ``fs``) must exist: a prefix
    needs no creating, a bucket does. Asked so that the store's answer comes back as it is
    (no credentials, denied, unreachable, no such bucket), not as "it does not exist"."""
    if scheme(url) not in _BUCKET_PROTOCOLS:
        return
    bucket = path.split("/", 1)[0]
    try:
        if hasattr(fs, "call_s3"):  # s3fs: HeadBucket raises what went wrong
            fs.call_s3("head_bucket", Bucket=bucket)
        else:
            fs.info(bucket)
    except FileNotFoundError:
        raise StorageError(f"{url}: the bucket {bucket!r} does not exist") from None


def refuse_local_sources(destination: str, source_urls: Iterable[str], *, many: bool = False) -> None:
    """A manifest written to object storage must not point at a local path: whoever reads it
    there cannot reach that file. Raise unless every source URL is remote or relative
    (``many``: for index-many, whose sources are files and globs, not one URL to give)."""
    if not is_remote(destination):
        return
    for url in source_urls:
        if not is_remote(url) and os.path.isabs(local_path(url)):
            said = (
                f"{destination}: the manifest would point at the local file {url}, which readers of "
                f"{destination} cannot reach;"
            )
            if many:
                raise InvalidOptionError(f"{said} upload the files and index them where they are served from")
            raise InvalidOptionError(f"{said} say where the file is served from with url=").at_cli(
                f"{said} say where the file is served from with --url URL (or index the uploaded copy)"
            )


def _check_local(destination: str, force: bool, what: str) -> None:
    path = os.path.abspath(local_path(destination))
    if os.path.isdir(path):
        raise InvalidOptionError(f"{destination}: a directory; give the manifest a file name")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StorageError(f"{destination}: the directory {parent} does not exist")
    exists = os.path.lexists(path)
    if not os.access(parent, os.W_OK | os.X_OK) or (exists and not os.access(path, os.W_OK)):
        raise AccessDeniedError(f"{destination}: no permission to write there")
    if exists and not force:
        refuse_overwrite(destination, existing_head(destination), what=what)
