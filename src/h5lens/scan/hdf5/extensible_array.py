"""The extensible array: the chunk index of datasets with one unlimited dimension (layout 4+).

Specification: VII.D "The Extensible Array Index": a header "EAHD", an index block
"EAIB", super blocks "EASB" and data blocks "EADB" (paged past a size, with the
bitmap of written pages in their super block). libhdf5: H5EAcache.c (the
``H5EA__cache_*_deserialize`` callbacks), H5EAhdr.c (``H5EA__hdr_init``: the super block
geometry), H5EAiblock.c / H5EAsblock.c (the block sizes) and H5Dearray.c (the chunk
entries, ``H5VM_swizzle_coords``).

A walk takes three levels after the header: the index block; then in one call the data
blocks the index block lists and the super blocks it points at; then in one call the
super blocks' data blocks (or their written pages).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

import numpy as np

from h5lens.scan.hdf5.checksum import CHECKSUM_SIZE, verify_checksums
from h5lens.scan.hdf5.fields import le_columns, record_view
from h5lens.scan.hdf5.messages import Dataset
from h5lens.scan.hdf5.model import UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io
from h5lens.scan.hdf5.records import (
    Chunks,
    array_block_prefix_size,
    array_client,
    array_entries,
    check_block,
    check_filtered,
    read_index_header,
    size_width,
    unravel,
)


def header_size(sizeof_offsets: int, sizeof_lengths: int) -> int:
    """Signature (4), version (1), client id (1), entry size (1), max elements bits (1), index
    block elements (1), data block min elements (1), super block min data block pointers (1),
    log2 of elements per page (1); six lengths (super blocks created and their size, data
    blocks created and their size, max index set, elements realised); the index block
    address; checksum."""
    return 4 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 6 * sizeof_lengths + sizeof_offsets + CHECKSUM_SIZE


@dataclass(frozen=True)
class _SuperBlockSpan:
    """Super block ``index``'s share of the array: ``ndblks`` data blocks of ``dblk_nelmts``
    elements each, from element ``first`` on."""

    index: int
    ndblks: int
    dblk_nelmts: int
    first: int


@dataclass(frozen=True)
class _SuperBlock:
    """A super block of its own (the later ones; the index block lists the first ones' data blocks)."""

    address: int
    span: _SuperBlockSpan


@dataclass(frozen=True)
class _DataBlock:
    """A data block at ``address`` holding ``nelmts`` elements from element ``first`` on."""

    address: int
    nelmts: int
    first: int


class _Piece(Enum):
    """What one range of the last level holds."""

    BLOCK = "block"  # a whole data block: its prefix, entries and checksum
    PREFIX = "prefix"  # a paged data block's prefix (checked; its entries are in pages)
    PAGE = "page"  # one page of a data block: entries and their checksum


@dataclass(frozen=True)
class _Range:
    """A range of the last level: what it holds, how many entries, the first one's element index."""

    piece: _Piece
    count: int
    first: int


@dataclass(frozen=True)
class _ExtensibleArray:
    """An extensible array header ("EAHD") and the block geometry it implies.

    Elements 0..idx_blk_elmts-1 sit in the index block. After them come super blocks
    u = 0, 1, ...: super block u has 2**(u//2) data blocks of 2**((u+1)//2) * dblk_min
    elements. The data blocks of the first super blocks are listed in the index block
    itself; later super blocks are blocks of their own, listing their data blocks and,
    when those are paged, a bitmap of the pages written.
    """

    address: int
    client: int
    entry_size: int
    max_nelmts_bits: int
    idx_blk_elmts: int
    dblk_min_elmts: int
    sblk_min_dblk_ptrs: int
    page_bits: int
    max_idx_set: int
    iblock_address: int
    sizeof_offsets: int

    @property
    def page_nelmts(self) -> int:
        return 1 << self.page_bits

    @property
    def undefined(self) -> int:
        return (1 << (8 * self.sizeof_offsets)) - 1

    @property
    def offset_size(self) -> int:
        """Bytes of the "block offset" field in super and data blocks."""
        return (self.max_nelmts_bits + 7) // 8

    @property
    def nsblks(self) -> int:
        return 1 + self.max_nelmts_bits - (self.dblk_min_elmts.bit_length() - 1)

    @property
    def iblock_nsblks(self) -> int:
        """Super blocks whose data block addresses the index block holds."""
        return 2 * (self.sblk_min_dblk_ptrs.bit_length() - 1)

    @property
    def iblock_ndblk_addrs(self) -> int:
        """Data block addresses in the index block (those of its first super blocks)."""
        return 2 * (self.sblk_min_dblk_ptrs - 1)

    @property
    def iblock_nsblk_addrs(self) -> int:
        """Super block addresses in the index block (those of every later super block)."""
        return self.nsblks - self.iblock_nsblks

    def iblock_size(self) -> int:
        """The block prefix, the index block's own entries, its data and super block
        addresses, checksum."""
        o = self.sizeof_offsets
        addresses = (self.iblock_ndblk_addrs + self.iblock_nsblk_addrs) * o
        return array_block_prefix_size(o) + self.idx_blk_elmts * self.entry_size + addresses + CHECKSUM_SIZE

    def superblocks(self) -> Iterator[_SuperBlockSpan]:
        """Every super block's share of the array, in order."""
        start = self.idx_blk_elmts
        for u in range(self.nsblks):
            ndblks, nelmts = 1 << (u // 2), (1 << ((u + 1) // 2)) * self.dblk_min_elmts
            yield _SuperBlockSpan(u, ndblks, nelmts, start)
            start += ndblks * nelmts

    def npages(self, dblk_nelmts: int) -> int:
        return dblk_nelmts // self.page_nelmts if dblk_nelmts > self.page_nelmts else 0

    def dblock_bitmap_size(self, dblk_nelmts: int) -> int:
        """Bytes of one data block's page bitmap in its super block (0 if not paged)."""
        return (self.npages(dblk_nelmts) + 7) // 8

    def sblock_bitmap_at(self) -> int:
        """The block prefix and the block offset; the page bitmaps follow."""
        return array_block_prefix_size(self.sizeof_offsets) + self.offset_size

    def sblock_size(self, span: _SuperBlockSpan) -> int:
        """The block prefix, block offset, each data block's page bitmap and address, checksum."""
        per_dblock = self.dblock_bitmap_size(span.dblk_nelmts) + self.sizeof_offsets
        return self.sblock_bitmap_at() + span.ndblks * per_dblock + CHECKSUM_SIZE

    def dblock_entries_at(self) -> int:
        """The block prefix and the block offset; the entries follow (unpaged blocks)."""
        return array_block_prefix_size(self.sizeof_offsets) + self.offset_size

    def dblock_prefix(self) -> int:
        """Signature, version, client, header address, block offset and checksum."""
        return self.dblock_entries_at() + CHECKSUM_SIZE

    def page_size(self) -> int:
        """A page of a data block: its entries, then their checksum."""
        return self.page_nelmts * self.entry_size + CHECKSUM_SIZE


# Entries found so far: (entries as (n, entry size) bytes, each one's element index).
_Found = list[tuple[np.ndarray, np.ndarray]]


async def walk_extensible_array(io: Io, ds: Dataset) -> Chunks:
    """Header, index block, super blocks (+ the index block's data blocks), data blocks."""
    sb = io.sb
    if ds.layout.address == sb.undefined_address:
        return Chunks.empty(ds.rank)
    ea, filtered = await _read_extensible_header(io, ds)
    width = size_width(ea.entry_size, filtered, ds, sb, "extensible array")
    if ea.iblock_address == sb.undefined_address or ea.max_idx_set == 0:
        return Chunks.empty(ds.rank)
    found: _Found = []
    dblk_addrs, sblk_addrs = await _read_index_block(io, ea, found)
    direct, supers = _second_level(ea, dblk_addrs, sblk_addrs)
    sblock_blobs = await _read_second_level(io, ea, direct, supers, found)
    await _read_super_blocks_data(io, ea, supers, sblock_blobs, found)
    entries = np.concatenate([entries for entries, _ in found])
    index = np.concatenate([index for _, index in found]).astype(np.int64)
    chunks = array_entries(entries, index, width, ds, sb)
    return chunks.chunks(_extensible_grid(chunks.index, ds))


async def _read_extensible_header(io: Io, ds: Dataset) -> tuple[_ExtensibleArray, bool]:
    o, n = io.sb.sizeof_offsets, io.sb.sizeof_lengths
    c = await read_index_header(io, ds.layout.address, header_size(o, n), b"EAHD", "extensible array header")
    client = c.uint(1)
    entry_size, max_bits, idx_elmts, dblk_min, sblk_min, page_bits = (c.uint(1) for _ in range(6))
    c.skip(4 * n)  # super and data blocks created, and their sizes
    max_idx_set = c.uint(n)
    c.skip(n)  # elements realised
    iblock_address = c.uint(o)
    filtered = array_client(client, "extensible array")
    check_filtered(filtered, ds, "extensible array")
    if (max_bits, idx_elmts, sblk_min, dblk_min, page_bits) != ds.layout.params:
        raise UnsupportedIndexError("extensible array: parameters differ from the data layout message's")
    for name, value in (("data block minimum", dblk_min), ("super block minimum", sblk_min)):
        if value < 2 or value & (value - 1):
            raise UnsupportedIndexError(f"extensible array: {name} {value} is not a power of two")
    if not 0 < page_bits < max_bits <= 64 or dblk_min.bit_length() - 1 > max_bits:
        raise UnsupportedIndexError("extensible array: inconsistent size parameters")
    ea = _ExtensibleArray(
        ds.layout.address, client, entry_size, max_bits, idx_elmts, dblk_min, sblk_min, page_bits,
        max_idx_set, iblock_address, o,
    )  # fmt: skip
    if sum(1 << (u // 2) for u in range(ea.iblock_nsblks)) != ea.iblock_ndblk_addrs:
        raise UnsupportedIndexError("extensible array: index block geometry does not add up")
    return ea, filtered


async def _read_index_block(io: Io, ea: _ExtensibleArray, found: _Found) -> tuple[list[int], list[int]]:
    """The index block's own entries (into ``found``), and its data and super block addresses."""
    o, es = ea.sizeof_offsets, ea.entry_size
    ndblk_addrs, nsblk_addrs = ea.iblock_ndblk_addrs, ea.iblock_nsblk_addrs
    (iblock,) = await io.read([(ea.iblock_address, ea.iblock_size())], "extensible array index block")
    verify_checksums([iblock], "extensible array index block")
    check_block(iblock, b"EAIB", ea.client, ea.address, o, "extensible array index block")
    at = array_block_prefix_size(o)
    found.append((record_view(iblock, at, ea.idx_blk_elmts, es, "index block"), np.arange(ea.idx_blk_elmts)))
    at += ea.idx_blk_elmts * es
    dblk_addrs = le_columns(record_view(iblock, at, ndblk_addrs, o, "index block")).tolist()
    sblk_addrs = le_columns(record_view(iblock, at + ndblk_addrs * o, nsblk_addrs, o, "index block")).tolist()
    return dblk_addrs, sblk_addrs


def _second_level(
    ea: _ExtensibleArray, dblk_addrs: list[int], sblk_addrs: list[int]
) -> tuple[list[_DataBlock], list[_SuperBlock]]:
    """The index block's data blocks and the super blocks that hold elements below the
    highest one ever set."""
    direct: list[_DataBlock] = []
    supers: list[_SuperBlock] = []
    listed = iter(dblk_addrs)
    for span in ea.superblocks():
        if span.first >= ea.max_idx_set:
            break
        if span.index < ea.iblock_nsblks:
            for j, address in zip(range(span.ndblks), listed, strict=False):
                first = span.first + j * span.dblk_nelmts
                if address != ea.undefined and first < ea.max_idx_set:
                    direct.append(_DataBlock(address, span.dblk_nelmts, first))
        elif sblk_addrs[span.index - ea.iblock_nsblks] != ea.undefined:
            supers.append(_SuperBlock(sblk_addrs[span.index - ea.iblock_nsblks], span))
    if any(ea.npages(block.nelmts) for block in direct):
        raise UnsupportedIndexError("extensible array: a paged data block in the index block")
    return direct, supers


def _block_entries(ea: _ExtensibleArray, blob: bytes, count: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """An unpaged data block's entries, with their element indexes."""
    entries = record_view(blob, ea.dblock_entries_at(), count, ea.entry_size, "data block")
    return entries, first + np.arange(count)


async def _read_second_level(
    io: Io, ea: _ExtensibleArray, direct: list[_DataBlock], supers: list[_SuperBlock], found: _Found
) -> list[bytes]:
    """One call for the index block's data blocks (their entries go to ``found``) and the super blocks."""
    blobs = await io.read(
        [(block.address, ea.dblock_prefix() + block.nelmts * ea.entry_size) for block in direct]
        + [(sblock.address, ea.sblock_size(sblock.span)) for sblock in supers],
        "extensible array super/data block",
    )
    verify_checksums(blobs, "extensible array super/data block")
    for block, blob in zip(direct, blobs, strict=False):
        check_block(blob, b"EADB", ea.client, ea.address, ea.sizeof_offsets, "extensible array data block")
        found.append(_block_entries(ea, blob, block.nelmts, block.first))
    return blobs[len(direct) :]


async def _read_super_blocks_data(
    io: Io, ea: _ExtensibleArray, supers: list[_SuperBlock], sblock_blobs: list[bytes], found: _Found
) -> None:
    """One call for the super blocks' data blocks, or the written pages of paged ones."""
    spans, places = _extensible_data_spans(ea, supers, sblock_blobs)
    blobs = await io.read(spans, "extensible array data block")
    verify_checksums(blobs, "extensible array data block")
    for place, blob in zip(places, blobs, strict=True):
        if place.piece != _Piece.PAGE:
            check_block(blob, b"EADB", ea.client, ea.address, ea.sizeof_offsets, "extensible array data block")
        if place.piece == _Piece.BLOCK:
            found.append(_block_entries(ea, blob, place.count, place.first))
        elif place.piece == _Piece.PAGE:
            entries = record_view(blob, 0, place.count, ea.entry_size, "data block page")
            found.append((entries, place.first + np.arange(place.count)))


def _extensible_data_spans(
    ea: _ExtensibleArray, supers: list[_SuperBlock], sblock_blobs: list[bytes]
) -> tuple[list[tuple[int, int]], list[_Range]]:
    """Ranges of the super blocks' data blocks, with what each range holds."""
    o = ea.sizeof_offsets
    spans: list[tuple[int, int]] = []
    places: list[_Range] = []
    for sblock, blob in zip(supers, sblock_blobs, strict=True):
        check_block(blob, b"EASB", ea.client, ea.address, o, "extensible array super block")
        span = sblock.span
        nelmts = span.dblk_nelmts
        npages = ea.npages(nelmts)
        bitmap_at = ea.sblock_bitmap_at()
        bitmap_bytes = span.ndblks * ea.dblock_bitmap_size(nelmts)
        addresses = le_columns(record_view(blob, bitmap_at + bitmap_bytes, span.ndblks, o, "super block"))
        # libhdf5 reads the bitmap as one run of bits: data block j's pages from bit j * npages.
        bits = np.unpackbits(np.frombuffer(blob, np.uint8, bitmap_bytes, bitmap_at)) if npages else None
        for j, address in enumerate(int(a) for a in addresses):
            first = span.first + j * nelmts
            if address == ea.undefined or first >= ea.max_idx_set:
                continue
            if bits is None:  # no pages
                spans.append((address, ea.dblock_prefix() + nelmts * ea.entry_size))
                places.append(_Range(_Piece.BLOCK, nelmts, first))
                continue
            spans.append((address, ea.dblock_prefix()))
            places.append(_Range(_Piece.PREFIX, 0, first))
            page_bytes = ea.page_size()
            for p in np.flatnonzero(bits[j * npages : (j + 1) * npages]):
                spans.append((address + ea.dblock_prefix() + int(p) * page_bytes, page_bytes))
                places.append(_Range(_Piece.PAGE, ea.page_nelmts, first + int(p) * ea.page_nelmts))
    return spans, places


def _extensible_grid(index: np.ndarray, ds: Dataset) -> np.ndarray:
    """Grid coordinates of extensible array elements.

    libhdf5 numbers chunks row-major over the maximum grid after moving the one
    unlimited dimension to the front (H5VM_swizzle_coords), so that growing the
    dataset only ever appends elements.
    """
    max_grid = ds.max_grid
    unlimited = [axis for axis, m in enumerate(max_grid) if m is None]
    if len(unlimited) != 1:
        raise UnsupportedIndexError(f"extensible array index with {len(unlimited)} unlimited dimensions")
    order = unlimited + [axis for axis in range(ds.rank) if axis != unlimited[0]]
    # every dimension but the unlimited one (moved to the front) has a maximum
    bounded = [m for m in (max_grid[axis] for axis in order[1:]) if m is not None]
    swizzled = unravel(index, [0, *bounded])
    grid = np.empty_like(swizzled)
    grid[:, order] = swizzled
    return grid
