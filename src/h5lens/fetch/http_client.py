"""HTTP(S) sources that redirect: the URL the user gave resolved once, its target reused
until its signature expires.

Archives answer an asset's URL with a redirect to a short-lived signed object URL (the DANDI
archive's asset API: a 302 to a presigned S3 URL), often behind a bearer token. Followed by
the HTTP library on every ranged read, that is two round trips per chunk. An
:class:`HTTPClient` instead asks the URL once (a GET of its first byte, redirects not
followed, the user's headers sent), follows the redirects itself, and reads every range
from the target with the reader that fits it (obstore or fsspec,
:func:`h5lens.fetch.clients.remote_client`):

* the target is reused until its signature says it expires (``X-Amz-Date`` and
  ``X-Amz-Expires``, ``X-Goog-Date`` and ``X-Goog-Expires``, ``Expires``, Azure's ``se``),
  a little before, then resolved again; a target refused (a 403 for a signature that
  expired, with no date to tell) is resolved again and the request sent once more;
* the user's headers (a token) go to the target only if it is on the same origin (scheme,
  host and port): a signed URL carries its own authorisation, and S3 refuses a request that
  carries two;
* the first byte's answer is also the source's stat (size from ``Content-Range``, ETag,
  Last-Modified): no HEAD, which a URL signed for GET is refused; a server that answers it
  with the whole file (it ignores ``Range``) is refused at once;
* everything h5lens says (errors, the manifest) names the URL the user gave, never the
  target, whose query string is a credential.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import numpy as np

from h5lens.errors import AccessDeniedError, H5LensError, SourceNotFoundError, StorageError
from h5lens.fetch import retry
from h5lens.fetch.backend_errors import PROBE_READ_TIMEOUT, is_transient, storage_error, unreachable
from h5lens.fetch.cost import CostModel
from h5lens.fetch.protocol import ByteReader, Fetched, FetchedOrFailed
from h5lens.fetch.ranges import RangeIgnoredError

__all__ = ["HTTPClient", "Resolved", "resolve", "signature_expiry"]

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
# A target is resolved again this long before its signature expires (at most a tenth of its
# lifetime): a read sent just before expiry would otherwise be refused on arrival.
EXPIRY_MARGIN = 5.0
# What a check (stat) asks for and keeps: 64 KiB take about 0.6 ms at 100 MB/s, a round trip
# 20 ms; a manifest or a superblock read after it then costs none.
HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Resolved:
    """Where the bytes of a URL are, and what its first byte's answer said about them."""

    target: str  # the URL itself, or where it redirects
    redirected: bool
    resolved_at: float  # time.time()
    expires: float | None  # when the target's signature expires (time.time()); None: unknown
    size: int | None
    etag: str | None
    mtime: float | None
    ranges: bool  # the server answered the ranged GET with 206

    def stale(self, now: float) -> bool:
        """Whether the target's signature expires within the margin."""
        if self.expires is None:
            return False
        margin = min(EXPIRY_MARGIN, (self.expires - self.resolved_at) / 10)
        return now >= self.expires - margin


def signature_expiry(url: str) -> float | None:
    """When a signed URL's signature expires (seconds since the epoch), as its query says;
    None where it says nothing h5lens knows."""
    query = {k.lower(): v[0] for k, v in parse_qs(urlsplit(url).query).items() if v}
    try:
        for prefix in ("x-amz-", "x-goog-"):  # AWS SigV4, GCS V4: signed at DATE, valid EXPIRES seconds
            if prefix + "date" in query and prefix + "expires" in query:
                signed = datetime.datetime.strptime(query[prefix + "date"], "%Y%m%dT%H%M%SZ")
                return signed.replace(tzinfo=datetime.UTC).timestamp() + float(query[prefix + "expires"])
        if "expires" in query:  # SigV2, GCS V2, CloudFront: the epoch second it expires
            return float(query["expires"])
        if "se" in query and "sig" in query:  # Azure SAS: the signed expiry, ISO 8601
            return datetime.datetime.fromisoformat(query["se"].replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return None


def same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme.lower(), pa.hostname, pa.port) == (pb.scheme.lower(), pb.hostname, pb.port)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is raised as an HTTPError: h5lens follows it itself


