"""Our own HDF5 chunk-index walker: every chunked dataset's table, local or remote.

libhdf5 reads a chunk index one node at a time, each read waiting on the one
before it: over S3 that is one round trip per node. This walker reads the same
structures level by level instead: at each level it asks for every node it
needs in one ``read_ranges`` call, so a walk costs about the depth of the index
in round trips, whatever the number of nodes (and walks of many datasets run
together share those round trips: :mod:`h5lens.fetch.batches`). The table
comes back as numpy columns, never a Python object per chunk, which also makes
it the cheaper way to list a local file's chunks.

Written from the HDF5 File Format Specification (version 3; chunk indexes of
data layout messages 3, 4 and 5) and checked against libhdf5 (the tests compare
with ``DatasetID.chunk_iter``). Whatever it does not understand, or finds
inconsistent, raises :class:`UnsupportedIndexError` so that the caller falls
back to libhdf5: it never guesses.

Addresses inside an HDF5 file count from the superblock's base address (the
start of the HDF5 data, after any userblock). ``read_ranges`` receives absolute
file offsets as ``(offset, length)`` pairs and returns the bytes of each;
the table it produces holds absolute offsets too, like ``chunk_iter`` does.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

ReadRanges = Callable[[list[tuple[int, int]]], Awaitable[Sequence[bytes]]]

SIGNATURE = b"\x89HDF\r\n\x1a\n"
# One read usually holds a whole dataset object header; a bigger one costs a second read.
HEADER_PROBE_BYTES = 4096
SUPERBLOCK_PROBE_BYTES = 4096
# A paged fixed-array data block up to this size is read whole with its prefix (one round
# trip less); a bigger one is read prefix first, then only its initialised pages.
WHOLE_DATA_BLOCK_BYTES = 1 << 20
DEFAULT_CHUNK_BTREE_K = 32  # libhdf5's "indexed storage internal node K" when none is stored
_MAX_DEPTH = 64  # more levels than any real index: a loop in a corrupt file

_MSG_DATASPACE = 0x0001
_MSG_LAYOUT = 0x0008
_MSG_PIPELINE = 0x000B
_MSG_CONTINUATION = 0x0010
_MSG_FLAG_SHARED = 0x02

_INDEX_TYPES = {1: "single", 2: "implicit", 3: "fixed_array", 4: "extensible_array", 5: "btree_v2"}
_BTREE2_CHUNKS = 10  # v2 B-tree record type: chunks without filters
_BTREE2_FILTERED_CHUNKS = 11
_ARRAY_CHUNKS = 0  # fixed/extensible array client id: chunks without filters
_ARRAY_FILTERED_CHUNKS = 1
# Data layout message (v4+) chunk flags: H5O_LAYOUT_CHUNK_DONT_FILTER_PARTIAL_BOUND_CHUNKS,
# set by H5Pset_chunk_opts(H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS): partial edge chunks are
# stored as they are, without the pipeline's filters (and with a filter mask of 0).
LAYOUT_UNFILTERED_EDGES = 0x01
_LAYOUT_SINGLE_FILTERED = 0x02


class UnsupportedIndexError(Exception):
    """The walker met something it does not understand or that does not add up.

    The message names it; the caller falls back to libhdf5.
    """


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


@dataclass(frozen=True)
class ChunkIndex:
    """A dataset's chunk table, one row per allocated chunk, sorted by grid index."""

    grid_index: np.ndarray  # int64 (n, ndim): chunk offset / chunk shape
    address: np.ndarray  # uint64 (n,): absolute file offset of the stored chunk
    size: np.ndarray  # uint64 (n,): stored (filtered) size in bytes
    filter_mask: np.ndarray  # uint32 (n,): bit i set = filter i skipped for that chunk
    chunk_shape: tuple[int, ...]
    shape: tuple[int, ...]  # the dataspace's current dims
    maxshape: tuple[int | None, ...]  # None where unlimited
    element_size: int
    index_type: str  # btree_v1 | single | implicit | fixed_array | extensible_array | btree_v2
    layout_version: int
    filtered: bool
    reads: int  # read_ranges calls (round trips) the walk made
    unfiltered_edges: bool = False  # partial edge chunks are stored without the filters

    def partial_edges(self) -> np.ndarray:
        """Rows whose chunk reaches past the dataspace's current dims (a partial edge chunk)."""
        return partial_edge_rows(self.grid_index, self.chunk_shape, self.shape)

    def __len__(self) -> int:
        return len(self.address)


# --------------------------------------------------------------------------- small parsing tools


