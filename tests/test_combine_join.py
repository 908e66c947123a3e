"""h5lens.combine of h5ad files whose var differ (overlapping, reordered, disjoint), with
join="inner" / "outer": compared with anndata.concat of anndata.read_h5ad of the files, through
h5lens's readers (eager, lazy, slices); zarr's own readers refuse the matrices whose columns
h5lens maps, saying why."""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import fsspec
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata.tests.helpers import assert_equal

import h5lens
from h5lens.combining import combine_with_summary
from h5lens.errors import UnsupportedFeatureError

CELLS = (150, 233, 97, 60)
VARS = (
    [f"g{j}" for j in range(30)],  # the first file's
    [f"g{j}" for j in range(35, 9, -1)],  # overlapping it, in another order, with genes of its own
    [f"h{j}" for j in range(10)] + ["g12", "g20", "g3"],  # mostly disjoint
    [f"g{j}" for j in range(30)],  # the first file's var again: its columns stay where they are
)


def _adata(n: int, genes: list[str], seed: int, fmt: str, *, obsm: bool = True) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    dense = rng.random((n, len(genes)), dtype=np.float32)
    dense[dense < 0.6] = 0
    x = sp.csr_matrix(dense) if fmt == "csr" else sp.csc_matrix(dense) if fmt == "csc" else dense
    obs = pd.DataFrame({"kind": pd.Categorical(rng.choice([f"t{seed}", "shared"], n))}, index=[f"c{seed}_{i}" for i in range(n)])
    var = pd.DataFrame({"gene_id": [f"id_{g}" for g in genes]}, index=genes)
    adata = ad.AnnData(x, obs=obs, var=var)
    counts = np.rint(dense * 10).astype(np.int32)
    adata.layers["counts"] = sp.csr_matrix(counts) if fmt != "dense" else counts
    if obsm:
        adata.obsm["X_pca"] = rng.random((n, 4)).astype(np.float32)
    return adata


def _files(tmp_path: Path, fmt: str, variables=VARS, *, obsm: bool = True) -> list[Path]:
    paths = []
    for i, (n, genes) in enumerate(zip(CELLS, variables, strict=True)):
        path = tmp_path / f"{fmt}{i}.h5ad"
        _adata(n, genes, i, fmt, obsm=obsm).write_h5ad(path, compression="gzip")
        paths.append(path)
    return paths


def _manifests(paths: list[Path], tmp_path: Path) -> list[Path]:
    out = []
    for path in paths:
        target = tmp_path / (path.name + ".json")
        h5lens.index(path, inline_threshold=0).to_json(target)
        out.append(target)
    return out


def _expected(paths: list[Path], **options) -> ad.AnnData:
    return ad.concat([ad.read_h5ad(p) for p in paths], **options)


def _plain_zarr(manifest_path: Path) -> zarr.storage.FsspecStore:
    fs = fsspec.filesystem(
        "reference", fo=str(manifest_path), asynchronous=True, remote_protocol="file",
        remote_options={"asynchronous": True},
    )  # fmt: skip
    return zarr.storage.FsspecStore(fs, read_only=True, path="")


def _same_matrix(got, expected) -> None:
    assert got.dtype == expected.dtype
    assert sp.issparse(got) == sp.issparse(expected)
    assert_equal(got, expected)


@pytest.mark.parametrize("fmt", ["csr", "dense"])
@pytest.mark.parametrize("join", ["inner", "outer"])
def test_files_of_other_var_combined_equal_anndata_concat(tmp_path, fmt, join):
    paths = _files(tmp_path, fmt)
    options = {"join": join, "label": "file", "index_unique": "-"}
    combined, summary = combine_with_summary(_manifests(paths, tmp_path), **options)
    expected = _expected(paths, **options)
    assert expected.n_vars == (2 if join == "inner" else 46)  # the var is anndata's: intersection or union
    got = h5lens.read_anndata(combined)
    assert_equal(got, expected)
    _same_matrix(got.X, expected.X)
    _same_matrix(got.layers["counts"], expected.layers["counts"])
    # nothing of X's values copied: referenced where the files store it, each file's columns mapped
    assert set(summary.remapped) == {"X", "layers/counts"}
    referenced = {a.path for a in summary.referenced}
    if fmt == "csr":
        assert {"X/data", "X/indices"} <= referenced
    else:
        assert {f"h5lens_columns/X/{i}" for i in range(len(paths))} <= referenced
    assert "X" not in summary.written and "obsm/X_pca" in referenced

    lazy = h5lens.read_anndata(combined, lazy=True)
    in_memory = lazy.to_memory()
    _same_matrix(in_memory.X, expected.X)
    _same_matrix(in_memory.layers["counts"], expected.layers["counts"])
    # slices across the files' boundaries read only their rows
    rows = slice(CELLS[0] - 5, CELLS[0] + CELLS[1] + 4)
    assert_equal(lazy.X[rows].compute(), expected.X[rows])
    picked = [3, CELLS[0] + 7, CELLS[0] + CELLS[1] + 2, sum(CELLS) - 1]
    assert_equal(lazy.layers["counts"][picked].compute(), expected.layers["counts"][picked])
    assert_equal(lazy.X[rows, 1:4].compute(), expected.X[rows, 1:4])
    assert_equal(lazy.X[::7].compute(), expected.X[::7])


