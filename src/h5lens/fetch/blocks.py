"""The one batcher of h5lens: merged, read-ahead fetching of one remote source.

Requests issued in the same event-loop turn are merged where they sit close together in
the file (by a :class:`~h5lens.fetch.planner.Planner`), and fetched bytes are kept per
request ("block"). Two retention rules, one per kind of reader:

* a store's chunk reads (``keep="read-ahead"``): a block stays until the chunks fetched
  into it ahead of time have been read, within a bounded cache;
* a scan's reads of index nodes and object headers (``keep="all"``): everything fetched
  stays until the fetcher is dropped, so a range read twice (an object header read again
  whole after a first guess) costs nothing the second time, and
  :meth:`ChunkFetcher.read_together` answers every caller of a turn when the whole turn's
  batch has arrived: the walks of every dataset of a file advance level by level in
  lockstep, and a scan costs about as many round trips as its deepest index has levels.
"""

from __future__ import annotations

import asyncio
import bisect
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from h5lens.fetch.cost import BandwidthMeter
from h5lens.fetch.planner import READS, Planner, union_bytes
from h5lens.fetch.protocol import ByteReader

READAHEAD_CACHE_BYTES = 256 << 20
SPENT_CACHE_BYTES = 4 << 20  # blocks already read, kept for reads of the same bytes soon after


class _Block:
    """One merged request's bytes: [start, end) of a source, fetched once and sliced by many reads."""

    __slots__ = ("start", "end", "future", "unclaimed", "turn")

    def __init__(self, start: int, end: int, future: asyncio.Future[memoryview], unclaimed: int) -> None:
        self.start = start
        self.end = end
        self.future = future
        self.unclaimed = unclaimed  # bytes fetched for reads still to come (read-ahead, prefetch)
        self.turn: asyncio.Future[None] | None = None  # done when every block of its turn's batch is


@dataclass
class BatchStats:
    batches: int = 0  # round trips: turns of read_together whose requests went out together
    requests: int = 0  # requests sent (GETs; a request split into parallel parts counts once)
    bytes: int = 0  # bytes fetched
    asked: int = 0  # bytes the callers asked for (overlaps within a turn counted once)


@dataclass
class _Pending:
    offset: int
    length: int
    waiter: asyncio.Future[_Block] | None  # a read waiting for its block; None for read-ahead
    together: bool = False  # asked by read_together: answered when the whole turn has arrived


