"""h5lens.combine of TreeData files (written by treedata) along obs, compared with
treedata.concat of treedata.read_h5td of the files: the AnnData part, the obst / vart trees,
label, alignment and allow_overlap, through h5lens.read_treedata (eager and lazy)."""

from __future__ import annotations

import warnings
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
from h5lens.errors import InvalidOptionError

treedata = pytest.importorskip("treedata")
nx = pytest.importorskip("networkx")

CELLS = (40, 57, 23)
GENES = 12


def _tree(leaves: list[str], prefix: str) -> nx.DiGraph:
    """A two-level tree over ``leaves``, with node and edge attributes."""
    tree = nx.DiGraph()
    tree.add_node(f"{prefix}root", depth=0)
    for half, part in enumerate((leaves[: len(leaves) // 2], leaves[len(leaves) // 2 :])):
        inner = f"{prefix}n{half}"
        tree.add_edge(f"{prefix}root", inner, length=1.5)
        tree.nodes[inner]["depth"] = 1
        for leaf in part:
            tree.add_edge(inner, leaf, length=0.5)
            tree.nodes[leaf]["depth"] = 2
    return tree


def _tdata(n: int, seed: int, genes: list[str], *, shared_tree: bool) -> object:
    rng = np.random.default_rng(seed)
    dense = rng.random((n, len(genes)), dtype=np.float32)
    dense[dense < 0.6] = 0
    obs_names = [f"f{seed}_c{i}" for i in range(n)]
    adata = ad.AnnData(
        sp.csr_matrix(dense),
        obs=pd.DataFrame({"clone": pd.Categorical(rng.choice([f"k{seed}", "shared"], n))}, index=obs_names),
        var=pd.DataFrame(index=genes),
    )
    obst = {f"own{seed}": _tree(obs_names[: n // 2], f"own{seed}_")}
    if shared_tree:  # each file's part of one lineage tree (treedata joins them into one tree)
        lineage = nx.DiGraph()
        lineage.add_node("root", depth=0)
        lineage.add_edge("root", f"clade{seed}", length=2.0)
        lineage.add_edges_from((f"clade{seed}", leaf, {"length": 0.25}) for leaf in obs_names)
        obst["lineage"] = lineage
    vart = {"genes": _tree(list(genes[:4]), "g_")}  # the same in every file
    return treedata.TreeData(adata, obst=obst, vart=vart, label="clone_tree")


def _files(tmp_path: Path, *, variables=None, shared_tree: bool = True) -> list[Path]:
    paths = []
    for i, n in enumerate(CELLS):
        genes = variables[i] if variables else [f"g{j}" for j in range(GENES)]
        path = tmp_path / f"t{i}.h5td"
        _tdata(n, i, genes, shared_tree=shared_tree).write_h5td(path, compression="gzip")
        paths.append(path)
    return paths


def _manifests(paths: list[Path], tmp_path: Path) -> list[Path]:
    out = []
    for path in paths:
        target = tmp_path / (path.name + ".json")
        h5lens.index(path, inline_threshold=0).to_json(target)
        out.append(target)
    return out


def _plain_zarr(manifest_path: Path) -> zarr.storage.FsspecStore:
    fs = fsspec.filesystem(
        "reference", fo=str(manifest_path), asynchronous=True, remote_protocol="file",
        remote_options={"asynchronous": True},
    )  # fmt: skip
    return zarr.storage.FsspecStore(fs, read_only=True, path="")


def _expected(paths: list[Path], **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # treedata's own warnings on merged trees
        return treedata.concat([treedata.read_h5td(p) for p in paths], **options)


def _same_trees(got, expected) -> None:
    for axis in ("obst", "vart"):
        mine, theirs = getattr(got, axis), getattr(expected, axis)
        assert sorted(mine.keys()) == sorted(theirs.keys()), axis
        for key in theirs.keys():
            assert nx.utils.graphs_equal(mine[key], theirs[key]), (axis, key)
    assert (got.label, got.alignment, got.allow_overlap) == (expected.label, expected.alignment, expected.allow_overlap)


def _same(got, expected) -> None:
    assert_equal(got.to_adata(), expected.to_adata())
    _same_trees(got, expected)


@pytest.mark.parametrize(
    "options",
    [{}, {"merge": "same", "label": "batch", "keys": ["a", "b", "c"]}, {"join": "outer", "merge": "first"}],
    ids=["default", "merge-same-label", "outer-first"],
)
def test_treedata_files_combined_equal_treedata_concat(tmp_path, options):
    paths = _files(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        combined = h5lens.combine(_manifests(paths, tmp_path), **options)
    expected = _expected(paths, **options)
    assert "lineage" in expected.obst.keys() and len(expected.obst.keys()) == 4  # shared key joined, own kept
    _same(h5lens.read_treedata(combined), expected)
    lazy = h5lens.read_treedata(combined, lazy=True)
    _same_trees(lazy, expected)
    assert_equal(lazy.to_adata().X.compute(), expected.X)
    # anndata's readers read the AnnData part, X referenced where the files store it
    assert_equal(h5lens.read_anndata(combined), expected.to_adata())
    target = tmp_path / "combined.json"
    combined.save(target, relative_sources=False)
    _same(h5lens.read_treedata(target), expected)
    # treedata's own zarr reader, through zarr (the rectilinear grids need zarr's flag)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        _same(treedata.read_zarr(_plain_zarr(target)), expected)


def test_treedata_files_of_other_var(tmp_path):
    """var differs: the combined var as treedata.concat (anndata.concat) joins it; vart trees of
    genes an inner join drops go as treedata drops them."""
    variables = [[f"g{j}" for j in range(GENES)], [f"g{j}" for j in range(GENES + 3, 1, -1)], [f"g{j}" for j in range(8)]]
    paths = _files(tmp_path, variables=variables)
    for join in ("inner", "outer"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            combined = h5lens.combine(_manifests(paths, tmp_path), join=join, merge="same")
        expected = _expected(paths, join=join, merge="same")
        _same(h5lens.read_treedata(combined), expected)


def test_h5ad_among_treedata_files_is_a_treedata_without_trees(tmp_path):
    paths = _files(tmp_path, shared_tree=False)
    plain = tmp_path / "plain.h5ad"
    treedata.read_h5td(paths[2]).to_adata().write_h5ad(plain)
    files = [*paths[:2], plain]
    combined = h5lens.combine(_manifests(files, tmp_path))
    _same(h5lens.read_treedata(combined), _expected(files))


def test_index_unique_is_refused_for_treedata(tmp_path):
    paths = _files(tmp_path)
    with pytest.raises(InvalidOptionError, match="treedata.concat takes none"):
        h5lens.combine(_manifests(paths, tmp_path), index_unique="-")


def test_append_treedata_files_compact_and_icechunk(tmp_path):
    """TreeData appended to a combined manifest (compact form) and to an Icechunk repository
    (a new commit): equal to treedata.concat of every file."""
    pytest.importorskip("icechunk")
    paths = _files(tmp_path)
    manifests = _manifests(paths, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = h5lens.combine(manifests[:2])
        grown = h5lens.combine(manifests[2:], append_to=first)
    grown.save(tmp_path / "grown.h5lens")
    _same(h5lens.read_treedata(tmp_path / "grown.h5lens"), _expected(paths))
    from cli_runner import h5lens as run

    repository = f"icechunk://{tmp_path / 'repo'}"
    assert run("combine", *manifests[:2], "-o", repository).status == 0
    result = run("combine", manifests[2], "-o", repository, "--append")
    assert result.status == 0, result.stderr
    _same(h5lens.read_treedata(repository), _expected(paths))
