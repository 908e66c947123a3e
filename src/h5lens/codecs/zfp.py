"""Zarr v3 codec for chunks written by the H5Z-ZFP filter (filter id 32013).

The filter is ``H5Zzfp.c`` of https://github.com/LLNL/H5Z-ZFP, shipped by hdf5plugin
(``hdf5plugin.Zfp``).

Where the zfp header lives
--------------------------
A zfp stream normally starts with a header (``zfp_write_header``: 32 bits of magic
``"zfp"`` + codec version, 52 bits of field metadata (type, dimensions), 12 bits of
mode, or 12 + 64 bits for modes the short form cannot say). H5Z-ZFP writes that header
*once*, into the dataset's cd_values: ``cd_values[0]`` packs the zfp library, zfp codec
and filter versions, ``cd_values[1:]`` are the header bits as 32-bit words. Each chunk
is the bare compressed stream, from bit 0. The field is the chunk with its size-1
dimensions dropped (at most 4 left), fastest dimension first; the type is int32, int64,
float or double.

Decoding rebuilds a whole zfp stream, header then chunk, and gives it to
``imagecodecs.zfp_decode``. That needs the two to meet on a byte boundary: a short
header is 96 bits (12 bytes), so the chunk's bytes simply follow it. zfp's bit stream is
little-endian (bits fill each word from the least significant end; H5Z-ZFP builds zfp
with 8-bit words, imagecodecs with 64-bit ones: on a little-endian machine the same
bits). The long-form header (148 bits: expert mode, or a rate above 2048 bits a block)
would need the chunk shifted by 4 bits; it is not supported here, nor are cd_values
written on a big-endian machine (H5Z-ZFP byte-swaps those on read) or a zfp codec
version other than 5: for those the table has no codec and the data is materialised.
Reversible, fixed-rate, fixed-precision and fixed-accuracy modes have a short header.

Chunks HDF5 stored without the filter
-------------------------------------
h5py adds third-party filters as optional: when zfp fails on a chunk, HDF5 stores it raw
and sets the chunk's filter mask. h5lens re-encodes such chunks with the array's codecs,
so the encoder must be lossless, while four of zfp's five modes are lossy. So, as HDF5
itself does: a chunk exactly as long as its decoded size is raw data, anything else a
zfp stream. The encoder writes the data raw, except in reversible (lossless) mode, where
it keeps a zfp stream strictly shorter than the data. A zfp stream of exactly the
decoded size (possible in fixed-rate mode) would read as raw: the indexer sees that
length (``ambiguous_length`` in ``h5lens.scan.codecs``) and materialises such chunks.

Configuration: ``{"header": "<hex of the 12 header bytes>"}`` (mode, type and shape
included; ``describe_header`` spells them out).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Buffer as BytesLike
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

from h5lens.codecs.lzf import decoded_size

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = [
    "CODEC_NAME",
    "HDF5_FILTER_ID",
    "ZFPCodec",
    "codec_configuration",
    "decode_hdf5_zfp",
    "describe_header",
    "encode_hdf5_zfp",
    "register",
]

CODEC_NAME = "h5lens.zfp"
HDF5_FILTER_ID = 32013
_CODEC_VERSION = 5  # ZFP_CODEC of zfp 0.5.x and 1.0.x (imagecodecs)
_HEADER_BYTES = 12  # magic 32 + meta 52 + short mode 12 bits
_TYPES = {1: "int32", 2: "int64", 3: "float32", 4: "float64"}  # zfp_type: 2 bits, all four used


def _bits(header: bytes, start: int, count: int) -> int:
    return (int.from_bytes(header, "little") >> start) & ((1 << count) - 1)


def describe_header(header: bytes) -> dict[str, Any]:
    """Type, shape (C order) and mode of a short zfp header (zfp's ``zfp_field_set_metadata``
    and ``zfp_stream_set_mode``)."""
    if len(header) < _HEADER_BYTES or header[:3] != b"zfp":
        raise ValueError(f"{CODEC_NAME}: not a zfp header: {header.hex()}")
    meta = _bits(header, 32, 52)
    type_ = _TYPES[(meta & 0x3) + 1]
    dims = ((meta >> 2) & 0x3) + 1
    width = {1: 48, 2: 24, 3: 16, 4: 12}[dims]
    sizes = [((meta >> (4 + width * i)) & ((1 << width) - 1)) + 1 for i in range(dims)]  # fastest first
    mode = _bits(header, 84, 12)
    described: dict[str, Any]
    if mode < 2048:
        described = {"mode": "fixed-rate", "maxbits": mode + 1}
    elif mode < 2048 + 128:
        described = {"mode": "fixed-precision", "maxprec": mode + 1 - 2048}
    elif mode == 2048 + 128:
        described = {"mode": "reversible"}
    elif mode < 0xFFF:
        described = {"mode": "fixed-accuracy", "minexp": mode - 1074 - (2048 + 128 + 1)}
    else:
        described = {"mode": "long"}  # 64 bits of parameters follow: not a short header
    return {"codec": header[3], "type": type_, "shape": sizes[::-1], **described}


def _header(cd_values: tuple[int, ...]) -> bytes | None:
    """The short zfp header in cd_values, or None if this codec cannot use it."""
    if len(cd_values) < 4:
        return None
    words = struct.pack(f"<{len(cd_values) - 1}I", *(v & 0xFFFF_FFFF for v in cd_values[1:]))
    if words[:3] != b"zfp" or words[3] != _CODEC_VERSION:  # a big-endian writer, or another codec
        return None
    header = words[:_HEADER_BYTES]
    info = describe_header(header)
    return None if info["mode"] == "long" else header


def decode_hdf5_zfp(data: BytesLike, header: bytes, expected: int | None) -> bytes:
    """Decode one chunk (see the module docstring): raw if as long as the data, else a zfp stream."""
    import imagecodecs

    src = memoryview(data).cast("B")
    if expected is not None and len(src) == expected:
        return bytes(src)  # stored without the filter
    # header + stream, padded so that zfp's 64-bit word reads stay inside the buffer
    stream = bytearray(header)
    stream += src
    stream += bytes(-len(stream) % 8 + 8)
    values = imagecodecs.zfp_decode(stream)
    out = np.ascontiguousarray(values).tobytes()
    if expected is not None and len(out) != expected:
        raise ValueError(f"{CODEC_NAME}: decoded {len(out)} bytes, expected {expected}")
    return out


def encode_hdf5_zfp(data: BytesLike, header: bytes) -> bytes:
    """Encode losslessly (see the module docstring): zfp only in reversible mode and only if shorter."""
    src = memoryview(data).cast("B")
    info = describe_header(header)
    if info["mode"] != "reversible":
        return bytes(src)
    import imagecodecs

    values = np.frombuffer(src, dtype=np.dtype(info["type"]))
    if values.size != int(np.prod(info["shape"])):
        return bytes(src)
    encoded = bytes(imagecodecs.zfp_encode(values.reshape(info["shape"]), mode="reversible", header=True))
    if encoded[:_HEADER_BYTES] != header:  # imagecodecs wrote another header: do not risk it
        return bytes(src)
    stream = encoded[_HEADER_BYTES:]
    return stream if len(stream) < len(src) else bytes(src)


@dataclass(frozen=True)
class ZFPCodec(BytesBytesCodec):
    """H5Z-ZFP (filter 32013) as a zarr v3 bytes→bytes codec. JSON:
    ``{"name": "h5lens.zfp", "configuration": {"header": "7a667005..."}}``."""

    header: bytes = b""
    is_fixed_size = False

    def __post_init__(self) -> None:
        info = describe_header(self.header)
        if info["codec"] != _CODEC_VERSION or info["mode"] == "long":
            raise ValueError(f"{CODEC_NAME}: unsupported zfp header {self.header.hex()} ({info})")

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, CODEC_NAME)
        configuration = dict(configuration or {})
        if set(configuration) != {"header"} or not isinstance(configuration["header"], str):
            raise ValueError(f"{CODEC_NAME} takes one configuration key, header (hex), got {configuration!r}")
        try:
            header = bytes.fromhex(configuration["header"])
        except ValueError as e:
            raise ValueError(f"{CODEC_NAME}: header is not hex: {e}") from e
        return cls(header=header)

    def to_dict(self) -> dict[str, JSON]:
        return {"name": CODEC_NAME, "configuration": {"header": self.header.hex()}}

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        decoded = decode_hdf5_zfp(chunk_bytes.as_numpy_array(), self.header, decoded_size(chunk_spec))
        return chunk_spec.prototype.buffer.from_bytes(decoded)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return chunk_spec.prototype.buffer.from_bytes(encode_hdf5_zfp(chunk_bytes.as_numpy_array(), self.header))

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)

    def compute_encoded_size(self, _input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        raise NotImplementedError


def codec_configuration(cd_values: tuple[int, ...]) -> dict[str, Any] | None:
    """The configuration for the filter's cd_values, or None when this codec cannot decode them."""
    header = _header(cd_values)
    return None if header is None else {"header": header.hex()}


def register() -> None:
    """Register :class:`ZFPCodec` with zarr under ``h5lens.zfp`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, ZFPCodec)
