"""A local HTTP file server for tests: the files of one directory on 127.0.0.1, answering
``Range`` requests as public archives do (206 and Content-Range, ETag, Last-Modified), or,
with ``ranges=False``, ignoring ``Range`` and answering 200 with the whole file as some
servers do. It counts requests and body bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from h5lens.testing.s3 import LoopServer, parse_range

if TYPE_CHECKING:
    from aiohttp import web


@dataclass
class ServerStats:
    requests: int = 0
    bytes: int = 0  # response body bytes
    whole_gets: int = 0  # GETs answered with the whole file (200)
    by_status: dict[int, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.requests = self.bytes = self.whole_gets = 0
        self.by_status = {}


class FileServer(LoopServer):
    """``with FileServer(directory) as server: server.url("name.h5")``."""

    def __init__(self, directory: str | os.PathLike[str], *, ranges: bool = True) -> None:
        self.directory = os.fspath(directory)
        self.ranges = ranges
        self.stats = ServerStats()
        super().__init__()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    thread_name = "h5lens-http-server"

    def _app(self) -> web.Application:
        from aiohttp import web

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> web.Response:
        from aiohttp import web

        self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1
        self.stats.bytes += len(body)
        return web.Response(status=status, body=body, headers=headers)

    async def _handle(self, request: web.Request) -> web.Response:
        self.stats.requests += 1
        name = request.match_info["tail"]
        path = os.path.join(self.directory, name)
        if request.method not in ("GET", "HEAD"):
            return self._answer(405)
        if "/" in name or name.startswith(".") or not os.path.isfile(path):
            return self._answer(404, b"not found")
        stat = os.stat(path)
        headers = {
            "ETag": f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"',
            "Last-Modified": _http_date(stat.st_mtime),
            "Content-Type": "application/octet-stream",
        }
        if self.ranges:
            headers["Accept-Ranges"] = "bytes"
        size = stat.st_size
        if request.method == "HEAD":
            return self._answer(200, b"", {**headers, "Content-Length": str(size)})
        wanted = parse_range(request.headers.get("Range"), size) if self.ranges else None
        if wanted is False:
            return self._answer(416, b"", {"Content-Range": f"bytes */{size}"})
        with open(path, "rb") as f:
            if wanted is None:
                self.stats.whole_gets += 1
                return self._answer(200, f.read(), headers)
            start, stop = wanted
            f.seek(start)
            body = f.read(stop - start)
        return self._answer(206, body, {**headers, "Content-Range": f"bytes {start}-{stop - 1}/{size}"})


def _http_date(timestamp: float) -> str:
    from email.utils import formatdate

    return formatdate(timestamp, usegmt=True)


__all__ = ["FileServer", "ServerStats"]
