"""Zarr v3 codec for chunks written by HDF5's LZF filter (filter id 32000, h5py ``compression="lzf"``).

What the HDF5 filter writes
---------------------------
h5py's ``lzf/lzf_filter.c`` stores the *raw* output of liblzf's ``lzf_compress``:
no header, no length prefix, no checksum. Its cd_values are
``(filter revision, LZF API version, chunk size in bytes)``; the last one is only a
buffer-size hint for the decompressor, which grows the buffer if it was too small.

The compressor writes into a buffer as large as the input. When liblzf cannot fit
the output there it returns 0, and because h5py adds the filter with
``H5Z_FLAG_OPTIONAL`` HDF5 then stores the chunk *uncompressed* and sets the LZF bit in
that chunk's filter mask. The mask lives in the HDF5 chunk index, not in the chunk
bytes, so a zarr codec cannot see it. This codec tells the two cases apart by length,
the only way it can:

* ``len(chunk) == decoded size`` → the filter was skipped, the bytes are the data;
* otherwise → a raw LZF stream, decompressed into a buffer of the decoded size.

The decoded size is ``prod(chunk_spec.shape) * itemsize``: zarr hands every
bytes→bytes codec the chunk spec, and HDF5 (like zarr) always stores full-size
chunks, edge chunks included. That is the size the LZF filter saw, as long as the
filters written before it keep sizes unchanged (shuffle does); h5py's own pipeline
order (shuffle, compression, fletcher32) guarantees that.

One case is ambiguous: liblzf may fill the output buffer exactly, so HDF5 can store a
*compressed* chunk whose length equals the decoded size (mask 0). It is rare (3 of
679 near-incompressible 1 KiB chunks in a brute-force test), and it would be read
here as uncompressed. The indexer sees the mask and must not reference such a chunk
through this codec (inline it instead). Chunks encoded by this codec never hit the
case: the encoder only keeps LZF output that is strictly shorter than the input.

Name
----
``h5lens.lzf``. The one name other readers know for LZF is imagecodecs'
``imagecodecs_lzf`` (zarr v3 class ``imagecodecs.zarr.Lzf``, registered by
``imagecodecs.zarr.register_codecs()`` or the ``imagecodecs-zarr`` entry points;
VirtualiZarr also maps HDF5 LZF to it). Its ``{"header": false}`` mode decodes
compressed HDF5-LZF chunks, but it knows nothing of the uncompressed chunks HDF5
writes when compression does not help, and its default ``header: true`` expects a
length prefix HDF5 never writes. Publishing our different semantics under that name
would let an imagecodecs implementation silently take over (zarr picks "any
implementation" when two are registered under one name) and fail on those chunks.
So the codec gets a name of its own in the h5lens namespace.

Backend: ``python-lzf`` (``lzf.decompress(data, max_length)``), which wraps the same
liblzf as h5py's filter and reads the raw stream without a header. (imagecodecs'
encoder was tried as a fallback and wrote streams h5py's filter rejects for some
incompressible chunks: one backend, the one h5py agrees with.)
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zarr.abc.codec import BytesBytesCodec

from h5lens.codecs.named import NoConfiguration

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["CODEC_NAME", "HDF5_FILTER_ID", "LZFCodec", "register"]

CODEC_NAME = "h5lens.lzf"
HDF5_FILTER_ID = 32000

# An LZF back-reference token of 3 bytes expands to at most 264 bytes, so no stream
# decodes to more than ~88x its length; h5py grows its buffer without a bound.
_MAX_EXPANSION = 90


class _Backend:
    """Raw-LZF primitives: ``decompress`` returns None when ``capacity`` is too small."""

    name: str

    def decompress(self, data: bytes, capacity: int) -> bytes | None:
        raise NotImplementedError

    def compress(self, data: bytes, max_length: int) -> bytes | None:
        raise NotImplementedError


class _PythonLzf(_Backend):
    name = "python-lzf"

    def __init__(self) -> None:
        import lzf

        self._lzf = lzf

    def decompress(self, data: bytes, capacity: int) -> bytes | None:
        try:
            return self._lzf.decompress(data, capacity)  # None: output larger than capacity
        except ValueError as e:
            raise ValueError(f"invalid LZF data: {e}") from e

    def compress(self, data: bytes, max_length: int) -> bytes | None:
        return self._lzf.compress(data, max_length)  # None: does not fit in max_length


_BACKEND: _Backend | None = None


def _backend() -> _Backend:
    global _BACKEND
    if _BACKEND is None:
        try:
            _BACKEND = _PythonLzf()
        except ImportError as e:
            raise ImportError(f"the {CODEC_NAME} codec needs python-lzf ({e})") from e
    return _BACKEND


def decoded_size(chunk_spec: ArraySpec) -> int | None:
    """Bytes of one decoded chunk, or None when the data type has no fixed item size."""
    try:
        native = chunk_spec.dtype.to_native_dtype()
    except Exception:  # pragma: no cover - exotic zarr dtypes
        return None
    if native.kind == "O" or native.itemsize == 0:
        return None
    return math.prod(chunk_spec.shape) * native.itemsize


def decode_hdf5_lzf(data: bytes | memoryview, expected: int | None, backend: _Backend | None = None) -> bytes:
    """Decode one HDF5-LZF chunk (see the module docstring for the rules)."""
    backend = backend or _backend()
    if not isinstance(data, bytes):
        data = bytes(data)  # python-lzf takes bytes only
    if expected is not None and len(data) == expected:
        return bytes(data)  # the optional filter was skipped: stored uncompressed
    if not data or expected == 0:
        raise ValueError(f"LZF chunk of {len(data)} bytes for a chunk of {expected} bytes")
    # As lzf_filter.c: start from the known size and grow the buffer when it is short
    # (only possible if a filter before LZF changed the size; h5py's pipelines never do).
    limit = len(data) * _MAX_EXPANSION + 64
    capacity = expected if expected is not None else len(data) * 4
    while True:
        out = backend.decompress(data, capacity)
        if out is not None:
            break
        if capacity >= limit:
            raise ValueError(f"invalid LZF data: {len(data)} bytes claim more than {limit} decoded bytes")
        capacity = min(limit, max(capacity * 2, capacity + len(data)))
    if expected is not None and len(out) < expected:
        raise ValueError(f"LZF chunk decoded to {len(out)} bytes, expected {expected}")
    return out


def decode_hdf5_lzf_into(data: bytes | memoryview, out: memoryview) -> None:
    """Decode one HDF5-LZF chunk of ``len(out)`` decoded bytes straight into ``out``
    (imagecodecs' liblzf, which writes into a buffer; python-lzf cannot): a chunk stored
    uncompressed is copied; one that does not decode to exactly ``len(out)`` bytes goes
    through :func:`decode_hdf5_lzf`, whose error it raises."""
    expected = len(out)
    if len(data) == expected:
        out[:] = data  # the optional filter was skipped: stored uncompressed
        return
    import imagecodecs

    try:
        if len(imagecodecs.lzf_decode(data, header=False, out=out)) == expected:
            return
    except imagecodecs.LzfError:
        pass
    decoded = decode_hdf5_lzf(data, expected)
    if len(decoded) != expected:
        raise ValueError(f"LZF chunk decoded to {len(decoded)} bytes, expected {expected}")
    out[:] = decoded


def encode_hdf5_lzf(data: bytes, backend: _Backend | None = None) -> bytes:
    """Encode as the HDF5 filter would: raw LZF if strictly smaller, else the input unchanged."""
    backend = backend or _backend()
    if len(data) <= 1:
        return bytes(data)
    out = backend.compress(data, len(data) - 1)
    # python-lzf may return a stream one byte longer than the bound it was given: a stream as
    # long as the data would read back as stored uncompressed, so check the length here
    return bytes(data) if out is None or len(out) >= len(data) else out


@dataclass(frozen=True)
class LZFCodec(NoConfiguration, BytesBytesCodec):
    """HDF5-LZF (filter 32000) as a zarr v3 bytes→bytes codec. JSON: ``{"name": "h5lens.lzf"}``."""

    codec_name = CODEC_NAME
    is_fixed_size = False

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        data = chunk_bytes.to_bytes()
        return chunk_spec.prototype.buffer.from_bytes(decode_hdf5_lzf(data, decoded_size(chunk_spec)))

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return chunk_spec.prototype.buffer.from_bytes(encode_hdf5_lzf(chunk_bytes.to_bytes()))

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)

    def compute_encoded_size(self, _input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        raise NotImplementedError


def register() -> None:
    """Register :class:`LZFCodec` with zarr under ``h5lens.lzf``; safe to call any number of times.

    zarr keys implementations by fully qualified class name, the same key its
    ``zarr.codecs`` entry-point loader uses, so this never adds a second implementation.
    """
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, LZFCodec)
