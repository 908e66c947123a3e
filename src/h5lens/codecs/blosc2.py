"""Zarr v3 codec for chunks written by the HDF5 Blosc2 filter (filter id 32026).

The filter is ``blosc2_filter.c`` of https://github.com/Blosc/hdf5-blosc2 (shipped by
hdf5plugin as ``hdf5plugin.Blosc2``; PyTables registers the same id).

cd_values
---------
``(filter revision, block size in bytes (0 = automatic), type size, chunk bytes,
clevel, shuffle, compressor code[, rank, chunk dim 0, ...])``. ``set_local`` adds the
rank and chunk shape when the chunk has 2 to ``BLOSC2_MAX_DIM`` dimensions (8 in older
c-blosc2, 16 in recent ones). The type size is that of an array type's *base* type.

What the filter writes
----------------------
Every chunk is a Blosc2 super-chunk serialised as a *contiguous frame* (``b2frame``,
``README_CFRAME_FORMAT.rst`` of c-blosc2): a msgpack header (fixed positions for the
sizes; then the metalayers), the Blosc2 chunks, an *offsets* chunk (a Blosc2 chunk of
little-endian int64 offsets from the end of the header, one per chunk), a trailer.

* The chunk shape is recorded and the filter input is the whole chunk: a **B2ND**
  array (``b2nd`` metalayer) with one chunk of the HDF5 chunk's shape, cut into blocks
  of a shape the filter picks. Blocks that do not tile the chunk are padded, so only
  B2ND's slice reader gives the C-order bytes back (``imagecodecs.b2nd_decode``).
* Otherwise (rank 1, or a filter such as fletcher32 ran before): a **plain** frame
  holding *one* Blosc2 chunk of the bytes (``blosc2_schunk_append_buffer``), no
  metalayer. The filter decodes chunk 0 of it; so does this codec, reading the frame
  itself: the offsets chunk sits at ``header_len + compressed_size`` (header fields),
  and chunk 0 at ``header_len + offsets[0]``, decoded by ``imagecodecs.blosc2_decode``
  (neither ``blosc2_decode`` nor ``b2nd_decode`` reads a plain frame).
  A negative offset (top bit set) is a *special chunk* with no bytes stored: its top
  byte's low bits say all zeros (1), all NaN (2, float32 or float64 by type size) or
  uninitialised (4). hdf5-blosc2 writes a chunk of zeros this way (c-blosc2 compresses
  zeros to a special chunk and the frame stores it as a special offset); for
  "uninitialised" c-blosc2 leaves its output buffer as it was, this codec gives zeros.
  Runs of one value *inside* a stored chunk are Blosc2's own business.

A ``b2nd`` metalayer (or ``caterva``, its former name) means B2ND, anything else plain.

Encoding does what the filter does: B2ND when a chunk shape is configured (block shape
from the filter's ``compute_b2nd_block_shape`` and the block size it would suggest), a
plain frame otherwise, laid out as c-blosc2 lays it out, with the filter's parameters
(compressor, clevel, shuffle, type size, forward-compatible split mode). The result
reads back through the HDF5 filter; bytes may differ from the filter's where
imagecodecs' c-blosc2 compresses differently or picks another block size.

Configuration: ``{"typesize", "clevel", "compressor" ("blosclz" | "lz4" | "lz4hc" |
"zlib" | "zstd"), "shuffle" (0 none, 1 byte, 2 bit), "blocksize" (bytes, 0 =
automatic)}`` plus ``"chunkshape"`` when the filter recorded one. Only encoding uses
them: a frame says how to decode itself.
"""

from __future__ import annotations

import asyncio
import math
import struct
from collections.abc import Buffer as BytesLike
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = [
    "CODEC_NAME",
    "COMPRESSORS",
    "HDF5_FILTER_ID",
    "Blosc2Codec",
    "codec_configuration",
    "decode_hdf5_blosc2",
    "encode_hdf5_blosc2",
    "register",
]

