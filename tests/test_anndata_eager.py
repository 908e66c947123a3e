"""The eager AnnData read walks the manifest itself: no zarr.json read through the store,
values and array layouts as ``anndata.read_h5ad`` gives them."""

from __future__ import annotations

import shutil
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from anndata.tests.helpers import assert_equal

import h5lens
from h5lens.adata.eager import EagerReader
from shared_data import shared_file, shared_names

pytestmark = pytest.mark.filterwarnings("ignore::anndata.OldFormatWarning", "ignore::UserWarning")


def _written(path) -> None:
    rng = np.random.default_rng(0)
    n_obs, n_var = 2500, 40  # obsm chunks of h5py's choosing (625, 3): edges cropped
    adata = ad.AnnData(
        X=sp.random(n_obs, n_var, density=0.1, format="csr", random_state=0, dtype=np.float32),
        obs=pd.DataFrame(
            {
                "kind": pd.Categorical(rng.choice(["T", "B"], n_obs)),
                "count": rng.poisson(5, n_obs),
                "maybe": pd.array([None if i % 3 else i for i in range(n_obs)], dtype="Int64"),
            },
            index=[f"c{i}" for i in range(n_obs)],
        ),
        var=pd.DataFrame({"gene_ids": [f"ENSG{i}" for i in range(n_var)]}, index=[f"g{i}" for i in range(n_var)]),
    )
    adata.obsm["X_pca"] = rng.standard_normal((n_obs, 10)).astype(np.float32)
    adata.uns["title"] = "a title"
    adata.uns["scale"] = 2.5
    adata.uns["nested"] = {"flag": True, "values": np.arange(3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")


class _CountingStore:
    """Records the keys a store is asked for through zarr's Store API (the instance's own
    ``get``, wrapped: nothing of zarr's is touched)."""

    def __init__(self, store) -> None:
        self.keys: list[str] = []
        original = store.get

        async def get(key, prototype, byte_range=None):
            self.keys.append(key)
            return await original(key, prototype, byte_range)

        store.get = get


@pytest.mark.parametrize("name", ["written", *shared_names("scanpy*pbmc68k*.h5ad")])
def test_eager_read_asks_the_store_for_no_zarr_json(tmp_path, name):
    path = tmp_path / "file.h5ad"
    if name == "written":
        _written(path)
    else:
        shutil.copy(shared_file(name), path)
    store = h5lens.open_store(h5lens.index(path))
    counted = _CountingStore(store)
    got = EagerReader(store).read_root()
    assert_equal(got, ad.read_h5ad(path))
    assert [key for key in counted.keys if key.endswith("zarr.json")] == []


def test_eager_arrays_are_contiguous_as_h5py_gives_them(tmp_path):
    path = tmp_path / "file.h5ad"
    _written(path)
    expected = ad.read_h5ad(path)
    got = h5lens.read_anndata(h5lens.index(path))
    for key, array in expected.obsm.items():
        assert got.obsm[key].flags.c_contiguous == array.flags.c_contiguous
        assert got.obsm[key].dtype == array.dtype
        np.testing.assert_array_equal(got.obsm[key], array)


def test_a_collection_opens_its_members_side_by_side_and_keeps_their_order():
    """Each member's open waits for all the others to be opening (a barrier): opened one
    after another, the first would wait alone and the barrier break."""
    import threading

    from h5lens.adata.collection import open_all

    names = [f"m{i}" for i in range(6)]
    barrier = threading.Barrier(len(names), timeout=30)

    def open_one(name):
        barrier.wait()
        return name.upper()

    assert open_all(names, open_one) == [name.upper() for name in names]


def test_a_collection_raises_the_first_failure_in_order():
    from h5lens.adata.collection import open_all

    def open_one(name):
        if name in ("b", "d"):
            raise h5lens.H5LensError(f"cannot open {name}")
        return name

    with pytest.raises(h5lens.H5LensError, match="cannot open b"):
        open_all(["a", "b", "c", "d"], open_one)


def test_a_list_of_manifests_equals_anndata_concat(tmp_path):
    paths = []
    for i in range(3):
        path = tmp_path / f"f{i}.h5ad"
        _written(path)
        paths.append(path)
    expected = ad.concat([ad.read_h5ad(p) for p in paths], index_unique="-")
    got = h5lens.read_anndata([h5lens.index(p) for p in paths], index_unique="-")
    assert_equal(got, expected)


def test_with_h5lens_decoding_off_zarr_reads_every_value(tmp_path):
    """``fast_reads(False)``: the walk still owns the lookups, zarr decodes every chunk."""
    path = tmp_path / "file.h5ad"
    _written(path)
    store = h5lens.open_store(h5lens.index(path))
    counted = _CountingStore(store)
    with h5lens.fast_reads(False):
        got = EagerReader(store).read_root()
    assert_equal(got, ad.read_h5ad(path))
    chunks = {key.rsplit("/c", 1)[0] for key in counted.keys if not key.endswith("zarr.json")}
    assert {"X/data", "obs/count", "obsm/X_pca", "uns/title", "uns/scale"} <= chunks


def test_a_lazy_collection_cuts_dense_obsm_into_blocks_of_whole_rows(tmp_path):
    """Stored in (625, 3) chunks, obsm would be 16 tiny tasks per file: a list reads it in
    row blocks of about ``block_bytes`` (one per small file), values unchanged."""
    paths = []
    for i in range(3):
        path = tmp_path / f"f{i}.h5ad"
        _written(path)
        paths.append(path)
    lazy = h5lens.read_anndata([h5lens.index(p) for p in paths], lazy=True)
    pca = lazy.obsm["X_pca"]
    assert pca.numblocks == (3, 1)
    expected = ad.concat([ad.read_h5ad(p) for p in paths]).obsm["X_pca"]
    np.testing.assert_array_equal(pca.compute(), expected)
