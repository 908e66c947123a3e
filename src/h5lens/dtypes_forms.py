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
* **Ragged arrays** (variable-length sequences of numbers, h5py's ``vlen_dtype``): an
  anndata ``awkward-array`` group (``encoding-version`` 0.1.0): a ``form`` (awkward's JSON
  form: ``RegularArray`` per axis after the first, then ``ListOffsetArray`` of ``NumpyArray``),
  ``length``, and the buffers ``node<k>-offsets`` (int64) and ``node<k>-data``. The group's
  ``_RAGGED`` attribute ``{"dtype", "shape"}`` says it is one HDF5 dataset of that shape.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

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


# -- ragged arrays ---------------------------------------------------------------------

AWKWARD_ENCODING = {"encoding-type": "awkward-array", "encoding-version": "0.1.0"}
# the attributes an awkward-array group needs for itself (an HDF5 attribute of the same
# name would be overwritten)
AWKWARD_ATTRIBUTES = ("encoding-type", "encoding-version", "form", "length")
# numpy kinds awkward's NumpyArray holds as a primitive of numpy's name
_PRIMITIVE_KINDS = "biufc"


def ragged_primitive(base: np.dtype) -> str | None:
    """awkward's primitive name for sequence elements of ``base``; None if it has none."""
    if base.kind in _PRIMITIVE_KINDS and base.names is None and base.subdtype is None:
        name = base.newbyteorder("=").name
        return "bool" if name == "bool" else name
    return None


def field_primitive(field: np.dtype) -> str | None:
    """What a record's field is held as: a primitive, or ``"S<n>"`` for fixed-length byte
    strings of ``n`` bytes (awkward's bytestrings: a RegularArray of ``n`` bytes, whose
    buffer is the field's bytes as uint8); None if neither."""
    if field.kind == "S" and field.itemsize > 0 and field.subdtype is None:
        return f"S{field.itemsize}"
    return ragged_primitive(field)


def to_buffer(values: np.ndarray, primitive: str) -> np.ndarray:
    """A field's values as the buffer of its form (bytes as uint8, numbers in native order)."""
    dtype = np.dtype(primitive)
    if dtype.kind == "S":
        return np.ascontiguousarray(values.reshape(-1), dtype=dtype).view(np.uint8)
    return np.ascontiguousarray(values).astype(dtype, copy=False)


def from_buffer(buffer: np.ndarray, primitive: str) -> np.ndarray:
    """A field's values from the buffer of its form (:func:`to_buffer` undone)."""
    dtype = np.dtype(primitive)
    if dtype.kind == "S":
        raw = np.ascontiguousarray(buffer).reshape(-1)
        if raw.dtype.itemsize != 1 or raw.size % dtype.itemsize:
            raise ValueError(f"{raw.size} bytes are no whole {primitive} values")
        return raw.view(dtype)
    return buffer.astype(dtype, copy=False)


# A sequence element: awkward's primitive name, or a record's [[field name, primitive], ...]
# (a field's primitive may be "S<n>": see field_primitive), or one of STRING_ELEMENTS
RaggedElement = str | list[list[str]]
# variable-length strings: awkward's strings (UTF-8 text) or bytestrings (any bytes), each a
# list of bytes; h5py gives each sequence as an object array of bytes either way
STRING_ELEMENTS = ("string", "bytestring", "reference")
# ("reference": object references, as the paths of their targets, "" for a null one, as a
# dataset of references holds them; h5lens.open gives the nodes, as h5py gives references)


def ragged_element(base: np.dtype) -> RaggedElement | None:
    """What awkward holds a sequence element of ``base`` as: a primitive, a record of
    primitive fields (a compound of numbers), or strings (h5py's variable-length strings:
    ``bytestring`` where their character set is ASCII, which may hold any bytes); None if
    none of these."""
    metadata: dict[str, Any] = dict(base.metadata or {})
    text = metadata.get("vlen") if base.kind == "O" else None
    if text is str:
        return "string"
    if text is bytes:
        return "bytestring"
    if base.kind == "O" and getattr(metadata.get("ref"), "__name__", None) == "Reference":  # h5py.Reference
        return "reference"
    if base.names is None or base.fields is None:
        return ragged_primitive(base)
    fields = []
    for name in base.names:
        primitive = field_primitive(base.fields[name][0])
        if primitive is None:
            return None
        fields.append([name, primitive])
    return fields or None


def element_dtype(element: RaggedElement) -> np.dtype:
    """The (native) numpy dtype of a sequence element (strings: h5py's ``string_dtype``)."""
    if element == "reference":
        import h5py

        return h5py.ref_dtype
    if element in STRING_ELEMENTS:
        return np.dtype("O", metadata={"vlen": str if element == "string" else bytes})
    if isinstance(element, str):
        return np.dtype(element)
    return np.dtype([(str(name), np.dtype(str(primitive))) for name, primitive in element])


def _strings_form(element: str, key: str, bytes_key: str) -> dict[str, Any]:
    """awkward's strings: a ListOffsetArray of uint8 (``char`` or ``byte``); references are
    the text of their targets' paths."""
    text = element != "bytestring"
    content = {"class": "NumpyArray", "primitive": "uint8", "inner_shape": [],
               "parameters": {"__array__": "char" if text else "byte"}, "form_key": bytes_key}  # fmt: skip
    return {"class": "ListOffsetArray", "offsets": "i64", "content": content,
            "parameters": {"__array__": "string" if text else "bytestring"}, "form_key": key}  # fmt: skip


def _numpy_form(primitive: str, key: str) -> dict[str, Any]:
    if primitive.startswith("S"):  # awkward's bytestrings of a fixed length; the buffer is the bytes
        content = {"class": "NumpyArray", "primitive": "uint8", "inner_shape": [], "parameters": {"__array__": "byte"},
                   "form_key": key}  # fmt: skip
        return {"class": "RegularArray", "size": int(primitive[1:]), "content": content,
                "parameters": {"__array__": "bytestring"}, "form_key": None}  # fmt: skip
    return {"class": "NumpyArray", "primitive": primitive, "inner_shape": [], "parameters": {}, "form_key": key}


def ragged_form(shape: tuple[int, ...], element: RaggedElement) -> tuple[dict[str, Any], int, str, list[str]]:
    """awkward's form of ``shape`` sequences of ``element`` (RegularArray per axis after the
    first, then ListOffsetArray of a NumpyArray, or of a RecordArray of NumpyArrays), its
    length, its offsets buffer's name and its data buffers' names (one per record field)."""
    inner_axes = list(shape[1:])
    depth = len(inner_axes)
    form: dict[str, Any]
    if element in STRING_ELEMENTS:  # each string's offsets into the bytes, then the bytes
        assert isinstance(element, str)
        form = _strings_form(element, f"node{depth + 1}", f"node{depth + 2}")
        data_names = [f"node{depth + 1}-offsets", f"node{depth + 2}-data"]
    elif isinstance(element, str):
        form = _numpy_form(element, f"node{depth + 1}")
        data_names = [f"node{depth + 1}-data"]
    else:
        keys = [f"node{depth + 2 + i}" for i in range(len(element))]
        form = {
            "class": "RecordArray",
            "fields": [name for name, _ in element],
            "contents": [_numpy_form(primitive, key) for (_, primitive), key in zip(element, keys, strict=True)],
            "parameters": {},
            "form_key": f"node{depth + 1}",
        }
        data_names = [f"{key}-data" for key in keys]
    form = {"class": "ListOffsetArray", "offsets": "i64", "content": form, "parameters": {}, "form_key": f"node{depth}"}
    for level in range(depth - 1, -1, -1):
        form = {"class": "RegularArray", "size": inner_axes[level], "content": form, "parameters": {},
                "form_key": f"node{level}"}  # fmt: skip
    length = shape[0] if shape else 1  # a scalar: one sequence
    return form, length, f"node{depth}-offsets", data_names


# A compound with members that are sequences: [[field, primitive, is a sequence], ...]
RecordFields = list[list[Any]]


def sequence_base(field: np.dtype) -> np.dtype | None:
    """The element type of a field that is a variable-length sequence (h5py's
    ``vlen_dtype``: an object dtype whose metadata names it); None otherwise."""
    metadata: dict[str, Any] = dict(field.metadata or {})
    base = metadata.get("vlen") if field.kind == "O" else None
    return base if isinstance(base, np.dtype) else None


def record_fields(dtype: np.dtype) -> RecordFields | None:
    """The fields of a compound with members that are sequences of numbers (the others
    numbers): what awkward holds as a RecordArray of NumpyArrays and ListOffsetArrays;
    None for every other type."""
    if dtype.names is None or dtype.fields is None:
        return None
    found, sequences = [], False
    for name in dtype.names:
        field = dtype.fields[name][0]
        base = sequence_base(field)
        primitive = ragged_primitive(base) if base is not None else field_primitive(field)
        if primitive is None:
            return None
        sequences = sequences or base is not None
        found.append([name, primitive, base is not None])
    return found if sequences else None


def record_dtype(fields: RecordFields) -> np.dtype:
    """h5py's dtype of such a compound: sequence members as ``vlen_dtype`` objects."""
    return np.dtype([
        (str(name), np.dtype("O", metadata={"vlen": np.dtype(str(primitive))}) if sequence else np.dtype(str(primitive)))
        for name, primitive, sequence in fields
    ])


def record_form(shape: tuple[int, ...], fields: RecordFields) -> tuple[dict[str, Any], int, list[list[str]]]:
    """awkward's form of ``shape`` records (RegularArray per axis after the first, then a
    RecordArray whose members are NumpyArrays, or ListOffsetArrays of NumpyArrays), its
    length, and per field its buffer names (``[data]`` or ``[offsets, data]``)."""
    inner_axes = list(shape[1:])
    depth = len(inner_axes)
    counter = depth + 1
    contents, buffers = [], []
    for _, primitive, sequence in fields:
        if sequence:
            outer, inner = f"node{counter}", f"node{counter + 1}"
            counter += 2
            contents.append({"class": "ListOffsetArray", "offsets": "i64", "content": _numpy_form(primitive, inner),
                             "parameters": {}, "form_key": outer})  # fmt: skip
            buffers.append([f"{outer}-offsets", f"{inner}-data"])
        else:
            key = f"node{counter}"
            counter += 1
            contents.append(_numpy_form(primitive, key))
            buffers.append([f"{key}-data"])
    form: dict[str, Any] = {"class": "RecordArray", "fields": [name for name, _, _ in fields], "contents": contents,
                            "parameters": {}, "form_key": f"node{depth}"}  # fmt: skip
    for level in range(depth - 1, -1, -1):
        form = {"class": "RegularArray", "size": inner_axes[level], "content": form, "parameters": {},
                "form_key": f"node{level}"}  # fmt: skip
    return form, shape[0] if shape else 1, buffers


def record_buffers(values: np.ndarray, fields: RecordFields) -> list[list[np.ndarray]]:
    """Per field its buffers (row-major over the records): the values, or offsets and values."""
    flat = values.reshape(-1)
    out = []
    for name, primitive, sequence in fields:
        if sequence:
            out.append(list(ragged_buffers(flat[name], np.dtype(primitive))))
        else:
            out.append([to_buffer(flat[name], primitive)])
    return out


def record_values(shape: tuple[int, ...], fields: RecordFields, buffers: list[list[np.ndarray]]) -> np.ndarray:
    """The records h5py reads (sequence members as arrays) from their buffers."""
    count = int(np.prod(shape, dtype=np.int64))
    out = np.empty(count, dtype=record_dtype(fields))
    for (name, primitive, sequence), found in zip(fields, buffers, strict=True):
        if sequence:
            out[name] = ragged_values((count,), found[0], found[1].astype(np.dtype(primitive), copy=False))
            continue
        values = from_buffer(found[0], primitive)
        if values.shape != (count,):
            raise ValueError(f"field {name}: {values.size} values for {count} records")
        out[name] = values
    return out.reshape(shape)


def ragged_buffers(values: np.ndarray, base: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (int64, one more than the sequences) and the concatenated data (native
    ``base``) of an object array of sequences, in row-major order."""
    flat = [np.asarray(v, dtype=base) for v in values.ravel()]
    lengths = np.fromiter((v.size for v in flat), dtype=np.int64, count=len(flat))
    offsets = np.zeros(len(flat) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    native = _native(base)
    data = np.concatenate(flat).astype(native) if flat else np.zeros(0, native)
    return offsets, data


def string_buffers(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sequences' offsets into the strings, the strings' offsets into the bytes (both
    int64) and the bytes (uint8) of an object array of sequences of strings (h5py's: bytes
    each), in row-major order."""
    sequences = [[v if isinstance(v, bytes) else str(v).encode("utf-8", "surrogateescape") for v in np.ravel(s)]
                 for s in values.ravel()]  # fmt: skip
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sequences], out=offsets[1:])
    strings = [v for s in sequences for v in s]
    string_offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(v) for v in strings], out=string_offsets[1:])
    return offsets, string_offsets, np.frombuffer(b"".join(strings), dtype=np.uint8).copy()