_OPENER = urllib.request.build_opener(_NoRedirects)


def resolve(
    url: str, headers: dict[str, str] | None = None, *, start: str | None = None, first: tuple[int, int] = (0, 1)
) -> tuple[Resolved, bytes | None]:
    """Ask ``url`` for the bytes ``first`` (offset, length; by default its first byte),
    following redirects (``headers`` sent on its origin only), under the retry policy: the
    target, what its answer said, and those bytes (None where the answer holds none: the
    server ignores ``Range``, or the range is past the end). ``start``: a target found before,
    asked first (its signature may still hold: no redirect then); if it is refused, ``url``
    is asked again. Errors are h5lens errors naming ``url``."""
    if start is not None and start != url:
        try:
            return _follow(start, url, headers, first, redirected=True)
        except (AccessDeniedError, SourceNotFoundError):
            pass  # its signature expired (or the archive moved it): where does the URL lead now
    return _follow(url, url, headers, first, redirected=False)


def _follow(
    target: str, url: str, headers: dict[str, str] | None, first: tuple[int, int], *, redirected: bool
) -> tuple[Resolved, bytes | None]:
    sent: dict[str, str] = dict(headers or {})
    offset, length = first
    wanted = f"bytes={offset}-{offset + max(length, 1) - 1}"
    for _ in range(MAX_REDIRECTS + 1):
        mine = sent if same_origin(target, url) else {}
        request = urllib.request.Request(target, headers={**mine, "Range": wanted}, method="GET")

        def attempt(request: urllib.request.Request = request) -> Any:
            try:
                return _OPENER.open(request, timeout=PROBE_READ_TIMEOUT)
            except urllib.error.HTTPError as e:
                if e.code in REDIRECTS or e.code == 416:
                    return e  # an answer, not a failure (416: the readers say which bytes)
                e.close()  # its status and headers stay; its connection goes
                raise

        try:
            answer = retry.policy().run_sync(attempt, is_transient, unanswered=unreachable)
        except Exception as e:  # noqa: BLE001 - named below, with the URL the user gave
            raise _resolve_error(e, url, redirected) from None
        try:
            status = answer.getcode()
            if status in REDIRECTS:
                location = answer.headers.get("Location")
                if not location:
                    raise StorageError(f"{url}: the server answered {status} with no Location to redirect to")
                target, redirected = urljoin(target, location), True
                continue
            resolved = _answered(answer, target, redirected)
            # the body of a ranged answer only: a server that ignores Range sends the whole file
            return resolved, answer.read(length) if status == 206 else None
        finally:
            answer.close()
    raise StorageError(f"{url}: more than {MAX_REDIRECTS} redirects")


# Targets found, per URL and headers, for the whole process: a manifest opened after its
# source was indexed, or by each of many stores, reads from the target its first reader
# found while the signature holds (the headers are a key in memory only).
_TARGETS: dict[tuple[str, int], Resolved] = {}
_TARGETS_LOCK = threading.Lock()
_MAX_TARGETS = 1024


def _known(key: tuple[str, int]) -> Resolved | None:
    with _TARGETS_LOCK:
        return _TARGETS.get(key)


def _remember(key: tuple[str, int], resolved: Resolved) -> None:
    with _TARGETS_LOCK:
        _TARGETS[key] = resolved
        while len(_TARGETS) > _MAX_TARGETS:
            _TARGETS.pop(next(iter(_TARGETS)))


def _answered(answer: Any, target: str, redirected: bool) -> Resolved:
    headers, status = answer.headers, answer.getcode()
    size: int | None = None
    content_range = headers.get("Content-Range") or ""
    if status in (206, 416) and "/" in content_range:
        total = content_range.rsplit("/", 1)[1].strip()
        size = int(total) if total.isdigit() else None
    elif status == 200 and (headers.get("Content-Length") or "").isdigit():
        size = int(headers["Content-Length"])
    etag = headers.get("ETag")
    mtime = None
    if headers.get("Last-Modified"):
        from email.utils import parsedate_to_datetime

        try:
            mtime = parsedate_to_datetime(headers["Last-Modified"]).timestamp()
        except (TypeError, ValueError):
            mtime = None
    return Resolved(
        target=target,
        redirected=redirected,
        resolved_at=time.time(),
        expires=signature_expiry(target) if redirected else None,
        size=size,
        etag=etag.strip('"') if etag else None,
        mtime=mtime,
        ranges=status in (206, 416),
    )


