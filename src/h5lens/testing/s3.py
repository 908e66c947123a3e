"""A local S3 endpoint for tests, the demo and benchmarks: moto's server on 127.0.0.1,
optionally behind a proxy that counts requests and injects latency or faults.

The proxy can also play a realistic S3 for throughput measurements (opt-in): a fixed
latency per request, each response streamed at a bandwidth of its own (one S3
connection in-region serves about 100 MB/s; parallel streams each get their own rate),
and objects served from a cache it keeps (stock moto re-reads the whole object on every
GET, ~100 ms for a 1 KiB range of a 150 MiB object, which would swamp the simulation).

Everything listens on the loopback interface only.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import unquote

if TYPE_CHECKING:
    import s3fs
    from aiohttp import web
    from moto.server import ThreadedMotoServer

CREDENTIALS = {"key": "testing", "secret": "testing"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopServer:
    """An aiohttp application on 127.0.0.1, served from a thread of its own (its own event
    loop) while the ``with`` block runs. Subclasses build the application (:meth:`_app`)."""

    thread_name = "h5lens-test-server"

    def __init__(self) -> None:
        self.port = free_port()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._serve, name=self.thread_name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self.thread_name} did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def _start(self) -> None:
        from aiohttp import web

        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class LocalS3:
    """moto's S3 server on 127.0.0.1, started on enter and stopped on exit."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._server: ThreadedMotoServer | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self, endpoint_url: str | None = None) -> dict[str, Any]:
        """s3fs options for this endpoint (moto accepts any key/secret; anonymous access gets 403)."""
        return {**CREDENTIALS, "endpoint_url": endpoint_url or self.endpoint_url}

    def __enter__(self) -> LocalS3:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def filesystem(self, endpoint_url: str | None = None) -> s3fs.S3FileSystem:
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options(endpoint_url), skip_instance_cache=True)

    def make_bucket(self, name: str) -> None:
        fs = self.filesystem()
        if not fs.exists(name):
            fs.mkdir(name)


@dataclass
class ProxyStats:
    requests: int = 0
    gets: int = 0
    heads: int = 0
    bytes: int = 0  # response body bytes of GETs
    injected_faults: int = 0
    by_method: dict[str, int] = field(default_factory=dict)
    cache_fills: int = 0  # whole objects fetched from the target into the cache (cache_objects=True)

    def reset(self) -> None:
        self.requests = self.gets = self.heads = self.bytes = self.injected_faults = self.cache_fills = 0
        self.by_method = {}


# Response headers of a whole-object GET kept with a cached object (and sent with every answer from
# it), by lower-case name -> the spelling S3 sends (aiohttp's client reports "Etag").
_CACHED_HEADERS = {
    name.lower(): name
    for name in ("ETag", "Last-Modified", "Content-Type", "Cache-Control", "Content-Disposition", "Content-Language",
                 "Expires", "x-amz-version-id", "x-amz-storage-class", "x-amz-server-side-encryption")
}
STREAM_PIECE = 64 << 10  # bytes written at a time by a throttled response
FAULTS = ("503", "500", "truncate", "reset")


def _reset(request: web.Request) -> None:
    """Drop the request's connection at once (a TCP reset: no linger)."""
    import struct

    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


@dataclass(frozen=True)
class _CachedObject:
    body: bytes
    headers: dict[str, str]  # the _CACHED_HEADERS the target sent (ETag, Last-Modified, ...)


def _object_key(path: str) -> tuple[str, str] | None:
    """(bucket, key) of a path-style object URL path (``/bucket/key``), else None."""
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    return (bucket, key) if bucket and key else None


def parse_range(header: str | None, size: int) -> tuple[int, int] | None | Literal[False]:
    """The byte range ``[start, stop)`` a ``Range`` header asks of an object of ``size``
    bytes, as S3 reads it: None for the whole object (no header, a malformed one, several
    ranges), False when the range is not satisfiable (416)."""
    if not header:
        return None
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            return False
        return max(0, size - suffix), size
    start = int(first)
    if last and int(last) < start:
        return None  # invalid: S3 ignores it
    if start >= size:
        return False
    return start, min(size, int(last) + 1) if last else size


