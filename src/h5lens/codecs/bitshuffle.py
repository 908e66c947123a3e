"""Zarr v3 codec for chunks written by the HDF5 bitshuffle filter (filter id 32008).

The filter is ``bshuf_h5filter.c`` of https://github.com/kiyo-masui/bitshuffle, shipped by
hdf5plugin (``hdf5plugin.Bitshuffle``) and by the ``bitshuffle`` package.

cd_values
---------
``(major, minor, element size, block size, compression[, zstd level])``: the filter's
``set_local`` puts the bitshuffle version in slots 0-1 and ``H5Tget_size`` of the data
type in slot 2, then the user's options. The block size counts *elements*, a multiple
of 8; 0 (or absent) means ``bshuf_default_block_size``: ``max(8192 // size rounded down
to a multiple of 8, 128)``, a function bitshuffle keeps stable across versions. The
compression is 0 (absent) none, 2 LZ4, 3 zstd.

What the filter writes
----------------------
*Blocked bitshuffle* (``bshuf_blocked_wrap_fun``) cuts ``n`` elements into
``n // block`` blocks of ``block`` elements, then one block of
``n % block`` rounded down to a multiple of 8 elements (if any), and leaves the last
``n % 8`` elements as they are, at the end. Each block is bit-transposed on its own.

* No compression: the blocked bitshuffle of the chunk, same length, no header. The
  block size comes from cd_values.
* LZ4 / zstd: a 12-byte header, big-endian: ``uint64`` decoded bytes and ``uint32``
  block size in *bytes*; then per block a big-endian ``uint32`` compressed length and
  the LZ4 block (``LZ4_compress_default``) or zstd frame (``ZSTD_compress`` at the
  cd_values level) of the bit-transposed block; then the ``n % 8`` leftover elements,
  raw. On decode the filter takes the block size from the header, not cd_values.

Decoding here: decompress the blocks one after the other into one buffer (each block
decodes to a known size), copy the leftover after them, then undo the blocked
bitshuffle of the whole buffer in one call with the same block size: blocked
bitshuffle walks the same blocks and leaves the same leftover untouched, so this is
exactly the filter's per-block untranspose. The filter requires the chunk to be whole
elements, and so does this codec.

Encoding does what the filter does (same block layout, ``LZ4_compress_default``,
``ZSTD_compress``): its output reads back through the HDF5 filter, and for LZ4 it is
byte-identical to what the filter writes.

Configuration: ``{"elementsize": n, "blocksize": elements (0 = default),
"compression": "none" | "lz4" | "zstd"}`` plus ``"level"`` (zstd, for encoding).

Backend: imagecodecs (``bitshuffle_encode/decode``, ``lz4_encode/decode``,
``zstd_encode/decode``), imported on first use.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Buffer as BytesLike
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = [
    "CODEC_NAME",
    "COMPRESSIONS",
    "HDF5_FILTER_ID",
    "BitshuffleCodec",
    "codec_configuration",
    "decode_hdf5_bitshuffle",
    "default_block_size",
    "encode_hdf5_bitshuffle",
    "register",
]

CODEC_NAME = "h5lens.bitshuffle"
HDF5_FILTER_ID = 32008
# cd_values[4] -> configuration name (bshuf_h5filter.h: BSHUF_H5_COMPRESS_LZ4 2, _ZSTD 3)
COMPRESSIONS = {0: "none", 2: "lz4", 3: "zstd"}
_HEADER = struct.Struct(">QI")
_LENGTH = struct.Struct(">I")
_ZSTD_DEFAULT_LEVEL = 3  # hdf5plugin.Bitshuffle's default clevel


def default_block_size(elementsize: int) -> int:
    """``bshuf_default_block_size``: ~8 KiB of elements, a multiple of 8, at least 128."""
    block = 8192 // elementsize
    return max(block - block % 8, 128)


def _blocks(nelements: int, blocksize: int) -> list[int]:
    """Element counts of the compressed blocks, in order (the leftover ``n % 8`` is not a block)."""
    full, rest = divmod(nelements, blocksize)
    last = rest - rest % 8
    return [blocksize] * full + ([last] if last else [])


def _check(elementsize: int, blocksize: int) -> None:
    if elementsize < 1:
        raise ValueError(f"{CODEC_NAME}: element size must be positive, got {elementsize}")
    if blocksize < 0 or blocksize % 8:
        raise ValueError(f"{CODEC_NAME}: block size must be a multiple of 8 elements, got {blocksize}")


def decode_hdf5_bitshuffle(
    data: BytesLike, elementsize: int, blocksize: int = 0, compression: str = "lz4"
) -> bytes:
    """Decode one chunk as ``bshuf_h5filter`` does (see the module docstring)."""
    import imagecodecs

    _check(elementsize, blocksize)
    # a memoryview, never an ndarray: imagecodecs takes an ndarray's item size from its dtype
    src = memoryview(data).cast("B")
    if compression == "none":
        if len(src) % elementsize:
            raise ValueError(f"{CODEC_NAME}: {len(src)} bytes is not a whole number of {elementsize}-byte elements")
        block = blocksize or default_block_size(elementsize)
        return bytes(imagecodecs.bitshuffle_decode(src, itemsize=elementsize, blocksize=block))
    if compression not in ("lz4", "zstd"):
        raise ValueError(f"{CODEC_NAME}: unknown compression {compression!r}")
    if len(src) < _HEADER.size:
        raise ValueError(f"{CODEC_NAME}: a {len(src)}-byte chunk has no room for the 12-byte header")
    total, block_bytes = _HEADER.unpack_from(src, 0)
    if total % elementsize or block_bytes % elementsize:
        raise ValueError(f"{CODEC_NAME}: header sizes {total}, {block_bytes} are not whole {elementsize}-byte elements")
    block = block_bytes // elementsize
    if block == 0 or block % 8:
        raise ValueError(f"{CODEC_NAME}: header block size of {block} elements is not a positive multiple of 8")
    nelements = total // elementsize
    full, rest = divmod(nelements, block)
    nblocks = full + (1 if rest >= 8 else 0)
    # each block takes at least its 4-byte length and 1 byte: a damaged header cannot make
    # this allocate more than the chunk could hold
    if _HEADER.size + 5 * nblocks + (nelements % 8) * elementsize > len(src):
        raise ValueError(f"{CODEC_NAME}: header claims {total} bytes, more than a {len(src)}-byte chunk holds")
    out = bytearray(total)
    dst = memoryview(out)
    decompress = imagecodecs.lz4_decode if compression == "lz4" else imagecodecs.zstd_decode
    pos, written = _HEADER.size, 0
    for count in _blocks(nelements, block):
        if pos + 4 > len(src):
            raise ValueError(f"{CODEC_NAME}: chunk ends inside block headers")
        (length,) = _LENGTH.unpack_from(src, pos)
        pos += 4
        if pos + length > len(src):
            raise ValueError(f"{CODEC_NAME}: block of {length} bytes runs past the chunk end")
        size = count * elementsize
        got = decompress(src[pos : pos + length], out=dst[written : written + size])
        if len(got) != size:
            raise ValueError(f"{CODEC_NAME}: block decoded to {len(got)} bytes, expected {size}")
        pos += length
        written += size
    leftover = total - written
    if pos + leftover != len(src):
        raise ValueError(f"{CODEC_NAME}: {len(src) - pos} bytes after the blocks, expected {leftover}")
    dst[written:] = src[pos:]
    return bytes(imagecodecs.bitshuffle_decode(out, itemsize=elementsize, blocksize=block))


def encode_hdf5_bitshuffle(
    data: BytesLike,
    elementsize: int,
    blocksize: int = 0,
    compression: str = "lz4",
    level: int | None = None,
) -> bytes:
    """Encode one chunk as ``bshuf_h5filter`` does (see the module docstring)."""
    import imagecodecs

    _check(elementsize, blocksize)
    src = memoryview(data).cast("B")  # not an ndarray (see decode_hdf5_bitshuffle)
    if len(src) % elementsize:
        raise ValueError(f"{CODEC_NAME}: {len(src)} bytes is not a whole number of {elementsize}-byte elements")
    block = blocksize or default_block_size(elementsize)
    shuffled = memoryview(imagecodecs.bitshuffle_encode(src, itemsize=elementsize, blocksize=block)).cast("B")
    if compression == "none":
        return bytes(shuffled)
    if compression == "lz4":

        def compress(b: memoryview) -> bytes:
            return bytes(imagecodecs.lz4_encode(b))  # LZ4_compress_default

    elif compression == "zstd":
        zlevel = _ZSTD_DEFAULT_LEVEL if level is None else level

        def compress(b: memoryview) -> bytes:
            return bytes(imagecodecs.zstd_encode(b, level=zlevel))

    else:
        raise ValueError(f"{CODEC_NAME}: unknown compression {compression!r}")
    parts = [_HEADER.pack(len(shuffled), block * elementsize)]
    pos = 0
    for count in _blocks(len(shuffled) // elementsize, block):
        size = count * elementsize
        packed = compress(shuffled[pos : pos + size])
        parts.append(_LENGTH.pack(len(packed)))
        parts.append(packed)
        pos += size
    parts.append(bytes(shuffled[pos:]))  # the n % 8 leftover elements, as they are
    return b"".join(parts)


@dataclass(frozen=True)
class BitshuffleCodec(BytesBytesCodec):
    """HDF5 bitshuffle (filter 32008) as a zarr v3 bytes→bytes codec. JSON:
    ``{"name": "h5lens.bitshuffle", "configuration": {"elementsize": 4, "blocksize": 0,
    "compression": "lz4"}}``."""

    elementsize: int = 1
    blocksize: int = 0
    compression: str = "lz4"
    level: int | None = None
    is_fixed_size = False

    def __post_init__(self) -> None:
        for name in ("elementsize", "blocksize"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{CODEC_NAME}: {name} must be an integer, got {value!r}")
        _check(self.elementsize, self.blocksize)
        if self.compression not in COMPRESSIONS.values():
            raise ValueError(f"{CODEC_NAME}: compression must be one of {sorted(COMPRESSIONS.values())}")
        if self.level is not None and (not isinstance(self.level, int) or isinstance(self.level, bool)):
            raise ValueError(f"{CODEC_NAME}: level must be an integer, got {self.level!r}")

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, CODEC_NAME)
        configuration = dict(configuration or {})
        unknown = set(configuration) - {"elementsize", "blocksize", "compression", "level"}
        if unknown:
            raise ValueError(f"{CODEC_NAME}: unknown configuration keys {sorted(unknown)}")
        return cls(**configuration)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        configuration: dict[str, JSON] = {
            "elementsize": self.elementsize,
            "blocksize": self.blocksize,
            "compression": self.compression,
        }
        if self.level is not None:
            configuration["level"] = self.level
        return {"name": CODEC_NAME, "configuration": configuration}

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        decoded = decode_hdf5_bitshuffle(
            chunk_bytes.as_numpy_array(), self.elementsize, self.blocksize, self.compression
        )
        return chunk_spec.prototype.buffer.from_bytes(decoded)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        encoded = encode_hdf5_bitshuffle(
            chunk_bytes.as_numpy_array(), self.elementsize, self.blocksize, self.compression, self.level
        )
        return chunk_spec.prototype.buffer.from_bytes(encoded)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        if self.compression == "none":
            return input_byte_length
        raise NotImplementedError


def codec_configuration(cd_values: tuple[int, ...]) -> dict[str, Any] | None:
    """The configuration for the filter's cd_values, or None when this codec cannot decode them."""
    if len(cd_values) < 3 or cd_values[2] < 1:
        return None
    blocksize = cd_values[3] if len(cd_values) > 3 else 0
    compression = COMPRESSIONS.get(cd_values[4] if len(cd_values) > 4 else 0)
    if compression is None or blocksize % 8:
        return None
    configuration: dict[str, Any] = {"elementsize": cd_values[2], "blocksize": blocksize, "compression": compression}
    if compression == "zstd" and len(cd_values) > 5:
        level = cd_values[5]
        configuration["level"] = level - 2**32 if level >= 2**31 else level
    return configuration


def register() -> None:
    """Register :class:`BitshuffleCodec` with zarr under ``h5lens.bitshuffle`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, BitshuffleCodec)
