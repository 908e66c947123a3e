"""What the index walkers share: chunks as found (before they become a table), grid
arithmetic, the checked read of an index header, and index entries.

The fixed array, the extensible array and the v2 B-tree open with a checksummed header
(signature, version 0, ...). Their entries hold the same fields (VII.C, VII.D and VII.E of
the specification: the chunk's address, then for filtered chunks its size and filter
mask; the B-tree's records add the chunk's grid index). The two arrays' blocks open alike
(signature, version, client id, the header's address). libhdf5: H5Dfarray.c, H5Dearray.c
and H5Dbtree2.c (the chunk clients' encode/decode callbacks), H5FAcache.c and H5EAcache.c.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h5lens.scan.hdf5.checksum import CHECKSUM_SIZE, verify_checksums
from h5lens.scan.hdf5.fields import Cursor, le_columns, record_view
from h5lens.scan.hdf5.messages import Dataset
from h5lens.scan.hdf5.model import UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io
from h5lens.scan.hdf5.superblock import Superblock

_ARRAY_CHUNKS = 0  # fixed/extensible array client id: chunks without filters
_ARRAY_FILTERED_CHUNKS = 1
FILTER_MASK_SIZE = 4  # bytes of a filtered chunk's filter mask in an index entry or key


@dataclass
class Chunks:
    """Chunks as found, before they become a ChunkIndex (addresses still relative)."""

    grid: np.ndarray
    address: np.ndarray
    size: np.ndarray
    mask: np.ndarray

    @classmethod
    def empty(cls, rank: int) -> Chunks:
        nothing = np.zeros(0, np.uint64)
        return cls(np.zeros((0, rank), np.int64), nothing, nothing, np.zeros(0, np.uint32))

    @classmethod
    def concat(cls, parts: list[Chunks], rank: int) -> Chunks:
        if not parts:
            return cls.empty(rank)
        return cls(
            np.concatenate([p.grid for p in parts]),
            np.concatenate([p.address for p in parts]),
            np.concatenate([p.size for p in parts]),
            np.concatenate([p.mask for p in parts]),
        )


def check_filtered(filtered: bool, ds: Dataset, what: str) -> None:
    if filtered != (ds.nfilters > 0):
        raise UnsupportedIndexError(
            f"{what} says chunks are {'' if filtered else 'un'}filtered, the pipeline has {ds.nfilters} filters"
        )


async def read_index_header(io: Io, address: int, size: int, signature: bytes, what: str) -> Cursor:
    """The header of a fixed array, extensible array or v2 B-tree: read, its checksum, signature
    and version (0) checked; the cursor stands after the version."""
    (header,) = await io.read([(address, size)], what)
    verify_checksums([header], what)
    c = Cursor(header, 0, what)
    if c.take(4) != signature or c.uint(1) != 0:
        raise UnsupportedIndexError(f"{what}: bad signature or version")
    return c


def bounded(grid: tuple[int | None, ...]) -> tuple[int, ...] | None:
    """``grid`` if no dimension of it is unlimited (None), else None."""
    found = tuple(n for n in grid if n is not None)
    return found if len(found) == len(grid) else None


def unravel(index: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """Row-major grid coordinates of linear indexes (the first dimension may be unbounded)."""
    out = np.zeros((len(index), len(dims)), np.int64)
    rest = index.astype(np.int64)
    for axis in range(len(dims)):
        down = math.prod(dims[axis + 1 :])
        if down > np.iinfo(np.int64).max:  # every index is below it: coordinate 0 here
            continue
        out[:, axis], rest = np.divmod(rest, down)
    return out


# --------------------------------------------------------------------------- index entries


def _chunk_size_width(chunk_bytes: int) -> int:
    """Width of a filtered chunk's size field in layout-4 indexes: one byte of headroom, at most 8."""
    return min(8, 1 + ((max(chunk_bytes, 1).bit_length() - 1) + 8) // 8)


def size_width(entry_size: int, filtered: bool, ds: Dataset, sb: Superblock, what: str) -> int:
    """Width of the chunk-size field in an index entry, from the entry size the index declares.

    An entry is the chunk's address, then (filtered chunks only) its size and filter mask.
    Layout 4 sizes it from the chunk's byte count (one byte of headroom); layout 5
    (libhdf5 2.0) makes it "size of lengths" wide, so that a filter may grow a chunk.
    """
    if not filtered:
        if entry_size != sb.sizeof_offsets:
            raise UnsupportedIndexError(f"{what}: {entry_size}-byte entries for unfiltered chunks")
        return 0
    width = entry_size - sb.sizeof_offsets - FILTER_MASK_SIZE
    expected = _chunk_size_width(ds.layout.chunk_bytes)
    if width != (expected if ds.layout.version == 4 else sb.sizeof_lengths):
        raise UnsupportedIndexError(f"{what}: {width}-byte chunk sizes with layout version {ds.layout.version}")
    return width


@dataclass
class Entries:
    """Array entries that point at a chunk, with each one's element index in the array."""

    index: np.ndarray  # int64
    address: np.ndarray
    size: np.ndarray
    mask: np.ndarray

    def chunks(self, grid: np.ndarray) -> Chunks:
        return Chunks(grid, self.address, self.size, self.mask)


def sizes_and_masks(records: np.ndarray, width: int, ds: Dataset, sb: Superblock) -> tuple[np.ndarray, np.ndarray]:
    """Each record's chunk size and filter mask, stored after its address where the chunks are
    filtered (``width`` > 0); else the chunk's byte count and a mask of 0."""
    o = sb.sizeof_offsets
    if width:
        size = le_columns(records[:, o : o + width])
        mask = le_columns(records[:, o + width : o + width + FILTER_MASK_SIZE]).astype(np.uint32)
    else:
        size = np.full(len(records), ds.layout.chunk_bytes, np.uint64)
        mask = np.zeros(len(records), np.uint32)
    return size, mask


def array_entries(entries: np.ndarray, index: np.ndarray, width: int, ds: Dataset, sb: Superblock) -> Entries:
    """Decode fixed/extensible array entries: the chunk address, then (filtered only) size and mask."""
    address = le_columns(entries[:, : sb.sizeof_offsets])
    written = address != np.uint64(sb.undefined_address)
    address, entries, index = address[written], entries[written], index[written]
    size, mask = sizes_and_masks(entries, width, ds, sb)
    return Entries(index, address, size, mask)


def concat_records(blobs: Sequence[bytes], offset: int, entry_size: int, what: str) -> np.ndarray:
    """Entries of equal size from several blobs, each holding them from ``offset`` to its checksum."""
    parts = [record_view(b, offset, (len(b) - offset - CHECKSUM_SIZE) // entry_size, entry_size, what) for b in blobs]
    return np.concatenate(parts) if parts else np.zeros((0, entry_size), np.uint8)


# --------------------------------------------------------------------------- array blocks


def array_client(client: int, what: str) -> bool:
    """Whether an array's client id says its chunks are filtered; other clients are refused."""
    if client not in (_ARRAY_CHUNKS, _ARRAY_FILTERED_CHUNKS):
        raise UnsupportedIndexError(f"{what}: client id {client} is not a chunk index")
    return client == _ARRAY_FILTERED_CHUNKS


def array_block_prefix_size(sizeof_offsets: int) -> int:
    """Bytes that open every fixed/extensible array block but the header: signature (4),
    version (1), client id (1) and the address of the array's header (size of offsets)."""
    return 4 + 1 + 1 + sizeof_offsets


def check_block(blob: bytes, signature: bytes, client: int, header_address: int, o: int, what: str) -> None:
    """Signature, version 0, the header's client id and the owning header's address."""
    c = Cursor(blob, 0, what)
    if c.take(4) != signature or c.uint(1) != 0:
        raise UnsupportedIndexError(f"{what}: bad signature or version")
    if c.uint(1) != client:
        raise UnsupportedIndexError(f"{what}: client id differs from its header's")
    if c.uint(o) != header_address:
        raise UnsupportedIndexError(f"{what}: belongs to another array")


def initialised_pages(bitmap: bytes, npages: int) -> np.ndarray:
    """Pages written at least once; libhdf5 counts the bitmap from each byte's top bit."""
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8))
    return np.flatnonzero(bits[:npages])
