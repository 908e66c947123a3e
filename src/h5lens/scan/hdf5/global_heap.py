"""Global heap collections ("GCOL"): the objects variable-length values are stored in.

Specification: III.E "Global Heap". libhdf5: H5HGcache.c (``H5HG__cache_heap_deserialize``),
whose walk this one follows step for step, so that a collection libhdf5 would not finish
parsing (an object of index 0 and size 0 leaves its cursor where it was, forever; an object
that runs past the collection makes it read outside its buffer) is found here first.

Both the collection header (signature, version, 3 reserved, size) and each object header
(index u16, references u16, 4 reserved, size) are padded to 8 bytes (H5HGpkg.h
``H5HG_SIZEOF_HDR``/``H5HG_SIZEOF_OBJHDR``): 16 bytes whatever the size of lengths, with the
size field at byte 8.
"""

from __future__ import annotations

import struct

from h5lens.scan.hdf5.model import UnsupportedIndexError

SIGNATURE = b"GCOL"


def header_size(sizeof_lengths: int) -> int:
    return _align8(8 + sizeof_lengths)


def collection_size(header: bytes, sizeof_lengths: int) -> int:
    """The size of the collection whose first :func:`header_size` bytes are ``header``."""
    if header[:4] != SIGNATURE or len(header) < 8 + sizeof_lengths or header[4] != 1:
        raise UnsupportedIndexError("no collection signature there")
    size = int.from_bytes(header[8 : 8 + sizeof_lengths], "little")
    if size < header_size(sizeof_lengths):
        raise UnsupportedIndexError(f"its size {size} is smaller than its header")
    return size


def collection_objects(data: bytes, sizeof_lengths: int, start: int = 0) -> dict[int, bytes]:
    """The objects (index -> bytes) of the whole collection ``data`` (which begins at file
    offset ``start``, for the messages). Raises :class:`UnsupportedIndexError` saying what
    keeps libhdf5 from parsing it."""
    size = collection_size(data, sizeof_lengths)
    if len(data) < size:
        raise UnsupportedIndexError(f"its size {size} runs past the end of the file")
    object_header = header_size(sizeof_lengths)
    objects: dict[int, bytes] = {}
    cursor = object_header
    while cursor < size:
        if cursor + object_header > size:
            break  # a tail too small for an object header is free space
        index = struct.unpack_from("<H", data, cursor)[0]
        length = int.from_bytes(data[cursor + 8 : cursor + 8 + sizeof_lengths], "little")
        if index > 0:
            if cursor + object_header + length > size:
                raise UnsupportedIndexError(f"object {index} runs past the collection's end")
            objects[index] = data[cursor + object_header : cursor + object_header + length]
            cursor += object_header + _align8(length)
        else:
            if length == 0:
                raise UnsupportedIndexError(f"free space of no size at byte {start + cursor}")
            cursor += length
    return objects


def _align8(n: int) -> int:
    return -(-n // 8) * 8
