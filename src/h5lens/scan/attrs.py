"""HDF5 attributes → JSON values, without loss.

Arrays stay lists whatever their size (``column-order: ["gene"]`` must not
become ``"gene"``), bytes become text, numpy scalars become JSON numbers,
object references become ``{"_REFERENCE": {"source": ".", "path": ...}}`` and
compound values become objects. NaN and ±Infinity are bare JSON tokens in the
released convention and strings in the proposal's. An attribute that cannot be
converted raises :class:`~h5lens.errors.UnsupportedFeatureError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError

ResolveRef = Callable[[h5py.Reference], str | None]

NAN_STRINGS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def read_attributes(
    obj: h5py.HLObject, h5_path: str, resolve: ResolveRef, *, nan_as_string: bool = False
) -> dict[str, Any]:
    """All attributes of ``obj`` as JSON-ready values, in the file's order."""
    out: dict[str, Any] = {}
    for name in obj.attrs.keys():
        where = f"{h5_path} attribute {name!r}"
        try:
            value = obj.attrs[name]
        except (OSError, TypeError, ValueError, RuntimeError) as e:
            raise UnsupportedFeatureError(f"{where}: h5py cannot read it ({e})") from None
        converted = to_json(value, where, resolve)
        out[name] = _nan_strings(converted) if nan_as_string else converted
    return out


def to_json(value: Any, where: str, resolve: ResolveRef) -> Any:
    """Convert one value as h5py returns it."""
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return _decode(value, where)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (complex, np.complexfloating)):
        raise UnsupportedFeatureError(f"{where}: complex values have no JSON form")
    if isinstance(value, h5py.RegionReference):
        raise UnsupportedFeatureError(f"{where}: region references have no form in the convention")
    if isinstance(value, h5py.Reference):
        return _reference(value, where, resolve)
    if isinstance(value, np.void):
        if value.dtype.names is None:
            raise UnsupportedFeatureError(f"{where}: opaque values have no JSON form")
        return {name: to_json(value[name], where, resolve) for name in value.dtype.names}
    if isinstance(value, np.ndarray):
        return _array(value, where, resolve)
    raise UnsupportedFeatureError(f"{where}: values of type {type(value).__name__} have no JSON form")


def _array(value: np.ndarray, where: str, resolve: ResolveRef) -> Any:
    if value.ndim == 0:
        return to_json(value[()], where, resolve)
    kind = value.dtype.kind
    if kind in "iufb":
        return value.tolist()
    if kind == "S":
        return _nested(value, lambda v: _decode(bytes(v), where))
    if kind == "U":
        return value.tolist()
    return _nested(value, lambda v: to_json(v, where, resolve))


def _nested(value: np.ndarray, convert: Callable[[Any], Any]) -> list[Any]:
    if value.ndim == 1:
        return [convert(v) for v in value]
    return [_nested(row, convert) for row in value]


def _decode(value: bytes, where: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsupportedFeatureError(f"{where}: bytes that are not UTF-8 text have no JSON form") from None


def _reference(ref: h5py.Reference, where: str, resolve: ResolveRef) -> Any:
    if not ref:
        return None  # a null reference
    path = resolve(ref)
    if path is None:
        raise UnsupportedFeatureError(f"{where}: the object reference points at nothing reachable")
    return {"_REFERENCE": {"source": ".", "path": path}}


def _nan_strings(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return NAN_STRINGS[repr(value)]
    if isinstance(value, list):
        return [_nan_strings(v) for v in value]
    if isinstance(value, dict):
        return {k: _nan_strings(v) for k, v in value.items()}
    return value
