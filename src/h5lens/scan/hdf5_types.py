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
stored bytes are referenced as ``raw_bytes`` with the float's layout (:mod:`h5lens.long_double`),
or copied as the stored bits where h5py's elements are wider than the stored ones.

Types h5py cannot read at all (``H5T_TIME``; integers whose size is no numpy integer's, as
24-bit ones) are refused by name, and so are long doubles inside compounds and complex long
doubles (no form yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5lens.codecs.bitfield import codec_json as bitfield_json
from h5lens.codecs.spacepad import codec_json as spacepad_json
from h5lens.errors import UnsupportedFeatureError
from h5lens.long_double import FloatLayout

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
    _refuse_wide(dtype, path)
    if _long_double(dtype):
        float_layout(_element_type(tid), path)  # refused here, with the path, if it has no layout
    return dtype


def _long_double(dtype: np.dtype) -> bool:
    base = dtype.subdtype[0] if dtype.subdtype is not None else dtype
    return base.kind == "f" and base.itemsize > 8


def _element_type(tid: Any) -> Any:
    return tid.get_super() if tid.get_class() == h5py.h5t.ARRAY else tid


def _refuse_wide(dtype: np.dtype, path: str, field: str | None = None) -> None:
    """Long doubles where h5lens has no form for them: compound members, complex long doubles."""
    base = dtype.subdtype[0] if dtype.subdtype is not None else dtype
    if base.names is not None and base.fields is not None:
        for name in base.names:
            _refuse_wide(base.fields[name][0], path, name if field is None else f"{field}.{name}")
        return
    wide = (base.kind == "f" and base.itemsize > 8 and field is not None) or (base.kind == "c" and base.itemsize > 16)
    if wide:
        where = "" if field is None else f" compound field {field!r}:"
        raise UnsupportedFeatureError(
            f"{path}:{where} {base} (an HDF5 long double{' pair' if base.kind == 'c' else ''}) has no form in h5lens "
            "(long doubles are kept as the elements of a dataset of them, not inside compounds or complex numbers)"
        )


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
        if dtype.kind == "f" and dtype.itemsize > 8:  # h5py's np.longdouble: the stored bits, described
            return StoredLayout(float_layout=float_layout(tid, ""))
        return AS_READ if _ieee(tid, dtype) else StoredLayout(as_read=False)
    if found == h5py.h5t.STRING and not tid.is_variable_str():
        return StoredLayout((spacepad_json(),)) if tid.get_strpad() == h5py.h5t.STR_SPACEPAD else AS_READ
    if found == h5py.h5t.ENUM:
        return AS_READ if _integer(tid.get_super(), dtype) == AS_READ else StoredLayout(as_read=False)
    if found == h5py.h5t.COMPOUND and dtype.names is not None:
        for i in range(tid.get_nmembers()):
            name = tid.get_member_name(i).decode()
            member = dtype.fields[name][0] if dtype.fields is not None and name in dtype.fields else None
            if member is None or stored_layout(tid.get_member_type(i), member) != AS_READ:
                return StoredLayout(as_read=False)  # a member libhdf5 converts: it decodes the records
    return AS_READ


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
