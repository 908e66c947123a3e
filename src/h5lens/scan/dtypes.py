"""HDF5 element types → zarr v3 ``data_type``, ``fill_value`` and storage plan.

Each HDF5 type falls in one of three groups:

* **raw**: the bytes HDF5 stores are exactly what a zarr v3 ``bytes`` codec
  decodes (numbers, bool, fixed-length strings, opaque, packed compounds; long
  doubles, alone, in complex pairs or in compounds, as ``raw_bytes`` described by
  ``_FLOAT_LAYOUT``): chunks are referenced by byte range;
* **materialised**: the values live elsewhere (variable-length strings in the
  global heap, object references) or must be rewritten (compounds with
  variable-length or reference fields, padded compounds): h5py reads them and
  h5lens stores them inline;
* **refused**: nothing in zarr v3 can hold them without loss (region
  references inside compounds, variable-length members beside others h5lens's
  record form has no form for): :class:`~h5lens.errors.UnsupportedFeatureError`
  names the path.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.format.dtypes_forms import restore_array_fields, struct_form
from h5lens.format.long_double import (
    FloatFields,
    FloatLayout,
    bits_dtype,
    holds_long_double,
    is_long_double,
    native_for,
    to_bits,
)

# _DTYPE names as hdmf-zarr writes them: numpy type names, "str", "object_reference".
DTYPE_STR = "str"
DTYPE_OBJECT_REFERENCE = "object_reference"
DTYPE_REGION_REFERENCE = "region_reference"


@dataclass(frozen=True)
class TypePlan:
    """How one HDF5 element type is written to zarr v3."""

    # zarr v3 data_type JSON (a name or a {"name", "configuration"} dict); None until with_layout
    # for long doubles and compounds holding them (their layouts are part of the type)
    data_type: Any
    # The dtype zarr reads back (native byte order). None (with data_type None) for a compound
    # that is rewritten: its field widths come from its values (materialize.compound_plan).
    numpy_dtype: np.dtype | None
    endian: str | None  # "little" / "big" for the bytes codec, None for 1-byte and non-raw types
    raw: bool  # the stored HDF5 bytes decode as-is
    kind: str  # "numeric", "bool", "bytes", "string", "reference", "region", "compound", "opaque", "enum",
    # "float-bits" (np.longdouble, kept as the stored bits)
    dtype_attr: str | None  # value of the _DTYPE attribute, None for compounds
    extra_shape: tuple[int, ...] = ()  # HDF5 array element types add trailing dimensions
    reference_fields: tuple[str, ...] = ()
    enum: dict[str, int] | None = None
    string_fields: tuple[str, ...] = field(default=())  # compound fields re-stored as U{N}
    # array->array codecs before the bytes codec that give the stored elements h5py's values
    # (bit fields, space padding: h5lens.scan.hdf5_types)
    array_codecs: tuple[dict[str, Any], ...] = ()
    # the stored elements are in a layout only libhdf5 converts (a user-defined float, a
    # compound with such members): h5py's values are stored, as for a filter without a codec
    converted: bool = False
    # compound members that are arrays, stored as nested records: ((field path), (shape)) each,
    # the _ARRAY_FIELDS attribute (h5lens.format.dtypes_forms)
    array_fields: tuple[tuple[Any, ...], ...] = ()
    # floats h5py reads as np.longdouble: the stored bits' layout (h5lens.format.long_double), the
    # _FLOAT_LAYOUT attribute; the elements are zarr raw_bytes of its size
    float_layout: FloatLayout | None = None
    # float_layout is this platform's: h5py's values are copied as their bits, not the stored ones
    values_as_bits: bool = False
    # compounds: their long double members' layouts by field path (raw_bytes fields), the
    # _FLOAT_LAYOUT attribute; the stored ones where the records are referenced, else this platform's
    float_fields: FloatFields = ()

    def with_layout(self, layout: Any) -> TypePlan:
        """This plan for elements stored as ``layout`` (:class:`h5lens.scan.hdf5_types.StoredLayout`)."""
        from dataclasses import replace

        if layout.float_layout is not None:  # the stored bits, referenced as they are
            bits = layout.float_layout
            size = bits.element_size
            stored = replace(self, data_type=raw_bytes_json(size), numpy_dtype=np.dtype(f"V{size}"),
                             raw=True, converted=False, float_layout=bits)  # fmt: skip
            if layout.float_values:  # the stored bytes are not the elements: h5py's values are copied
                return replace(stored, raw=False, converted=True, values_as_bits=True)
            if self.numpy_dtype is not None and self.numpy_dtype.itemsize == size:
                return stored
            # h5py's elements are wider than the stored ones: the stored bits are copied
            return replace(stored, raw=False, converted=True)
        if layout.float_fields:
            if self.raw and layout.as_read:  # records referenced: their members' stored bits
                return replace(self, data_type=structured_json(self.known_dtype()), float_fields=layout.float_fields)
            # records rewritten from h5py's values: their long doubles are this platform's
            native = tuple(
                (where, native_for(np.dtype(np.clongdouble if found.complex else np.longdouble), ""))
                for where, found in layout.float_fields
            )
            return replace(self, raw=False, converted=self.raw or self.converted, float_fields=native)
        if not layout.as_read:
            return replace(self, raw=False, converted=True) if self.raw else self
        return replace(self, array_codecs=tuple(layout.codecs)) if layout.codecs and self.raw else self

    def array_fields_json(self) -> list[list[list[Any]]]:
        """The ``_ARRAY_FIELDS`` attribute: ``[[field path], [shape]]`` per array member."""
        return [[list(where), list(shape)] for where, shape in self.array_fields]

    def known_dtype(self) -> np.dtype:
        """``numpy_dtype``, which a compound to be rewritten has only after compound_plan."""
        if self.numpy_dtype is None:
            raise ValueError(f"a {self.kind} type plan without its dtype: compound_plan gives it one")
        return self.numpy_dtype


# Variable-length strings that are not UTF-8 text (decided per dataset, once its values are read).
BYTE_STRING_PLAN = TypePlan("variable_length_bytes", np.dtype("O"), None, False, "vlen-bytes", "bytes")


def _zdtype(dtype: np.dtype) -> Any:
    # zarr's lookup tries every data type in turn (0.2 ms): once per dtype, where equal
    # dtypes are the same type (h5py's metadata, which equality ignores, rules the others out)
    if dtype.metadata is None and not dtype.hasobject:
        return _zdtype_of_plain(dtype)
    return _zdtype_uncached(dtype)


@functools.lru_cache(maxsize=1024)
def _zdtype_of_plain(dtype: np.dtype) -> Any:
    return _zdtype_uncached(dtype)


def _zdtype_uncached(dtype: np.dtype) -> Any:
    from zarr.core.dtype import get_data_type_from_native_dtype

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_data_type_from_native_dtype(dtype)


def _endian(dtype: np.dtype) -> str | None:
    if dtype.itemsize <= 1 or dtype.byteorder == "|":
        return None
    if dtype.byteorder == "=":
        return "little" if np.little_endian else "big"
    return "little" if dtype.byteorder == "<" else "big"


def plan_type(dtype: np.dtype, path: str) -> TypePlan:
    """Return how to store elements of h5py dtype ``dtype`` (the dataset at ``path``)."""
    if dtype.subdtype is not None:
        base, extra = dtype.subdtype
        inner = plan_type(base, path)
        return TypePlan(**{**inner.__dict__, "extra_shape": tuple(extra) + inner.extra_shape})

    string_info = h5py.check_string_dtype(dtype)
    if string_info is not None:
        if string_info.length is None:
            return TypePlan("string", np.dtypes.StringDType(), None, False, "string", DTYPE_STR)
        return TypePlan(
            {"name": "null_terminated_bytes", "configuration": {"length_bytes": dtype.itemsize}},
            np.dtype(f"S{dtype.itemsize}"),
            None,
            True,
            "bytes",
            "bytes",
        )

    ref_class = h5py.check_ref_dtype(dtype)
    if ref_class is h5py.RegionReference:  # the convention's _REGION_REFERENCE objects, as JSON text
        return TypePlan("string", np.dtypes.StringDType(), None, False, "region", DTYPE_REGION_REFERENCE)
    if ref_class is h5py.Reference:
        return TypePlan(
            "string", np.dtypes.StringDType(), None, False, "reference", DTYPE_OBJECT_REFERENCE
        )

    vlen_base = h5py.check_vlen_dtype(dtype)
    if vlen_base is not None:
        if vlen_base == np.dtype("uint8") or vlen_base == np.dtype("int8"):
            return TypePlan(
                "variable_length_bytes", np.dtype("O"), None, False, "vlen-bytes", "bytes"
            )
        raise UnsupportedFeatureError(
            f"{path}: variable-length sequences of {vlen_base} (ragged arrays) have no zarr v3 data type"
        )

    if dtype.fields is not None:
        return _plan_compound(dtype, path)

    if dtype.kind == "b":
        return TypePlan("bool", np.dtype(bool), None, True, "bool", "bool")

    if is_long_double(dtype):
        # np.longdouble, np.clongdouble: zarr has no such type; with_layout makes it the stored bits (raw_bytes)
        return TypePlan(None, np.dtype(f"V{dtype.itemsize}"), None, False, "float-bits", "bytes", converted=True)

    if dtype.kind in "iuf":
        enum = h5py.check_enum_dtype(dtype)
        native = dtype.newbyteorder("=")
        return TypePlan(
            native.name,
            native,
            _endian(dtype),
            True,
            "enum" if enum is not None else "numeric",
            native.name,
            enum={str(k): int(v) for k, v in enum.items()} if enum is not None else None,
        )
    if dtype.kind == "c":
        native = dtype.newbyteorder("=")
        return TypePlan(native.name, native, _endian(dtype), True, "numeric", native.name)
    if dtype.kind in "Mm":  # h5py.opaque_dtype(np.datetime64 / timedelta64): 8-byte integers, tagged
        native = dtype.newbyteorder("=")
        return TypePlan(_zdtype(native).to_json(zarr_format=3), native, _endian(dtype), True, "numeric", native.name)
    if dtype.kind == "V":
        return TypePlan(
            raw_bytes_json(dtype.itemsize),
            np.dtype(f"V{dtype.itemsize}"),
            None,
            True,
            "opaque",
            "bytes",
        )
    raise UnsupportedFeatureError(f"{path}: HDF5 type {dtype!r} has no zarr v3 data type")


def values_bits_plan(dtype: np.dtype, where: str) -> TypePlan:
    """How h5py's ``np.longdouble`` / ``np.clongdouble`` values made in memory (a ragged
    array's buffer) are written: their bits, raw_bytes with this platform's layout."""
    layout = native_for(dtype, where)
    return TypePlan(raw_bytes_json(dtype.itemsize), np.dtype(f"V{dtype.itemsize}"), None, False, "float-bits", "bytes",
                    converted=True, float_layout=layout, values_as_bits=True)  # fmt: skip


def raw_bytes_json(size: int) -> dict[str, Any]:
    """zarr's data type of ``size`` opaque bytes (zarr-python 3 knows no ``r<bits>``)."""
    return {"name": "raw_bytes", "configuration": {"length_bytes": size}}


