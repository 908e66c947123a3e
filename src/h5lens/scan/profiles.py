"""Profiles: rewrites of the manifest where the file declares a known layout (h5ad, h5td).

A profile runs after the generic scan. It sees the h5py file and the manifest
being built, and replaces what a format's zarr readers expect in another form
(TreeData's JSON trees → columnar groups, legacy h5ad encodings → modern ones).
Profiles never call zarr from inside h5py callbacks: they read first, then put.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.manifest.model import ChunkTable, NodeMap, children_index
from h5lens.scan.arrays import inline_array, values_plan
from h5lens.scan.options import ScanOptions
from h5lens.scan.walk import DatasetRecord, GroupRecord, Walk


@dataclass
class ProfileContext:
    """What a profile may read and change."""

    h5: h5py.File
    nodes: NodeMap
    tables: dict[str, ChunkTable]
    options: ScanOptions
    walk: Walk
    walk_names: dict[str, str] = field(default_factory=dict)  # zarr key -> HDF5 name
    h5_paths: dict[str, str] = field(default_factory=dict)  # zarr key -> HDF5 path (as scanned)
    refused: dict[str, UnsupportedFeatureError] = field(default_factory=dict)  # datasets with no zarr form (yet)

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, NodeMap):
            raise TypeError("ProfileContext.nodes must be a NodeMap (children are indexed by its version)")
        self._children: tuple[int, dict[str, list[str]]] | None = None
        records: list[GroupRecord | DatasetRecord] = [*self.walk.groups, *self.walk.datasets]
        for record in records:
            self.walk_names.setdefault(record.key, posixpath.basename(record.h5_path))
            self.h5_paths.setdefault(record.key, record.h5_path)

    def h5_path(self, key: str) -> str:
        """The HDF5 path a zarr key was scanned from."""
        return self.h5_paths.get(key, "/" + key)

    def attributes(self, key: str) -> dict[str, Any]:
        return self.nodes[key].setdefault("attributes", {})

    def is_group(self, key: str) -> bool:
        return self.nodes.get(key, {}).get("node_type") == "group"

    def is_array(self, key: str) -> bool:
        return self.nodes.get(key, {}).get("node_type") == "array"

    def children(self, key: str) -> list[str]:
        """Sorted names of ``key``'s children (an index rebuilt only after nodes come or go)."""
        if self._children is None or self._children[0] != self.nodes.version:
            self._children = (self.nodes.version, children_index(self.nodes))
        return list(self._children[1].get(key, ()))

    def is_refused(self, key: str) -> bool:
        """A dataset the generic scan could not represent; a profile may replace it."""
        return key in self.refused

    def put_group(self, key: str, attributes: dict[str, Any]) -> None:
        self.refused.pop(key, None)
        self.nodes[key] = {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes)}

    def put_array(
        self, key: str, values: np.ndarray, attributes: dict[str, Any], *, fill: Any = None
    ) -> None:
        """Add (or replace) an array whose values are stored inline."""
        values = np.asarray(values) if not isinstance(values, np.ndarray) else values
        if values.dtype.kind in "OU":
            values = values.astype(np.dtypes.StringDType())
        plan = values_plan(values, key)
        doc, table = inline_array("/" + key, plan, values, attributes, fill, self.options)
        self.refused.pop(key, None)
        self.nodes[key] = doc
        self.tables[key] = table

    def rename(self, old: str, new: str) -> None:
        """Move a node and its subtree to another key: documents, chunk tables, the HDF5
        names and paths it was scanned from, and refusals still pending on it."""
        if old == new:
            return
        prefix = old + "/"
        for k in [k for k in self.nodes if k == old or k.startswith(prefix)]:
            self.nodes[new + k[len(old) :]] = self.nodes.pop(k)
        mappings: tuple[dict[str, Any], ...] = (self.tables, self.walk_names, self.h5_paths, self.refused)
        for mapping in mappings:
            for k in [k for k in mapping if k == old or k.startswith(prefix)]:
                mapping[new + k[len(old) :]] = mapping.pop(k)

    def remove(self, key: str) -> None:
        """Remove a node and everything below it."""
        prefix = key + "/"
        for k in [k for k in self.nodes if k == key or k.startswith(prefix)]:
            del self.nodes[k]
            self.tables.pop(k, None)
            self.walk_names.pop(k, None)
        for k in [k for k in self.refused if k == key or k.startswith(prefix)]:
            del self.refused[k]
