"""Byte ranges asked for by many concurrent walks, fetched as one batch per event-loop turn.

The chunk-index walker (:mod:`h5lens.scan.hdf5`) asks for every node of a level
in one ``read_ranges`` call. Run the walks of every dataset of a file together
(``asyncio.gather``) over one :class:`BatchedRanges`: the calls they make in the same
event-loop turn become one batch, and a batch is answered all at once, so the walks
advance level by level in lockstep and a whole scan costs about as many round trips as
its deepest index has levels, whatever the number of datasets and nodes.

Within a batch, ranges that overlap or touch are fetched once. Ranges further apart are
merged into one request only within a byte budget (the scan's planner,
:data:`h5lens.fetch.planner.SCAN`: as many bytes again as asked for, spent on the
smallest gaps first): in files written by
h5py or anndata the nodes of a chunk index sit between the data chunks they index, and
merging across those gaps would download the data. What was fetched is kept until the
reader is dropped, so a range read twice (an object header read again whole after a
first guess) costs nothing the second time.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from h5lens.fetch.planner import SCAN, Planner

Fetch = Callable[[int, int], Awaitable[bytes]]

DEFAULT_CONCURRENCY = 64  # requests in flight at once


@dataclass
class BatchStats:
    batches: int = 0  # round trips: batches of concurrent requests, one after the other
    requests: int = 0  # requests sent (GETs)
    bytes: int = 0  # bytes fetched
    asked: int = 0  # bytes the callers asked for (overlaps counted once per batch)


class _Fetched:
    """Byte spans fetched so far, looked up by bisection.

    No span lies inside another (a span that would is dropped, or not added), so spans
    sorted by start are sorted by end too, and the last span starting at or before an
    offset is the one reaching furthest: if any span holds a range, that one does."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.spans: list[tuple[int, bytes]] = []

    def find(self, offset: int, length: int) -> bytes | None:
        i = bisect.bisect_right(self.starts, offset) - 1
        if i < 0:
            return None
        start, data = self.spans[i]
        if offset + length > start + len(data):
            return None
        return data[offset - start : offset - start + length]

    def add(self, start: int, data: bytes) -> None:
        end = start + len(data)
        i = bisect.bisect_right(self.starts, start)
        if i > 0 and self.spans[i - 1][0] + len(self.spans[i - 1][1]) >= end:
            return  # inside a span already held
        j = i
        while j < len(self.spans) and self.spans[j][0] + len(self.spans[j][1]) <= end:
            j += 1  # spans inside the new one
        if i > 0 and self.starts[i - 1] == start:
            i -= 1  # same start, shorter: replaced
        self.starts[i:j] = [start]
        self.spans[i:j] = [(start, data)]


@dataclass
class _Waiting:
    ranges: list[tuple[int, int]]
    future: asyncio.Future[list[bytes]]


class BatchedRanges:
    """A ``read_ranges`` (``await reader([(offset, length), ...]) -> [bytes, ...]``) that
    answers every call made in one event-loop turn with one batch of concurrent requests.

    ``fetch(offset, length)`` fetches one range (one GET). All of a batch's callers resume
    when the whole batch has arrived, so concurrent walks stay in step, level by level.
    """

    def __init__(
        self,
        fetch: Fetch,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        planner: Planner = SCAN,
        on_batch: Callable[[BatchStats], None] | None = None,
        cached: Callable[[int, int], bytes | None] | None = None,
    ) -> None:
        self.fetch = fetch
        self.cached = cached  # bytes someone else fetched already (libhdf5's block cache)
        self.concurrency = concurrency
        self.planner = planner
        self.on_batch = on_batch
        self.stats = BatchStats()
        self._fetched = _Fetched()
        self._waiting: list[_Waiting] = []
        self._flushing = False

    async def __call__(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        ranges = [(int(o), int(n)) for o, n in ranges]
        known = [self._find(o, n) for o, n in ranges]
        if all(k is not None for k in known):
            return [k for k in known if k is not None]
        future: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(ranges, future))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)  # after every caller of this turn
        return await future

    def _find(self, offset: int, length: int) -> bytes | None:
        found = self._fetched.find(offset, length)
        if found is None and self.cached is not None:
            found = self.cached(offset, length)
        return found

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        self._flushing = False
        task = asyncio.ensure_future(self._batch(waiting))
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())

    async def _batch(self, waiting: list[_Waiting]) -> None:
        try:
            missing = [r for w in waiting for r in w.ranges if self._find(*r) is None]
            offsets = np.fromiter((o for o, _ in missing), np.int64, len(missing))
            lengths = np.fromiter((n for _, n in missing), np.int64, len(missing))
            plan = self.planner.requests(offsets, lengths)
            gate = asyncio.Semaphore(self.concurrency)

            async def one(start: int, end: int) -> None:
                async with gate:
                    data = await self.fetch(start, end - start)
                self._fetched.add(start, bytes(data))

            await asyncio.gather(*(one(start, end) for start, end in plan))
            self.stats.batches += 1
            self.stats.requests += len(plan)
            self.stats.bytes += sum(end - start for start, end in plan)
            self.stats.asked += _union_bytes(offsets, lengths)
            if self.on_batch is not None:
                self.on_batch(self.stats)
        except BaseException as e:  # every caller learns of it; none is left waiting
            for w in waiting:
                if not w.future.done():
                    w.future.set_exception(e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        for w in waiting:
            if w.future.done():
                continue
            found = [self._find(o, n) for o, n in w.ranges]
            if any(f is None for f in found):  # cannot happen: every missing range was fetched
                w.future.set_exception(RuntimeError("a batch did not fetch a range it was asked for"))
            else:
                w.future.set_result([f for f in found if f is not None])


def _union_bytes(offsets: np.ndarray, lengths: np.ndarray) -> int:
    if not len(offsets):
        return 0
    order = np.argsort(offsets, kind="stable")
    starts, ends = offsets[order], (offsets + lengths)[order]
    reach = np.maximum.accumulate(ends)
    breaks = np.flatnonzero(starts[1:] > reach[:-1]) + 1
    return int((reach[np.r_[breaks - 1, len(starts) - 1]] - starts[np.r_[0, breaks]]).sum())
