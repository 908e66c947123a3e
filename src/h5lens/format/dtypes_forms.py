"""The forms h5lens gives HDF5 types that zarr v3 has no data type for (numpy only).

The scanner writes these forms and h5lens's readers read them back as h5py gives the
values; plain zarr (and, for ragged arrays, anndata and awkward) reads them as documented
in docs/manifest-format.md. No h5py and no zarr here: both sides import this module.

* **Compound members that are arrays** (``('xyz', '<f4', (3,))``): zarr's ``structured``
  type has no subarray fields, but a record ``{"0": f4, "1": f4, "2": f4}`` has the same
  bytes, so the chunks stay referenced. Each array member becomes such nested records (one
  level per axis, fields named ``"0"``, ``"1"``, ...) and the ``_ARRAY_FIELDS`` attribute
  lists ``[[field, names, ...], [shape]]`` so that a reader views the records back as the
  HDF5 dtype (``values.view(restore_array_fields(...))``: no copy).
* **Ragged arrays** and compounds with variable-length members: awkward-array groups,
  in :mod:`h5lens.format.ragged_forms` (re-exported here).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from h5lens.format.ragged_forms import (
    AWKWARD_ATTRIBUTES,
    AWKWARD_ENCODING,
    STRING_ELEMENTS,
    RaggedElement,
    RecordFields,
    element_dtype,
    field_primitive,
    form_text,
    from_buffer,
    ragged_buffers,
    ragged_element,
    ragged_form,
    ragged_primitive,
    ragged_values,
    record_buffers,
    record_dtype,
    record_fields,
    record_form,
    record_values,
    sequence_base,
    string_buffers,
    string_values,
    to_buffer,
)

ArrayFields = list[list[Any]]  # [[field path (list of names)], [shape]] per array member


def struct_form(dtype: np.dtype) -> tuple[np.dtype, ArrayFields]:
    """``dtype`` with each array member as nested records of the same bytes, and the table
    of array members (field path, shape) that :func:`restore_array_fields` undoes."""
    table: ArrayFields = []
    return _struct(dtype, [], table), table


def _struct(dtype: np.dtype, where: list[str], table: ArrayFields) -> np.dtype:
    if dtype.names is None or dtype.fields is None:
        return dtype
    names, formats, offsets = [], [], []
    for name in dtype.names:
        field, offset = dtype.fields[name][:2]
        if field.subdtype is not None:
            base, shape = field.subdtype
            table.append([[*where, name], list(shape)])
            field = _records(_struct(base, [*where, name], table), tuple(shape))
        else:
            field = _struct(field, [*where, name], table)
        names.append(name)
        formats.append(field)
        offsets.append(offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": dtype.itemsize})


def _records(base: np.dtype, shape: tuple[int, ...]) -> np.dtype:
    """Records of ``shape`` elements of ``base``, row-major: the bytes of ``(base, shape)``."""
    if not shape:
        return base
    inner = _records(base, shape[1:])
    return np.dtype([(str(i), inner) for i in range(shape[0])])


def restore_array_fields(dtype: np.dtype, table: Any) -> np.dtype:
    """The dtype whose array members :func:`struct_form` turned into records, back again:
    ``values.view(restore_array_fields(values.dtype, table))`` reads as h5py does. Raises
    ValueError where ``table`` does not fit ``dtype``."""
    if not isinstance(table, list):
        raise ValueError(f"Expected a list of [field path, shape] pairs. Got {type(table).__name__}.")
    shapes: dict[tuple[str, ...], tuple[int, ...]] = {}
    for entry in table:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and isinstance(entry[1], list)):
            raise ValueError(f"Expected [field path, shape]. Got {entry!r}.")
        shapes[tuple(str(p) for p in entry[0])] = tuple(int(n) for n in entry[1])
    restored = _restore(dtype, (), shapes)
    if restored.itemsize != dtype.itemsize:
        raise ValueError(f"array fields {table!r} do not fit records of {dtype}")
    return restored


def _restore(dtype: np.dtype, where: tuple[str, ...], shapes: dict[tuple[str, ...], tuple[int, ...]]) -> np.dtype:
    if dtype.names is None or dtype.fields is None:
        return dtype
    names, formats, offsets = [], [], []
    for name in dtype.names:
        field, offset = dtype.fields[name][:2]
        path = (*where, name)
        shape = shapes.get(path)
        if shape is not None:
            base = field
            for _ in shape:  # the first element of each level of records is the member's base
                if base.names is None or base.fields is None or "0" not in base.fields:
                    raise ValueError(f"field {'.'.join(path)} is no array member of shape {shape}")
                base = base.fields["0"][0]
            field = np.dtype((_restore(base, path, shapes), shape))
        else:
            field = _restore(field, path, shapes)
        names.append(name)
        formats.append(field)
        offsets.append(offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": dtype.itemsize})


def view_array_fields(values: Any, table: Any) -> Any:
    """Records as zarr reads them (array members as nested records) viewed as the HDF5 dtype
    (``table``: the ``_ARRAY_FIELDS`` attribute); a single record stays a single record."""
    if isinstance(values, np.void):
        return np.asarray(values).view(restore_array_fields(values.dtype, table))[()]
    if isinstance(values, np.ndarray) and values.dtype.names is not None:
        return values.view(restore_array_fields(values.dtype, table))
    return values


# Attribute types (``Manifest.attribute_types``) of what JSON keeps only as lists: ragged
# attributes ("vlen[int32]1d": sequences of int32 in a 1-d array; the JSON is nested lists,
# whose depth alone cannot tell an empty sequence from an empty axis) and opaque ones ("V3":
# 3-byte opaque values, the JSON their bytes as {"_BYTES": ...}); compound ones
# ('record[["t","float32"],["n","int16"]]': the JSON objects of field values, whose numbers
# lose their types), and sequences of compounds ("vlen[record[...]]1d").
_VLEN_TYPE = re.compile(r"vlen\[([a-z0-9]+|record\[.*\])\]([0-9]|[1-2][0-9]|3[0-2])d")
_OPAQUE_TYPE = re.compile(r"V([1-9][0-9]{0,5})")
_RECORD_PREFIX = "record"
# field types of a compound attribute whose type is recorded (what JSON numbers can hold exactly)
_RECORD_FIELD_TYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"}
)


def vlen_type_name(primitive: str, ndim: int) -> str:
    return f"vlen[{primitive}]{ndim}d"


def parse_vlen_type(name: str) -> tuple[np.dtype, int] | None:
    """(element dtype, number of axes) of a ragged attribute type name, else None."""
    found = _VLEN_TYPE.fullmatch(name)
    if found is None:
        return None
    inner = found.group(1)
    if inner.startswith(_RECORD_PREFIX):
        record = parse_record_type(inner)
        return None if record is None else (record, int(found.group(2)))
    try:
        base = np.dtype(inner)
    except TypeError:
        return None
    return (base, int(found.group(2))) if ragged_primitive(base) == inner else None


def record_type_name(dtype: np.dtype) -> str | None:
    """The attribute type name of a compound of numbers and booleans (native order; fields
    that are arrays, compounds or anything else: None, the JSON objects stay as they are)."""
    if dtype.names is None or dtype.fields is None or not dtype.names:
        return None
    fields = []
    for name in dtype.names:
        field = dtype.fields[name][0]
        if field.names is not None or field.subdtype is not None or field.kind not in "biuf":
            return None
        found = "bool" if field.kind == "b" else field.newbyteorder("=").name
        if found not in _RECORD_FIELD_TYPES:  # a long double: its JSON is text, untyped
            return None
        fields.append([name, found])
    return _RECORD_PREFIX + json.dumps(fields, separators=(",", ":"))


def parse_record_type(name: str) -> np.dtype | None:
    """The numpy dtype a compound attribute type name (:func:`record_type_name`) names, else None."""
    if not name.startswith(_RECORD_PREFIX + "["):
        return None
    try:
        fields = json.loads(name[len(_RECORD_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(fields, list) or not fields:
        return None
    pairs = []
    for field in fields:
        if not (isinstance(field, list) and len(field) == 2 and all(isinstance(part, str) for part in field)):
            return None
        if field[1] not in _RECORD_FIELD_TYPES:
            return None
        pairs.append((field[0], field[1]))
    try:
        return np.dtype(pairs)
    except (TypeError, ValueError):  # repeated or empty names
        return None


def is_opaque_type(name: str) -> bool:
    return _OPAQUE_TYPE.fullmatch(name) is not None


__all__ = [
    "AWKWARD_ATTRIBUTES",
    "AWKWARD_ENCODING",
    "STRING_ELEMENTS",
    "RaggedElement",
    "RecordFields",
    "element_dtype",
    "field_primitive",
    "form_text",
    "from_buffer",
    "is_opaque_type",
    "parse_record_type",
    "parse_vlen_type",
    "ragged_buffers",
    "ragged_element",
    "ragged_form",
    "ragged_primitive",
    "ragged_values",
    "record_buffers",
    "record_dtype",
    "record_fields",
    "record_form",
    "record_type_name",
    "record_values",
    "restore_array_fields",
    "sequence_base",
    "string_buffers",
    "string_values",
    "struct_form",
    "to_buffer",
    "view_array_fields",
    "vlen_type_name",
]