class _Cursor:
    """Reads little-endian fields in sequence; running off the end is an error, not a guess."""

    def __init__(self, data: bytes, pos: int, what: str) -> None:
        self.data, self.pos, self.what = data, pos, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise UnsupportedIndexError(f"{self.what}: truncated at byte {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def skip(self, n: int) -> None:
        self.take(n)


def _records(data: bytes, offset: int, count: int, size: int, what: str) -> np.ndarray:
    """``count`` fixed-size records at ``offset`` as a (count, size) uint8 view."""
    if offset + count * size > len(data):
        raise UnsupportedIndexError(f"{what}: truncated ({count} records of {size} bytes at {offset})")
    return np.frombuffer(data, np.uint8, count * size, offset).reshape(count, size)


def _le_columns(columns: np.ndarray) -> np.ndarray:
    """Little-endian unsigned integers of any width from 1 to 8 bytes, one per row."""
    rows, width = columns.shape
    if width == 8:
        return np.ascontiguousarray(columns).view("<u8").reshape(rows).astype(np.uint64)
    padded = np.zeros((rows, 8), np.uint8)
    padded[:, :width] = columns
    return padded.view("<u8").reshape(rows).astype(np.uint64)


def _enc_size(value: int) -> int:
    """Bytes libhdf5 uses to encode counts up to ``value`` (H5VM_limit_enc_size)."""
    return (max(value, 1).bit_length() - 1) // 8 + 1


def _chunk_size_width(chunk_bytes: int) -> int:
    """Width of a filtered chunk's size field in layout-4 indexes: one byte of headroom, at most 8."""
    return min(8, 1 + ((max(chunk_bytes, 1).bit_length() - 1) + 8) // 8)


# --------------------------------------------------------------------------- Jenkins lookup3


# The hash as published (hashlittle), in two versions: numpy arrays, one lane per blob,
# and Python integers for a few blobs, where numpy's per-call overhead dominates.
# Each step of the tables below is x -= z; x ^= rot(z, k); z += y (mix) and
# x ^= y; x -= rot(y, k) (final).
_MIX = ((0, 2, 1, 4), (1, 0, 2, 6), (2, 1, 0, 8), (0, 2, 1, 16), (1, 0, 2, 19), (2, 1, 0, 4))
_FINAL = ((2, 1, 14), (0, 2, 11), (1, 0, 25), (2, 1, 16), (0, 2, 4), (1, 0, 14), (2, 1, 24))
_M32 = 0xFFFFFFFF
_VECTOR_LOOKUP3_MIN = 16  # from this many blobs on, numpy lanes beat Python integers


def _rot(x: np.ndarray, k: int) -> np.ndarray:
    return (x << np.uint32(k)) | (x >> np.uint32(32 - k))


def _mix(abc: list[np.ndarray]) -> None:
    for x, z, y, k in _MIX:
        abc[x] -= abc[z]
        abc[x] ^= _rot(abc[z], k)
        abc[z] += abc[y]


def _final(abc: list[np.ndarray]) -> None:
    for x, y, k in _FINAL:
        abc[x] ^= abc[y]
        abc[x] -= _rot(abc[y], k)


def _lookup3_int(data: bytes | memoryview) -> int:
    """lookup3 of one blob with Python integers."""
    n = len(data)
    init = (0xDEADBEEF + n) & _M32
    if n == 0:
        return init
    full = (n - 1) // 12  # blocks mixed before the (zero-padded) tail block
    words = np.frombuffer(bytes(data) + bytes(12 * (full + 1) - n), "<u4").tolist()

    def rot(v: int, k: int) -> int:
        return ((v << k) | (v >> (32 - k))) & _M32

    abc = [init, init, init]
    for j in range(0, 3 * (full + 1), 3):
        abc = [(abc[i] + words[j + i]) & _M32 for i in range(3)]
        if j == 3 * full:
            break
        for x, z, y, k in _MIX:
            abc[x] = ((abc[x] - abc[z]) & _M32) ^ rot(abc[z], k)
            abc[z] = (abc[z] + abc[y]) & _M32
    for x, y, k in _FINAL:
        abc[x] = ((abc[x] ^ abc[y]) - rot(abc[y], k)) & _M32
    return abc[2]


def lookup3_many(blobs: Sequence[bytes | memoryview]) -> np.ndarray:
    """HDF5's metadata checksum (Jenkins lookup3 ``hashlittle``, initval 0) of each blob.

    The hash is sequential within a blob, so the work is vectorised across blobs:
    one numpy pass per 12-byte block over all blobs still that long. Blobs are
    sorted longest first so that the blobs still hashing are always a prefix.
    """
    n = len(blobs)
    if n < _VECTOR_LOOKUP3_MIN:
        return np.fromiter((_lookup3_int(b) for b in blobs), np.uint32, n)
    lengths = np.fromiter((len(b) for b in blobs), np.int64, n)
    order = np.argsort(-lengths, kind="stable")
    lengths = lengths[order]
    full_blocks = np.where(lengths > 0, (lengths - 1) // 12, 0)  # blocks mixed before the tail
    nblocks = int(full_blocks[0]) + 1
    raw = np.zeros((n, nblocks * 12), np.uint8)  # zero padding = the tail's missing bytes
    for row, which in enumerate(order.tolist()):
        raw[row, : lengths[row]] = np.frombuffer(blobs[which], np.uint8)
    words = raw.view("<u4").reshape(n, nblocks, 3).astype(np.uint32)
    init = ((0xDEADBEEF + lengths) & _M32).astype(np.uint32)
    abc = [init.copy(), init.copy(), init.copy()]
    still = n - np.cumsum(np.bincount(full_blocks, minlength=nblocks))  # blobs with > j full blocks
    for j in range(nblocks - 1):
        k = int(still[j])
        lanes = [v[:k] for v in abc]  # views: the rounds update abc in place
        for i in range(3):
            lanes[i] += words[:k, j, i]
        _mix(lanes)
    tail = words[np.arange(n), full_blocks]
    for i in range(3):
        abc[i] += tail[:, i]
    _final(abc)
    out = np.empty(n, np.uint32)
    out[order] = np.where(lengths > 0, abc[2], init)  # an empty blob hashes to the initial value
    return out


def lookup3(data: bytes) -> int:
    return int(lookup3_many([data])[0])


def _verify_checksums(blobs: Sequence[bytes], what: str) -> None:
    """Each blob ends with the lookup3 checksum of the bytes before it."""
    if not blobs:
        return
    computed = lookup3_many([memoryview(b)[:-4] for b in blobs])
    stored = np.fromiter((int.from_bytes(b[-4:], "little") for b in blobs), np.uint32, len(blobs))
    bad = np.flatnonzero(computed != stored)
    if len(bad):
        raise UnsupportedIndexError(f"{what}: checksum mismatch ({len(bad)} of {len(blobs)})")


# --------------------------------------------------------------------------- superblock


def superblock_offsets(limit: int) -> Iterator[int]:
    """Where a superblock may sit: 0, then 512 and every power of two after it, below ``limit``."""
    offset = 0
    while offset < limit:
        yield offset
        offset = 512 if offset == 0 else offset * 2


def read_superblock(data: bytes) -> Superblock:
    """Parse the superblock from the first bytes of a file (4 KiB covers userblocks up to 2 KiB)."""
    for offset in superblock_offsets(len(data)):
        if data[offset : offset + 8] == SIGNATURE:
            return _parse_superblock(data, offset)
    raise UnsupportedIndexError(f"superblock: no HDF5 signature in the first {len(data)} bytes")


def _parse_superblock(data: bytes, at: int, file_offset: int | None = None) -> Superblock:
    """The superblock whose signature is at ``data[at:]``, itself at ``file_offset`` in the file."""
    file_offset = at if file_offset is None else file_offset
    c = _Cursor(data, at + 8, "superblock")
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
        stored = c.uint(4)
        if lookup3(data[at : c.pos - 4]) != stored:
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


# --------------------------------------------------------------------------- reads, one call per level


class _Io:
    """Relative HDF5 addresses → absolute ranges; one ``read_ranges`` call per level."""

    def __init__(self, read_ranges: ReadRanges, superblock: Superblock, file_size: int | None) -> None:
        self.read_ranges = read_ranges
        self.sb = superblock
        self.base = superblock.base_address
        ends = []
        if superblock.eof_address is not None:
            ends.append(self.base + superblock.eof_address)
        if file_size is not None:
            ends.append(file_size)
        self.end = min(ends) if ends else None
        self.calls = 0

    async def read(self, spans: Sequence[tuple[int, int]], what: str, *, clamp: bool = False) -> list[bytes]:
        """Read ``(address, length)`` spans; ``clamp`` lets a speculative span stop at the end of file."""
        ranges = []
        for address, length in spans:
            if address == self.sb.undefined_address:
                raise UnsupportedIndexError(f"{what}: undefined address")
            start = self.base + address
            if self.end is not None and start + length > self.end:
                if not clamp or start >= self.end:
                    raise UnsupportedIndexError(f"{what} at address {address} runs past the end of the file")
                length = self.end - start
            ranges.append((start, length))
        if not ranges:
            return []
        self.calls += 1
        blobs = await self.read_ranges(ranges)
        if len(blobs) != len(ranges):
            raise UnsupportedIndexError(f"{what}: the reader returned {len(blobs)} ranges for {len(ranges)}")
        out = []
        for (start, length), blob in zip(ranges, blobs, strict=True):
            blob = blob if isinstance(blob, bytes) else bytes(blob)
            if len(blob) > length or (len(blob) < length and not clamp):
                raise UnsupportedIndexError(f"{what}: read {len(blob)} bytes of {length} at offset {start}")
            out.append(blob)
        return out


# --------------------------------------------------------------------------- object header


@dataclass(frozen=True)
class _Message:
    type: int
    flags: int
    data: bytes


_V1_MESSAGE = struct.Struct("<HHB")  # type, size, flags (then 3 reserved bytes)
_V2_MESSAGE = struct.Struct("<BHB")  # type, size, flags


class _HeaderBlocks:
    """Splits object header blocks into messages, setting continuation messages aside."""

    def __init__(self, sb: Superblock) -> None:
        self.sb = sb
        self.messages: list[_Message] = []
        self.pending: list[tuple[int, int]] = []  # continuation blocks still to read

    def add(self, mtype: int, flags: int, body: bytes) -> None:
        if mtype == _MSG_CONTINUATION:
            c = _Cursor(body, 0, "object header continuation message")
            self.pending.append((c.uint(self.sb.sizeof_offsets), c.uint(self.sb.sizeof_lengths)))
        else:
            self.messages.append(_Message(mtype, flags, body))

    def v1(self, data: bytes, start: int, end: int) -> None:
        """Version 1 messages: type (2), size (2), flags (1), reserved (3), body."""
        pos = start
        while pos + 8 <= end:
            mtype, size, flags = _V1_MESSAGE.unpack_from(data, pos)
            if pos + 8 + size > end:
                raise UnsupportedIndexError("object header v1: a message runs past its block")
            self.add(mtype, flags, data[pos + 8 : pos + 8 + size])
            pos += 8 + size

    def v2(self, data: bytes, start: int, end: int, header_flags: int) -> None:
        """Version 2 messages: type (1), size (2), flags (1), [creation order (2)], body."""
        header_size = 6 if header_flags & 0x04 else 4
        pos = start
        while end - pos >= header_size:  # fewer bytes than a message header left: a gap
            mtype, size, flags = _V2_MESSAGE.unpack_from(data, pos)
            body = pos + header_size
            if body + size > end:
                raise UnsupportedIndexError("object header v2: a message runs past its block")
            self.add(mtype, flags, data[body : body + size])
            pos = body + size


async def _read_object_header(io: _Io, address: int) -> list[_Message]:
    """Every message of an object header (version 1 or 2), continuation blocks included.

    The first read takes a guess at the header's size; continuation blocks are then
    read level by level (a block may point at further blocks).
    """
    blocks = _HeaderBlocks(io.sb)
    (probe,) = await io.read([(address, HEADER_PROBE_BYTES)], "object header", clamp=True)
    if probe[:4] == b"OHDR":
        flags = await _header_v2(io, address, probe, blocks)
    elif probe[:1] == b"\x01":
        flags = None
        await _header_v1(io, address, probe, blocks)
    else:
        raise UnsupportedIndexError(f"object header at {address}: unknown version {probe[:4]!r}")
    seen = {address}
    for _ in range(_MAX_DEPTH):
        pending, blocks.pending = blocks.pending, []
        if not pending:
            return blocks.messages
        if any(addr in seen for addr, _ in pending):
            raise UnsupportedIndexError(f"object header at {address}: continuation blocks form a loop")
        seen.update(addr for addr, _ in pending)
        for block in await io.read(pending, "object header continuation block"):
            if flags is None:
                blocks.v1(block, 0, len(block))
                continue
            if block[:4] != b"OCHK":
                raise UnsupportedIndexError("object header continuation block: no OCHK signature")
            _verify_checksums([block], "object header continuation block")
            blocks.v2(block, 4, len(block) - 4, flags)
    raise UnsupportedIndexError(f"object header at {address}: too many continuation levels")


async def _header_v1(io: _Io, address: int, probe: bytes, blocks: _HeaderBlocks) -> None:
    c = _Cursor(probe, 1, "object header v1")
    c.skip(1 + 2 + 4)  # reserved, number of messages, reference count
    size = c.uint(4)
    # The 12-byte prefix is padded to 16 so that messages stay 8-byte aligned.
    if len(probe) < 16 + size:
        (probe,) = await io.read([(address, 16 + size)], "object header")
    blocks.v1(probe, 16, 16 + size)


async def _header_v2(io: _Io, address: int, probe: bytes, blocks: _HeaderBlocks) -> int:
    c = _Cursor(probe, 4, "object header v2")
    if c.uint(1) != 2:
        raise UnsupportedIndexError("object header: OHDR version is not 2")
    flags = c.uint(1)
    if flags & 0xC0:
        raise UnsupportedIndexError(f"object header v2: unknown flags {flags:#x}")
    if flags & 0x20:
        c.skip(16)  # access, modification, change and birth times
    if flags & 0x10:
        c.skip(4)  # attribute storage phase change values
    size = c.uint(1 << (flags & 0x03))
    end = c.pos + size
    if len(probe) < end + 4:
        (probe,) = await io.read([(address, end + 4)], "object header")
    _verify_checksums([probe[: end + 4]], "object header v2")
    blocks.v2(probe, c.pos, end, flags)
    return flags


def _optional_message(messages: list[_Message], mtype: int, name: str) -> _Message | None:
    found = [m for m in messages if m.type == mtype]
    if len(found) > 1:
        raise UnsupportedIndexError(f"object header: {len(found)} {name} messages")
    if found and found[0].flags & _MSG_FLAG_SHARED:
        raise UnsupportedIndexError(f"object header: shared {name} message")
    return found[0] if found else None


def _message(messages: list[_Message], mtype: int, name: str) -> _Message:
    found = _optional_message(messages, mtype, name)
    if found is None:
        raise UnsupportedIndexError(f"object header: no {name} message (not a dataset?)")
    return found


# --------------------------------------------------------------------------- header messages


@dataclass(frozen=True)
class _Dataspace:
    shape: tuple[int, ...]
    maxshape: tuple[int | None, ...]


def _parse_dataspace(data: bytes, sb: Superblock) -> _Dataspace:
    c = _Cursor(data, 0, "dataspace message")
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
    if flags & 0x01:
        maxshape = tuple(None if m == unlimited else m for m in (c.uint(n) for _ in range(rank)))
    else:
        maxshape = shape
    return _Dataspace(shape, maxshape)


def _count_filters(message: _Message | None) -> int:
    """Only how many filters the pipeline has: it decides which index entries carry sizes."""
    if message is None:
        return 0
    c = _Cursor(message.data, 0, "filter pipeline message")
    version, nfilters = c.uint(1), c.uint(1)
    if version not in (1, 2):
        raise UnsupportedIndexError(f"filter pipeline message version {version}")
    return nfilters


@dataclass(frozen=True)
class _Layout:
    version: int
    index_type: str
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


def _parse_layout(data: bytes, sb: Superblock) -> _Layout:
    c = _Cursor(data, 0, "data layout message")
    version = c.uint(1)
    if version not in (3, 4, 5):
        raise UnsupportedIndexError(f"data layout message version {version}")
    layout_class = c.uint(1)
    if layout_class != 2:
        name = {0: "compact", 1: "contiguous", 3: "virtual"}.get(layout_class, f"class {layout_class}")
        raise UnsupportedIndexError(f"{name} layout has no chunk index")
    if version == 3:
        ndims = c.uint(1)
        address = c.uint(sb.sizeof_offsets)
        dims = [c.uint(4) for _ in range(ndims)]
        return _layout(version, "btree_v1", address, dims)
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
    if index_type == "single" and flags & _LAYOUT_SINGLE_FILTERED:
        single_size, single_mask = c.uint(sb.sizeof_lengths), c.uint(4)
    elif index_type == "fixed_array":
        params = (c.uint(1),)  # log2 of elements per data block page
    elif index_type == "extensible_array":
        # max elements bits, index block elements, super block min data pointers,
        # data block min elements, log2 of elements per data block page
        params = tuple(c.uint(1) for _ in range(5))
    elif index_type == "btree_v2":
        params = (c.uint(4), c.uint(1), c.uint(1))  # node size, split and merge percent
    address = c.uint(sb.sizeof_offsets)
    return _layout(version, index_type, address, dims, flags, params, single_size, single_mask)


def _layout(version: int, index_type: str, address: int, dims: list[int], *rest: Any) -> _Layout:
    # The last "dimension" of a chunk is the size of one element.
    if len(dims) < 2 or min(dims) == 0:
        raise UnsupportedIndexError(f"data layout: chunk dimensions {dims}")
    return _Layout(version, index_type, address, tuple(dims[:-1]), dims[-1], *rest)


# --------------------------------------------------------------------------- the dataset's geometry


@dataclass(frozen=True)
class _Dataset:
    space: _Dataspace
    layout: _Layout
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
            None if m is None else -(-m // c)
            for m, c in zip(self.space.maxshape, self.layout.chunk_shape, strict=True)
        )


def _bounded(grid: tuple[int | None, ...]) -> tuple[int, ...] | None:
    """``grid`` if no dimension of it is unlimited (None), else None."""
    bounded = tuple(n for n in grid if n is not None)
    return bounded if len(bounded) == len(grid) else None


def _unravel(index: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """Row-major grid coordinates of linear indexes (the first dimension may be unbounded)."""
    out = np.zeros((len(index), len(dims)), np.int64)
    rest = index.astype(np.int64)
    for axis in range(len(dims)):
        down = math.prod(dims[axis + 1 :])
        if down > np.iinfo(np.int64).max:  # every index is below it: coordinate 0 here
            continue
        out[:, axis], rest = np.divmod(rest, down)
    return out


@dataclass
class _Chunks:
    """Chunks as found, before they become a ChunkIndex (addresses still relative)."""

    grid: np.ndarray
    address: np.ndarray
    size: np.ndarray
    mask: np.ndarray

    @classmethod
    def empty(cls, rank: int) -> _Chunks:
        nothing = np.zeros(0, np.uint64)
        return cls(np.zeros((0, rank), np.int64), nothing, nothing, np.zeros(0, np.uint32))

    @classmethod
    def concat(cls, parts: list[_Chunks], rank: int) -> _Chunks:
        if not parts:
            return cls.empty(rank)
        return cls(
            np.concatenate([p.grid for p in parts]),
            np.concatenate([p.address for p in parts]),
            np.concatenate([p.size for p in parts]),
            np.concatenate([p.mask for p in parts]),
        )


def _check_filtered(filtered: bool, ds: _Dataset, what: str) -> None:
    if filtered != (ds.nfilters > 0):
        raise UnsupportedIndexError(
            f"{what} says chunks are {'' if filtered else 'un'}filtered, the pipeline has {ds.nfilters} filters"
        )


# --------------------------------------------------------------------------- array entries (FA, EA)


def _size_width(entry_size: int, filtered: bool, ds: _Dataset, sb: Superblock, what: str) -> int:
    """Width of the chunk-size field in an index entry, from the entry size the index declares.

    Layout 4 sizes it from the chunk's byte count (one byte of headroom); layout 5
    (libhdf5 2.0) makes it "size of lengths" wide, so that a filter may grow a chunk.
    """
    if not filtered:
        if entry_size != sb.sizeof_offsets:
            raise UnsupportedIndexError(f"{what}: {entry_size}-byte entries for unfiltered chunks")
        return 0
    width = entry_size - sb.sizeof_offsets - 4
    expected = _chunk_size_width(ds.layout.chunk_bytes)
    if width != (expected if ds.layout.version == 4 else sb.sizeof_lengths):
        raise UnsupportedIndexError(f"{what}: {width}-byte chunk sizes with layout version {ds.layout.version}")
    return width


@dataclass
class _Entries:
    """Array entries that point at a chunk, with each one's element index in the array."""

    index: np.ndarray  # int64
    address: np.ndarray
    size: np.ndarray
    mask: np.ndarray

    def chunks(self, grid: np.ndarray) -> _Chunks:
        return _Chunks(grid, self.address, self.size, self.mask)


def _array_entries(entries: np.ndarray, index: np.ndarray, width: int, ds: _Dataset, sb: Superblock) -> _Entries:
    """Decode fixed/extensible array entries: the chunk address, then (filtered only) size and mask."""
    o = sb.sizeof_offsets
    address = _le_columns(entries[:, :o])
    written = address != np.uint64(sb.undefined_address)
    address, entries, index = address[written], entries[written], index[written]
    if width:
        size = _le_columns(entries[:, o : o + width])
        mask = _le_columns(entries[:, o + width : o + width + 4]).astype(np.uint32)
    else:
        size = np.full(len(address), ds.layout.chunk_bytes, np.uint64)
        mask = np.zeros(len(address), np.uint32)
    return _Entries(index, address, size, mask)


def _concat_records(blobs: Sequence[bytes], offset: int, entry_size: int, what: str) -> np.ndarray:
    """Entries of equal size from several blobs, each holding them from ``offset`` to its checksum."""
    parts = [_records(b, offset, (len(b) - offset - 4) // entry_size, entry_size, what) for b in blobs]
    return np.concatenate(parts) if parts else np.zeros((0, entry_size), np.uint8)


def _array_client(client: int, what: str) -> bool:
    if client not in (_ARRAY_CHUNKS, _ARRAY_FILTERED_CHUNKS):
        raise UnsupportedIndexError(f"{what}: client id {client} is not a chunk index")
    return client == _ARRAY_FILTERED_CHUNKS


def _check_block(blob: bytes, signature: bytes, client: int, header_address: int, o: int, what: str) -> None:
    """Signature, version 0, the header's client id and the owning header's address."""
    c = _Cursor(blob, 0, what)
    if c.take(4) != signature or c.uint(1) != 0:
        raise UnsupportedIndexError(f"{what}: bad signature or version")
    if c.uint(1) != client:
        raise UnsupportedIndexError(f"{what}: client id differs from its header's")
    if c.uint(o) != header_address:
        raise UnsupportedIndexError(f"{what}: belongs to another array")


def _initialised_pages(bitmap: bytes, npages: int) -> np.ndarray:
    """Pages written at least once; libhdf5 counts the bitmap from each byte's top bit."""
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8))
    return np.flatnonzero(bits[:npages])


# --------------------------------------------------------------------------- v1 B-tree (layout 3)


async def _walk_btree_v1(io: _Io, ds: _Dataset) -> _Chunks:
    """Version-1 B-tree of raw data chunks (node type 1), read a level at a time.

    A node: "TREE", type, level, entries used, two sibling addresses, then keys and
    child addresses interleaved. A chunk key: stored size (4), filter mask (4), and
    the chunk's offset in elements along each dimension plus a 0 for the element.
    """
    sb, layout = io.sb, ds.layout
    if layout.address == sb.undefined_address:
        return _Chunks.empty(ds.rank)
    o = sb.sizeof_offsets
    key = 8 + 8 * (ds.rank + 1)
    prefix = 8 + 2 * o

    def node_bytes(entries: int) -> int:
        return prefix + entries * (key + o) + key

    nodes: list[int] = [layout.address]
    level: int | None = None
    seen: set[int] = set()
    leaves: list[_Chunks] = []
    for _ in range(_MAX_DEPTH):
        if not nodes:
            return _Chunks.concat(leaves, ds.rank)
        if seen.intersection(nodes) or len(set(nodes)) != len(nodes):
            raise UnsupportedIndexError("v1 B-tree: a node is reached twice")
        seen.update(nodes)
        # Nodes are allocated for 2K entries; a file with a bigger K shows it in "entries used".
        blobs = await io.read([(a, node_bytes(2 * sb.chunk_btree_k)) for a in nodes], "v1 B-tree node", clamp=True)
        short = [i for i, b in enumerate(blobs) if len(b) < prefix or len(b) < node_bytes(_le(b, 6, 2))]
        if short:
            again = await io.read([(nodes[i], node_bytes(_le(blobs[i], 6, 2))) for i in short], "v1 B-tree node")
            for i, blob in zip(short, again, strict=True):
                blobs[i] = blob
        level = _btree_v1_level(blobs, level)
        # One array of every entry of the level: decoded at once, not node by node.
        records = np.concatenate([_records(b, prefix, _le(b, 6, 2), key + o, "v1 B-tree node") for b in blobs])
        if level > 0:
            nodes = _le_columns(records[:, key:]).tolist()
            continue
        leaves.append(_btree_v1_chunks(records, key, ds, sb))
        nodes = []
    raise UnsupportedIndexError("v1 B-tree: deeper than any real index")


def _le(data: bytes, pos: int, size: int) -> int:
    return int.from_bytes(data[pos : pos + size], "little") if len(data) >= pos + size else 0


def _btree_v1_level(blobs: list[bytes], parent_level: int | None) -> int:
    levels = set()
    for blob in blobs:
        if blob[:4] != b"TREE" or blob[4] != 1:
            raise UnsupportedIndexError("v1 B-tree: not a raw data chunk node (TREE, type 1)")
        levels.add(blob[5])
    if len(levels) != 1:
        raise UnsupportedIndexError(f"v1 B-tree: nodes of levels {sorted(levels)} side by side")
    (level,) = levels
    if parent_level is not None and level != parent_level - 1:
        raise UnsupportedIndexError(f"v1 B-tree: a level-{level} node under a level-{parent_level} node")
    return level


def _btree_v1_chunks(records: np.ndarray, key: int, ds: _Dataset, sb: Superblock) -> _Chunks:
    rank = ds.rank
    size = _le_columns(records[:, 0:4])
    mask = _le_columns(records[:, 4:8]).astype(np.uint32)
    offsets = records[:, 8:key].copy().view("<u8").reshape(len(records), rank + 1)
    if np.any(offsets[:, rank] != 0):
        raise UnsupportedIndexError("v1 B-tree: a chunk key with a non-zero element offset")
    chunk = np.asarray(ds.layout.chunk_shape, np.uint64)
    if np.any(offsets[:, :rank] % chunk):
        raise UnsupportedIndexError("v1 B-tree: a chunk offset that is not a multiple of the chunk shape")
    grid = (offsets[:, :rank] // chunk).astype(np.int64)
    return _Chunks(grid, _le_columns(records[:, key:]), size, mask)


# --------------------------------------------------------------------------- single chunk, implicit


async def _walk_single(io: _Io, ds: _Dataset) -> _Chunks:
    layout, sb = ds.layout, io.sb
    _check_filtered(layout.single_size is not None, ds, "single chunk index")
    # libhdf5 only picks this index when the chunk is the dataset at its maximum size.
    if ds.max_grid != (1,) * ds.rank:
        raise UnsupportedIndexError(f"single chunk index for a grid of {ds.max_grid} chunks")
    if layout.address == sb.undefined_address:
        return _Chunks.empty(ds.rank)
    size = layout.chunk_bytes if layout.single_size is None else layout.single_size
    return _Chunks(
        np.zeros((1, ds.rank), np.int64),
        np.array([layout.address], np.uint64),
        np.array([size], np.uint64),
        np.array([layout.single_mask], np.uint32),
    )


async def _walk_implicit(io: _Io, ds: _Dataset) -> _Chunks:
    """No index: every chunk of the current grid sits at its place in one allocation.

    Chunk addresses step in row-major order over the grid at the *maximum* size,
    while the chunks that exist are those of the current grid (as libhdf5 iterates).
    """
    layout, sb = ds.layout, io.sb
    _check_filtered(False, ds, "implicit index")
    if layout.address == sb.undefined_address or math.prod(ds.grid) == 0:
        return _Chunks.empty(ds.rank)
    max_grid = _bounded(ds.max_grid)
    if max_grid is None:
        raise UnsupportedIndexError("implicit index with an unlimited dimension")
    grid = np.indices(ds.grid).reshape(ds.rank, -1).T.astype(np.int64)
    linear = np.asarray(np.ravel_multi_index(tuple(grid.T), max_grid))
    address = np.uint64(layout.address) + linear.astype(np.uint64) * np.uint64(layout.chunk_bytes)
    n = len(grid)
    return _Chunks(grid, address, np.full(n, layout.chunk_bytes, np.uint64), np.zeros(n, np.uint32))


# --------------------------------------------------------------------------- fixed array


async def _walk_fixed_array(io: _Io, ds: _Dataset) -> _Chunks:
    """Header "FAHD", then one data block "FADB" holding the entries inline or in pages.

    Entry i is the chunk at row-major position i of the grid at the maximum size.
    """
    sb, o, n = io.sb, io.sb.sizeof_offsets, io.sb.sizeof_lengths
    if ds.layout.address == sb.undefined_address:
        return _Chunks.empty(ds.rank)
    (header,) = await io.read([(ds.layout.address, 8 + n + o + 4)], "fixed array header")
    _verify_checksums([header], "fixed array header")
    c = _Cursor(header, 0, "fixed array header")
    if c.take(4) != b"FAHD" or c.uint(1) != 0:
        raise UnsupportedIndexError("fixed array header: bad signature or version")
    client, entry_size, page_bits = c.uint(1), c.uint(1), c.uint(1)
    nelmts, block_address = c.uint(n), c.uint(o)
    filtered = _array_client(client, "fixed array")
    _check_filtered(filtered, ds, "fixed array")
    width = _size_width(entry_size, filtered, ds, sb, "fixed array")
    if (page_bits,) != ds.layout.params:
        raise UnsupportedIndexError("fixed array: page size differs from the data layout message's")
    max_grid = _bounded(ds.max_grid)
    if max_grid is None or nelmts != math.prod(max_grid):
        raise UnsupportedIndexError(f"fixed array of {nelmts} entries for a grid of {ds.max_grid} chunks")
    if block_address == sb.undefined_address:
        return _Chunks.empty(ds.rank)
    block = _FixedArrayBlock(ds.layout.address, block_address, client, nelmts, entry_size, page_bits, o)
    entries, index = await block.read(io)
    found = _array_entries(entries, index, width, ds, sb)
    return found.chunks(_unravel(found.index, max_grid))


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
        return 6 + self.sizeof_offsets

    @property
    def prefix(self) -> int:
        """Signature, version, client, header address, page bitmap (if paged), checksum."""
        return self.bitmap_at + (self.npages + 7) // 8 + 4

    def page_span(self, page: int) -> tuple[int, int]:
        """(offset in the block, length) of a page: its entries, then their checksum."""
        full = self.page_nelmts * self.entry_size + 4
        count = min(self.page_nelmts, self.nelmts - page * self.page_nelmts)
        return self.prefix + page * full, count * self.entry_size + 4

    async def read(self, io: _Io) -> tuple[np.ndarray, np.ndarray]:
        """Every entry of the written pages, (n, entry_size), with its element index."""
        what = "fixed array data block"
        if not self.npages:
            (blob,) = await io.read([(self.address, self.prefix + self.nelmts * self.entry_size)], what)
            self._check_prefix(blob)
            entries = _records(blob, self.bitmap_at, self.nelmts, self.entry_size, what)
            return entries, np.arange(self.nelmts, dtype=np.int64)
        start, length = self.page_span(self.npages - 1)
        if start + length <= WHOLE_DATA_BLOCK_BYTES:
            # One read for the prefix and every page; pages never written may lie past the EOF.
            (blob,) = await io.read([(self.address, start + length)], what, clamp=True)
            self._check_prefix(blob[: self.prefix])
            pages = _initialised_pages(blob[self.bitmap_at : self.prefix - 4], self.npages)
            spans = [self.page_span(int(p)) for p in pages]
            if spans and spans[-1][0] + spans[-1][1] > len(blob):
                raise UnsupportedIndexError(f"{what}: a written page lies past the end of the file")
            blobs = [blob[s : s + n] for s, n in spans]
        else:
            (head,) = await io.read([(self.address, self.prefix)], what)
            self._check_prefix(head)
            pages = _initialised_pages(head[self.bitmap_at : self.prefix - 4], self.npages)
            spans = [self.page_span(int(p)) for p in pages]
            blobs = await io.read([(self.address + s, n) for s, n in spans], "fixed array data block page")
        _verify_checksums(blobs, "fixed array data block page")
        entries = _concat_records(blobs, 0, self.entry_size, "fixed array data block page")
        counts = [(len(b) - 4) // self.entry_size for b in blobs]
        index = np.repeat(pages * self.page_nelmts, counts) + _ranges_within(counts)
        return entries, index.astype(np.int64)

    def _check_prefix(self, prefix: bytes) -> None:
        _verify_checksums([prefix], "fixed array data block")
        _check_block(prefix, b"FADB", self.client, self.header_address, self.sizeof_offsets, "fixed array data block")


def _ranges_within(counts: Sequence[int]) -> np.ndarray:
    """0..count-1 for each count, concatenated."""
    sizes = np.asarray(counts, np.int64)
    if not len(sizes):
        return np.zeros(0, np.int64)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.arange(int(sizes.sum()), dtype=np.int64) - starts


# --------------------------------------------------------------------------- extensible array


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

    def superblocks(self) -> Iterator[tuple[int, int, int, int]]:
        """(super block, data blocks, elements per data block, first element) for each."""
        start = self.idx_blk_elmts
        for u in range(self.nsblks):
            ndblks, nelmts = 1 << (u // 2), (1 << ((u + 1) // 2)) * self.dblk_min_elmts
            yield u, ndblks, nelmts, start
            start += ndblks * nelmts

    def dblock_prefix(self) -> int:
        """Signature, version, client, header address, block offset and checksum."""
        return 6 + self.sizeof_offsets + self.offset_size + 4

    def npages(self, dblk_nelmts: int) -> int:
        return dblk_nelmts // self.page_nelmts if dblk_nelmts > self.page_nelmts else 0


# Entries found so far: (entries as (n, entry size) bytes, each one's element index).
_Found = list[tuple[np.ndarray, np.ndarray]]


async def _walk_extensible_array(io: _Io, ds: _Dataset) -> _Chunks:
    """Header, index block, super blocks (+ the index block's data blocks), data blocks."""
    sb = io.sb
    if ds.layout.address == sb.undefined_address:
        return _Chunks.empty(ds.rank)
    ea, filtered = await _read_extensible_header(io, ds)
    width = _size_width(ea.entry_size, filtered, ds, sb, "extensible array")
    if ea.iblock_address == sb.undefined_address or ea.max_idx_set == 0:
        return _Chunks.empty(ds.rank)
    found: _Found = []
    dblk_addrs, sblk_addrs = await _read_index_block(io, ea, found)
    direct, supers = _second_level(ea, dblk_addrs, sblk_addrs)
    sblock_blobs = await _read_second_level(io, ea, direct, supers, found)
    await _read_super_blocks_data(io, ea, supers, sblock_blobs, found)
    entries = np.concatenate([entries for entries, _ in found])
    index = np.concatenate([index for _, index in found]).astype(np.int64)
    chunks = _array_entries(entries, index, width, ds, sb)
    return chunks.chunks(_extensible_grid(chunks.index, ds))


async def _read_index_block(io: _Io, ea: _ExtensibleArray, found: _Found) -> tuple[list[int], list[int]]:
    """The index block's own entries (into ``found``), and its data and super block addresses."""
    o, es = ea.sizeof_offsets, ea.entry_size
    ndblk_addrs = 2 * (ea.sblk_min_dblk_ptrs - 1)
    nsblk_addrs = ea.nsblks - ea.iblock_nsblks
    size = 6 + o + ea.idx_blk_elmts * es + (ndblk_addrs + nsblk_addrs) * o + 4
    (iblock,) = await io.read([(ea.iblock_address, size)], "extensible array index block")
    _verify_checksums([iblock], "extensible array index block")
    _check_block(iblock, b"EAIB", ea.client, ea.address, o, "extensible array index block")
    at = 6 + o
    found.append((_records(iblock, at, ea.idx_blk_elmts, es, "index block"), np.arange(ea.idx_blk_elmts)))
    at += ea.idx_blk_elmts * es
    dblk_addrs = _le_columns(_records(iblock, at, ndblk_addrs, o, "index block")).tolist()
    sblk_addrs = _le_columns(_records(iblock, at + ndblk_addrs * o, nsblk_addrs, o, "index block")).tolist()
    return dblk_addrs, sblk_addrs


def _second_level(
    ea: _ExtensibleArray, dblk_addrs: list[int], sblk_addrs: list[int]
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int, int, int]]]:
    """The index block's data blocks (address, entries, first index) and the super blocks
    (address, super block, data blocks, entries per data block, first index) that hold
    elements below the highest one ever set."""
    direct, supers, listed = [], [], iter(dblk_addrs)
    for u, ndblks, nelmts, start in ea.superblocks():
        if start >= ea.max_idx_set:
            break
        if u < ea.iblock_nsblks:
            for j, address in zip(range(ndblks), listed, strict=False):
                if address != ea.undefined and start + j * nelmts < ea.max_idx_set:
                    direct.append((address, nelmts, start + j * nelmts))
        elif sblk_addrs[u - ea.iblock_nsblks] != ea.undefined:
            supers.append((sblk_addrs[u - ea.iblock_nsblks], u, ndblks, nelmts, start))
    if any(ea.npages(nelmts) for _, nelmts, _ in direct):
        raise UnsupportedIndexError("extensible array: a paged data block in the index block")
    return direct, supers


async def _read_second_level(
    io: _Io,
    ea: _ExtensibleArray,
    direct: list[tuple[int, int, int]],
    supers: list[tuple[int, int, int, int, int]],
    found: _Found,
) -> list[bytes]:
    """One call for the index block's data blocks (their entries go to ``found``) and the super blocks."""
    o, es = ea.sizeof_offsets, ea.entry_size
    # A super block: prefix, block offset, each data block's page bitmap and address, checksum.
    sblock_sizes = [
        6 + o + ea.offset_size + ndblks * ((ea.npages(nelmts) + 7) // 8 + o) + 4 for _, _, ndblks, nelmts, _ in supers
    ]
    blobs = await io.read(
        [(address, ea.dblock_prefix() + n * es) for address, n, _ in direct]
        + [(sblock[0], size) for sblock, size in zip(supers, sblock_sizes, strict=True)],
        "extensible array super/data block",
    )
    _verify_checksums(blobs, "extensible array super/data block")
    for (_, nelmts, first), blob in zip(direct, blobs, strict=False):
        _check_block(blob, b"EADB", ea.client, ea.address, o, "extensible array data block")
        found.append((_records(blob, ea.dblock_prefix() - 4, nelmts, es, "data block"), first + np.arange(nelmts)))
    return blobs[len(direct) :]


async def _read_super_blocks_data(
    io: _Io,
    ea: _ExtensibleArray,
    supers: list[tuple[int, int, int, int, int]],
    sblock_blobs: list[bytes],
    found: _Found,
) -> None:
    """One call for the super blocks' data blocks, or the written pages of paged ones."""
    o, es = ea.sizeof_offsets, ea.entry_size
    spans, places = _extensible_data_spans(ea, supers, sblock_blobs)
    blobs = await io.read(spans, "extensible array data block")
    _verify_checksums(blobs, "extensible array data block")
    for (kind, count, first), blob in zip(places, blobs, strict=True):
        if kind != "page":
            _check_block(blob, b"EADB", ea.client, ea.address, o, "extensible array data block")
        if kind == "block":
            found.append((_records(blob, ea.dblock_prefix() - 4, count, es, "data block"), first + np.arange(count)))
        elif kind == "page":
            found.append((_records(blob, 0, count, es, "data block page"), first + np.arange(count)))


async def _read_extensible_header(io: _Io, ds: _Dataset) -> tuple[_ExtensibleArray, bool]:
    o, n = io.sb.sizeof_offsets, io.sb.sizeof_lengths
    (header,) = await io.read([(ds.layout.address, 12 + 6 * n + o + 4)], "extensible array header")
    _verify_checksums([header], "extensible array header")
    c = _Cursor(header, 0, "extensible array header")
    if c.take(4) != b"EAHD" or c.uint(1) != 0:
        raise UnsupportedIndexError("extensible array header: bad signature or version")
    client = c.uint(1)
    entry_size, max_bits, idx_elmts, dblk_min, sblk_min, page_bits = (c.uint(1) for _ in range(6))
    c.skip(4 * n)  # super and data blocks created, and their sizes
    max_idx_set = c.uint(n)
    c.skip(n)  # elements realised
    iblock_address = c.uint(o)
    filtered = _array_client(client, "extensible array")
    _check_filtered(filtered, ds, "extensible array")
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
    if sum(1 << (u // 2) for u in range(ea.iblock_nsblks)) != 2 * (sblk_min - 1):
        raise UnsupportedIndexError("extensible array: index block geometry does not add up")
    return ea, filtered


def _extensible_data_spans(
    ea: _ExtensibleArray, supers: list[tuple[int, int, int, int, int]], sblock_blobs: list[bytes]
) -> tuple[list[tuple[int, int]], list[tuple[str, int, int]]]:
    """Ranges of the super blocks' data blocks, with what each range is (kind, entries, first index)."""
    o, es = ea.sizeof_offsets, ea.entry_size
    spans: list[tuple[int, int]] = []
    places: list[tuple[str, int, int]] = []
    for (_, u, ndblks, nelmts, start), blob in zip(supers, sblock_blobs, strict=True):
        _check_block(blob, b"EASB", ea.client, ea.address, o, "extensible array super block")
        npages = ea.npages(nelmts)
        bitmap_at = 6 + o + ea.offset_size
        bitmap_bytes = ndblks * ((npages + 7) // 8)
        addresses = _le_columns(_records(blob, bitmap_at + bitmap_bytes, ndblks, o, "super block"))
        # libhdf5 reads the bitmap as one run of bits: data block j's pages from bit j * npages.
        bits = np.unpackbits(np.frombuffer(blob, np.uint8, bitmap_bytes, bitmap_at)) if npages else None
        for j, address in enumerate(int(a) for a in addresses):
            first = start + j * nelmts
            if address == ea.undefined or first >= ea.max_idx_set:
                continue
            if bits is None:  # no pages
                spans.append((address, ea.dblock_prefix() + nelmts * es))
                places.append(("block", nelmts, first))
                continue
            spans.append((address, ea.dblock_prefix()))
            places.append(("prefix", 0, first))
            page_bytes = ea.page_nelmts * es + 4
            for p in np.flatnonzero(bits[j * npages : (j + 1) * npages]):
                spans.append((address + ea.dblock_prefix() + int(p) * page_bytes, page_bytes))
                places.append(("page", ea.page_nelmts, first + int(p) * ea.page_nelmts))
    return spans, places


def _extensible_grid(index: np.ndarray, ds: _Dataset) -> np.ndarray:
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
    swizzled = _unravel(index, [0, *bounded])
    grid = np.empty_like(swizzled)
    grid[:, order] = swizzled
    return grid


# --------------------------------------------------------------------------- v2 B-tree


@dataclass(frozen=True)
class _Btree2Geometry:
    """Sizes of the child pointers in internal nodes, as libhdf5 derives them (H5B2__hdr_init).

    A pointer is the child's address, its record count, and (below depth 1) the
    record count of its whole subtree; each count is as wide as the largest count
    possible there, which depends on the node size and the depth.
    """

    nrec_size: int  # bytes of a child's record count
    total_sizes: tuple[int, ...]  # per depth: bytes of a subtree's record count (0 for leaves)
    sizeof_offsets: int
    node_records: tuple[int, ...]  # per depth: the most records one node holds

    @classmethod
    def of(cls, node_size: int, record_size: int, depth: int, sizeof_offsets: int) -> _Btree2Geometry:
        max_leaf = (node_size - 10) // record_size  # 10: signature, version, type, checksum
        nrec_size = _enc_size(max_leaf)
        most, sizes, per_node = [max_leaf], [0], [max_leaf]
        for d in range(1, depth + 1):
            pointer = sizeof_offsets + nrec_size + sizes[d - 1]
            max_nrec = (node_size - (10 + pointer)) // (record_size + pointer)
            per_node.append(max_nrec)
            most.append((max_nrec + 1) * most[d - 1] + max_nrec)
            sizes.append(_enc_size(most[d]))
        return cls(nrec_size, tuple(sizes), sizeof_offsets, tuple(per_node))

    def pointer_size(self, depth: int) -> int:
        """Bytes of one child pointer in an internal node at ``depth`` (>= 1)."""
        return self.sizeof_offsets + self.nrec_size + self.total_sizes[depth - 1]


async def _walk_btree_v2(io: _Io, ds: _Dataset) -> _Chunks:
    """Header "BTHD", then internal nodes "BTIN" down to leaves "BTLF", a level at a time.

    Unlike a v1 B-tree, internal nodes hold records too. A record is the chunk address,
    (filtered chunks only) its size and filter mask, then its grid index (8 bytes a dimension).
    """
    sb, o, n = io.sb, io.sb.sizeof_offsets, io.sb.sizeof_lengths
    if ds.layout.address == sb.undefined_address:
        return _Chunks.empty(ds.rank)
    (header,) = await io.read([(ds.layout.address, 16 + o + 2 + n + 4)], "v2 B-tree header")
    _verify_checksums([header], "v2 B-tree header")
    c = _Cursor(header, 0, "v2 B-tree header")
    if c.take(4) != b"BTHD" or c.uint(1) != 0:
        raise UnsupportedIndexError("v2 B-tree header: bad signature or version")
    tree_type, node_size, record_size, depth = c.uint(1), c.uint(4), c.uint(2), c.uint(2)
    split, merge = c.uint(1), c.uint(1)
    root, root_nrec, total = c.uint(o), c.uint(2), c.uint(n)
    if tree_type not in (_BTREE2_CHUNKS, _BTREE2_FILTERED_CHUNKS):
        raise UnsupportedIndexError(f"v2 B-tree of record type {tree_type} is not a chunk index")
    filtered = tree_type == _BTREE2_FILTERED_CHUNKS
    _check_filtered(filtered, ds, "v2 B-tree")
    if (node_size, split, merge) != ds.layout.params:
        raise UnsupportedIndexError("v2 B-tree: parameters differ from the data layout message's")
    width = _size_width(record_size - 8 * ds.rank, filtered, ds, sb, "v2 B-tree")
    if depth >= _MAX_DEPTH or record_size > node_size:
        raise UnsupportedIndexError("v2 B-tree: implausible depth or record size")
    if root == sb.undefined_address or total == 0:
        return _Chunks.empty(ds.rank)
    tree = _Btree2Geometry.of(node_size, record_size, depth, o)
    nodes, found = [(root, root_nrec)], []
    # A crafted tree must cost bounded work: every node is visited once, holds no more records
    # than fit in it, and the records found plus those the next level announces never exceed
    # the header's total (so each level's list of nodes is bounded by it too).
    seen: set[int] = set()
    counted = 0
    for level in range(depth, -1, -1):
        signature = b"BTIN" if level else b"BTLF"
        pointer = tree.pointer_size(level) if level else 0
        addresses = [a for a, _ in nodes]
        if len(set(addresses)) != len(addresses) or seen.intersection(addresses):
            raise UnsupportedIndexError("v2 B-tree: a node is reached twice")
        seen.update(addresses)
        if any(nrec > tree.node_records[level] for _, nrec in nodes):
            raise UnsupportedIndexError(f"v2 B-tree: a level-{level} node with more records than fit in it")
        counted += sum(nrec for _, nrec in nodes)
        if counted > total:
            raise UnsupportedIndexError(f"v2 B-tree: more records than the header's total of {total}")
        # Signature, version, type, the records, (internal nodes) the child pointers, checksum.
        sizes = [6 + nrec * record_size + (nrec + 1 if level else 0) * pointer + 4 for _, nrec in nodes]
        blobs = await io.read([(a, s) for (a, _), s in zip(nodes, sizes, strict=True)], "v2 B-tree node")
        _verify_checksums(blobs, "v2 B-tree node")
        children = []
        for (_, nrec), blob in zip(nodes, blobs, strict=True):
            if blob[:4] != signature or blob[4] != 0 or blob[5] != tree_type:
                raise UnsupportedIndexError(f"v2 B-tree node: expected {signature.decode()} of type {tree_type}")
            found.append(_records(blob, 6, nrec, record_size, "v2 B-tree node"))
            if level:
                children.append(_records(blob, 6 + nrec * record_size, nrec + 1, pointer, "v2 B-tree node"))
        if level:
            pointers = np.concatenate(children)
            addresses = _le_columns(pointers[:, :o]).tolist()
            counts = _le_columns(pointers[:, o : o + tree.nrec_size]).tolist()
            nodes = list(zip(addresses, counts, strict=True))
    records = np.concatenate(found)
    if len(records) != total:
        raise UnsupportedIndexError(f"v2 B-tree: {len(records)} records found, the header counts {total}")
    return _btree_v2_chunks(records, width, ds, sb)


def _btree_v2_chunks(records: np.ndarray, width: int, ds: _Dataset, sb: Superblock) -> _Chunks:
    o, rank = sb.sizeof_offsets, ds.rank
    address = _le_columns(records[:, :o])
    if width:
        size = _le_columns(records[:, o : o + width])
        mask = _le_columns(records[:, o + width : o + width + 4]).astype(np.uint32)
    else:
        size = np.full(len(records), ds.layout.chunk_bytes, np.uint64)
        mask = np.zeros(len(records), np.uint32)
    scaled = records[:, records.shape[1] - 8 * rank :].copy().view("<u8").reshape(len(records), rank)
    if np.any(scaled >= np.uint64(1 << 62)):
        raise UnsupportedIndexError("v2 B-tree: an implausible chunk index")
    written = address != np.uint64(sb.undefined_address)
    return _Chunks(scaled[written].astype(np.int64), address[written], size[written], mask[written])


# --------------------------------------------------------------------------- the table


_WALKERS = {
    "btree_v1": _walk_btree_v1,
    "single": _walk_single,
    "implicit": _walk_implicit,
    "fixed_array": _walk_fixed_array,
    "extensible_array": _walk_extensible_array,
    "btree_v2": _walk_btree_v2,
}


def _finish(chunks: _Chunks, ds: _Dataset, io: _Io) -> ChunkIndex:
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


def partial_edge_rows(grid_index: np.ndarray, chunk_shape: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """Boolean per row of ``grid_index``: the chunk reaches past ``shape`` along some axis."""
    if not len(grid_index):
        return np.zeros(0, bool)
    ends = (grid_index[:, : len(shape)] + 1) * np.asarray(chunk_shape[: len(shape)], np.int64)
    return np.any(ends > np.asarray(shape, np.int64), axis=1)


# --------------------------------------------------------------------------- public entry points


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
    io = _Io(read_ranges, superblock, file_size)
    messages = await _read_object_header(io, header_address)
    layout = _parse_layout(_message(messages, _MSG_LAYOUT, "data layout").data, superblock)
    space = _parse_dataspace(_message(messages, _MSG_DATASPACE, "dataspace").data, superblock)
    if len(layout.chunk_shape) != len(space.shape):
        raise UnsupportedIndexError(f"{len(layout.chunk_shape)}-d chunks in a {len(space.shape)}-d dataspace")
    nfilters = _count_filters(_optional_message(messages, _MSG_PIPELINE, "filter pipeline"))
    ds = _Dataset(space, layout, nfilters)
    chunks = await _WALKERS[layout.index_type](io, ds)
    return _finish(chunks, ds, io)


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
    blobs = await read_ranges([(o, min(256, file_size - o)) for o in later])
    for offset, blob in zip(later, blobs, strict=True):
        if bytes(blob[:8]) == SIGNATURE:
            return _parse_superblock(bytes(blob), 0, offset)
    raise UnsupportedIndexError(f"superblock: no HDF5 signature in {file_size} bytes")


def object_header_messages(
    read_at: Callable[[int, int], bytes], header_address: int, *, superblock: Superblock, file_size: int | None
) -> list[tuple[int, int, bytes]]:
    """``(type, flags, body)`` of every message of the object header at ``header_address``,
    read with the synchronous ``read_at(offset, length)``."""
    io = _Io(_local_read_ranges(read_at), superblock, file_size)
    return [(m.type, m.flags, m.data) for m in _run_sync(_read_object_header(io, header_address))]


def unfiltered_edges(
    read_at: Callable[[int, int], bytes], header_address: int, *, superblock: Superblock, file_size: int | None
) -> bool:
    """Whether the chunked dataset at ``header_address`` stores its partial edge chunks
    without its filters (the layout message's flag), read with ``read_at(offset, length)``.

    Raises :class:`UnsupportedIndexError` where the header or its layout does not parse."""
    io = _Io(_local_read_ranges(read_at), superblock, file_size)
    messages = _run_sync(_read_object_header(io, header_address))
    layout = _parse_layout(_message(messages, _MSG_LAYOUT, "data layout").data, superblock)
    nfilters = _count_filters(_optional_message(messages, _MSG_PIPELINE, "filter pipeline"))
    return nfilters > 0 and bool(layout.flags & LAYOUT_UNFILTERED_EDGES)


def walk_chunk_index_local(
    source: str | os.PathLike[str] | BinaryIO, header_address: int, *, superblock: Superblock | None = None
) -> ChunkIndex:
    """:func:`walk_chunk_index` on a local file (a path or a binary file object), with preads.

    ``superblock`` (from :func:`local_superblock`) spares reading it again for every dataset."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return walk_chunk_index_local(f, header_address, superblock=superblock)
    read_ranges = _local_read_ranges(reader_for(source))
    size = _file_size(source)
    if superblock is None:
        superblock = _run_sync(fetch_superblock(read_ranges, size))
    return _run_sync(walk_chunk_index(read_ranges, header_address, superblock=superblock, file_size=size))


def local_superblock(source: BinaryIO) -> Superblock:
    """The superblock of a local file (a binary file object)."""
    return _run_sync(fetch_superblock(_local_read_ranges(reader_for(source)), _file_size(source)))


def reader_for(f: BinaryIO) -> Callable[[int, int], bytes]:
    """``read(offset, length)`` of a binary file: a pread where it has a descriptor."""
    try:
        fd = f.fileno()
    except (AttributeError, OSError):

        def seek_read(offset: int, length: int) -> bytes:
            f.seek(offset)
            return f.read(length)

        return seek_read
    return lambda offset, length: os.pread(fd, length, offset)


def _file_size(f: BinaryIO) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError):
        return f.seek(0, os.SEEK_END)


def _local_read_ranges(read_at: Callable[[int, int], bytes]) -> ReadRanges:
    async def read_ranges(ranges: list[tuple[int, int]]) -> list[bytes]:
        return [read_at(offset, length) for offset, length in ranges]

    return read_ranges


def _run_sync(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine whose awaits all complete at once (a local reader), without an event loop.

    That also works where a loop is already running (a notebook, an async caller).
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the reader suspended; run walk_chunk_index in an event loop instead")
