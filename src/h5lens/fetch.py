"""Byte-range reads from the sources a manifest points at (local files or fsspec URLs).

Remote reads go through a :class:`ChunkFetcher`: requests for chunks issued in the
same event-loop turn are merged into one request where they sit close together in
the file (chunks of one array usually do), sequential reads of an array read ahead
with a window that doubles on each sequential hit (so a slice never fetches more
than about twice what it asked for), and failed requests are retried with backoff.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from h5lens.errors import SourceNotFoundError, SourceReadError

MAX_GAP = 1 << 20  # merge ranges less than this apart: a request costs more than 1 MiB of transfer
MAX_SPAN = 32 << 20  # but never into one request larger than this
MAX_READAHEAD_CHUNKS = 4096  # the window is bounded by MAX_SPAN bytes long before this
READAHEAD_CACHE_BYTES = 256 << 20
# fsspec backends (s3fs, botocore) retry throttling and 5xx themselves; these retries
# cover what they give up on, and connection resets between them.
RETRIES = 2
RETRY_BASE_SECONDS = 0.2


def is_remote_url(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def resolve_url(url: str, location: str | None) -> str:
    """Resolve a source URL written relative to the manifest at ``location``."""
    if "://" in url or os.path.isabs(url) or location is None:
        return url
    if is_remote_url(location):
        scheme, rest = location.split("://", 1)
        return f"{scheme}://" + posixpath.normpath(posixpath.join(posixpath.dirname(rest), url))
    base = os.path.dirname(location.removeprefix("file://"))
    return os.path.normpath(os.path.join(base, url))


class LocalReader:
    """``os.pread`` on a file descriptor opened on first use (so readers pickle)."""

    def __init__(self, path: str) -> None:
        self.path = path.removeprefix("file://")
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceNotFoundError(f"{self.path}: source file not found") from None
        return self._fd

    def read_sync(self, offset: int, length: int) -> bytes:
        data = os.pread(self._open(), length, offset)
        if len(data) != length:
            raise SourceReadError(
                f"{self.path}: short read of bytes {offset}-{offset + length} ({len(data)} of {length}); "
                "the source is truncated or changed"
            )
        return data

    async def read(self, offset: int, length: int) -> bytes:
        # A page-cache read of one chunk takes microseconds; a thread hop costs more than it.
        return self.read_sync(offset, length)

    def stat(self) -> dict[str, Any]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{self.path}: source file not found") from None
        return {"size": st.st_size, "mtime": st.st_mtime}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_fd": None}


class FsspecReader:
    """Ranged reads through an async fsspec filesystem (s3, http, gcs ...), retried with backoff."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self._fs = None
        self._path: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _sync_filesystem(self):
        import fsspec

        return fsspec.core.url_to_fs(self.url, **self.storage_options)

    async def _filesystem(self):
        # An async filesystem's session belongs to the event loop that made it.
        loop = asyncio.get_running_loop()
        if self._fs is None or self._loop is not loop:
            import fsspec

            cls = fsspec.get_filesystem_class(self.url.split("://", 1)[0])
            if getattr(cls, "async_impl", False):
                options = {**self.storage_options, "asynchronous": True, "skip_instance_cache": True}
                self._fs, self._path = fsspec.core.url_to_fs(self.url, **options)
                if hasattr(self._fs, "set_session"):
                    await self._fs.set_session()
                _track_session(self._fs, loop)
            else:
                self._fs, self._path = self._sync_filesystem()
            self._loop = loop
        return self._fs, self._path

    async def read(self, offset: int, length: int) -> bytes:
        fs, path = await self._filesystem()
        error: BaseException | None = None
        for attempt in range(RETRIES + 1):
            try:
                if getattr(fs, "asynchronous", False):
                    data = await fs._cat_file(path, start=offset, end=offset + length)
                else:
                    data = await asyncio.to_thread(fs.cat_file, path, start=offset, end=offset + length)
            except FileNotFoundError:
                raise SourceNotFoundError(f"{self.url}: source not found") from None
            except (OSError, asyncio.TimeoutError, ConnectionError) as e:
                error = e
            except Exception as e:  # aiohttp / botocore errors that are not OSErrors
                if not _transient(e):
                    raise SourceReadError(f"{self.url}: reading bytes {offset}-{offset + length} failed ({e})") from e
                error = e
            else:
                if len(data) == length:
                    return data
                error = SourceReadError(f"short read ({len(data)} of {length} bytes)")
            if attempt < RETRIES:
                await asyncio.sleep(RETRY_BASE_SECONDS * 2**attempt)
        raise SourceReadError(
            f"{self.url}: reading bytes {offset}-{offset + length} failed after {RETRIES + 1} attempts ({error})"
        ) from error

    def stat(self) -> dict[str, Any]:
        fs, path = self._sync_filesystem()
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{self.url}: source not found") from None
        etag = info.get("ETag") or info.get("etag")
        return {"size": info.get("size"), "etag": etag.strip('"') if isinstance(etag, str) else etag}

    def close(self) -> None:
        self._fs = None
        self._loop = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options, "_fs": None, "_path": None, "_loop": None}


_SESSIONS: list[tuple[Any, asyncio.AbstractEventLoop]] = []
_FETCHES: set[asyncio.Task[None]] = set()  # read-ahead still in flight (cancelled at exit)


def _spawn(coro: Any) -> None:
    task = asyncio.ensure_future(coro)
    _FETCHES.add(task)
    task.add_done_callback(_FETCHES.discard)
    _cleanup_at_exit()


