"""``h5lens.stored_chunks``: how an h5ad stores its rows, read off the manifest.

Oracles: h5py's view of the same file (chunk shapes, each stored chunk's size from
``chunk_iter``, ``indptr``), and, for what the numbers promise, the stored chunks that blocks
of contiguous rows touch, counted from h5py's chunk layout.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest
import scipy.sparse as sp

import h5lens


def _write(path: Path, n_obs: int, n_vars: int, density: float, fmt: str = "csr") -> Path:
    rng = np.random.default_rng(1)
    x = sp.random(n_obs, n_vars, density=density, format=fmt, random_state=rng, dtype=np.float32)
    adata = ad.AnnData(x)
    adata.layers["dense"] = x.toarray()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")
    return path


@pytest.fixture(scope="module")
def h5ad(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("chunking") / "a.h5ad", 20_000, 400, 0.05)


def _stored_sizes(dataset: h5py.Dataset) -> list[int]:
    sizes: list[int] = []
    dataset.id.chunk_iter(lambda info: sizes.append(info.size))
    return sizes


def test_a_csr_matrix_as_h5py_sees_it(h5ad):
    found = {c.array: c for c in h5lens.stored_chunks(h5lens.index(h5ad), "X")}
    assert set(found) == {"X/data", "X/indices"}
    with h5py.File(h5ad) as f:
        for name in ("data", "indices"):
            dataset = f["X"][name]
            c = found[f"X/{name}"]
            assert c.rows == f["X"].attrs["shape"][0]
            assert c.chunk_values == dataset.chunks[0]
            assert c.chunks == math.ceil(dataset.shape[0] / dataset.chunks[0]) == len(_stored_sizes(dataset))
            assert c.column_chunks == 1
            assert c.stored_bytes == pytest.approx(np.mean(_stored_sizes(dataset)))


@pytest.mark.parametrize("block", [1, 8, 32, 100, 400])
def test_inflation_is_what_blocks_of_rows_inflate(h5ad, block):
    """Blocks of ``block`` rows at every offset: stored chunks they touch (h5py's chunk length,
    the file's indptr), values inflated per value used, against ``inflation(block)``."""
    (data, _) = h5lens.stored_chunks(h5lens.index(h5ad))
    with h5py.File(h5ad) as f:
        indptr = f["X/indptr"][()].astype(np.int64)
        values = f["X/data"].chunks[0]
    starts = np.arange(0, indptr.size - 1 - block)
    lo, hi = indptr[starts], indptr[starts + block]
    touched = np.where(hi > lo, (hi - 1) // values - lo // values + 1, 0)
    measured = (touched * values).sum() / (hi - lo).sum()
    assert data.inflation(block) == pytest.approx(measured, rel=0.1)


def test_rows_per_chunk_keeps_a_block_within_two_chunks(h5ad):
    """A block of ``rows_per_chunk`` rows touches two stored chunks on average (h5py's layout)."""
    (data, _) = h5lens.stored_chunks(h5lens.index(h5ad))
    block = round(data.rows_per_chunk)
    with h5py.File(h5ad) as f:
        indptr = f["X/indptr"][()].astype(np.int64)
        values = f["X/data"].chunks[0]
    lo, hi = indptr[: -1 - block], indptr[block:-1]
    assert np.mean((hi - 1) // values - lo // values + 1) == pytest.approx(2, rel=0.1)


def test_a_dense_array_and_its_column_chunks(h5ad):
    (c,) = h5lens.stored_chunks(h5lens.open_group(h5lens.index(h5ad)), "layers/dense")
    with h5py.File(h5ad) as f:
        dataset = f["layers/dense"]
        assert (c.rows, c.chunk_values, c.rows_per_chunk) == (dataset.shape[0], dataset.chunks[0], dataset.chunks[0])
        assert c.column_chunks == math.ceil(dataset.shape[1] / dataset.chunks[1])
        assert c.chunks == math.ceil(dataset.shape[0] / dataset.chunks[0])
        assert c.stored_bytes == pytest.approx(np.mean(_stored_sizes(dataset)))


def test_from_a_manifest_file(h5ad, tmp_path):
    h5lens.index(h5ad).to_json(tmp_path / "a.json")
    assert h5lens.stored_chunks(str(tmp_path / "a.json")) == h5lens.stored_chunks(h5lens.index(h5ad))


def test_a_csc_matrix_stores_columns(tmp_path):
    path = _write(tmp_path / "csc.h5ad", 300, 50, 0.1, fmt="csc")
    with pytest.raises(h5lens.UnsupportedFeatureError, match="X: rows are stored by csr matrices"):
        h5lens.stored_chunks(h5lens.index(path))


def test_a_block_size_below_one_is_refused(h5ad):
    (data, _) = h5lens.stored_chunks(h5lens.index(h5ad))
    with pytest.raises(ValueError, match="at least 1"):
        data.inflation(0)
