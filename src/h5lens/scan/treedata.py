"""TreeData profile: the JSON trees of an ``.h5td`` → the columnar trees of a TreeData zarr store.

In HDF5, TreeData (treedata ≥ 0.1) stores each of ``obst``/``vart`` as ONE JSON string
scalar mapping tree key → ``{"nodes": {id: attrs}, "edges": {src: {dst: attrs}}}``. Its
zarr writer (treedata ≥ 0.3) stores a group per tree instead::

    obst/<tree>/nodes              string-array (n,)      node ids, in graph order
    obst/<tree>/edges              string-array (m, 2)    (source, target), in graph order
    obst/<tree>/node_attrs/<key>   dict of columns, one entry per node (only if any node has attrs)
    obst/<tree>/edge_attrs/<key>   dict of columns, one entry per edge (only if any edge has attrs)

This profile rewrites the former into exactly what ``treedata.write_zarr`` produces for the
same object, so ``treedata.read_zarr`` on the manifest gives what ``read_h5td`` gives on the
file. Everything else (``label``, ``allow_overlap``, ``alignment``, the root attributes, the
AnnData elements) is encoded identically in both backends and is left to the generic scan.

Where the columnar form cannot say the same thing (a tree or attribute key that is not a
plain zarr node name, a document ``read_h5td`` itself would reject), the element is left
as the JSON string scalar: treedata's zarr reader still accepts that older layout.
"""

from __future__ import annotations

import json
from typing import Any

import h5py
import numpy as np

from h5lens.format.keys import needs_escaping
from h5lens.scan.profiles import ProfileContext

__all__ = ["applies", "apply"]

TREE_ELEMENTS = ("obst", "vart")
# What anndata's write_elem (used by treedata's zarr writer) puts on each kind of element.
_STRING_ARRAY = {"encoding-type": "string-array", "encoding-version": "0.2.0"}
_NATIVE_ARRAY = {"encoding-type": "array", "encoding-version": "0.2.0"}
_DICT = {"encoding-type": "dict", "encoding-version": "0.1.0"}
# treedata's marker for "this node/edge has no such attribute" (distinct from JSON null).
_ABSENT = ""
_MISSING = object()
# A native column is written only when every value has this Python type; the numpy kinds
# say which arrays read back as that same type (treedata would also accept a lossy one).
_NATIVE_KINDS = {bool: "b", int: "iu", float: "f"}

Graph = tuple[dict[str, dict[str, Any]], list[tuple[str, str, dict[str, Any]]]]
Put = tuple[str, np.ndarray | None, dict[str, Any]]  # (key, values or None for a group, attributes)


def applies(ctx: ProfileContext) -> bool:
    """A TreeData root, or an AnnData root carrying TreeData's JSON trees (older pycea files)."""
    encoding = ctx.attributes("").get("encoding-type")
    if encoding == "treedata":
        return True
    if encoding != "anndata":
        return False
    # Only the JSON object TreeData writes, not just any string scalar that happens to be named so.
    datasets = (_json_dataset(ctx, key) for key in TREE_ELEMENTS)
    return any(ds is not None and ds.asstr()[()].lstrip().startswith("{") for ds in datasets)


def apply(ctx: ProfileContext) -> None:
    for key in TREE_ELEMENTS:
        dataset = _json_dataset(ctx, key)
        if dataset is None:
            continue  # absent, or already a group (nothing to rewrite)
        puts = _plan(key, dataset.asstr()[()])
        if puts is None:
            continue  # keep the JSON scalar: treedata.read_zarr parses it just like read_h5td
        ctx.remove(key)
        for path, values, attributes in puts:
            if values is None:
                ctx.put_group(path, attributes)
            else:
                ctx.put_array(path, values, attributes)


def _json_dataset(ctx: ProfileContext, key: str) -> h5py.Dataset | None:
    """The HDF5 dataset behind ``key`` if it is a string scalar (TreeData's JSON trees)."""
    if not ctx.is_array(key):
        return None
    dataset = ctx.h5.get(key)
    if not isinstance(dataset, h5py.Dataset) or dataset.shape != ():
        return None
    return dataset if h5py.check_string_dtype(dataset.dtype) is not None else None


