"""Byte-range reads from the sources a manifest points at (local files or fsspec URLs).

Remote reads go through a :class:`ChunkFetcher`: requests for chunks issued in the
same event-loop turn are merged into one request where they sit close together in
the file (chunks of one array usually do), sequential reads of an array read ahead
with a window that doubles on each sequential hit (so a slice never fetches more
than about twice what it asked for), and failed requests are retried with backoff.
"""

from __future__ import annotations

import asyncio
import atexit
import bisect
import os
import weakref
import posixpath
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.backend_errors import anon_requested, http_status, is_transient, storage_error
from h5lens.errors import SourceNotFoundError, SourceReadError, StorageError

MAX_GAP = 1 << 20  # merge ranges less than this apart: a request costs more than 1 MiB of transfer
MAX_SPAN = 32 << 20  # but never into one request larger than this
MAX_READAHEAD_CHUNKS = 4096  # the window is bounded by MAX_SPAN bytes long before this
READAHEAD_CACHE_BYTES = 256 << 20
SPENT_CACHE_BYTES = 4 << 20  # blocks already read, kept for reads of the same bytes soon after
# fsspec backends (s3fs, botocore) retry throttling and 5xx themselves; these retries
# cover what they give up on, and connection resets between them (decided by exception
# type and HTTP status: backend_errors.is_transient).
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


