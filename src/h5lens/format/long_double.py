"""HDF5 floats h5py reads as ``np.longdouble``, kept as the bits HDF5 stores (numpy only).

zarr v3 has no long double (its ``r<N>`` raw-bits types are not in zarr-python 3.x either,
whose equivalent is ``raw_bytes``), and converting to float64 would lose 11 of x87's 64
mantissa bits. The manifest references the stored elements as they are, as zarr's
``raw_bytes`` of the element's size, and the array's ``_FLOAT_LAYOUT`` attribute describes
the float as libhdf5 does (:class:`FloatLayout`). h5lens's readers give ``np.longdouble``
values: the bytes viewed as the platform's long double where its layout is the stored one
(x86-64's 80-bit extended in 16 bytes, byte-swapped if the file's order is the other), else
decoded field by field where the platform's long double holds every value exactly (x87 on
a platform whose long double is IEEE binary128), else an error (a platform whose long double
is a float64: h5py cannot read these types there either). Plain zarr gives the raw bytes.

Complex long doubles (h5py's ``np.clongdouble``, which HDF5 holds as a compound of two long
doubles ``r`` and ``i``) are raw bytes of twice the size, the real part's then the imaginary
part's, their layout marked ``"complex": true``. Records (compounds) with long double members
stay zarr ``structured`` records: each such member a ``raw_bytes`` field, and the array's
``_FLOAT_LAYOUT`` a list of ``[[field path], layout]`` (:data:`FloatFields`), a member that is
an array of long doubles listed once (``_ARRAY_FIELDS`` gives its shape).

Attributes are copied, not referenced: a long double attribute's JSON value is the exact
hexadecimal text of each value (``"0xaaaaaaaaaaaaaaabp-65"`` for 1/3: an integer mantissa and a
binary exponent; ``"nan"``, ``"inf"``, ``"-inf"``), which Python's ``float.fromhex`` reads
(rounded to float64); h5lens gives ``np.longdouble`` back (:func:`from_hex`).

No h5py and no zarr here: the scanner and the readers both import this module.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from h5lens.errors import ManifestFormatError, UnsupportedFeatureError
from h5lens.format import convention

NORMALIZATIONS = ("implied", "none", "msb-set")  # libhdf5's H5T_NORM_IMPLIED, NONE, MSBSET
_MAX_SIZE = 16  # bytes: what the field-by-field decoder reads (two 64-bit words)
_HEX = re.compile(r"(-?)0x([0-9a-f]+)p([+-][0-9]+)")


@dataclass(frozen=True)
class FloatLayout:
    """An HDF5 floating-point type, as ``H5Tget_fields`` and its neighbours describe it: bit
    positions count from the least significant bit of the element read in ``order``."""

    size: int  # bytes per element
    order: Literal["little", "big"]
    sign: int  # the sign bit's position
    exponent: tuple[int, int]  # position, size in bits
    mantissa: tuple[int, int]  # position, size in bits
    bias: int  # the exponent's bias
    normalization: str  # one of NORMALIZATIONS: is the mantissa's leading 1 stored?
    complex: bool = False  # each element is two such floats: the real part, then the imaginary one

    def to_json(self) -> dict[str, Any]:
        found = {"size": self.size, "order": self.order, "sign": self.sign, "exponent": list(self.exponent),
                 "mantissa": list(self.mantissa), "bias": self.bias, "normalization": self.normalization}  # fmt: skip
        return {**found, "complex": True} if self.complex else found

    @property
    def element_size(self) -> int:
        """Bytes per element: the float's, twice it for a complex pair."""
        return self.size * (2 if self.complex else 1)

    @property
    def part(self) -> FloatLayout:
        """One float of the element (the layout itself for a real one)."""
        return replace(self, complex=False) if self.complex else self

    @classmethod
    def from_json(cls, value: Any) -> FloatLayout:
        """The layout a ``_FLOAT_LAYOUT`` attribute holds; ValueError for anything else."""
        try:
            if value["order"] not in ("little", "big"):
                raise ValueError(f"order {value['order']!r}")
            layout = cls(
                int(value["size"]), "little" if value["order"] == "little" else "big", int(value["sign"]),
                _pair(value["exponent"]), _pair(value["mantissa"]), int(value["bias"]), str(value["normalization"]),
                _flag(value.get("complex", False)),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"Expected a float layout object. Got {value!r} ({e}).") from None
        bits = 8 * layout.size
        (epos, esize), (mpos, msize) = layout.exponent, layout.mantissa
        if not (
            1 <= layout.size <= 64 and layout.normalization in NORMALIZATIONS
            and 0 <= layout.sign < bits and 1 <= esize <= 32 and 0 <= epos and epos + esize <= bits
            and 1 <= msize and 0 <= mpos and mpos + msize <= bits and 0 <= layout.bias < 2**esize
        ):  # fmt: skip
            raise ValueError(f"Expected a float layout whose fields fit {layout.size} bytes. Got {value!r}.")
        return layout

    @property
    def precision(self) -> int:
        """Significant bits, the leading 1 included."""
        return self.mantissa[1] + (self.normalization == "implied")

    def encode(self, value: np.longdouble | None) -> bytes | None:
        """The stored bits of ``value`` (None: zero): zeros anywhere, other values where this
        platform's long double has these fields; None elsewhere. Padding bits are zero."""
        value = np.longdouble(0) if value is None else np.longdouble(value)
        native = native_layout()
        if value == 0:
            bits = int(np.signbit(value)) << self.sign
        elif native is not None and self.same_bits(native):
            whole = int.from_bytes(np.array(value, dtype=np.longdouble).tobytes(), native.order)
            (epos, esize), (mpos, msize) = self.exponent, self.mantissa
            kept = (1 << self.sign) | (((1 << esize) - 1) << epos) | (((1 << msize) - 1) << mpos)
            bits = whole & kept
        else:
            return None
        return bits.to_bytes(self.size, self.order)

    def element_bits(self, value: Any) -> bytes | None:
        """:meth:`encode` of one element: a complex one's real part, then its imaginary one."""
        if not self.complex:
            return self.encode(None if value is None else np.longdouble(value))
        pair = np.clongdouble(0 if value is None else value)
        real, imaginary = self.part.encode(pair.real), self.part.encode(pair.imag)
        return None if real is None or imaginary is None else real + imaginary

    def same_bits(self, other: FloatLayout) -> bool:
        """The same fields in the same size, whatever the byte order."""
        return (self.size, self.sign, self.exponent, self.mantissa, self.bias, self.normalization) == (
            other.size, other.sign, other.exponent, other.mantissa, other.bias, other.normalization
        )  # fmt: skip


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"complex must be true or false, got {value!r}")
    return value


