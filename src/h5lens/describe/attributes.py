"""Attribute values as h5py reads them, from the manifest alone (``h5lens ls``, ``cat
NODE/ATTRIBUTE``, the netCDF header), and whether an array's values are packed.

The manifest holds every attribute (nothing is read from the sources): its JSON value,
with the numpy type JSON loses (``Manifest.attribute_types``: a float32 ``scale_factor``
stays float32), non-UTF-8 bytes in the ``_BYTES`` form, references in the convention's
``_REFERENCE`` form, and a netCDF float ``_FillValue`` in the form xarray's zarr reader
decodes (the base64 of a little-endian double). :func:`attribute_values` undoes each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.format import convention
from h5lens.manifest.model import Manifest
from h5lens.read.attribute_types import netcdf_fill_value, typed

# CF's packing attributes (xarray's CFScaleOffsetCoder and CFMaskCoder read them)
PACKING = ("scale_factor", "add_offset")
MISSING = ("_FillValue", "missing_value")


@dataclass(frozen=True)
class Reference:
    """An object or region reference held by an attribute: the path it names."""

    path: str
    source: str = "."
    region: bool = False

    def __str__(self) -> str:
        where = self.path if self.source == "." else f"{self.source}:{self.path}"
        return f"<{'region' if self.region else 'object'} reference to {where}>"

    __repr__ = __str__


def _decode(value: Any, proposal: bool) -> Any:
    """The convention's forms (bytes, references, non-finite text) as the values they stand for."""
    if convention.is_bytes_value(value):
        try:
            return convention.decode_bytes_value(value)
        except ValueError:
            return value  # malformed: shown as stored (validate reports it)
    if isinstance(value, dict):
        ref = value.get(convention.REFERENCE)
        if len(value) == 1 and isinstance(ref, dict) and isinstance(ref.get("path"), str):
            return Reference(ref["path"], str(ref.get("source", ".")))
        region = value.get(convention.REGION_REFERENCE)
        if len(value) == 1 and isinstance(region, dict) and isinstance(region.get("path"), str):
            return Reference(region["path"], str(region.get("source", ".")), region=True)
        return {k: _decode(v, proposal) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, proposal) for v in value]
    if proposal and isinstance(value, str) and value in convention.NON_FINITE_TEXT:
        return convention.NON_FINITE_TEXT[value]
    return value


def _as_h5py(value: Any) -> Any:
    """A value with no recorded type as h5py gives it: int64 / float64 numbers, and arrays
    for lists (text in an object array)."""
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value) if -(2**63) <= value < 2**63 else value
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, list) and value:
        flat = list(_leaves(value))
        if all(isinstance(v, str) for v in flat) or all(isinstance(v, bytes) for v in flat):
            try:
                out = np.empty(np.shape(value), dtype=object)
                out[...] = value
                return out
            except ValueError:
                return value
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in flat):
            try:
                return np.array(value, dtype=np.float64 if any(isinstance(v, float) for v in flat) else np.int64)
            except (OverflowError, ValueError):
                return value
    return value


def _leaves(value: list[Any]) -> Any:
    for item in value:
        if isinstance(item, list):
            yield from _leaves(item)
        else:
            yield item