def fields_of(dtype: np.dtype) -> list[tuple[str, np.dtype, int]]:
    """(name, dtype, offset) of each field of the structured ``dtype``, in order."""
    names, fields = dtype.names, dtype.fields
    if names is None or fields is None:
        raise TypeError(f"{dtype} is not a structured dtype")
    return [(name, fields[name][0], fields[name][1]) for name in names]


def _field_json(dtype: np.dtype) -> Any:
    return _zdtype(dtype).to_json(zarr_format=3)


def _plan_compound(dtype: np.dtype, path: str) -> TypePlan:
    """Compounds become zarr v3 ``structured``; packed ones are referenced as they are."""
    raw = True
    reference_fields: list[str] = []
    string_fields: list[str] = []
    fields_out: list[tuple[str, np.dtype]] = []  # the record's fields, if it is referenced as it is
    offset = 0
    for name, field_dtype, field_offset in fields_of(dtype):
        if field_offset != offset:
            raw = False  # padding between fields: zarr's structured layout is packed
        offset = field_offset + field_dtype.itemsize
        if field_dtype.subdtype is not None:  # an array member: nested records of its bytes
            if not _array_member_ok(field_dtype.subdtype[0], f"{path} compound field {name!r}"):
                raw = False  # padding or another byte order inside it: the records are repacked
            fields_out.append((name, field_dtype))
            continue
        if h5py.check_ref_dtype(field_dtype) is h5py.RegionReference:
            raise UnsupportedFeatureError(f"{path}: compound field {name!r} holds region references")
        if h5py.check_ref_dtype(field_dtype) is h5py.Reference:
            reference_fields.append(name)
            raw = False  # a rewritten record: its width is known once the paths are resolved
            continue
        string_info = h5py.check_string_dtype(field_dtype)
        if string_info is not None and string_info.length is None:
            string_fields.append(name)
            raw = False
            continue
        if h5py.check_vlen_dtype(field_dtype) is not None:
            raise UnsupportedFeatureError(
                f"{path}: compound field {name!r} is a variable-length sequence beside members h5lens's record "
                f"form has none for ({_RECORD_MEMBERS}); zarr v3 structured fields must have a fixed size"
            )
        if field_dtype.fields is not None:
            inner = _plan_compound(field_dtype, f"{path}.{name}")
            if inner.reference_fields or inner.string_fields:
                raise UnsupportedFeatureError(
                    f"{path}: nested compound field {name!r} holds variable-length or reference "
                    "members; only flat compounds can be rewritten"
                )
            if not inner.raw:
                raw = False  # padding or another byte order inside it: the records are repacked
            fields_out.append((name, field_dtype))
            continue
        if is_long_double(field_dtype):  # raw bytes, whose byte order _FLOAT_LAYOUT says
            fields_out.append((name, field_dtype))
            continue
        if field_dtype.byteorder not in ("=", "|", "<" if np.little_endian else ">"):
            raw = False  # zarr's bytes codec has one byte order for the whole record
        fields_out.append((name, field_dtype))
    if offset != dtype.itemsize:
        raw = False  # trailing padding
    native: np.dtype | None = None
    data_type = None  # not raw: decided by materialize once variable widths are known
    array_fields = struct_form(dtype)[1]  # field paths and shapes: the same once repacked
    if raw:  # long doubles as raw bytes of their size: the record's layout is the stored one
        native = struct_form(bits_dtype(np.dtype([(n, packed(d)) for n, d in fields_out])))[0]
        # with long doubles, the type is whole only with their layouts (with_layout)
        data_type = None if holds_long_double(dtype) else structured_json(native)
    return TypePlan(
        data_type,
        native,
        ("little" if np.little_endian else "big") if raw else None,
        raw,
        "compound",
        None,
        reference_fields=tuple(reference_fields),
        string_fields=tuple(string_fields),
        array_fields=tuple((tuple(where), tuple(shape)) for where, shape in array_fields),
    )


