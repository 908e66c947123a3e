"""decoded_cache_bytes: a store keeps decoded chunks for later reads, within its bound;
what it gives back is what h5py reads, and it is off unless asked for."""

from __future__ import annotations

import pickle

import h5py
import numpy as np
import pytest
import zarr

import h5lens


def _file(path):
    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=rng.integers(0, 100, 200_000).astype("i4"), chunks=(5_000,), compression="gzip")
        f.create_dataset("y", data=rng.random((300, 400)), chunks=(30, 400), compression="gzip", shuffle=True)
        f.create_dataset("z", data=rng.random(90_000).astype("f4"), chunks=(3_000,), compression="lzf")
    return path


@pytest.mark.parametrize("fast", [False, True], ids=["own-routes", "fast_reads"])
def test_reads_through_kept_chunks_are_h5pys(tmp_path, fast):
    path = _file(tmp_path / "kept.h5")
    if fast:
        h5lens.fast_reads()
    store = h5lens.open_store(h5lens.index(path), decoded_cache_bytes=64 << 20)
    group = zarr.open_group(store, mode="r")
    with h5py.File(path) as f:
        for _ in range(2):  # the second time from the kept chunks
            for name, key in (("x", np.s_[1_234:150_000]), ("y", np.s_[45:200, 10:390]), ("z", np.s_[::1])):
                np.testing.assert_array_equal(group[name][key], f[name][key])
                np.testing.assert_array_equal(store.read_region(name, [(0, n) for n in f[name].shape]), f[name][...])
    kept = store.decoded_chunks
    assert kept is not None and kept.hits > 0 and 0 < kept.nbytes <= 64 << 20


def test_the_bound_holds_and_off_is_the_default(tmp_path):
    path = _file(tmp_path / "kept.h5")
    manifest = h5lens.index(path)
    assert h5lens.open_store(manifest).decoded_chunks is None
    store = h5lens.open_store(manifest, decoded_cache_bytes=50_000)  # two chunks of x
    with h5py.File(path) as f:
        np.testing.assert_array_equal(store.read_region("x", [(0, 200_000)]), f["x"][...])
    assert store.decoded_chunks is not None and store.decoded_chunks.nbytes <= 50_000
    copy = pickle.loads(pickle.dumps(store))  # a worker keeps its own
    assert copy.decoded_cache_bytes == 50_000 and copy.decoded_chunks is not None and copy.decoded_chunks.nbytes == 0
    with pytest.raises(h5lens.InvalidOptionError, match="decoded_cache_bytes"):
        h5lens.open_store(manifest, decoded_cache_bytes=-1)


@pytest.mark.parametrize("where", ["file", "object"])
def test_workers_stores_keep_decoded_chunks_as_asked(tmp_path, where):
    """A lazy AnnData's tasks carry its store as a handle (h5lens.adata.shared): the store a
    worker builds from the handle keeps decoded chunks as the opener asked, for a manifest
    file ("load" handles) and a manifest object ("object" handles) alike, and reads h5py's values."""
    from h5lens.adata.shared import _CACHE, origin_of, shared_store
    from h5lens.read.options import OpenOptions

    path = _file(tmp_path / "kept.h5")
    manifest = h5lens.index(path)
    if where == "file":
        manifest.save(tmp_path / "kept.json")
        manifest = str(tmp_path / "kept.json")
    group = h5lens.open_group(manifest, decoded_cache_bytes=1 << 20)
    store = group.store
    shared = shared_store(group, origin_of(store, OpenOptions()) if where == "file" else None)
    assert shared._handle()[0] == ("load" if where == "file" else "object")
    _CACHE.clear()
    worker = pickle.loads(pickle.dumps(shared))
    assert worker is not shared and worker.decoded_cache_bytes == 1 << 20
    with h5py.File(path) as f:
        for _ in range(2):
            np.testing.assert_array_equal(worker.read_region("x", [(1_000, 120_000)]), f["x"][1_000:120_000])
    assert worker.decoded_chunks is not None and worker.decoded_chunks.hits > 0


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_read_counts_each_chunk_once(tmp_path, where, request):
    """A small region of a remote source is first offered to the calling thread, which
    declines it: the kept chunks are taken (and counted) by the read that runs, once."""
    path = _file(tmp_path / "kept.h5")
    options = None
    source = str(path)
    if where == "s3":
        s3 = request.getfixturevalue("s3")
        s3.filesystem().put(str(path), "bucket/counted/kept.h5")
        source, options = "s3://bucket/counted/kept.h5", s3.storage_options()
    manifest = h5lens.index(source, storage_options=options, inline_threshold=0)
    store = h5lens.open_store(manifest, storage_options=options, decoded_cache_bytes=64 << 20)
    with h5py.File(path) as f:
        for _ in range(2):
            np.testing.assert_array_equal(store.read_region("x", [(4_000, 16_000)]), f["x"][4_000:16_000])
    kept = store.decoded_chunks
    assert kept is not None and (kept.misses, kept.hits) == (4, 4)  # chunks 0-3 of 5,000 values, read twice
