"""A local S3 endpoint for tests, the demo and benchmarks: moto's server on 127.0.0.1,
optionally behind a proxy that counts requests and injects latency or faults.

Everything listens on the loopback interface only.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import s3fs
    from aiohttp import web
    from moto.server import ThreadedMotoServer

CREDENTIALS = {"key": "testing", "secret": "testing"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def reset(self) -> None:
        self.requests = self.gets = self.heads = self.bytes = self.injected_faults = 0
        self.by_method = {}


class CountingProxy:
    """An HTTP reverse proxy on 127.0.0.1 in front of an endpoint.

    It counts requests and GET bytes, and can add a fixed latency per request, answer a
    share of requests with 503 SlowDown (seeded, so runs repeat), or answer the next
    ``n`` GETs with 503 (:meth:`fail_next_gets`).
    """

    def __init__(self, target: str, *, latency_ms: float = 0.0, fault_rate: float = 0.0, seed: int = 0) -> None:
        self.target = target.rstrip("/")
        self.latency_ms = latency_ms
        self.fault_rate = fault_rate
        self._random = random.Random(seed)
        self.stats = ProxyStats()
        self.port = free_port()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._failing_gets = 0

    def fail_next_gets(self, count: int) -> None:
        """Answer the next ``count`` GET requests with 503 ServiceUnavailable (an error code
        that s3fs does not retry itself, unlike SlowDown: a test of h5lens's own retries)."""
        self._failing_gets = count

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> CountingProxy:
        self._thread = threading.Thread(target=self._serve, name="h5lens-s3-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the S3 proxy did not start")
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

    async def _start(self) -> None:
        import aiohttp
        from aiohttp import web

        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 31)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
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
        if failing_get or (self.fault_rate and self._random.random() < self.fault_rate):
            self.stats.injected_faults += 1
            body = (
                b"<Error><Code>ServiceUnavailable</Code><Message>Unavailable.</Message></Error>"
                if failing_get
                else b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            )
            return web.Response(status=503, body=body, content_type="application/xml")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        body = await request.read()
        try:
            return await self._forward(request, headers, body)
        except aiohttp.ClientError:  # the proxy is shutting down under a request still in flight
            return web.Response(status=502)

    async def _forward(self, request: web.Request, headers: dict[str, str], body: bytes) -> web.Response:
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
            return web.Response(status=upstream.status, body=payload, headers=out_headers)
