"""The two chunk indexes with no structure of their own: the single chunk, and the implicit
index (every chunk at its place in one allocation).

Specification: VII.A "The Single Chunk Index" and VII.B "The Implicit Index" (their
fields sit in the data layout message, IV.A.2.i). libhdf5: H5Dsingle.c and H5Dnone.c.
"""

from __future__ import annotations

import math

import numpy as np

from h5lens.scan.hdf5.messages import Dataset
from h5lens.scan.hdf5.model import UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io
from h5lens.scan.hdf5.records import Chunks, bounded, check_filtered


async def walk_single(io: Io, ds: Dataset) -> Chunks:
    """One chunk, the whole dataset: its address (and, filtered, its size and filter mask)
    sit in the data layout message."""
    layout, sb = ds.layout, io.sb
    check_filtered(layout.single_size is not None, ds, "single chunk index")
    # libhdf5 only picks this index when the chunk is the dataset at its maximum size.
    if ds.max_grid != (1,) * ds.rank:
        raise UnsupportedIndexError(f"single chunk index for a grid of {ds.max_grid} chunks")
    if layout.address == sb.undefined_address:
        return Chunks.empty(ds.rank)
    size = layout.chunk_bytes if layout.single_size is None else layout.single_size
    return Chunks(
        np.zeros((1, ds.rank), np.int64),
        np.array([layout.address], np.uint64),
        np.array([size], np.uint64),
        np.array([layout.single_mask], np.uint32),
    )


async def walk_implicit(io: Io, ds: Dataset) -> Chunks:
    """No index: every chunk of the current grid sits at its place in one allocation.

    Chunk addresses step in row-major order over the grid at the *maximum* size,
    while the chunks that exist are those of the current grid (as libhdf5 iterates).
    """
    layout, sb = ds.layout, io.sb
    check_filtered(False, ds, "implicit index")
    if layout.address == sb.undefined_address or math.prod(ds.grid) == 0:
        return Chunks.empty(ds.rank)
    max_grid = bounded(ds.max_grid)
    if max_grid is None:
        raise UnsupportedIndexError("implicit index with an unlimited dimension")
    grid = np.indices(ds.grid).reshape(ds.rank, -1).T.astype(np.int64)
    linear = np.asarray(np.ravel_multi_index(tuple(grid.T), max_grid))
    address = np.uint64(layout.address) + linear.astype(np.uint64) * np.uint64(layout.chunk_bytes)
    n = len(grid)
    return Chunks(grid, address, np.full(n, layout.chunk_bytes, np.uint64), np.zeros(n, np.uint32))