CODEC_NAME = "h5lens.blosc2"
HDF5_FILTER_ID = 32026
# cd_values[6] (c-blosc2's compressor codes) -> name
COMPRESSORS = {0: "blosclz", 1: "lz4", 2: "lz4hc", 4: "zlib", 5: "zstd"}
_SHUFFLES = (0, 1, 2)  # BLOSC_NOSHUFFLE, BLOSC_SHUFFLE, BLOSC_BITSHUFFLE
_MAX_DIM = 16  # B2ND_MAX_DIM (8 before c-blosc2 2.16): the filter records a chunk shape up to it
_MAGIC = b"\xa8b2frame\x00"
_HEADER_MINLEN = 87  # FRAME_HEADER_MINLEN: the fixed part, the metalayers follow
_CHUNK_HEADER = 32  # BLOSC_EXTENDED_HEADER_LENGTH
_SPECIAL_ZERO, _SPECIAL_NAN, _SPECIAL_UNINIT = 1, 2, 4
_B2ND_LAYERS = ("b2nd", "caterva")
_FORWARD_COMPAT_SPLIT = 4  # BLOSC_FORWARD_COMPAT_SPLIT, c-blosc2's default (imagecodecs defaults to ALWAYS)


class _Frame(NamedTuple):
    header_len: int
    nbytes: int
    cbytes: int
    typesize: int
    chunksize: int
    metalayers: tuple[str, ...]


def _be(src: memoryview, at: int, size: int) -> int:
    return int.from_bytes(src[at : at + size], "big", signed=True)


def _frame(src: memoryview) -> _Frame:
    """The fields of a contiguous frame's header that decoding needs (README_CFRAME_FORMAT)."""
    if len(src) < _HEADER_MINLEN + 10 or src[0] & 0xF0 != 0x90 or bytes(src[1:10]) != _MAGIC:
        raise ValueError(f"{CODEC_NAME}: not a Blosc2 contiguous frame (b2frame)")
    header_len, frame_len = _be(src, 11, 4), _be(src, 16, 8)
    if not _HEADER_MINLEN <= header_len <= len(src) or frame_len > len(src):
        raise ValueError(f"{CODEC_NAME}: frame header lengths {header_len}, {frame_len} do not fit {len(src)} bytes")
    if src[26] & 0x0F != 0:
        raise ValueError(f"{CODEC_NAME}: frame type {src[26] & 0x0F} is not a contiguous frame")
    names: list[str] = []
    pos = _HEADER_MINLEN
    if src[pos] == 0x93 and src[pos + 1] == 0xCD and src[pos + 4] == 0xDE:  # [idx size, {name: offset}, ...]
        count = _be(src, pos + 5, 2)
        pos += 7
        for _ in range(count):
            if pos >= header_len or src[pos] & 0xE0 != 0xA0:
                raise ValueError(f"{CODEC_NAME}: malformed metalayer map in the frame header")
            length = src[pos] & 0x1F
            names.append(bytes(src[pos + 1 : pos + 1 + length]).decode("ascii", "replace"))
            pos += 1 + length + 5  # the name, then d2 + int32 offset
    return _Frame(header_len, _be(src, 30, 8), _be(src, 39, 8), _be(src, 48, 4), _be(src, 58, 4), tuple(names))


def _chunk_cbytes(src: memoryview, at: int) -> int:
    if at < 0 or at + _CHUNK_HEADER > len(src):
        raise ValueError(f"{CODEC_NAME}: a Blosc2 chunk at {at} lies outside the {len(src)}-byte frame")
    cbytes = int.from_bytes(src[at + 12 : at + 16], "little", signed=True)
    if cbytes < _CHUNK_HEADER or at + cbytes > len(src):
        raise ValueError(f"{CODEC_NAME}: a Blosc2 chunk of {cbytes} bytes at {at} runs past the frame")
    return cbytes


