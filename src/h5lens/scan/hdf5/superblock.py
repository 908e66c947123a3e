"""The superblock: where the HDF5 data starts, how wide addresses and lengths are, where it ends.

Specification: II.A "Disk Format: Level 0A - Format Signature and Superblock" (versions
0 to 3). libhdf5: H5Fsuper.c (``H5F__super_read``, which looks for the signature with
``H5FD_locate_signature`` and takes the base address from where it finds it) and
H5Fsuper_cache.c (the fields of each version).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from h5lens.scan.hdf5.checksum import CHECKSUM_SIZE, lookup3
from h5lens.scan.hdf5.fields import Cursor
from h5lens.scan.hdf5.model import ReadRanges, UnsupportedIndexError

SIGNATURE = b"\x89HDF\r\n\x1a\n"
SUPERBLOCK_PROBE_BYTES = 4096
# A superblock found past the first probe is read with this many bytes: more than any
# superblock takes (version 1 with 8-byte addresses, its root symbol table entry included: 100).
_SUPERBLOCK_BYTES = 256
DEFAULT_CHUNK_BTREE_K = 32  # libhdf5's "indexed storage internal node K" when none is stored


@dataclass(frozen=True)
class Superblock:
    """What the walker needs from the superblock."""

    version: int
    base_address: int  # absolute file offset that HDF5 addresses count from
    sizeof_offsets: int
    sizeof_lengths: int
    eof_address: int | None  # end of the HDF5 data, relative to the base; None if unknown
    root_address: int | None  # root group object header, relative to the base
    chunk_btree_k: int = DEFAULT_CHUNK_BTREE_K

    @property
    def undefined_address(self) -> int:
        return (1 << (8 * self.sizeof_offsets)) - 1


def superblock_offsets(limit: int) -> Iterator[int]:
    """Where a superblock may sit: 0, then 512 and every power of two after it, below ``limit``."""
    offset = 0
    while offset < limit:
        yield offset
        offset = 512 if offset == 0 else offset * 2


def read_superblock(data: bytes) -> Superblock:
    """Parse the superblock from the first bytes of a file (4 KiB covers userblocks up to 2 KiB)."""
    for offset in superblock_offsets(len(data)):
        if data[offset : offset + len(SIGNATURE)] == SIGNATURE:
            return parse_superblock(data, offset)
    raise UnsupportedIndexError(f"superblock: no HDF5 signature in the first {len(data)} bytes")


def parse_superblock(data: bytes, at: int, file_offset: int | None = None) -> Superblock:
    """The superblock whose signature is at ``data[at:]``, itself at ``file_offset`` in the file."""
    file_offset = at if file_offset is None else file_offset
    c = Cursor(data, at + len(SIGNATURE), "superblock")
    version = c.uint(1)
    if version in (0, 1):
        c.skip(3)  # free-space, root group symbol table entry and reserved versions
        c.skip(1)  # shared header message format version
        sizeof_offsets, sizeof_lengths = c.uint(1), c.uint(1)
        c.skip(1 + 2 + 2 + 4)  # reserved, group leaf/internal node K, consistency flags
        k = DEFAULT_CHUNK_BTREE_K
        if version == 1:
            k = c.uint(2)
            c.skip(2)
        _check_sizes(sizeof_offsets, sizeof_lengths)
        stored_base = c.uint(sizeof_offsets)
        c.skip(sizeof_offsets)  # free-space info address
        eof = c.uint(sizeof_offsets)
        c.skip(sizeof_offsets)  # driver information block address
        c.skip(sizeof_offsets)  # root symbol table entry: link name offset
        root = c.uint(sizeof_offsets)
    elif version in (2, 3):
        sizeof_offsets, sizeof_lengths = c.uint(1), c.uint(1)
        c.skip(1)  # file consistency flags
        _check_sizes(sizeof_offsets, sizeof_lengths)
        stored_base = c.uint(sizeof_offsets)
        c.skip(sizeof_offsets)  # superblock extension address (holds a non-default K if any)
        eof = c.uint(sizeof_offsets)
        root = c.uint(sizeof_offsets)
        stored = c.uint(CHECKSUM_SIZE)
        if lookup3(data[at : c.pos - CHECKSUM_SIZE]) != stored:
            raise UnsupportedIndexError("superblock: checksum mismatch")
        k = DEFAULT_CHUNK_BTREE_K
    else:
        raise UnsupportedIndexError(f"superblock version {version}")
    if k <= 0:
        raise UnsupportedIndexError(f"superblock: chunk B-tree K of {k}")
    undefined = (1 << (8 * sizeof_offsets)) - 1
    # libhdf5 takes the signature's position as the base and moves the EOF by as much
    # when the stored base disagrees (a file whose userblock was added or removed).
    eof_address = None if eof == undefined else eof - (stored_base - file_offset)
    return Superblock(
        version=version,
        base_address=file_offset,
        sizeof_offsets=sizeof_offsets,
        sizeof_lengths=sizeof_lengths,
        eof_address=eof_address,
        root_address=None if root == undefined else root,
        chunk_btree_k=k,
    )


def _check_sizes(sizeof_offsets: int, sizeof_lengths: int) -> None:
    if sizeof_offsets not in (2, 4, 8) or sizeof_lengths not in (2, 4, 8):
        raise UnsupportedIndexError(f"superblock: size of offsets {sizeof_offsets}, of lengths {sizeof_lengths}")


async def fetch_superblock(read_ranges: ReadRanges, file_size: int) -> Superblock:
    """Find and parse the superblock of a file of ``file_size`` bytes (two calls at most)."""
    (head,) = await read_ranges([(0, min(SUPERBLOCK_PROBE_BYTES, file_size))])
    head = bytes(head)
    try:
        return read_superblock(head)
    except UnsupportedIndexError:
        later = [o for o in superblock_offsets(file_size) if o >= SUPERBLOCK_PROBE_BYTES]
        if not later:
            raise
    blobs = await read_ranges([(o, min(_SUPERBLOCK_BYTES, file_size - o)) for o in later])
    for offset, blob in zip(later, blobs, strict=True):
        if bytes(blob[: len(SIGNATURE)]) == SIGNATURE:
            return parse_superblock(bytes(blob), 0, offset)
    raise UnsupportedIndexError(f"superblock: no HDF5 signature in {file_size} bytes")
