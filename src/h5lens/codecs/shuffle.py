"""Zarr v3 codec for HDF5's shuffle filter where it runs after a filter that changes length.

HDF5's shuffle (filter 2) regroups a buffer's bytes by position within each element; a
buffer whose length is not a multiple of the element size keeps its last
``length % elementsize`` bytes as they are. numcodecs' ``shuffle`` refuses such buffers.
Shuffle normally runs first, on whole chunks, and ``numcodecs.shuffle`` decodes it. But
netCDF-C writes fletcher32 *before* shuffle: shuffle then sees the data plus a 4-byte
checksum, and for 8-byte elements those 4 bytes are a remainder. Shuffle after a
compressor sees a buffer of any length.

``h5lens.shuffle`` (configuration ``{"elementsize": n}``) is the filter with HDF5's rule,
written only for such pipelines; shuffle first stays ``numcodecs.shuffle``, which every
zarr reader has.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["CODEC_NAME", "HDF5ShuffleCodec", "register", "shuffle", "unshuffle"]

CODEC_NAME = "h5lens.shuffle"


def unshuffle(data: bytes | memoryview, elementsize: int) -> bytes:
    """Undo HDF5's shuffle: whole elements regrouped, the remainder kept as it is."""
    count = len(data) // elementsize
    body = np.frombuffer(data, dtype=np.uint8, count=count * elementsize)
    whole = body.reshape(elementsize, count).T.tobytes()
    return whole if count * elementsize == len(data) else whole + bytes(data[count * elementsize :])


def shuffle(data: bytes | memoryview, elementsize: int) -> bytes:
    """HDF5's shuffle: byte i of every element together, the remainder kept at the end."""
    count = len(data) // elementsize
    body = np.frombuffer(data, dtype=np.uint8, count=count * elementsize)
    return body.reshape(count, elementsize).T.tobytes() + bytes(data[count * elementsize :])


@dataclass(frozen=True)
class HDF5ShuffleCodec(BytesBytesCodec):
    """HDF5 shuffle with its remainder rule. JSON: ``{"name": "h5lens.shuffle",
    "configuration": {"elementsize": n}}``."""

    elementsize: int = 1
    is_fixed_size = True

    def __post_init__(self) -> None:
        if not isinstance(self.elementsize, int) or isinstance(self.elementsize, bool) or self.elementsize < 1:
            raise ValueError(f"{CODEC_NAME}: elementsize must be a positive integer, got {self.elementsize!r}")

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, CODEC_NAME)
        elementsize = configuration.get("elementsize", 1) if configuration else 1
        if set(configuration or {}) - {"elementsize"}:
            raise ValueError(f"{CODEC_NAME} takes only elementsize, got {configuration!r}")
        return cls(elementsize=elementsize)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        return {"name": CODEC_NAME, "configuration": {"elementsize": self.elementsize}}

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return chunk_spec.prototype.buffer.from_bytes(unshuffle(chunk_bytes.to_bytes(), self.elementsize))

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return chunk_spec.prototype.buffer.from_bytes(shuffle(chunk_bytes.to_bytes(), self.elementsize))

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        return input_byte_length


def codec_json(elementsize: int) -> dict[str, Any]:
    return {"name": CODEC_NAME, "configuration": {"elementsize": elementsize}}


def register() -> None:
    """Register :class:`HDF5ShuffleCodec` with zarr under ``h5lens.shuffle`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, HDF5ShuffleCodec)