class _Tasks:
    """Background reads (read-ahead, prefetch) a reader owns: cancelled when it closes,
    so nothing is left pending when the event loop or the interpreter ends."""

    def _init_tasks(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        _LIVE.add(self)

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            loop = task.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        self._tasks.clear()


class LocalReader(_Tasks):
    """``os.pread`` on a file descriptor opened on first use (so readers pickle)."""

    def __init__(self, path: str) -> None:
        self.path = path.removeprefix("file://")
        self._fd: int | None = None
        self._init_tasks()

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceNotFoundError(f"{self.path}: source file not found") from None
            except OSError as e:
                raise storage_error(e, self.path, "opening") from None
        return self._fd

    def read_sync(self, offset: int, length: int) -> bytes:
        fd = self._open()
        try:
            data = os.pread(fd, length, offset)
        except OSError as e:
            raise SourceReadError(f"{self.path}: reading bytes {offset}-{offset + length} failed ({e.strerror})") from None
        if len(data) != length:
            size = os.fstat(fd).st_size
            raise SourceReadError(
                f"{self.path}: bytes {offset}-{offset + length} end past the end of the file ({size} bytes): "
                "the manifest's reference does not fit this file"
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
        except OSError as e:
            raise storage_error(e, self.path, "checking") from None
        return {"size": st.st_size, "mtime": st.st_mtime}

    def close(self) -> None:
        self._cancel_tasks()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_fd": None, "_tasks": set()}


class FsspecReader(_Tasks):
    """Ranged reads through an async fsspec filesystem (s3, http, gcs ...), retried with
    backoff when the failure is transient (by exception type and HTTP status). The reader
    owns its filesystem and HTTP session, and closes them in :meth:`close`."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self._fs: Any = None
        self._path: str | None = None
        self._client: Any = None  # the HTTP session set_session made: ours to close
        self._loop: asyncio.AbstractEventLoop | None = None
        self._init_tasks()

    def _sync_filesystem(self) -> tuple[Any, str]:
        import fsspec

        try:
            return fsspec.core.url_to_fs(self.url, **self.storage_options)
        except Exception as e:  # noqa: BLE001 - a missing backend, an unknown protocol
            raise storage_error(e, self.url, "opening") from e

    async def _filesystem(self) -> tuple[Any, str]:
        # An async filesystem's session belongs to the event loop that made it.
        loop = asyncio.get_running_loop()
        if self._fs is None or self._loop is not loop:
            import fsspec

            try:
                cls = fsspec.get_filesystem_class(self.url.split("://", 1)[0])
                if getattr(cls, "async_impl", False):
                    options = {**self.storage_options, "asynchronous": True, "skip_instance_cache": True}
                    self._fs, self._path = fsspec.core.url_to_fs(self.url, **options)
                    if hasattr(self._fs, "set_session"):
                        self._client = await self._fs.set_session()
                else:
                    self._fs, self._path = self._sync_filesystem()
            except Exception as e:  # noqa: BLE001
                raise storage_error(e, self.url, "opening", anon=anon_requested(self.storage_options)) from e
            self._loop = loop
            _LIVE.add(self)
        return self._fs, self._path

    async def read(self, offset: int, length: int) -> bytes:
        fs, path = await self._filesystem()
        for attempt in range(RETRIES + 1):
            try:
                if getattr(fs, "asynchronous", False):
                    data = await fs._cat_file(path, start=offset, end=offset + length)
                else:
                    data = await asyncio.to_thread(fs.cat_file, path, start=offset, end=offset + length)
            except Exception as e:  # noqa: BLE001 - classified by type and status, below
                if attempt < RETRIES and is_transient(e):
                    await asyncio.sleep(RETRY_BASE_SECONDS * 2**attempt)
                    continue
                raise self._read_error(e, offset, length, attempt + 1) from e
            if len(data) != length:  # the object is shorter than the reference: no retry helps
                raise SourceReadError(
                    f"{self.url}: bytes {offset}-{offset + length} end past the end of the object "
                    f"({len(data)} of {length} bytes came back): the manifest's reference does not fit this source"
                )
            return data
        raise AssertionError("unreachable")

    def _read_error(self, error: BaseException, offset: int, length: int, attempts: int) -> Exception:
        where = f"bytes {offset}-{offset + length}"
        if http_status(error) == 416:
            return SourceReadError(
                f"{self.url}: {where} lie past the end of the object (HTTP 416): "
                "the manifest's reference does not fit this source"
            )
        found = storage_error(error, self.url, f"reading {where} of", anon=anon_requested(self.storage_options))
        if type(found) is StorageError:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            return SourceReadError(f"{found}{tries}")
        return found

    def stat(self) -> dict[str, Any]:
        fs, path = self._sync_filesystem()
        try:
            info = fs.info(path)
        except Exception as e:  # noqa: BLE001
            raise storage_error(e, self.url, "checking", anon=anon_requested(self.storage_options)) from e
        etag = info.get("ETag") or info.get("etag")
        return {"size": info.get("size"), "etag": etag.strip('"') if isinstance(etag, str) else etag}

    def close(self, *, wait: bool = True) -> None:
        """Cancel read-ahead still in flight and close the HTTP session, on its own loop
        (waiting for it unless ``wait`` is false or this runs on that loop)."""
        self._cancel_tasks()
        client, loop = self._client, self._loop
        self._fs = self._client = self._loop = None
        _LIVE.discard(self)
        closer = getattr(client, "close", None)
        if closer is None or loop is None or loop.is_closed() or not loop.is_running():
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        future = asyncio.run_coroutine_threadsafe(closer(), loop)
        if wait and not on_loop:
            try:
                future.result(timeout=2)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def __del__(self) -> None:
        # A reader dropped without close(): its session still belongs to a live loop.
        try:
            self.close(wait=False)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "storage_options": self.storage_options,
            "_fs": None,
            "_path": None,
            "_client": None,
            "_loop": None,
            "_tasks": set(),
        }


# Readers with a session or tasks: closed at exit, while zarr's event loop still runs
# (by the time the garbage collector would get to them, the loop is gone). Weak: a
# reader closed or collected leaves it.
_LIVE: weakref.WeakSet[_Tasks] = weakref.WeakSet()


@atexit.register
def _close_live_readers() -> None:
    for reader in list(_LIVE):
        try:
            reader.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def make_reader(url: str, storage_options: dict[str, Any] | None = None) -> LocalReader | FsspecReader:
    if not is_remote_url(url):
        return LocalReader(url)
    return FsspecReader(url, storage_options)


class _Block:
    """One merged request's bytes: [start, end) of a source, fetched once and sliced by many reads."""

    __slots__ = ("start", "end", "future", "unclaimed")

    def __init__(self, start: int, end: int, future: asyncio.Future[memoryview], unclaimed: int) -> None:
        self.start = start
        self.end = end
        self.future = future
        self.unclaimed = unclaimed  # bytes fetched for reads still to come (read-ahead, prefetch)


@dataclass
class _Pending:
    offset: int
    length: int
    waiter: asyncio.Future[_Block] | None  # a read waiting for its block; None for read-ahead


class ChunkFetcher:
    """Merges and reads ahead the chunk reads of one remote source (see the module docstring).

    Fetched bytes are kept per request ("block"), not per chunk: a block stays until the
    chunks fetched into it ahead of time have been read (or the cache needs the room),
    so a prefetch of a whole file costs a few objects, not one per chunk. Blocks read in
    full stay a little longer (SPENT_CACHE_BYTES in all): the row blocks of a lazy slice
    share their boundary chunks.
    """

    def __init__(self, reader: FsspecReader | LocalReader, *, on_request=None) -> None:
        self.reader = reader
        self.on_request = on_request  # called with (nbytes) for each request sent
        self._starts: list[int] = []  # sorted block starts
        self._blocks: list[_Block] = []  # aligned with _starts
        self._age: OrderedDict[int, _Block] = OrderedDict()  # id -> block, oldest first
        self._cached_bytes = 0
        self._spent: OrderedDict[int, _Block] = OrderedDict()  # fully read blocks, oldest first
        self._spent_bytes = 0
        self._pending: list[_Pending] = []
        self._pending_offsets: set[int] = set()
        self._flush_scheduled = False

    # -- reads ------------------------------------------------------------------
    async def read(self, offset: int, length: int, ahead: list[tuple[int, int]] = ()) -> bytes:
        """The bytes of one chunk; ``ahead`` are chunks to fetch along with it if not yet asked for."""
        block = self._find(offset, length)
        if block is None:
            waiter: asyncio.Future[_Block] = asyncio.get_running_loop().create_future()
            self._enqueue(_Pending(offset, length, waiter))
        for other_offset, other_length in ahead:
            if other_offset not in self._pending_offsets and self._find(other_offset, other_length) is None:
                self._enqueue(_Pending(other_offset, other_length, None))
        if block is None:
            block = await waiter
            data = await block.future
        else:
            data = await block.future
            self._claim(block, length)
        return bytes(data[offset - block.start : offset - block.start + length])

    async def read_ranges(self, offsets: np.ndarray, lengths: np.ndarray) -> list[memoryview]:
        """Many chunks at once (a whole array): blocks already fetched or in flight are
        used, the rest is fetched as one batch of merged requests, no read-ahead."""
        blocks, which = self._cover(offsets, lengths, claimed=True)
        datas = await asyncio.gather(*(b.future for b in blocks))
        begins = (offsets - np.asarray([b.start for b in blocks], dtype=np.int64)[which]).tolist()
        return [
            datas[w][begin : begin + length]
            for w, begin, length in zip(which.tolist(), begins, lengths.tolist(), strict=True)
        ]

    def prefetch(self, offsets: np.ndarray, lengths: np.ndarray) -> None:
        """Start fetching these chunks now (merged); later reads of them use these requests."""
        if len(offsets):
            self._cover(np.asarray(offsets, dtype=np.int64), np.asarray(lengths, dtype=np.int64), claimed=False)

    # -- blocks -----------------------------------------------------------------
    def _find(self, offset: int, length: int) -> _Block | None:
        # Blocks rarely overlap (a merged request may span an older one): look a few back.
        i = bisect.bisect_right(self._starts, offset) - 1
        for j in range(i, max(i - 4, -1), -1):
            block = self._blocks[j]
            if block.end >= offset + length and not _failed(block):
                return block
        return None

    def _cover(self, offsets: np.ndarray, lengths: np.ndarray, *, claimed: bool) -> tuple[list[_Block], np.ndarray]:
        """The blocks holding the ranges (``blocks[which[i]]`` holds range i), starting
        merged fetches for ranges no block holds. Ranges found in blocks fetched ahead are
        claimed from them when ``claimed``."""
        blocks: list[_Block] = []
        which = np.full(len(offsets), -1, dtype=np.int64)
        if self._blocks:
            starts = np.asarray(self._starts, dtype=np.int64)
            ends = np.asarray([b.end for b in self._blocks], dtype=np.int64)
            usable = np.asarray([not _failed(b) for b in self._blocks], dtype=bool)
            candidate = np.searchsorted(starts, offsets, side="right") - 1
            safe = np.maximum(candidate, 0)
            inside = (candidate >= 0) & (ends[safe] >= offsets + lengths) & usable[safe]
            used, local = np.unique(candidate[inside], return_inverse=True)
            blocks = [self._blocks[i] for i in used.tolist()]
            which[inside] = local
            if claimed:  # after the lookups: claiming may drop blocks and shift positions
                for block, nbytes in zip(blocks, np.bincount(local, weights=lengths[inside]).tolist(), strict=True):
                    self._claim(block, int(nbytes))
        missing = np.flatnonzero(which < 0)
        if missing.size:
            order = missing[np.argsort(offsets[missing], kind="stable")]
            sorted_offsets, sorted_lengths = offsets[order], lengths[order]
            for lo, hi in merge_plan(sorted_offsets, sorted_lengths):
                start = int(sorted_offsets[lo])
                end = int((sorted_offsets[lo:hi] + sorted_lengths[lo:hi]).max())
                unclaimed = 0 if claimed else int(sorted_lengths[lo:hi].sum())
                which[order[lo:hi]] = len(blocks)
                blocks.append(self._new_block(start, end, unclaimed))
        return blocks, which

    def _new_block(self, start: int, end: int, unclaimed: int) -> _Block:
        future: asyncio.Future[memoryview] = asyncio.get_running_loop().create_future()
        block = _Block(start, end, future, unclaimed)
        # Registered while in flight too: a concurrent read of the same bytes waits on it.
        i = bisect.bisect_right(self._starts, start)
        self._starts.insert(i, start)
        self._blocks.insert(i, block)
        self._age[id(block)] = block
        self._cached_bytes += end - start
        if unclaimed <= 0:
            self._spend(block)
        self._evict()
        self.reader.spawn(self._fetch(block))
        return block

    def _claim(self, block: _Block, length: int) -> None:
        block.unclaimed -= length
        if block.unclaimed <= 0:
            self._spend(block)

    def _spend(self, block: _Block) -> None:
        """Every byte fetched ahead into ``block`` has been read. Keep it a little longer
        (neighbouring slices share boundary chunks) within SPENT_CACHE_BYTES."""
        if id(block) in self._spent or id(block) not in self._age:
            return
        self._spent[id(block)] = block
        self._spent_bytes += block.end - block.start
        while self._spent_bytes > SPENT_CACHE_BYTES and self._spent:
            self._drop(next(iter(self._spent.values())))

    def _drop(self, block: _Block) -> None:
        if self._age.pop(id(block), None) is None:
            return
        if self._spent.pop(id(block), None) is not None:
            self._spent_bytes -= block.end - block.start
        i = bisect.bisect_left(self._starts, block.start)
        while self._blocks[i] is not block:
            i += 1
        del self._starts[i]
        del self._blocks[i]
        self._cached_bytes -= block.end - block.start

    def _evict(self) -> None:
        while self._cached_bytes > READAHEAD_CACHE_BYTES and len(self._age) > 1:
            self._drop(next(iter(self._age.values())))

    @property
    def unclaimed_bytes(self) -> int:
        """Bytes fetched ahead that no read has asked for yet."""
        return sum(max(0, b.unclaimed) for b in self._blocks)

    # -- merging reads issued in the same event-loop turn ---------------------------
    def _enqueue(self, item: _Pending) -> None:
        self._pending.append(item)
        self._pending_offsets.add(item.offset)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)  # this turn's reads go out together

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = sorted(self._pending, key=lambda p: p.offset), []
        self._pending_offsets.clear()
        offsets = np.asarray([p.offset for p in pending], dtype=np.int64)
        lengths = np.asarray([p.length for p in pending], dtype=np.int64)
        for lo, hi in merge_plan(offsets, lengths):
            items = pending[lo:hi]
            end = int((offsets[lo:hi] + lengths[lo:hi]).max())
            block = self._new_block(items[0].offset, end, sum(p.length for p in items if p.waiter is None))
            for item in items:
                if item.waiter is not None and not item.waiter.done():
                    item.waiter.set_result(block)

    async def _fetch(self, block: _Block) -> None:
        if self.on_request is not None:
            self.on_request(block.end - block.start)
        try:
            data = memoryview(await self.reader.read(block.start, block.end - block.start))
        except BaseException as e:
            self._drop(block)  # a later read tries again
            if not block.future.done():
                block.future.set_exception(e)
                block.future.exception()  # read-ahead nobody claims must not warn
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        if not block.future.done():
            block.future.set_result(data)


def _failed(block: _Block) -> bool:
    return block.future.done() and (block.future.cancelled() or block.future.exception() is not None)


def merge_plan(offsets: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
    """``[lo, hi)`` runs of offset-sorted ranges to fetch as one request each: a range joins
    the request before it when it starts within MAX_GAP of its end and the request stays
    within MAX_SPAN bytes."""
    if not len(offsets):
        return []
    reach = np.maximum.accumulate(offsets + lengths)
    breaks = (np.flatnonzero(offsets[1:] - reach[:-1] > MAX_GAP) + 1).tolist()
    plan: list[tuple[int, int]] = []
    for lo, hi in zip([0, *breaks], [*breaks, len(offsets)], strict=True):
        while lo < hi:  # split runs longer than MAX_SPAN
            cut = lo + int(np.searchsorted(reach[lo:hi], int(offsets[lo]) + MAX_SPAN, side="right"))
            cut = max(cut, lo + 1)
            plan.append((lo, cut))
            lo = cut
    return plan
