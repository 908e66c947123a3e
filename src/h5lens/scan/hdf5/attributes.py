"""An object's compact attributes read from its object header, with the values of the
common types decoded exactly as h5py reads them (``obj.attrs[name]``).

libhdf5 opens, types and reads every attribute through a dozen library calls; the values
of most attributes (numbers, fixed-length strings) are simply the bytes of their message.
This module reads them from the header h5lens parses anyway, and leaves every other
attribute (and every object it cannot account for) to h5py: a value it is not sure of is
never produced.

Specification (HDF5 File Format Specification version 3.0):

- IV.A.2.m "The Attribute Message" (versions 1 to 3): name, datatype, dataspace, data;
- IV.A.2.d "The Datatype Message": class 0 (fixed-point), 1 (floating-point) and 3
  (string) only; every other class, a shared (committed) datatype, a bit precision or
  offset that is not the whole value, a non-IEEE float layout, space-padded strings:
  h5py reads them;
- IV.A.2.b "The Dataspace Message" (versions 1 and 2): scalar, simple and null;
- IV.A.2.v "The Attribute Info Message": an object whose attributes are in dense storage
  (a fractal heap) is left to h5py whole.

libhdf5: H5Oattr.c (``H5O__attr_decode``), H5Odtype.c (``H5O__dtype_decode_helper``),
H5Osdspace.c (``H5O__sdspace_decode``), H5Oainfo.c, H5Aint.c (``H5A__compact_build_table``
and ``H5A__attr_sort_table``: the order h5py lists attributes in) and H5Tconv.c
(``H5T__conv_s_s``: what reading a null-terminated string into h5py's null-padded memory
type gives). h5py: ``h5t.TypeIntegerID.py_dtype``, ``TypeFloatID.py_dtype``,
``TypeStringID.py_dtype`` and ``AttributeManager.__getitem__``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import h5py
import numpy as np

from h5lens.scan.hdf5.global_heap import collection_objects, collection_size
from h5lens.scan.hdf5.global_heap import header_size as collection_header_size
from h5lens.scan.hdf5.model import UnsupportedIndexError
from h5lens.scan.hdf5.object_header import (
    MSG_ATTRIBUTE,
    MSG_ATTRIBUTE_INFO,
    MSG_FLAG_SHARED,
    ObjectHeader,
    read_header,
)
from h5lens.scan.hdf5.reads import Io, ReadAt, local_read_ranges, run_sync
from h5lens.scan.hdf5.superblock import Superblock

_SIZES = struct.Struct("<HHH")  # name, datatype and dataspace sizes
_ATTR_SHARED_TYPE, _ATTR_SHARED_SPACE = 0x01, 0x02  # attribute message flags (versions 2, 3)

_CLASS_FIXED, _CLASS_FLOAT, _CLASS_STRING, _CLASS_VLEN = 0, 1, 3, 9
_VLEN_SEQUENCE, _VLEN_STRING = 0, 1
_DATATYPE_VERSIONS = (1, 2, 3, 4, 5)  # the encoding of these three classes is the same in each

# Fixed-point bit field: byte order (bit 0), low and high padding (bits 1, 2), signed (bit 3).
_FIXED_BE, _FIXED_PADDING, _FIXED_SIGNED = 0x01, 0x06, 0x08
_FIXED_KNOWN = _FIXED_BE | _FIXED_PADDING | _FIXED_SIGNED
# Floating-point bit field: byte order (bits 0 and 6: 6 set is VAX order), padding (bits 1-3),
# mantissa normalization (bits 4-5; 2 is "implied", IEEE's), sign location (bits 8-15).
_FLOAT_BE, _FLOAT_VAX, _FLOAT_PADDING, _FLOAT_IMPLIED = 0x01, 0x40, 0x0E, 0x20
_FLOAT_NORMALIZATION = 0x30
# IEEE 754 binary16, 32 and 64 (size: exponent location, size, mantissa location, size, bias):
# the only layouts h5py maps to numpy's float16, 32 and 64 without libhdf5 converting them.
_IEEE = {2: (10, 5, 0, 10, 15), 4: (23, 8, 0, 23, 127), 8: (52, 11, 0, 52, 1023)}
_INTEGER_SIZES = (1, 2, 4, 8)
# String bit field: padding (bits 0-3: 0 null-terminated, 1 null-padded, 2 space-padded),
# character set (bits 4-7: 0 ASCII, 1 UTF-8); h5py's dtype names the set in its metadata.
_NULLTERM, _NULLPAD = 0, 1
_ENCODINGS = {0: "ascii", 1: "utf-8"}

_SPACE_SCALAR, _SPACE_SIMPLE, _SPACE_NULL = 0, 1, 2
_SPACE_HAS_MAX, _SPACE_HAS_PERMUTATION = 0x01, 0x02

_AINFO_TRACKED, _AINFO_INDEXED = 0x01, 0x02
_COLLECTIONS_KEPT = 64  # collections of variable-length attribute values kept parsed (4 KiB and up each)
_KEEP = frozenset((MSG_ATTRIBUTE, MSG_ATTRIBUTE_INFO))  # the header messages attributes need


class _Null:
    """The value of an attribute with a null dataspace (h5py's ``Empty``)."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


@dataclass(frozen=True, slots=True, eq=False)
class HeaderAttribute:
    """One attribute message. ``dtype`` None: a type not read here (h5py must read it);
    otherwise ``dtype`` is h5py's ``attr.dtype`` and ``value`` what ``obj.attrs[name]`` gives
    (a numpy scalar or array), or :data:`NULL` for a null dataspace. Identical messages
    give the identical object (compared and hashed by identity: it can key a cache), except
    where ``shared`` is False (values read from the file's global heap: one object each)."""

    name: bytes
    dtype: np.dtype | None
    value: Any
    shared: bool = True
    shape: tuple[int, ...] | None = None  # a variable-length attribute's (its value does not say)


@dataclass(frozen=True, slots=True)
class VariableLength:
    """The value of a variable-length attribute before its global heap objects are read
    (a :class:`HeaderAttribute`'s ``value``, with ``dtype`` None): one descriptor per
    element (``length``, collection ``address``, object ``index``), in ``descriptors``."""

    dtype: np.dtype  # h5py's: h5py.string_dtype(...) or h5py.vlen_dtype(base)
    base: _Type | None  # a sequence's element type; None for strings
    shape: tuple[int, ...]
    descriptors: bytes


@dataclass(frozen=True, slots=True)
class _Type:
    dtype: np.dtype
    nullterm: bool  # a null-terminated string: reading stops at the first null byte


class AttributeReader:
    """Reads objects' attributes with the synchronous ``read_at(offset, length)``."""

    def __init__(self, read_at: ReadAt, superblock: Superblock, file_size: int | None) -> None:
        self.sb = superblock
        self._io = Io(local_read_ranges(read_at), superblock, file_size)
        self._collections: dict[int, dict[int, bytes] | None] = {}  # parsed global heap collections

    def read(self, header_address: int) -> list[HeaderAttribute]:
        """The attributes of the object whose header is at ``header_address`` (relative to
        the base address), in the order h5py lists them.

        Raises :class:`UnsupportedIndexError` where the object must be left to h5py whole
        (dense storage, a shared attribute message, anything that does not parse)."""
        return header_attributes(run_sync(read_header(self._io, header_address, _KEEP)), self.sb)

    def resolved(self, parsed: list[HeaderAttribute]) -> list[HeaderAttribute]:
        """``parsed`` with its variable-length values read from the global heap; a value
        that cannot be read here is left to h5py (``dtype`` None)."""
        if not any(isinstance(a.value, VariableLength) for a in parsed):
            return parsed
        out = []
        for attribute in parsed:
            pending = attribute.value
            if isinstance(pending, VariableLength):
                try:
                    value = resolve_variable_length(pending, self._heap_object, self.sb.sizeof_offsets)
                    attribute = HeaderAttribute(attribute.name, pending.dtype, value, False, pending.shape)
                except (UnsupportedIndexError, ValueError, IndexError, struct.error):
                    attribute = HeaderAttribute(attribute.name, None, None)
            out.append(attribute)
        return out

    def _heap_object(self, address: int, index: int) -> bytes:
        if address not in self._collections:
            if len(self._collections) >= _COLLECTIONS_KEPT:
                self._collections.clear()
            try:
                self._collections[address] = self._read_collection(address)
            except UnsupportedIndexError:
                self._collections[address] = None  # h5py reads (and its path checks) it
        objects = self._collections[address]
        found = None if objects is None else objects.get(index)
        if found is None:
            raise UnsupportedIndexError(f"global heap: no object {index} in the collection at {address}")
        return found

    def _read_collection(self, address: int) -> dict[int, bytes]:
        sizeof_lengths = self.sb.sizeof_lengths
        (header,) = run_sync(self._io.read([(address, collection_header_size(sizeof_lengths))], "global heap"))
        size = collection_size(header, sizeof_lengths)
        (data,) = run_sync(self._io.read([(address, size)], "global heap collection"))
        return collection_objects(data, sizeof_lengths, self._io.base + address)

    def header(self, header_address: int) -> ObjectHeader:
        """Every message of the object header at ``header_address`` (its attributes:
        :func:`header_attributes`)."""
        return run_sync(read_header(self._io, header_address))


def header_attributes(header: ObjectHeader, sb: Superblock) -> list[HeaderAttribute]:
    """The attributes of a parsed object header, in h5py's order: creation order where the
    header tracks it, else by name (``strcmp``: byte order). h5py iterates with
    ``H5_ITER_INC`` on that index; for compact storage libhdf5 sorts its table of the
    header's attribute messages by it (``H5A__attr_sort_table``)."""
    found: list[tuple[int, HeaderAttribute]] = []
    for m in header.messages:
        if m.type == MSG_ATTRIBUTE_INFO:
            _check_compact(m.data, sb)
        elif m.type == MSG_ATTRIBUTE:
            if m.flags & MSG_FLAG_SHARED:
                raise UnsupportedIndexError("a shared attribute message")
            order = -1 if m.creation_order is None else m.creation_order
            if len(m.data) <= _CACHED_BODY:
                parsed = _parsed(m.data, sb.sizeof_lengths)
            else:  # parsed afresh each time: an object of its own, which no cache should keep
                fresh = parse_attribute(m.data, sb.sizeof_lengths)
                parsed = HeaderAttribute(fresh.name, fresh.dtype, fresh.value, False, fresh.shape)
            found.append((order, parsed))
    names = {a.name for _, a in found}
    if len(names) != len(found):
        raise UnsupportedIndexError("two attribute messages of the same name")
    if header.tracks_creation_order:
        if len({order for order, _ in found}) != len(found):
            raise UnsupportedIndexError("two attributes of the same creation order")
        found.sort(key=lambda pair: pair[0])
        return [a for _, a in found]
    return sorted((a for _, a in found), key=lambda a: a.name)


def _check_compact(data: bytes, sb: Superblock) -> None:
    """IV.A.2.v: version 0, flags, [maximum creation index (2)], fractal heap address, ...;
    a defined heap address means the attributes are in dense storage, not in messages."""
    if len(data) < 2 or data[0] != 0 or data[1] & ~(_AINFO_TRACKED | _AINFO_INDEXED):
        raise UnsupportedIndexError("attribute info message: unknown version or flags")
    at = 2 + (2 if data[1] & _AINFO_TRACKED else 0)
    heap = data[at : at + sb.sizeof_offsets]
    if len(heap) != sb.sizeof_offsets:
        raise UnsupportedIndexError("attribute info message: truncated")
    if int.from_bytes(heap, "little") != sb.undefined_address:
        raise UnsupportedIndexError("attributes in dense storage")


_CACHED_BODY = 1024  # larger messages (up to 64 KiB) are parsed each time: the cache stays small


@lru_cache(maxsize=4096)
def _parsed(body: bytes, sizeof_lengths: int) -> HeaderAttribute:
    """:func:`parse_attribute`, once per distinct (small) message: the same attribute (a
    MATLAB class, a path) recurs on many objects. The values it hands out are shared, so
    arrays are made read-only."""
    found = parse_attribute(body, sizeof_lengths)
    if isinstance(found.value, np.ndarray):
        found.value.flags.writeable = False
    return found


def parse_attribute(body: bytes, sizeof_lengths: int) -> HeaderAttribute:
    """IV.A.2.m. Version 1: version, reserved, three sizes, then name, datatype and
    dataspace each padded to 8 bytes; version 2: the same with flags and no padding;
    version 3: a character set byte before the name. The name's size counts its null."""
    if len(body) < 8:
        raise UnsupportedIndexError("attribute message: truncated")
    version, flags = body[0], body[1]
    name_size, type_size, space_size = _SIZES.unpack_from(body, 2)
    name_at = 9 if version == 3 else 8
    if version == 1:
        flags = 0  # reserved
        type_at = name_at + _pad8(name_size)
        space_at = type_at + _pad8(type_size)
        data_at = space_at + _pad8(space_size)
    elif version in (2, 3):
        if flags & ~(_ATTR_SHARED_TYPE | _ATTR_SHARED_SPACE):
            raise UnsupportedIndexError(f"attribute message: unknown flags {flags:#x}")
        type_at = name_at + name_size
        space_at = type_at + type_size
        data_at = space_at + space_size
    else:
        raise UnsupportedIndexError(f"attribute message version {version}")
    if name_size < 1 or data_at > len(body) or body[name_at + name_size - 1] != 0:
        raise UnsupportedIndexError("attribute message: a name that is not null-terminated")
    name = body[name_at : name_at + name_size - 1]
    if b"\0" in name:  # libhdf5 keeps the name up to the first null (strndup)
        raise UnsupportedIndexError("attribute message: a null byte inside the name")
    if flags:  # a committed datatype or a shared dataspace: elsewhere in the file
        return HeaderAttribute(name, None, None)
    datatype = body[type_at : type_at + type_size]
    if len(datatype) >= 8 and datatype[0] & 0x0F == _CLASS_VLEN:
        return _variable_length(name, datatype, body[space_at : space_at + space_size], body, data_at, sizeof_lengths)
    kind = _datatype(datatype)
    if kind is None:
        return HeaderAttribute(name, None, None)
    shape = _dataspace(body[space_at : space_at + space_size], sizeof_lengths)
    if shape is None:
        return HeaderAttribute(name, kind.dtype, NULL)
    return HeaderAttribute(name, kind.dtype, _value(kind, shape, body, data_at))


def _variable_length(
    name: bytes, datatype: bytes, space: bytes, body: bytes, data_at: int, sizeof_lengths: int
) -> HeaderAttribute:
    """IV.A.2.d class 9: type (bits 0-3: 0 sequence, 1 string), padding (4-7), character
    set (8-11); the base type follows. Sequences of the classes read here, strings
    null-terminated in ASCII or UTF-8; the values wait for the global heap (None: h5py)."""
    bits = datatype[1] | datatype[2] << 8 | datatype[3] << 16
    kind, pad, charset = bits & 0x0F, bits >> 4 & 0x0F, bits >> 8 & 0x0F
    if datatype[0] >> 4 not in _DATATYPE_VERSIONS or bits >> 12:
        return HeaderAttribute(name, None, None)
    base: _Type | None = None
    if kind == _VLEN_STRING:
        if pad != _NULLTERM or charset not in _ENCODINGS:
            return HeaderAttribute(name, None, None)
        dtype = h5py.string_dtype(_ENCODINGS[charset])
    elif kind == _VLEN_SEQUENCE and not pad and not charset:
        base = _datatype(datatype[8:])
        # h5py 3 gives sequences of big-endian numbers with their bytes unswapped: h5py's
        # path reads those (h5lens's answer stays the same whichever path reads it)
        if base is None or base.dtype.byteorder == (">" if np.little_endian else "<"):
            return HeaderAttribute(name, None, None)
        dtype = h5py.vlen_dtype(base.dtype)
    else:
        return HeaderAttribute(name, None, None)
    shape = _dataspace(space, sizeof_lengths)
    if shape is None:
        return HeaderAttribute(name, None, None)  # a null dataspace: h5py's Empty, read by h5py
    size = int.from_bytes(datatype[4:8], "little")  # length (4), heap ID: collection address, index (4)
    nbytes = math.prod(shape) * size
    if size <= 8 or data_at + nbytes > len(body):
        raise UnsupportedIndexError("attribute message: its data is truncated")
    return HeaderAttribute(name, None, VariableLength(dtype, base, shape, body[data_at : data_at + nbytes]))


def resolve_variable_length(value: VariableLength, objects: Callable[[int, int], bytes], sizeof_offsets: int) -> Any:
    """``value`` as h5py's ``obj.attrs[name]`` gives it, the global heap object of each
    element from ``objects(collection address, index)``."""
    record = np.dtype([("length", "<u4"), ("address", f"<u{sizeof_offsets}"), ("index", "<u4")])
    if record.itemsize * math.prod(value.shape) != len(value.descriptors):
        raise UnsupportedIndexError("attribute message: variable-length descriptors of another size")
    out = np.empty(math.prod(value.shape), dtype=value.dtype)
    for i, (length, address, index) in enumerate(np.frombuffer(value.descriptors, record).tolist()):
        data = objects(address, index) if length else b""
        if value.base is None:  # a string: h5py reads it as a C string, up to its first null
            if len(data) < length:
                raise UnsupportedIndexError("global heap: a string shorter than its length")
            out[i] = data[:length].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        dtype = value.base.dtype
        if len(data) < length * dtype.itemsize:
            raise UnsupportedIndexError("global heap: a sequence shorter than its length")
        items = np.frombuffer(data, dtype, length)
        if value.base.nullterm:
            items = np.array([v.split(b"\0", 1)[0] for v in items.tolist()], dtype=dtype)
        out[i] = items.copy() if items.base is not None else items
    if not value.shape:
        return out[0]
    return out.reshape(value.shape)


def _pad8(n: int) -> int:
    return -(-n // 8) * 8


def _value(kind: _Type, shape: tuple[int, ...], body: bytes, at: int) -> Any:
    """The value as h5py reads it: an array of the attribute's shape (a scalar for a scalar
    dataspace), whose strings end at their first null where the type is null-terminated."""
    dtype = kind.dtype
    count = math.prod(shape)
    if count == 0:
        return np.zeros(shape, dtype=dtype)
    nbytes = count * dtype.itemsize
    if at + nbytes > len(body):
        raise UnsupportedIndexError("attribute message: its data is truncated")
    values = np.frombuffer(body, dtype, count, at)
    if kind.nullterm:
        values = np.array([v.split(b"\0", 1)[0] for v in values.tolist()], dtype=dtype)
    else:
        values = values.copy()  # writable, as h5py's own array is
    if not shape:
        return values.reshape(())[()]
    return values.reshape(shape)


@lru_cache(maxsize=1024)
def _datatype(data: bytes) -> _Type | None:
    """IV.A.2.d for the classes read here; None for anything else. Few distinct datatype
    messages occur in a file, hence the cache."""
    if len(data) < 8:
        raise UnsupportedIndexError("datatype message: truncated")
    klass, version = data[0] & 0x0F, data[0] >> 4
    if version not in _DATATYPE_VERSIONS:
        return None
    bits = data[1] | data[2] << 8 | data[3] << 16
    size = int.from_bytes(data[4:8], "little")
    if klass == _CLASS_FIXED:
        return _fixed(data, bits, size)
    if klass == _CLASS_FLOAT:
        return _float(data, bits, size)
    if klass == _CLASS_STRING:
        return _string(bits, size)
    return None


def _fixed(data: bytes, bits: int, size: int) -> _Type | None:
    """Properties: bit offset (2), bit precision (2). Only whole values with no padding
    bits: libhdf5 reads those as they are (no conversion to h5py's memory type)."""
    if len(data) < 12 or bits & ~_FIXED_KNOWN or bits & _FIXED_PADDING or size not in _INTEGER_SIZES:
        return None
    offset, precision = struct.unpack_from("<HH", data, 8)
    if offset != 0 or precision != 8 * size:
        return None
    order = ">" if bits & _FIXED_BE else "<"
    return _Type(np.dtype(f"{order}{'i' if bits & _FIXED_SIGNED else 'u'}{size}"), nullterm=False)


def _float(data: bytes, bits: int, size: int) -> _Type | None:
    """Properties: bit offset (2), bit precision (2), exponent location (1) and size (1),
    mantissa location (1) and size (1), exponent bias (4). Only IEEE binary16/32/64 exactly."""
    if len(data) < 20 or size not in _IEEE:
        return None
    sign = bits >> 8 & 0xFF
    if bits & (_FLOAT_VAX | _FLOAT_PADDING) or bits & _FLOAT_NORMALIZATION != _FLOAT_IMPLIED:
        return None
    if bits & ~(_FLOAT_BE | _FLOAT_VAX | _FLOAT_PADDING | _FLOAT_NORMALIZATION | 0xFF00) or sign != 8 * size - 1:
        return None
    offset, precision, *layout = struct.unpack_from("<HHBBBBI", data, 8)
    if offset != 0 or precision != 8 * size or tuple(layout) != _IEEE[size]:
        return None
    return _Type(np.dtype(f"{'>' if bits & _FLOAT_BE else '<'}f{size}"), nullterm=False)


def _string(bits: int, size: int) -> _Type | None:
    """No properties. Null-terminated and null-padded strings of ASCII or UTF-8 only
    (space-padded ones lose their trailing spaces in libhdf5's conversion)."""
    pad, charset = bits & 0x0F, bits >> 4 & 0x0F
    if bits >> 8 or pad not in (_NULLTERM, _NULLPAD) or charset not in _ENCODINGS or size == 0:
        return None
    # h5py.string_dtype(encoding, size): the set of characters rides in the dtype's metadata
    dtype = np.dtype(f"S{size}", metadata={"h5py_encoding": _ENCODINGS[charset]})
    return _Type(dtype, nullterm=pad == _NULLTERM)


@lru_cache(maxsize=1024)
def _dataspace(data: bytes, sizeof_lengths: int) -> tuple[int, ...] | None:
    """IV.A.2.b: the shape (``()`` for a scalar), None for a null dataspace. Version 1:
    version, rank, flags, 5 reserved bytes (rank 0 is a scalar); version 2: version, rank,
    flags, type. Then the dimensions (size of lengths each); maxima are not needed."""
    if len(data) < 4:
        raise UnsupportedIndexError("dataspace message: truncated")
    version, rank, flags = data[0], data[1], data[2]
    if version == 1:
        kind, at = (_SPACE_SIMPLE if rank else _SPACE_SCALAR), 8
        if flags & _SPACE_HAS_PERMUTATION:
            raise UnsupportedIndexError("dataspace message: a permutation")
    elif version == 2:
        kind, at = data[3], 4
    else:
        raise UnsupportedIndexError(f"dataspace message version {version}")
    if flags & ~(_SPACE_HAS_MAX | _SPACE_HAS_PERMUTATION):
        raise UnsupportedIndexError(f"dataspace message: unknown flags {flags:#x}")
    if kind == _SPACE_NULL and rank == 0:
        return None
    if kind == _SPACE_SCALAR and rank == 0:
        return ()
    if kind != _SPACE_SIMPLE or rank == 0 or len(data) < at + rank * sizeof_lengths:
        raise UnsupportedIndexError("dataspace message: not a scalar, simple or null dataspace")
    return tuple(
        int.from_bytes(data[at + i * sizeof_lengths : at + (i + 1) * sizeof_lengths], "little") for i in range(rank)
    )
