"""HDF5 attributes → JSON values, without loss.

Arrays stay lists whatever their size (``column-order: ["gene"]`` must not
become ``"gene"``), bytes become text where they are UTF-8, numpy scalars become JSON numbers,
object references become ``{"_REFERENCE": {"source": ".", "path": ...}}`` and
compound values become objects. NaN and ±Infinity are bare JSON tokens in the
released convention and strings in the proposal's. An attribute that cannot be
converted raises :class:`~h5lens.errors.UnsupportedFeatureError` naming it.

Byte strings that are not UTF-8 text (HDF5 strings of the ASCII character set may
hold any bytes; h5py gives fixed-length ones as ``bytes`` and variable-length ones
as ``str`` with lone surrogates) are stored as ``{"_BYTES": <base64>}``, or for an
array ``{"_BYTES": [<base64>, ...]}`` nested like the array: one decision per
attribute, so the JSON stays valid UTF-8 and the bytes come back exactly.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.format import convention
from h5lens.format.dtypes_forms import ragged_primitive, record_type_name, vlen_type_name
from h5lens.format.long_double import to_hex
from h5lens.scan.attr_headers import AttributeHeaders
from h5lens.scan.hdf5.attributes import NULL, HeaderAttribute

ResolveRef = Callable[[h5py.Reference], str | None]



class _NotText(Exception):
    """Raised inside a conversion when a string value is not UTF-8 text."""


def read_attributes(
    obj: h5py.HLObject,
    h5_path: str,
    resolve: ResolveRef,
    *,
    nan_as_string: bool = False,
    types: dict[str, str] | None = None,
    before_variable: Callable[[], None] | None = None,
    headers: AttributeHeaders | None = None,
    refused: dict[str, UnsupportedFeatureError] | None = None,
) -> dict[str, Any]:
    """All attributes of ``obj`` as JSON-ready values, in the file's order; each opened once.

    ``types`` receives :func:`attribute_types`'s answer from the same pass;
    ``before_variable`` runs before the first variable-length value is read (the check of
    the global heap collections libhdf5 would parse). ``headers`` reads the values of the
    common types from the object header instead of through h5py (the same values:
    :mod:`h5lens.scan.hdf5.attributes`); h5py reads every other one. With ``refused``, an
    attribute that cannot be read or converted is left out and its error put there (by
    name) instead of raised (``skip_unreadable``)."""
    out: dict[str, Any] = {}
    listed = _from_header(obj, headers)
    names = obj.attrs.keys() if listed is None else listed.keys()
    opened: list[tuple[str, str, h5py.h5a.AttrID | HeaderAttribute, np.dtype]] = []

    def refuse(name: str, error: UnsupportedFeatureError) -> None:
        if refused is None:
            raise error from error.__cause__  # the refusal alone, as when it was raised
        # a name that is not UTF-8 text is recorded with its undecodable bytes escaped
        refused[name.encode("utf-8", "backslashreplace").decode("utf-8")] = error

    for name in names:
        where = f"{h5_path} attribute {name!r}"
        if not _is_text(name):
            refuse(name, UnsupportedFeatureError(f"{h5_path}: an attribute name is not UTF-8 text ({name!r})"))
            continue
        if name in convention.RESERVED_ATTRIBUTES:
            refuse(name, UnsupportedFeatureError(
                f"{where}: the unified zarr convention gives this name a meaning of its own, so the "
                "attribute would be overwritten or misread"
            ))  # fmt: skip
            continue
        found = None if listed is None else listed[name]
        if found is not None and found.dtype is not None:
            opened.append((name, where, found, found.dtype))
            continue
        try:
            attr = h5py.h5a.open(obj.id, name.encode("utf-8"))
            dtype = attr.dtype
        except (OSError, TypeError, ValueError, RuntimeError, KeyError) as e:
            refuse(name, UnsupportedFeatureError(f"{where}: h5py cannot read it ({e})"))
            continue
        opened.append((name, where, attr, dtype))
    if before_variable is not None and any(
        not isinstance(attr, HeaderAttribute) and _variable(dtype) for _, _, attr, dtype in opened
    ):
        before_variable()
    for name, where, attr, dtype in opened:
        try:
            if isinstance(attr, HeaderAttribute):  # read from the header
                converted, type_name = _header_json(attr, where, resolve, nan_as_string)
                if types is not None and type_name is not None:
                    types[name] = type_name
                out[name] = converted
                continue
            if types is not None:
                type_name = _type_name(dtype, attr)
                if type_name is not None:
                    types[name] = type_name
            try:
                value = _value(attr, dtype)
            except (OSError, TypeError, ValueError, RuntimeError) as e:
                raise UnsupportedFeatureError(f"{where}: h5py cannot read it ({e})") from None
            converted = to_json(value, where, resolve)
        except UnsupportedFeatureError as e:
            refuse(name, e)
            continue
        out[name] = _nan_strings(converted) if nan_as_string else converted
    return out


def header_attributes_json(
    parsed: list[HeaderAttribute],
    h5_path: str,
    resolve: ResolveRef,
    *,
    nan_as_string: bool = False,
    types: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """:func:`read_attributes`'s answer for an object whose attributes were all parsed from
    its header (``parsed``, in h5py's order), with no h5py object at hand; None where
    h5py's path must read the object (a type the header parse leaves to h5py, a name that
    is not UTF-8 text or that the convention reserves: h5py's path says why)."""
    if any(attribute.dtype is None for attribute in parsed):
        return None
    listed = _named(parsed)
    if listed is None:
        return None
    out: dict[str, Any] = {}
    found_types: dict[str, str] = {}
    for name, attribute in listed.items():
        converted, type_name = _header_json(attribute, f"{h5_path} attribute {name!r}", resolve, nan_as_string)
        if type_name is not None:
            found_types[name] = type_name
        out[name] = converted
    if types is not None:
        types.update(found_types)
    return out


# JSON value and type name of attributes read from headers, per distinct attribute message
# (the same MATLAB class or path recurs on thousands of nodes): scalars only, since lists
# and objects go into documents that may be changed afterwards.
_HEADER_JSON: dict[tuple[HeaderAttribute, bool], tuple[Any, str | None]] = {}
_HEADER_JSON_MAX = 8192
_HEADER_JSON_BYTES = 1024  # a long string's value is not kept (nor its attribute, by the key)
# (attributes not ``shared``, parsed afresh or read from the global heap, are never kept)
_HEADER_TYPES: dict[np.dtype, Any] = {}  # the type names of the few numeric dtypes headers give
_UNKNOWN = object()


def _header_json(
    attribute: HeaderAttribute, where: str, resolve: ResolveRef, nan_as_string: bool
) -> tuple[Any, str | None]:
    key = (attribute, nan_as_string)
    found = _HEADER_JSON.get(key)
    if found is not None:
        return found
    assert attribute.dtype is not None
    value = h5py.Empty(attribute.dtype) if attribute.value is NULL else attribute.value
    converted = to_json(value, where, resolve)
    if attribute.shape is not None:  # a variable-length value: its type name may need its shape
        type_name = _type_name(attribute.dtype, None, attribute.shape)
    else:
        type_name = _HEADER_TYPES.get(attribute.dtype, _UNKNOWN)
        if type_name is _UNKNOWN:
            type_name = _HEADER_TYPES[attribute.dtype] = _type_name(attribute.dtype, None)
    made = (_nan_strings(converted) if nan_as_string else converted, type_name)
    if not attribute.shared:
        return made
    if not isinstance(made[0], (list, dict)) and getattr(attribute.value, "nbytes", 0) <= _HEADER_JSON_BYTES:
        if len(_HEADER_JSON) >= _HEADER_JSON_MAX:
            _HEADER_JSON.clear()
        _HEADER_JSON[key] = made
    return made


def _from_header(obj: h5py.HLObject, headers: AttributeHeaders | None) -> dict[str, HeaderAttribute] | None:
    """``obj``'s attributes as its header lists them (name -> attribute, in h5py's order), or
    None for h5py's path: no header reader, a header it cannot read, or a name h5py's path
    refuses (not UTF-8, reserved), so that the refusal is h5py's path's, word for word."""
    if headers is None:
        return None
    parsed = headers.attributes(obj)
    if parsed is None:
        return None
    if any(attribute.dtype is None for attribute in parsed):
        # h5py reads some of them anyway: its listing (a type libhdf5 refuses to decode fails
        # it, as on h5py's path), which must also be the header's, name for name
        names = [n if isinstance(n, bytes) else n.encode("utf-8") for n in obj.attrs.keys()]
        if names != [attribute.name for attribute in parsed]:
            return None
    return _named(parsed)


def _named(parsed: list[HeaderAttribute]) -> dict[str, HeaderAttribute] | None:
    """Header attributes by name, in their order; None if a name is not UTF-8 text or is one
    the convention reserves (h5py's path refuses those, in its own words)."""
    listed: dict[str, HeaderAttribute] = {}
    for attribute in parsed:
        try:
            name = attribute.name.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if name in convention.RESERVED_ATTRIBUTES:
            return None
        listed[name] = attribute
    return listed


def _variable(dtype: np.dtype) -> bool:
    if dtype.names is not None:
        return any(_variable(dtype.fields[n][0]) for n in dtype.names)  # type: ignore[index]
    base = dtype.base
    return h5py.check_vlen_dtype(base) is not None or (
        (info := h5py.check_string_dtype(base)) is not None and info.length is None
    ) or h5py.check_ref_dtype(base) is not None


def _value(attr: h5py.h5a.AttrID, dtype: np.dtype) -> Any:
    """The attribute's value exactly as h5py's ``obj.attrs[name]`` gives it (the same steps,
    through h5py's low-level API, on the attribute already open)."""
    shape = attr.shape
    if shape is None:
        return h5py.Empty(dtype)
    memory_type = h5py.h5t.py_create(dtype)
    if dtype.subdtype is not None:  # numpy has no top-level array type: its shape joins the attribute's
        dtype, extra = dtype.subdtype
        shape = tuple(shape) + tuple(extra)
    values = np.zeros(shape, dtype=dtype, order="C")
    attr.read(values, mtype=memory_type)
    info = h5py.check_string_dtype(dtype)
    if info is not None and info.length is None:
        values = np.array([b.decode("utf-8", "surrogateescape") for b in values.flat], dtype=dtype).reshape(values.shape)
    return values[()] if values.ndim == 0 else values


def attribute_types(obj: h5py.HLObject) -> dict[str, str]:
    """The numeric types of ``obj``'s attributes that their JSON values do not say (a float32
    ``scale_factor`` reads back from JSON as float64): name -> numpy type name, one of
    :data:`~h5lens.manifest.tables.ATTRIBUTE_TYPES`. Read from the attributes' types alone."""
    out: dict[str, str] = {}
    for name in obj.attrs.keys():
        try:
            attr = obj.attrs.get_id(name)
            dtype = attr.dtype
        except (OSError, TypeError, ValueError, RuntimeError, KeyError):
            continue  # read_attributes says what is wrong with it
        found = _type_name(dtype, attr)
        if found is not None:
            out[name] = found
    return out


def _type_name(
    dtype: np.dtype, attr: h5py.h5a.AttrID | None, shape: tuple[int, ...] | None = None
) -> str | None:
    """``attr`` or ``shape`` (needed for sequences only): an attribute read through h5py,
    or the shape of one read from its header."""
    from h5lens.manifest.tables import ATTRIBUTE_TYPES, TIME_ATTRIBUTE_TYPES

    vlen = h5py.check_vlen_dtype(dtype)
    if vlen is not None and h5py.check_string_dtype(dtype) is None:
        if shape is None:
            assert attr is not None, "a sequence read from its header has its shape"
            shape = attr.shape or ()
        primitive = ragged_primitive(vlen) if vlen.names is None else record_type_name(vlen)
        return None if primitive is None else vlen_type_name(primitive, len(shape))
    base = dtype.base
    if base.names is not None:
        return record_type_name(base)
    if _long_double(base):
        return "clongdouble" if base.kind == "c" else "longdouble"  # their exact text
    if base.kind == "V":
        return f"V{base.itemsize}"  # opaque: the JSON holds its bytes
    if base.kind in "iufc":
        found = base.newbyteorder("=").name
        return found if found in ATTRIBUTE_TYPES else None
    if base.kind in "Mm" and str(base.newbyteorder("=")) in TIME_ATTRIBUTE_TYPES:
        return str(base.newbyteorder("="))
    return None


def to_json(value: Any, where: str, resolve: ResolveRef) -> Any:
    """Convert one value as h5py returns it."""
    try:
        return _to_json(value, where, resolve)
    except _NotText:
        return {convention.BYTES: _nested_base64(value)}


def _to_json(value: Any, where: str, resolve: ResolveRef) -> Any:
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, str):
        if not _is_text(value):
            raise _NotText
        return value
    if isinstance(value, bytes):
        return _decode(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (np.floating, np.complexfloating)) and _long_double(value.dtype):
        return _long_double_text(value)  # float64 would lose bits: the exact text
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (complex, np.complexfloating)):
        return [float(value.real), float(value.imag)]  # the type is in attribute_types
    if isinstance(value, (np.datetime64, np.timedelta64)):
        return int(value.astype(np.int64))  # the count in its unit; the type is in attribute_types
    if isinstance(value, h5py.RegionReference):
        region = getattr(resolve, "region", None)  # h5lens.scan.regions.Resolver
        if region is None:
            raise UnsupportedFeatureError(f"{where}: region references need the file they select from")
        found = region(value, where)
        return None if found is None else {convention.REGION_REFERENCE: found}
    if isinstance(value, h5py.Reference):
        return _reference(value, where, resolve)
    if isinstance(value, np.void):
        if value.dtype.names is None:  # opaque: its bytes (the type is in attribute_types)
            return {convention.BYTES: base64.b64encode(value.tobytes()).decode("ascii")}
        # each field decides for itself: a byte-string field becomes {"_BYTES": ...}
        return {name: to_json(value[name], where, resolve) for name in value.dtype.names}
    if isinstance(value, np.ndarray):
        return _array(value, where, resolve)
    raise UnsupportedFeatureError(f"{where}: values of type {type(value).__name__} have no JSON form")


