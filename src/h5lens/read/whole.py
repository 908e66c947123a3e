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

from h5lens.fetch import ChunkFetcher, LocalReader
from h5lens.manifest.model import INLINE, MISSING

_NUMCODECS = {"numcodecs.zlib": "zlib", "numcodecs.shuffle": "shuffle", "numcodecs.fletcher32": "fletcher32",
              "numcodecs.bz2": "bz2", "zstd": "zstd", "blosc": "blosc"}


def _numeric_dtype(doc: dict[str, Any]) -> np.dtype | None:
    data_type = doc["data_type"]
    if not isinstance(data_type, str):
        return None
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    return dtype if dtype.kind in "biufc" else None


def _decoders(doc: dict[str, Any], dtype: np.dtype) -> tuple[np.dtype, list[Any]] | None:
    """The stored dtype (with the bytes codec's byte order) and the bytes→bytes decoders, last first."""
    import numcodecs

    codecs = doc["codecs"]
    if not codecs or codecs[0]["name"] != "bytes":
        return None
    endian = codecs[0].get("configuration", {}).get("endian")
    stored = dtype.newbyteorder(">" if endian == "big" else "<") if dtype.itemsize > 1 else dtype
    decoders: list[Any] = []
    for codec in codecs[1:]:
        name = codec["name"]
        config = dict(codec.get("configuration", {}))
        if name == "h5lens.lzf":
            decoders.append(_LZF())
        elif name in _NUMCODECS:
            codec_id = _NUMCODECS[name]
            if codec_id == "shuffle":
                config = {"elementsize": config.get("elementsize", dtype.itemsize)}
            if codec_id == "blosc":
                config = {"cname": config.get("cname", "lz4"), "clevel": config.get("clevel", 5)}
            if codec_id == "zstd":
                config = {"level": config.get("level", 3)}
            decoders.append(numcodecs.get_codec({"id": codec_id, **config}))
        else:
            return None
    return stored, decoders[::-1]


class _LZF:
    def decode(self, data: bytes, nbytes: int) -> bytes:
        from h5lens.codecs.lzf import decode_hdf5_lzf

        return decode_hdf5_lzf(data, nbytes)


def read_whole(store: Any, path: str) -> np.ndarray | None:
    """All values of the array at ``path`` of a ManifestStore, or None to let zarr read it."""
    from zarr.core.sync import sync

    manifest = store.manifest
    doc = manifest.nodes.get(path)
    if doc is None or doc.get("node_type") != "array" or doc["attributes"].get("_SCALAR"):
        return None
    dtype = _numeric_dtype(doc)
    plan = _decoders(doc, dtype) if dtype is not None else None
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
    payloads = sync(_fetch_all(store, table))
    nbytes = math.prod(chunk_shape) * dtype.itemsize
    count = math.prod(chunk_shape)
    decode = _decode_function(decoders, nbytes)
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


def _decode_function(decoders: list[Any], nbytes: int):
    """One chunk's stored bytes → decoded bytes; zlib alone (HDF5 deflate) calls zlib directly."""
    import numcodecs
    import zlib

    if len(decoders) == 1 and isinstance(decoders[0], numcodecs.Zlib):
        return zlib.decompress
    if not decoders:
        return lambda data: data

    def decode(data: bytes) -> bytes:
        for decoder in decoders:
            data = decoder.decode(data, nbytes) if isinstance(decoder, _LZF) else decoder.decode(data)
        return data

    return decode


def _fill(doc: dict[str, Any], dtype: np.dtype) -> Any:
    from zarr.core.dtype import get_data_type_from_native_dtype

    zdtype = get_data_type_from_native_dtype(dtype)
    return zdtype.from_json_scalar(doc["fill_value"], zarr_format=3)


async def _fetch_all(store: Any, table: Any) -> dict[int, bytes | memoryview]:
    """Every present chunk's stored bytes, by flat index, requested all at once."""
    sources = table.source.reshape(-1)
    present = np.flatnonzero(sources != MISSING)
    out: dict[int, bytes | memoryview] = {}
    present_sources = sources[present]
    for src in np.unique(present_sources).tolist():
        flats = present[present_sources == src]
        if src == INLINE:
            out.update((flat, table.inline[flat]) for flat in flats.tolist())
            continue
        offsets = table.offset.reshape(-1)[flats].astype(np.int64)
        lengths = table.length.reshape(-1)[flats].astype(np.int64)
        reader = store._reader(src)
        if isinstance(reader, LocalReader):
            store.stats.record(int(lengths.sum()))
            payloads = [reader.read_sync(o, n) for o, n in zip(offsets.tolist(), lengths.tolist(), strict=True)]
        else:
            fetcher: ChunkFetcher = store._fetcher(src, reader)
            payloads = await fetcher.read_ranges(offsets, lengths)
        out.update(zip(flats.tolist(), payloads, strict=True))
    return out