def _pair(value: Any) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2):
        raise ValueError(f"expected [position, size], got {value!r}")
    return int(value[0]), int(value[1])


@functools.cache
def native_layout() -> FloatLayout | None:
    """This platform's ``np.longdouble`` as a layout (checked on known values); None where
    it is none of x87's extended, IEEE binary128 or binary64 (IBM's double-double)."""
    info = np.finfo(np.longdouble)
    size = np.dtype(np.longdouble).itemsize
    order: Literal["little", "big"] = "little" if np.little_endian else "big"
    candidates = {
        (15, 63): FloatLayout(size, order, 79, (64, 15), (0, 64), 16383, "none"),  # x87 extended
        (15, 112): FloatLayout(size, order, 127, (112, 15), (0, 112), 16383, "implied"),  # IEEE binary128
        (11, 52): FloatLayout(size, order, 63, (52, 11), (0, 52), 1023, "implied"),  # IEEE binary64
    }
    layout = candidates.get((int(info.nexp), int(info.nmant)))
    if layout is None:
        return None
    size_m, bias = layout.mantissa[1], layout.bias
    lead = 0 if layout.normalization == "implied" else 1 << (size_m - 1)  # a stored leading 1
    half = 1 << (size_m - 1 - (lead != 0))  # the first bit after the binary point
    probes = {1.5: (0, bias, lead | half), -2.0: (1, bias + 1, lead), 0.25: (0, bias - 2, lead)}
    for value, expected in probes.items():
        if _fields_of(np.array(value, dtype=np.longdouble).tobytes(), layout) != expected:
            return None
    return layout