def string_values(shape: tuple[int, ...], offsets: np.ndarray, string_offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The object array of sequences of strings (each an object array of bytes, as h5py
    reads them) from :func:`string_buffers`'s buffers."""
    count = int(np.prod(shape, dtype=np.int64))
    strings = string_offsets.size - 1
    if (
        offsets.shape != (count + 1,) or string_offsets.ndim != 1 or strings < 0
        or (count and (int(offsets[0]) != 0 or int(offsets[-1]) > strings))
        or (strings and int(string_offsets[-1]) > data.size)
        or (np.diff(offsets) < 0).any() or (np.diff(string_offsets) < 0).any()
    ):  # fmt: skip
        raise ValueError(f"offsets do not fit {count} sequences of {strings} strings in {data.size} bytes")
    raw = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
    bounds = string_offsets.tolist()
    every = [raw[bounds[i] : bounds[i + 1]] for i in range(strings)]
    out = np.empty(count, dtype=object)
    for i, (start, stop) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)):
        sequence = np.empty(stop - start, dtype=object)
        sequence[:] = every[start:stop]
        out[i] = sequence
    return out.reshape(shape)


def _native(dtype: np.dtype) -> np.dtype:
    if dtype.names is None or dtype.fields is None:
        return dtype.newbyteorder("=")
    return np.dtype([(name, _native(dtype.fields[name][0])) for name in dtype.names])