def attribute_values(manifest: Manifest, path: str, *, hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The attributes of the node at ``path`` as h5py reads them (numpy types, object
    arrays of text, bytes, :class:`Reference` for references), without the convention's
    reserved ones and ``hidden``, in the manifest's order."""
    doc = manifest.nodes[path]
    raw = doc.get("attributes") or {}
    types = manifest.attribute_types.get(path, {})
    proposal = manifest.convention == "proposal"
    array_type = doc.get("data_type") if doc.get("node_type") == "array" else None
    values: dict[str, Any] = {}
    for name, stored in raw.items():
        if name in convention.RESERVED_ATTRIBUTES or name in hidden:
            continue
        value = _decode(stored, proposal)
        if name == "_FillValue":
            value = netcdf_fill_value(value, array_type)
        if isinstance(value, np.generic):
            values[name] = value
        elif name in types:
            values[name] = typed(value, types[name])
        else:
            values[name] = _as_h5py(value)
    return values


def find_attribute(manifest: Manifest, key: str) -> tuple[str, str] | None:
    """``(node, attribute name)`` for a path ``node/name`` that names an attribute (the
    root's: ``name``), trying the longest node first (an attribute name may hold ``/``);
    None if no node along the path has that attribute. Nodes come first: callers look
    ``key`` up as a node before asking here."""
    parts = key.split("/")
    for cut in range(len(parts) - 1, -1, -1):
        node, name = "/".join(parts[:cut]), "/".join(parts[cut:])
        doc = manifest.nodes.get(node)
        if doc is None:
            continue
        if name in (doc.get("attributes") or {}) and name not in convention.RESERVED_ATTRIBUTES:
            return node, name
        if manifest.unreadable_at(node, name) is not None:
            return node, name
    return None


# -- as text --------------------------------------------------------------------------------


def text(value: Any) -> str:
    """What ``h5lens cat NODE/ATTRIBUTE`` prints: text as it is, anything else as h5py's
    value prints (numpy's printoptions apply)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def one_line(value: Any, *, limit: int = 200) -> str:
    """An attribute value on one line (``h5lens ls``): text quoted, numbers with their type,
    arrays summarised beyond 20 values, anything longer than ``limit`` characters cut."""
    if isinstance(value, str):
        shown = json.dumps(value, ensure_ascii=False)
        return _cut(shown, limit, f"{len(value)} characters")
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            items = [json.dumps(v, ensure_ascii=False) if isinstance(v, str) else repr(v) for v in value.ravel()]
            shown = "[" + ", ".join(items[:20]) + (", ..." if len(items) > 20 else "") + "]"
            return _cut(shown, limit, f"{value.size} values")
        if value.ndim == 1 and value.dtype.names is None:  # each value in its own shortest form: [0.5, 2.0]
            items = [str(v) for v in (value if value.size <= 20 else [*value[:3], "...", *value[-3:]])]
            shown = "[" + ", ".join(items) + "]"
        else:
            with np.printoptions(threshold=20, edgeitems=3):
                shown = " ".join(np.array2string(value, separator=", ").split())
        kind = f" ({value.dtype})" if value.dtype.names is None else ""
        return _cut(shown, limit, f"{value.size} values") + kind
    if isinstance(value, np.generic) and not isinstance(value, np.void):
        return f"{value!s} ({value.dtype})" if not isinstance(value, np.bool_) else str(value)
    if isinstance(value, dict):
        return _cut(json.dumps(value, ensure_ascii=False, default=str), limit, "characters")
    return _cut(str(value) if isinstance(value, Reference) else repr(value), limit, "characters")


def _cut(shown: str, limit: int, size: str) -> str:
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}… ({size}; h5lens cat prints it whole)"


def packing_note(manifest: Manifest, path: str, manifest_name: str) -> str | None:
    """One line for ``h5lens cat`` of an array whose values are stored packed
    (``scale_factor`` / ``add_offset``) or with missing values marked (``_FillValue``,
    ``missing_value``): the values printed are the stored ones; how to get them unpacked."""
    values = attribute_values(manifest, path)
    packed = [name for name in PACKING if name in values]
    marked = [name for name in MISSING if name in values]
    if not packed and not marked:
        return None
    doc = manifest.nodes[path]
    where = "/" + path
    dtype = doc.get("data_type")
    said = ", ".join(f"{name} {text(values[name])}" for name in [*packed, *marked])
    if packed:
        scale = "value * scale_factor" if "scale_factor" in values else "value"
        offset = " + add_offset" if "add_offset" in values else ""
        what = f"packed {dtype} values as stored ({said}); unpacked: {scale}{offset}"
        if marked:
            what += f", where {' / '.join(marked)} marks missing values"
    else:
        what = f"raw values as stored ({said}): missing values are not masked"
    if doc.get("dimension_names"):  # xarray opens it by dimension names: CF-decoded there
        how = "unpacked" if packed else "masked"
        opened = f"xr.open_dataset({json.dumps(manifest_name)}, engine=\"h5lens\")"
        return f"{where}: {what}; {opened} gives them {how}"
    return f"{where}: {what}"


__all__ = ["Reference", "attribute_values", "find_attribute", "one_line", "packing_note", "text"]
