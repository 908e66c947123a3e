"""Whole-array reads (merged requests, direct decode) against h5py, and against zarr's own reading."""

from __future__ import annotations

import sys
import zlib

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.read.whole import read_whole


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("whole") / "arrays.h5"
    rng = np.random.default_rng(11)
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip_1d", data=rng.integers(0, 50, 10_007).astype("<i4"), chunks=(100,), compression="gzip")
        f.create_dataset("shuffle_be", data=rng.random(5_003).astype(">f8"), chunks=(64,), shuffle=True, compression="gzip")
        f.create_dataset("lzf_2d", data=rng.random((101, 37)).astype("<f4"), chunks=(16, 16), compression="lzf")
        f.create_dataset("fletcher", data=np.arange(999, dtype="<u2"), chunks=(50,), fletcher32=True)
        f.create_dataset("contiguous", data=rng.random((300, 7)))
        sparse = f.create_dataset("partly_written", shape=(1000,), chunks=(100,), dtype="<i8", fillvalue=-7)
        sparse[200:450] = np.arange(250)
        f.create_dataset("bools", data=rng.random(777) > 0.5, chunks=(100,), compression="gzip")
        f.create_dataset("strings", data=["a", "b"], dtype=h5py.string_dtype())
    return path


@pytest.mark.parametrize("inline_threshold", [0, 1000])
def test_read_whole_equals_h5py(source, inline_threshold):
    manifest = h5lens.index(source, inline_threshold=inline_threshold, slab_bytes=4096)
    store = h5lens.open_store(manifest)
    with h5py.File(source) as f:
        for name in ["gzip_1d", "shuffle_be", "lzf_2d", "fletcher", "contiguous", "partly_written", "bools"]:
            got = read_whole(store, name)
            expected = f[name][...]
            assert got is not None, name
            assert got.dtype == expected.dtype.newbyteorder("="), name
            assert got.flags.writeable, name  # as h5py's: callers modify what they read
            np.testing.assert_array_equal(got, expected, err_msg=name)
        assert read_whole(store, "strings") is None  # left to zarr


def test_read_whole_over_s3(s3, s3_proxy, source):
    url = "s3://bucket/whole/arrays.h5"
    s3.filesystem().put(str(source), url.removeprefix("s3://"))
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
    store = h5lens.open_store(manifest, storage_options=options)
    s3_proxy.stats.reset()
    got = read_whole(store, "gzip_1d")
    with h5py.File(source) as f:
        np.testing.assert_array_equal(got, f["gzip_1d"][...])
    assert got.flags.writeable
    assert manifest.chunks["gzip_1d"].n_present == 101
    assert s3_proxy.stats.gets == 1  # 101 neighbouring chunks, one request


RUNS = [
    [(150, 170), (170, 400), (400, 401)],  # touching runs over a stretch of chunks (a CSC's columns)
    [(5, 10), (20, 30), (30, 31)],  # gaps inside one stretch
    [(5, 10), (900, 950), (9_990, 10_007)],  # chunks far apart
    [(30, 30), (40, 45), (45, 45)],  # empty runs among them
    [(0, 10_007)],  # everything
    [(60, 80), (10, 20)],  # out of order
]


@pytest.mark.parametrize("kept", [0, 64 << 20], ids=["stored", "kept-decoded"])
@pytest.mark.parametrize("runs", RUNS, ids=lambda r: f"{len(r)}runs-{r[0][0]}")
@pytest.mark.parametrize("name", ["gzip_1d", "partly_written", "shuffle_be"])
def test_read_runs_equals_h5py(source, name, runs, kept):
    """Long runs are copied run by run, short ones gathered value by value; the second
    read of a store keeping decoded chunks takes them from there."""
    manifest = h5lens.index(source, inline_threshold=0)
    store = h5lens.open_store(manifest, decoded_cache_bytes=kept)
    with h5py.File(source) as f:
        data = f[name][...]
    runs = [(min(a, len(data)), min(b, len(data))) for a, b in runs]
    starts = np.array([a for a, _ in runs], dtype=np.int64)
    stops = np.array([b for _, b in runs], dtype=np.int64)
    for _ in range(2):
        got = store.read_runs(name, starts, stops)
        assert got is not None
        np.testing.assert_array_equal(got, np.concatenate([data[a:b] for a, b in runs]))
    if kept and any(b > a for a, b in runs) and name != "partly_written":
        assert store.decoded_chunks is not None and store.decoded_chunks.hits > 0