class CountingProxy(LoopServer):
    """An HTTP reverse proxy on 127.0.0.1 in front of an endpoint.

    It counts requests and GET bytes, and can add a fixed latency per request, fail a
    share of requests (``fault_rate``, seeded so runs repeat) in the ways of ``faults``,
    or answer the next ``n`` GETs with 503 (:meth:`fail_next_gets`). The faults:

    ``"503"``       503 SlowDown (S3's throttling answer)
    ``"500"``       500 InternalError
    ``"truncate"``  a GET's headers promise the whole body; half of it comes, then the
                    connection closes (a response cut off mid-stream)
    ``"reset"``     the connection is reset before any answer

    Opt-in, for a realistic S3 (e.g. ``latency_ms=20, bandwidth=100e6, cache_objects=True``):

    ``bandwidth``
        bytes/s of each GET response: the body streams at that rate (the last byte leaves
        no sooner than ``size / bandwidth`` after the response starts), each response at its own rate.
    ``total_bandwidth``
        bytes/s of every GET response together: one link the responses in flight share, their
        pieces sent in the order they came to it (a narrow network, or a server that serves so
        much in all): N responses of S bytes, sent at once, end no sooner than ``N * S /
        total_bandwidth`` after they start.
    ``cache_objects``
        each object is fetched once from the target (one plain GET of the whole object,
        kept with its ETag and Last-Modified) and GETs of it, ranged or whole, are answered
        from the cache with S3's headers (206 and Content-Range for a range, 416 for a range
        past the end, ETag, Accept-Ranges, If-Match / If-None-Match); a PUT, POST or DELETE
        of the key that passes through the proxy drops it. HEAD, LIST, PUT and the rest go
        to the target.
    """

    def __init__(
        self,
        target: str,
        *,
        latency_ms: float = 0.0,
        fault_rate: float = 0.0,
        faults: tuple[str, ...] = ("503",),
        seed: int = 0,
        bandwidth: float | None = None,
        total_bandwidth: float | None = None,
        cache_objects: bool = False,
    ) -> None:
        for name, rate in (("bandwidth", bandwidth), ("total_bandwidth", total_bandwidth)):
            if rate is not None and not rate > 0:
                raise ValueError(f"{name} must be a positive number of bytes/s. Got {rate!r}")
        self.target = target.rstrip("/")
        self.latency_ms = latency_ms
        self.fault_rate = fault_rate
        unknown = set(faults) - set(FAULTS)
        if not faults or unknown:
            raise ValueError(f"faults must be some of {FAULTS}. Got {faults!r}")
        self.faults = tuple(faults)
        self.bandwidth = bandwidth
        self.total_bandwidth = total_bandwidth
        self._link_free_at = 0.0  # when the shared link has sent every piece given to it so far
        self.cache_objects = cache_objects
        self._cache: dict[tuple[str, str], _CachedObject] = {}
        self._filling: dict[tuple[str, str], asyncio.Future[_CachedObject | None]] = {}
        self._generations: dict[tuple[str, str], int] = {}
        self._random = random.Random(seed)
        self.stats = ProxyStats()
        self._failing_gets = 0
        super().__init__()

    def fail_next_gets(self, count: int) -> None:
        """Answer the next ``count`` GET requests with 503 ServiceUnavailable (an error code
        that s3fs does not retry itself, unlike SlowDown: a test of h5lens's own retries)."""
        self._failing_gets = count

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    thread_name = "h5lens-s3-proxy"

    def _app(self) -> web.Application:
        from aiohttp import web

        app = web.Application(client_max_size=1 << 31)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _start(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(auto_decompress=False)
        await super()._start()

    async def _stop(self) -> None:
        await self._session.close()
        await super()._stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        import aiohttp
        from aiohttp import web

        self.stats.requests += 1
        self.stats.by_method[request.method] = self.stats.by_method.get(request.method, 0) + 1
        if request.method == "GET":
            self.stats.gets += 1
        elif request.method == "HEAD":
            self.stats.heads += 1
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        failing_get = request.method == "GET" and self._failing_gets > 0
        if failing_get:
            self._failing_gets -= 1
        fault = None
        if failing_get:
            fault = "unavailable"
        elif self.fault_rate and self._random.random() < self.fault_rate:
            fault = self._random.choice(self.faults)
            if fault == "truncate" and request.method != "GET":
                fault = "503"
        if fault is not None:
            self.stats.injected_faults += 1
        if fault in ("unavailable", "503", "500"):
            body = {
                "unavailable": b"<Error><Code>ServiceUnavailable</Code><Message>Unavailable.</Message></Error>",
                "503": b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
                "500": b"<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>",
            }[fault]
            return web.Response(status=500 if fault == "500" else 503, body=body, content_type="application/xml")
        if fault == "reset":
            _reset(request)
            return web.Response(status=500)  # never sent: the connection is gone
        if fault == "truncate":
            request["h5lens_truncate"] = True
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        body = await request.read()
        key = _object_key(request.path) if self.cache_objects else None
        try:
            if key is not None and request.method == "GET" and set(request.query) <= {"x-id"}:
                cached = await self._cached(request, key, headers)
                if cached is not None:
                    return await self._answer_from(request, cached)
            elif self.cache_objects and request.method not in ("GET", "HEAD"):
                self._invalidate(request, key)
                try:
                    return await self._forward(request, headers, body)
                finally:
                    self._invalidate(request, key)  # and whatever a GET filled in the meantime
            return await self._forward(request, headers, body)
        except aiohttp.ClientError:  # the proxy is shutting down under a request still in flight
            return web.Response(status=502)

    async def _forward(self, request: web.Request, headers: dict[str, str], body: bytes) -> web.StreamResponse:
        from aiohttp import web

        async with self._session.request(
            request.method, self.target + request.path_qs, headers=headers, data=body or None
        ) as upstream:
            payload = await upstream.read()
            if request.method == "GET":
                self.stats.bytes += len(payload)
            dropped: tuple[str, ...] = ("transfer-encoding", "connection", "content-encoding")
            if request.method != "HEAD":  # a HEAD answer must keep the object's Content-Length
                dropped += ("content-length",)
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in dropped}
            if request.method == "HEAD":
                return web.Response(status=upstream.status, headers=out_headers)
            if request.method == "GET" and upstream.status in (200, 206) and payload:
                return await self._stream(request, upstream.status, out_headers, payload)
            return web.Response(status=upstream.status, body=payload, headers=out_headers)

    # -- a realistic S3: throttled responses, objects served from a cache -------------------

    async def _stream(
        self, request: web.Request, status: int, headers: dict[str, str], payload: bytes | memoryview
    ) -> web.StreamResponse:
        """Send ``payload`` (at ``self.bandwidth`` bytes/s if set: each piece leaves when a
        stream of that rate would have finished sending it, so the whole takes at least
        len/bandwidth; and, with ``self.total_bandwidth``, no sooner than the shared link has
        sent it after every piece given to the link before). A response chosen to be truncated
        stops halfway and drops the connection."""
        from aiohttp import web

        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = len(payload)
        await response.prepare(request)
        view = memoryview(payload)
        if request.get("h5lens_truncate"):
            view = view[: len(view) // 2]
        loop = asyncio.get_running_loop()
        start, sent = loop.time(), 0
        try:
            while sent < len(view):
                piece = view[sent : sent + STREAM_PIECE]
                leaves = start + (sent + len(piece)) / self.bandwidth if self.bandwidth else 0.0
                if self.total_bandwidth:
                    self._link_free_at = max(self._link_free_at, loop.time()) + len(piece) / self.total_bandwidth
                    leaves = max(leaves, self._link_free_at)
                wait = leaves - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await response.write(piece)
                sent += len(piece)
            if request.get("h5lens_truncate"):
                _reset(request)
                return response
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the client went away mid-stream
            pass
        return response

    def _invalidate(self, request: web.Request, key: tuple[str, str] | None) -> None:
        """Drop the cached copy of ``key`` (a write to it), or of every object of the bucket
        for a bucket-level write (DeleteObjects, a deleted bucket)."""
        if key is not None:
            dropped = [key]
        else:
            bucket = unquote(request.path).strip("/").split("/", 1)[0]
            dropped = [k for k in {*self._cache, *self._filling} if k[0] == bucket]
        for k in dropped:
            self._cache.pop(k, None)
            self._generations[k] = self._generations.get(k, 0) + 1

    async def _cached(
        self, request: web.Request, key: tuple[str, str], headers: dict[str, str]
    ) -> _CachedObject | web.StreamResponse | None:
        """The cached object, fetched whole from the target on first use (one fetch at a
        time per key). A target's refusal (403, 404, ...) is answered as the target gave it;
        None: forward the request as it came (a fill that another request started failed)."""
        from aiohttp import web

        found = self._cache.get(key)
        if found is not None:
            return found
        pending = self._filling.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = asyncio.get_running_loop().create_future()
        self._filling[key] = pending
        generation = self._generations.get(key, 0)
        plain = {k: v for k, v in headers.items() if k.lower() != "range" and not k.lower().startswith("if-")}
        result: _CachedObject | None = None
        try:
            async with self._session.get(self.target + request.path_qs, headers=plain) as upstream:
                payload = await upstream.read()
                if upstream.status != 200:
                    dropped = ("transfer-encoding", "connection", "content-encoding", "content-length")
                    out = {k: v for k, v in upstream.headers.items() if k.lower() not in dropped}
                    self.stats.bytes += len(payload)
                    return web.Response(status=upstream.status, body=payload, headers=out)
                kept = {_CACHED_HEADERS[k.lower()]: v for k, v in upstream.headers.items() if k.lower() in _CACHED_HEADERS}
                result = _CachedObject(payload, kept)
                self.stats.cache_fills += 1
                if self._generations.get(key, 0) == generation:  # no write to the key meanwhile
                    self._cache[key] = result
                return result
        finally:
            del self._filling[key]
            pending.set_result(result)

    async def _answer_from(self, request: web.Request, cached: _CachedObject | web.StreamResponse) -> web.StreamResponse:
        """A GET answered from the cache as S3 answers it."""
        from aiohttp import web

        if not isinstance(cached, _CachedObject):
            return cached
        size = len(cached.body)
        headers = {**cached.headers, "Accept-Ranges": "bytes"}
        etag = cached.headers.get("ETag")
        if_match, if_none_match = request.headers.get("If-Match"), request.headers.get("If-None-Match")
        if if_match is not None and etag is not None and if_match.strip() not in ("*", etag):
            body = b"<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>"
            return web.Response(status=412, body=body, content_type="application/xml")
        if if_none_match is not None and etag is not None and if_none_match.strip() in ("*", etag):
            return web.Response(status=304, headers={k: v for k, v in headers.items() if k.lower() != "content-type"})
        wanted = parse_range(request.headers.get("Range"), size)
        if wanted is False:
            body = (
                "<Error><Code>InvalidRange</Code><Message>The requested range is not satisfiable</Message>"
                f"<RangeRequested>{request.headers.get('Range')}</RangeRequested><ActualObjectSize>{size}</ActualObjectSize></Error>"
            ).encode()
            return web.Response(status=416, body=body, content_type="application/xml", headers={"Content-Range": f"bytes */{size}"})
        status, (start, stop) = (200, (0, size)) if wanted is None else (206, wanted)
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        payload = memoryview(cached.body)[start:stop]
        self.stats.bytes += len(payload)
        if payload:
            return await self._stream(request, status, headers, payload)
        return web.Response(status=status, body=bytes(payload), headers=headers)
