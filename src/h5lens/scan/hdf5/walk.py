"""The walk: a dataset's object header, then its chunk index by type, then the table.

The dispatcher (:data:`_WALKERS`) hands each index type to the module of its structure;
:func:`_finish` checks what they found and makes it a :class:`ChunkIndex`. libhdf5's
counterpart: H5Dchunk.c (``H5D__chunk_iter``) over the ``H5D_chunk_ops_t`` of each index.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import BinaryIO

import numpy as np

from h5lens.scan.hdf5.btree_v1 import walk_btree_v1
from h5lens.scan.hdf5.btree_v2 import walk_btree_v2
from h5lens.scan.hdf5.extensible_array import walk_extensible_array
from h5lens.scan.hdf5.fixed_array import walk_fixed_array
from h5lens.scan.hdf5.messages import LAYOUT_UNFILTERED_EDGES, Dataset, read_dataset
from h5lens.scan.hdf5.model import ChunkIndex, IndexType, ReadRanges, UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io, file_size, local_read_ranges, reader_for, run_sync
from h5lens.scan.hdf5.records import Chunks
from h5lens.scan.hdf5.single import walk_implicit, walk_single
from h5lens.scan.hdf5.superblock import Superblock, fetch_superblock

_WALKERS: dict[IndexType, Callable[[Io, Dataset], Awaitable[Chunks]]] = {
    IndexType.BTREE_V1: walk_btree_v1,
    IndexType.SINGLE: walk_single,
    IndexType.IMPLICIT: walk_implicit,
    IndexType.FIXED_ARRAY: walk_fixed_array,
    IndexType.EXTENSIBLE_ARRAY: walk_extensible_array,
    IndexType.BTREE_V2: walk_btree_v2,
}


async def walk_chunk_index(
    read_ranges: ReadRanges,
    header_address: int,
    *,
    superblock: Superblock,
    file_size: int | None = None,
) -> ChunkIndex:
    """The chunk table of the dataset whose object header is at ``header_address``.

    ``header_address`` is relative to the base address, as libhdf5 reports it
    (``h5py.h5o.get_info(ds.id).addr``). ``read_ranges`` is called once per level of
    the walk with every ``(absolute offset, length)`` that level needs. Reads never
    run past the superblock's end-of-file address (nor ``file_size``, when given).
    Run several walks under ``asyncio.gather`` and a reader that merges concurrent
    requests serves their levels together.

    Raises :class:`UnsupportedIndexError` for anything it does not understand.
    """
    io = Io(read_ranges, superblock, file_size)
    ds = await read_dataset(io, header_address)
    chunks = await _WALKERS[ds.layout.index_type](io, ds)
    return _finish(chunks, ds, io)


def _finish(chunks: Chunks, ds: Dataset, io: Io) -> ChunkIndex:
    """Check the table adds up, sort it by grid index, make its addresses absolute."""
    sb, layout, grid = io.sb, ds.layout, chunks.grid
    n = len(chunks.address)
    if np.any(grid < 0):
        raise UnsupportedIndexError("a negative chunk index")
    for axis, m in enumerate(ds.max_grid):
        if m is not None and n and int(grid[:, axis].max()) >= m:
            raise UnsupportedIndexError(f"a chunk beyond the maximum size along dimension {axis}")
    order = np.lexsort(grid.T[::-1]) if n else np.zeros(0, np.int64)
    grid, address, size, mask = grid[order], chunks.address[order], chunks.size[order], chunks.mask[order]
    if n > 1 and np.any(np.all(grid[1:] == grid[:-1], axis=1)):
        raise UnsupportedIndexError("two chunks at the same grid index")
    if np.any(address == np.uint64(sb.undefined_address)) or np.any(size == 0):
        raise UnsupportedIndexError("an allocated chunk without an address or a size")
    if ds.nfilters == 0 and (np.any(size != np.uint64(layout.chunk_bytes)) or np.any(mask != 0)):
        raise UnsupportedIndexError("an unfiltered chunk whose size is not the chunk's or with a filter mask")
    if io.end is not None and n:
        # compared without adding: address + size can wrap around in uint64
        room = np.uint64(max(io.end - sb.base_address, 0))
        if np.any(size > room) or np.any(address > room - np.minimum(size, room)):
            raise UnsupportedIndexError("a chunk past the end of the file")
    return ChunkIndex(
        grid_index=np.ascontiguousarray(grid, np.int64),
        address=address + np.uint64(sb.base_address),
        size=size.astype(np.uint64),
        filter_mask=mask.astype(np.uint32),
        chunk_shape=layout.chunk_shape,
        shape=ds.space.shape,
        maxshape=ds.space.maxshape,
        element_size=layout.element_size,
        index_type=layout.index_type,
        layout_version=layout.version,
        filtered=ds.nfilters > 0,
        reads=io.calls,
        unfiltered_edges=ds.nfilters > 0 and bool(layout.flags & LAYOUT_UNFILTERED_EDGES),
    )


def walk_chunk_index_local(
    source: str | os.PathLike[str] | BinaryIO, header_address: int, *, superblock: Superblock | None = None
) -> ChunkIndex:
    """:func:`walk_chunk_index` on a local file (a path or a binary file object), with preads.

    ``superblock`` (from :func:`local_superblock`) spares reading it again for every dataset."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return walk_chunk_index_local(f, header_address, superblock=superblock)
    read_ranges = local_read_ranges(reader_for(source))
    size = file_size(source)
    if superblock is None:
        superblock = run_sync(fetch_superblock(read_ranges, size))
    return run_sync(walk_chunk_index(read_ranges, header_address, superblock=superblock, file_size=size))


def local_superblock(source: BinaryIO) -> Superblock:
    """The superblock of a local file (a binary file object)."""
    return run_sync(fetch_superblock(local_read_ranges(reader_for(source)), file_size(source)))
