"""netCDF-4 files (any HDF5 whose arrays name their dimensions) along one dimension.

Every array whose first dimension is ``dim`` is concatenated by reference
(:mod:`h5lens.combining.stack`); every other array must be the same in every file (its
document, and its values: coordinates are checked, not assumed) and is kept once, as the
first file has it. The attributes that decide what a stored value means (CF packing and
fill, and the units and calendar of time) must be equal across the files for each
concatenated variable: a file packed with another ``scale_factor`` would otherwise be
read with the first file's, values off by its difference. Where they differ, combining is
refused, naming the variable, the attribute and two files that differ. Groups and the
other attributes are the first file's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from h5lens.combining.inputs import Input, SourceTable
from h5lens.combining.result import Combined
from h5lens.combining.stack import Part, stack, why_not
from h5lens.engine.plan import whole
from h5lens.errors import InvalidOptionError, UnsupportedFeatureError
from h5lens.manifest.documents import ArrayDocument
from h5lens.read.rectilinear import rectilinear_allowed

# Attributes that change what a stored value means (CF conventions, sections 2.5, 4.4, 8.1)
ENCODING_ATTRIBUTES = (
    "scale_factor", "add_offset", "_FillValue", "missing_value", "valid_min", "valid_max", "valid_range", "units",
    "calendar", "_Unsigned", "dtype",
)  # fmt: skip
# Values of arrays that are not concatenated are compared up to this many bytes each
COMPARE_BYTES = 64 << 20


def combine_netcdf(inputs: Sequence[Input], sources: SourceTable, *, dim: str) -> Combined:
    """The files ``inputs`` along dimension ``dim``, their sources added to ``sources``."""
    mappings = [sources.add(item) for item in inputs]
    first = inputs[0].manifest
    combined = Combined()
    along = []
    for path, doc in first.nodes.items():
        if doc.get("node_type") != "array":
            combined.nodes[path] = doc
            continue
        names = doc.get("dimension_names") or []
        if dim in names:
            if names[0] != dim:
                raise UnsupportedFeatureError(
                    f"/{path}: {dim!r} is not its first dimension ({names}); combine concatenates along the first"
                )
            along.append(path)
    if not along:
        raise InvalidOptionError(f"{inputs[0].name}: no array has the dimension {dim!r}")
    for path in along:
        parts = []
        for item, mapping in zip(inputs, mappings, strict=True):
            if path not in item.manifest.nodes:
                raise InvalidOptionError(f"{item.name}: has no /{path}, which {inputs[0].name} has along {dim!r}")
            parts.append(Part(item, path, mapping))
        _check_encoding(path, inputs)
        reason = why_not(parts)
        if reason is not None:
            raise UnsupportedFeatureError(f"/{path}: cannot be concatenated by reference: {reason}")
        stacked = stack(parts)
        combined.nodes[path] = stacked.doc
        combined.chunks[path] = stacked.table
        combined.referenced[path] = stacked
    for path in first.arrays():
        if path in along:
            continue
        _check_same(path, inputs)
        table = first.chunks[path]
        remapped = table.source.copy()
        referenced = remapped >= 0
        remapped[referenced] = mappings[0][remapped[referenced]]
        combined.nodes[path] = first.nodes[path]
        combined.chunks[path] = replace(table, source=remapped)
    for path, doc in first.nodes.items():
        if doc.get("node_type") == "group":
            combined.nodes[path] = doc
    return combined


def _check_encoding(path: str, inputs: Sequence[Input]) -> None:
    """The attributes that say what a stored value means are the same in every file."""
    first = inputs[0]
    mine = _encoding(first, path)
    for item in inputs[1:]:
        theirs = _encoding(item, path)
        for name in ENCODING_ATTRIBUTES:
            if mine.get(name) != theirs.get(name):
                raise InvalidOptionError(
                    f"/{path}: attribute {name!r} differs between {first.name} ({_shown(mine.get(name))}) and "
                    f"{item.name} ({_shown(theirs.get(name))}); their values would be read with one file's "
                    "encoding, wrongly for the other. Combine files encoded alike"
                )


def _encoding(item: Input, path: str) -> dict[str, Any]:
    """The encoding attributes of an array, with their recorded types (a float32
    ``scale_factor`` is not a float64 one)."""
    doc = item.manifest.nodes[path]
    attributes = doc.get("attributes", {})
    types = item.manifest.attribute_types.get(path, {})
    found = {name: (json.dumps(attributes[name], allow_nan=True, sort_keys=True), types.get(name)) for name in ENCODING_ATTRIBUTES if name in attributes}
    found["fill_value"] = (json.dumps(doc.get("fill_value"), allow_nan=True), None)
    return found


def _shown(value: Any) -> str:
    if value is None:
        return "absent"
    text, kind = value
    return text if kind is None else f"{text} as {kind}"


def _check_same(path: str, inputs: Sequence[Input]) -> None:
    """An array that is not concatenated is the same in every file: its document (but its
    attributes) and its values."""
    first = inputs[0]
    doc = first.manifest.nodes[path]
    view = ArrayDocument.of(doc)
    assert view is not None
    body = {k: v for k, v in doc.items() if k != "attributes"}
    values = None
    for item in inputs[1:]:
        other = item.manifest.nodes.get(path)
        if other is None:
            raise InvalidOptionError(f"{item.name}: has no /{path}, which {first.name} has")
        if {k: v for k, v in other.items() if k != "attributes"} != body:
            raise InvalidOptionError(f"/{path}: its shape, type or chunks differ between {first.name} and {item.name}")
        if other.get("attributes", {}) != doc.get("attributes", {}):
            for name in ENCODING_ATTRIBUTES:
                if other.get("attributes", {}).get(name) != doc.get("attributes", {}).get(name):
                    raise InvalidOptionError(
                        f"/{path}: attribute {name!r} differs between {first.name} and {item.name}"
                    )
        nbytes = int(np.prod(view.shape, dtype=np.int64)) * 8
        if nbytes > COMPARE_BYTES:
            continue  # too big to read for a check: its document agreed
        if item.manifest.chunks.get(path) == first.manifest.chunks.get(path) and item.manifest.sources == first.manifest.sources:
            continue  # the very same bytes
        if values is None:
            values = _values(first, path, view)
        theirs = _values(item, path, view)
        if not np.array_equal(values, theirs, equal_nan=values.dtype.kind in "fc"):
            raise InvalidOptionError(
                f"/{path}: its values differ between {first.name} and {item.name}, and it does not lie along the "
                "combined dimension"
            )


def _values(item: Input, path: str, view: ArrayDocument) -> np.ndarray:
    try:
        found = item.store.read_region(path, whole(view.shape)) if view.shape else None
        if found is not None:
            return np.asarray(found)
        import zarr

        with rectilinear_allowed([item.manifest.nodes[path]]):
            return np.asarray(zarr.open_array(item.store, path=path, mode="r", zarr_format=3)[...])
    finally:
        item.close()  # one file open at a time


__all__ = ["ENCODING_ATTRIBUTES", "combine_netcdf"]