# what the awkward record form of a compound with variable-length members holds (h5lens.format.ragged_forms)
_RECORD_MEMBERS = (
    "numbers, fixed-length byte strings, variable-length strings, sequences of these, or arrays of any of these"
)


def _array_member_ok(base: np.dtype, where: str) -> bool:
    """Whether the elements of an array member are stored as zarr reads them (False: they
    are repacked); members of no fixed size are refused."""
    if h5py.check_ref_dtype(base) is not None or h5py.check_vlen_dtype(base) is not None or (
        h5py.check_string_dtype(base) is not None and h5py.check_string_dtype(base).length is None
    ):
        raise UnsupportedFeatureError(
            f"{where} is an array of references or variable-length values; h5lens writes such members only in "
            f"compounds whose members are all {_RECORD_MEMBERS}"
        )
    if base.fields is not None:
        inner = _plan_compound(base, where)
        if inner.reference_fields or inner.string_fields:
            raise UnsupportedFeatureError(f"{where} is an array of records with variable-length or reference members")
        return inner.raw
    return is_long_double(base) or base.byteorder in ("=", "|", "<" if np.little_endian else ">")


def packed(dtype: np.dtype) -> np.dtype:
    """``dtype`` laid out as zarr's ``structured`` type lays records out: fields in order, no
    padding, native byte order, nested records packed the same way."""
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return np.dtype((packed(base), shape))
    if dtype.fields is None:
        return dtype.newbyteorder("=") if dtype.byteorder not in ("|", "=") else dtype
    return np.dtype([(name, packed(field)) for name, field, _ in fields_of(dtype)])


