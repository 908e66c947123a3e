"""The TreeData profile: ``treedata.read_zarr`` on the manifest gives what ``read_h5td`` gives on the file."""

from __future__ import annotations

import math
import shutil
import warnings
from pathlib import Path
from typing import Any

import h5py
import networkx as nx
import numpy as np
import pandas as pd
import pytest
import zarr

import h5lens
from shared_data import shared_file

treedata = pytest.importorskip("treedata")
anndata_helpers = pytest.importorskip("anndata.tests.helpers")

SHARED = ["pycea_tdata_treedata-0.4.0.h5td", "edgecases_treedata-0.4.0.h5td"]
TREE_ELEMENTS = ("obst", "vart")
# anndata itself (not h5lens) trips this pandas deprecation while reading/writing string columns
pytestmark = pytest.mark.filterwarnings("ignore:The 'future.infer_string' option is deprecated")


# --- files ---------------------------------------------------------------------------------


def _attribute_tree() -> nx.DiGraph:
    """Every kind of attribute column treedata's zarr writer distinguishes."""
    G = nx.DiGraph()
    G.add_edge("r", "x", length=1.5, w=1, ok=True, tag="e1", meta={"a": [1, 2]})
    G.add_edge("r", "y", length=float("nan"), w=2, ok=False, tag=None)  # explicit None
    G.add_edge("x", "l0", length=0.25, w=3, ok=True, tag="e3", mixed=1)  # 'mixed' absent on r→*
    G.add_edge("x", "l1", length=2.0, w=4, ok=False, tag="e4", mixed=1.5)
    G.nodes["r"].update(depth=0, time=0.0, flag=True, name="root", chars=[0, 1], d={"k": {"n": None}}, maybe=None)
    G.nodes["x"].update(depth=1, time=1.5, flag=False, name="x", chars=[], d={}, mix=1)
    G.nodes["y"].update(depth=1, time=float("inf"), flag=True, name="ünï", chars=[[1], "s"], d={"z": 1.0}, maybe=2)
    G.nodes["l0"].update(depth=2, time=1.75, flag=False, name="", chars=[None], d={"q": "v"}, big=2**70, mix=True)
    G.nodes["l1"].update(depth=2, time=3.5, flag=True, name="l1", chars=[1.5], d={"q": "w"}, huge=-1)
    for node in G:  # dense int column that no numpy dtype holds exactly (treedata would round it)
        G.nodes[node].setdefault("huge", 2**63)
    return G


def _generated() -> treedata.TreeData:
    single = nx.DiGraph()
    single.add_node("y", only=1)
    V = nx.DiGraph()
    V.add_edges_from([("g0", "g1", {"s": 0.5}), ("g0", "g2", {})])
    V.nodes["g2"]["lbl"] = "leaf"
    obs = pd.DataFrame({"grp": pd.Categorical(["a", "b", "a"]), "n": [1, 2, 3]}, index=["l0", "l1", "y"])
    return treedata.TreeData(
        X=np.arange(6, dtype=np.float32).reshape(3, 2),
        obs=obs,
        var=pd.DataFrame(index=["g1", "g2"]),
        obst={"main": _attribute_tree(), "single": single, "empty": nx.DiGraph()},
        vart={"v": V},
        label=None,
        allow_overlap=True,
    )


def _no_trees() -> treedata.TreeData:
    return treedata.TreeData(X=np.ones((2, 2)), obs=pd.DataFrame(index=["a", "b"]), alignment="nodes")


