"""Minibatches for training straight from h5ad files: annbatch's ``Loader`` over h5lens stores.

annbatch (scverse + Lamin's loader) takes any zarr-backed AnnData element; it refuses an
h5py-backed one and asks its users to convert each h5ad into its own zarr collection first.
An h5lens store is a zarr group over the h5ad's own bytes, so annbatch takes it as it is.

Every batch is compared with the file as the software that wrote it reads it back
(``h5py`` for the matrices, ``anndata.read_h5ad`` for ``obs``), row by row, through
annbatch's ``return_index=True``: the rows a batch says it holds are the rows it holds.
Files are written by ``anndata.AnnData.write_h5ad(compression="gzip")`` (anndata's own
chunks: ~9,766 values per chunk of ``X/data``), and the real h5ad files in ``shared/data``.
"""

from __future__ import annotations

import pickle
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import h5lens
from h5lens.adata.whole_rows import WholeRowsStore
from h5lens.engine import reader as reader_module
from shared_data import shared_file, shared_names

annbatch = pytest.importorskip("annbatch", reason="annbatch (in the test and ml extras) is the loader under test")
from annbatch.utils import load_all_aligned  # noqa: E402  - annbatch's own load_adata for its collections

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::anndata.OldFormatWarning"
)

N_VARS = 300
DENSE_ROWS = 50  # the row-chunked dense layer's chunk: whole rows (see test_dense_chunked_by_columns...)


def write_atlas(path: Path, n_obs: int, seed: int) -> Path:
    """A counts matrix as people write one: csr X, obs columns of each kind, a dense layer.

    ``write_h5ad(compression="gzip")`` chunks every array as anndata does. The dense layer
    ``dense`` it writes gets h5py's guessed chunks, which cut the columns too; ``rows`` is
    the same values written by anndata's ``write_elem`` in chunks of whole rows."""
    rng = np.random.default_rng(seed)
    x = sp.random(n_obs, N_VARS, density=0.05, format="csr", random_state=seed, dtype=np.float32)
    x.data = np.round(x.data * 20 + 1)  # counts
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["B", "T", "NK", "mono"], n_obs)),
            "n_counts": np.asarray(x.sum(axis=1)).ravel(),
            "batch": rng.integers(0, 4, n_obs),
            "donor": [f"d{i % 7}" for i in range(n_obs)],
        },
        index=[f"s{seed}-c{i}" for i in range(n_obs)],
    )
    var = pd.DataFrame(index=[f"g{i}" for i in range(N_VARS)])
    adata = ad.AnnData(x, obs=obs, var=var)
    adata.layers["dense"] = x.toarray()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")
    with h5py.File(path, "a") as f:
        ad.io.write_elem(
            f["layers"], "rows", x.toarray(), dataset_kwargs={"chunks": (DENSE_ROWS, N_VARS), "compression": "gzip"}
        )
    return path


def csr_from_h5py(path: Path, name: str = "X") -> sp.csr_matrix:
    """The csr matrix ``name`` as h5py reads its three arrays."""
    with h5py.File(path) as f:
        g = f[name]
        return sp.csr_matrix((g["data"][()], g["indices"][()], g["indptr"][()]), shape=tuple(g.attrs["shape"]))


def dense_from_h5py(path: Path, name: str) -> np.ndarray:
    with h5py.File(path) as f:
        return f[name][()]


@pytest.fixture(scope="module")
def atlases(tmp_path_factory) -> list[Path]:
    """Three files of one var space and different sizes (many h5ad files, one loader)."""
    where = tmp_path_factory.mktemp("atlases")
    return [write_atlas(where / f"atlas{i}.h5ad", n_obs, seed=i) for i, n_obs in enumerate((4000, 1500, 2500))]


@pytest.fixture(scope="module")
def atlas(atlases) -> Path:
    return atlases[0]


@pytest.fixture(params=[True, False], ids=["fast_reads", "zarr_pipeline"])
def read_mode(request) -> Iterator[bool]:
    """annbatch reads through zarr's API: with h5lens's codec pipeline (``fast_reads()``) and
    with zarr's own, over the same store."""
    with h5lens.fast_reads(request.param):
        yield request.param


