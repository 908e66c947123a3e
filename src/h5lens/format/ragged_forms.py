"""The awkward-array forms of HDF5's variable-length values (numpy only).

The scanner writes these forms and h5lens's readers read them back as h5py gives the
values; plain zarr reads the buffers as numbers, anndata and awkward the ragged array
(docs/manifest-format.md). No h5py and no zarr here: both sides import this module
(:mod:`h5lens.format.dtypes_forms` re-exports it).

* **Ragged arrays** (variable-length sequences, h5py's ``vlen_dtype``): an anndata
  ``awkward-array`` group (``encoding-version`` 0.1.0): a ``form`` (awkward's JSON form:
  ``RegularArray`` per axis after the first, then ``ListOffsetArray`` of ``NumpyArray``),
  ``length``, and the buffers ``node<k>-offsets`` (int64) and ``node<k>-data``. The group's
  ``_RAGGED`` attribute ``{"dtype", "shape"}`` says it is one HDF5 dataset of that shape.
  Long doubles (awkward's ``float128`` / ``complex256``) are buffers of raw bytes with this
  platform's ``_FLOAT_LAYOUT`` (zarr has no such type; awkward views the bytes as its own).
* **Compounds with variable-length members** (sequences, or arrays of variable-length
  strings): the same group, its form a ``RecordArray`` of the members, ``_RAGGED``
  ``{"record": [[field, type, is a sequence(, shape)], ...], "shape"}``.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np

AWKWARD_ENCODING = {"encoding-type": "awkward-array", "encoding-version": "0.1.0"}
# the attributes an awkward-array group needs for itself (an HDF5 attribute of the same
# name would be overwritten)
AWKWARD_ATTRIBUTES = ("encoding-type", "encoding-version", "form", "length")
# numpy kinds awkward's NumpyArray holds as a primitive of numpy's name
_PRIMITIVE_KINDS = "biufc"
# the widest numbers a JSON attribute's type names (long doubles are text there)
_WIDEST = {"f": 8, "c": 16}
# awkward's names of the long doubles numpy has on some platforms only (x86's float128 and
# float96, and their complex pairs)
_LONG_DOUBLES = {"float96": np.longdouble, "float128": np.longdouble, "complex192": np.clongdouble,
                 "complex256": np.clongdouble}  # fmt: skip


def ragged_primitive(base: np.dtype) -> str | None:
    """awkward's primitive name for sequence elements of ``base`` (numbers up to float64 and
    complex128, booleans); None if it has none."""
    if base.kind in _PRIMITIVE_KINDS and base.names is None and base.subdtype is None:
        if base.itemsize > _WIDEST.get(base.kind, 8):
            return None
        name = base.newbyteorder("=").name
        return "bool" if name == "bool" else name
    return None


def long_double_primitive(base: np.dtype) -> str | None:
    """awkward's primitive name for h5py's ``np.longdouble`` / ``np.clongdouble`` (``float128``,
    ``complex256`` on x86-64 and ARM64 Linux); None for any other type. Their buffers are
    raw bytes with the platform's ``_FLOAT_LAYOUT`` (:mod:`h5lens.format.long_double`)."""
    if base.names is None and base.subdtype is None and base.kind in "fc":
        wide = np.dtype(np.longdouble if base.kind == "f" else np.clongdouble)
        if base.itemsize == wide.itemsize and base.itemsize > _WIDEST[base.kind] and wide.name in _LONG_DOUBLES:
            return wide.name
    return None


def field_primitive(field: np.dtype) -> str | None:
    """What a record's field (or a sequence's element) is held as: a primitive (long doubles
    too), or ``"S<n>"`` for fixed-length byte strings of ``n`` bytes (awkward's bytestrings: a
    RegularArray of ``n`` bytes, whose buffer is the bytes as uint8); None if neither."""
    if field.kind == "S" and field.itemsize > 0 and field.subdtype is None:
        return f"S{field.itemsize}"
    return ragged_primitive(field) or long_double_primitive(field)


def primitive_dtype(primitive: str) -> np.dtype:
    """The numpy dtype of a primitive (or ``"S<n>"``) name; a long double's name gives this
    platform's long double, whatever its name here (a platform whose long double is narrower
    cannot hold the values: their ``_FLOAT_LAYOUT`` says so when read). TypeError for others."""
    wide = _LONG_DOUBLES.get(primitive)
    return np.dtype(primitive if wide is None else wide)