@pytest.mark.parametrize(("fmt", "fill_value"), [("csr", 7), ("dense", 0), ("dense", -1.5)])
def test_outer_join_fill_value(tmp_path, fmt, fill_value):
    """A fill value where a file lacks a column: anndata writes it into sparse matrices too."""
    paths = _files(tmp_path, fmt)
    combined = h5lens.combine(_manifests(paths, tmp_path), join="outer", fill_value=fill_value)
    expected = _expected(paths, join="outer", fill_value=fill_value)
    got = h5lens.read_anndata(combined)
    _same_matrix(got.X, expected.X)
    _same_matrix(got.layers["counts"], expected.layers["counts"])
    lazy = h5lens.read_anndata(combined, lazy=True)
    rows = slice(CELLS[0] - 2, CELLS[0] + 3)
    assert_equal(lazy.layers["counts"][rows].compute(), expected.layers["counts"][rows])


def test_the_command_takes_join_and_fill_value(tmp_path):
    from cli_runner import h5lens as run

    paths = _files(tmp_path, "dense")
    out = tmp_path / "c.json"
    result = run("combine", *_manifests(paths, tmp_path), "-o", out, "--join", "outer", "--fill-value", "-1.5")
    assert result.status == 0, result.stderr
    _same_matrix(h5lens.read_anndata(out).X, _expected(paths, join="outer", fill_value=-1.5).X)


def test_saved_forms_read_the_same(tmp_path):
    paths = _files(tmp_path, "csr")
    combined = h5lens.combine(_manifests(paths, tmp_path), join="outer")
    expected = _expected(paths, join="outer")
    for name in ("combined.json", "combined.h5lens"):
        target = tmp_path / name
        combined.save(target)
        assert_equal(h5lens.read_anndata(target), expected)
        assert_equal(h5lens.read_anndata(target, lazy=True).to_memory().X, expected.X)
    # a list of combined manifests concatenates as anndata concatenates the two
    both = h5lens.read_anndata([tmp_path / "combined.json", tmp_path / "combined.h5lens"], join="outer", index_unique="-")
    assert_equal(both.X, ad.concat([expected, expected], join="outer", index_unique="-").X)


@pytest.mark.parametrize("fmt", ["csr", "dense"])
def test_zarr_readers_refuse_the_mapped_matrices(tmp_path, fmt):
    """zarr's readers cannot map the files' columns: they refuse, saying why, and never give values.
    (No obsm: anndata's lazy reader stops at a dense array on a rectilinear grid, test_combine.py.)"""
    paths = _files(tmp_path, fmt, obsm=False)
    combined = h5lens.combine(_manifests(paths, tmp_path), join="outer")
    target = tmp_path / "combined.json"
    combined.save(target, relative_sources=False)  # fsspec resolves relative URLs against the working directory
    why = "different var.*h5lens.read_anndata"
    with zarr.config.set({"array.rectilinear_chunks": True}):
        with pytest.raises(UnsupportedFeatureError, match=why):
            ad.read_zarr(_plain_zarr(target))
        lazy = ad.experimental.read_lazy(_plain_zarr(target))  # opening reads no value of X
        with pytest.raises(UnsupportedFeatureError, match=why):
            lazy.X.compute()
        group = zarr.open_group(_plain_zarr(target), mode="r")
        member = group["X/indptr"] if fmt == "csr" else group["X"]
        with pytest.raises(UnsupportedFeatureError, match=why):
            member[:]
        # what does not depend on var reads as anndata.concat gives it
        expected = _expected(paths, join="outer")
        assert list(ad.io.read_elem(group["var"]).index) == list(expected.var_names)
        assert_equal(ad.io.read_elem(group["obs"]), expected.obs)


def test_csc_files_of_other_var_are_concatenated_by_anndata(tmp_path):
    """A csc X concatenates into a csr whose values lie in another order: anndata reindexes and
    concatenates it, and it is written (said in the summary)."""
    paths = _files(tmp_path, "csc")
    combined, summary = combine_with_summary(_manifests(paths, tmp_path), join="outer")
    expected = _expected(paths, join="outer")
    assert_equal(h5lens.read_anndata(combined), expected)
    assert "X" in summary.written and "X" not in summary.remapped
    assert summary.remapped == ("layers/counts",)  # the csr layer is mapped


def test_files_sharing_var_record_no_maps(tmp_path):
    paths = _files(tmp_path, "csr", variables=(VARS[0],) * len(CELLS))
    combined, summary = combine_with_summary(_manifests(paths, tmp_path), join="outer")
    assert summary.remapped == () and "h5lens_columns" not in combined.nodes
    assert_equal(h5lens.read_anndata(combined), _expected(paths, join="outer"))


def test_a_combined_manifest_with_maps_is_not_combined_again(tmp_path):
    paths = _files(tmp_path, "csr")
    manifests = _manifests(paths, tmp_path)
    first = h5lens.combine(manifests[:3], join="outer")
    with pytest.raises(UnsupportedFeatureError, match="combine its files again"):
        h5lens.combine(manifests[3:], append_to=first, join="outer")
