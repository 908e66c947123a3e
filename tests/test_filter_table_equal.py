"""The two decoder families held equal: for every entry of h5lens's filter table, chunks
that libhdf5 (h5py + hdf5plugin) encoded decode bit for bit the same through h5lens's own
decoders (:mod:`h5lens.codecs.table`, the read engine's ``ArrayCodec``) and through the
zarr codecs the manifest names (what plain zarr readers use), and both equal what h5py
reads. Hypothesis draws the data, shapes, chunks and options; every dtype each filter takes
is a parameter of its own, so a failure names the filter and the dtype.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from zarr.storage import MemoryStore

import h5lens
from h5lens.codecs import register
from h5lens.codecs.table import FILTERS
from h5lens.engine.codec import array_codec
from h5lens.manifest.model import INLINE
from h5lens.scan.codecs import read_pipeline, translate_pipeline

INTS = ["|i1", "|u1", "<i2", ">u2", "<i4", ">i4", "<u4", "<i8", ">u8"]
FLOATS = ["<f2", "<f4", ">f4", "<f8", ">f8"]
NUMBERS = INTS + FLOATS

Options = Callable[[st.DrawFn], dict[str, Any]]


def _deflate(draw: st.DrawFn) -> dict[str, Any]:
    return {"compression": "gzip", "compression_opts": draw(st.integers(0, 9)), "shuffle": draw(st.booleans())}


def _blosc(draw: st.DrawFn) -> dict[str, Any]:
    cname = draw(st.sampled_from(["blosclz", "lz4", "lz4hc", "zlib", "zstd"]))
    return dict(hdf5plugin.Blosc(cname=cname, clevel=draw(st.integers(0, 9)), shuffle=draw(st.sampled_from([0, 1, 2]))))


def _bitshuffle(draw: st.DrawFn) -> dict[str, Any]:
    cname = draw(st.sampled_from(["none", "lz4", "zstd"]))
    return dict(hdf5plugin.Bitshuffle(nelems=draw(st.sampled_from([0, 8, 64, 256])), cname=cname))


def _blosc2(draw: st.DrawFn) -> dict[str, Any]:
    cname = draw(st.sampled_from(["blosclz", "lz4", "lz4hc", "zlib", "zstd"]))
    filters = draw(st.sampled_from([hdf5plugin.Blosc2.NOFILTER, hdf5plugin.Blosc2.SHUFFLE, hdf5plugin.Blosc2.BITSHUFFLE]))
    return dict(hdf5plugin.Blosc2(cname=cname, clevel=draw(st.integers(0, 9)), filters=filters))


def _zfp(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(["reversible", "rate", "precision", "accuracy"]))
    if mode == "reversible":
        return dict(hdf5plugin.Zfp(reversible=True))
    if mode == "rate":
        return dict(hdf5plugin.Zfp(rate=draw(st.sampled_from([4.0, 8.0, 16.0]))))
    if mode == "precision":
        return dict(hdf5plugin.Zfp(precision=draw(st.integers(8, 32))))
    return dict(hdf5plugin.Zfp(accuracy=draw(st.sampled_from([1e-1, 1e-3]))))


def _szip(draw: st.DrawFn) -> dict[str, Any]:
    return {"compression": "szip", "compression_opts": (draw(st.sampled_from(["nn", "ec"])), draw(st.sampled_from([8, 16, 32])))}


# filter -> (options for h5py, the dtypes it takes); with fletcher32 drawn on top where libhdf5 allows
FILTER_CASES: dict[str, tuple[Options, list[str]]] = {
    "deflate": (_deflate, NUMBERS),
    "shuffle": (lambda draw: {"shuffle": True}, NUMBERS),
    "fletcher32": (lambda draw: {"fletcher32": True}, NUMBERS),
    "lzf": (lambda draw: {"compression": "lzf", "shuffle": draw(st.booleans())}, NUMBERS),
    "szip": (_szip, [t for t in NUMBERS if t != "<f2"]),
    "blosc": (_blosc, NUMBERS),
    "zstd": (lambda draw: dict(hdf5plugin.Zstd(clevel=draw(st.integers(1, 22)))), NUMBERS),
    "bzip2": (lambda draw: dict(hdf5plugin.BZip2(blocksize=draw(st.integers(1, 9)))), NUMBERS),
    "lz4": (lambda draw: dict(hdf5plugin.LZ4(nbytes=draw(st.sampled_from([0, 64, 1024])))), NUMBERS),
    "bitshuffle": (_bitshuffle, NUMBERS),
    "blosc2": (_blosc2, NUMBERS),
    "zfp": (_zfp, ["<f4", ">f4", "<f8", "<i4", "<i8"]),
    # netCDF-C's order: the checksum before the shuffle, which then may meet a remainder
    # that is not a whole element (h5lens.shuffle keeps HDF5's rule for it)
    "fletcher32-shuffle-deflate": (lambda draw: {"pipeline": ("fletcher32", "shuffle", "deflate")}, NUMBERS),
}
# the filter table's entries each case exercises: none is left untested
COVERED = {1, 2, 3, 4, 32000, 32001, 32004, 32008, 32013, 32015, 32026, 307}


def test_every_filter_of_the_table_is_drawn():
    assert set(FILTERS) <= COVERED, f"filters with no case here: {sorted(set(FILTERS) - COVERED)}"


@st.composite
def _arrays(draw: st.DrawFn, dtype: str) -> tuple[np.ndarray, tuple[int, ...]]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 40 if ndim == 1 else 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, n)) for n in shape)
    kind = np.dtype(dtype)
    count = int(np.prod(shape))
    style = draw(st.sampled_from(["random", "smooth", "constant"]))
    if style == "random":
        raw = draw(st.binary(min_size=count * kind.itemsize, max_size=count * kind.itemsize))
        values = np.frombuffer(raw, dtype=kind).copy()
    elif style == "smooth":
        values = (np.arange(count) % 100).astype(kind)
    else:
        values = np.full(count, draw(st.integers(0, 100)), dtype=kind)
    return values.reshape(shape), chunks


def _decode_both(
    path: str, doc: dict[str, Any], raw: bytes, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[bytes, bytes] | None]:
    """One stored chunk decoded by h5lens's engine codec (to bytes, as the decode kernel does
    where the codec writes into no buffer), by its last decoder's ``into`` (where it has one:
    the kernel's other route), by its ``head`` (the first half of the chunk's bytes, with
    what the whole decoding gives there), and by zarr through the codecs ``doc`` names."""
    codec = array_codec(path, doc)
    assert codec is not None, f"{path}: h5lens does not decode {doc['codecs']}"
    decoded = codec.decode(raw)
    assert len(decoded) == codec.chunk_nbytes
    ours = codec.values_of([decoded])[0]
    into = None
    last = codec.decoders[-1]
    data: Any = raw
    for step, size in zip(codec.decoders[:-1], codec.sizes, strict=False):
        data = step(data, size)
    if last.into is not None:
        buffer = bytearray(codec.chunk_nbytes)
        last.into(data, memoryview(buffer))
        into = codec.values(buffer, 1)[0]
    head = None
    if last.head is not None:
        half = bytearray(codec.chunk_nbytes // 2)
        last.head(data, memoryview(half))
        head = bytes(half), bytes(bytearray().join([decoded]))[: len(half)]
    register()
    store = MemoryStore()
    one = {**doc, "shape": list(codec.chunk_shape), "attributes": {}}
    one["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": list(codec.chunk_shape)}}
    one["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": "/"}}
    one.pop("dimension_names", None)
    import json

    from zarr.core.buffer import cpu

    zarr.core.sync.sync(store.set("zarr.json", cpu.Buffer.from_bytes(json.dumps(one).encode())))
    zarr.core.sync.sync(store.set("c/" + "/".join("0" * len(codec.chunk_shape)), cpu.Buffer.from_bytes(raw)))
    theirs = zarr.open_array(store, mode="r")[...]
    return ours, theirs, into, head


def _check(tmp_path_factory: pytest.TempPathFactory, name: str, dtype: str, data: st.DataObject) -> None:
    options, _ = FILTER_CASES[name]
    values, chunks = data.draw(_arrays(dtype))
    h5_options = data.draw(st.composite(lambda draw: options(draw))())
    if data.draw(st.booleans()) and name not in ("fletcher32", "zfp", "szip") and "pipeline" not in h5_options:
        h5_options["fletcher32"] = True  # checksum first (libhdf5 puts it last in the pipeline)
    if name == "szip":  # libhdf5 refuses blocks of more pixels than a chunk holds
        assume(int(np.prod(chunks)) >= h5_options["compression_opts"][1])
    path = tmp_path_factory.mktemp("f") / "f.h5"
    with h5py.File(path, "w") as f:
        if "pipeline" in h5_options:
            _create_in_order(f, "x", values, chunks, h5_options["pipeline"])
        else:
            f.create_dataset("x", data=values, chunks=chunks, **h5_options)
    with h5py.File(path, "r") as f:  # read again: libhdf5's chunk cache holds what was written, not what decodes
        ds = f["x"]
        expected = ds[...]
        infos: list[h5py.h5d.StoreInfo] = []
        ds.id.chunk_iter(infos.append)
        stored = [(info, bytes(ds.id.read_direct_chunk(info.chunk_offset)[1])) for info in infos]
    manifest = h5lens.index(path, inline_threshold=0)
    # every filter of the pipeline, as the chunks stored with a filter mask of 0 went through it
    # (the manifest's own codecs may leave out a filter most chunks skip: LZF on random bytes)
    with h5py.File(path) as f:
        pipeline = translate_pipeline(read_pipeline(f["x"].id.get_create_plist()), np.dtype(dtype).itemsize)
    assume(pipeline is not None)  # no codec for this configuration (ZFP on a one-value chunk): copied, not referenced
    doc = {**manifest.nodes["x"], "codecs": [manifest.nodes["x"]["codecs"][0], *pipeline]}
    label = f"{name} {dtype} {h5_options} chunks {chunks} of {values.shape}"
    names = [codec["name"] for codec in pipeline]
    as_stored = int(np.prod(chunks)) * np.dtype(dtype).itemsize + (4 if "numcodecs.fletcher32" in names else 0)
    source = manifest.chunks["x"].source
    for info, raw in stored:
        if info.filter_mask:
            continue  # stored without some filter: h5lens re-encodes such chunks (tests/test_filter_pipelines.py)
        if {"h5lens.lzf", "h5lens.zfp"} & set(names) and len(raw) == as_stored:
            # a stream as long as the data, which these codecs read as the data: h5lens never
            # references such a chunk (it is decoded by libhdf5 and encoded again)
            grid = tuple(o // c for o, c in zip(info.chunk_offset, chunks, strict=True))
            assert source[grid] == INLINE, f"an LZF/ZFP chunk of ambiguous length is referenced: {label}"
            continue
        ours, theirs, into, head = _decode_both("x", doc, raw, np.dtype(dtype))
        where = tuple(slice(o, min(o + c, n)) for o, c, n in zip(info.chunk_offset, chunks, values.shape, strict=True))
        inside = tuple(slice(0, s.stop - s.start) for s in where)
        want = _bits(expected[where])
        assert _bits(theirs[inside]) == want, f"zarr: {label}"
        assert _bits(ours[inside]) == want, f"h5lens: {label}"
        assert _bits(ours) == _bits(theirs), f"whole chunk, padding included: {label}"
        if into is not None:
            assert _bits(into) == _bits(ours), f"h5lens into: {label}"
        if head is not None:
            assert head[0] == head[1], f"h5lens head: {label}"


def _create_in_order(f: h5py.File, name: str, values: np.ndarray, chunks: tuple[int, ...], order: tuple[str, ...]) -> None:
    """A dataset whose filters run in ``order`` (h5py's high-level API fixes its own)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    for step in order:
        {"fletcher32": dcpl.set_fletcher32, "shuffle": dcpl.set_shuffle, "deflate": lambda: dcpl.set_deflate(4)}[step]()
    space = h5py.h5s.create_simple(values.shape)
    tid = h5py.h5t.py_create(values.dtype, logical=True)
    h5py.Dataset(h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl))[...] = values


def _bits(values: np.ndarray) -> bytes:
    """The values' bits in native byte order (NaN payloads included)."""
    return np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("=")).tobytes()


CASES = [pytest.param(name, dtype, id=f"{name}-{dtype}") for name, (_, dtypes) in FILTER_CASES.items() for dtype in dtypes]


@pytest.mark.parametrize(("name", "dtype"), CASES)
@settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_filter_decodes_alike(tmp_path_factory, name, dtype, data):
    _check(tmp_path_factory, name, dtype, data)
