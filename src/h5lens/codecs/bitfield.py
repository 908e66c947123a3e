"""Zarr v3 codec for HDF5 integers with a bit precision or offset.

An HDF5 integer type may keep its value in a field of its word: ``precision`` bits starting
at bit ``offset`` (``H5Tset_precision`` / ``H5Tset_offset``; instrument files keep 12-bit
samples in 16-bit words). libhdf5 reads such an integer by shifting the field down and, for
a signed type, sign-extending it from its top bit; the bits outside the field (HDF5's
padding) are not part of the value. A zarr ``bytes`` codec alone would read the whole word:
an int16 of precision 12 holding -2000 would read 2096.

``h5lens.bitfield`` (configuration ``{"precision": p, "offset": o, "signed": bool}``) is an
array-to-array codec placed before the ``bytes`` codec: the stored words are decoded as the
array's integer type, then this codec extracts the field as libhdf5 does. Encoding writes
the field back with zero padding bits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import ArrayArrayCodec
from zarr.core.common import JSON, parse_named_configuration

from h5lens.codecs.named import only

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer

__all__ = ["CODEC_NAME", "BitfieldCodec", "codec_json", "extract", "insert", "register"]

CODEC_NAME = "h5lens.bitfield"


def extract(words: np.ndarray, precision: int, offset: int, signed: bool) -> np.ndarray:
    """The field of each integer in ``words``, as libhdf5 converts it: shifted down, masked,
    and sign-extended from its top bit for a signed type; of ``words``' dtype."""
    native = words.astype(words.dtype.newbyteorder("="), copy=False)  # some zarr releases hand stored order
    unsigned = native.view(native.dtype.str.replace("i", "u"))
    field = (unsigned.astype(np.uint64) >> np.uint64(offset)) & np.uint64((1 << precision) - 1)
    if not signed:
        return field.astype(words.dtype)
    top = np.uint64(1 << (precision - 1))
    negative = (field & top) != 0
    values = field.astype(np.int64)
    values[negative] -= np.int64(1 << (precision - 1)) * 2
    return values.astype(words.dtype)


def insert(values: np.ndarray, precision: int, offset: int) -> np.ndarray:
    """The words that hold ``values`` in the field (padding bits zero), of ``values``' dtype."""
    mask = (1 << precision) - 1
    native = values.dtype.newbyteorder("=")
    field = values.astype(np.int64).view(np.uint64) & np.uint64(mask)
    words = (field << np.uint64(offset)).astype(native.str.replace("i", "u"))
    return words.view(native).astype(values.dtype, copy=False)


@dataclass(frozen=True)
class BitfieldCodec(ArrayArrayCodec):
    """HDF5's integer bit field. JSON: ``{"name": "h5lens.bitfield", "configuration":
    {"precision": p, "offset": o, "signed": bool}}``."""

    precision: int = 8
    offset: int = 0
    signed: bool = True
    is_fixed_size = True

    def __post_init__(self) -> None:
        for name in ("precision", "offset"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{CODEC_NAME}: {name} must be a non-negative integer, got {value!r}")
        if not 1 <= self.precision <= 64 or self.precision + self.offset > 64:
            raise ValueError(f"{CODEC_NAME}: a field of {self.precision} bits at bit {self.offset} fits no integer")
        if not isinstance(self.signed, bool):
            raise ValueError(f"{CODEC_NAME}: signed must be true or false, got {self.signed!r}")

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, CODEC_NAME)
        return cls(**only(configuration, CODEC_NAME, {"precision", "offset", "signed"}))

    def to_dict(self) -> dict[str, JSON]:
        return {"name": CODEC_NAME, "configuration": codec_json(self.precision, self.offset, self.signed)["configuration"]}

    def validate(self, *, shape: Any, dtype: Any, chunk_grid: Any) -> None:
        native = dtype.to_native_dtype()
        if native.kind not in "iu" or self.precision + self.offset > 8 * native.itemsize:
            raise ValueError(f"{CODEC_NAME}: a {self.precision}-bit field at bit {self.offset} does not fit {native}")

    def _decode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        words = np.asarray(chunk_array.as_numpy_array())
        return chunk_spec.prototype.nd_buffer.from_numpy_array(extract(words, self.precision, self.offset, self.signed))

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return await asyncio.to_thread(self._decode_sync, chunk_array, chunk_spec)

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer | None:
        values = np.asarray(chunk_array.as_numpy_array())
        return chunk_spec.prototype.nd_buffer.from_numpy_array(insert(values, self.precision, self.offset))

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer | None:
        return await asyncio.to_thread(self._encode_sync, chunk_array, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        return input_byte_length


def codec_json(precision: int, offset: int, signed: bool) -> dict[str, Any]:
    return {"name": CODEC_NAME, "configuration": {"precision": precision, "offset": offset, "signed": signed}}


def register() -> None:
    """Register :class:`BitfieldCodec` with zarr under ``h5lens.bitfield`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, BitfieldCodec)
