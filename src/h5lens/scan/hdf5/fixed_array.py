"""The fixed array: the chunk index of datasets without an unlimited dimension (layout 4+).

Specification: VII.C "The Fixed Array Index": a header "FAHD", then one data block
"FADB" that holds the entries inline or, past a size, in pages with a bitmap of the
pages written. libhdf5: H5FAcache.c (``H5FA__cache_hdr_deserialize``,
``H5FA__cache_dblock_deserialize``, ``H5FA__cache_dblk_page_deserialize``), H5FAdblock.c
(the page geometry) and H5Dfarray.c (the chunk entries).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h5lens.scan.hdf5.checksum import CHECKSUM_SIZE, verify_checksums
from h5lens.scan.hdf5.fields import record_view
from h5lens.scan.hdf5.messages import Dataset
from h5lens.scan.hdf5.model import UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io
from h5lens.scan.hdf5.records import (
    Chunks,
    array_block_prefix_size,
    array_client,
    array_entries,
    bounded,
    check_block,
    check_filtered,
    concat_records,
    initialised_pages,
    read_index_header,
    size_width,
    unravel,
)

# A paged fixed-array data block up to this size is read whole with its prefix (one round
# trip less); a bigger one is read prefix first, then only its initialised pages.
WHOLE_DATA_BLOCK_BYTES = 1 << 20


def header_size(sizeof_offsets: int, sizeof_lengths: int) -> int:
    """Signature (4), version (1), client id (1), entry size (1), log2 of entries per page (1),
    number of entries (size of lengths), data block address (size of offsets), checksum."""
    return 4 + 1 + 1 + 1 + 1 + sizeof_lengths + sizeof_offsets + CHECKSUM_SIZE


async def walk_fixed_array(io: Io, ds: Dataset) -> Chunks:
    """Header "FAHD", then one data block "FADB" holding the entries inline or in pages.

    Entry i is the chunk at row-major position i of the grid at the maximum size.
    """
    sb, o, n = io.sb, io.sb.sizeof_offsets, io.sb.sizeof_lengths
    if ds.layout.address == sb.undefined_address:
        return Chunks.empty(ds.rank)
    c = await read_index_header(io, ds.layout.address, header_size(o, n), b"FAHD", "fixed array header")
    client, entry_size, page_bits = c.uint(1), c.uint(1), c.uint(1)
    nelmts, block_address = c.uint(n), c.uint(o)
    filtered = array_client(client, "fixed array")
    check_filtered(filtered, ds, "fixed array")
    width = size_width(entry_size, filtered, ds, sb, "fixed array")
    if (page_bits,) != ds.layout.params:
        raise UnsupportedIndexError("fixed array: page size differs from the data layout message's")
    max_grid = bounded(ds.max_grid)
    if max_grid is None or nelmts != math.prod(max_grid):
        raise UnsupportedIndexError(f"fixed array of {nelmts} entries for a grid of {ds.max_grid} chunks")
    if block_address == sb.undefined_address:
        return Chunks.empty(ds.rank)
    block = _FixedArrayBlock(ds.layout.address, block_address, client, nelmts, entry_size, page_bits, o)
    entries, index = await block.read(io)
    found = array_entries(entries, index, width, ds, sb)
    return found.chunks(unravel(found.index, max_grid))


@dataclass(frozen=True)
class _FixedArrayBlock:
    header_address: int
    address: int
    client: int
    nelmts: int
    entry_size: int
    page_bits: int
    sizeof_offsets: int

    @property
    def page_nelmts(self) -> int:
        return 1 << self.page_bits

    @property
    def npages(self) -> int:
        return -(-self.nelmts // self.page_nelmts) if self.nelmts > self.page_nelmts else 0

    @property
    def bitmap_at(self) -> int:
        return array_block_prefix_size(self.sizeof_offsets)

    @property
    def prefix(self) -> int:
        """Signature, version, client, header address, page bitmap (if paged), checksum."""
        return self.bitmap_at + (self.npages + 7) // 8 + CHECKSUM_SIZE

    def page_span(self, page: int) -> tuple[int, int]:
        """(offset in the block, length) of a page: its entries, then their checksum."""
        full = self.page_nelmts * self.entry_size + CHECKSUM_SIZE
        count = min(self.page_nelmts, self.nelmts - page * self.page_nelmts)
        return self.prefix + page * full, count * self.entry_size + CHECKSUM_SIZE

    def written_pages(self, prefix: bytes) -> np.ndarray:
        """The pages the prefix's bitmap says were written."""
        return initialised_pages(prefix[self.bitmap_at : self.prefix - CHECKSUM_SIZE], self.npages)

    async def read(self, io: Io) -> tuple[np.ndarray, np.ndarray]:
        """Every entry of the written pages, (n, entry_size), with its element index."""
        what = "fixed array data block"
        if not self.npages:
            (blob,) = await io.read([(self.address, self.prefix + self.nelmts * self.entry_size)], what)
            self._check_prefix(blob)
            entries = record_view(blob, self.bitmap_at, self.nelmts, self.entry_size, what)
            return entries, np.arange(self.nelmts, dtype=np.int64)
        start, length = self.page_span(self.npages - 1)
        if start + length <= WHOLE_DATA_BLOCK_BYTES:
            # One read for the prefix and every page; pages never written may lie past the EOF.
            (blob,) = await io.read([(self.address, start + length)], what, clamp=True)
            self._check_prefix(blob[: self.prefix])
            pages = self.written_pages(blob)
            spans = [self.page_span(int(p)) for p in pages]
            if spans and spans[-1][0] + spans[-1][1] > len(blob):
                raise UnsupportedIndexError(f"{what}: a written page lies past the end of the file")
            blobs = [blob[s : s + n] for s, n in spans]
        else:
            (head,) = await io.read([(self.address, self.prefix)], what)
            self._check_prefix(head)
            pages = self.written_pages(head)
            spans = [self.page_span(int(p)) for p in pages]
            blobs = await io.read([(self.address + s, n) for s, n in spans], "fixed array data block page")
        verify_checksums(blobs, "fixed array data block page")
        entries = concat_records(blobs, 0, self.entry_size, "fixed array data block page")
        counts = [(len(b) - CHECKSUM_SIZE) // self.entry_size for b in blobs]
        index = np.repeat(pages * self.page_nelmts, counts) + _ranges_within(counts)
        return entries, index.astype(np.int64)

    def _check_prefix(self, prefix: bytes) -> None:
        verify_checksums([prefix], "fixed array data block")
        check_block(prefix, b"FADB", self.client, self.header_address, self.sizeof_offsets, "fixed array data block")


def _ranges_within(counts: Sequence[int]) -> np.ndarray:
    """0..count-1 for each count, concatenated."""
    sizes = np.asarray(counts, np.int64)
    if not len(sizes):
        return np.zeros(0, np.int64)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.arange(int(sizes.sum()), dtype=np.int64) - starts