def loader(**kwargs: Any) -> Any:
    """annbatch's Loader, shuffled, every batch with its rows (no GPU on a test machine)."""
    settings: dict[str, Any] = {"chunk_size": 32, "preload_nchunks": 8, "batch_size": 64, "shuffle": True}
    settings.update(kwargs)
    return annbatch.Loader(return_index=True, preload_to_gpu=False, rng=np.random.default_rng(0), **settings)


def assert_sparse_batches(batches: Any, expected: sp.csr_matrix) -> int:
    """Every batch equals the expected rows it names, and the loader visits each row once."""
    seen = []
    for batch in batches:
        index = batch["index"]
        x = batch["X"]
        assert isinstance(x, sp.csr_matrix) and x.dtype == expected.dtype
        want = expected[index]
        assert x.shape == want.shape
        np.testing.assert_array_equal(x.indptr, want.indptr)
        np.testing.assert_array_equal(x.indices, want.indices)
        np.testing.assert_array_equal(x.data, want.data)
        seen.append(index)
    rows = np.concatenate(seen)
    np.testing.assert_array_equal(np.sort(rows), np.arange(expected.shape[0]))
    return len(seen)


def assert_dense_batches(batches: Any, expected: np.ndarray) -> None:
    seen = []
    for batch in batches:
        assert batch["X"].dtype == expected.dtype
        np.testing.assert_array_equal(batch["X"], expected[batch["index"]])
        seen.append(batch["index"])
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(expected.shape[0]))


# -- add_dataset: X, dense arrays, obs ---------------------------------------------------------


def test_sparse_x_through_add_dataset(atlas, read_mode, monkeypatch):
    from h5lens.engine import plan

    made: list[str] = []  # the runs plans made: one per array and preload, under fast_reads only
    runs_plan = plan.runs_plan

    def counted(engine, path, *args, **kwargs):  # noqa: ANN001, ANN202 - the engine's own signature
        made.append(path)
        return runs_plan(engine, path, *args, **kwargs)

    monkeypatch.setattr(plan, "runs_plan", counted)
    monkeypatch.setattr(reader_module, "runs_plan", counted)
    group = h5lens.open_group(h5lens.index(atlas))
    dataset = ad.io.sparse_dataset(group["X"])
    assert dataset.backend == "zarr"  # what annbatch asks of a CSRDataset: h5lens's is one
    batches = loader().add_dataset(dataset)
    assert assert_sparse_batches(batches, csr_from_h5py(atlas)) > 1
    # annbatch's preloads read as runs (the hook applies) exactly when fast_reads() is on
    assert ({"X/data", "X/indices"} <= set(made)) is read_mode, sorted(set(made))


@pytest.mark.parametrize(("chunk_size", "preload_nchunks", "batch_size"), [(1, 64, 32), (7, 4, 14), (500, 2, 250)])
def test_sparse_x_whatever_the_block_size(atlas, chunk_size, preload_nchunks, batch_size):
    """Blocks of one row, blocks that end inside a stored chunk, blocks of many chunks."""
    h5lens.fast_reads()
    dataset = ad.io.sparse_dataset(h5lens.open_group(h5lens.index(atlas))["X"])
    batches = loader(chunk_size=chunk_size, preload_nchunks=preload_nchunks, batch_size=batch_size)
    assert_sparse_batches(batches.add_dataset(dataset), csr_from_h5py(atlas))


def test_epochs_from_kept_chunks(atlas):
    """Under ``fast_reads()`` a preload's blocks are read as runs (each stored chunk fetched
    and decoded once); with ``decoded_cache_bytes`` a later epoch takes every chunk from the
    kept ones, and its batches are the file's rows all the same."""
    h5lens.fast_reads()
    store = h5lens.open_store(h5lens.index(atlas), decoded_cache_bytes=64 << 20)
    dataset = ad.io.sparse_dataset(zarr.open_group(store, mode="r")["X"])
    batches = loader(chunk_size=16, preload_nchunks=16, batch_size=128).add_dataset(dataset)
    expected = csr_from_h5py(atlas)
    assert_sparse_batches(batches, expected)
    kept = store.decoded_chunks
    assert kept is not None and kept.nbytes > 0
    misses = kept.misses
    assert_sparse_batches(batches, expected)  # the second epoch
    assert kept.misses == misses and kept.hits > 0