def structured_json(dtype: np.dtype) -> dict[str, Any]:
    """The convention's ``structured`` data_type: ``[[name, type], ...]`` fields."""
    fields = []
    for name, field_dtype, _ in fields_of(dtype):
        if field_dtype.fields is not None:
            fields.append([name, structured_json(field_dtype)])
        else:
            fields.append([name, _field_json(field_dtype)])
    return {"name": "structured", "configuration": {"fields": fields}}


def _float_fill(layout: FloatLayout, fill: Any, path: str) -> bytes:
    found = layout.element_bits(fill)
    if found is None:
        raise UnsupportedFeatureError(
            f"{path}: its fill value {fill!r} is a long double in a layout this machine's long double does not "
            "have; index it where np.longdouble is that layout"
        )
    return found


def fill_value_json(plan: TypePlan, fill: Any, path: str = "") -> Any:
    """The zarr v3 JSON form of fill value ``fill`` for arrays of ``plan``."""
    if plan.kind in ("string", "reference", "region"):
        return ""
    if plan.kind == "vlen-bytes":
        return ""
    native = plan.known_dtype()
    zdtype = _zdtype(native)
    if isinstance(fill, np.ndarray) and fill.ndim > 0:
        # an HDF5 array element type has one fill value per element; zarr has one per array
        if fill.size and not (fill == fill.flat[0]).all() and not np.isnan(fill).all():
            raise UnsupportedFeatureError(
                f"{path}: fill value {fill.tolist()} differs between the elements of an array type"
            )
        fill = fill.flat[0] if fill.size else None
    if plan.float_layout is not None:  # h5py's np.longdouble fill value as the stored bits
        fill = np.void(_float_fill(plan.float_layout, fill, path))
    if fill is None:
        fill = zdtype.default_scalar()
    if plan.kind == "compound":
        # The convention writes compound fill values as base64 of the record's bytes.
        import base64

        # array members are set as arrays, in the record's dtype with them (the same bytes)
        record = np.zeros((), dtype=restore_array_fields(native, plan.array_fields_json()))
        if fill is not None and getattr(fill, "dtype", None) is not None and fill.dtype.names:
            for name, field_dtype, _ in fields_of(native):
                if name in plan.reference_fields:
                    continue  # a null reference: "" (zero bytes), never the text of None
                if name not in fill.dtype.names:
                    continue
                value = fill[name]
                bits = {where[1:]: layout for where, layout in plan.float_fields if where[0] == name}
                if bits:  # long doubles, or records holding them: their bits in their layouts
                    where = f"{path}: fill value field {name!r}"
                    value = to_bits(value, record.dtype.fields[name][0].base, bits, where)
                if name in plan.string_fields:
                    # a variable-length string field's fill is empty (None) or bytes; the field
                    # is text (U) or, where its values are not UTF-8, bytes (S)
                    as_text = field_dtype.kind == "U"
                    if value is None:
                        value = "" if as_text else b""
                    elif isinstance(value, bytes) and as_text:
                        value = value.decode("utf-8")
                try:
                    record[name] = value
                except (TypeError, ValueError) as e:
                    raise UnsupportedFeatureError(
                        f"{path}: fill value of compound field {name!r} ({value!r}) has no form in the zarr record ({e})"
                    ) from None
        return base64.b64encode(record.tobytes()).decode("ascii")
    if plan.kind == "bytes":
        fill = np.bytes_(fill if isinstance(fill, bytes) else bytes(fill))
    value = zdtype.cast_scalar(fill) if hasattr(zdtype, "cast_scalar") else fill
    return zdtype.to_json_scalar(value, zarr_format=3)
