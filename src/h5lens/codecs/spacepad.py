"""Zarr v3 codec for HDF5 fixed-length strings padded with spaces.

HDF5 pads a fixed-length string to its size with NULs (``H5T_STR_NULLPAD``, ``NULLTERM``)
or, as Fortran and IDL writers do, with spaces (``H5T_STR_SPACEPAD``). libhdf5 converts a
space-padded string to numpy's NUL-padded ``S`` type by dropping the trailing spaces: h5py
gives ``b'ab'`` where the file holds ``b'ab    '``. zarr's ``null_terminated_bytes`` type
strips only NULs.

``h5lens.spacepad`` (no configuration) is an array-to-array codec placed before the ``bytes``
codec: decoding strips trailing spaces from each value (numpy then pads with NULs, as for
every ``S`` value); encoding pads each value with spaces to its length, as HDF5 stores it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import ArrayArrayCodec

from h5lens.codecs.named import NoConfiguration

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer

__all__ = ["CODEC_NAME", "SpacePadCodec", "codec_json", "register", "strip", "pad"]

CODEC_NAME = "h5lens.spacepad"


def strip(values: np.ndarray) -> np.ndarray:
    """Each value without its trailing spaces (an ``S`` array of the same length)."""
    return np.char.rstrip(values, b" ").astype(values.dtype)


def pad(values: np.ndarray) -> np.ndarray:
    """Each value padded with spaces to the array's length, as HDF5 stores it."""
    return np.char.ljust(values, values.dtype.itemsize, b" ").astype(values.dtype)


@dataclass(frozen=True)
class SpacePadCodec(NoConfiguration, ArrayArrayCodec):
    """HDF5's space padding. JSON: ``{"name": "h5lens.spacepad"}``."""

    codec_name = CODEC_NAME
    is_fixed_size = True

    def validate(self, *, shape: Any, dtype: Any, chunk_grid: Any) -> None:
        if dtype.to_native_dtype().kind != "S":
            raise ValueError(f"{CODEC_NAME}: fixed-length byte strings only, not {dtype}")

    def _decode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return chunk_spec.prototype.nd_buffer.from_numpy_array(strip(np.asarray(chunk_array.as_numpy_array())))

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return await asyncio.to_thread(self._decode_sync, chunk_array, chunk_spec)

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer | None:
        return chunk_spec.prototype.nd_buffer.from_numpy_array(pad(np.asarray(chunk_array.as_numpy_array())))

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer | None:
        return await asyncio.to_thread(self._encode_sync, chunk_array, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        return input_byte_length


def codec_json() -> dict[str, Any]:
    return {"name": CODEC_NAME}


def register() -> None:
    """Register :class:`SpacePadCodec` with zarr under ``h5lens.spacepad`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, SpacePadCodec)
