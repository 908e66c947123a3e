"""A ragged HDF5 dataset (variable-length sequences of numbers) read as h5py reads it.

The manifest holds it as an awkward-array group marked ``_RAGGED``
(:mod:`h5lens.format.dtypes_forms`); navigation gives it as a dataset whose values are h5py's:
an object array of numpy arrays, of the dataset's shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError
from h5lens.format import convention
from h5lens.format.long_double import FloatLayout, float_form_in, to_longdouble
from h5lens.format.ragged_forms import (
    AWKWARD_ATTRIBUTES,
    STRING_ELEMENTS,
    element_dtype,
    from_buffer,
    primitive_dtype,
    ragged_form,
    ragged_values,
    record_dtype,
    record_form,
    record_values,
    string_values,
)
from h5lens.read.check import read_checked
from h5lens.read.navigate import DATASET_KINDS, Attributes, Node, empty


def is_ragged(doc: dict[str, Any]) -> bool:
    """Whether a node document is a ragged HDF5 dataset (a group marked ``_RAGGED``)."""
    return doc.get("node_type") == "group" and isinstance(doc.get("attributes", {}).get(convention.RAGGED), dict)


class RaggedDataset(Node):
    """A dataset of variable-length sequences: ``shape``, ``dtype`` (object) and indexing as h5py's."""

    @property
    def _marker(self) -> dict[str, Any]:
        return self._doc["attributes"][convention.RAGGED]

    @property
    def shape(self) -> tuple[int, ...] | None:
        shape = self._marker.get("shape")
        return None if shape is None else tuple(int(n) for n in shape)

    @property
    def element_dtype(self) -> np.dtype:
        """The dtype of each sequence's values (h5py's ``check_vlen_dtype``; native byte order)."""
        try:
            return element_dtype(self._marker["dtype"])
        except (TypeError, ValueError) as e:
            raise ManifestFormatError(f"{self.h5_path}: _RAGGED dtype {self._marker['dtype']!r} is no element type") from e

    @property
    def dtype(self) -> np.dtype:
        """h5py's: objects (sequences), or a compound whose sequence members are objects."""
        record = self._marker.get("record")
        return np.dtype(object) if record is None else record_dtype(record)

    @property
    def ndim(self) -> int:
        return len(self.shape or ())

    @property
    def size(self) -> int:
        shape = self.shape
        return 0 if shape is None else int(np.prod(shape, dtype=np.int64))

    @property
    def is_empty(self) -> bool:
        return self.shape is None

    @property
    def attrs(self) -> Attributes:
        """The HDF5 dataset's attributes (without the awkward-array group's own)."""
        full = super().attrs
        raw = {k: v for k, v in full.raw.items() if k not in AWKWARD_ATTRIBUTES}
        return Attributes(self._file, raw, self._file.manifest.attribute_types.get(self._key))

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of an unsized dataset")
        return shape[0]

    def read(self) -> Any:
        return self[()]

    def __getitem__(self, key: Any) -> Any:
        shape = self.shape
        if shape is None:
            if key is Ellipsis or key in ((), (Ellipsis,)):
                return empty(self.dtype if "record" in self._marker else self.element_dtype)
            raise ValueError(f"{self.h5_path!r} has a null dataspace: only [()] reads it")
        rows = _rows(key, shape) if self._marker.get("record") is None else None
        if rows is None:  # every sequence (records: their members' buffers are read whole)
            values = self._values(shape, None)
            return values[()] if shape == () and key == () else values[key]
        lo, hi, after = rows
        return self._values((hi - lo, *shape[1:]), (lo, hi))[after]

    def _values(self, shape: tuple[int, ...], rows: tuple[int, int] | None) -> np.ndarray:
        """The sequences of ``shape``: every one, or those of ``rows`` of the first axis (only
        their offsets and their elements are read)."""
        record = self._marker.get("record")
        if record is not None:  # records with members that are sequences
            _, _, names = record_form(shape, record)
            per_field = [[self._buffer(n) for n in field] for field in names]
            try:
                return record_values(shape, record, per_field)
            except ValueError as e:
                raise ManifestFormatError(f"{self.h5_path}: the ragged dataset's buffers are damaged ({e})") from None
        element = self.element_dtype
        _, _, offsets_name, data_names = ragged_form(self.shape or (), self._marker["dtype"])
        per_row = int(np.prod(shape[1:], dtype=np.int64))
        span = None if rows is None else (rows[0] * per_row, rows[1] * per_row + 1)
        offsets = self._buffer(offsets_name, span)
        try:
            first = int(offsets[0]) if rows is not None and offsets.size else 0
            offsets = offsets - first  # the rows' sequences, their elements counted from 0
            if self._marker["dtype"] in STRING_ELEMENTS:  # each string's offsets, then the bytes
                string_offsets = self._buffer(data_names[0], None if rows is None else (first, first + int(offsets[-1]) + 1))
                start = int(string_offsets[0]) if rows is not None and string_offsets.size else 0
                end = int(string_offsets[-1]) if string_offsets.size else 0
                data = self._buffer(data_names[1], None if rows is None else (start, end))
                paths = string_values(shape, offsets, string_offsets - start, data)
                if self._marker["dtype"] != "reference":
                    return paths
                nodes = np.empty(paths.shape, dtype=object)  # the targets' paths: the nodes, None where null
                for i, sequence in enumerate(paths.ravel().tolist()):
                    nodes.flat[i] = _nodes(self._file, sequence)
                return nodes
            count = int(offsets[-1]) if offsets.size else 0
            if element.names is None:  # numbers, or fixed-length byte strings from their bytes
                data = from_buffer(self._elements(data_names[0], self._marker["dtype"], rows, first, count), self._marker["dtype"])
            else:  # a record's fields, one buffer each
                fields = [
                    from_buffer(self._elements(name, primitive, rows, first, count), primitive)
                    for name, (_, primitive) in zip(data_names, self._marker["dtype"], strict=True)
                ]
                data = np.empty(min((f.size for f in fields), default=0), dtype=element)
                for field, values in zip(element.names, fields, strict=True):
                    data[field] = values[: data.size]
            return ragged_values(shape, offsets, data)
        except (TypeError, ValueError, IndexError) as e:
            raise ManifestFormatError(f"{self.h5_path}: the ragged dataset's buffers are damaged ({e})") from None

    def _elements(self, name: str, primitive: str, rows: tuple[int, int] | None, first: int, count: int) -> np.ndarray:
        """Elements ``first .. first + count`` of data buffer ``name`` (all of it for every row);
        a fixed-length byte string is its bytes in the buffer."""
        if rows is None:
            return self._buffer(name)
        width = primitive_dtype(primitive).itemsize if primitive.startswith("S") else 1
        return self._buffer(name, (first * width, (first + count) * width))

    def _buffer(self, name: str, span: tuple[int, int] | None = None) -> np.ndarray:
        """A buffer's values (those of ``[start, stop)`` only, where given), read by h5lens's
        read plan where it decodes them (a chunk that fails is named); long doubles (raw
        bytes with ``_FLOAT_LAYOUT``) as np.longdouble."""
        key = f"{self._key}/{name}"
        array = self._file.array(key)
        if span is not None and not 0 <= span[0] <= span[1] <= array.shape[0]:
            raise ManifestFormatError(f"{self.h5_path}: the ragged dataset's buffers are damaged "
                                      f"({name} holds {array.shape[0]} values, not {span[1]})")  # fmt: skip
        values = np.asarray(read_checked(array, ... if span is None else slice(*span)))
        doc = self._file.manifest.nodes.get(key)
        form = None if doc is None else float_form_in(doc.get("attributes", {}), f"{self.h5_path} ({name})")
        if isinstance(form, FloatLayout):
            return np.asarray(to_longdouble(values, form, f"{self.h5_path} ({name})"))
        return values


