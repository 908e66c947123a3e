"""How one array's chunks decode, as the decode kernel (:mod:`h5lens.engine.kernel`) uses it.

An :class:`ArrayCodec` holds the filter table's decoders (:mod:`h5lens.codecs.table`) for an
array of plain numbers, and declares what they can do; the kernel uses each capability
instead of a loop of its own per case:

- ``decode_many``: chunks' stored bytes → their decoded bytes, every decoder bound to the
  chunk size once (for small deflate chunks zlib's own function, with nothing between);
- ``into``: the same written straight into a buffer of the chunk's size, where the last
  decoder can and it pays at this size;
- ``head`` / ``head_below``: only the first bytes of a chunk inflated, for a read that
  needs no more of it, where that beats inflating it whole;
- ``unshuffle``: HDF5's usual shuffle-then-deflate has its byte shuffle left out of the
  decoders and undone by :meth:`ArrayCodec.values` for many chunks at once;
- ``cache``: the store's decoded chunks (:mod:`h5lens.engine.decoded_cache`), if it keeps them.

:class:`~h5lens.engine.text.TextCodec` is the other codec the kernel knows. Arrays whose
codecs or data type neither covers get no codec (None) and are read through zarr's own
pipeline: what is decoded here is decoded exactly as zarr would decode it, or not at all.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from h5lens.codecs.table import Buffer, ChunkDecoder, Into, Many, decoder
from h5lens.engine.decoded_cache import DecodedChunks
from h5lens.format import convention
from h5lens.manifest.documents import ArrayDocument

# Chunks at least this big (decoded) stream: each is decoded into a buffer of its thread's own
# and placed by itself, rather than all of them into one block first (a copy of it all).
STREAM_FROM = 64 << 10


@dataclass(frozen=True)
class ArrayCodec:
    """How one array's chunks decode: stored bytes → ``decoders`` (last codec first) →
    values of ``stored`` dtype (the bytes codec's byte order) → ``dtype``."""

    path: str
    dtype: np.dtype
    stored: np.dtype
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    decoders: tuple[ChunkDecoder, ...]
    fill: Any
    sizes: tuple[int, ...]  # per decoder: the bytes it decodes to (an upper bound after a compressor)
    unshuffle: int = 0  # the element size of a byte shuffle undone in bulk, 0 for none
    cache: DecodedChunks | None = field(default=None, compare=False)

    @cached_property
    def chunk_items(self) -> int:
        return math.prod(self.chunk_shape)

    @cached_property
    def chunk_nbytes(self) -> int:
        return self.chunk_items * self.stored.itemsize

    @property
    def decoded_len(self) -> int:
        """The length of one chunk out of :attr:`decode` (bytes)."""
        return self.chunk_nbytes

    @property
    def streams(self) -> bool:
        return self.chunk_nbytes >= STREAM_FROM

    @cached_property
    def _steps(self) -> list[Many]:
        return [step.many(size) for step, size in zip(self.decoders, self.sizes, strict=True)]

    def decode_many(self, datas: Sequence[Buffer]) -> list[Any]:
        """Chunks' stored bytes → their decoded bytes (before the bulk unshuffle)."""
        for step in self._steps:
            datas = step(datas)
        return datas  # type: ignore[return-value]  # a list once through a step

    def decode(self, data: Buffer) -> Any:
        """One chunk's stored bytes → its decoded bytes."""
        return self.decode_many([data])[0]

    @cached_property
    def into(self) -> Into | None:
        last = self.decoders[-1] if self.decoders else None
        if last is None or last.into is None or self.chunk_nbytes < last.into_from:
            return None
        if len(self.decoders) == 1:
            return last.into
        write = last.into
        return lambda data, out: write(_chain(self._steps[:-1], data), out)

    @cached_property
    def head(self) -> Into | None:
        last = self.decoders[-1] if self.decoders else None
        # not for shuffled bytes (a head is not the first values), nor a store that keeps chunks (whole)
        if last is None or last.head is None or self.unshuffle or self.into is None or self.cache is not None:
            return None
        if len(self.decoders) == 1:
            return last.head
        write = last.head
        return lambda data, out: write(_chain(self._steps[:-1], data), out)

    @cached_property
    def head_below(self) -> int:
        """Bytes of a chunk below which :attr:`head` pays (0: never)."""
        return int(self.decoders[-1].head_pays_below * self.chunk_nbytes) if self.head is not None else 0

    def values(self, decoded: Buffer | bytearray, n: int, out: np.ndarray | None = None) -> np.ndarray:
        """``n`` chunks' decoded bytes, one after the other → their values ``(n, *chunk_shape)``
        (written into ``out`` if given). Writable where ``decoded`` is (a bytearray), as h5py's
        values are: callers modify what they read."""
        if self.unshuffle:
            planes = np.frombuffer(decoded, dtype=np.uint8, count=n * self.chunk_nbytes).reshape(n, self.unshuffle, -1)
            return _unshuffle(planes, self.stored, out).reshape(n, *self.chunk_shape)
        found = np.frombuffer(decoded, dtype=self.stored, count=n * self.chunk_items).reshape(n, *self.chunk_shape)
        if out is None:
            return found
        out[...] = found.reshape(out.shape)  # a streamed chunk's place may be flat (Layout.target)
        return out

    def values_of(self, decoded: Sequence[Any], out: np.ndarray | None = None) -> np.ndarray:
        """Chunks' decoded bytes, each apart → their values ``(n, *chunk_shape)``, joined once
        (into a bytearray: writable, and never a view of a buffer of more elements, which
        scipy's sparse constructors would copy again)."""
        return self.values(bytearray().join(decoded), len(decoded), out)


def _chain(steps: list[Many], data: Buffer) -> Any:
    for step in steps:
        data = step([data])[0]
    return data


def _unshuffle(planes: np.ndarray, dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
    """Bytes ``(chunks, k, items)`` (byte plane ``i`` of every element, in turn) -> values
    ``(chunks, items)`` of ``dtype`` (``k`` bytes each): one strided copy per plane, 3-5x
    faster than a transposed copy of it all."""
    if out is None:
        out = np.empty((planes.shape[0], planes.shape[2]), dtype=dtype)
    as_bytes = out.view(np.uint8).reshape(planes.shape[0], planes.shape[2], planes.shape[1])
    for plane in range(planes.shape[1]):
        as_bytes[:, :, plane] = planes[:, plane, :]
    return out


def array_codec(path: str, doc: dict[str, Any]) -> ArrayCodec | None:
    """The :class:`ArrayCodec` of the array whose ``zarr.json`` is ``doc``; None if its data
    type is not plain numbers, or one of its codecs is not in the filter table."""
    view = ArrayDocument.of(doc)
    if view is None or view.attributes.get(convention.SCALAR) or not isinstance(view.data_type, str):
        return None
    if view.edges is not None:  # a rectilinear grid: its segments are regular (h5lens.engine.segments)
        return None
    try:
        dtype = np.dtype(view.data_type)
    except TypeError:
        return None
    if dtype.kind not in "biufc" or not view.shape:  # 0-d arrays: one chunk, nothing to gain
        return None
    codecs = view.codecs
    if not codecs or codecs[0].get("name") != "bytes":
        return None  # array→array codecs, or another array→bytes codec: zarr's own pipeline
    endian = (codecs[0].get("configuration") or {}).get("endian")
    stored = dtype.newbyteorder(">" if endian == "big" else "<") if dtype.itemsize > 1 else dtype
    bytes_codecs = codecs[1:]
    unshuffle = 0
    if bytes_codecs and bytes_codecs[0].get("name") in _SHUFFLES:
        size = (bytes_codecs[0].get("configuration") or {}).get("elementsize", dtype.itemsize)
        if isinstance(size, int) and size == dtype.itemsize and size > 1:
            unshuffle, bytes_codecs = size, bytes_codecs[1:]  # undone in bulk: ArrayCodec.values
    decoders: list[ChunkDecoder] = []
    sizes: list[int] = []
    size = math.prod(view.chunk_shape) * dtype.itemsize  # what each codec decodes to, in encoding order
    for codec in bytes_codecs:
        found = decoder(codec, dtype.itemsize)
        if found is None:
            return None
        decoders.append(found)
        sizes.append(size)
        name = codec.get("name")
        # a checksum adds 4 bytes, a shuffle none; past a compressor only a bound is known
        size = size + 4 if name == "numcodecs.fletcher32" else size if name in _SHUFFLES else 2 * size + 1024
    if not decoders:  # nothing but the bytes codec: a chunk's stored bytes are its values
        decoders.append(ChunkDecoder(lambda data, nbytes: data, many=lambda nbytes: list))
        sizes.append(size)
    return ArrayCodec(
        path=path,
        dtype=dtype,
        stored=stored,
        shape=view.shape,
        chunk_shape=view.chunk_shape,
        decoders=tuple(decoders[::-1]),
        sizes=tuple(sizes[::-1]),
        fill=_fill(view.fill_value, dtype),
        unshuffle=unshuffle,
    )


# Byte shuffles of whole elements: numcodecs' and HDF5's (on a whole chunk they agree).
_SHUFFLES = ("numcodecs.shuffle", "h5lens.shuffle")


def _fill(fill_value: Any, dtype: np.dtype) -> Any:
    try:
        return _fill_of(json.dumps(fill_value, allow_nan=True), dtype)
    except TypeError:  # not JSON (a document built in memory): converted as it is
        from zarr.core.dtype import get_data_type_from_native_dtype

        return get_data_type_from_native_dtype(dtype).from_json_scalar(fill_value, zarr_format=3)


@functools.lru_cache(maxsize=1024)  # zarr's dtype registry takes ~90 µs a lookup: once per (fill, dtype)
def _fill_of(fill_json: str, dtype: np.dtype) -> Any:
    from zarr.core.dtype import get_data_type_from_native_dtype

    return get_data_type_from_native_dtype(dtype).from_json_scalar(json.loads(fill_json), zarr_format=3)


__all__ = ["STREAM_FROM", "ArrayCodec", "array_codec"]
