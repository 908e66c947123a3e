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


def test_sparse_x_through_add_dataset(atlas, read_mode):
    group = h5lens.open_group(h5lens.index(atlas))
    dataset = ad.io.sparse_dataset(group["X"])
    assert dataset.backend == "zarr"  # what annbatch asks of a CSRDataset: h5lens's is one
    batches = loader().add_dataset(dataset)
    assert assert_sparse_batches(batches, csr_from_h5py(atlas)) > 1


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
    can drop its advice to store dense arrays in whole-row chunks."""
    group = h5lens.open_group(h5lens.index(atlas))
    array = group["layers/dense"]
    assert array.chunks[1] < array.shape[1]  # the case: chunks that cut the columns
    if store == "zarr_memory":
        copy = zarr.create_array(zarr.storage.MemoryStore(), shape=array.shape, chunks=array.chunks, dtype=array.dtype)
        copy[:] = array[:]
        array = copy
    assert_dense_batches(loader().add_dataset(array), dense_from_h5py(atlas, "layers/dense"))


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
    ``load_all_aligned``: those whose X annbatch 0.3.1 reads (sparse X, or dense X in whole-row
    chunks; an h5ad without X has nothing to load)."""
    path = shared_file(name)
    with h5py.File(path) as f:
        if "X" not in f:
            pytest.skip(f"{name} has no X")
        x = f["X"]
        if isinstance(x, h5py.Dataset) and x.chunks is not None and x.chunks[1] < x.shape[1]:
            pytest.skip(f"{name}: dense X in chunks of {x.chunks} (see test_dense_chunked_by_columns_...)")
    h5lens.fast_reads()
    adata = load_all_aligned(h5lens.open_group(h5lens.index(path)))
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