def test_dense_layer_and_obs_through_add_dataset(atlas, read_mode):
    """A dense array stored in chunks of whole rows, with obs columns yielded beside it."""
    group = h5lens.open_group(h5lens.index(atlas))
    expected_obs = ad.read_h5ad(atlas).obs
    batches = loader(chunk_size=DENSE_ROWS, batch_size=100).add_dataset(group["layers/rows"], obs=expected_obs)
    expected = dense_from_h5py(atlas, "layers/rows")
    seen = 0
    for batch in batches:
        np.testing.assert_array_equal(batch["X"], expected[batch["index"]])
        pd.testing.assert_frame_equal(batch["obs"], expected_obs.iloc[batch["index"]])
        seen += len(batch["index"])
    assert seen == expected.shape[0]


def test_obs_columns_read_through_the_store_as_anndata_reads_them(atlas):
    """obs read from the h5lens store (anndata's ``read_elem`` over zarr) is read_h5ad's obs."""
    group = h5lens.open_group(h5lens.index(atlas))
    obs = ad.io.read_elem(group["obs"])
    pd.testing.assert_frame_equal(obs, ad.read_h5ad(atlas).obs)
    batches = loader().add_dataset(ad.io.sparse_dataset(group["X"]), obs=obs[["cell_type", "n_counts"]])
    for batch in batches:
        pd.testing.assert_frame_equal(batch["obs"], obs[["cell_type", "n_counts"]].iloc[batch["index"]])


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="annbatch 0.3.1's MultiBasicIndexer places a dense array's chunks by row only: an array "
    "chunked along its columns too (h5py's guess, so anndata's write_h5ad) fails, over any zarr store",
)
@pytest.mark.parametrize("store", ["h5lens", "zarr_memory"])
def test_dense_chunked_by_columns_fails_in_annbatch_over_any_store(atlas, store):
    """If this starts passing, annbatch reads anndata's own dense chunks: docs/ml-loading.md
    can drop h5lens.whole_rows from its advice for dense arrays. Until then an h5lens store
    refuses the read in one line under fast_reads (test_annbatch_over_column_chunks_is_refused_in_one_line),
    a zarr copy in the same chunks fails deep in zarr, and h5lens.whole_rows reads it
    (test_whole_rows_...)."""
    group = h5lens.open_group(h5lens.index(atlas))
    array = group["layers/dense"]
    assert array.chunks[1] < array.shape[1]  # the case: chunks that cut the columns
    if store == "zarr_memory":
        copy = zarr.create_array(zarr.storage.MemoryStore(), shape=array.shape, chunks=array.chunks, dtype=array.dtype)
        copy[:] = array[:]
        array = copy
    assert_dense_batches(loader().add_dataset(array), dense_from_h5py(atlas, "layers/dense"))


# -- dense arrays in chunks that cut the columns: refused in one line, read through whole_rows ------

SCANPY = "scanpy-1.12.4_10x_pbmc68k_reduced.h5ad"  # scanpy's pbmc68k: dense X in h5py's guessed chunks, raw/X csr


@pytest.fixture(scope="module")
def scanpy_h5ad() -> Path:
    return shared_file(SCANPY)


def h5py_chunks(path: Path, name: str) -> tuple[int, ...]:
    with h5py.File(path) as f:
        return f[name].chunks