class ChunkFetcher:
    """Merges and reads ahead the chunk reads of one remote source (see the module docstring).

    Fetched bytes are kept per request ("block"), not per chunk: a block stays until the
    chunks fetched into it ahead of time have been read (or the cache needs the room),
    so a prefetch of a whole file costs a few objects, not one per chunk. Blocks read in
    full stay a little longer (SPENT_CACHE_BYTES in all): the row blocks of a lazy slice
    share their boundary chunks.
    """

    def __init__(
        self,
        client: ByteReader,
        *,
        on_request: Callable[[int], None] | None = None,
        planner: Planner = READS,
        keep: Literal["read-ahead", "all"] = "read-ahead",
        cached: Callable[[int, int], bytes | None] | None = None,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self.client = client
        self.planner = planner
        self.keep = keep
        self.on_request = on_request  # called with (nbytes) for each request sent
        self.cached = cached  # bytes someone else fetched already (a scan: libhdf5's block cache)
        self.on_batch = on_batch  # called when a turn's batch has arrived
        self.stats = BatchStats()
        self.meter = BandwidthMeter(planner.costs)  # the bandwidth in all these requests find
        self._tasks: set[asyncio.Task[None]] = set()
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
        self._batch_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
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
    async def read(self, offset: int, length: int, ahead: Sequence[tuple[int, int]] = ()) -> bytes:
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

    async def read_ranges(
        self, offsets: np.ndarray, lengths: np.ndarray, planner: Planner | None = None
    ) -> list[memoryview]:
        """Many chunks at once (a whole array): blocks already fetched or in flight are
        used, the rest is fetched as one batch of requests merged by ``planner`` (the
        fetcher's own by default), no read-ahead."""
        blocks, which = self._cover(offsets, lengths, claimed=True, planner=planner)
        datas = await asyncio.gather(*(b.future for b in blocks))
        begins = (offsets - np.asarray([b.start for b in blocks], dtype=np.int64)[which]).tolist()
        return [
            datas[w][begin : begin + length]
            for w, begin, length in zip(which.tolist(), begins, lengths.tolist(), strict=True)
        ]

    async def read_together(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, length)``, fetched with every range asked for in
        this event-loop turn; the caller resumes when the whole turn's batch has arrived
        (see the module docstring)."""
        ranges = [(int(o), int(n)) for o, n in ranges]
        found: list[bytes | _Block | asyncio.Future[_Block]] = []
        for offset, length in ranges:
            block = self._find(offset, length)
            known = self.cached(offset, length) if block is None and self.cached is not None else None
            if block is not None:
                found.append(block)
            elif known is not None:
                found.append(known)
            else:
                waiter: asyncio.Future[_Block] = asyncio.get_running_loop().create_future()
                self._enqueue(_Pending(offset, length, waiter, together=True))
                found.append(waiter)
        blocks = [await f if isinstance(f, asyncio.Future) else f for f in found]
        for turn in {id(b.turn): b.turn for b in blocks if isinstance(b, _Block) and b.turn is not None}.values():
            await turn
        out = []
        for (offset, length), held in zip(ranges, blocks, strict=True):
            if isinstance(held, bytes):
                out.append(held)
            else:
                data = await held.future
                out.append(bytes(data[offset - held.start : offset - held.start + length]))
        return out

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

    def _cover(
        self, offsets: np.ndarray, lengths: np.ndarray, *, claimed: bool, planner: Planner | None = None
    ) -> tuple[list[_Block], np.ndarray]:
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
            new: list[_Block] = []
            for lo, hi in (planner or self.planner).runs(sorted_offsets, sorted_lengths, self.meter.measured):
                start = int(sorted_offsets[lo])
                end = int((sorted_offsets[lo:hi] + sorted_lengths[lo:hi]).max())
                unclaimed = 0 if claimed else int(sorted_lengths[lo:hi].sum())
                which[order[lo:hi]] = len(blocks)
                new.append(self._new_block(start, end, unclaimed, fetch=False))
                blocks.append(new[-1])
            self._fetch_all(new)
        return blocks, which

    def _new_block(self, start: int, end: int, unclaimed: int, *, fetch: bool = True) -> _Block:
        future: asyncio.Future[memoryview] = asyncio.get_running_loop().create_future()
        block = _Block(start, end, future, unclaimed)
        # Registered while in flight too: a concurrent read of the same bytes waits on it.
        i = bisect.bisect_right(self._starts, start)
        if self.keep == "all":  # blocks inside the new one are found in it from now on
            j = i
            while j < len(self._blocks) and self._blocks[j].end <= end:
                j += 1
            while i > 0 and self._starts[i - 1] == start and self._blocks[i - 1].end <= end:
                i -= 1
            for inner in self._blocks[i:j]:
                self._age.pop(id(inner), None)
                self._cached_bytes -= inner.end - inner.start
            del self._starts[i:j], self._blocks[i:j]
        self._starts.insert(i, start)
        self._blocks.insert(i, block)
        self._age[id(block)] = block
        self._cached_bytes += end - start
        if unclaimed <= 0:
            self._spend(block)
        self._evict()
        if fetch:
            self._spawn(self._fetch(block))
        return block

    def _fetch_all(self, blocks: list[_Block]) -> None:
        """Fetch new blocks, together: where the client fetches many ranges in one call
        (:meth:`~h5lens.fetch.protocol.ByteReader.get_many`), as many at a time as it says,
        each one request; alone otherwise (and blocks of several parallel parts)."""
        if not blocks:
            return
        self.meter.batch()
        batch = self.client.batches()
        if len(blocks) < 2 or batch < 2:
            for block in blocks:
                self._spawn(self._fetch(block))
            return
        whole = []
        for block in blocks:
            if len(self.planner.parts(block.start, block.end)) > 1:
                self._spawn(self._fetch(block))
            else:
                whole.append(block)
        whole.sort(key=lambda b: b.start)  # neighbours in a call: as the requests would go anyway
        for lo in range(0, len(whole), batch):
            group = whole[lo : lo + batch]
            self._spawn(self._fetch(group[0]) if len(group) == 1 else self._fetch_group(group))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Cancel the fetches still in flight (read-ahead nobody waits for)."""
        for task in list(self._tasks):
            loop = task.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        self._tasks.clear()

    def _gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.client.concurrency)
        return gate

    def _claim(self, block: _Block, length: int) -> None:
        block.unclaimed -= length
        if block.unclaimed <= 0:
            self._spend(block)

    def _spend(self, block: _Block) -> None:
        """Every byte fetched ahead into ``block`` has been read. Keep it a little longer
        (neighbouring slices share boundary chunks) within SPENT_CACHE_BYTES."""
        if self.keep == "all" or id(block) in self._spent or id(block) not in self._age:
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
        while self.keep != "all" and self._cached_bytes > READAHEAD_CACHE_BYTES and len(self._age) > 1:
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
        # a turn with reads_together in it is followed to its end (their callers resume then,
        # and the batch is counted); a store's chunk reads each resume with their own block
        turn: asyncio.Future[None] | None = None
        if any(p.together for p in pending):
            turn = asyncio.get_running_loop().create_future()
        blocks = []
        for lo, hi in self.planner.runs(offsets, lengths, self.meter.measured):
            items = pending[lo:hi]
            end = int((offsets[lo:hi] + lengths[lo:hi]).max())
            block = self._new_block(items[0].offset, end, sum(p.length for p in items if p.waiter is None), fetch=False)
            block.turn = turn
            blocks.append(block)
            for item in items:
                if item.waiter is not None and not item.waiter.done():
                    item.waiter.set_result(block)
        self._fetch_all(blocks)
        if turn is not None:
            asked = np.asarray([p.waiter is not None for p in pending], dtype=bool)
            self._spawn(self._turn_done(turn, blocks, union_bytes(offsets[asked], lengths[asked])))

    async def _turn_done(self, turn: asyncio.Future[None], blocks: list[_Block], asked: int) -> None:
        """Resolve ``turn`` once all its blocks have arrived (or failed), and count the batch."""
        await asyncio.gather(*(b.future for b in blocks), return_exceptions=True)
        if not turn.done():
            turn.set_result(None)
        self.stats.batches += 1
        self.stats.asked += asked
        if self.on_batch is not None:
            self.on_batch(self.stats)

    def _count(self, block: _Block) -> None:
        self.stats.requests += 1
        self.stats.bytes += block.end - block.start
        if self.on_request is not None:
            self.on_request(block.end - block.start)

    async def _fetch(self, block: _Block) -> None:
        self._count(block)
        requests = len(self.planner.parts(block.start, block.end))
        began = self.meter.started(requests)
        try:
            data = memoryview(await self.read_split(block.start, block.end))
        except BaseException as e:
            self.meter.finished(requests, 0, began, failed=True)
            self._failed_block(block, e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        self.meter.finished(requests, len(data), began)
        if not block.future.done():
            block.future.set_result(data)

    async def _fetch_group(self, group: list[_Block]) -> None:
        """Blocks of one part each, fetched in one ``get_many`` call (as many requests)."""
        for block in group:
            self._count(block)
        gate = self._gate()
        held = 0
        began = self.meter.started(len(group))
        try:
            async with self._batch_lock():  # a call takes all its slots at once: no deadlock between calls
                for _ in group:
                    await gate.acquire()
                    held += 1
            found = await self.client.get_many([(b.start, b.end - b.start) for b in group])
        except BaseException as e:
            self.meter.finished(len(group), 0, began, failed=True)
            for block in group:
                self._failed_block(block, e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        finally:
            for _ in range(held):
                gate.release()
        failed = any(isinstance(data, BaseException) for data in found)
        fetched = sum(len(data) for data in found if not isinstance(data, BaseException))
        self.meter.finished(len(group), fetched, began, failed=failed)
        for block, data in zip(group, found, strict=True):
            if isinstance(data, BaseException):
                self._failed_block(block, data)
            elif not block.future.done():
                block.future.set_result(memoryview(data))

    def _failed_block(self, block: _Block, error: BaseException) -> None:
        self._drop(block)  # a later read tries again
        if isinstance(error, Exception):
            error.request = (block.start, block.end)  # type: ignore[attr-defined]  # which bytes (SourceReads._blame)
        if not block.future.done():
            block.future.set_exception(error)
            block.future.exception()  # read-ahead nobody claims must not warn

    def _batch_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._batch_locks.get(loop)
        if lock is None:
            lock = self._batch_locks[loop] = asyncio.Lock()
        return lock

    async def read_split(self, start: int, end: int) -> bytes | memoryview:
        """Bytes ``[start, end)``: one request, or the planner's parts fetched concurrently
        and joined (a part that fails fails the whole)."""
        parts = self.planner.parts(start, end)
        if len(parts) == 1:
            async with self._gate():
                return await self.client.get(start, end - start)

        async def one(lo: int, hi: int) -> bytes | memoryview:
            async with self._gate():
                return await self.client.get(lo, hi - lo)

        out = bytearray(end - start)
        for (lo, _), data in zip(parts, await asyncio.gather(*(one(lo, hi) for lo, hi in parts)), strict=True):
            out[lo - start : lo - start + len(data)] = data
        return memoryview(out)


def _failed(block: _Block) -> bool:
    return block.future.done() and (block.future.cancelled() or block.future.exception() is not None)
