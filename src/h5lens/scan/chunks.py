"""Chunk tables: where each chunk's bytes sit in the HDF5 file.

Chunked datasets are read by h5lens's own chunk-index walker (:mod:`h5lens.scan.hdf5`),
which returns the table as numpy columns: no Python object per chunk. For a local file it
reads each index with preads; for a remote file the indexes of every dataset are walked
together beforehand, level by level, one batch of concurrent requests per level
(:class:`IndexWalks`). Where the walker refuses an index (it raises
:class:`~h5lens.scan.hdf5.UnsupportedIndexError` rather than guess), libhdf5's
``DatasetID.chunk_iter`` gives the table, and the log says which dataset and why.

Contiguous datasets are cut into virtual slabs along axis 0 so that a slice reads only
what it needs.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.manifest.documents import grid_shape
from h5lens.manifest.model import ChunkTableBuilder
from h5lens.scan import hdf5
from h5lens.scan.hdf5 import ChunkIndex, Superblock, UnsupportedIndexError
from h5lens.scan.hdf5 import walk as hdf5_walk
from h5lens.scan.options import DEFAULT_SLAB_BYTES
from h5lens.scan.source import OpenSource, TrackedFile

logger = logging.getLogger("h5lens.scan")

# How far below the target a slab may shrink to find a row count that divides the axis
# (or leaves the smallest tail, which has to be stored inline).
_SLAB_SEARCH_LIMIT = 4096

Walked = ChunkIndex | UnsupportedIndexError


@dataclass
class ChunkScan:
    """A chunked dataset's table (still being built) plus the chunks that skip some of the
    pipeline's filters."""

    table: ChunkTableBuilder
    # grid indices of chunks stored without some of the filters: a filter_mask that is not 0,
    # or partial edge chunks of a dataset that does not filter them (H5Pset_chunk_opts)
    masked: list[tuple[int, ...]]
    # each masked chunk's filter mask (bit i: filter i skipped; every bit for an unfiltered edge)
    masks: list[int] = field(default_factory=list)
    present: int = 0  # chunks stored
    # grid indices of partial edge chunks that may or may not skip the filters (the layout
    # message's flag could not be read): re-encoded, and never a reason to drop a filter
    unsure: list[tuple[int, ...]] = field(default_factory=list)

    def common_mask(self) -> int:
        """The filter mask most stored chunks share (0 unless more are masked alike).

        Only masks the file states count (a chunk's filter mask, or the layout's flag for
        unfiltered edges): a dataset's codecs leave out a filter only where the file says
        its chunks skip it. Chunks in ``unsure`` count as unmasked here."""
        if not self.masked:
            return 0
        from collections import Counter

        counts = Counter(self.masks)
        counts[0] = self.present - len(self.masked)
        return max(counts, key=lambda m: (counts[m], m == 0))


def contiguous_offset(dsid: h5py.h5d.DatasetID) -> int | None:
    """The absolute file offset of a contiguous dataset's data; None if none is allocated.

    libhdf5 adds the base address to its "undefined" address too: in a file with a user
    block, ``get_offset`` of an unwritten dataset is ``base - 1`` rather than None. The
    storage size (0 when nothing is allocated) tells."""
    offset = dsid.get_offset()
    if offset is None or dsid.get_storage_size() == 0:
        return None
    return int(offset)


def header_address(dsid: h5py.h5d.DatasetID) -> int:
    """The dataset's object header address, relative to the superblock's base address.

    ``h5g.get_objinfo`` reads only the header; ``h5o.get_info`` would walk the chunk
    index too (to report the storage size)."""
    return int(h5py.h5g.get_objinfo(dsid).objno[0])