def _resolve_error(error: BaseException, url: str, redirected: bool) -> H5LensError:
    found = storage_error(error, url, "checking the redirect's target of" if redirected else "checking")
    attempts = getattr(error, "attempts", 1)
    if unreachable(error) and attempts > 1:
        return StorageError(f"{found} after {attempts} attempts")
    return found


class HTTPClient:
    """A ByteReader of an HTTP(S) URL that may redirect (see the module docstring). Until its
    first request, it reads as the reader of the URL itself would (``make(url, options)``)."""

    local = False
    maps = False

    def __init__(self, url: str, storage_options: dict[str, Any] | None, make: Callable[..., ByteReader]) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self._make = make
        self._headers = {str(k): str(v) for k, v in (self.storage_options.get("headers") or {}).items()}
        self._key = (url, hash(tuple(sorted(self._headers.items()))))
        self._resolved: Resolved | None = None
        self._generation = 0  # targets used so far: a refusal re-resolves only the one it met
        self._inner: ByteReader = make(url, storage_options)
        self._retired: list[ByteReader] = []
        self._head: bytes | None = None  # the first bytes, as the last check brought them
        self._targets: list[str] = []  # where the URL led: named by no message (_named)
        self.concurrency = self._inner.concurrency
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def cost(self) -> CostModel:
        return self._inner.cost

    def batches(self) -> int:
        return self._inner.batches()

    def views(self, offsets: np.ndarray, lengths: np.ndarray) -> None:
        return None  # nothing to map: every range is a request

    # -- where the bytes are -------------------------------------------------------------

    def _current(
        self, stale_generation: int | None = None, *, check: bool = False, first: tuple[int, int] = (0, 1)
    ) -> tuple[ByteReader, int, bytes | None]:
        """The reader of the target, its generation, and the bytes ``first`` where asking
        for them was how the target was found (else None): the target known in this process
        if its signature holds, else resolved; resolved again when it is about to expire,
        when ``stale_generation`` (whose target was refused) is still the current one, or,
        with ``check``, asked again (from the target known, if any: a stat sends one request)."""
        with self._lock:
            refused = stale_generation is not None and stale_generation == self._generation
            known = None if refused else self._resolved or _known(self._key)
            if known is not None and known.stale(time.time()):
                known = None
            resolved, body = known, None
            if resolved is None or check:
                start = known.target if known is not None else None
                resolved, body = resolve(self.url, self._headers, start=start, first=first)
                _remember(self._key, resolved)
            if resolved is not self._resolved:
                self._use(resolved)
            return self._inner, self._generation, body

    def _use(self, resolved: Resolved) -> None:
        """Read from ``resolved``'s target from now on."""
        previous = self._resolved
        self._generation += 1
        self._resolved = resolved
        if resolved.target != (previous.target if previous is not None else self.url):
            self._targets.append(resolved.target)
            options = dict(self.storage_options)
            if not same_origin(resolved.target, self.url):
                options.pop("headers", None)  # the signed URL authorises itself
            # the reader of the old target may still have reads in flight: closed with this client
            self._retired.append(self._inner)
            self._inner = self._make(resolved.target, options or None)
            self.concurrency = self._inner.concurrency

    async def _current_async(
        self, stale_generation: int | None = None, first: tuple[int, int] = (0, 1)
    ) -> tuple[ByteReader, int, bytes | None]:
        resolved = self._resolved
        if resolved is not None and stale_generation is None and not resolved.stale(time.time()):
            return self._inner, self._generation, None
        return await asyncio.to_thread(self._current, stale_generation, first=first)

    def _check(self) -> None:
        resolved = self._resolved
        if resolved is not None and not resolved.ranges:
            raise RangeIgnoredError(
                f"{self.url}: the server ignores HTTP Range requests (it answers with the whole file), "
                "so chunks cannot be read one by one; download the file and index or read the local copy"
            )

    def _refused(self, error: BaseException) -> bool:
        """Whether ``error`` may be a target's signature that expired: resolving again helps."""
        resolved = self._resolved
        return (
            resolved is not None and resolved.redirected and isinstance(error, (AccessDeniedError, SourceNotFoundError))
        )

    def _named(self, error: BaseException) -> BaseException:
        """``error`` naming the URL the user gave instead of the target (a signed URL)."""
        if not self._targets or not isinstance(error, H5LensError):
            return error

        def said(text: str) -> str:
            for target in self._targets:
                text = text.replace(target, self.url)
            return text

        renamed = copy.copy(error)
        renamed.args = tuple(said(a) if isinstance(a, str) else a for a in error.args)
        if error.cli_message:
            renamed.cli_message = said(error.cli_message)
        renamed.__cause__ = renamed.__context__ = None
        renamed.__suppress_context__ = True
        return renamed

    # -- reads ---------------------------------------------------------------------------

    def _from_head(self, offset: int, length: int, exact: bool = True) -> Fetched | None:
        """The bytes asked for, if the last check brought them (a manifest's, a superblock)."""
        head, resolved = self._head, self._resolved
        if head is None or resolved is None:
            return None
        whole = resolved.size is not None and len(head) >= resolved.size
        if offset + length <= len(head) or (whole and not exact and offset <= len(head)):
            return memoryview(head)[offset : offset + length]
        return None

    async def get(self, offset: int, length: int) -> Fetched:
        held = self._from_head(offset, length)
        if held is not None:
            return held
        inner, generation, body = await self._current_async(first=(offset, length))
        self._check()
        if body is not None and len(body) == length:
            return body  # the request that found the target brought these bytes
        try:
            return await inner.get(offset, length)
        except H5LensError as e:
            if not self._refused(e):
                raise self._named(e) from None
        inner, _, body = await self._current_async(generation, first=(offset, length))
        if body is not None and len(body) == length:
            return body
        try:
            return await inner.get(offset, length)
        except H5LensError as e:
            raise self._named(e) from None

    async def get_many(self, ranges: Sequence[tuple[int, int]]) -> list[FetchedOrFailed]:
        inner, generation, _ = await self._current_async()
        self._check()
        found = await inner.get_many(ranges)
        if any(isinstance(f, BaseException) and self._refused(f) for f in found):
            inner, _, _ = await self._current_async(generation)
            again = [i for i, f in enumerate(found) if isinstance(f, BaseException)]
            redone = await inner.get_many([ranges[i] for i in again])
            for i, f in zip(again, redone, strict=True):
                found[i] = f
        return [self._named(f) if isinstance(f, BaseException) else f for f in found]

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> Fetched:
        held = self._from_head(offset, length, exact)
        if held is not None:
            return held
        inner, generation, body = self._current(first=(offset, length))
        self._check()
        if body is not None and (len(body) == length or not exact):
            return body
        try:
            return inner.get_sync(offset, length, exact=exact)
        except H5LensError as e:
            if not self._refused(e):
                raise self._named(e) from None
        inner, _, body = self._current(generation, first=(offset, length))
        if body is not None and (len(body) == length or not exact):
            return body
        try:
            return inner.get_sync(offset, length, exact=exact)
        except H5LensError as e:
            raise self._named(e) from None

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """Size and ETag (else Last-Modified), from one request: the first bytes of the
        target known in this process, else of the URL (following its redirects). Those bytes
        (:data:`HEAD_BYTES`) are kept: the reads that follow a check begin there (a
        manifest's JSON, a file's superblock), and a round trip costs more than they do."""
        del fingerprint, probe
        _, _, self._head = self._current(check=True, first=(0, HEAD_BYTES))
        self._check()
        resolved = self._resolved
        assert resolved is not None  # _current resolved it
        found: dict[str, Any] = {"size": resolved.size, "etag": resolved.etag}
        if resolved.etag is None and resolved.mtime is not None:
            found["mtime"] = resolved.mtime
        return found

    def close(self) -> None:
        for reader in [*self._retired, self._inner]:
            reader.close()
        self._retired.clear()

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options, "make": self._make}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["storage_options"], state["make"])  # type: ignore[misc]