@pytest.mark.parametrize(
    ("chunk_size", "preload_nchunks", "batch_size"), [(32, 16, 256), (1, 64, 32), (7, 4, 14), (500, 2, 250)]
)
def test_scanpys_dense_x_trains_through_whole_rows(scanpy_h5ad, read_mode, chunk_size, preload_nchunks, batch_size):
    """Issue 47: scanpy's file, whose X is dense in chunks that cut the columns. Through
    h5lens.whole_rows every batch holds h5py's rows and obs's, with h5lens's pipeline and
    with zarr's own (which reads the view's shards through its sharding codec)."""
    group = h5lens.open_group(h5lens.index(scanpy_h5ad))
    stored = h5py_chunks(scanpy_h5ad, "X")
    expected = dense_from_h5py(scanpy_h5ad, "X")
    assert stored[1] < expected.shape[1]  # the case
    view = h5lens.whole_rows(group["X"])
    assert view.shards is not None and view.shards[0] == stored[0] and view.shards[1] >= expected.shape[1]
    assert view.chunks == stored  # the stored chunks, as the shards' inner chunks
    obs = ad.read_h5ad(scanpy_h5ad).obs[["bulk_labels", "n_counts"]]
    batches = loader(chunk_size=chunk_size, preload_nchunks=preload_nchunks, batch_size=batch_size)
    batches.add_dataset(view, obs=obs)
    for batch in batches:
        pd.testing.assert_frame_equal(batch["obs"], obs.iloc[batch["index"]])
    assert_dense_batches(batches, expected)


def test_scanpys_raw_x_and_obsm_train_as_they_are_stored(scanpy_h5ad, read_mode):
    """The file's other matrices: raw/X is a csr matrix (annbatch's sparse route); obsm/X_pca
    is dense in chunks that cut its columns too (through whole_rows)."""
    group = h5lens.open_group(h5lens.index(scanpy_h5ad))
    raw = loader().add_dataset(ad.io.sparse_dataset(group["raw/X"]))
    assert_sparse_batches(raw, csr_from_h5py(scanpy_h5ad, "raw/X"))
    assert h5py_chunks(scanpy_h5ad, "obsm/X_pca")[1] < group["obsm/X_pca"].shape[1]
    batches = loader().add_dataset(h5lens.whole_rows(group["obsm/X_pca"]))
    assert_dense_batches(batches, dense_from_h5py(scanpy_h5ad, "obsm/X_pca"))


@pytest.mark.parametrize("route", ["fast_reads", "pipeline_only"])
def test_annbatch_over_column_chunks_is_refused_in_one_line(scanpy_h5ad, route):
    """The dense route as the user first tries it: h5lens refuses it before the first batch,
    in one line naming the array, its chunks, why and what to do; under fast_reads() (the
    hook that sees annbatch's indexer) and with h5lens's codec pipeline alone (zarr's
    ``codec_pipeline.path``, no hooks: the chunk list it is handed, placed past the output)."""
    import h5lens.pipeline

    if route == "fast_reads":
        context: Any = h5lens.fast_reads()
    else:
        h5lens.fast_reads(False)
        context = zarr.config.set({"codec_pipeline.path": h5lens.pipeline.PATH})
    with context:
        group = h5lens.open_group(h5lens.index(scanpy_h5ad))  # zarr builds an array's pipeline when it opens it
        batches = loader().add_dataset(group["X"])
        with pytest.raises(h5lens.InvalidOptionError) as caught:
            next(iter(batches))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("/X: annbatch's Loader cannot read this array as stored")
    assert str(h5py_chunks(scanpy_h5ad, "X")) in message and str(group["X"].shape) in message
    assert "whole rows" in message and "h5lens.whole_rows(array)" in message


def test_whole_rows_of_atlas_layers(atlas, read_mode):
    """A layer anndata's write_h5ad stored dense (h5py's chunks, which cut the columns) reads
    through the view; a layer already in whole-row chunks is returned as it is."""
    group = h5lens.open_group(h5lens.index(atlas))
    rows = group["layers/rows"]
    assert h5lens.whole_rows(rows) is rows
    batches = loader().add_dataset(h5lens.whole_rows(group["layers/dense"]))
    assert_dense_batches(batches, dense_from_h5py(atlas, "layers/dense"))