def _rows(key: Any, shape: tuple[int, ...]) -> tuple[int, int, Any] | None:
    """Where ``key`` selects whole rows of the first axis: their ``[lo, hi)`` and the key that
    gives the result from those rows' values; None for every row (or a key of another kind)."""
    if not shape:
        return None
    parts = key if isinstance(key, tuple) else (key,)
    if not parts or parts[0] is Ellipsis:
        return None
    head, rest = parts[0], parts[1:]
    if isinstance(head, (int, np.integer)) and not isinstance(head, bool):
        row = int(head) + shape[0] if int(head) < 0 else int(head)
        if not 0 <= row < shape[0]:
            raise IndexError(f"index {int(head)} is out of bounds for axis 0 with size {shape[0]}")
        return row, row + 1, (0, *rest)
    if isinstance(head, slice) and head.step in (None, 1):
        lo, hi, _ = head.indices(shape[0])
        hi = max(lo, hi)
        return (lo, hi, (slice(None), *rest)) if (lo, hi) != (0, shape[0]) else None
    return None


def _nodes(file: Any, sequence: np.ndarray) -> np.ndarray:
    out = np.empty(sequence.shape, dtype=object)
    for i, raw in enumerate(sequence.tolist()):
        out[i] = file.node(raw.decode("utf-8")) if raw else None
    return out


DATASET_KINDS.append((is_ragged, RaggedDataset))

__all__ = ["RaggedDataset", "is_ragged"]
