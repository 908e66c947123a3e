"""The netCDF-4 profile: present a netCDF-4 file the way xarray's zarr reader sees what its
``h5netcdf`` engine sees in the file.

Only files a netCDF library wrote (:func:`is_netcdf4`: ``_NCProperties``, netCDF-C's
dimension ids) are rewritten as below. Any other HDF5 file with dimension scales (h5py's
``dims`` API, as NeXus and instrument files use it) keeps every attribute, node and value:
its arrays only get the ``dimension_names`` xarray's zarr reader needs, found as below.

netCDF-4 is HDF5 plus bookkeeping: dimensions are HDF5 dimension scales attached to the
variables that use them (``DIMENSION_LIST`` on a variable, ``REFERENCE_LIST``, ``CLASS``
and ``NAME`` on the scale), netCDF-C numbers them (``_Netcdf4Dimid``,
``_Netcdf4Coordinates``) and records its own version (``_NCProperties``). A dimension
without a coordinate variable is a dataset of its own, empty or not, whose ``NAME`` says
"This is a netCDF dimension but not a netCDF variable". xarray's zarr reader needs
instead a ``dimension_names`` entry in every array's ``zarr.json``.

This profile, detected from the file, rewrites the generic scan's documents:

* every array gets ``dimension_names``, found as h5netcdf finds them
  (``_Netcdf4Coordinates`` of a coordinate variable, else the scales attached to each
  axis, else the variable's own scale; axes with no scale get netCDF-C's
  ``phony_dim_<n>`` names, as h5netcdf's ``phony_dims="sort"``);
* dimension-only datasets are removed (their length is the length of the axes that
  use them), and a variable netCDF-C stored as ``_nc4_non_coord_<name>`` (a variable
  named like a dimension it is not the coordinate of) is presented as ``<name>``;
* a variable shorter than an unlimited dimension it lies along is presented with the
  dimension's length, the rest reading as its fill value (netCDF's own reading);
* the bookkeeping attributes are removed from arrays (groups keep ``_NCProperties``,
  which xarray hides there itself), ``_DTYPE`` too where the ``data_type`` says the same
  (xarray would show it as an attribute), one-element attribute arrays become their
  element and empty attributes ``""`` or ``[]`` (as netCDF libraries read them), and
  ``_FillValue`` is written in the form xarray's zarr reader decodes (floats as the
  base64 of a little-endian double, as ``xarray.Dataset.to_zarr`` writes it);
* an enum variable's ``_ENUM`` mapping moves to its group's ``_nc_enums`` attribute
  (``{variable: {label: value}}``), which xarray hides as it hides netCDF's enum types;
* names the walk escaped are the file's own wherever zarr v3 can hold them;
* each group's ``_nc_storage`` attribute records what HDF5 stores and zarr has no word
  for (:func:`_record_storage`): the group's unlimited dimensions, and per variable its
  HDF5 chunk shape (null: contiguous or compact) and filter pipeline, from which the
  ``h5lens`` xarray engine gives each variable h5netcdf's ``encoding`` (xarray's zarr
  reader hides group attributes starting with "_nc", as it hides ``_nc_enums``).

Axes the netCDF model does not name (an HDF5 array element type's trailing dimensions,
the proposal convention's shape-(1,) scalars) are named ``<variable>_dim<i>``.
Values, codecs and chunk references are left as the generic scan made them (see
docs/xarray.md for what still differs from h5netcdf).
"""

from __future__ import annotations

import base64
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5lens.format import convention
from h5lens.format.keys import zarr_node_name
from h5lens.manifest.documents import chunk_shape_of, grid_shape
from h5lens.manifest.model import MISSING, ChunkTableBuilder
from h5lens.scan.materialize import chunk_selection, encode_chunks
from h5lens.scan.profiles import ProfileContext

__all__ = ["ENUMS", "HIDDEN_ATTRIBUTES", "NOT_A_VARIABLE", "STORAGE", "applies", "apply"]