def _odd_arrays(path: Path) -> dict[str, np.ndarray]:
    """Dense arrays whose chunks cut the columns as HDF5 can store them: edge chunks, chunks
    never written (the fill value), a chunk stored without its filter (h5lens keeps it inline),
    three axes, no compression."""
    rng = np.random.default_rng(3)
    written = {}
    with h5py.File(path, "w") as f:
        sparse = f.create_dataset(
            "unwritten", shape=(23, 10), chunks=(5, 4), dtype="f4", compression="gzip", fillvalue=-1.5
        )
        sparse[0:5, 0:4] = rng.random((5, 4))
        sparse[12:23, 5:10] = rng.random((11, 5))
        cube = rng.integers(-1000, 1000, (13, 6, 7)).astype("i2")
        f.create_dataset("cube", data=cube, chunks=(4, 4, 3), shuffle=True, compression="gzip")
        f.create_dataset("plain", data=rng.random((17, 9)), chunks=(6, 2))
        masked = rng.random((20, 9)).astype("f4")
        ds = f.create_dataset("masked", data=masked, chunks=(5, 3), compression="gzip")
        ds.id.write_direct_chunk((5, 3), masked[5:10, 3:6].tobytes(), filter_mask=1)  # stored raw: gzip skipped
    with h5py.File(path) as f:
        for name in f:
            written[name] = f[name][()]
    return written


def test_whole_rows_reads_every_selection_as_h5py_does(tmp_path, read_mode):
    path = tmp_path / "odd.h5"
    expected = _odd_arrays(path)
    manifest = h5lens.index(path)
    assert manifest.chunks["masked"].inline, "a chunk kept inline: the view serves its bytes from the manifest"
    group = h5lens.open_group(manifest)
    for name, values in expected.items():
        view = h5lens.whole_rows(group[name])
        assert isinstance(view.store, WholeRowsStore)
        np.testing.assert_array_equal(view[...], values, err_msg=name)
        steps = (slice(0, 13, 3), slice(1, None, 2))
        for key in [(slice(3, 11),), (slice(2, 19), slice(1, 7)), (4,), (slice(None), 5), steps, (-1,)]:
            np.testing.assert_array_equal(view[key], values[key], err_msg=f"{name}{key}")
        rows = np.array([0, 7, 3, values.shape[0] - 1])
        np.testing.assert_array_equal(view.get_orthogonal_selection((rows, slice(None))), values[rows], err_msg=name)
    batches = loader(chunk_size=3, preload_nchunks=4, batch_size=6).add_dataset(h5lens.whole_rows(group["unwritten"]))
    assert_dense_batches(batches, expected["unwritten"])