def _fields_of(raw: bytes, layout: FloatLayout) -> tuple[int, int, int]:
    """Sign, exponent and mantissa of one element's bytes."""
    bits = int.from_bytes(raw[: layout.size], layout.order)
    (epos, esize), (mpos, msize) = layout.exponent, layout.mantissa
    return (bits >> layout.sign) & 1, (bits >> epos) & ((1 << esize) - 1), (bits >> mpos) & ((1 << msize) - 1)


# The long double members of a record: (field path, layout) each; a member that is an array
# of long doubles is listed once, its path the member's
FloatFields = tuple[tuple[tuple[str, ...], FloatLayout], ...]


def is_long_double(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a float or complex type wider than float64 / complex128 (h5py's
    ``np.longdouble`` and ``np.clongdouble``)."""
    return (dtype.kind == "f" and dtype.itemsize > 8) or (dtype.kind == "c" and dtype.itemsize > 16)


def holds_long_double(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a long double, or records or arrays holding one."""
    base = dtype.base
    if base.names is not None and base.fields is not None:
        return any(holds_long_double(base.fields[name][0]) for name in base.names)
    return is_long_double(base)


def native_for(dtype: np.dtype, where: str) -> FloatLayout:
    """This platform's layout of ``dtype`` (``np.longdouble`` or ``np.clongdouble``): the bits of
    the values h5py gives, where they are stored instead of the file's own;
    :class:`UnsupportedFeatureError` naming ``where`` where h5lens knows no such layout."""
    native = native_layout()
    if native is None:
        raise UnsupportedFeatureError(
            f"{where}: long doubles whose stored bits cannot be referenced are kept as this platform's, and this "
            f"platform's long double ({np.dtype(np.longdouble)}) is of no layout h5lens describes"
        )
    return replace(native, complex=dtype.kind == "c")


def bits_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype`` with each long double (in records and arrays too) as raw bytes of its size:
    the same record layout, which zarr's ``raw_bytes`` fields hold."""
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return np.dtype((bits_dtype(base), shape))
    if is_long_double(dtype):
        return np.dtype(f"V{dtype.itemsize}")
    if dtype.names is None or dtype.fields is None:
        return dtype
    names = list(dtype.names)
    return np.dtype({"names": names, "formats": [bits_dtype(dtype.fields[n][0]) for n in names],
                     "offsets": [dtype.fields[n][1] for n in names], "itemsize": dtype.itemsize})  # fmt: skip


def fields_json(fields: FloatFields) -> list[list[Any]]:
    """The ``_FLOAT_LAYOUT`` attribute of records: ``[[field path], layout]`` per member."""
    return [[list(where), layout.to_json()] for where, layout in fields]


def float_form_in(attributes: Mapping[str, Any], where: str) -> FloatLayout | FloatFields | None:
    """What an array's ``_FLOAT_LAYOUT`` attribute says: the layout of its elements (a float or
    a complex pair), the layouts of its records' long double members, or None without one."""
    found = attributes.get(convention.FLOAT_LAYOUT)
    if found is None:
        return None
    try:
        if not isinstance(found, list):
            return FloatLayout.from_json(found)
        fields = []
        for entry in found:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and entry[0]
                    and all(isinstance(name, str) for name in entry[0])):  # fmt: skip
                raise ValueError(f"Expected [field path, layout]. Got {entry!r}.")
            fields.append((tuple(entry[0]), FloatLayout.from_json(entry[1])))
        return tuple(fields)
    except ValueError as e:
        raise ManifestFormatError(f"{where}: {convention.FLOAT_LAYOUT} {e}") from None


