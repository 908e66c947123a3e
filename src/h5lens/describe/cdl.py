"""``h5lens ls`` of a netCDF-4 manifest: the header ``ncdump -h`` prints (CDL), from the
manifest alone.

What the manifest says, as the netCDF profile wrote it (:mod:`h5lens.scan.netcdf`): each
array's ``dimension_names`` and shape, each group's ``_nc_storage`` attribute with the
group's own unlimited dimensions, the attributes and their numpy types. A fixed-size
dimension is not recorded where it is defined, only where variables use it: it is shown in
the outermost group that uses it among those that can see it (where netCDF-C defined it,
unless only a subgroup's variables use a dimension of its parent); a dimension no variable
uses is not in the manifest. Group attributes starting with ``_nc`` (h5lens's and netCDF-C's
bookkeeping) and ``_NCProperties`` are hidden, as xarray and ``ncdump -h`` hide them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5lens.describe.attributes import Reference, attribute_values
from h5lens.format.keys import unescape_key
from h5lens.manifest.model import Manifest

STORAGE = "_nc_storage"  # the netCDF profile's record (h5lens.scan.netcdf.STORAGE)
_MARKERS = (STORAGE, "_NCProperties")

# numpy type -> netCDF's type name and the suffix ncdump gives an attribute value of it
_TYPES = {
    "int8": ("byte", "b"),
    "uint8": ("ubyte", "UB"),
    "int16": ("short", "s"),
    "uint16": ("ushort", "US"),
    "int32": ("int", ""),
    "uint32": ("uint", "U"),
    "int64": ("int64", "LL"),
    "uint64": ("uint64", "ULL"),
    "float32": ("float", "f"),
    "float64": ("double", ""),
}


def is_netcdf(manifest: Manifest) -> bool:
    """Whether the netCDF profile wrote the manifest (a netCDF library wrote the file)."""
    root = manifest.nodes.get("", {}).get("attributes") or {}
    return any(marker in root for marker in _MARKERS)


def _hidden_on_group(name: str) -> bool:
    return name.startswith("_nc") or name == "_NCProperties"


@dataclass
class _Dimensions:
    """Where each dimension is defined, and its size (the current one of an unlimited one)."""

    own: dict[str, dict[str, int]] = field(default_factory=dict)  # group -> name -> size
    unlimited: dict[str, set[str]] = field(default_factory=dict)  # group -> its unlimited names

    def visible(self, group: str, name: str) -> str | None:
        """The group whose dimension ``name`` a variable of ``group`` uses (innermost first)."""
        while True:
            if name in self.own.get(group, {}):
                return group
            if not group:
                return None
            group = group.rpartition("/")[0]


def _dimensions(manifest: Manifest) -> _Dimensions:
    dims = _Dimensions()
    groups = sorted(manifest.groups(), key=lambda g: (g.count("/") + bool(g), g))  # outermost first
    for group in groups:
        storage = (manifest.nodes[group].get("attributes") or {}).get(STORAGE)
        names = storage.get("unlimited", []) if isinstance(storage, dict) else []
        dims.unlimited[group] = {n for n in names if isinstance(n, str)}
        dims.own[group] = dict.fromkeys(dims.unlimited[group], 0)
    for group in groups:
        for name in manifest.children(group):
            key = f"{group}/{name}" if group else name
            doc = manifest.nodes[key]
            if doc.get("node_type") != "array":
                continue
            for dim, size in zip(doc.get("dimension_names") or (), doc.get("shape", ()), strict=False):
                if not isinstance(dim, str):
                    continue
                where = dims.visible(group, dim)
                if where is not None and dim in dims.unlimited[where]:
                    dims.own[where][dim] = max(dims.own[where][dim], int(size))
                elif where is None or dims.own[where][dim] != size:  # new, or a different one of that name
                    dims.own[group][dim] = int(size)
    return dims


def _type_name(manifest: Manifest, key: str, doc: dict[str, Any]) -> str:
    kind = doc.get("data_type")
    if isinstance(kind, str) and kind in _TYPES:
        parent, _, name = key.rpartition("/")
        storage = (manifest.nodes[parent].get("attributes") or {}).get(STORAGE)
        variable = (storage or {}).get("variables", {}).get(name, {}) if isinstance(storage, dict) else {}
        enum = variable.get("enum") if isinstance(variable, dict) else None
        return str(enum) if isinstance(enum, str) else _TYPES[kind][0]
    if kind == "string":
        return "string"
    if isinstance(kind, dict):
        config = kind.get("configuration") or {}
        if kind.get("name") in ("null_terminated_bytes", "fixed_length_utf32") and config.get("length_bytes") == 1:
            return "char"
        if kind.get("name") == "structured":
            fields = config.get("fields") or []
            members = "; ".join(f"{_TYPES.get(str(t), (str(t),))[0]} {n}" for n, t in fields if isinstance(n, str))
            return f"compound {{{members}}}"
        return str(kind.get("name", kind))
    return str(kind)


def _cdl_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _cdl_number(value: Any, suffix: str) -> str:
    number = value.item() if isinstance(value, np.generic) else value
    if isinstance(number, float):
        if math.isnan(number):
            return "NaN" + suffix
        if math.isinf(number):
            return ("Infinity" if number > 0 else "-Infinity") + suffix
    return f"{value!s}{suffix}"  # str: numpy's shortest form of the value's own type (0.01f)


def cdl_value(value: Any) -> str:
    """An attribute value as ncdump writes it: ``"text"``, ``0.01f``, ``-999s``, ``1, 2, 4``."""
    if isinstance(value, str):
        return _cdl_text(value)
    if isinstance(value, Reference):
        return _cdl_text(str(value))
    if isinstance(value, np.ndarray) and value.dtype == object:
        return ", ".join(_cdl_text(v) if isinstance(v, str) else repr(v) for v in value.ravel())
    if isinstance(value, np.ndarray | np.generic) and value.dtype.names is None:
        suffix = _TYPES.get(str(value.dtype), ("", ""))[1]
        return ", ".join(_cdl_number(v, suffix) for v in np.ravel(value))
    if isinstance(value, bytes):
        return _cdl_text(value.decode("latin-1"))
    return _cdl_text(json.dumps(value, default=str) if isinstance(value, dict | list) else str(value))


def _attribute_lines(owner: str, values: dict[str, Any], indent: str) -> list[str]:
    lines = []
    for name, value in values.items():
        strings = isinstance(value, np.ndarray) and value.dtype == object and value.size > 1
        lines.append(f"{indent}{'string ' if strings else ''}{owner}:{name} = {cdl_value(value)} ;")
    return lines


def _group_lines(manifest: Manifest, group: str, dims: _Dimensions, depth: int) -> list[str]:
    pad = "  " * depth
    lines: list[str] = []
    own = dims.own.get(group, {})
    if own:
        lines.append(f"{pad}dimensions:")
        for name, size in own.items():
            if name in dims.unlimited.get(group, ()):
                lines.append(f"{pad}\t{name} = UNLIMITED ; // ({size} currently)")
            else:
                lines.append(f"{pad}\t{name} = {size} ;")
    arrays: list[tuple[str, str]] = []
    groups: list[tuple[str, str]] = []
    for name in manifest.children(group):
        key = f"{group}/{name}" if group else name
        (groups if manifest.nodes[key].get("node_type") == "group" else arrays).append((name, key))
    left_out = manifest.unreadable_children(group)
    if arrays or left_out:
        lines.append(f"{pad}variables:")
    for name, key in arrays:
        doc = manifest.nodes[key]
        shown = unescape_key(name)
        names = [n if isinstance(n, str) else "?" for n in doc.get("dimension_names") or ()]
        axes = f"({', '.join(names)})" if names else ""
        lines.append(f"{pad}\t{_type_name(manifest, key, doc)} {shown}{axes} ;")
        lines += _attribute_lines(shown, attribute_values(manifest, key), f"{pad}\t\t")
    for entry in left_out:
        lines.append(f"{pad}\t// {entry.path.rsplit('/', 1)[-1]}: left out as unreadable: {entry.line}")
    hidden = frozenset(name for name in _names(manifest, group) if _hidden_on_group(name))
    values = attribute_values(manifest, group, hidden=hidden)
    if values:
        lines.append("")
        lines.append(f"{pad}// {'global' if not group else 'group'} attributes:")
        lines += _attribute_lines("", values, f"{pad}\t\t")
    for entry in manifest.unreadable:
        if entry.path == group and entry.attribute is not None:
            lines.append(f"{pad}\t\t// :{entry.attribute}: left out as unreadable: {entry.line}")
    for name, key in groups:
        lines.append("")
        lines.append(f"{pad}group: {unescape_key(name)} {{")
        lines += _group_lines(manifest, key, dims, depth + 1)
        lines.append(f"{pad}  }} // group {unescape_key(name)}")
    return lines


def _names(manifest: Manifest, path: str) -> list[str]:
    return list(manifest.nodes[path].get("attributes") or {})


def header(manifest: Manifest, group: str, title: str) -> list[str]:
    """``ncdump -h``'s header of ``group`` and the groups below it: ``netcdf TITLE {`` for
    the root, ``group: NAME {`` for another group."""
    dims = _dimensions(manifest)
    if not group:
        return [f"netcdf {title} {{", *_group_lines(manifest, group, dims, 0), "}"]
    name = unescape_key(group.rsplit("/", 1)[-1])
    return [f"group: {name} {{", *_group_lines(manifest, group, dims, 1), f"  }} // group {name}"]


__all__ = ["cdl_value", "header", "is_netcdf"]
