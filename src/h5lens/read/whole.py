"""Read a whole array at once: merged range requests, then a tight decode loop.

zarr's codec pipeline costs a few hundred microseconds per chunk in asyncio
bookkeeping, which dominates full reads of h5ad matrices stored in tens of
thousands of small chunks. For eager reads h5lens fetches every chunk of the
array in one batch (neighbouring ranges merged into few requests) and decodes
them with numcodecs directly. Arrays whose codecs or data type this does not
cover return None, and the caller reads them through zarr.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from h5lens import convention
from h5lens.codecs.table import Decoder, decoder


def _numeric_dtype(doc: dict[str, Any]) -> np.dtype | None:
    data_type = doc["data_type"]
    if not isinstance(data_type, str):
        return None
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    return dtype if dtype.kind in "biufc" else None


def _decoders(doc: dict[str, Any], dtype: np.dtype) -> tuple[np.dtype, list[Decoder]] | None:
    """The stored dtype (with the bytes codec's byte order) and the bytes→bytes decoders,
    last codec first; None if a codec is not in the filter table."""
    codecs = doc["codecs"]
    if not codecs or codecs[0]["name"] != "bytes":
        return None
    endian = codecs[0].get("configuration", {}).get("endian")
    stored = dtype.newbyteorder(">" if endian == "big" else "<") if dtype.itemsize > 1 else dtype
    decoders: list[Decoder] = []
    for codec in codecs[1:]:
        found = decoder(codec, dtype.itemsize)
        if found is None:
            return None
        decoders.append(found)
    return stored, decoders[::-1]


def read_whole(store: Any, path: str) -> np.ndarray | None:
    """All values of the array at ``path`` of a ManifestStore, or None to let zarr read it."""
    manifest = store.manifest
    doc = manifest.nodes.get(path)
    if doc is None or doc.get("node_type") != "array" or doc["attributes"].get(convention.SCALAR):
        return None
    dtype = _numeric_dtype(doc)
    if dtype is None:
        return None
    plan = _decoders(doc, dtype)
    if plan is None:
        return None
    stored, decoders = plan
    shape = tuple(doc["shape"])
    chunk_shape = tuple(doc["chunk_grid"]["configuration"]["chunk_shape"])
    table = manifest.chunks[path]
    fill = _fill(doc, dtype)
    out = np.full(shape, fill, dtype=dtype)
    if not shape or 0 in shape:
        return None if not shape else out  # 0-d arrays are cheap through zarr
    payloads = store.read_chunks(path)
    nbytes = math.prod(chunk_shape) * dtype.itemsize
    count = math.prod(chunk_shape)
    decode = _decode_function(doc, decoders, nbytes)
    if len(shape) == 1 and len(payloads) == table.source.size:
        # Every chunk present: decode them in order and join, no Python loop per chunk.
        joined = bytearray().join(map(decode, (payloads[i] for i in range(len(payloads)))))
        if len(joined) == len(payloads) * nbytes:
            return np.frombuffer(joined, dtype=stored)[: shape[0]].astype(dtype, copy=False)
    if len(shape) == 1:
        # One flat buffer, chunk after chunk: no per-chunk index arithmetic.
        flat_out = np.full(len(table.source) * chunk_shape[0], fill, dtype=stored)
        view = flat_out.view(np.uint8)
        for flat, data in payloads.items():
            view[flat * nbytes : (flat + 1) * nbytes] = np.frombuffer(decode(data), dtype=np.uint8, count=nbytes)
        return flat_out[: shape[0]].astype(dtype, copy=False)
    grid = table.grid_shape
    for flat, data in payloads.items():
        values = np.frombuffer(decode(data), dtype=stored, count=count)
        index = np.unravel_index(flat, grid)
        target = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunk_shape, shape, strict=True))
        sizes = tuple(t.stop - t.start for t in target)
        out[target] = values.reshape(chunk_shape)[tuple(slice(0, n) for n in sizes)]
    return out


def _decode_function(doc: dict[str, Any], decoders: list[Decoder], nbytes: int) -> Any:
    """One chunk's stored bytes → decoded bytes. HDF5 deflate alone (the common case) is
    ``zlib.decompress`` itself: no Python frame per chunk in the join below."""
    import zlib

    if [c["name"] for c in doc["codecs"][1:]] == ["numcodecs.zlib"]:
        return zlib.decompress
    if not decoders:
        return lambda data: data

    def decode(data: bytes) -> bytes:
        for step in decoders:
            data = step(data, nbytes)
        return data

    return decode


def _fill(doc: dict[str, Any], dtype: np.dtype) -> Any:
    from zarr.core.dtype import get_data_type_from_native_dtype

    zdtype = get_data_type_from_native_dtype(dtype)
    return zdtype.from_json_scalar(doc["fill_value"], zarr_format=3)