def test_whole_rows_shards_are_served_exactly(tmp_path):
    """Every byte range zarr may ask of a shard (ranges, offsets, suffixes, the whole shard,
    several at once) is that part of the whole shard, whose index plain zarr decodes (the
    values above); listing names the shards that hold a stored chunk."""
    import asyncio

    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype

    path = tmp_path / "odd.h5"
    _odd_arrays(path)
    view = h5lens.whole_rows(h5lens.open_group(h5lens.index(path))["unwritten"])
    store = view.store
    prototype = default_buffer_prototype()

    async def check() -> list[str]:
        keys = [k async for k in store.list()]
        for key in keys[1:]:
            whole = (await store.get(key, prototype)).to_bytes()
            assert len(whole) == await store.getsize(key) and await store.exists(key)
            size = len(whole)
            requests = [RangeByteRequest(0, size), RangeByteRequest(3, size - 2), RangeByteRequest(size - 40, size),
                        OffsetByteRequest(7), SuffixByteRequest(16), SuffixByteRequest(size)]
            for request in requests:
                got = (await store.get(key, prototype, request)).to_bytes()
                assert got == whole[slice(*_bounds(size, request))], request
            batches = [group async for group in store.get_ranges(key, requests, prototype=prototype)]
            got_all = dict(item for group in batches for item in group)
            assert {i: b.to_bytes() for i, b in got_all.items()} == {
                i: whole[slice(*_bounds(size, r))] for i, r in enumerate(requests)
            }
        return keys

    keys = asyncio.run(check())
    with h5py.File(path) as f:
        ds = f["unwritten"]
        stored = (ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks()))
        bands = {c.chunk_offset[0] // ds.chunks[0] for c in stored}
    assert keys == ["zarr.json", *(f"c/{b}/0" for b in sorted(bands))]


def _bounds(size: int, request: Any) -> tuple[int, int]:
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest

    if isinstance(request, RangeByteRequest):
        return request.start, request.end
    if isinstance(request, OffsetByteRequest):
        return request.offset, size
    return size - request.suffix, size


def test_whole_rows_refuses_what_it_cannot_view(scanpy_h5ad, tmp_path):
    """Arrays of other stores and 0-d arrays are refused, naming why; arrays whose chunks
    hold whole rows already (1-d ones too) are returned as they are."""
    group = h5lens.open_group(h5lens.index(scanpy_h5ad))
    memory = zarr.create_array(zarr.storage.MemoryStore(), shape=(4, 6), chunks=(2, 3), dtype="f4")
    with pytest.raises(h5lens.InvalidOptionError, match="an array of an h5lens store"):
        h5lens.whole_rows(memory)
    for name in ("obsm/X_umap", "obs/n_genes"):
        assert h5py_chunks(scanpy_h5ad, name) is None or h5py_chunks(scanpy_h5ad, name)[1:] == group[name].shape[1:]
        array = group[name]
        assert h5lens.whole_rows(array) is array
    with h5py.File(tmp_path / "scalar.h5", "w") as f:
        f["answer"] = 42
    with pytest.raises(h5lens.InvalidOptionError, match="0-d"):
        h5lens.whole_rows(h5lens.open_group(h5lens.index(tmp_path / "scalar.h5"))["answer"])


def test_a_loader_over_whole_rows_pickles(scanpy_h5ad, tmp_path):
    """What a torch worker receives under spawn: the loader with the view (and the h5lens
    store under it) pickled; the copy reads the same rows."""
    h5lens.fast_reads()
    manifest = tmp_path / "pbmc.json"
    h5lens.index(scanpy_h5ad).to_json(manifest)
    view = h5lens.whole_rows(h5lens.open_group(str(manifest))["X"])
    copy = pickle.loads(pickle.dumps(loader().add_dataset(view)))
    assert_dense_batches(copy, dense_from_h5py(scanpy_h5ad, "X"))


def test_whole_rows_from_s3(s3, scanpy_h5ad, read_mode):
    """The file and its manifest in a bucket: the view's shards are the stored chunks' ranged GETs."""
    prefix = f"bucket/{uuid.uuid4().hex}"
    s3.filesystem().put(str(scanpy_h5ad), f"{prefix}/pbmc.h5ad")
    options = s3.storage_options()
    manifest_url = f"s3://{prefix}/pbmc.h5ad.json"
    h5lens.index(f"s3://{prefix}/pbmc.h5ad", storage_options=options).to_json(manifest_url, storage_options=options)
    group = h5lens.open_group(manifest_url, storage_options=options)
    batches = loader(chunk_size=64, preload_nchunks=4, batch_size=128).add_dataset(h5lens.whole_rows(group["X"]))
    assert_dense_batches(batches, dense_from_h5py(scanpy_h5ad, "X"))


# -- many files, add_adatas -----------------------------------------------------------------


def test_many_h5ad_files_as_one_loader(atlases, read_mode):
    datasets = [ad.io.sparse_dataset(h5lens.open_group(h5lens.index(p))["X"]) for p in atlases]
    obs = [ad.read_h5ad(p).obs for p in atlases]
    batches = loader().add_datasets(datasets, obs=obs)
    expected = sp.vstack([csr_from_h5py(p) for p in atlases], format="csr")
    everything = pd.concat(obs)
    for batch in loader().add_datasets(datasets, obs=obs):
        pd.testing.assert_frame_equal(batch["obs"], everything.iloc[batch["index"]])
    assert_sparse_batches(batches, expected)


def test_add_adatas_with_annbatchs_loader_over_h5lens_groups(atlases):
    """annbatch's own ``load_adata`` (``load_all_aligned``, what ``use_collection`` uses on its
    zarr groups) takes h5lens groups: X backed by the store, obs and var read from it."""
    h5lens.fast_reads()
    adatas = [load_all_aligned(h5lens.open_group(h5lens.index(p))) for p in atlases]
    batches = loader().add_adatas(adatas)
    expected = sp.vstack([csr_from_h5py(p) for p in atlases], format="csr")
    obs = pd.concat([ad.read_h5ad(p).obs for p in atlases])
    for batch in loader().add_adatas(adatas):
        pd.testing.assert_frame_equal(batch["obs"], obs.iloc[batch["index"]])
    assert_sparse_batches(batches, expected)


def test_h5lens_lazy_anndata_feeds_annbatchs_collection_but_not_its_loader(atlases, tmp_path):
    """h5lens's lazy AnnData (``read_anndata(m, lazy=True)``) is what annbatch's converter asks
    of ``load_adata``: ``DatasetCollection.add_adatas`` copies h5ad files (here: from their
    manifests) into its shuffled collection, whose batches hold the files' rows. annbatch's
    ``Loader`` itself takes only X backed by zarr (or in memory): a lazy AnnData's dask X
    is refused, so the no-copy route is ``add_dataset`` / ``load_all_aligned`` above."""
    manifests = []
    for p in atlases[1:]:
        m = tmp_path / (p.name + ".json")
        h5lens.index(p).to_json(m)
        manifests.append(str(m))
    lazy = h5lens.read_anndata(manifests[0], lazy=True)
    with pytest.raises(TypeError, match="only .* are usable"):
        loader().add_adatas([lazy])

    collection = annbatch.DatasetCollection(tmp_path / "copy.zarr").add_adatas(
        manifests,
        load_adata=lambda m: h5lens.read_anndata(m, lazy=True),
        n_obs_per_chunk=32,
        shard_size="1MB",
        dataset_size=10_000,  # rows: a size in bytes would be estimated by opening each path with h5py
        rng=np.random.default_rng(0),
    )
    originals = [ad.read_h5ad(p) for p in atlases[1:]]
    names = pd.Index(np.concatenate([a.obs_names for a in originals]))
    expected = sp.vstack([csr_from_h5py(p) for p in atlases[1:]], format="csr")
    seen = 0
    for batch in loader().use_collection(collection):
        rows = names.get_indexer(batch["obs"].index)  # the copy is shuffled: its obs names say which rows
        assert (rows >= 0).all()
        assert (batch["X"] != expected[rows]).nnz == 0
        seen += len(rows)
    assert seen == expected.shape[0]


# -- real files, S3, processes ----------------------------------------------------------------


@pytest.mark.parametrize("name", shared_names("*.h5ad"))
def test_real_h5ad_files(name):
    """The shared h5ad files written by anndata, anndataR and scanpy, through annbatch's own
    ``load_all_aligned``: sparse X, dense X in whole-row chunks, and dense X in chunks that
    cut the columns (scanpy's) through ``h5lens.whole_rows`` (an h5ad without X has nothing to load)."""
    path = shared_file(name)
    with h5py.File(path) as f:
        if "X" not in f:
            pytest.skip(f"{name} has no X")
    h5lens.fast_reads()
    adata = load_all_aligned(h5lens.open_group(h5lens.index(path)))
    if isinstance(adata.X, zarr.Array):
        adata.X = h5lens.whole_rows(adata.X)
    original = ad.read_h5ad(path)
    batches = loader(chunk_size=4, preload_nchunks=4, batch_size=8).add_adatas([adata])
    expected = original.X
    if sp.issparse(expected):
        assert_sparse_batches(batches, sp.csr_matrix(expected))
    else:
        assert_dense_batches(batches, np.asarray(expected))


def test_from_s3(s3, atlas, read_mode):
    """The h5ad and its manifest in a bucket; every block read with ranged GETs."""
    prefix = f"bucket/{uuid.uuid4().hex}"
    fs = s3.filesystem()
    fs.put(str(atlas), f"{prefix}/atlas.h5ad")
    options = s3.storage_options()
    manifest_url = f"s3://{prefix}/atlas.h5ad.json"
    h5lens.index(f"s3://{prefix}/atlas.h5ad", storage_options=options).to_json(manifest_url, storage_options=options)
    group = h5lens.open_group(manifest_url, storage_options=options)
    batches = loader(chunk_size=64, preload_nchunks=16).add_dataset(ad.io.sparse_dataset(group["X"]))
    assert_sparse_batches(batches, csr_from_h5py(atlas))


def test_a_loader_pickles_with_its_store(atlas):
    """What a torch DataLoader worker receives under the spawn start method: the loader, with
    the datasets and the store inside, pickled; the copy reads the same rows."""
    h5lens.fast_reads()
    dataset = ad.io.sparse_dataset(h5lens.open_group(h5lens.index(atlas))["X"])
    copy = pickle.loads(pickle.dumps(loader().add_dataset(dataset)))
    assert_sparse_batches(copy, csr_from_h5py(atlas))


def _read_in_a_worker(pickled: bytes, path: str) -> tuple[int, int, str]:
    """A spawned process, as a torch worker under spawn: unpickle the loader, turn h5lens's
    pipeline on (a ``worker_init_fn`` runs after the dataset is unpickled), read every batch."""
    h5lens.fast_reads()
    batches = pickle.loads(pickled)
    expected = csr_from_h5py(Path(path))
    rows = bad = 0
    for batch in batches:
        rows += len(batch["index"])
        bad += (batch["X"] != expected[batch["index"]]).nnz > 0
    return rows, bad, type(batches._sparse_dataset_elem_cache[0].data.codec_pipeline).__name__


def test_a_pickled_loader_reads_in_a_spawned_process(atlas, tmp_path):
    """What each torch DataLoader worker does under spawn, without torch: the loader (store
    inside) pickled into a fresh process, which reads every row exactly, through h5lens's
    pipeline once the worker turns it on, though it was unpickled before."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    manifest = tmp_path / "atlas.json"
    h5lens.index(atlas).to_json(manifest)
    batches = loader().add_dataset(ad.io.sparse_dataset(h5lens.open_group(str(manifest))["X"]))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        rows, bad, pipeline = pool.submit(_read_in_a_worker, pickle.dumps(batches), str(atlas)).result(timeout=300)
    assert (rows, bad, pipeline) == (csr_from_h5py(atlas).shape[0], 0, "H5LensCodecPipeline")


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_torch_dataloader_with_workers(atlas, tmp_path, context):
    """annbatch's Loader as a torch IterableDataset: each of two workers opens nothing, it
    gets the store in the loader (pickled under spawn) and reads its share of the blocks."""
    torch = pytest.importorskip("torch", reason="torch is a large install: the optional ml extra, not CI's")
    from torch.utils.data import DataLoader

    manifest = tmp_path / "atlas.json"
    h5lens.index(atlas).to_json(manifest)
    dataset = ad.io.sparse_dataset(h5lens.open_group(str(manifest))["X"])
    batches = loader(drop_last=True).add_dataset(dataset)
    workers = DataLoader(batches, batch_size=None, num_workers=2, multiprocessing_context=context)
    expected = csr_from_h5py(atlas)
    seen = []
    for batch in workers:
        index = np.asarray(batch["index"])
        x = batch["X"]
        x = x if isinstance(x, sp.csr_matrix) else sp.csr_matrix(torch.as_tensor(x).to_dense().numpy())
        assert (x != expected[index]).nnz == 0
        seen.append(index)
    rows = np.concatenate(seen)
    # the workers share the blocks out: no row twice; each drops its last partial batch at most
    assert len(np.unique(rows)) == len(rows) > expected.shape[0] - 2 * 64


def test_anndatas_own_annloader(atlas):
    """anndata's ``AnnLoader`` (deprecated for annbatch since 0.12.17) takes AnnData in memory
    (or backed by h5py): one read through h5lens is its input."""
    pytest.importorskip("torch", reason="anndata's AnnLoader is a torch DataLoader: torch is the optional ml extra")
    from anndata.experimental import AnnLoader

    adata = h5lens.read_anndata(h5lens.index(atlas))
    expected = csr_from_h5py(atlas).toarray()
    seen = 0
    for batch in AnnLoader(adata, batch_size=256, shuffle=True):
        np.testing.assert_array_equal(batch.X.numpy(), expected[batch.oidx])
        seen += len(batch.oidx)
    assert seen == expected.shape[0]