def to_buffer(values: np.ndarray, primitive: str) -> np.ndarray:
    """Values as the buffer of their form (bytes as uint8, numbers in native order)."""
    dtype = primitive_dtype(primitive)
    if dtype.kind == "S":
        return np.ascontiguousarray(values.reshape(-1), dtype=dtype).view(np.uint8)
    return np.ascontiguousarray(values).astype(dtype, copy=False)


def from_buffer(buffer: np.ndarray, primitive: str) -> np.ndarray:
    """Values from the buffer of their form (:func:`to_buffer` undone; a long double buffer,
    raw bytes in zarr, is read from its bits first: :func:`h5lens.format.long_double.to_longdouble`)."""
    dtype = primitive_dtype(primitive)
    if dtype.kind == "S":
        raw = np.ascontiguousarray(buffer).reshape(-1)
        if raw.dtype.itemsize != 1 or raw.size % dtype.itemsize:
            raise ValueError(f"{raw.size} bytes are no whole {primitive} values")
        return raw.view(dtype)
    return buffer.astype(dtype, copy=False)


# A sequence element: awkward's primitive name or "S<n>" (see field_primitive), a record's
# [[field name, primitive], ...], or one of STRING_ELEMENTS
RaggedElement = str | list[list[str]]
# variable-length strings: awkward's strings (UTF-8 text) or bytestrings (any bytes), each a
# list of bytes; h5py gives each sequence as an object array of bytes either way
STRING_ELEMENTS = ("string", "bytestring", "reference")
# ("reference": object references, as the paths of their targets, "" for a null one, as a
# dataset of references holds them; h5lens.open gives the nodes, as h5py gives references)
_TEXT = ("string", "bytestring")


def _text_element(dtype: np.dtype) -> str | None:
    """``string`` or ``bytestring`` for h5py's variable-length strings (UTF-8, ASCII)."""
    text = dict(dtype.metadata or {}).get("vlen") if dtype.kind == "O" else None
    return "string" if text is str else "bytestring" if text is bytes else None


def ragged_element(base: np.dtype) -> RaggedElement | None:
    """What awkward holds a sequence element of ``base`` as: a primitive, fixed-length byte
    strings, a record of such fields (a compound of numbers), or strings (h5py's
    variable-length strings: ``bytestring`` where their character set is ASCII, which may
    hold any bytes); None if none of these."""
    text = _text_element(base)
    if text is not None:
        return text
    metadata: dict[str, Any] = dict(base.metadata or {})
    if base.kind == "O" and getattr(metadata.get("ref"), "__name__", None) == "Reference":  # h5py.Reference
        return "reference"
    if base.names is None or base.fields is None:
        return field_primitive(base)
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
        return _text_dtype(str(element))
    if isinstance(element, str):
        return primitive_dtype(element)
    return np.dtype([(str(name), primitive_dtype(str(primitive))) for name, primitive in element])


def _text_dtype(element: str) -> np.dtype:
    return np.dtype("O", metadata={"vlen": str if element == "string" else bytes})


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


def _list_form(content: dict[str, Any], key: str) -> dict[str, Any]:
    return {"class": "ListOffsetArray", "offsets": "i64", "content": content, "parameters": {}, "form_key": key}


def form_text(form: dict[str, Any]) -> str:
    """The ``form`` attribute as anndata writes it (awkward's JSON form, a string)."""
    return json.dumps(form)


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
    form = _list_form(form, f"node{depth}")
    for level in range(depth - 1, -1, -1):
        form = {"class": "RegularArray", "size": inner_axes[level], "content": form, "parameters": {},
                "form_key": f"node{level}"}  # fmt: skip
    length = shape[0] if shape else 1  # a scalar: one sequence
    return form, length, f"node{depth}-offsets", data_names


# -- compounds with variable-length members ----------------------------------------------

# [[field, type, is a sequence], ...]; a member that is an array adds its shape as a fourth
# item. The type: a primitive, "S<n>", or "string" / "bytestring" (variable-length strings).
RecordFields = list[list[Any]]


