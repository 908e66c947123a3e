"""Chunk tables: where each chunk's bytes sit in the HDF5 file.

Chunked datasets are read through ``DatasetID.chunk_iter`` only (one pass over
the chunk index; a loop of ``get_chunk_info`` is quadratic). Contiguous
datasets are cut into virtual slabs along axis 0 so that a slice reads only
what it needs.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import h5py
import numpy as np

from h5lens.manifest.model import ChunkTable

DEFAULT_SLAB_BYTES = 4 << 20
# How far below the target a slab may shrink to find a row count that divides the axis
# (or leaves the smallest tail, which has to be stored inline).
_SLAB_SEARCH_LIMIT = 4096


@dataclass
class ChunkScan:
    """A chunked dataset's table plus the chunks that skip some of the pipeline's filters."""

    table: ChunkTable
    masked: list[tuple[int, ...]]  # grid indices whose filter_mask is not 0


def grid_shape(shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-(-s // c) for s, c in zip(shape, chunk_shape, strict=True))


def scan_chunked(dsid: h5py.h5d.DatasetID, shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> ChunkScan:
    """One ``chunk_iter`` pass → a ChunkTable of source 0."""
    table = ChunkTable.empty(grid_shape(shape, chunk_shape))
    if 0 in shape:
        return ChunkScan(table, [])
    infos: list = []
    # Hundreds of thousands of live records make the cyclic GC rescan them over and over;
    # nothing here creates cycles, so it waits until the table is built.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        dsid.chunk_iter(infos.append)  # a bound method: the cheapest callback there is
        if not infos:
            return ChunkScan(table, [])
        offsets, masks, addresses, sizes = zip(*infos, strict=True)
        del infos
        index = tuple((np.asarray(offsets, dtype=np.int64) // np.asarray(chunk_shape, dtype=np.int64)).T)
    finally:
        if gc_was_enabled:
            gc.enable()
    table.source[index] = 0
    table.offset[index] = np.asarray(addresses, dtype=np.uint64)
    table.length[index] = np.asarray(sizes, dtype=np.uint64)
    mask_array = np.asarray(masks, dtype=np.uint32)
    masked = [tuple(int(i[k]) for i in index) for k in np.flatnonzero(mask_array)]
    return ChunkScan(table, masked)


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
) -> tuple[ChunkTable, tuple[int, ...] | None]:
    """Slab references into one contiguous block; returns the table and the partial tail slab's index.

    The tail slab holds fewer rows than a chunk, so its bytes cannot be referenced as a
    whole chunk: the caller stores it inline.
    """
    table = ChunkTable.empty(grid_shape(shape, chunk_shape))
    if offset is None or (shape and 0 in shape):
        return table, None
    if not shape:
        table.source[()] = 0
        table.offset[()] = offset
        table.length[()] = itemsize
        return table, None
    rows = chunk_shape[0]
    slab_bytes = rows * itemsize * int(np.prod(shape[1:], dtype=np.int64))
    n_full = shape[0] // rows
    table.source[:n_full] = 0
    table.offset[:n_full] = (offset + np.arange(n_full, dtype=np.uint64) * np.uint64(slab_bytes)).reshape(
        (n_full,) + (1,) * (len(shape) - 1)
    )
    table.length[:n_full] = slab_bytes
    tail = (n_full,) + (0,) * (len(shape) - 1) if shape[0] % rows else None
    return table, tail
