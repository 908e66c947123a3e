"""Datasets of variable-length sequences of numbers (ragged arrays) → awkward-array groups.

h5py reads such a dataset (``h5py.vlen_dtype(np.int32)``) as an object array of numpy
arrays. The sequences live in HDF5's global heap, so no byte range holds them: h5py reads
them and h5lens stores them inline, in the form anndata writes awkward arrays in
(:mod:`h5lens.format.dtypes_forms`): values and offsets arrays that plain zarr reads as numbers,
anndata's ``read_elem`` and awkward as the ragged array, and h5lens's navigation as the
object array h5py gives.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.format import convention
from h5lens.format.long_double import is_long_double
from h5lens.format.ragged_forms import (
    AWKWARD_ATTRIBUTES,
    AWKWARD_ENCODING,
    STRING_ELEMENTS,
    RecordFields,
    form_text,
    ragged_buffers,
    ragged_element,
    ragged_form,
    record_buffers,
    record_dtype,
    record_form,
    string_buffers,
    to_buffer,
)
from h5lens.manifest.model import ChunkTable
from h5lens.scan.arrays import inline_array
from h5lens.scan.dtypes import plan_type, values_bits_plan
from h5lens.scan.options import ScanOptions

_BUFFER_ENCODING = {"encoding-type": "array", "encoding-version": "0.2.0"}
Made = list[tuple[str, dict[str, Any], ChunkTable | None]]  # (key, document, chunk table of an array)


def ragged_base(dtype: np.dtype, path: str) -> np.dtype | None:
    """The element type of a dataset of sequences h5lens writes as a ragged array; None
    for other types. Sequences of what awkward has no primitive for are refused by name."""
    base = h5py.check_vlen_dtype(dtype)
    if base is None or h5py.check_string_dtype(dtype) is not None:
        return None
    if base == np.dtype("uint8") or base == np.dtype("int8"):
        return None  # variable-length bytes (h5lens.scan.dtypes)
    if h5py.check_ref_dtype(base) is h5py.RegionReference:
        raise UnsupportedFeatureError(
            f"{path}: variable-length sequences of region references; h5py 3 corrupts memory reading them "
            "(the process crashes), so h5lens does not read them"
        )
    if ragged_element(base) is None:
        raise UnsupportedFeatureError(
            f"{path}: variable-length sequences of {base} have no form in h5lens (sequences of numbers (long doubles "
            "too), booleans, fixed-length byte strings, variable-length strings, object references and compounds of "
            "numbers and of fixed-length byte strings are written, as awkward-array groups)"
        )
    return base


def ragged_nodes(
    key: str,
    path: str,
    values: np.ndarray | None,
    base: np.dtype,
    attributes: dict[str, Any],
    options: ScanOptions,
) -> Made:
    """The group and its buffer arrays for ``values`` (h5py's object array; None for a
    null dataspace) of sequences of ``base``."""
    empty = values is None
    if values is None:
        values = np.empty(0, dtype=object)
    shape = tuple(values.shape)
    element = ragged_element(base)
    assert element is not None  # ragged_base refused the others
    if element == "string" and not _all_text(values):
        element = "bytestring"  # not UTF-8 text: awkward's bytestrings (h5py gives bytes either way)
    form, length, offsets_name, data_names = ragged_form(shape, element)
    if element in STRING_ELEMENTS:
        offsets, string_offsets, raw = string_buffers(values)
        marker = {"dtype": element, "shape": None if empty else list(shape)}
        buffers = [(offsets_name, offsets), (data_names[0], string_offsets), (data_names[1], raw)]
        return _awkward_group(key, path, attributes, form, length, marker, buffers, options)
    offsets, data = ragged_buffers(values, base)
    if isinstance(element, str):  # numbers, or fixed-length byte strings as their bytes
        buffers = [(offsets_name, offsets), (data_names[0], to_buffer(data, element))]
    else:  # a record: one buffer per field, as awkward keeps a RecordArray's contents
        buffers = [(offsets_name, offsets)] + [
            (name, to_buffer(data[field], primitive))
            for name, (field, primitive) in zip(data_names, element, strict=True)
        ]
    marker = {"dtype": element, "shape": None if empty else list(shape)}
    return _awkward_group(key, path, attributes, form, length, marker, buffers, options)


def _all_text(values: np.ndarray) -> bool:
    try:
        for sequence in values.ravel():
            for value in np.ravel(sequence):
                if isinstance(value, bytes):
                    value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def record_nodes(
    key: str,
    path: str,
    values: np.ndarray | None,
    fields: RecordFields,
    attributes: dict[str, Any],
    options: ScanOptions,
) -> Made:
    """The group and its buffer arrays for compound ``values`` with members that are
    sequences (h5py's structured array; None for a null dataspace)."""
    empty = values is None
    if values is None:
        values = np.empty(0, dtype=record_dtype(fields))
    shape = tuple(values.shape)
    fields = [_text_kept(values, field) for field in fields]
    form, length, names = record_form(shape, fields)
    found = record_buffers(values, fields)
    buffers = [(name, buffer) for field_names, field_buffers in zip(names, found, strict=True)
               for name, buffer in zip(field_names, field_buffers, strict=True)]  # fmt: skip
    marker = {"record": fields, "shape": None if empty else list(shape)}
    return _awkward_group(key, path, attributes, form, length, marker, buffers, options)


def _text_kept(values: np.ndarray, field: list[Any]) -> list[Any]:
    """A string member whose values are not all UTF-8 text: awkward's bytestrings (h5py gives
    bytes either way)."""
    if field[1] != "string" or _all_text(np.asarray(values[field[0]]).reshape(-1)):
        return field
    return [field[0], "bytestring", *field[2:]]


def _awkward_group(
    key: str,
    path: str,
    attributes: dict[str, Any],
    form: dict[str, Any],
    length: int,
    marker: dict[str, Any],
    buffers: list[tuple[str, np.ndarray]],
    options: ScanOptions,
) -> Made:
    taken = [name for name in AWKWARD_ATTRIBUTES if name in attributes]
    if taken:
        raise UnsupportedFeatureError(
            f"{path}: a ragged dataset is written as an awkward-array group, whose attributes {taken} "
            "its own HDF5 attributes of those names would overwrite"
        )
    group_attributes = {**attributes, **AWKWARD_ENCODING, "form": form_text(form), "length": length,
                        convention.RAGGED: marker}  # fmt: skip
    made: Made = [(key, {"zarr_format": 3, "node_type": "group", "attributes": group_attributes}, None)]
    for name, buffer in buffers:
        if is_long_double(buffer.dtype):  # zarr has no long double: h5py's values as their bits
            plan = values_bits_plan(buffer.dtype, f"{path} ({name})")
            buffer = np.ascontiguousarray(buffer).view(plan.known_dtype())
        else:
            plan = plan_type(buffer.dtype, f"{path} ({name})")
        # encoded as anndata encodes an awkward array's buffers (it warns about them otherwise)
        doc, table = inline_array(f"{path}/{name}", plan, buffer, dict(_BUFFER_ENCODING), None, options)
        made.append((f"{key}/{name}" if key else name, doc, table))
    return made


__all__ = ["ragged_base", "ragged_nodes", "record_nodes"]