NOT_A_VARIABLE = "This is a netCDF dimension but not a netCDF variable."
NON_COORD_PREFIX = "_nc4_non_coord_"
DIMENSION_SCALE = "DIMENSION_SCALE"
# What h5netcdf hides from every variable and group (h5netcdf.attrs._HIDDEN_ATTRS).
HIDDEN_ATTRIBUTES = frozenset(
    {
        "REFERENCE_LIST",
        "CLASS",
        "DIMENSION_LIST",
        "NAME",
        "_Netcdf4Dimid",
        "_Netcdf4Coordinates",
        "_nc3_strict",
        "_NCProperties",
    }
)
# Kept on groups: xarray's zarr reader hides every group attribute starting with "_nc".
_KEPT_ON_GROUPS = frozenset({"_NCProperties", "_nc3_strict"})
# Group attribute holding the ``_ENUM`` of the group's enum variables, by variable name:
# on the array, xarray would show the mapping as an attribute (which ``to_netcdf`` refuses);
# xarray's zarr reader hides group attributes starting with "_nc", as netCDF readers hide
# the enum type in the variable's encoding.
ENUMS = "_nc_enums"
# Group attribute recording the HDF5 storage netCDF writers choose (chunking, filters,
# unlimited dimensions): zarr's chunk grid cannot tell a contiguous dataset (cut into
# slabs) from a chunked one, nor an unlimited dimension from a fixed one, and a dataset
# whose filter has no zarr codec is stored decoded. Read by h5lens.read.xarray_arrays.
STORAGE = "_nc_storage"
# What netCDF libraries write and nothing else does: netCDF-C's (and h5netcdf's) version
# record, dimension ids and coordinate lists, netCDF-3 strictness.
_NETCDF_MARKERS = ("_NCProperties", "_Netcdf4Dimid", "_Netcdf4Coordinates", "_nc3_strict")


def applies(ctx: ProfileContext) -> bool:
    """A netCDF-4 file (:func:`is_netcdf4`), or any HDF5 file with dimension scales (h5py's
    ``dims`` API, as NeXus and instrument files use them): the latter only get their
    arrays' ``dimension_names`` (:func:`apply`)."""
    if is_netcdf4(ctx):
        return True
    return any((doc.get("attributes") or {}).get("CLASS") == DIMENSION_SCALE for doc in ctx.nodes.values())


def is_netcdf4(ctx: ProfileContext) -> bool:
    """Whether a netCDF library wrote the file: its version record (``_NCProperties``),
    netCDF-C's dimension bookkeeping, or a dimension that is "not a netCDF variable"."""
    for doc in ctx.nodes.values():
        attributes = doc.get("attributes") or {}
        if any(marker in attributes for marker in _NETCDF_MARKERS):
            return True
        if NOT_A_VARIABLE in str(attributes.get("NAME", "")):
            return True
    return False


# -- the netCDF data model, as h5netcdf reads it ---------------------------------------


@dataclass
class _Dimension:
    name: str
    size: int
    maxsize: int | None  # None for an unlimited dimension
    dimid: int | None
    phony: bool = False


@dataclass
class _Group:
    key: str
    parent: _Group | None
    datasets: list[str] = field(default_factory=list)  # zarr keys, in the file's order
    dimensions: dict[str, _Dimension] = field(default_factory=dict)  # own, in creation order

    def chain(self) -> list[_Group]:
        """This group and its ancestors, innermost first."""
        out: list[_Group] = []
        group: _Group | None = self
        while group is not None:
            out.append(group)
            group = group.parent
        return out

    def visible(self) -> dict[str, _Dimension]:
        """Every dimension visible here by name (an inner one hides an outer one)."""
        merged: dict[str, _Dimension] = {}
        for group in reversed(self.chain()):
            merged.update(group.dimensions)
        return merged


@dataclass
class _Model:
    groups: dict[str, _Group]
    dims: dict[str, tuple[str, ...]]  # array key -> dimension names
    sizes: dict[str, tuple[int | None, ...]]  # array key -> netCDF lengths (None: as stored)
    hidden: list[str]  # dimension-only datasets


