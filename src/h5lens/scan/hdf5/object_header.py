"""Object headers: the messages of an object, continuation blocks included.

Specification: IV.A.1 "Data Object Header Prefix" (IV.A.1.a version 1, IV.A.1.b
version 2 "OHDR"), IV.A.2 "Data Object Header Messages" (the message framing) and
IV.A.2.q "The Object Header Continuation Message" (blocks "OCHK" in version 2).
libhdf5: H5Ocache.c (``H5O__cache_deserialize``, ``H5O__chunk_deserialize``,
``H5O__prefix_deserialize``) and H5Ocont.c.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from h5lens.scan.hdf5.checksum import CHECKSUM_SIZE, verify_checksums
from h5lens.scan.hdf5.fields import Cursor
from h5lens.scan.hdf5.model import MAX_DEPTH, UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io, ReadAt, local_read_ranges, run_sync
from h5lens.scan.hdf5.superblock import Superblock

# One read usually holds a whole dataset object header; a bigger one costs a second read.
HEADER_PROBE_BYTES = 4096

MSG_DATASPACE = 0x0001
MSG_LAYOUT = 0x0008
MSG_PIPELINE = 0x000B
MSG_ATTRIBUTE = 0x000C
MSG_CONTINUATION = 0x0010
MSG_ATTRIBUTE_INFO = 0x0015
MSG_FLAG_SHARED = 0x02

_OHDR = b"OHDR"  # a version 2 header starts with it; a version 1 header with the byte 1
_OCHK = b"OCHK"  # a version 2 continuation block starts with it

# Version 1 prefix: version (1), reserved (1), message count (2), reference count (4),
# header size (4): 12 bytes, padded to 16 so that messages stay 8-byte aligned.
_V1_PREFIX_SIZE = 16
_V1_MESSAGE = struct.Struct("<HHB")  # type, size, flags (then 3 reserved bytes)
_V1_MESSAGE_HEADER_SIZE = _V1_MESSAGE.size + 3
_V2_MESSAGE = struct.Struct("<BHB")  # type, size, flags (then the creation order, if tracked)
_CREATION_ORDER = struct.Struct("<H")

# Version 2 header flags
_V2_CHUNK0_SIZE_WIDTH = 0x03  # the size of chunk 0 takes 1 << (flags & 0x03) bytes
_V2_CREATION_ORDER_TRACKED = 0x04  # each message carries its creation order (2 bytes)
_V2_PHASE_CHANGE_STORED = 0x10  # attribute storage phase change values (4 bytes)
_V2_TIMES_STORED = 0x20  # access, modification, change and birth times (16 bytes)
_V2_UNKNOWN_FLAGS = 0xC0


def _v2_message_header_size(header_flags: int) -> int:
    """Type (1), size (2), flags (1), then the creation order (2) where the header tracks it."""
    return _V2_MESSAGE.size + (2 if header_flags & _V2_CREATION_ORDER_TRACKED else 0)


class Message(NamedTuple):  # a tuple: headers of tens of thousands of objects are parsed
    type: int
    flags: int
    data: bytes
    # the message's creation order, in a version 2 header that tracks it (attributes are
    # then listed in this order); None otherwise
    creation_order: int | None = None


@dataclass(frozen=True)
class ObjectHeader:
    messages: list[Message]
    tracks_creation_order: bool  # version 2 header flag: attribute creation order tracked


class _HeaderBlocks:
    """Splits object header blocks into messages, setting continuation messages aside;
    ``keep``: the message types wanted (None: all of them)."""

    def __init__(self, sb: Superblock, keep: frozenset[int] | None = None) -> None:
        self.sb = sb
        self.keep = keep
        self.messages: list[Message] = []
        self.pending: list[tuple[int, int]] = []  # continuation blocks still to read

    def continuation(self, body: bytes) -> None:
        c = Cursor(body, 0, "object header continuation message")
        self.pending.append((c.uint(self.sb.sizeof_offsets), c.uint(self.sb.sizeof_lengths)))

    def v1(self, data: bytes, start: int, end: int) -> None:
        """Version 1 messages: type (2), size (2), flags (1), reserved (3), body."""
        self._split(data, start, end, _V1_MESSAGE, _V1_MESSAGE_HEADER_SIZE, "object header v1")

    def v2(self, data: bytes, start: int, end: int, header_flags: int) -> None:
        """Version 2 messages: type (1), size (2), flags (1), [creation order (2)], body."""
        tracked = bool(header_flags & _V2_CREATION_ORDER_TRACKED)
        self._split(data, start, end, _V2_MESSAGE, _v2_message_header_size(header_flags), "object header v2", tracked)

    def _split(
        self,
        data: bytes,
        start: int,
        end: int,
        fields: struct.Struct,
        header_size: int,
        what: str,
        tracked: bool = False,
    ) -> None:
        """The messages of ``data[start:end]``, each a header (type, size, flags first, then
        the creation order where ``tracked``) and a body. (One loop, no call per message:
        the headers of every node of a file go through it.)"""
        pos = start
        keep, append, unpack = self.keep, self.messages.append, fields.unpack_from
        while end - pos >= header_size:  # fewer bytes than a message header left: a gap
            mtype, size, flags = unpack(data, pos)
            body = pos + header_size
            if body + size > end:
                raise UnsupportedIndexError(f"{what}: a message runs past its block")
            if mtype == MSG_CONTINUATION:
                self.continuation(data[body : body + size])
            elif keep is None or mtype in keep:
                order = _CREATION_ORDER.unpack_from(data, pos + fields.size)[0] if tracked else None
                append(Message(mtype, flags, data[body : body + size], order))
            pos = body + size


async def read_object_header(io: Io, address: int) -> list[Message]:
    """Every message of an object header (version 1 or 2), continuation blocks included."""
    return (await read_header(io, address)).messages


async def read_header(io: Io, address: int, keep: frozenset[int] | None = None) -> ObjectHeader:
    """Every message of an object header (version 1 or 2), continuation blocks included, in
    libhdf5's order (chunk 0, then the continuation blocks breadth first, as H5O_protect
    loads them), and whether the header tracks the creation order of its attributes.

    The first read takes a guess at the header's size; continuation blocks are then
    read level by level (a block may point at further blocks). ``keep``: only the messages
    of these types (continuation messages are always followed).
    """
    blocks = _HeaderBlocks(io.sb, keep)
    (first,) = await io.read([(address, HEADER_PROBE_BYTES)], "object header", clamp=True)
    if first[: len(_OHDR)] == _OHDR:
        flags = await _header_v2(io, address, first, blocks)
    elif first[:1] == b"\x01":
        flags = None
        await _header_v1(io, address, first, blocks)
    else:
        raise UnsupportedIndexError(f"object header at {address}: unknown version {first[:4]!r}")
    seen = {address}
    for _ in range(MAX_DEPTH):
        pending, blocks.pending = blocks.pending, []
        if not pending:
            return ObjectHeader(blocks.messages, flags is not None and bool(flags & _V2_CREATION_ORDER_TRACKED))
        if any(addr in seen for addr, _ in pending):
            raise UnsupportedIndexError(f"object header at {address}: continuation blocks form a loop")
        seen.update(addr for addr, _ in pending)
        for block in await io.read(pending, "object header continuation block"):
            if flags is None:
                blocks.v1(block, 0, len(block))
                continue
            if block[: len(_OCHK)] != _OCHK:
                raise UnsupportedIndexError("object header continuation block: no OCHK signature")
            verify_checksums([block], "object header continuation block")
            blocks.v2(block, len(_OCHK), len(block) - CHECKSUM_SIZE, flags)
    raise UnsupportedIndexError(f"object header at {address}: too many continuation levels")


async def _header_v1(io: Io, address: int, probe: bytes, blocks: _HeaderBlocks) -> None:
    c = Cursor(probe, 1, "object header v1")
    c.skip(1 + 2 + 4)  # reserved, number of messages, reference count
    size = c.uint(4)
    if len(probe) < _V1_PREFIX_SIZE + size:
        (probe,) = await io.read([(address, _V1_PREFIX_SIZE + size)], "object header")
    blocks.v1(probe, _V1_PREFIX_SIZE, _V1_PREFIX_SIZE + size)


async def _header_v2(io: Io, address: int, probe: bytes, blocks: _HeaderBlocks) -> int:
    c = Cursor(probe, len(_OHDR), "object header v2")
    if c.uint(1) != 2:
        raise UnsupportedIndexError("object header: OHDR version is not 2")
    flags = c.uint(1)
    if flags & _V2_UNKNOWN_FLAGS:
        raise UnsupportedIndexError(f"object header v2: unknown flags {flags:#x}")
    if flags & _V2_TIMES_STORED:
        c.skip(16)  # access, modification, change and birth times
    if flags & _V2_PHASE_CHANGE_STORED:
        c.skip(4)  # attribute storage phase change values
    size = c.uint(1 << (flags & _V2_CHUNK0_SIZE_WIDTH))
    end = c.pos + size  # chunk 0's messages end here; its checksum follows
    if len(probe) < end + CHECKSUM_SIZE:
        (probe,) = await io.read([(address, end + CHECKSUM_SIZE)], "object header")
    verify_checksums([probe[: end + CHECKSUM_SIZE]], "object header v2")
    blocks.v2(probe, c.pos, end, flags)
    return flags


def optional_message(messages: list[Message], mtype: int, name: str) -> Message | None:
    """The one message of type ``mtype``, or None; two of them, or a shared one, are refused."""
    found = [m for m in messages if m.type == mtype]
    if len(found) > 1:
        raise UnsupportedIndexError(f"object header: {len(found)} {name} messages")
    if found and found[0].flags & MSG_FLAG_SHARED:
        raise UnsupportedIndexError(f"object header: shared {name} message")
    return found[0] if found else None


def message(messages: list[Message], mtype: int, name: str) -> Message:
    """The one message of type ``mtype``; none is refused too."""
    found = optional_message(messages, mtype, name)
    if found is None:
        raise UnsupportedIndexError(f"object header: no {name} message (not a dataset?)")
    return found


def object_header_messages(
    read_at: ReadAt, header_address: int, *, superblock: Superblock, file_size: int | None
) -> list[tuple[int, int, bytes]]:
    """``(type, flags, body)`` of every message of the object header at ``header_address``,
    read with the synchronous ``read_at(offset, length)``."""
    io = Io(local_read_ranges(read_at), superblock, file_size)
    return [(m.type, m.flags, m.data) for m in run_sync(read_object_header(io, header_address))]