def _track_session(fs: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Remember an async filesystem's HTTP session so it is closed before the interpreter exits
    (its event loop, zarr's, is gone by the time the garbage collector would)."""
    _cleanup_at_exit()
    _SESSIONS.append((fs, loop))


_EXIT_HOOK: list[bool] = []


def _cleanup_at_exit() -> None:
    if not _EXIT_HOOK:
        import atexit

        atexit.register(_close_sessions)
        _EXIT_HOOK.append(True)


def _close_sessions() -> None:
    for task in list(_FETCHES):  # read-ahead nobody will claim: stop it quietly
        loop = task.get_loop()
        if not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
    for fs, loop in _SESSIONS:
        client = getattr(fs, "_s3", None)
        if client is None or loop.is_closed() or not loop.is_running():
            continue
        try:
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=2)
        except Exception:  # closing is best effort at exit
            pass
    _SESSIONS.clear()


def _transient(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}"
    return any(
        marker in text
        for marker in ("SlowDown", "503", "500", "502", "504", "Throttl", "ServerDisconnected", "Connection", "Timeout")
    )


def make_reader(url: str, storage_options: dict[str, Any] | None = None) -> LocalReader | FsspecReader:
    if not is_remote_url(url):
        return LocalReader(url)
    return FsspecReader(url, storage_options)


@dataclass
class _Pending:
    offset: int
    length: int
    future: asyncio.Future[bytes]


class ChunkFetcher:
    """Merges and reads ahead the chunk reads of one remote source (see the module docstring)."""

    def __init__(self, reader: FsspecReader | LocalReader, *, on_request=None) -> None:
        self.reader = reader
        self.on_request = on_request  # called with (nbytes) for each request sent
        self._inflight: OrderedDict[int, asyncio.Future[bytes]] = OrderedDict()
        self._pending: list[_Pending] = []
        self._flush_scheduled = False
        self._cached_bytes = 0

    async def read(self, offset: int, length: int, ahead: list[tuple[int, int]] = ()) -> bytes:
        """The bytes of one chunk; ``ahead`` are chunks to fetch along with it if not yet asked for."""
        future = self._inflight.get(offset)
        if future is None or (future.done() and (future.exception() is not None or len(future.result()) != length)):
            future = self._claim(offset, self._enqueue(offset, length))
        for other_offset, other_length in ahead:
            if other_offset not in self._inflight:
                self._claim(other_offset, self._enqueue(other_offset, other_length))
        self._evict()
        try:
            return await future
        finally:
            if self._inflight.get(offset) is future:  # consumed: chunks are rarely read twice
                del self._inflight[offset]
                self._forget(future)

    async def read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Many chunks at once (a whole array): one batch of merged requests, no read-ahead."""
        futures = []
        for offset, length in ranges:
            future = self._inflight.pop(offset, None)  # prefetched already?
            if future is not None:
                self._forget(future)
            if future is None or (future.done() and (future.exception() is not None or len(future.result()) != length)):
                future = self._enqueue(offset, length)
            futures.append(future)
        return list(await asyncio.gather(*futures))

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Start fetching these chunks now (merged); later reads of them wait on these requests."""
        for offset, length in ranges:
            if offset not in self._inflight:
                self._claim(offset, self._enqueue(offset, length))

    def _claim(self, offset: int, future: asyncio.Future[bytes]) -> asyncio.Future[bytes]:
        previous = self._inflight.pop(offset, None)
        if previous is not None:
            self._forget(previous)
        self._inflight[offset] = future
        return future

    def _forget(self, future: asyncio.Future[bytes]) -> None:
        if future.done() and future.exception() is None and getattr(future, "_h5lens_cached", False):
            self._cached_bytes -= len(future.result())
            future._h5lens_cached = False  # type: ignore[attr-defined]

    def _enqueue(self, offset: int, length: int) -> asyncio.Future[bytes]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        self._pending.append(_Pending(offset, length, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)  # everything requested in this turn goes out together
        return future

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = sorted(self._pending, key=lambda p: p.offset), []
        group: list[_Pending] = []
        start = end = 0
        for item in pending:
            item_end = item.offset + item.length
            if group and (item.offset - end > MAX_GAP or max(end, item_end) - start > MAX_SPAN):
                _spawn(self._fetch(group))
                group = []
            if not group:
                start, end = item.offset, item_end
            group.append(item)
            end = max(end, item_end)
        if group:
            _spawn(self._fetch(group))

    async def _fetch(self, group: list[_Pending]) -> None:
        start = group[0].offset
        end = max(p.offset + p.length for p in group)
        if self.on_request is not None:
            self.on_request(end - start)
        try:
            data = memoryview(await self.reader.read(start, end - start))
        except BaseException as e:
            for item in group:
                if not item.future.done():
                    item.future.set_exception(e)
                    item.future.exception()  # read-ahead nobody claims must not warn
            return
        for item in group:
            if not item.future.done():
                chunk = bytes(data[item.offset - start : item.offset - start + item.length])
                item.future.set_result(chunk)
                if self._inflight.get(item.offset) is item.future:
                    item.future._h5lens_cached = True  # type: ignore[attr-defined]
                    self._cached_bytes += len(chunk)

    def _evict(self) -> None:
        while self._cached_bytes > READAHEAD_CACHE_BYTES and self._inflight:
            _, future = self._inflight.popitem(last=False)
            self._forget(future)
