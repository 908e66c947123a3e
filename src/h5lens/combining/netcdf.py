"""netCDF-4 files (any HDF5 whose arrays name their dimensions) along one dimension.

Every array whose first dimension is ``dim`` is concatenated by reference
(:mod:`h5lens.combining.stack`); every other array must be the same in every file (its
document, and its values: coordinates are checked, not assumed) and is kept once, as the
first file has it. The attributes that decide what a stored value means (CF packing and
fill, and the units and calendar of time) must be equal across the files for each
concatenated variable: a file packed with another ``scale_factor`` would otherwise be
read with the first file's, values off by its difference. Where they differ, combining is
refused, naming the variable, the attribute and two files that differ, or under
``encoding="per-file"`` each file's own is recorded for h5lens's reader to apply
(:mod:`h5lens.combining.encoding`). Groups and the other attributes are the first file's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from h5lens.combining.encoding import (
    ENCODING_ATTRIBUTES,
    check_fills_stored,
    differing,
    files_of,
    record,
    with_record,
    without_records,
)
from h5lens.combining.inputs import Input, SourceTable, each_file
from h5lens.combining.result import Combined
from h5lens.combining.stack import Part, stack, why_not
from h5lens.errors import InvalidOptionError, UnsupportedFeatureError
from h5lens.manifest.documents import ArrayDocument

# Values of arrays that are not concatenated are compared up to this many bytes each
COMPARE_BYTES = 64 << 20
# ... read several files at once (each_file) up to this many bytes each (coordinates)
READ_AT_ONCE_BYTES = 1 << 20


def combine_netcdf(inputs: Sequence[Input], sources: SourceTable, *, dim: str, encoding: str = "equal") -> Combined:
    """The files ``inputs`` along dimension ``dim``, their sources added to ``sources``;
    ``encoding`` (:data:`h5lens.combining.encoding.MODES`): their encoding attributes equal,
    or each file's recorded where they differ."""
    inputs, records = without_records(inputs)  # a combined manifest appended to: its files' stored values
    try:
        return _combine(inputs, records, sources, dim=dim, encoding=encoding)
    finally:
        for item in inputs:
            item.close()


def _combine(
    inputs: Sequence[Input], records: Sequence[dict[str, Any]], sources: SourceTable, *, dim: str, encoding: str
) -> Combined:
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
        files = [
            file
            for item, found, mapping in zip(inputs, records, mappings, strict=True)
            for file in files_of(item, path, found.get(path), mapping)
        ]
        differ = differing(path, files, encoding)
        per_file = encoding == "per-file"
        reason = why_not(parts, same_fill=not per_file)
        if reason is not None:
            raise UnsupportedFeatureError(f"/{path}: cannot be concatenated by reference: {reason}")
        if per_file:
            check_fills_stored(path, inputs)
        stacked = stack(parts)
        if differ:
            stacked = replace(stacked, doc=with_record(stacked.doc, record(path, differ, files)))
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


def _check_same(path: str, inputs: Sequence[Input]) -> None:
    """An array that is not concatenated is the same in every file: its document (but its
    attributes) and its values."""
    first = inputs[0]
    doc = first.manifest.nodes[path]
    view = ArrayDocument.of(doc)
    assert view is not None
    body = {k: v for k, v in doc.items() if k != "attributes"}
    nbytes = int(np.prod(view.shape, dtype=np.int64)) * 8
    to_read = []
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
        if nbytes > COMPARE_BYTES:
            continue  # too big to read for a check: its document agreed
        table = item.manifest.chunks.get(path)
        inline_only = table is not None and not bool(np.any(table.source >= 0))  # no file read: sources do not matter
        same_sources = inline_only or item.manifest.sources == first.manifest.sources
        if same_sources and table == first.manifest.chunks.get(path):
            continue  # the very same bytes
        to_read.append(item)
    if not to_read:
        return
    values = each_file([first], lambda item: item.values(path))[0]
    # coordinates (small) read on threads; anything bigger one file after another, not all held at once
    theirs_of = (
        each_file(to_read, lambda item: item.values(path))
        if nbytes <= READ_AT_ONCE_BYTES
        else (each_file([item], lambda item: item.values(path))[0] for item in to_read)
    )
    for item, theirs in zip(to_read, theirs_of, strict=True):
        if not np.array_equal(values, theirs, equal_nan=values.dtype.kind in "fc"):
            raise InvalidOptionError(
                f"/{path}: its values differ between {first.name} and {item.name}, and it does not lie along the "
                "combined dimension"
            )


__all__ = ["combine_netcdf"]
