"""What an HDF5 element type stores, beside the numpy dtype h5py reads it as.

h5py names every type it reads by a numpy dtype, and libhdf5 converts the stored bytes to
it. Mostly the stored bytes *are* that dtype's bytes and a zarr ``bytes`` codec decodes them.
Where they are not, referencing the bytes as that dtype reads wrong values, silently:

* integers with a bit **precision** or **offset** (``H5Tset_precision`` / ``H5Tset_offset``:
  a 12-bit field in a 16-bit word): libhdf5 shifts the field down and sign-extends it;
  h5lens references the chunks with the ``h5lens.bitfield`` codec
  (:mod:`h5lens.codecs.bitfield`), which does the same;
* fixed-length strings padded with **spaces** (``H5T_STR_SPACEPAD``, as Fortran and IDL
  write them): h5py gives them without the padding; the ``h5lens.spacepad`` codec strips it;
* **user-defined floats** (a bfloat16-like 16-bit float, which h5py reads as float32; any
  float whose fields, bias or padding are not IEEE 754's for its size), and compounds with
  any member of the kinds above: libhdf5 decodes them (h5lens stores h5py's values inline,
  within the materialize limit).

Floats h5py reads as ``np.longdouble`` (x87's 80-bit extended in 16 bytes, HDF5's
``H5T_NATIVE_LDOUBLE``, or any float too wide for float64) have no zarr v3 data type: their
stored bytes are referenced as ``raw_bytes`` with the float's layout (:mod:`h5lens.format.long_double`),
or copied as the stored bits where h5py's elements are wider than the stored ones. So are
complex long doubles (a compound of two of them, ``r`` then ``i``, which h5py reads as
``np.clongdouble``) and compounds with long double members (``raw_bytes`` fields, each with
its layout). Where the stored bytes are not the elements (a complex pair whose parts lie
elsewhere in the record, a member narrower than numpy's long double), h5py's values are
stored as this platform's long doubles, with its layout.

Complex numbers are compounds that h5py recognises by their member names alone: only a pair
stored where numpy keeps its parts (the real part first, no padding, IEEE floats) is
referenced as zarr's complex type; any other (the parts swapped, padding between them) is
decoded by libhdf5.

Types h5py cannot read at all (``H5T_TIME``; integers whose size is no numpy integer's, as
24-bit ones) are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import h5py
import numpy as np

from h5lens.codecs.bitfield import codec_json as bitfield_json
from h5lens.codecs.spacepad import codec_json as spacepad_json
from h5lens.errors import UnsupportedFeatureError
from h5lens.format.long_double import FloatFields, FloatLayout, holds_long_double, is_long_double, native_for

# IEEE 754 float layouts libhdf5 uses by size: (sign bit, exponent position, exponent size,
# mantissa position, mantissa size), exponent bias
_IEEE = {
    2: ((15, 10, 5, 0, 10), 15),
    4: ((31, 23, 8, 0, 23), 127),
    8: ((63, 52, 11, 0, 52), 1023),
}


@dataclass(frozen=True)
class StoredLayout:
    """How a dataset's stored elements relate to the numpy dtype h5py reads them as."""

    codecs: tuple[dict[str, Any], ...] = ()  # array->array codecs that make them h5py's values
    as_read: bool = True  # False: only libhdf5 can decode them (h5lens stores h5py's values)
    float_layout: FloatLayout | None = None  # floats h5py reads as np.longdouble: their stored bits
    # float_layout describes h5py's values as this platform holds them, not the stored bytes
    # (a complex pair whose parts are not where numpy keeps them): h5py's values are stored
    float_values: bool = False
    float_fields: FloatFields = ()  # compounds: their long double members' stored layouts


AS_READ = StoredLayout()


