"""Attributes with the HDF5 types their JSON values lose.

A zarr attribute is JSON: a float32 ``scale_factor`` comes back as a Python float (read as
float64), an int16 ``_FillValue`` as a Python int. xarray's CF decoding takes the decoded
dtype from ``scale_factor`` / ``add_offset``, so a netCDF variable packed as int16 with
float32 factors (the usual packing of climate archives) decodes to float64, and to other
numbers, where ``engine="h5netcdf"`` gives float32. The manifest records each such
attribute's numpy type (``Manifest.attribute_types``); h5lens's readers (the xarray engine,
navigation) give the values that type, as h5py gives them: numpy scalars, numpy arrays for
lists. Readers that take attributes from zarr (xarray's zarr engine, anndata, hdmf-zarr)
see the JSON values.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.format.dtypes_forms import parse_record_type, parse_vlen_type
from h5lens.format.long_double import from_hex


def netcdf_fill_value(value: Any, array_type: Any) -> Any:
    """A float ``_FillValue`` the netCDF profile wrote as xarray's zarr reader decodes it
    (the base64 of a little-endian double), as the array's float type; else ``value``."""
    if not isinstance(value, str) or array_type not in ("float16", "float32", "float64"):
        return value
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value
    if len(raw) != 8:
        return value
    return np.dtype(array_type).type(struct.unpack("<d", raw)[0])


def typed(value: Any, type_name: str) -> Any:
    """A JSON attribute value as numpy type ``type_name``: a scalar, or an array for a list
    (values with no number in them, such as None or an object, stay as they are)."""
    vlen = parse_vlen_type(type_name)
    if vlen is not None:
        return _ragged(value, *vlen)
    record = parse_record_type(type_name)
    if record is not None:
        return _records(value, record)
    if type_name in ("longdouble", "clongdouble"):
        return _long_doubles(value, type_name == "clongdouble")
    dtype = np.dtype(type_name)
    if isinstance(value, bool) or value is None:
        return value
    if dtype.kind == "V":  # opaque: the bytes, as h5py's np.void values
        return _opaque(value, dtype)
    if dtype.kind in "Mm":  # counts in the type's unit
        try:
            counts = np.asarray(value, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return value
        times = counts.view(dtype)
        return times[()] if times.ndim == 0 else times
    if dtype.kind == "c":  # [real, imaginary] pairs
        try:
            pairs = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return value
        if pairs.ndim == 0 or pairs.shape[-1] != 2:
            return value
        numbers = (pairs[..., 0] + 1j * pairs[..., 1]).astype(dtype)
        return numbers[()] if numbers.ndim == 0 else numbers
    if isinstance(value, (int, float, str)):
        try:
            return dtype.type(value)
        except (TypeError, ValueError, OverflowError):
            return value
    if isinstance(value, list):
        try:
            return np.array(value, dtype=dtype)
        except (TypeError, ValueError, OverflowError):
            return value
    return value


def _long_doubles(value: Any, pairs: bool) -> Any:
    """Long doubles' exact text (nested in lists like the array; a complex one a
    [real, imaginary] pair) as np.longdouble / np.clongdouble values; anything else as it
    is. A value this platform's long double cannot hold raises UnsupportedFeatureError."""
    try:
        texts = np.array(value, dtype=object)
    except ValueError:
        return value
    if not all(isinstance(text, str) for text in texts.flat) or (pairs and (texts.ndim == 0 or texts.shape[-1] != 2)):
        return value
    try:
        numbers = np.array([from_hex(text) for text in texts.flat], dtype=np.longdouble).reshape(texts.shape)
    except UnsupportedFeatureError:
        raise
    except ValueError:
        return value
    out = numbers
    if pairs:
        out = np.empty(texts.shape[:-1], dtype=np.clongdouble)
        out.real, out.imag = numbers[..., 0], numbers[..., 1]
    return out[()] if out.ndim == 0 else out


def _opaque(value: Any, dtype: np.dtype) -> Any:
    try:
        if isinstance(value, bytes):
            return np.void(value) if len(value) == dtype.itemsize else value
        return np.array(value, dtype=dtype) if isinstance(value, list) else value
    except (TypeError, ValueError):
        return value


def _records(value: Any, dtype: np.dtype) -> Any:
    """JSON objects of field values (nested in lists like the array) as h5py's compound
    values: ``np.void`` for one, a structured array for lists; anything else as it is."""
    names = dtype.names or ()

    def row(item: Any) -> Any:
        if isinstance(item, dict):
            if set(item) != set(names):
                raise ValueError("fields differ")
            return tuple(item[name] for name in names)
        if isinstance(item, list):
            return [row(i) for i in item]
        raise ValueError("not a record")

    try:
        values = np.array(row(value), dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        return value
    return values[()] if values.ndim == 0 else values


def _ragged(value: Any, base: np.dtype, ndim: int) -> Any:
    """Nested lists as h5py's object array (of ``ndim`` axes) of ``base`` arrays."""
    shape: list[int] = []
    probe = value
    for _ in range(ndim):
        if not isinstance(probe, list):
            return value
        shape.append(len(probe))
        probe = probe[0] if probe else []

    def sequence(leaf: Any) -> np.ndarray:
        if base.names is None:
            return np.asarray(leaf, dtype=base)
        found = _records(leaf, base)
        if not isinstance(found, np.ndarray) or found.ndim != 1:
            raise ValueError("not a sequence of records")
        return found

    try:
        if ndim == 0:
            return sequence(value)
        out = np.empty(shape, dtype=object)
        for index in np.ndindex(*shape):
            leaf = value
            for i in index:
                leaf = leaf[i]
            out[index] = sequence(leaf)
    except (TypeError, ValueError, IndexError, OverflowError):
        return value
    return out


def typed_attributes(
    types: Mapping[str, str] | None, attributes: Mapping[str, Any], *, as_h5py: bool = False
) -> dict[str, Any]:
    """``attributes`` with the recorded ``types`` (attribute name -> numpy type name) applied.
    ``as_h5py``: numbers with no recorded type as h5py reads them too (:func:`_unrecorded`)."""
    types = types or {}
    return {
        name: typed(value, types[name]) if name in types else _unrecorded(value) if as_h5py else value
        for name, value in attributes.items()
    }


def _unrecorded(value: Any) -> Any:
    """A JSON number, or a flat list of them, whose type the manifest does not record: the
    attribute was int64 or float64 (every other numeric type is recorded), which h5py reads
    as ``np.int64`` / ``np.float64`` scalars, or arrays of those."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return np.int64(value) if -(2**63) <= value < 2**63 else value
    if isinstance(value, float):
        return np.float64(value)
    numbers = isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    if numbers and value:
        try:
            return np.array(value, dtype=np.float64 if any(isinstance(v, float) for v in value) else np.int64)
        except OverflowError:
            return value
    return value


__all__ = ["typed", "typed_attributes"]