class IndexWalks:
    """Chunk indexes of one file, read by h5lens's walker.

    Local files: each index when it is asked for (:meth:`get`), with preads. Remote files:
    :meth:`walk_all` walks every index asked for at once, the walks sharing one batched
    reader, so each level of every index costs one batch of concurrent requests in all.
    """

    def __init__(self, opened: OpenSource) -> None:
        self.opened = opened
        self._superblock: Superblock | None = None
        self._refused: UnsupportedIndexError | None = None  # the superblock could not be read
        self._walked: dict[int, Walked] = {}

    def _read_superblock(self) -> Superblock | None:
        if self._superblock is None and self._refused is None:
            ranges, raw, size = self.opened.ranges, self.opened.raw, self.opened.source.size
            try:
                if not size:
                    raise UnsupportedIndexError("the file's size is not known")
                if ranges is not None:
                    self._superblock = ranges.run(hdf5.fetch_superblock(ranges.batched, size))
                elif isinstance(raw, TrackedFile):
                    raise UnsupportedIndexError("a remote file without a batched reader")
                else:
                    self._superblock = hdf5.local_superblock(raw)
            except UnsupportedIndexError as e:
                self._refused = e
                logger.warning(
                    "%s: h5lens cannot read the superblock (%s); libhdf5 lists every chunk", self.opened.source.url, e
                )
        return self._superblock

    def superblock(self) -> Superblock | None:
        """The file's superblock as h5lens parses it; None if it cannot (logged once)."""
        return self._read_superblock()

    def unfiltered_edges(self, dsid: h5py.h5d.DatasetID) -> bool | None:
        """Whether the dataset stores its partial edge chunks without its filters (the data
        layout message's flag, which h5py does not expose); None where it cannot be read."""
        superblock = self._read_superblock()
        if superblock is None:
            return None
        raw = self.opened.raw
        read_at = self.opened.read if isinstance(raw, TrackedFile) or self.opened.remote else hdf5.reader_for(raw)
        try:
            return hdf5.unfiltered_edges(
                read_at, header_address(dsid), superblock=superblock, file_size=self.opened.source.size
            )
        except UnsupportedIndexError:
            return None

    def walk_all(self, addresses: list[int]) -> None:
        """Walk the chunk indexes of the datasets whose object headers are at ``addresses``
        together (remote files; a local file walks each when asked)."""
        ranges = self.opened.ranges
        todo = sorted({a for a in addresses if a not in self._walked})
        if ranges is None or not todo:
            return
        superblock = self._read_superblock()
        if superblock is None:
            return
        size = self.opened.source.size

        async def one(address: int) -> Walked:
            try:
                return await hdf5_walk.walk_chunk_index(ranges.batched, address, superblock=superblock, file_size=size)
            except UnsupportedIndexError as e:
                return e

        async def every() -> list[Walked]:
            tasks = [asyncio.ensure_future(one(a)) for a in todo]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:  # a storage failure: no walk is left waiting on the loop
                    task.cancel()
                raise

        found = ranges.run(every())
        self._walked.update(zip(todo, found, strict=True))

    def get(self, dsid: h5py.h5d.DatasetID) -> Walked | None:
        """The dataset's chunk index, the walker's reason for refusing it, or None when the
        walker cannot run on this file at all."""
        address = header_address(dsid)
        found = self._walked.pop(address, None)  # each table is used once: no need to keep it
        if found is not None:
            return found
        superblock = self._read_superblock()
        if superblock is None:
            return None
        raw = self.opened.raw
        if self.opened.ranges is not None or isinstance(raw, TrackedFile):
            self.walk_all([address])
            return self._walked.pop(address, None)
        try:
            return hdf5_walk.walk_chunk_index_local(raw, address, superblock=superblock)
        except UnsupportedIndexError as e:
            return e