def apply(ctx: ProfileContext) -> None:
    model = _model(ctx)
    if not is_netcdf4(ctx):
        # plain HDF5 with dimension scales: its arrays are named for xarray, and nothing else
        # changes (every attribute, node and value as the generic scan made it)
        for key, names in model.dims.items():
            if key in ctx.nodes:
                rank = len(ctx.nodes[key]["shape"])
                names = names + tuple(f"{_h5_name(ctx, key)}_dim{i}" for i in range(len(names), rank))
                ctx.nodes[key]["dimension_names"] = list(names[:rank])
        return
    for key in model.hidden:
        ctx.remove(key)
    for key, names in model.dims.items():
        if key not in ctx.nodes:
            continue
        doc = ctx.nodes[key]
        rank = len(doc["shape"])
        names = names + tuple(f"{_h5_name(ctx, key)}_dim{i}" for i in range(len(names), rank))
        doc["dimension_names"] = list(names[:rank])
        _pad(ctx, key, model.sizes.get(key, ()))
    enums: dict[str, dict[str, Any]] = {}
    for key in list(ctx.nodes):
        doc = ctx.nodes[key]
        doc["attributes"] = _attributes(ctx, key, doc)
        if convention.ENUM in doc["attributes"] and doc.get("node_type") == "array":
            parent = key.rpartition("/")[0]
            enums.setdefault(parent, {})[_h5_name(ctx, key).removeprefix(NON_COORD_PREFIX)] = doc["attributes"].pop(
                convention.ENUM
            )
    for parent, mapping in enums.items():
        ctx.attributes(parent)[ENUMS] = mapping
    for key, group in model.groups.items():
        if key in ctx.nodes:  # every group: an empty list says "none", as h5netcdf's set()
            unlimited = [d.name for d in group.dimensions.values() if d.maxsize is None]
            ctx.attributes(key)[STORAGE] = {"unlimited": unlimited}  # the group's own dimensions
    _present_names(ctx)
    _record_storage(ctx)


def _h5_name(ctx: ProfileContext, key: str) -> str:
    return ctx.walk_names.get(key, key.rsplit("/", 1)[-1])


def _attrs(ctx: ProfileContext, key: str) -> dict[str, Any]:
    return ctx.nodes.get(key, {}).get("attributes") or {}