class _Member(NamedTuple):
    name: str
    element: str
    sequence: bool
    shape: tuple[int, ...]

    @property
    def per_record(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def _members(fields: RecordFields) -> list[_Member]:
    """The entries of a ``record`` list, checked (a manifest may be damaged: ValueError)."""
    out = []
    for entry in fields:
        if not (isinstance(entry, list) and len(entry) in (3, 4)):
            raise ValueError(f"Expected [field, type, is a sequence(, shape)]. Got {entry!r}.")
        name, element, sequence = entry[:3]
        shape = entry[3] if len(entry) == 4 else []
        if not (isinstance(name, str) and isinstance(element, str) and isinstance(sequence, bool)
                and isinstance(shape, list) and all(isinstance(n, int) and n > 0 for n in shape)):  # fmt: skip
            raise ValueError(f"Expected [field, type, is a sequence(, shape)]. Got {entry!r}.")
        out.append(_Member(name, element, sequence, tuple(shape)))
    return out


def sequence_base(field: np.dtype) -> np.dtype | None:
    """The element type of a field that is a variable-length sequence (h5py's
    ``vlen_dtype``: an object dtype whose metadata names it); None otherwise."""
    metadata: dict[str, Any] = dict(field.metadata or {})
    base = metadata.get("vlen") if field.kind == "O" else None
    return base if isinstance(base, np.dtype) else None


def record_fields(dtype: np.dtype) -> RecordFields | None:
    """The fields of a compound with members of variable length (sequences of numbers, of
    fixed-length byte strings or of strings; arrays of variable-length strings), the others
    numbers, fixed-length byte strings, strings, or arrays of these: what awkward holds as a
    RecordArray; None for every other type (compounds zarr's ``structured`` type holds)."""
    if dtype.names is None or dtype.fields is None:
        return None
    found, ragged = [], False
    for name in dtype.names:
        field = dtype.fields[name][0]
        base, shape = field.subdtype if field.subdtype is not None else (field, ())
        inner = sequence_base(base)
        held = inner if inner is not None else base
        element = _text_element(held) or field_primitive(held)
        if element is None:
            return None
        ragged = ragged or inner is not None or (element in _TEXT and bool(shape))
        found.append([name, element, inner is not None, *([list(shape)] if shape else [])])
    return found if ragged else None


def record_dtype(fields: RecordFields) -> np.dtype:
    """h5py's dtype of such a compound: sequence members as ``vlen_dtype`` objects, strings
    as ``string_dtype`` objects, array members as subarrays of them."""
    out = []
    for member in _members(fields):
        base = _text_dtype(member.element) if member.element in _TEXT else primitive_dtype(member.element)
        if member.sequence:
            base = np.dtype("O", metadata={"vlen": base})
        out.append((member.name, np.dtype((base, member.shape)) if member.shape else base))
    return np.dtype(out)


def record_form(shape: tuple[int, ...], fields: RecordFields) -> tuple[dict[str, Any], int, list[list[str]]]:
    """awkward's form of ``shape`` records (RegularArray per axis after the first, then a
    RecordArray whose members are NumpyArrays, strings, or ListOffsetArrays of these, each
    in a RegularArray per axis of an array member), its length, and per field its buffer
    names (``[data]``, ``[offsets, data]``, or for sequences of strings
    ``[offsets, offsets, data]``)."""
    inner_axes = list(shape[1:])
    depth = len(inner_axes)
    counter = depth + 1
    contents, buffers = [], []
    for member in _members(fields):
        text = member.element in _TEXT
        keys = [f"node{counter + i}" for i in range(1 + member.sequence + text)]
        counter += len(keys)
        if text:
            content = _strings_form(member.element, keys[-2], keys[-1])
            names = [f"{keys[-2]}-offsets", f"{keys[-1]}-data"]
        else:
            content = _numpy_form(member.element, keys[-1])
            names = [f"{keys[-1]}-data"]
        if member.sequence:
            content = _list_form(content, keys[0])
            names.insert(0, f"{keys[0]}-offsets")
        for size in reversed(member.shape):  # an array member: its axes hold no buffer
            content = {"class": "RegularArray", "size": size, "content": content, "parameters": {}, "form_key": None}
        contents.append(content)
        buffers.append(names)
    form: dict[str, Any] = {"class": "RecordArray", "fields": [entry[0] for entry in fields], "contents": contents,
                            "parameters": {}, "form_key": f"node{depth}"}  # fmt: skip
    for level in range(depth - 1, -1, -1):
        form = {"class": "RegularArray", "size": inner_axes[level], "content": form, "parameters": {},
                "form_key": f"node{level}"}  # fmt: skip
    return form, shape[0] if shape else 1, buffers


def record_buffers(values: np.ndarray, fields: RecordFields) -> list[list[np.ndarray]]:
    """Per field its buffers, row-major over the records and an array member's elements."""
    flat = values.reshape(-1)
    out = []
    for member in _members(fields):
        column = np.asarray(flat[member.name]).reshape(-1)
        if member.element in _TEXT and member.sequence:
            out.append(list(string_buffers(column)))
        elif member.element in _TEXT:
            out.append(list(_text_buffers([_as_bytes(v) for v in column.tolist()])))
        elif member.sequence:
            offsets, data = ragged_buffers(column, primitive_dtype(member.element))
            out.append([offsets, to_buffer(data, member.element)])
        else:
            out.append([to_buffer(column, member.element)])
    return out


def record_values(shape: tuple[int, ...], fields: RecordFields, buffers: list[list[np.ndarray]]) -> np.ndarray:
    """The records h5py reads (sequence members as arrays, strings as bytes) from their buffers."""
    count = int(np.prod(shape, dtype=np.int64))
    out = np.empty(count, dtype=record_dtype(fields))
    for member, found in zip(_members(fields), buffers, strict=True):
        n = count * member.per_record
        if member.element in _TEXT and member.sequence:
            column = string_values((n,), found[0], found[1], found[2])
        elif member.element in _TEXT:
            column = np.empty(n, dtype=object)
            column[:] = _split(found[0], found[1], n)
        elif member.sequence:
            column = ragged_values((n,), found[0], from_buffer(found[1], member.element))
        else:
            column = from_buffer(found[0], member.element)
            if column.shape != (n,):
                raise ValueError(f"field {member.name}: {column.size} values for {n}")
        out[member.name] = column.reshape((count, *member.shape))
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


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")


def _text_buffers(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The strings' offsets into the bytes (int64) and the bytes (uint8)."""
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(v) for v in strings], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(strings), dtype=np.uint8).copy()