def layout_in(attributes: Mapping[str, Any], where: str) -> FloatLayout | None:
    """The layout an array's ``_FLOAT_LAYOUT`` attribute gives where its elements are real long
    doubles (read as ``np.longdouble``); None without one, and for complex pairs and records
    (:func:`float_form_in` gives those)."""
    found = float_form_in(attributes, where)
    return found if isinstance(found, FloatLayout) and not found.complex else None


def h5py_dtype(dtype: np.dtype, form: FloatLayout | FloatFields) -> np.dtype:
    """The dtype h5py gives for an array zarr reads as ``dtype`` (raw bytes, or records with
    raw bytes fields) whose ``_FLOAT_LAYOUT`` says ``form``."""
    if isinstance(form, FloatLayout):
        return np.dtype(np.clongdouble if form.complex else np.longdouble)
    return _record_dtype(dtype, dict(form), ())


def _record_dtype(dtype: np.dtype, fields: dict[tuple[str, ...], FloatLayout], where: tuple[str, ...]) -> np.dtype:
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return np.dtype((_record_dtype(base, fields, where), shape))
    layout = fields.get(where)
    if layout is not None:
        return np.dtype(np.clongdouble if layout.complex else np.longdouble)
    if dtype.names is None or dtype.fields is None:
        return dtype
    names = list(dtype.names)
    formats = [_record_dtype(dtype.fields[name][0], fields, (*where, name)) for name in names]
    if all(f.itemsize == dtype.fields[n][0].itemsize for n, f in zip(names, formats, strict=True)):
        offsets = [dtype.fields[name][1] for name in names]  # the same widths: the same record
        return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": dtype.itemsize})
    return np.dtype(list(zip(names, formats, strict=True)))  # this platform's long double is narrower: packed


def to_h5py(values: Any, form: FloatLayout | FloatFields, where: str) -> Any:
    """Values zarr reads (raw bytes, or records with raw bytes fields; one ``np.void`` or an
    array) as h5py gives them: np.longdouble / np.clongdouble values, records holding them."""
    if isinstance(form, FloatLayout):
        return to_longdouble(values, form, where)
    one = isinstance(values, np.void)
    array = np.asarray(values)
    out = np.empty(array.shape, dtype=h5py_dtype(array.dtype, form))
    _fill_records(array, out, dict(form), (), where)
    return out[()] if one else out


def _fill_records(
    values: np.ndarray, out: np.ndarray, fields: dict[tuple[str, ...], FloatLayout], where: tuple[str, ...], path: str
) -> None:
    names = values.dtype.names or ()
    if out.dtype.names != names:
        raise ManifestFormatError(f"{path}: {convention.FLOAT_LAYOUT} names fields its records do not have")
    for name in names:
        field, layout = (*where, name), fields.get((*where, name))
        if layout is not None:  # (an array member: every element of it)
            out[name] = to_longdouble(values[name], layout, path)
        elif out[name].dtype.names is not None:  # nested records (or arrays of them)
            _fill_records(values[name], out[name], fields, field, path)
        else:
            out[name] = values[name]


def to_bits(values: Any, dtype: np.dtype, fields: Mapping[tuple[str, ...], FloatLayout], where: str) -> np.ndarray:
    """h5py's values (long doubles, or records holding them: a fill value) as values of
    ``dtype``, whose long doubles are the stored bits of their layouts in ``fields`` (the
    values' own under ``()``); :class:`UnsupportedFeatureError` naming ``where`` for a value
    this platform cannot encode in its layout (only zeros, where its long double has other fields)."""
    array = np.asarray(values)
    layout = fields.get(())
    if layout is not None:
        out = np.empty(array.shape, dtype=dtype)
        for index in np.ndindex(array.shape):
            found = layout.element_bits(array[index])
            if found is None:
                raise UnsupportedFeatureError(
                    f"{where}: {array[index]!r} is a long double in a layout this machine's long double does not "
                    "have; index it where np.longdouble is that layout"
                )
            out[index] = np.void(found)
        return out
    if dtype.names is None or dtype.fields is None:
        return array.astype(dtype)
    out = np.zeros(array.shape, dtype=dtype)
    for name in dtype.names:
        inner = {key[1:]: found for key, found in fields.items() if key and key[0] == name}
        out[name] = to_bits(array[name], dtype.fields[name][0].base, inner, where) if inner else array[name]
    return out


