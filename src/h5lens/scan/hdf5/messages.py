"""The object header messages that make a chunked dataset's geometry: dataspace, data
layout (with the chunk index's type, address and parameters) and filter pipeline.

Specification: IV.A.2.b "The Dataspace Message", IV.A.2.i "The Data Layout Message"
(versions 1 to 5; chunk index types in VII "Appendix C") and IV.A.2.l "The Data Storage -
Filter Pipeline Message". libhdf5: H5Osdspace.c, H5Olayout.c (``H5O__layout_decode``) and
H5Opline.c.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from h5lens.scan.hdf5.fields import Cursor
from h5lens.scan.hdf5.model import IndexType, UnsupportedIndexError
from h5lens.scan.hdf5.object_header import (
    MSG_DATASPACE,
    MSG_LAYOUT,
    MSG_PIPELINE,
    Message,
    message,
    optional_message,
    read_object_header,
)
from h5lens.scan.hdf5.reads import Io, ReadAt, local_read_ranges, run_sync
from h5lens.scan.hdf5.superblock import Superblock

_INDEX_TYPES = {
    1: IndexType.SINGLE,
    2: IndexType.IMPLICIT,
    3: IndexType.FIXED_ARRAY,
    4: IndexType.EXTENSIBLE_ARRAY,
    5: IndexType.BTREE_V2,
}
_LAYOUT_CHUNKED = 2  # layout class; 0 compact, 1 contiguous, 3 virtual
# Data layout message (v4+) chunk flags: H5O_LAYOUT_CHUNK_DONT_FILTER_PARTIAL_BOUND_CHUNKS,
# set by H5Pset_chunk_opts(H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS): partial edge chunks are
# stored as they are, without the pipeline's filters (and with a filter mask of 0).
LAYOUT_UNFILTERED_EDGES = 0x01
_LAYOUT_SINGLE_FILTERED = 0x02
_DATASPACE_HAS_MAX = 0x01  # dataspace flag: maximum dimensions follow the current ones


@dataclass(frozen=True)
class Dataspace:
    shape: tuple[int, ...]
    maxshape: tuple[int | None, ...]


def parse_dataspace(data: bytes, sb: Superblock) -> Dataspace:
    c = Cursor(data, 0, "dataspace message")
    version, rank, flags = c.uint(1), c.uint(1), c.uint(1)
    if version == 1:
        c.skip(5)  # reserved
    elif version == 2:
        if c.uint(1) != 1:  # 0 scalar, 2 null: neither can be chunked
            raise UnsupportedIndexError("dataspace: not a simple dataspace")
    else:
        raise UnsupportedIndexError(f"dataspace message version {version}")
    if rank == 0:
        raise UnsupportedIndexError("dataspace: rank 0")
    n = sb.sizeof_lengths
    shape = tuple(c.uint(n) for _ in range(rank))
    unlimited = (1 << (8 * n)) - 1
    if flags & _DATASPACE_HAS_MAX:
        maxshape = tuple(None if m == unlimited else m for m in (c.uint(n) for _ in range(rank)))
    else:
        maxshape = shape
    return Dataspace(shape, maxshape)


def count_filters(message: Message | None) -> int:
    """Only how many filters the pipeline has: it decides which index entries carry sizes."""
    if message is None:
        return 0
    c = Cursor(message.data, 0, "filter pipeline message")
    version, nfilters = c.uint(1), c.uint(1)
    if version not in (1, 2):
        raise UnsupportedIndexError(f"filter pipeline message version {version}")
    return nfilters


@dataclass(frozen=True)
class Layout:
    version: int
    index_type: IndexType
    address: int
    chunk_shape: tuple[int, ...]
    element_size: int
    flags: int = 0
    params: tuple[int, ...] = ()
    single_size: int | None = None  # a filtered single chunk's stored size, from the message
    single_mask: int = 0

    @property
    def chunk_bytes(self) -> int:
        return math.prod(self.chunk_shape) * self.element_size


def parse_layout(data: bytes, sb: Superblock) -> Layout:
    c = Cursor(data, 0, "data layout message")
    version = c.uint(1)
    if version not in (1, 2, 3, 4, 5):
        raise UnsupportedIndexError(f"data layout message version {version}")
    if version < 3:
        # Versions 1 and 2 (libhdf5 before 1.6.3; PyTables 1.x files): the dimensionality
        # comes before the class, then 5 reserved bytes; a chunked layout's index is a
        # version 1 B-tree, and its dimensions end with the element size, as in version 3.
        # No flags: partial edge chunks are always filtered.
        ndims = c.uint(1)
        _chunked_class(c.uint(1))
        c.skip(5)
        address = c.uint(sb.sizeof_offsets)
        dims = [c.uint(4) for _ in range(ndims)]
        return _layout(version, IndexType.BTREE_V1, address, dims)
    _chunked_class(c.uint(1))
    if version == 3:
        ndims = c.uint(1)
        address = c.uint(sb.sizeof_offsets)
        dims = [c.uint(4) for _ in range(ndims)]
        return _layout(version, IndexType.BTREE_V1, address, dims)
    flags = c.uint(1)
    if flags & ~(LAYOUT_UNFILTERED_EDGES | _LAYOUT_SINGLE_FILTERED):
        raise UnsupportedIndexError(f"data layout: unknown chunk flags {flags:#x}")
    ndims, width = c.uint(1), c.uint(1)
    if not 1 <= width <= 8:
        raise UnsupportedIndexError(f"data layout: {width}-byte chunk dimensions")
    dims = [c.uint(width) for _ in range(ndims)]
    code = c.uint(1)
    if code not in _INDEX_TYPES:
        raise UnsupportedIndexError(f"chunk index type {code}")
    index_type = _INDEX_TYPES[code]
    params: tuple[int, ...] = ()
    single_size, single_mask = None, 0
    if index_type == IndexType.SINGLE and flags & _LAYOUT_SINGLE_FILTERED:
        single_size, single_mask = c.uint(sb.sizeof_lengths), c.uint(4)
    elif index_type == IndexType.FIXED_ARRAY:
        params = (c.uint(1),)  # log2 of elements per data block page
    elif index_type == IndexType.EXTENSIBLE_ARRAY:
        # max elements bits, index block elements, super block min data pointers,
        # data block min elements, log2 of elements per data block page
        params = tuple(c.uint(1) for _ in range(5))
    elif index_type == IndexType.BTREE_V2:
        params = (c.uint(4), c.uint(1), c.uint(1))  # node size, split and merge percent
    address = c.uint(sb.sizeof_offsets)
    return _layout(version, index_type, address, dims, flags, params, single_size, single_mask)


def _chunked_class(layout_class: int) -> None:
    if layout_class != _LAYOUT_CHUNKED:
        name = {0: "compact", 1: "contiguous", 3: "virtual"}.get(layout_class, f"class {layout_class}")
        raise UnsupportedIndexError(f"{name} layout has no chunk index")


def _layout(version: int, index_type: IndexType, address: int, dims: list[int], *rest: Any) -> Layout:
    # The last "dimension" of a chunk is the size of one element.
    if len(dims) < 2 or min(dims) == 0:
        raise UnsupportedIndexError(f"data layout: chunk dimensions {dims}")
    return Layout(version, index_type, address, tuple(dims[:-1]), dims[-1], *rest)


# --------------------------------------------------------------------------- the dataset's geometry


@dataclass(frozen=True)
class Dataset:
    space: Dataspace
    layout: Layout
    nfilters: int

    @property
    def rank(self) -> int:
        return len(self.space.shape)

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks along each dimension now."""
        return tuple(-(-s // c) for s, c in zip(self.space.shape, self.layout.chunk_shape, strict=True))

    @property
    def max_grid(self) -> tuple[int | None, ...]:
        """Chunks along each dimension at the maximum size; None where unlimited."""
        return tuple(
            None if m is None else -(-m // c) for m, c in zip(self.space.maxshape, self.layout.chunk_shape, strict=True)
        )


async def read_dataset(io: Io, header_address: int) -> Dataset:
    """The geometry of the chunked dataset whose object header is at ``header_address``."""
    messages = await read_object_header(io, header_address)
    layout = parse_layout(message(messages, MSG_LAYOUT, "data layout").data, io.sb)
    space = parse_dataspace(message(messages, MSG_DATASPACE, "dataspace").data, io.sb)
    if len(layout.chunk_shape) != len(space.shape):
        raise UnsupportedIndexError(f"{len(layout.chunk_shape)}-d chunks in a {len(space.shape)}-d dataspace")
    nfilters = count_filters(optional_message(messages, MSG_PIPELINE, "filter pipeline"))
    return Dataset(space, layout, nfilters)


def unfiltered_edges(read_at: ReadAt, header_address: int, *, superblock: Superblock, file_size: int | None) -> bool:
    """Whether the chunked dataset at ``header_address`` stores its partial edge chunks
    without its filters (the layout message's flag), read with ``read_at(offset, length)``.

    Raises :class:`UnsupportedIndexError` where the header or its layout does not parse."""
    io = Io(local_read_ranges(read_at), superblock, file_size)
    messages = run_sync(read_object_header(io, header_address))
    layout = parse_layout(message(messages, MSG_LAYOUT, "data layout").data, superblock)
    nfilters = count_filters(optional_message(messages, MSG_PIPELINE, "filter pipeline"))
    return nfilters > 0 and bool(layout.flags & LAYOUT_UNFILTERED_EDGES)