def _write(tdata: treedata.TreeData, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdata.write_h5td(path)
    return path


def _as_anndata_root(path: Path) -> Path:
    """The older (pycea) layout: an AnnData root that also holds TreeData's JSON tree datasets."""
    with h5py.File(path, "r+") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
    return path


def _make(name: str, tmp_path: Path) -> Path:
    target = tmp_path / (name if name.endswith(".h5td") else f"{name}.h5td")
    if name in SHARED:
        shutil.copy(shared_file(name), target)
        target.chmod(0o644)
        return target
    if name == "generated":
        return _write(_generated(), target)
    if name == "no-trees":
        return _write(_no_trees(), target)
    if name == "pycea-anndata-root":
        shutil.copy(shared_file(SHARED[0]), target)
        target.chmod(0o644)
        return _as_anndata_root(target)
    if name == "generated-anndata-root":
        return _as_anndata_root(_write(_generated(), target))
    raise AssertionError(name)


CASES = [*SHARED, "generated", "no-trees", "pycea-anndata-root", "generated-anndata-root"]


# --- comparison ----------------------------------------------------------------------------


def _same_value(a: Any, b: Any) -> bool:
    """Equal and of the same type all the way down (1 ≠ 1.0 ≠ True), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _assert_same_graph(expected: nx.DiGraph, got: nx.DiGraph, where: str) -> None:
    assert type(got) is type(expected), where
    assert list(got.nodes) == list(expected.nodes), where
    assert list(got.edges) == list(expected.edges), where
    for node in expected.nodes:
        assert _same_value(dict(got.nodes[node]), dict(expected.nodes[node])), (where, node)
    for u, v in expected.edges:
        assert _same_value(dict(got.edges[u, v]), dict(expected.edges[u, v])), (where, u, v)
    assert got.graph == expected.graph, where


def _assert_same_tdata(expected: treedata.TreeData, got: treedata.TreeData) -> None:
    anndata_helpers.assert_equal(got.to_adata(), expected.to_adata())
    for attr in ("label", "allow_overlap", "alignment"):
        assert getattr(got, attr) == getattr(expected, attr), attr
        assert type(getattr(got, attr)) is type(getattr(expected, attr)), attr
    for element in TREE_ELEMENTS:
        trees, want = getattr(got, element), getattr(expected, element)
        assert set(trees.keys()) == set(want.keys()), element
        for key in want.keys():
            _assert_same_graph(want[key], trees[key], f"{element}/{key}")


def _read(source: Any, reader) -> treedata.TreeData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reader(source)


# --- tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_read_zarr_matches_read_h5td(name: str, tmp_path: Path) -> None:
    path = _make(name, tmp_path)
    expected = _read(path, treedata.read_h5td)
    manifest = h5lens.index(path)
    group = h5lens.open_group(manifest)
    for element in TREE_ELEMENTS:
        assert isinstance(group[element], zarr.Group), element  # rewritten, not left as JSON
    _assert_same_tdata(expected, _read(group.store, treedata.read_zarr))

    saved = tmp_path / "manifest.json"
    manifest.to_json(saved)
    _assert_same_tdata(expected, _read(h5lens.open_group(saved).store, treedata.read_zarr))
    _assert_same_tdata(expected, _read(saved, h5lens.read_treedata))


@pytest.mark.parametrize("name", CASES)
def test_lazy_read_matches_read_h5td(name: str, tmp_path: Path) -> None:
    """lazy=True: the AnnData part dask-backed (computed here), the trees exactly as read_h5td's."""
    path = _make(name, tmp_path)
    expected = _read(path, treedata.read_h5td)
    lazy = _read(h5lens.index(path), lambda m: h5lens.read_treedata(m, lazy=True))
    assert not isinstance(lazy.X, np.ndarray)  # not read yet
    for element in TREE_ELEMENTS:
        trees, want = getattr(lazy, element), getattr(expected, element)
        assert set(trees.keys()) == set(want.keys()), element
        for key in want.keys():
            _assert_same_graph(want[key], trees[key], f"{element}/{key}")
    computed = lazy.X.compute() if hasattr(lazy.X, "compute") else lazy.X
    want_x = expected.X.toarray() if hasattr(expected.X, "toarray") else expected.X
    got_x = computed.toarray() if hasattr(computed, "toarray") else np.asarray(computed)
    np.testing.assert_array_equal(got_x, want_x)
    assert list(lazy.obs_names) == list(expected.obs_names)


def _layout(group: zarr.Group) -> dict[str, Any]:
    """Everything of a tree element that a reader can see: kinds, dtypes, shapes, attributes, values."""
    found: dict[str, Any] = {"": ("group", dict(group.attrs))}
    for key, node in group.members(max_depth=None):
        attrs = {k: v for k, v in node.attrs.items() if k != "_DTYPE"}
        if isinstance(node, zarr.Group):
            found[key] = ("group", attrs)
        else:
            values = node[...]
            dtype = "string" if values.dtype.kind in "OTU" else values.dtype.str
            found[key] = ("array", dtype, node.shape, attrs, np.asarray(values, dtype=object).tolist())
    return found


def _same_layout(a: Any, b: Any) -> bool:
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same_layout(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return _same_value(a, b)
    return type(a) is type(b) and a == b if not isinstance(a, dict) else a == b


@pytest.mark.parametrize("name", [*SHARED, "generated", "no-trees"])
def test_layout_mirrors_write_zarr(name: str, tmp_path: Path) -> None:
    """The manifest holds what treedata.write_zarr writes for the same object."""
    path = _make(name, tmp_path)
    oracle = tmp_path / "oracle.zarr"
    tdata = _read(path, treedata.read_h5td)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "generated":
            # treedata writes the dense 'huge' ints as a (lossy) float64 column; h5lens keeps JSON
            tdata.obst["main"] = _without(tdata.obst["main"], "huge")
        tdata.write_zarr(oracle)
    written = zarr.open_group(oracle, mode="r")
    ours = h5lens.open_group(h5lens.index(path))
    for element in TREE_ELEMENTS:
        want, got = _layout(written[element]), _layout(ours[element])
        if name == "generated" and element == "obst":
            assert got.pop("main/node_attrs/huge")[1:4] == ("string", (5,), {
                "encoding-type": "string-array", "encoding-version": "0.2.0"})
        assert got.keys() == want.keys(), element
        for key in want:
            assert _same_layout(got[key], want[key]), (element, key, got[key], want[key])
    for scalar in ("label", "allow_overlap", "alignment"):
        assert (scalar in ours) == (scalar in written)
        if scalar not in written:
            continue
        attrs = {k: v for k, v in ours[scalar].attrs.items() if not k.startswith("_")}
        assert attrs == dict(written[scalar].attrs), scalar
        # label=None is anndata's "null" element: the generic scan's empty array, not anndata's
        # shape-() bool; anndata reads either as None by its encoding-type alone.
        if attrs["encoding-type"] != "null":
            assert ours[scalar][()] == written[scalar][()], scalar
    assert dict(ours.attrs) == dict(written.attrs)


def _without(G: nx.DiGraph, attribute: str) -> nx.DiGraph:
    G = G.copy()
    for node in G:
        G.nodes[node].pop(attribute, None)
    return G


def test_keys_zarr_cannot_hold_stay_json(tmp_path: Path) -> None:
    """A tree or attribute key that is not a plain zarr name keeps that element as JSON."""
    odd_tree, odd_attr = nx.DiGraph(), nx.DiGraph()
    odd_tree.add_edge("a", "b")
    odd_attr.add_edge("c", "d", **{"w/x": 1})
    tdata = treedata.TreeData(
        obs=pd.DataFrame(index=["b"]), var=pd.DataFrame(index=["d"]), obst={"t/1": odd_tree}, vart={"v": odd_attr}
    )
    path = _write(tdata, tmp_path / "odd.h5td")
    group = h5lens.open_group(h5lens.index(path))
    assert isinstance(group["obst"], zarr.Array)
    assert isinstance(group["vart"], zarr.Array)
    _assert_same_tdata(_read(path, treedata.read_h5td), _read(group.store, treedata.read_zarr))


def test_plain_anndata_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An AnnData root without JSON trees is not TreeData: the profile does not run."""
    from h5lens.scan import treedata as profile

    path = tmp_path / "plain.h5ad"
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        f["obst"] = np.arange(3)  # an unrelated numeric dataset of the same name
        f["vart"] = "not a tree"  # a string scalar, but not TreeData's JSON either
    decisions: list[bool] = []

    def spy(ctx: Any) -> bool:
        decisions.append(applies(ctx))
        return decisions[-1]

    applies = profile.applies
    monkeypatch.setattr(profile, "applies", spy)
    group = h5lens.open_group(h5lens.index(path))
    assert isinstance(group["obst"], zarr.Array)
    assert group["vart"][()] == "not a tree"
    assert decisions == [False]