@pytest.fixture(scope="module")
def loader_source(tmp_path_factory):
    """Arrays of chunks big enough, and runs many enough, for the decode threads: a loader's
    preload (hundreds of blocks of rows, each a run of values)."""
    path = tmp_path_factory.mktemp("loader") / "blocks.h5"
    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip", data=rng.integers(0, 9, 400_000).astype("<f4"), chunks=(3_000,), compression="gzip")
        f.create_dataset("shuffled", data=rng.random(400_000), chunks=(2_000,), shuffle=True, compression="gzip")
        f.create_dataset("lzf", data=rng.integers(0, 2**20, 400_000).astype("<i4"), chunks=(2_500,), compression="lzf")
        f.create_dataset("plain", data=rng.random(400_000).astype("<f4"), chunks=(4_000,))
        partly = f.create_dataset("partly", shape=(400_000,), chunks=(2_048,), dtype="<i8", fillvalue=-3, compression="gzip")
        partly[100_000:300_000] = np.arange(200_000)
    return path


@pytest.mark.parametrize("kept", [0, 64 << 20], ids=["stored", "kept-decoded"])
@pytest.mark.parametrize("name", ["gzip", "shuffled", "lzf", "plain", "partly"])
def test_loader_runs_on_threads_equal_h5py(loader_source, name, kept):
    """256 runs of a few thousand values at random places, out of order (as annbatch's
    blocks): every chunk they cross decoded once, on the decode threads, and each run's
    pieces copied out of it; the second read (kept chunks) gives the same values."""
    rng = np.random.default_rng(len(name))
    manifest = h5lens.index(loader_source, inline_threshold=0)
    store = h5lens.open_store(manifest, decoded_cache_bytes=kept)
    with h5py.File(loader_source) as f:
        data = f[name][...]
    starts = rng.integers(0, len(data) - 5_000, 256)
    stops = starts + rng.integers(1_000, 5_000, 256)
    expected = np.concatenate([data[a:b] for a, b in zip(starts, stops, strict=True)])
    for _ in range(2):
        got = store.read_runs(name, starts, stops)
        assert got is not None and got.dtype == expected.dtype.newbyteorder("=")
        np.testing.assert_array_equal(got, expected)
    if kept:
        assert store.decoded_chunks is not None and store.decoded_chunks.hits > 0