def _array(value: np.ndarray, where: str, resolve: ResolveRef) -> Any:
    if value.ndim == 0:
        return _to_json(value[()], where, resolve)
    kind = value.dtype.kind
    if _long_double(value.dtype):
        return _nested(value, _long_double_text)
    if kind in "iufb":
        return value.tolist()
    if kind == "c":
        return np.stack([value.real, value.imag], axis=-1).astype(np.float64).tolist()
    if kind in "Mm":
        return value.astype(np.int64).tolist()
    if kind == "S":
        return _nested(value, lambda v: _decode(bytes(v)))
    if kind == "U":
        return value.tolist()
    if kind == "V" and value.dtype.names is None:  # opaque values: their bytes
        return {convention.BYTES: _nested(value, lambda v: base64.b64encode(v.tobytes()).decode("ascii"))}
    if value.dtype.names is not None:  # records: each one's fields decide for themselves
        return _nested(value, lambda v: to_json(v, where, resolve))
    return _nested(value, lambda v: _to_json(v, where, resolve))


def _long_double(dtype: np.dtype) -> bool:
    return (dtype.kind == "f" and dtype.itemsize > 8) or (dtype.kind == "c" and dtype.itemsize > 16)


def _long_double_text(value: Any) -> Any:
    """A long double's exact text (h5lens.format.long_double), a complex one's as [real, imaginary]."""
    if np.iscomplexobj(value):
        return [to_hex(value.real), to_hex(value.imag)]
    return to_hex(value)


def _nested(value: np.ndarray, convert: Callable[[Any], Any]) -> list[Any]:
    if value.ndim == 1:
        return [convert(v) for v in value]
    return [_nested(row, convert) for row in value]


def _decode(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _NotText from None


def _is_text(value: str) -> bool:
    """False for h5py's reading of bytes that are not UTF-8 (lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_bytes(value: Any) -> bytes:
    """The bytes HDF5 holds for a string value as h5py returns it."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return bytes(value)


def _nested_base64(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return [_nested_base64(v) for v in value]
    if isinstance(value, np.ndarray):
        value = value[()]
    return base64.b64encode(as_bytes(value)).decode("ascii")


def _reference(ref: h5py.Reference, where: str, resolve: ResolveRef) -> Any:
    if not ref:
        return None  # a null reference
    path = resolve(ref)
    if path is None:
        raise UnsupportedFeatureError(f"{where}: the object reference points at nothing reachable")
    return {convention.REFERENCE: {"source": ".", "path": path}}


def _nan_strings(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return convention.non_finite_text(value)
    if isinstance(value, list):
        return [_nan_strings(v) for v in value]
    if isinstance(value, dict):
        return {k: _nan_strings(v) for k, v in value.items()}
    return value