def _special(value: int, size: int, typesize: int) -> bytes:
    kind = (value >> 56) & 0x07
    if kind == _SPECIAL_NAN:
        if typesize not in (4, 8) or size % typesize:
            raise ValueError(f"{CODEC_NAME}: a NaN chunk of type size {typesize}")
        return np.full(size // typesize, np.nan, dtype=np.float32 if typesize == 4 else np.float64).tobytes()
    if kind in (_SPECIAL_ZERO, _SPECIAL_UNINIT):
        return bytes(size)
    raise ValueError(f"{CODEC_NAME}: unknown special chunk value {value:#x}")


def decode_hdf5_blosc2(data: BytesLike) -> bytes:
    """Decode one chunk as ``blosc2_filter.c`` does (see the module docstring)."""
    import imagecodecs

    src = memoryview(data).cast("B")
    frame = _frame(src)
    if any(name in _B2ND_LAYERS for name in frame.metalayers):
        return np.ascontiguousarray(imagecodecs.b2nd_decode(src)).tobytes()
    at = frame.header_len + frame.cbytes
    offsets = np.frombuffer(imagecodecs.blosc2_decode(src[at : at + _chunk_cbytes(src, at)]), dtype="<i8")
    if offsets.size == 0:
        raise ValueError(f"{CODEC_NAME}: the frame holds no chunk")
    offset = int(offsets[0])
    if offset < 0:  # a special chunk, no bytes stored
        size = frame.nbytes if offsets.size == 1 else frame.chunksize
        return _special(offset & 0xFFFF_FFFF_FFFF_FFFF, size, frame.typesize)
    at = frame.header_len + offset
    return bytes(imagecodecs.blosc2_decode(src[at : at + _chunk_cbytes(src, at)]))


def _b2nd_block_shape(block_size: int, typesize: int, chunkshape: tuple[int, ...]) -> tuple[int, ...]:
    """``compute_b2nd_block_shape`` of blosc2_filter.c: 2 (or 1) per dimension, doubled from the
    innermost dimension outwards while the block stays within ``block_size`` bytes."""
    nitems = block_size // typesize
    block = [1 if c == 1 else 2 for c in chunkshape]
    current = math.prod(block)
    if current >= nitems:
        return tuple(block)
    while current < nitems:
        previous = current
        for i in range(len(chunkshape) - 1, -1, -1):
            if block[i] * 2 <= chunkshape[i]:
                if current * 2 <= nitems:
                    current *= 2
                    block[i] *= 2
            elif block[i] < chunkshape[i]:
                extended = (current // block[i]) * chunkshape[i]
                if extended <= nitems:
                    current = extended
                    block[i] = chunkshape[i]
        if current == previous:
            break
    return tuple(block)


def _plain_frame(chunk: bytes, nbytes: int, typesize: int, compressor: int, clevel: int, shuffle: int) -> bytes:
    """A contiguous frame of one Blosc2 chunk, laid out as c-blosc2's ``frame_from_schunk``."""
    import imagecodecs

    special = (chunk[31] >> 4) & 0x07 if len(chunk) >= _CHUNK_HEADER else 0
    if special in (_SPECIAL_ZERO, _SPECIAL_NAN, _SPECIAL_UNINIT):  # stored as a special offset, no bytes
        offset, body = (1 << 63) | (special << 56), b""
    else:
        offset, body = 0, chunk
    offsets = bytes(
        imagecodecs.blosc2_encode(
            _items(memoryview(struct.pack("<Q", offset)), 8),
            5,
            **_settings("blosclz", 1, 8),
            splitmode=_FORWARD_COMPAT_SPLIT,
        )
    )
    blocksize = int.from_bytes(chunk[8:12], "little")
    filters = bytes([0, 0, 0, 0, 0, shuffle])
    header = b"".join(
        (
            b"\x9e" + _MAGIC,
            b"\xd2" + (97).to_bytes(4, "big"),  # header length: the fixed 87 bytes + empty metalayers
            b"\xcf" + b"\x00" * 8,  # frame length, filled in below
            b"\xa4" + bytes([0x12, 0, (clevel << 4) | compressor, 3]),  # format 2, 64-bit offsets; split 4
            b"\xd3" + nbytes.to_bytes(8, "big"),
            b"\xd3" + len(body).to_bytes(8, "big"),
            b"\xd2" + typesize.to_bytes(4, "big"),
            b"\xd2" + blocksize.to_bytes(4, "big"),
            b"\xd2" + nbytes.to_bytes(4, "big"),  # chunk size: one chunk of all the bytes
            b"\xd1\x00\x00\xd1\x00\x01",  # compression / decompression threads, as hdf5-blosc2 writes them
            b"\xc2",  # no variable-length metalayers
            b"\xd8\x06" + filters + bytes([compressor, 0]) + b"\x00" * 6 + b"\x00\x00",  # + udcodec, meta
            b"\x93\xcd\x00\x07\xde\x00\x00\xdc\x00\x00",  # no metalayers
        )
    )
    trailer = b"\x94\x01\x93\xcd\x00\x06\xde\x00\x00\xdc\x00\x00\xce\x00\x00\x00\x23\xd8\x00" + b"\x00" * 16
    frame = bytearray(header + body + offsets + trailer)
    frame[16:24] = len(frame).to_bytes(8, "big")
    return bytes(frame)


@cache
def _named_codec() -> bool:
    """Whether imagecodecs' Blosc2 encoders take ``codec`` and ``filters`` (imagecodecs
    2026.11.11 and later) rather than ``compressor`` and ``shuffle`` (before)."""
    import imagecodecs

    try:
        imagecodecs.blosc2_encode(b"\0" * 8, 1, codec="blosclz")
    except TypeError:
        return False
    return True


def _settings(compressor: str, shuffle: int, typesize: int | None = None) -> dict[str, Any]:
    """The compressor and shuffle as the installed imagecodecs takes them: c-blosc2's filter
    pipeline with the shuffle last (filters[5]), as hdf5-blosc2's filter sets it."""
    if not _named_codec():
        return {"compressor": compressor, "shuffle": shuffle}
    found: dict[str, Any] = {"codec": compressor, "filters": [0, 0, 0, 0, 0, shuffle]}
    if typesize is not None:
        found["typesize"] = typesize
    return found


def _items(src: memoryview, typesize: int) -> np.ndarray:
    """``src`` as an array of ``typesize``-byte items: imagecodecs' ``blosc2_encode`` takes Blosc's
    type size from the item size of what it is given (8 for bytes, whatever ``typesize`` says)."""
    if typesize > 1 and len(src) % typesize == 0:
        return np.frombuffer(src, dtype=f"V{typesize}")
    return np.frombuffer(src, dtype="V1")


def encode_hdf5_blosc2(
    data: BytesLike,
    typesize: int,
    clevel: int = 5,
    compressor: str = "blosclz",
    shuffle: int = 1,
    blocksize: int = 0,
    chunkshape: tuple[int, ...] | None = None,
) -> bytes:
    """Encode one chunk as ``blosc2_filter.c`` does (see the module docstring)."""
    import imagecodecs

    src = memoryview(data).cast("B")
    code = {name: c for c, name in COMPRESSORS.items()}[compressor]
    items = _items(src, typesize)
    params: dict[str, Any] = {**_settings(compressor, shuffle, items.itemsize), "splitmode": _FORWARD_COMPAT_SPLIT}
    b2nd = (
        chunkshape is not None
        and 1 < len(chunkshape) <= _MAX_DIM
        and math.prod(chunkshape) * typesize == len(src)
        and len(src) > 0
    )
    if b2nd and chunkshape is not None:
        if blocksize == 0:  # the filter's compute_blosc2_blocksize: what c-blosc2 picks for the chunk
            probe = imagecodecs.blosc2_encode(_items(memoryview(bytes(len(src))), typesize), clevel, **params)
            blocksize = int.from_bytes(bytes(probe[8:12]), "little")
        blockshape = _b2nd_block_shape(blocksize, typesize, chunkshape)
        values = np.frombuffer(src, dtype=f"V{typesize}").reshape(chunkshape)
        return bytes(
            imagecodecs.b2nd_encode(
                values, clevel, chunkshape=chunkshape, blockshape=blockshape, **_settings(compressor, shuffle)
            )
        )
    chunk = imagecodecs.blosc2_encode(items, clevel, blocksize=blocksize or None, **params)
    return _plain_frame(bytes(chunk), len(src), typesize, code, clevel, shuffle)


def _int(name: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{CODEC_NAME}: {name} must be an integer in [{low}, {high}], got {value!r}")
    return value


@dataclass(frozen=True)
class Blosc2Codec(BytesBytesCodec):
    """HDF5 Blosc2 (filter 32026) as a zarr v3 bytes→bytes codec. JSON: ``{"name":
    "h5lens.blosc2", "configuration": {"typesize": 4, "clevel": 5, "compressor":
    "blosclz", "shuffle": 1, "blocksize": 0[, "chunkshape": [16, 16]]}}``."""

    typesize: int = 1
    clevel: int = 5
    compressor: str = "blosclz"
    shuffle: int = 1
    blocksize: int = 0
    chunkshape: tuple[int, ...] | None = field(default=None)
    is_fixed_size = False

    def __post_init__(self) -> None:
        _int("typesize", self.typesize, 1, 2**31 - 1)
        _int("clevel", self.clevel, 0, 9)
        _int("shuffle", self.shuffle, 0, 2)
        _int("blocksize", self.blocksize, 0, 2**31 - 1)
        if self.compressor not in COMPRESSORS.values():
            raise ValueError(f"{CODEC_NAME}: compressor must be one of {sorted(COMPRESSORS.values())}")
        if self.chunkshape is not None:
            shape = tuple(_int("chunkshape", n, 1, 2**32 - 1) for n in self.chunkshape)
            object.__setattr__(self, "chunkshape", shape)

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, CODEC_NAME)
        configuration = dict(configuration or {})
        unknown = set(configuration) - {"typesize", "clevel", "compressor", "shuffle", "blocksize", "chunkshape"}
        if unknown:
            raise ValueError(f"{CODEC_NAME}: unknown configuration keys {sorted(unknown)}")
        chunkshape = configuration.pop("chunkshape", None)
        if chunkshape is not None and not isinstance(chunkshape, list | tuple):
            raise ValueError(f"{CODEC_NAME}: chunkshape must be a list of integers, got {chunkshape!r}")
        shape = None if chunkshape is None else tuple(chunkshape)
        return cls(**configuration, chunkshape=shape)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        configuration: dict[str, JSON] = {
            "typesize": self.typesize,
            "clevel": self.clevel,
            "compressor": self.compressor,
            "shuffle": self.shuffle,
            "blocksize": self.blocksize,
        }
        if self.chunkshape is not None:
            configuration["chunkshape"] = list(self.chunkshape)
        return {"name": CODEC_NAME, "configuration": configuration}

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return chunk_spec.prototype.buffer.from_bytes(decode_hdf5_blosc2(chunk_bytes.as_numpy_array()))

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        encoded = encode_hdf5_blosc2(
            chunk_bytes.as_numpy_array(),
            self.typesize,
            self.clevel,
            self.compressor,
            self.shuffle,
            self.blocksize,
            self.chunkshape,
        )
        return chunk_spec.prototype.buffer.from_bytes(encoded)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)

    def compute_encoded_size(self, _input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        raise NotImplementedError


def codec_configuration(cd_values: tuple[int, ...]) -> dict[str, Any] | None:
    """The configuration for the filter's cd_values, or None when this codec cannot decode them.

    The frame is self-describing, but a compressor code or shuffle outside hdf5plugin's set
    (c-blosc2 plugins such as ZFP or NDLZ need the super-chunk's context) is left to h5py."""
    if len(cd_values) < 4 or cd_values[2] < 1:
        return None
    compressor = COMPRESSORS.get(cd_values[6] if len(cd_values) > 6 else 0)
    shuffle = cd_values[5] if len(cd_values) > 5 else 1
    clevel = cd_values[4] if len(cd_values) > 4 else 5
    if compressor is None or shuffle not in _SHUFFLES or clevel > 9:
        return None
    configuration: dict[str, Any] = {
        "typesize": cd_values[2],
        "clevel": clevel,
        "compressor": compressor,
        "shuffle": shuffle,
        "blocksize": cd_values[1],
    }
    if len(cd_values) > 7:
        rank = cd_values[7]
        if not 1 < rank <= _MAX_DIM or len(cd_values) != 8 + rank:
            return None
        configuration["chunkshape"] = list(cd_values[8 : 8 + rank])
    return configuration


def register() -> None:
    """Register :class:`Blosc2Codec` with zarr under ``h5lens.blosc2`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, Blosc2Codec)