def scan_chunked(
    dsid: h5py.h5d.DatasetID,
    shape: tuple[int, ...],
    chunk_shape: tuple[int, ...],
    walked: Walked | None = None,
    unfiltered_edges: Callable[[], bool | None] | None = None,
) -> ChunkScan:
    """The chunk table of a chunked dataset, source 0, from the walker's index (``walked``).

    Where the walker refused the index, or found one that does not fit the dataset, libhdf5's
    ``chunk_iter`` lists the chunks (logged). Except for an extensible-array index whose
    unlimited dimension is not the first (libver latest, ``maxshape=(n, None)``): libhdf5
    2.0 lists those chunks at the wrong offsets (while it reads them right), so there the
    dataset is refused rather than misread.

    Partial edge chunks that the dataset stores without its filters are listed in ``masked``,
    like chunks whose filter mask is not 0: the array's codecs cannot decode them. The walker
    reads that flag from the layout message; after a refusal ``unfiltered_edges`` tells it
    (None: not known, and then every partial edge chunk of a filtered dataset that libhdf5
    lists unmasked is in ``unsure``: re-encoded, yet never a reason to drop a filter)."""
    grid = grid_shape(shape, chunk_shape)
    if 0 in shape:
        return ChunkScan(ChunkTableBuilder(grid), [])
    # HDF5 array element types add trailing dimensions of one chunk each: not in the index.
    rank = dsid.rank
    if isinstance(walked, ChunkIndex):
        index = _pad(walked.grid_index, len(grid))
        if tuple(walked.chunk_shape) == tuple(chunk_shape[:rank]) and _consistent(index, grid):
            edges = walked.partial_edges() if walked.unfiltered_edges else None
            return _table(grid, index, walked.address, walked.size, walked.filter_mask, edges)
        walked = UnsupportedIndexError(f"its chunk index does not match the chunk grid {grid}")
    if walked is not None:
        logger.warning("%s: h5lens's chunk-index walker refused it (%s); libhdf5 lists its chunks", _name(dsid), walked)
    if _unlimited_not_first(dsid):
        why = f" ({walked})" if walked is not None else ""
        raise UnsupportedFeatureError(
            f"{_name(dsid)}: libhdf5 lists this dataset's chunks inconsistently and h5lens cannot read "
            f"its chunk index itself{why}"
        )
    index, addresses, sizes, masks = _iterated(dsid, chunk_shape[:rank])
    edges, unsure = None, None
    if dsid.get_create_plist().get_nfilters() > 0:
        known = unfiltered_edges() if unfiltered_edges is not None else None
        if known is True:
            edges = hdf5.partial_edge_rows(index, chunk_shape[:rank], shape[:rank])
        elif known is None:  # the flag could not be read: the edges are re-encoded either way
            unsure = hdf5.partial_edge_rows(index, chunk_shape[:rank], shape[:rank]) & (masks == 0)
    index = _pad(index, len(grid))
    if index.shape[0] and not _consistent(index, grid):
        raise UnsupportedFeatureError(f"{_name(dsid)}: libhdf5 lists chunks outside the chunk grid {grid} or twice")
    scan = _table(grid, index, addresses, sizes, masks, edges)
    if unsure is not None:
        scan.unsure = [tuple(int(i) for i in index[k]) for k in np.flatnonzero(unsure)]
    return scan


def _iterated(dsid: h5py.h5d.DatasetID, chunk_shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """(grid indices (n, ndim), addresses, sizes, filter masks) from one chunk_iter pass."""
    infos: list = []
    # Hundreds of thousands of live records make the cyclic GC rescan them over and over;
    # nothing here creates cycles, so it waits until the table is built.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        dsid.chunk_iter(infos.append)  # a bound method: the cheapest callback there is
        if not infos:
            empty = np.zeros((0, len(chunk_shape)), dtype=np.int64)
            return empty, np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint32)
        offsets, masks, addresses, sizes = zip(*infos, strict=True)
        del infos
        index = np.asarray(offsets, dtype=np.int64).reshape(len(offsets), -1) // np.asarray(chunk_shape, dtype=np.int64)
    finally:
        if gc_was_enabled:
            gc.enable()
    return (
        index,
        np.asarray(addresses, dtype=np.uint64),
        np.asarray(sizes, dtype=np.uint64),
        np.asarray(masks, dtype=np.uint32),
    )


def _pad(index: np.ndarray, ndim: int) -> np.ndarray:
    """Grid indices with zero columns appended up to ``ndim`` dimensions."""
    if index.shape[1] >= ndim:
        return index
    return np.concatenate([index, np.zeros((index.shape[0], ndim - index.shape[1]), index.dtype)], axis=1)