def to_longdouble(values: Any, layout: FloatLayout, where: str) -> Any:
    """zarr's raw bytes of ``layout`` floats (an array of ``V<size>``, or one ``np.void``) as
    ``np.longdouble`` values (``np.clongdouble`` for complex pairs), exactly;
    :class:`UnsupportedFeatureError` naming ``where`` where this platform's long double cannot
    hold them."""
    one = isinstance(values, np.void)
    array = np.asarray(values)
    if array.dtype.itemsize != layout.element_size or array.dtype.kind != "V" or array.dtype.names is not None:
        raise ManifestFormatError(
            f"{where}: {array.dtype} values are not the {layout.element_size}-byte floats "
            f"{convention.FLOAT_LAYOUT} describes"
        )
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(array.shape + (layout.element_size,))
    if layout.complex:  # the two parts, each a float of the layout
        parts = _floats(raw.reshape(array.shape + (2, layout.size)), layout.part, where)
        out = np.empty(array.shape, dtype=np.clongdouble)
        out.real, out.imag = parts[..., 0], parts[..., 1]
    else:
        out = _floats(raw, layout, where)
    return out[()] if one or out.ndim == 0 else out


def _floats(raw: np.ndarray, layout: FloatLayout, where: str) -> np.ndarray:
    """Bytes of ``layout`` floats (the last axis, ``layout.size`` long) as np.longdouble."""
    shape = raw.shape[:-1]
    native = native_layout()
    if native is not None and layout.same_bits(native):  # the bytes are this platform's long doubles
        ordered = raw if layout.order == native.order else raw[..., ::-1]
        return np.ascontiguousarray(ordered).view(np.longdouble).reshape(shape)
    reason = _exactness(layout, np.finfo(np.longdouble))
    if reason is not None:
        said = f"{layout.size}-byte floats cannot become np.longdouble exactly: {reason}"
        raise UnsupportedFeatureError(f"{where}: {said}")
    return _decode_fields(raw.reshape(-1, layout.size), layout).reshape(shape)


def _exactness(layout: FloatLayout, target: Any) -> str | None:
    """Why ``np.longdouble`` (``target``: its finfo) cannot hold every ``layout`` value, or None."""
    precision = int(target.nmant) + 1
    top = 2 ** layout.exponent[1] - 2 - layout.bias + 1  # every finite value is below 2**top
    if native_layout() is None:
        return f"this platform's long double ({np.dtype(np.longdouble)}) is of no layout h5lens decodes into"
    if layout.precision > precision or layout.mantissa[1] > 64 or layout.size > _MAX_SIZE:
        return f"{layout.precision}-bit mantissas do not fit this platform's {precision}-bit long double"
    if top > int(target.maxexp) or 1 - layout.bias < int(target.minexp):
        return "their exponents do not fit this platform's long double"
    return None


