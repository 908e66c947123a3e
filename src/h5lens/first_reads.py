"""Sources checked when they are first read, rather than all when a store opens.

A manifest of many sources (a combined one: a thousand files) would otherwise wait a
thousand staleness checks (HEADs on object storage, fingerprints of local files) before
anything is listed, though listing its groups and reading its inline arrays touches none of
them. :class:`SourceChecks` remembers which sources were checked and checks the others at
once, on threads, the first time any of them is asked for; :class:`CheckedReads` asks it
for the sources of every read before the read (a read of many chunks: the sources of those
chunks, at once). Every source that is read is checked, with the same errors
(:func:`check_source`).
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
    A source is checked once per store, on this object's threads (:data:`CHECK_THREADS`);
    one being checked when another read asks for it is waited for, not checked twice. A
    failed check is not remembered: the next read checks again."""

    def __init__(self, sources: Sequence[Source], check: Callable[[int], None]) -> None:
        self._check = check
        # a source recorded with nothing that identifies a version has nothing to check
        self._done = np.array(
            [s.size is None and s.etag is None and s.mtime is None and s.fingerprint is None for s in sources],
            dtype=bool,
        )
        self._all_done = bool(self._done.all())
        self._pending: dict[int, Future[None]] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def unchecked(self, sources: Iterable[int] | np.ndarray) -> list[int]:
        """Those of ``sources`` (source indices; negative ones, inline or missing, ignored)
        not checked yet, each once, in order."""
        if self._all_done:  # every read after the first of each source: nothing to look at
            return []
        found = sources.astype(np.int64, copy=False) if isinstance(sources, np.ndarray) else np.fromiter(sources, dtype=np.int64)
        if found.size > 1:
            found = np.unique(found)
        found = found[found >= 0]
        return found[~self._done[found]].tolist()

    def _start(self, sources: Iterable[int] | np.ndarray, *, here: bool = False) -> list[Future[None]]:
        """The checks of those of ``sources`` not checked yet, started (or already running), in
        order; ``here``: a single one to start runs on the calling thread (a store of one
        file: no thread started for it)."""
        todo = self.unchecked(sources)
        if not todo:
            return []
        futures = []
        alone: list[tuple[int, Future[None]]] = []
        with self._lock:
            for index in todo:
                if self._done[index]:
                    continue
                future = self._pending.get(index)
                if future is None and here and len(todo) == 1:
                    future = self._pending[index] = Future()
                    alone.append((index, future))
                elif future is None:
                    if self._pool is None:
                        self._pool = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="h5lens-verify")
                    future = self._pending[index] = self._pool.submit(self._run, index)
                futures.append(future)
        for index, future in alone:
            try:
                self._run(index)
            except BaseException as e:  # noqa: BLE001 - the future holds it, as the pool's would
                future.set_exception(e)
            else:
                future.set_result(None)
        return futures

    def _run(self, index: int) -> None:
        try:
            self._check(index)
        except BaseException:
            with self._lock:
                self._pending.pop(index, None)
            raise
        with self._lock:
            self._done[index] = True
            self._pending.pop(index, None)
            if not self._pending:
                self._all_done = bool(self._done.all())

    def ensure(self, sources: Iterable[int] | np.ndarray) -> None:
        """Check those of ``sources`` not checked yet, at once; raises the error of the first
        (in source order) that fails."""
        futures = self._start(sources, here=True)
        errors = [future.exception() for future in futures]  # every one waited for
        _raise_first(errors)

    async def ensure_async(self, sources: Iterable[int] | np.ndarray) -> None:
        """:meth:`ensure` on the event loop: the checks run on this object's threads (a remote
        source's check may itself use this loop), waited for without blocking it."""
        futures = self._start(sources)
        if futures:
            found = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)
            _raise_first([e if isinstance(e, BaseException) else None for e in found])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def _raise_first(errors: Sequence[BaseException | None]) -> None:
    for error in errors:
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

    async def _checked(self, sources: Iterable[int] | np.ndarray, reading: Callable[[], Awaitable[T]]) -> T:
        """``reading()``, once the sources it reads are checked (the check first: it is also
        the first request to each, which the fetch layer plans the next ones by)."""
        await self.checks.ensure_async(sources)
        return await reading()

    async def read(self, chunk: ChunkRead) -> bytes:
        return await self._checked([chunk.source], lambda: super(CheckedReads, self).read(chunk))

    def read_sync(self, chunk: ChunkRead) -> bytes:
        self.checks.ensure([chunk.source])
        return super().read_sync(chunk)

    async def read_many(self, path: str, flats: np.ndarray | None = None) -> dict[int, bytes | memoryview]:
        return await self._checked(
            self._sources_of(path, flats), lambda: super(CheckedReads, self).read_many(path, flats)
        )

    def read_many_now(self, path: str, flats: np.ndarray) -> dict[int, bytes | memoryview] | None:
        if not self.reads_here(path, flats):
            return None  # read by read_many, which checks
        self.checks.ensure(self._sources_of(path, flats))  # local files: no round trip
        return super().read_many_now(path, flats)


__all__ = ["CHECK_AT_OPEN", "CHECK_THREADS", "CheckedReads", "SourceChecks", "check_source"]
