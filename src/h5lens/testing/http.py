"""A local HTTP file server for tests: the files of one directory on 127.0.0.1, answering
``Range`` requests as public archives do (206 and Content-Range, ETag, Last-Modified), or,
with ``ranges=False``, ignoring ``Range`` and answering 200 with the whole file as some
servers do. It counts requests and body bytes.

:class:`ArchiveServer` plays a data archive's asset API (the DANDI archive's, say): an
asset's URL asks for a bearer token and answers with a redirect (302) to a signed object
URL that expires after a few seconds, and is refused (403) after that, as S3 refuses a
presigned URL that expired.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from h5lens.testing.s3 import LoopServer, free_port, parse_range

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
        return self._file(request, request.match_info["tail"])

    def _file(self, request: web.Request, name: str) -> web.Response:
        """The file ``name`` of the directory, as a static file server answers it."""
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


@dataclass
class ArchiveStats:
    """What an :class:`ArchiveServer` was asked: asset URLs (each answered with a redirect,
    or refused without the token), object reads, and object reads refused (expired)."""

    asset_requests: int = 0
    redirects: int = 0
    unauthorised: int = 0
    object_requests: int = 0
    expired: int = 0

    def reset(self) -> None:
        self.asset_requests = self.redirects = self.unauthorised = self.object_requests = self.expired = 0


class ArchiveServer(FileServer):
    """``with ArchiveServer(directory, token="t", lifetime=3) as archive: archive.url("x.h5")``:
    ``/assets/NAME`` asks for ``Authorization: Bearer TOKEN`` (401 without it) and redirects
    (302) to ``/objects/NAME?…`` on another port (another origin, as an object store is)
    signed for ``lifetime`` seconds; an object URL whose
    signature is wrong or expired is refused (403), and so is one that carries an
    ``Authorization`` header too (400, as S3 refuses two ways of authorising). With
    ``dated=False`` the signature's expiry is not in the query in a form anyone knows (a
    reader learns it only from the 403)."""

    thread_name = "h5lens-archive-server"

    def __init__(
        self, directory: str | os.PathLike[str], *, token: str, lifetime: float = 3.0, dated: bool = True
    ) -> None:
        import secrets

        self.token = token
        self.lifetime = lifetime
        self.dated = dated
        self._key = secrets.token_bytes(16)
        self.archive = ArchiveStats()
        self.signed_urls: list[str] = []  # every signed URL handed out (a test searches outputs for them)
        super().__init__(directory)
        # the objects are served on a port of their own: another origin, as an archive's
        # object store is (the archive's token must not travel there)
        self.object_port = free_port()

    async def _start(self) -> None:
        from aiohttp import web

        await super()._start()
        assert self._runner is not None
        await web.TCPSite(self._runner, "127.0.0.1", self.object_port).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/assets/{name}"

    def _signature(self, name: str, until: str) -> str:
        import hashlib
        import hmac

        return hmac.new(self._key, f"{name}\n{until}".encode(), hashlib.sha256).hexdigest()

    def _signed(self, name: str) -> str:
        import time

        now = time.time()
        if self.dated:  # as S3's SigV4: signed at X-Amz-Date, valid X-Amz-Expires seconds
            signed_at = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
            expires = str(max(1, round(self.lifetime)))
            until = str(int(now) + int(expires))
            query = f"X-Amz-Date={signed_at}&X-Amz-Expires={expires}&X-Amz-Signature={self._signature(name, until)}"
        else:
            until = f"{now + self.lifetime:.3f}"
            query = f"token-until={until}&sig={self._signature(name, until)}"
        url = f"http://127.0.0.1:{self.object_port}/objects/{name}?{query}"
        self.signed_urls.append(url)
        return url

    def _until(self, request: web.Request) -> float | None:
        """When the object URL's signature expires, or None if it is not one of ours."""
        import calendar
        import hmac
        import time

        name = request.match_info["tail"].removeprefix("objects/")
        query = request.query
        if self.dated:
            try:
                signed_at = calendar.timegm(time.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
                until = str(signed_at + int(query["X-Amz-Expires"]))
            except (KeyError, ValueError):
                return None
            given = query.get("X-Amz-Signature", "")
        else:
            until, given = query.get("token-until", ""), query.get("sig", "")
        if not hmac.compare_digest(given, self._signature(name, until)):
            return None
        return float(until)

    async def _handle(self, request: web.Request) -> web.Response:
        import time

        self.stats.requests += 1
        tail = request.match_info["tail"]
        if tail.startswith("assets/"):
            self.archive.asset_requests += 1
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                self.archive.unauthorised += 1
                return self._answer(401, b"a bearer token is needed")
            self.archive.redirects += 1
            return self._answer(302, b"", {"Location": self._signed(tail.removeprefix("assets/"))})
        if tail.startswith("objects/"):
            self.archive.object_requests += 1
            if "Authorization" in request.headers:
                return self._answer(
                    400,
                    b"<Error><Code>InvalidArgument</Code><Message>Only one auth mechanism allowed</Message></Error>",
                )
            until = self._until(request)
            if until is None or time.time() >= until:
                self.archive.expired += until is not None
                return self._answer(
                    403, b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
                )
            return self._file(request, tail.removeprefix("objects/"))
        return self._answer(404, b"not found")


def _http_date(timestamp: float) -> str:
    from email.utils import formatdate

    return formatdate(timestamp, usegmt=True)


__all__ = ["ArchiveServer", "ArchiveStats", "FileServer", "ServerStats"]