def _plan(key: str, text: str) -> list[Put] | None:
    """Every group/array for one element, or None if the columnar layout cannot hold it.

    Planned completely before anything is put, so an element is rewritten whole or not at all.
    """
    try:
        trees = json.loads(text)
    except ValueError:
        return None
    if not isinstance(trees, dict):
        return None
    puts: list[Put] = [(key, None, {})]  # treedata leaves obst/vart and tree groups without attributes
    for name, tree in trees.items():
        graph = _graph(tree)
        if graph is None or not _plain_name(name):
            return None
        nodes, edges = graph
        base = f"{key}/{name}"
        puts.append((base, None, {}))
        puts.append((f"{base}/nodes", np.array(list(nodes), dtype=object), _STRING_ARRAY))
        pairs = np.array([(u, v) for u, v, _ in edges], dtype=object).reshape(len(edges), 2)
        puts.append((f"{base}/edges", pairs, _STRING_ARRAY))
        for group, records in (("node_attrs", list(nodes.values())), ("edge_attrs", [a for *_, a in edges])):
            # A set in treedata; the order of the columns carries no meaning.
            names = sorted({k for attrs in records for k in attrs})
            if not all(_plain_name(n) for n in names):
                return None
            if names:
                puts.append((f"{base}/{group}", None, _DICT))
            for column in names:
                values, attributes = _encode_column([attrs.get(column, _MISSING) for attrs in records])
                puts.append((f"{base}/{group}/{column}", values, attributes))
    return puts


def _graph(tree: Any) -> Graph | None:
    """Nodes and edges in the order networkx gives them after treedata's ``_dict_to_digraph``.

    That function adds every entry of ``nodes``, then every edge (creating endpoints it has
    not seen); a DiGraph lists nodes in insertion order and edges by source, then target,
    in insertion order. The zarr writer stores the columns in exactly that order.
    """
    if not isinstance(tree, dict) or not isinstance(tree.get("nodes"), dict) or not isinstance(tree.get("edges"), dict):
        return None  # read_h5td would fail on it too; keep the original
    nodes: dict[str, dict[str, Any]] = {}
    succ: dict[str, dict[str, dict[str, Any]]] = {}
    for node, attrs in tree["nodes"].items():
        if not isinstance(attrs, dict):
            return None
        nodes.setdefault(node, {}).update(attrs)
        succ.setdefault(node, {})
    for source, targets in tree["edges"].items():
        if not isinstance(targets, dict):
            return None
        for target, attrs in targets.items():
            if not isinstance(attrs, dict):
                return None
            for end in (source, target):
                nodes.setdefault(end, {})
                succ.setdefault(end, {})
            succ[source].setdefault(target, {}).update(attrs)
    edges = [(u, v, attrs) for u, targets in succ.items() for v, attrs in targets.items()]
    return nodes, edges


def _encode_column(values: list[Any]) -> tuple[np.ndarray, dict[str, Any]]:
    """treedata's ``_encode_attr_column``: native when dense and of one bool/int/float type, else JSON.

    JSON values are already what treedata's ``_make_serializable`` would give, so they are
    dumped with the same (default) ``json.dumps`` settings. A native column whose values do not
    fit one numpy dtype exactly (ints beyond int64/uint64, negative and > 2**63 together)
    falls back to JSON instead of failing or being rounded to float as treedata's writer would.
    """
    kinds = {type(v) for v in values}
    if len(kinds) == 1 and (kind := next(iter(kinds))) in _NATIVE_KINDS:
        native = np.array(values)
        if native.dtype.kind in _NATIVE_KINDS[kind]:
            return native, _NATIVE_ARRAY
    encoded = [_ABSENT if v is _MISSING else json.dumps(v) for v in values]
    return np.array(encoded, dtype=object), _STRING_ARRAY


def _plain_name(name: str) -> bool:
    """Whether ``name`` can be a zarr child name as it is.

    treedata uses tree and attribute keys verbatim as node names and reads them back
    verbatim; a key the scan would escape (``/``, ``%``, reserved names …) would come back
    changed, so such an element stays JSON.
    """
    return not needs_escaping(name)