def string_buffers(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sequences' offsets into the strings, the strings' offsets into the bytes (both
    int64) and the bytes (uint8) of an object array of sequences of strings (h5py's: bytes
    each), in row-major order."""
    sequences = [[_as_bytes(v) for v in np.ravel(s)] for s in values.ravel()]
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sequences], out=offsets[1:])
    string_offsets, raw = _text_buffers([v for s in sequences for v in s])
    return offsets, string_offsets, raw


def _split(string_offsets: np.ndarray, data: np.ndarray, at_least: int = 0) -> list[bytes]:
    """The strings :func:`_text_buffers` joined (ValueError where the offsets do not fit)."""
    strings = string_offsets.size - 1
    if (
        string_offsets.ndim != 1 or strings < at_least
        or (strings and (int(string_offsets[0]) < 0 or int(string_offsets[-1]) > data.size))
        or (np.diff(string_offsets) < 0).any()
    ):  # fmt: skip
        raise ValueError(f"string offsets do not fit {max(strings, at_least)} strings in {data.size} bytes")
    raw = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
    bounds = string_offsets.tolist()
    return [raw[bounds[i] : bounds[i + 1]] for i in range(strings)]


def string_values(shape: tuple[int, ...], offsets: np.ndarray, string_offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The object array of sequences of strings (each an object array of bytes, as h5py
    reads them) from :func:`string_buffers`'s buffers."""
    count = int(np.prod(shape, dtype=np.int64))
    strings = string_offsets.size - 1
    if (
        offsets.shape != (count + 1,) or strings < 0
        or (count and (int(offsets[0]) != 0 or int(offsets[-1]) > strings))
        or (np.diff(offsets) < 0).any()
    ):  # fmt: skip
        raise ValueError(f"offsets do not fit {count} sequences of {strings} strings in {data.size} bytes")
    every = _split(string_offsets, data)
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
    "long_double_primitive",
    "primitive_dtype",
    "ragged_buffers",
    "ragged_element",
    "ragged_form",
    "ragged_primitive",
    "ragged_values",
    "record_buffers",
    "record_dtype",
    "record_fields",
    "record_form",
    "record_values",
    "sequence_base",
    "string_buffers",
    "string_values",
    "to_buffer",
]
