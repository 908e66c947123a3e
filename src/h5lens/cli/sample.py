"""A small, deterministic AnnData-layout HDF5 file, written with h5py alone.

Used by ``h5lens demo`` and published in ``refs/`` with its manifest. It holds
what real h5ad files hold: a CSR matrix in gzip chunks, dataframes with string
indexes, a categorical column, a dense contiguous ``obsm`` array, string and
numeric scalars in ``uns``.
"""

from __future__ import annotations

import os
from dataclasses import replace

import h5py
import numpy as np

N_OBS = 300
N_VAR = 120


def _encoding(obj: h5py.HLObject, kind: str, version: str) -> None:
    obj.attrs["encoding-type"] = kind
    obj.attrs["encoding-version"] = version


def _strings(group: h5py.Group, name: str, values: list[str]) -> h5py.Dataset:
    ds = group.create_dataset(name, data=np.array(values, dtype=object), dtype=h5py.string_dtype())
    _encoding(ds, "string-array", "0.2.0")
    return ds


def write_sample(path: str | os.PathLike[str]) -> str:
    """Write the sample file to ``path`` and return the path."""
    rng = np.random.default_rng(0)
    dense = rng.poisson(0.3, size=(N_OBS, N_VAR)).astype(np.float32)
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))]).astype(np.int64)
    indices = np.nonzero(dense)[1].astype(np.int32)
    # log-normalised-looking values: compress like real data, not like small integers
    data = np.log1p(dense[dense != 0] * rng.uniform(0.5, 2.0, int((dense != 0).sum()))).astype(np.float32)

    with h5py.File(path, "w", libver=("earliest", "v108"), track_order=False) as f:
        _encoding(f, "anndata", "0.1.0")
        x = f.create_group("X")
        _encoding(x, "csr_matrix", "0.1.0")
        x.attrs["shape"] = np.array([N_OBS, N_VAR], dtype=np.int64)
        x.create_dataset("data", data=data, chunks=(2048,), compression="gzip", compression_opts=4)
        x.create_dataset("indices", data=indices, chunks=(1024,), compression="gzip", compression_opts=4)
        x.create_dataset("indptr", data=indptr)

        obs = f.create_group("obs")
        _encoding(obs, "dataframe", "0.2.0")
        obs.attrs["_index"] = "_index"
        obs.attrs["column-order"] = np.array(["cell_type", "n_counts"], dtype=object)
        _strings(obs, "_index", [f"cell-{i:04d}" for i in range(N_OBS)])
        cell_type = obs.create_group("cell_type")
        _encoding(cell_type, "categorical", "0.2.0")
        cell_type.attrs["ordered"] = False
        cell_type.create_dataset("codes", data=rng.integers(0, 3, N_OBS).astype(np.int8))
        _strings(cell_type, "categories", ["B cell", "NK cell", "T cell"])
        counts = obs.create_dataset("n_counts", data=dense.sum(axis=1))
        _encoding(counts, "array", "0.2.0")

        var = f.create_group("var")
        _encoding(var, "dataframe", "0.2.0")
        var.attrs["_index"] = "_index"
        var.attrs["column-order"] = np.array(["highly_variable"], dtype=object)
        _strings(var, "_index", [f"GENE{i}" for i in range(N_VAR)])
        hv = var.create_dataset("highly_variable", data=dense.var(axis=0) > 0.3)
        _encoding(hv, "array", "0.2.0")

        obsm = f.create_group("obsm")
        _encoding(obsm, "dict", "0.1.0")
        pca = obsm.create_dataset("X_pca", data=rng.standard_normal((N_OBS, 20)).astype(np.float32))
        _encoding(pca, "array", "0.2.0")

        uns = f.create_group("uns")
        _encoding(uns, "dict", "0.1.0")
        title = uns.create_dataset("title", data="h5lens sample", dtype=h5py.string_dtype())
        _encoding(title, "string", "0.2.0")
        seed = uns.create_dataset("seed", data=np.int64(0))
        _encoding(seed, "numeric-scalar", "0.2.0")

        for name in ("layers", "obsp", "varm", "varp"):
            _encoding(f.create_group(name), "dict", "0.1.0")
    return os.fspath(path)


SAMPLE_NAME = "sample.h5ad"
MANIFEST_NAME = "sample.h5ad.json"


def publish_refs(directory: str | os.PathLike[str], *, sample: str | os.PathLike[str] | None = None) -> str:
    """Write ``refs/``: the sample file (unless given) and its manifest, with a relative URL.

    The published manifest records the source's size but not its mtime: a checkout
    sets a new mtime on every file, and the pair is published to be moved together.
    """
    import h5lens
    from h5lens.manifest.model import Source

    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    sample_path = os.path.join(directory, SAMPLE_NAME)
    if sample is None:
        write_sample(sample_path)
    else:
        sample_path = os.fspath(sample)
    indexed = h5lens.index(sample_path, url=SAMPLE_NAME)
    manifest = replace(indexed, sources=[Source(SAMPLE_NAME, indexed.sources[0].size)])
    out = os.path.join(directory, MANIFEST_NAME)
    manifest.to_json(out)
    return out
