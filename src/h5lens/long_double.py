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
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from h5lens import convention
from h5lens.errors import ManifestFormatError, UnsupportedFeatureError

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

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "order": self.order, "sign": self.sign, "exponent": list(self.exponent),
                "mantissa": list(self.mantissa), "bias": self.bias, "normalization": self.normalization}  # fmt: skip

    @classmethod
    def from_json(cls, value: Any) -> FloatLayout:
        """The layout a ``_FLOAT_LAYOUT`` attribute holds; ValueError for anything else."""
        try:
            if value["order"] not in ("little", "big"):
                raise ValueError(f"order {value['order']!r}")
            layout = cls(
                int(value["size"]), "little" if value["order"] == "little" else "big", int(value["sign"]),
                _pair(value["exponent"]), _pair(value["mantissa"]), int(value["bias"]), str(value["normalization"]),
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

    def same_bits(self, other: FloatLayout) -> bool:
        """The same fields in the same size, whatever the byte order."""
        return (self.size, self.sign, self.exponent, self.mantissa, self.bias, self.normalization) == (
            other.size, other.sign, other.exponent, other.mantissa, other.bias, other.normalization
        )  # fmt: skip


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


def layout_in(attributes: Mapping[str, Any], where: str) -> FloatLayout | None:
    """The layout an array's ``_FLOAT_LAYOUT`` attribute gives, None without one."""
    found = attributes.get(convention.FLOAT_LAYOUT)
    if found is None:
        return None
    try:
        return FloatLayout.from_json(found)
    except ValueError as e:
        raise ManifestFormatError(f"{where}: {convention.FLOAT_LAYOUT} {e}") from None


def to_longdouble(values: Any, layout: FloatLayout, where: str) -> Any:
    """zarr's raw bytes of ``layout`` floats (an array of ``V<size>``, or one ``np.void``) as
    ``np.longdouble`` values, exactly; :class:`UnsupportedFeatureError` naming ``where`` where this
    platform's long double cannot hold them."""
    one = isinstance(values, np.void)
    array = np.asarray(values)
    if array.dtype.itemsize != layout.size or array.dtype.kind != "V":
        raise ManifestFormatError(
            f"{where}: {array.dtype} values are not the {layout.size}-byte floats {convention.FLOAT_LAYOUT} describes"
        )
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(array.shape + (layout.size,))
    native = native_layout()
    if native is not None and layout.same_bits(native):  # the bytes are this platform's long doubles
        ordered = raw if layout.order == native.order else raw[..., ::-1]
        out = np.ascontiguousarray(ordered).view(np.longdouble).reshape(array.shape)
    else:
        reason = _exactness(layout, np.finfo(np.longdouble))
        if reason is not None:
            raise UnsupportedFeatureError(
                f"{where}: {layout.size}-byte floats cannot become np.longdouble exactly: {reason}"
            )
        out = _decode_fields(raw.reshape(-1, layout.size), layout).reshape(array.shape)
    return out[()] if one or out.ndim == 0 else out


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


__all__ = ["FloatLayout", "from_hex", "layout_in", "native_layout", "to_hex", "to_longdouble"]