@pytest.mark.parametrize("longest", [5_000, 40], ids=["long-runs", "short-runs"])
def test_loader_runs_written_into_the_callers_buffer(loader_source, longest):
    """A preload's buffer (annbatch's ``out``) is written in place when it fits (one copy
    less); one of another dtype is left alone and the values come back in their own array."""
    from zarr.core.sync import sync

    rng = np.random.default_rng(7)
    store = h5lens.open_store(h5lens.index(loader_source, inline_threshold=0))
    with h5py.File(loader_source) as f:
        data = f["gzip"][...]
    starts = np.sort(rng.integers(0, len(data) - 5_000, 256))
    stops = starts + rng.integers(longest // 5, longest, 256)
    expected = np.concatenate([data[a:b] for a, b in zip(starts, stops, strict=True)])
    buffer = np.zeros(expected.size, dtype=expected.dtype.newbyteorder("="))
    got = sync(store.engine.read_runs_async("gzip", starts, stops, out=buffer))
    assert got is buffer
    np.testing.assert_array_equal(buffer, expected)
    other = np.zeros(expected.size, dtype=np.float64 if expected.dtype.kind != "f" or expected.itemsize != 8 else np.float32)
    got = sync(store.engine.read_runs_async("gzip", starts, stops, out=other))
    assert got is not other and not other.any()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("inflater", ["zlib-ng", "zlib"])
def test_blocks_ending_early_in_their_chunks_inflate_only_that_far(loader_source, inflater, monkeypatch):
    """Blocks of rows that end early in their chunks (a loader's 32 cells inside an h5ad's
    chunk of hundreds): those chunks are inflated only as far as the blocks reach, by
    zlib-ng or, where it is not installed, CPython's zlib. The values equal h5py's."""
    if inflater == "zlib":
        monkeypatch.setitem(sys.modules, "zlib_ng", None)  # not installed: the import fails
        module = zlib
    else:
        from zlib_ng import zlib_ng as module
    streams = []
    real = module.decompressobj
    monkeypatch.setattr(module, "decompressobj", lambda *a: streams.append(1) or real(*a))
    store = h5lens.open_store(h5lens.index(loader_source, inline_threshold=0))
    with h5py.File(loader_source) as f:
        data = f["gzip"][...]
    rng = np.random.default_rng(11)
    starts = np.sort(rng.choice(np.arange(0, len(data) - 3_000, 3_000), 120, replace=False)) + rng.integers(0, 300, 120)
    stops = starts + rng.integers(200, 600, 120)  # each ends in the first third of its chunk (3,000 values)
    expected = np.concatenate([data[a:b] for a, b in zip(starts, stops, strict=True)])
    np.testing.assert_array_equal(store.read_runs("gzip", starts, stops), expected)
    assert len(streams) == 120  # every chunk inflated only as far as its block


def test_a_chunk_shorter_than_its_size_reads_only_where_it_holds_values(tmp_path):
    """A deflate chunk whose stream holds fewer bytes than the chunk: values inside it read as
    h5py reads them; a block reaching past its end is refused naming the chunk (h5py returns
    whatever its buffer held there)."""
    path = tmp_path / "short.h5"
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", shape=(30_000,), chunks=(10_000,), dtype="<f4", compression="gzip")
        x[...] = np.arange(30_000)
        x.id.write_direct_chunk((10_000,), zlib.compress(np.arange(10_000, 15_000, dtype="<f4").tobytes()))
    store = h5lens.open_store(h5lens.index(path, inline_threshold=0))
    starts = np.array([0, 10_100, 20_000])
    inside = store.read_runs("x", starts, starts + 1_000)
    with h5py.File(path) as f:
        expected = np.concatenate([f["x"][a : a + 1_000] for a in starts.tolist()])
    np.testing.assert_array_equal(inside, expected)
    with pytest.raises(h5lens.SourceReadError, match=r"chunk 'x/c/1' of /x .*does not decode"):
        store.read_runs("x", starts, starts + 8_000)


def test_loader_runs_name_a_damaged_chunk(loader_source, tmp_path):
    """A chunk that does not inflate, among the hundreds a preload decodes on the decode
    threads: the read fails naming that chunk, nothing is returned."""
    import shutil

    path = tmp_path / "damaged.h5"
    shutil.copy(loader_source, path)
    with h5py.File(path) as f:
        offset = f["gzip"].id.get_chunk_info_by_coord((90_000,)).byte_offset
    with open(path, "r+b") as f:
        f.seek(offset + 10)
        f.write(b"\xff" * 64)
    store = h5lens.open_store(h5lens.index(path, inline_threshold=0))
    starts = np.arange(0, 390_000, 1_500, dtype=np.int64)
    with pytest.raises(h5lens.SourceReadError, match=r"chunk 'gzip/c/30' of /gzip .*does not decode"):
        store.read_runs("gzip", starts, starts + 1_000)