def element_dtype(ds: h5py.Dataset, path: str) -> np.dtype:
    """The numpy dtype h5py reads ``ds`` as; types h5py cannot read, or that zarr has no data
    type for, are refused naming ``path``."""
    tid = ds.id.get_type()
    _refuse_unreadable(tid, path)
    try:
        dtype = ds.dtype
    except (TypeError, ValueError) as e:
        raise UnsupportedFeatureError(f"{path}: h5py cannot read its element type either ({e})") from None
    if holds_long_double(dtype):
        _long_double_layouts(tid, dtype, path)  # refused here, with the path, if one has no layout
        if not (is_long_double(dtype.base) and dtype.base.kind == "f"):
            native_for(dtype.base, path)  # h5py's values may be stored: this platform's layout must be known
    return dtype


def _long_double_layouts(tid: Any, dtype: np.dtype, path: str) -> None:
    """The layout of each long double in ``tid`` (read by h5py as ``dtype``), which refuses
    those it cannot describe, naming ``path``."""
    found = tid.get_class()
    if found == h5py.h5t.ARRAY:
        _long_double_layouts(tid.get_super(), dtype.base, path)
    elif found == h5py.h5t.FLOAT and is_long_double(dtype):
        float_layout(tid, path)
    elif found == h5py.h5t.COMPOUND and (dtype.names is not None or is_long_double(dtype)):
        for i in range(tid.get_nmembers()):
            name = tid.get_member_name(i).decode("utf-8", "backslashreplace")
            if dtype.names is None:  # a complex pair's parts
                member = _part(dtype)
            elif dtype.fields is not None and name in dtype.fields:
                member = dtype.fields[name][0]
            else:
                continue
            _long_double_layouts(tid.get_member_type(i), member, f"{path} compound field {name!r}")


def float_layout(tid: Any, path: str) -> FloatLayout:
    """The layout of HDF5 float type ``tid`` (libhdf5's description of its bits)."""
    order = tid.get_order()
    if order not in (h5py.h5t.ORDER_LE, h5py.h5t.ORDER_BE):
        raise UnsupportedFeatureError(
            f"{path}: a long double in VAX byte order; h5lens reads little and big endian ones"
        )
    sign, epos, esize, mpos, msize = tid.get_fields()
    norm = {h5py.h5t.NORM_IMPLIED: "implied", h5py.h5t.NORM_NONE: "none", h5py.h5t.NORM_MSBSET: "msb-set"}
    return FloatLayout(
        size=int(tid.get_size()), order="little" if order == h5py.h5t.ORDER_LE else "big", sign=int(sign),
        exponent=(int(epos), int(esize)), mantissa=(int(mpos), int(msize)), bias=int(tid.get_ebias()),
        normalization=norm[tid.get_norm()],
    )  # fmt: skip


def _refuse_unreadable(tid: Any, path: str, field: str = "") -> None:
    """``field``: where in a compound the type is (``"t32col"``, ``"info.when"``)."""
    found = tid.get_class()
    if found == h5py.h5t.TIME:
        what = f"field {field!r} holds" if field else "its elements are"
        raise UnsupportedFeatureError(
            f"{path}: {what} HDF5 time values (H5T_TIME), which h5py cannot read either"
        )
    if found == h5py.h5t.ARRAY:
        _refuse_unreadable(tid.get_super(), path, field)
    elif found == h5py.h5t.COMPOUND:
        for i in range(tid.get_nmembers()):
            name = tid.get_member_name(i).decode("utf-8", "backslashreplace")
            _refuse_unreadable(tid.get_member_type(i), path, f"{field}.{name}" if field else name)


def stored_layout(tid: Any, dtype: np.dtype) -> StoredLayout:
    """How elements of HDF5 type ``tid`` (read by h5py as ``dtype``) are stored."""
    found = tid.get_class()
    if found == h5py.h5t.ARRAY:
        base = dtype.subdtype[0] if dtype.subdtype is not None else dtype
        return stored_layout(tid.get_super(), base)  # elementwise: the codecs apply to every element
    if found == h5py.h5t.INTEGER:
        return _integer(tid, dtype)
    if found == h5py.h5t.FLOAT:
        if is_long_double(dtype):  # h5py's np.longdouble: the stored bits, described
            return StoredLayout(float_layout=float_layout(tid, ""))
        return AS_READ if _ieee(tid, dtype) else StoredLayout(as_read=False)
    if found == h5py.h5t.STRING and not tid.is_variable_str():
        return StoredLayout((spacepad_json(),)) if tid.get_strpad() == h5py.h5t.STR_SPACEPAD else AS_READ
    if found == h5py.h5t.ENUM:
        return AS_READ if _integer(tid.get_super(), dtype) == AS_READ else StoredLayout(as_read=False)
    if found == h5py.h5t.COMPOUND and dtype.kind == "c":  # h5py's complex numbers
        return _complex(tid, dtype)
    if found == h5py.h5t.COMPOUND and dtype.names is not None:
        return _compound(tid, dtype)
    return AS_READ


