"""Sources checked when they are first read, rather than all when a store opens.

A manifest of many sources (a combined one: a thousand files) would otherwise wait a
thousand staleness checks (HEADs on object storage, fingerprints of local files) before
anything is listed, though listing its groups and reading its inline arrays touches none of
them. :class:`SourceChecks` remembers which sources were checked and checks the others at
once, on threads, the first time any of them is asked for; :class:`CheckedReads` asks it
for the sources of every read: before a local read, and while a remote one's bytes are
fetched (their round trips overlap), its result returned only once the check passed. Every
source that is read is checked, with the same errors (:func:`check_source`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from h5lens.errors import SourceNotFoundError, StaleSourceError
from h5lens.fetch.sources import ChunkRead, SourceReads
from h5lens.manifest import identity
from h5lens.manifest.tables import ChunkTable, Source

# Sources checked at once: each is a round trip on object storage (a HEAD), a stat and two
# small reads locally, which let go of the GIL
CHECK_THREADS = 32
# A store opened with verify checks up to this many sources at open (one round of threads:
# a missing or changed file is refused by open itself); more, each before its first read
CHECK_AT_OPEN = CHECK_THREADS

T = TypeVar("T")


class SourceChecks:
    """Which of a store's sources were checked; :meth:`ensure` checks the others.

    ``check(index)`` raises if source ``index`` is not the file indexed (missing, changed).
    A source is checked once per store; one being checked by another thread is waited for,
    not checked twice. A failed check is not remembered: the next read checks again."""

    def __init__(self, sources: Sequence[Source], check: Callable[[int], None]) -> None:
        self._check = check
        # a source recorded with nothing that identifies a version has nothing to check
        self._done = np.array(
            [s.size is None and s.etag is None and s.mtime is None and s.fingerprint is None for s in sources],
            dtype=bool,
        )
        self._pending: dict[int, Future[None]] = {}
        self._lock = threading.Lock()

    def unchecked(self, sources: Iterable[int]) -> list[int]:
        """Those of ``sources`` (source indices; negative ones, inline or missing, ignored)
        not checked yet, each once, in order."""
        found = np.unique(np.fromiter(sources, dtype=np.int64))
        found = found[found >= 0]
        return found[~self._done[found]].tolist()

    def ensure(self, sources: Iterable[int]) -> None:
        """Check those of ``sources`` not checked yet, at once; raises the error of the first
        (in source order) that fails."""
        todo = self.unchecked(sources)
        if not todo:
            return
        mine: list[tuple[int, Future[None]]] = []
        waits: list[tuple[int, Future[None]]] = []
        with self._lock:
            for index in todo:
                if self._done[index]:
                    continue
                pending = self._pending.get(index)
                if pending is None:
                    pending = self._pending[index] = Future()
                    mine.append((index, pending))
                else:
                    waits.append((index, pending))

        def run(item: tuple[int, Future[None]]) -> None:
            index, future = item
            try:
                self._check(index)
            except BaseException as e:  # noqa: BLE001 - raised below, in the order of the sources
                with self._lock:
                    self._pending.pop(index, None)
                future.set_exception(e)
            else:
                with self._lock:
                    self._done[index] = True
                    self._pending.pop(index, None)
                future.set_result(None)

        if len(mine) > 1:
            with ThreadPoolExecutor(min(CHECK_THREADS, len(mine)), thread_name_prefix="h5lens-verify") as pool:
                list(pool.map(run, mine))
        elif mine:
            run(mine[0])
        failures = [(index, future.exception()) for index, future in sorted([*mine, *waits], key=lambda x: x[0])]
        for _, error in failures:
            if error is not None:
                raise error


def check_source(reads: SourceReads, index: int, recorded: Source, url: str, remapped: str | None) -> None:
    """Check that source ``index`` (read by ``reads`` from ``url``; ``remapped``: where the
    caller said to read it from, if anywhere) is there and is the file ``recorded``; raises
    naming it, and saying what to do."""
    try:
        found = reads.stat(index, fingerprint=identity.wants_fingerprint(recorded))
    except SourceNotFoundError as e:
        if remapped is not None:
            raise
        said = f"{url}: the source of this manifest is not there ({e})"
        raise SourceNotFoundError(f"{said}; if it moved, pass source_urls={{{recorded.url!r}: NEW}}").at_cli(
            f"{said}; if it moved, pass --source-url {recorded.url}=NEW"
        ) from None
    changes = identity.compare(recorded, found).changes
    if changes:
        said = f"{url}: changed since the manifest was written ({'; '.join(changes)})"
        raise StaleSourceError(
            f"{said}; index it again, or open with verify=False to read it anyway", url=url, changes=tuple(changes)
        ).at_cli(f"{said}; index it again, or pass --no-verify to read it anyway")


class CheckedReads(SourceReads):
    """A store's :class:`~h5lens.fetch.sources.SourceReads` that checks (``checks``) the
    sources of every read: the chunk's, the chunks' of a read of many. A prefetch is not
    checked: what it fetches ahead is returned only by those reads."""

    def __init__(
        self, urls: list[str], tables: Mapping[str, ChunkTable], options: dict[str, Any], checks: SourceChecks
    ) -> None:
        super().__init__(urls, tables, options)
        self.checks = checks

    def _sources_of(self, path: str, flats: np.ndarray | None) -> np.ndarray:
        sources = self.tables[path].source.reshape(-1)
        return sources if flats is None else sources[np.asarray(flats, dtype=np.int64)]

    async def _checked(self, sources: Iterable[int], reading: Awaitable[T]) -> T:
        """``reading``'s result, once the sources it reads are checked. The checks run off the
        loop (a remote source's check may itself run on this loop) while the bytes are fetched,
        so that their round trips overlap; a read that fails is explained by a failed check
        first (a file that changed or went missing), and nothing is returned unless every
        check passed."""
        todo = self.checks.unchecked(sources)
        if not todo:
            return await reading
        checking = asyncio.ensure_future(asyncio.to_thread(self.checks.ensure, todo))
        try:
            found = await reading
        except BaseException:
            await checking  # its error, if any, is the one raised
            raise
        await checking
        return found

    async def read(self, chunk: ChunkRead) -> bytes:
        return await self._checked([chunk.source], super().read(chunk))

    def read_sync(self, chunk: ChunkRead) -> bytes:
        self.checks.ensure([chunk.source])
        return super().read_sync(chunk)

    async def read_many(self, path: str, flats: np.ndarray | None = None) -> dict[int, bytes | memoryview]:
        return await self._checked(self._sources_of(path, flats).tolist(), super().read_many(path, flats))

    def read_many_now(self, path: str, flats: np.ndarray) -> dict[int, bytes | memoryview] | None:
        if not self.reads_here(path, flats):
            return None  # read by read_many, which checks
        self.checks.ensure(self._sources_of(path, flats).tolist())  # local files: no round trip
        return super().read_many_now(path, flats)


__all__ = ["CHECK_AT_OPEN", "CHECK_THREADS", "CheckedReads", "SourceChecks", "check_source"]
