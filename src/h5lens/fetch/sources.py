"""Every byte a store reads, planned in one place: per-chunk reads with read-ahead,
whole-array reads in one batch, and a prefetch of everything an eager read will touch.

:class:`SourceReads` owns one byte client per source and one :class:`ChunkFetcher` per
remote source (merged requests), so bytes fetched for one purpose serve every other
(a prefetch serves the chunk reads that follow it; nothing is fetched twice).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.errors import H5LensError
from h5lens.fetch import planner as planners
from h5lens.fetch.blocks import READAHEAD_CACHE_BYTES, ChunkFetcher
from h5lens.fetch.clients import open_client
from h5lens.fetch.local import read_now
from h5lens.fetch.planner import Planner
from h5lens.fetch.protocol import ByteReader
from h5lens.fetch.readahead import ReadAhead
from h5lens.manifest.tables import INLINE, MISSING, ChunkTable

# Remote sources a read of many chunks requests from at once (each source's own requests
# are planned by its fetcher: h5lens.fetch.planner)
SOURCES_AT_ONCE = 64

MAX_READAHEAD_CHUNKS = 4096  # the window is bounded by MAX_SPAN bytes long before this
# zarr fetches up to async.concurrency chunks at once: reads may arrive a little out of order.
_REORDER = 16

@dataclass
class ReadStats:
    """Reads of referenced bytes (inline chunks and metadata cost none)."""

    requests: int = 0
    bytes: int = 0

    def record(self, nbytes: int) -> None:
        self.requests += 1
        self.bytes += nbytes

    def reset(self) -> None:
        self.requests = 0
        self.bytes = 0


@dataclass
class _Streak:
    last: int  # the furthest chunk read in this streak (flat index)
    frontier: int  # the chunk after the last one fetched (read or ahead)
    ahead: ReadAhead


@dataclass(frozen=True)
class ChunkRead:
    """Bytes ``[start, stop)`` of the chunk at grid position ``index`` (flat ``flat``) of an array."""

    path: str
    flat: int
    source: int
    offset: int
    length: int
    start: int
    stop: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.length


class SourceReads:
    """The clients of a manifest's sources and the plans that read them.

    ``urls[i]`` is where source ``i`` is read from (after remapping and resolving relative
    URLs); ``tables`` maps array paths to chunk tables. Byte readers are made on first use.
    """

    def __init__(self, urls: list[str], tables: Mapping[str, ChunkTable], options: dict[str, Any]) -> None:
        self.urls = urls
        self.tables = tables
        self.options = options
        self.stats = ReadStats()
        # None: each source's from its client's cost model (planner.reads / planner.bulk); settable for measurements
        self.planner: Planner | None = None
        self.bulk_planner: Planner | None = None
        self._clients: list[ByteReader] | None = None
        self._fetchers: dict[int, ChunkFetcher] = {}
        self._streaks: dict[str, _Streak] = {}  # per array: its reads in grid order so far

    # -- clients ------------------------------------------------------------------
    def client(self, source: int) -> ByteReader:
        if self._clients is None:
            self._clients = [open_client(url, self.options) for url in self.urls]
        return self._clients[source]

    @property
    def all_local(self) -> bool:
        return all(self.client(i).local for i in range(len(self.urls)))

    def _fetcher(self, source: int) -> ChunkFetcher:
        fetcher = self._fetchers.get(source)
        if fetcher is None:
            client = self.client(source)
            fetcher = self._fetchers[source] = ChunkFetcher(
                client, on_request=self.stats.record, planner=self.planner or planners.reads(client.cost)
            )
        return fetcher

    def close(self) -> None:
        for fetcher in self._fetchers.values():
            fetcher.close()
        for client in self._clients or []:
            client.close()
        self._clients = None
        self._fetchers = {}
        self._streaks = {}

    # -- one chunk ------------------------------------------------------------------
    async def read(self, chunk: ChunkRead) -> bytes:
        """One chunk's bytes (or part); a whole-chunk read of a remote source reads ahead."""
        client = self.client(chunk.source)
        if client.local:
            self.stats.record(chunk.stop - chunk.start)
            return bytes(client.get_sync(chunk.offset + chunk.start, chunk.stop - chunk.start))  # pread: bytes already
        fetcher = self._fetcher(chunk.source)
        if not chunk.whole:
            return await fetcher.read(chunk.offset + chunk.start, chunk.stop - chunk.start)
        return await fetcher.read(chunk.offset, chunk.length, self._read_ahead(chunk))

    def read_sync(self, chunk: ChunkRead) -> bytes:
        """A local source's bytes without the event loop (zarr's synchronous pipeline)."""
        client = self.client(chunk.source)
        if not client.local:
            raise TypeError("synchronous reads are for local sources only")
        self.stats.record(chunk.stop - chunk.start)
        return bytes(client.get_sync(chunk.offset + chunk.start, chunk.stop - chunk.start))  # pread: bytes already

    def _read_ahead(self, chunk: ChunkRead) -> list[tuple[int, int]]:
        """Chunks after this one to fetch with it (:mod:`h5lens.fetch.readahead`).

        A read close behind the previous one counts as sequential; the window of
        chunks fetched ahead doubles each time reads come within half a window of
        its end, and starts over on a jump. What is fetched ahead is never more than
        what was read sequentially before it, so a slice costs at most about twice
        its chunks, while a full read needs only a few requests per array.
        """
        flat = chunk.flat
        streak = self._streaks.get(chunk.path)
        if streak is None:
            streak = self._streaks[chunk.path] = _Streak(-(1 << 30), 0, ReadAhead(MAX_READAHEAD_CHUNKS))
        if not streak.last - _REORDER <= flat <= max(streak.last, streak.frontier) + 1:
            streak.last, streak.frontier = flat, flat + 1
            streak.ahead.next(sequential=False)
            return []
        streak.last = max(streak.last, flat)
        if streak.frontier - flat > streak.ahead.window // 2:
            return []  # still well inside what was fetched ahead
        window = streak.ahead.next(sequential=True)
        begin = max(streak.frontier, flat + 1)
        fetcher = self._fetcher(chunk.source)
        gap = fetcher.planner.gap(fetcher.meter.measured)
        ahead = _adjacent(self.tables[chunk.path], chunk.source, flat, begin, begin + window, gap, fetcher.planner.span)
        streak.frontier = begin + len(ahead)
        return ahead

    # -- many chunks -------------------------------------------------------------------
    async def read_many(self, path: str, flats: np.ndarray | None = None) -> dict[int, bytes | memoryview]:
        """The stored bytes of many chunks of one array (all present ones by default), by flat
        index: inline ones from the manifest, the rest requested at once (merged requests for
        remote sources, and using whatever a prefetch already holds)."""
        out: dict[int, bytes | memoryview] = {}
        remote: list[tuple[int, np.ndarray]] = []
        for src, chosen, found in self._read_here(path, flats):
            if found is None:
                remote.append((src, chosen))
            else:
                out.update(zip(chosen.tolist(), found, strict=True))
        # every remote source's requests at once (a combined manifest's chunks lie in many
        # files: one after another, a grid cell of 365 daily files waited 365 round trips)
        at_once = asyncio.Semaphore(SOURCES_AT_ONCE)

        async def bounded(src: int, chosen: np.ndarray) -> Sequence[bytes | memoryview]:
            async with at_once:
                return await self._read_remote(path, src, chosen)

        fetched = await asyncio.gather(*(bounded(src, chosen) for src, chosen in remote), return_exceptions=True)
        for (_, chosen), got in zip(remote, fetched, strict=True):
            if isinstance(got, BaseException):
                raise got  # the first source's failure, in their order
            out.update(zip(chosen.tolist(), got, strict=True))
        return out

    async def _read_remote(self, path: str, src: int, chosen: np.ndarray) -> Sequence[bytes | memoryview]:
        offsets, lengths = self._ranges(path, chosen)
        fetcher = self._fetcher(src)
        try:
            return await fetcher.read_ranges(offsets, lengths, self.bulk_planner or planners.bulk(fetcher.planner.costs))
        except H5LensError as e:
            raise self._blame(e, self.client(src), chosen, offsets, lengths) from e.__cause__

    def reads_here(self, path: str, flats: np.ndarray) -> bool:
        """Whether the present chunks among ``flats`` are all inline or in local files (so
        :meth:`read_many_now` reads them)."""
        _, present_sources = self._present(path, flats)
        return all(src == INLINE or self.client(src).local for src in np.unique(present_sources).tolist())

    def read_many_now(self, path: str, flats: np.ndarray) -> dict[int, bytes | memoryview] | None:
        """:meth:`read_many` on the calling thread, without the event loop: the chunks that
        are inline or in local files; None if any is in a remote source (read those with
        :meth:`read_many`)."""
        if not self.reads_here(path, flats):
            return None  # before reading anything: the async read reads it all
        out: dict[int, bytes | memoryview] = {}
        for _, chosen, found in self._read_here(path, flats):
            assert found is not None  # inline or local, checked above
            out.update(zip(chosen.tolist(), found, strict=True))
        return out

    def _present(self, path: str, flats: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The present chunks among ``flats`` (all by default) and the source of each."""
        sources = self.tables[path].source.reshape(-1)
        present = np.flatnonzero(sources != MISSING) if flats is None else np.asarray(flats, dtype=np.int64)
        present = present[sources[present] != MISSING]
        return present, sources[present]

    def _read_here(
        self, path: str, flats: np.ndarray | None
    ) -> Iterator[tuple[int, np.ndarray, Sequence[bytes | memoryview] | None]]:
        """Per source, the present chunks among ``flats`` and their bytes if they are
        inline or local (read here, now); None for a remote source's, not read."""
        table = self.tables[path]
        present, present_sources = self._present(path, flats)
        for src in np.unique(present_sources).tolist():
            chosen = present[present_sources == src]
            if src == INLINE:
                yield src, chosen, [table.inline[flat] for flat in chosen.tolist()]
                continue
            client = self.client(src)
            if not client.local:
                yield src, chosen, None
                continue
            offsets, lengths = self._ranges(path, chosen)
            try:
                found = read_now(client, offsets, lengths, self.stats.record)
            except H5LensError as e:
                raise self._blame(e, client, chosen, offsets, lengths) from e.__cause__
            yield src, chosen, found

    def _ranges(self, path: str, flats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        table = self.tables[path]
        return table.offset.reshape(-1)[flats].astype(np.int64), table.length.reshape(-1)[flats].astype(np.int64)

    def _blame(
        self, error: H5LensError, client: ByteReader, flats: np.ndarray, offsets: np.ndarray, lengths: np.ndarray
    ) -> H5LensError:
        """The chunk a failed merged read is about, as ``error.chunk`` (flat index, offset,
        length), for the caller to name: locally each range is read alone until one fails
        (that one's error is the one raised); remotely the first chunk of the failed request."""
        if client.local:
            for flat, offset, length in zip(flats.tolist(), offsets.tolist(), lengths.tolist(), strict=True):
                try:
                    client.get_sync(offset, length)
                except H5LensError as alone:
                    alone.chunk = (flat, offset, length)  # type: ignore[attr-defined]
                    return alone
        span = getattr(error, "request", None)
        inside = np.ones(len(flats), bool) if span is None else (offsets >= span[0]) & (offsets + lengths <= span[1])
        first = int(np.flatnonzero(inside)[0]) if inside.any() else 0
        error.chunk = (int(flats[first]), int(offsets[first]), int(lengths[first]))  # type: ignore[attr-defined]
        return error

    def prefetch(
        self, budget: int = READAHEAD_CACHE_BYTES, paths: Callable[[str], bool] | None = None
    ) -> tuple[int, Callable[[], Any] | None]:
        """Plan fetching every referenced chunk of remote sources (of the arrays ``paths``
        accepts), in file order, up to ``budget`` bytes. Returns the bytes planned and a
        coroutine function that starts the requests (to run on the event loop the reads
        will use), or None."""
        if self.all_local:  # nothing to fetch ahead: do not touch (or decode) a table
            return 0, None
        offsets: dict[int, list[np.ndarray]] = {}
        lengths: dict[int, list[np.ndarray]] = {}
        for path in self.tables:
            if paths is not None and not paths(path):
                continue  # before the table: the compact form decodes a table when it is read
            table = self.tables[path]
            sources = table.source.reshape(-1)
            for src in np.unique(sources[sources >= 0]).tolist():
                if self.client(src).local:
                    continue
                mine = sources == src
                offsets.setdefault(src, []).append(table.offset.reshape(-1)[mine].astype(np.int64))
                lengths.setdefault(src, []).append(table.length.reshape(-1)[mine].astype(np.int64))
        requested = 0
        plan: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for src in offsets:
            src_offsets = np.concatenate(offsets[src])
            src_lengths = np.concatenate(lengths[src])
            order = np.argsort(src_offsets, kind="stable")
            src_offsets, src_lengths = src_offsets[order], src_lengths[order]
            take = int(np.searchsorted(np.cumsum(src_lengths), budget - requested, side="right"))
            if take:
                plan[src] = (src_offsets[:take], src_lengths[:take])
                requested += int(src_lengths[:take].sum())
        if not plan:
            return 0, None

        async def start() -> None:
            for src, (src_offsets, src_lengths) in plan.items():
                self._fetcher(src).prefetch(src_offsets, src_lengths)

        return requested, start

    def stat(self, source: int, *, fingerprint: bool = False) -> dict[str, Any]:
        return self.client(source).stat(fingerprint=fingerprint)


def _adjacent(
    table: ChunkTable, source: int, flat: int, begin: int, stop: int, gap: int, span: int
) -> list[tuple[int, int]]:
    """(offset, length) of the chunks ``begin:stop`` in grid order that follow chunk ``flat``
    closely in the same source (within ``gap`` bytes of each other, the whole within ``span``)."""
    sources = table.source.reshape(-1)
    offsets = table.offset.reshape(-1)
    lengths = table.length.reshape(-1)
    first = int(offsets[flat])
    end = first + int(lengths[flat])
    ahead: list[tuple[int, int]] = []
    for j in range(begin, min(stop, sources.size)):
        if sources[j] != source:
            break
        offset, length = int(offsets[j]), int(lengths[j])
        if offset < first or offset - end > gap or offset + length - first > span:
            break
        ahead.append((offset, length))
        end = max(end, offset + length)
    return ahead


__all__ = ["ChunkRead", "ReadStats", "SourceReads", "MAX_READAHEAD_CHUNKS"]