def _complex(tid: Any, dtype: np.dtype) -> StoredLayout:
    """A compound h5py reads as complex (two floats named as its configuration says): its
    stored bytes are numpy's only where the real part comes first and the imaginary part
    right after it, in the layout numpy has for the parts."""
    half = dtype.itemsize // 2
    real, imaginary = tid.get_member_type(0), tid.get_member_type(1)
    numpy_order = tid.get_size() == dtype.itemsize and (tid.get_member_offset(0), tid.get_member_offset(1)) == (0, half)
    if is_long_double(dtype):
        parts = float_layout(real, ""), float_layout(imaginary, "")
        if numpy_order and parts[0] == parts[1] and parts[0].size == half:
            return StoredLayout(float_layout=replace(parts[0], complex=True))  # the stored pairs, described
        return StoredLayout(as_read=False, float_layout=native_for(dtype, ""), float_values=True)
    part = _part(dtype)
    return AS_READ if numpy_order and _ieee(real, part) and _ieee(imaginary, part) else StoredLayout(as_read=False)


def _part(dtype: np.dtype) -> np.dtype:
    """The float type of a complex type's parts."""
    return np.dtype(f"f{dtype.itemsize // 2}").newbyteorder(dtype.byteorder)


def _compound(tid: Any, dtype: np.dtype) -> StoredLayout:
    """A compound's members: AS_READ where each is stored as numpy holds it, long double
    members described (their stored bits, or, in records libhdf5 must convert, this
    platform's: h5py's values are stored then)."""
    as_read, fields = True, []
    for i in range(tid.get_nmembers()):
        name = tid.get_member_name(i).decode()
        member = dtype.fields[name][0] if dtype.fields is not None and name in dtype.fields else None
        if member is None:
            return StoredLayout(as_read=False)  # a member libhdf5 converts: it decodes the records
        found = stored_layout(tid.get_member_type(i), member)
        if found.float_layout is not None:  # long doubles (or arrays of them)
            fields.append(((name,), found.float_layout))
            as_read = as_read and not found.float_values and found.float_layout.element_size == member.base.itemsize
        elif found.float_fields:  # records holding long doubles
            fields.extend(((name, *where), layout) for where, layout in found.float_fields)
            as_read = as_read and found.as_read
        elif found != AS_READ:
            as_read = False
    return StoredLayout(as_read=as_read, float_fields=tuple(fields))


def _integer(tid: Any, dtype: np.dtype) -> StoredLayout:
    size = tid.get_size()
    if size != dtype.itemsize:
        return StoredLayout(as_read=False)
    precision, offset = tid.get_precision(), tid.get_offset()
    if precision == 8 * size and offset == 0:
        return AS_READ
    return StoredLayout((bitfield_json(precision, offset, tid.get_sign() == h5py.h5t.SGN_2),))


def _ieee(tid: Any, dtype: np.dtype) -> bool:
    """Whether a float type's stored bytes are IEEE 754's for h5py's dtype."""
    size = tid.get_size()
    if size != dtype.itemsize or size not in _IEEE:
        return False
    fields, bias = _IEEE[size]
    return (
        tuple(tid.get_fields()) == fields
        and tid.get_ebias() == bias
        and tid.get_norm() == h5py.h5t.NORM_IMPLIED
        and tid.get_precision() == 8 * size
        and tid.get_offset() == 0
    )


__all__ = ["AS_READ", "StoredLayout", "element_dtype", "float_layout", "stored_layout"]