def _scalar(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _is_scale(attributes: dict[str, Any]) -> bool:
    return attributes.get("CLASS") == DIMENSION_SCALE


def _reference_key(value: Any) -> str | None:
    if isinstance(value, dict) and convention.REFERENCE in value:
        return str(value[convention.REFERENCE].get("path", "")).strip("/")
    return None


def _axis_scales(attributes: dict[str, Any], rank: int) -> list[list[str | None]]:
    """The scales attached to each axis (zarr keys), from ``DIMENSION_LIST``."""
    listed = attributes.get("DIMENSION_LIST")
    if not isinstance(listed, list) or len(listed) != rank:
        return [[] for _ in range(rank)]
    out: list[list[str | None]] = []
    for entry in listed:
        entries = entry if isinstance(entry, list) else [entry]
        out.append([_reference_key(e) for e in entries if e is not None])
    return out


def _labelled(scales: list[list[str | None]]) -> str:
    """h5netcdf's ``_unlabeled_dimension_mix``: "nodim", "unlabeled", "labeled" or "mixed"."""
    if not scales:
        return "nodim"
    counts = {len(s) for s in scales}
    if counts == {0}:
        return "unlabeled"
    return "mixed" if 0 in counts else "labeled"


def _model(ctx: ProfileContext) -> _Model:
    groups: dict[str, _Group] = {}
    for record in ctx.walk.groups:
        if record.key not in ctx.nodes:
            continue
        parent_key = record.key.rpartition("/")[0] if record.key else None
        groups[record.key] = _Group(record.key, groups.get(parent_key) if parent_key is not None else None)
    for dataset in ctx.walk.datasets:
        if dataset.key in ctx.nodes and ctx.is_array(dataset.key):
            parent = dataset.key.rpartition("/")[0]
            if parent in groups:
                groups[parent].datasets.append(dataset.key)

    shapes = {key: _h5_shape(ctx, key) for group in groups.values() for key in group.datasets}
    max_dim_id = -1
    phony_count = 0
    for group in groups.values():  # the walk's order: parents before children, in file order
        for key in group.datasets:
            attributes = _attrs(ctx, key)
            if not _is_scale(attributes):
                continue
            max_dim_id += 1
            dimid = _scalar(attributes.get("_Netcdf4Dimid"))
            shape = shapes[key]
            size = shape[0] if shape else 0
            unlimited = _unlimited(ctx, key)
            if unlimited:
                for entry in attributes.get("REFERENCE_LIST") or []:
                    user = _reference_key(entry.get("dataset")) if isinstance(entry, dict) else None
                    axis = entry.get("dimension") if isinstance(entry, dict) else None
                    if user in shapes and isinstance(axis, int) and axis < len(shapes[user]):
                        size = max(size, shapes[user][axis])
            name = _h5_name(ctx, key)
            group.dimensions[name] = _Dimension(
                name, size, None if unlimited else size, dimid if isinstance(dimid, int) else max_dim_id
            )
        # netCDF-C's phony dimensions for axes without scales (h5netcdf's phony_dims="sort")
        wanted: Counter[int] = Counter()
        for key in group.datasets:
            attributes = _attrs(ctx, key)
            if _is_scale(attributes):
                continue
            if _labelled(_axis_scales(attributes, len(shapes[key]))) == "unlabeled":
                wanted |= Counter(shapes[key])
        labelled = Counter(d.maxsize for d in group.dimensions.values() if not d.phony)
        for size, count in wanted.items():
            for _ in range(labelled[size], count):
                name = f"phony_dim_{phony_count + max_dim_id + 1}"
                phony_count += 1
                group.dimensions[name] = _Dimension(name, size, size, None, phony=True)

    dims: dict[str, tuple[str, ...]] = {}
    sizes: dict[str, tuple[int | None, ...]] = {}
    hidden: list[str] = []
    for group in groups.values():
        visible = group.visible()
        for key in group.datasets:
            attributes = _attrs(ctx, key)
            if NOT_A_VARIABLE in str(attributes.get("NAME", "")):
                hidden.append(key)
                continue
            names = _dimension_names(ctx, group, visible, key, attributes, shapes[key])
            dims[key] = names
            sizes[key] = tuple(visible[n].size if n in visible and not visible[n].phony else None for n in names)
    return _Model(groups, dims, sizes, hidden)


def _h5_shape(ctx: ProfileContext, key: str) -> tuple[int, ...]:
    obj = ctx.h5.get(ctx.h5_path(key))
    shape = getattr(obj, "shape", None)
    return tuple(shape) if shape is not None else (0,)


def _unlimited(ctx: ProfileContext, key: str) -> bool:
    obj = ctx.h5.get(ctx.h5_path(key))
    return isinstance(obj, h5py.Dataset) and obj.maxshape is not None and None in obj.maxshape


def _dimension_names(
    ctx: ProfileContext,
    group: _Group,
    visible: dict[str, _Dimension],
    key: str,
    attributes: dict[str, Any],
    shape: tuple[int, ...],
) -> tuple[str, ...]:
    """h5netcdf's ``Variable._lookup_dimensions``."""
    scales = _axis_scales(attributes, len(shape))
    coordinates = attributes.get("_Netcdf4Coordinates")
    if coordinates is not None and _is_scale(attributes):
        by_id = {d.dimid: name for name, d in visible.items() if not d.phony and d.dimid is not None}
        ids = coordinates if isinstance(coordinates, list) else [coordinates]
        if len(ids) == len(shape) and all(i in by_id for i in ids):
            return tuple(by_id[i] for i in ids)
    if _labelled(scales) == "labeled" and all(s[-1] is not None for s in scales):
        return tuple(_h5_name(ctx, str(s[-1])) for s in scales)
    own = _h5_name(ctx, key)
    if own in visible:
        return (own,)
    names: list[str] = []
    used: Counter[int] = Counter()
    for axis, size in enumerate(shape):
        if scales[axis] and scales[axis][0] is not None:
            names.append(_h5_name(ctx, str(scales[axis][0])))
            continue
        candidates = [name for name, d in group.dimensions.items() if d.size == size]
        if used[size] < len(candidates):
            names.append(candidates[used[size]])
        else:  # a mixed variable h5netcdf refuses: a name that is at least distinct
            names.append(f"{own}_dim{axis}")
        used[size] += 1
    return tuple(names)


# -- storage: what h5netcdf reports as a variable's encoding ---------------------------


def _record_storage(ctx: ProfileContext) -> None:
    """Each array's HDF5 layout and filters in its group's ``_nc_storage`` (under
    ``"variables"``, by the array's name as presented): ``{"chunks": [...] | null,
    "filters": [[id, [cd_values...]], ...]}``, the filters in pipeline order (the first
    applied when writing first), as libhdf5's dataset creation properties give them; an enum
    variable's type name (``"enum"``), a fixed-length text variable's character set
    (``"charset"``), which h5py gives in its dtype's metadata."""
    for key in list(ctx.nodes):
        if not ctx.is_array(key):
            continue
        obj = ctx.h5.get(ctx.h5_path(key))
        if not isinstance(obj, h5py.Dataset):
            continue  # a profile's own array: nothing stored in HDF5 to describe
        plist = obj.id.get_create_plist()
        chunks = list(plist.get_chunk()) if plist.get_layout() == h5py.h5d.CHUNKED else None
        filters = []
        for i in range(plist.get_nfilters()):
            code, _flags, values, _name = plist.get_filter(i)
            filters.append([int(code), [int(v) for v in values]])
        parent, _, name = key.rpartition("/")
        variable: dict[str, Any] = {"chunks": chunks, "filters": filters}
        enum_name = _enum_type_name(obj) if h5py.check_enum_dtype(obj.dtype) is not None else None
        if enum_name is not None:
            variable["enum"] = enum_name
        text = h5py.check_string_dtype(obj.dtype)
        if text is not None and text.length is not None:
            variable["charset"] = text.encoding  # fixed-length text: "ascii" or "utf-8"
        record = ctx.attributes(parent).setdefault(STORAGE, {})
        record.setdefault("variables", {})[name] = variable


def _enum_type_name(obj: h5py.Dataset) -> str | None:
    """The name of the netCDF enum type (a named HDF5 datatype of the variable's group or
    an ancestor) equal to the variable's type, as h5netcdf finds it: the outermost group's
    first."""
    h5_type = obj.id.get_type()
    groups = [obj.parent]
    while groups[-1].name != "/":
        groups.append(groups[-1].parent)
    for group in reversed(groups):
        for type_name, member in group.items():
            if isinstance(member, h5py.Datatype) and member.id == h5_type:
                return str(type_name)
    return None


# -- lengths: variables shorter than their unlimited dimension ------------------------


def _pad(ctx: ProfileContext, key: str, sizes: tuple[int | None, ...]) -> None:
    """Present ``key`` with its dimensions' lengths where an unlimited dimension grew past
    it: new chunks are absent (the fill value), stored chunks across the old edge are
    re-read and stored inline with the rest filled (what h5netcdf's padding gives)."""
    doc = ctx.nodes[key]
    old = tuple(doc["shape"])
    if len(sizes) != len(old) or key not in ctx.tables:
        return
    new = tuple(s if s is not None and s > o else o for s, o in zip(sizes, old, strict=True))
    if new == old or doc.get("data_type") not in _PADDED:
        return
    chunks = chunk_shape_of(doc)
    table = ctx.tables[key]
    grid = grid_shape(new, chunks)
    builder = ChunkTableBuilder(grid)
    region = tuple(slice(0, n) for n in table.grid_shape)
    builder.source[region] = table.source
    builder.offset[region] = table.offset
    builder.length[region] = table.length
    old_grid = table.grid_shape
    for flat, payload in table.inline.items():
        index = np.unravel_index(flat, old_grid) if old_grid else ()
        builder.inline[builder.flat(tuple(int(i) for i in index))] = payload
    doc["shape"] = list(new)
    # chunks that held the old edge: their cells past it must read as the fill value
    edge = [
        idx
        for idx in np.ndindex(old_grid)
        if table.source[idx] != MISSING
        and any(o % c and i == g - 1 and n > o for i, g, o, n, c in zip(idx, old_grid, old, new, chunks, strict=True))
    ]
    if edge:
        ds = ctx.h5[ctx.h5_path(key)]
        fill = _fill_value(doc)
        regions = []
        for idx in edge:
            whole = chunk_selection(idx, chunks, new)
            values = np.full(tuple(s.stop - s.start for s in whole), fill, dtype=ds.dtype.newbyteorder("="))
            stored = np.asarray(ds[chunk_selection(idx, chunks, old)])
            values[tuple(slice(0, n) for n in stored.shape)] = stored
            regions.append((idx, values))
        encoded = encode_chunks(doc, regions)
        absent = [builder.flat(idx) for idx in edge if idx not in encoded]
        if absent:
            builder.clear(np.asarray(absent, dtype=np.int64))
        present = [idx for idx in edge if idx in encoded]
        if present:
            builder.set_inline(
                np.asarray([builder.flat(idx) for idx in present], dtype=np.int64), [encoded[idx] for idx in present]
            )
    ctx.tables[key] = builder.build()


def _fill_value(doc: dict[str, Any]) -> Any:
    """The fill value of the array ``doc`` describes, as zarr reads it."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    meta = {k: v for k, v in doc.items() if k != "attributes"}
    return ArrayV3Metadata.from_dict(meta).fill_value


# h5netcdf pads a variable shorter than its unlimited dimension only for numbers (and enums).
_PADDED = frozenset(
    {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"}
)


# -- attributes -------------------------------------------------------------------------


def _attributes(ctx: ProfileContext, key: str, doc: dict[str, Any]) -> dict[str, Any]:
    is_array = doc.get("node_type") == "array"
    attributes = doc.get("attributes") or {}
    out: dict[str, Any] = {}
    for name, value in attributes.items():
        if name in HIDDEN_ATTRIBUTES and (is_array or name not in _KEPT_ON_GROUPS):
            continue
        if name == convention.DTYPE and is_array and _derivable(value, doc.get("data_type")):
            continue
        if value is None:
            value = _empty(ctx, key, name)
        out[name] = _scalar(value)
    if is_array and "_FillValue" in out:
        fill = _xarray_fill_value(out["_FillValue"], doc.get("data_type"))
        if fill is _NO_FORM:
            del out["_FillValue"]  # xarray cannot decode one here; the zarr fill_value holds it
        else:
            out["_FillValue"] = fill
    return out


def _derivable(value: Any, data_type: Any) -> bool:
    """Whether ``_DTYPE`` says no more than the ``data_type`` does."""
    if isinstance(data_type, dict):
        data_type = data_type.get("name")
    return (
        value == data_type
        or (value == "str" and data_type == "string")
        or (value == "bytes" and data_type in _BYTES_TYPES)
    )


_BYTES_TYPES = ("null_terminated_bytes", "variable_length_bytes", "raw_bytes")


def _empty(ctx: ProfileContext, key: str, name: str) -> Any:
    """An attribute with an empty (null) dataspace, as h5netcdf reads it: ``""`` for text
    (xarray decodes h5netcdf's ``b""``), else an empty list."""
    obj = ctx.h5.get(ctx.h5_path(key) if key else "/")
    try:
        dtype = obj.attrs.get_id(name).dtype if obj is not None else None
    except (KeyError, OSError, RuntimeError):
        dtype = None
    if dtype is not None and h5py.check_string_dtype(dtype) is not None:
        return ""
    return []


_NO_FORM = object()


def _xarray_fill_value(value: Any, data_type: Any) -> Any:
    """``_FillValue`` as xarray's zarr reader decodes it (``FillValueCoder``)."""
    if isinstance(value, str) and value in convention.NON_FINITE_TEXT and data_type != "string":
        value = convention.NON_FINITE_TEXT[value]
    if not isinstance(data_type, str):
        return _NO_FORM  # bytes, structured: FillValueCoder has no form for them
    if data_type.startswith("float") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode("ascii")
    if data_type.startswith(("int", "uint")) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if data_type == "bool":
        return bool(value)
    if data_type == "string" and isinstance(value, str):
        return value
    return _NO_FORM


# -- names ------------------------------------------------------------------------------


def _present_names(ctx: ProfileContext) -> None:
    """netCDF names as h5netcdf gives them: ``_nc4_non_coord_<name>`` as ``<name>``, and the
    file's own names where zarr can hold them (the walk escaped every ``:``, ``*`` …).
    Deepest first, so that renaming a group moves children already renamed."""
    for key in sorted(ctx.nodes, key=lambda k: (-k.count("/"), k)):
        if not key or key not in ctx.nodes:
            continue
        parent, _, current = key.rpartition("/")
        raw = _h5_name(ctx, key)
        wanted = raw.removeprefix(NON_COORD_PREFIX)
        # a "%" stays escaped: h5lens's readers take a name with one for an escaped name
        if wanted == current or "%" in wanted or not zarr_node_name(wanted):
            continue
        target = f"{parent}/{wanted}" if parent else wanted
        if target not in ctx.nodes:
            ctx.rename(key, target)
