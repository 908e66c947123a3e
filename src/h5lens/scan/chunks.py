"""Chunk tables: where each chunk's bytes sit in the HDF5 file.

Chunked datasets are read through ``DatasetID.chunk_iter`` only (one pass over
the chunk index; a loop of ``get_chunk_info`` is quadratic). Contiguous
datasets are cut into virtual slabs along axis 0 so that a slice reads only
what it needs.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import BinaryIO

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.manifest.model import ChunkTableBuilder
from h5lens.scan.options import DEFAULT_SLAB_BYTES

# How far below the target a slab may shrink to find a row count that divides the axis
# (or leaves the smallest tail, which has to be stored inline).
_SLAB_SEARCH_LIMIT = 4096


@dataclass
class ChunkScan:
    """A chunked dataset's table (still being built) plus the chunks that skip some of the
    pipeline's filters."""

    table: ChunkTableBuilder
    masked: list[tuple[int, ...]]  # grid indices whose filter_mask is not 0


def grid_shape(shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-(-s // c) for s, c in zip(shape, chunk_shape, strict=True))


def scan_chunked(
    dsid: h5py.h5d.DatasetID, shape: tuple[int, ...], chunk_shape: tuple[int, ...], raw: BinaryIO | None = None
) -> ChunkScan:
    """The chunk table of a chunked dataset, source 0.

    One ``chunk_iter`` pass, except where libhdf5's iteration is known to be wrong: an
    extensible-array index whose unlimited dimension is not the first (libver latest,
    ``maxshape=(n, None)``), for which libhdf5 2.0 reports chunk offsets in the wrong
    order while it reads those chunks right. There, and wherever the iteration gives
    chunks outside the grid or twice, h5lens walks the index itself (scan/index_walk.py),
    following what libhdf5's reads do, from ``raw`` (the file's bytes)."""
    grid = grid_shape(shape, chunk_shape)
    if 0 in shape:
        return ChunkScan(ChunkTableBuilder(grid), [])
    if _unlimited_not_first(dsid) and raw is not None:
        return _walked(dsid, grid, chunk_shape, raw)
    index, addresses, sizes, masks = _iterated(dsid, chunk_shape)
    if index.shape[0] and not _consistent(index, grid):
        if raw is None:
            raise UnsupportedFeatureError(
                f"{_name(dsid)}: libhdf5 lists chunks outside the chunk grid {grid} or twice"
            )
        return _walked(dsid, grid, chunk_shape, raw)
    return _table(grid, index, addresses, sizes, masks)


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


def _consistent(index: np.ndarray, grid: tuple[int, ...]) -> bool:
    if (index < 0).any() or (index >= np.asarray(grid, dtype=np.int64)).any():
        return False
    flat = np.ravel_multi_index(tuple(index.T), grid)
    return np.unique(flat).size == flat.size


def _unlimited_not_first(dsid: h5py.h5d.DatasetID) -> bool:
    maxdims = dsid.get_space().get_simple_extent_dims(maxdims=True)
    unlimited = [i for i, n in enumerate(maxdims) if n == h5py.h5s.UNLIMITED]
    return len(unlimited) == 1 and unlimited[0] != 0


def _walked(dsid: h5py.h5d.DatasetID, grid: tuple[int, ...], chunk_shape: tuple[int, ...], raw: BinaryIO) -> ChunkScan:
    from h5lens.scan import index_walk

    address = h5py.h5o.get_info(dsid).addr
    try:
        found = index_walk.walk_chunk_index_local(raw, address)
    except index_walk.UnsupportedIndexError as e:
        raise UnsupportedFeatureError(
            f"{_name(dsid)}: libhdf5 lists this dataset's chunks inconsistently and h5lens cannot read "
            f"its chunk index itself ({e})"
        ) from None
    if tuple(found.chunk_shape[: len(chunk_shape)]) != tuple(chunk_shape) or not _consistent(found.grid_index, grid):
        raise UnsupportedFeatureError(f"{_name(dsid)}: the chunk index does not match the dataset's chunk grid {grid}")
    return _table(grid, found.grid_index, found.address, found.size, found.filter_mask)


def _table(
    grid: tuple[int, ...], index: np.ndarray, addresses: np.ndarray, sizes: np.ndarray, masks: np.ndarray
) -> ChunkScan:
    table = ChunkTableBuilder(grid)
    if index.shape[0]:
        table.refer(np.ravel_multi_index(tuple(index.T), grid), addresses, sizes)
    masked = [tuple(int(i) for i in index[k]) for k in np.flatnonzero(masks)]
    return ChunkScan(table, masked)


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