def _consistent(index: np.ndarray, grid: tuple[int, ...]) -> bool:
    if (index < 0).any() or (index >= np.asarray(grid, dtype=np.int64)).any():
        return False
    flat = np.ravel_multi_index(tuple(index.T), grid)
    # The table holds a cell per grid position anyway: mark them instead of sorting.
    seen = np.zeros(int(np.prod(grid, dtype=np.int64)), bool)
    seen[flat] = True
    return int(np.count_nonzero(seen)) == flat.size


def _unlimited_not_first(dsid: h5py.h5d.DatasetID) -> bool:
    maxdims = dsid.get_space().get_simple_extent_dims(maxdims=True)
    unlimited = [i for i, n in enumerate(maxdims) if n == h5py.h5s.UNLIMITED]
    return len(unlimited) == 1 and unlimited[0] != 0


def _table(
    grid: tuple[int, ...],
    index: np.ndarray,
    addresses: np.ndarray,
    sizes: np.ndarray,
    masks: np.ndarray,
    unfiltered: np.ndarray | None = None,
) -> ChunkScan:
    """``unfiltered``: rows stored without the filters whatever their mask says."""
    table = ChunkTableBuilder(grid)
    if index.shape[0]:
        table.refer(np.ravel_multi_index(tuple(index.T), grid), addresses, sizes)
    skips = masks != 0 if unfiltered is None else (masks != 0) | unfiltered
    rows = np.flatnonzero(skips)
    masked = [tuple(int(i) for i in index[k]) for k in rows]
    every = np.uint32(0xFFFFFFFF)
    values = [int(every if unfiltered is not None and unfiltered[k] else masks[k]) for k in rows]
    return ChunkScan(table, masked, values, int(index.shape[0]))


def _name(dsid: h5py.h5d.DatasetID) -> str:
    name = h5py.h5i.get_name(dsid)
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def plan_slabs(shape: tuple[int, ...], itemsize: int, target_bytes: int = DEFAULT_SLAB_BYTES) -> tuple[int, ...]:
    """Chunk shape for a contiguous dataset: whole rows along axis 0, about ``target_bytes`` each.

    Prefers a row count that divides the axis, else the one leaving the smallest tail.
    """
    if not shape:
        return ()
    full = tuple(max(1, s) for s in shape)
    row_bytes = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    total = row_bytes * shape[0]
    if total <= target_bytes or shape[0] <= 1 or row_bytes == 0:
        return full
    best_rows = max(1, target_bytes // row_bytes)
    if best_rows >= shape[0]:
        return full
    chosen, chosen_tail = best_rows, shape[0] % best_rows
    low = max(1, best_rows // 2, best_rows - _SLAB_SEARCH_LIMIT)
    for rows in range(best_rows, low - 1, -1):
        tail = shape[0] % rows
        if tail < chosen_tail:
            chosen, chosen_tail = rows, tail
        if tail == 0:
            break
    return (chosen, *full[1:])


def scan_contiguous(
    offset: int | None, shape: tuple[int, ...], chunk_shape: tuple[int, ...], itemsize: int
) -> tuple[ChunkTableBuilder, tuple[int, ...] | None]:
    """Slab references into one contiguous block; returns the table and the partial tail slab's index.

    The tail slab holds fewer rows than a chunk, so its bytes cannot be referenced as a
    whole chunk: the caller stores it inline.
    """
    table = ChunkTableBuilder(grid_shape(shape, chunk_shape))
    if offset is None or (shape and 0 in shape):
        return table, None
    if not shape:
        table.refer(np.zeros(1, dtype=np.int64), offset, itemsize)
        return table, None
    rows = chunk_shape[0]
    slab_bytes = rows * itemsize * int(np.prod(shape[1:], dtype=np.int64))
    n_full = shape[0] // rows
    # slabs cover whole rows: slab i is grid cell (i, 0, ..., 0), flat index i * (cells per row)
    per_row = int(np.prod(table.grid_shape[1:], dtype=np.int64))
    table.refer(
        np.arange(n_full, dtype=np.int64) * per_row,
        offset + np.arange(n_full, dtype=np.uint64) * np.uint64(slab_bytes),
        slab_bytes,
    )
    tail = (n_full,) + (0,) * (len(shape) - 1) if shape[0] % rows else None
    return table, tail
