"""annbatch's ``Loader`` over ONE combined manifest (``h5lens combine``) of several h5ad files.

Files of different cell counts written by ``anndata.AnnData.write_h5ad(compression="gzip")``
have csr ``X/data`` and ``X/indices`` of different lengths, so h5py gives them chunks of
different lengths and every file but the last ends inside a chunk: the combined arrays lie on
zarr's rectilinear chunk grid. annbatch reads them through zarr's API (``ad.io.sparse_dataset``
over ``h5lens.open_group``), which needs zarr's ``array.rectilinear_chunks`` flag, and needs it
for as long as the loader reads: anndata's csr dataset opens its arrays again at each read.

Every batch is compared, row by row through annbatch's ``return_index=True``, with
``anndata.concat`` of ``anndata.read_h5ad`` of the files; obs read from the combined object
with ``pd.concat`` of the files' obs.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import h5lens
from h5lens.read.rectilinear import RECTILINEAR_FLAG

annbatch = pytest.importorskip("annbatch", reason="annbatch (in the test and ml extras) is the loader under test")

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::anndata.OldFormatWarning"
)

N_VARS = 200
CELLS = (1300, 450, 900, 20)  # different lengths of X/data: h5py's chunks differ per file


def write_file(path: Path, n_obs: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    x = sp.random(n_obs, N_VARS, density=0.05, format="csr", random_state=seed, dtype=np.float32)
    x.data = np.round(x.data * 20 + 1)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice([f"t{seed}", "shared"], n_obs)),
            "n_counts": np.asarray(x.sum(axis=1)).ravel(),
        },
        index=[f"f{seed}-c{i}" for i in range(n_obs)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.AnnData(x, obs=obs, var=pd.DataFrame(index=[f"g{i}" for i in range(N_VARS)])).write_h5ad(
            path, compression="gzip"
        )
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    where = tmp_path_factory.mktemp("combine_loader")
    return [write_file(where / f"part{i}.h5ad", n, seed=i) for i, n in enumerate(CELLS)]


@pytest.fixture(scope="module")
def combined(files) -> h5lens.Manifest:
    return h5lens.combine([h5lens.index(p) for p in files])


@pytest.fixture(scope="module")
def expected(files) -> ad.AnnData:
    return ad.concat([ad.read_h5ad(p) for p in files])


@pytest.fixture(params=[True, False], ids=["fast_reads", "zarr_pipeline"])
def read_mode(request) -> Iterator[bool]:
    """Through h5lens's codec pipeline and hooks (``fast_reads()``) and through zarr's own."""
    with h5lens.fast_reads(request.param):
        yield request.param


def loader(**kwargs: Any) -> Any:
    settings: dict[str, Any] = {"chunk_size": 32, "preload_nchunks": 8, "batch_size": 64, "shuffle": True}
    settings.update(kwargs)
    return annbatch.Loader(return_index=True, preload_to_gpu=False, rng=np.random.default_rng(0), **settings)


def test_the_case_is_a_rectilinear_grid(combined):
    """What the other tests rely on: the files' csr arrays did not line up on one grid."""
    for name in ("X/data", "X/indices"):
        assert combined.nodes[name]["chunk_grid"]["name"] == "rectilinear", name


@pytest.mark.parametrize(("chunk_size", "preload_nchunks", "batch_size"), [(32, 8, 64), (7, 4, 14), (500, 2, 250)])
def test_loader_over_one_combined_manifest(
    combined, expected, read_mode, chunk_size, preload_nchunks, batch_size, monkeypatch
):
    """Every batch holds the rows it names, as anndata reads them from the files; every row
    once an epoch; obs read from the combined object beside it. Blocks of 500 rows cross from
    one file into the next. Under ``fast_reads()`` a preload of the rectilinear ``data`` and
    ``indices`` reads as runs of their segments (as a regular array's does), not through
    zarr's chunk list."""
    from h5lens.engine import plan, reader

    made: list[str] = []
    runs_plan = plan.runs_plan

    def counted(engine, path, *args, **kwargs):  # the engine's own signature
        made.append(path)
        return runs_plan(engine, path, *args, **kwargs)

    monkeypatch.setattr(reader, "runs_plan", counted)
    expected_x = expected.X.tocsr()
    with zarr.config.set({RECTILINEAR_FLAG: True}):
        group = h5lens.open_group(combined)
        dataset = ad.io.sparse_dataset(group["X"])
        obs = ad.io.read_elem(group["obs"])
        pd.testing.assert_frame_equal(obs, expected.obs)
        batches = loader(chunk_size=chunk_size, preload_nchunks=preload_nchunks, batch_size=batch_size)
        batches.add_dataset(dataset, obs=obs)
        seen = []
        for batch in batches:
            index, x = batch["index"], batch["X"]
            want = expected_x[index]
            assert isinstance(x, sp.csr_matrix) and x.dtype == want.dtype and x.shape == want.shape
            np.testing.assert_array_equal(x.indptr, want.indptr)
            np.testing.assert_array_equal(x.indices, want.indices)
            np.testing.assert_array_equal(x.data, want.data)
            pd.testing.assert_frame_equal(batch["obs"], expected.obs.iloc[index])
            seen.append(index)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(expected.n_obs))
    assert ({"X/data", "X/indices"} <= set(made)) is read_mode, sorted(set(made))


def test_the_flag_is_needed_while_the_loader_reads(combined):
    """anndata's csr dataset opens ``data`` and ``indices`` again at each read: the flag set
    only around ``sparse_dataset`` is not enough, and zarr says so (naming the flag)."""
    with zarr.config.set({RECTILINEAR_FLAG: True}):
        dataset = ad.io.sparse_dataset(h5lens.open_group(combined)["X"])
    batches = loader().add_dataset(dataset)
    with pytest.raises(ValueError, match="rectilinear_chunks"):  # zarr's RectilinearChunksDisabledError
        next(iter(batches))