def _decode_fields(raw: np.ndarray, layout: FloatLayout) -> np.ndarray:
    """Rows of ``layout`` bytes as np.longdouble, field by field as libhdf5 converts them
    (where :func:`_exactness` found no reason against it)."""
    little = raw if layout.order == "little" else raw[:, ::-1]
    words = np.zeros((little.shape[0], _MAX_SIZE), dtype=np.uint8)
    words[:, : layout.size] = little[:, :_MAX_SIZE]
    low, high = (np.ascontiguousarray(words[:, i : i + 8]).view("<u8").reshape(-1) for i in (0, 8))

    def field(position: int, size: int) -> np.ndarray:
        mask = np.uint64((1 << size) - 1)
        if position >= 64:
            return (high >> np.uint64(position - 64)) & mask
        found = low >> np.uint64(position)
        if position + size > 64:
            found = found | (high << np.uint64(64 - position))
        return found & mask

    (epos, esize), (mpos, msize) = layout.exponent, layout.mantissa
    mantissa, exponent = field(mpos, msize), field(epos, esize).astype(np.int64)
    negative = field(layout.sign, 1).astype(bool)
    implied = layout.normalization == "implied"
    fraction_bits = msize if implied else msize - 1  # the bits after the binary point
    whole = (mantissa >> np.uint64(32)).astype(np.longdouble) * np.longdouble(2**32) + (
        mantissa & np.uint64(0xFFFFFFFF)
    ).astype(np.longdouble)  # exact: the mantissa fits the long double (_exactness)
    special = exponent == 2**esize - 1
    if implied:
        whole = np.where((exponent != 0) & ~special, whole + np.ldexp(np.longdouble(1), msize), whole)
    scale = np.where(exponent == 0, 1, exponent) - layout.bias - fraction_bits
    with np.errstate(over="ignore"):  # the special values' scale (replaced below)
        values = np.ldexp(whole, np.clip(scale, -(2**31), 2**31 - 1).astype(np.int32))
    fraction = mantissa & np.uint64((1 << fraction_bits) - 1) if fraction_bits < 64 else mantissa
    values = np.where(special, np.where(fraction == 0, np.longdouble(np.inf), np.longdouble(np.nan)), values)
    return np.where(negative, -values, values)


def to_hex(value: Any) -> str:
    """A long double's exact text: ``[-]0x<mantissa>p<exponent>`` (an integer mantissa), or
    ``nan``, ``inf``, ``-inf``."""
    value = np.longdouble(value)
    if np.isnan(value):
        return "nan"
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if np.signbit(value) else ""
    if value == 0:
        return f"{sign}0x0p+0"
    fraction, exponent = np.frexp(abs(value))
    bits = int(np.finfo(np.longdouble).nmant) + 1
    mantissa = int(np.ldexp(fraction, bits))  # an integer of at most `bits` bits: exact
    shift = exponent - bits
    while mantissa % 2 == 0:
        mantissa //= 2
        shift += 1
    return f"{sign}0x{mantissa:x}p{shift:+d}"


def from_hex(text: str) -> np.longdouble:
    """:func:`to_hex`'s text as np.longdouble, exactly: :class:`UnsupportedFeatureError` where this
    platform's long double cannot hold it, ValueError for other text."""
    special = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}.get(text)
    if special is not None:
        return np.longdouble(special)
    found = _HEX.fullmatch(text)
    if found is None:
        raise ValueError(f"Expected the hexadecimal text of a long double. Got {text!r}.")
    mantissa, shift = int(found.group(2), 16), int(found.group(3))
    info = np.finfo(np.longdouble)
    bits = int(info.nmant) + 1
    if mantissa:
        while mantissa % 2 == 0:
            mantissa //= 2
            shift += 1
        top = shift + mantissa.bit_length()  # the value is below 2**top
        if mantissa.bit_length() > bits or top > int(info.maxexp) or shift < int(info.minexp) - int(info.nmant):
            raise UnsupportedFeatureError(
                f"{text}: this platform's long double ({bits}-bit mantissa) cannot hold it exactly"
            )
    whole = np.longdouble(0)
    for start in range(((mantissa.bit_length() + 31) // 32 - 1) * 32, -1, -32):
        whole = whole * np.longdouble(2**32) + np.longdouble((mantissa >> start) & 0xFFFFFFFF)
    value = np.ldexp(whole, np.int32(shift)) if mantissa else whole
    return np.longdouble(-value if found.group(1) else value)


__all__ = [
    "FloatFields",
    "FloatLayout",
    "bits_dtype",
    "fields_json",
    "float_form_in",
    "from_hex",
    "h5py_dtype",
    "holds_long_double",
    "is_long_double",
    "layout_in",
    "native_for",
    "native_layout",
    "to_bits",
    "to_h5py",
    "to_hex",
    "to_longdouble",
]
