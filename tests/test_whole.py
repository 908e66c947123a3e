"""Whole-array reads (merged requests, direct decode) against h5py, and against zarr's own reading."""

from __future__ import annotations

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