def ragged_values(shape: tuple[int, ...], offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The object array of sequences (h5py's reading of a vlen dataset) from its buffers."""
    count = int(np.prod(shape, dtype=np.int64))
    if offsets.shape != (count + 1,) or (count and int(offsets[-1]) > data.size) or (np.diff(offsets) < 0).any():
        raise ValueError(f"offsets of {offsets.size} values do not fit {count} sequences in {data.size} values")
    out = np.empty(count, dtype=object)
    for i in range(count):
        out[i] = data[int(offsets[i]) : int(offsets[i + 1])]
    return out.reshape(shape)


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
        fields.append([name, "bool" if field.kind == "b" else field.newbyteorder("=").name])
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


def form_text(form: dict[str, Any]) -> str:
    """The ``form`` attribute as anndata writes it (awkward's JSON form, a string)."""
    return json.dumps(form)


__all__ = [
    "AWKWARD_ATTRIBUTES",
    "AWKWARD_ENCODING",
    "STRING_ELEMENTS",
    "form_text",
    "is_opaque_type",
    "parse_record_type",
    "parse_vlen_type",
    "ragged_buffers",
    "ragged_form",
    "ragged_primitive",
    "ragged_values",
    "record_type_name",
    "restore_array_fields",
    "string_buffers",
    "string_values",
    "struct_form",
    "view_array_fields",
    "vlen_type_name",
]
