"""The synthetic single-cell atlas the benchmarks read: an AnnData written by anndata
(obs/var by ``write_h5ad(compression="gzip")``, X by ``anndata.io.write_elem`` in gzip
chunks), with per-cell counts drawn like real data. Shared by read_bench.py and
remote_scan.py so that both measure the same file."""

from __future__ import annotations

import os
import warnings

import numpy as np


def write_atlas(path: str, n_obs: int, n_vars: int, density: float, *, chunk: int | None = 800, fmt: str = "csr",
                seed: int = 0, compression: str = "gzip", values: str = "lognormal") -> int:
    """Write the atlas at ``path`` (atomically: a ``.partial`` file renamed); X is CSR or CSC
    float32 in ``compression`` chunks of ``chunk`` elements, or (``chunk=None``) the whole
    AnnData by one ``write_h5ad(compression=...)``, anndata choosing every chunk. Returns
    its number of stored values.

    ``values``: ``"lognormal"`` (continuous values, as in a normalised X: their mantissas
    barely compress, gzip keeps about 90% of the bytes) or ``"counts"`` (whole UMI counts
    stored as float32, as in a raw X: mostly 1 and 2, a long tail; gzip keeps about a third)."""
    import anndata as ad
    import h5py
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    per_row = rng.poisson(density * n_vars, n_obs).clip(1, n_vars // 2)
    indptr = np.zeros(n_obs + 1, np.int64)
    np.cumsum(per_row, out=indptr[1:])
    nnz = int(indptr[-1])
    row = np.repeat(np.arange(n_obs), per_row)
    gaps = (rng.random(nnz) * (n_vars // per_row)[row]).astype(np.int64) + 1
    cumulative = np.cumsum(gaps)
    indices = (cumulative - np.r_[0, cumulative[indptr[1:-1] - 1]][row] - 1).astype(np.int32)
    if values == "counts":  # P(1) = 0.4, mean 2.5: a UMI count matrix's non-zero values
        stored = (rng.negative_binomial(1, 0.4, nnz) + 1).astype(np.float32)
    elif values == "lognormal":
        stored = rng.lognormal(0, 1, nnz).astype(np.float32)
    else:
        raise ValueError(f"values must be 'lognormal' or 'counts', not {values!r}")
    x = sp.csr_matrix((stored, indices, indptr), shape=(n_obs, n_vars))
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(rng.choice([f"type_{i}" for i in range(24)], n_obs)),
         "n_counts": np.asarray(x.sum(axis=1)).ravel()},
        index=[f"cell_{i:06d}" for i in range(n_obs)],
    )
    var = pd.DataFrame({"gene_symbol": [f"GENE{i}" for i in range(n_vars)]}, index=[f"ENSG{i:011d}" for i in range(n_vars)])
    matrix = x.tocsc() if fmt == "csc" else x
    tmp = path + ".partial"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if chunk is None:
            ad.AnnData(X=matrix, obs=obs, var=var).write_h5ad(tmp, compression=compression)
        else:
            ad.AnnData(obs=obs, var=var).write_h5ad(tmp, compression="gzip")
            with h5py.File(tmp, "a") as f:
                ad.io.write_elem(f, "X", matrix, dataset_kwargs={"chunks": (chunk,), "compression": compression})
    os.replace(tmp, path)
    return nnz
