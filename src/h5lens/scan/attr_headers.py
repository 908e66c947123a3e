"""Attributes read from object headers rather than through h5py, for
:func:`h5lens.scan.attrs.read_attributes`.

h5py takes about a dozen library calls per attribute (open, type, space, memory type,
read); a MATLAB file has half a dozen attributes on each of tens of thousands of nodes.
:mod:`h5lens.scan.hdf5.attributes` reads the common ones from the object header's bytes
instead; this module finds the header (its address from libhdf5), reads it with the scan's
reader, and gives up, leaving the object to h5py, whenever anything does not add up.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import h5py

from h5lens.scan.hdf5.attributes import AttributeReader, HeaderAttribute
from h5lens.scan.hdf5.model import UnsupportedIndexError
from h5lens.scan.hdf5.reads import ReadAt
from h5lens.scan.hdf5.superblock import Superblock
from h5lens.scan.source import TrackedFile


class AttributeHeaders:
    """Reads objects' attribute messages with ``read_at`` (absolute offsets), the superblock
    (for the base address and field widths) from ``superblock()``, None when h5lens cannot
    parse it."""

    def __init__(self, read_at: ReadAt, superblock: Callable[[], Superblock | None], file_size: int | None) -> None:
        self.read_at = read_at
        self.superblock = superblock
        self.file_size = file_size
        self._reader: AttributeReader | None = None

    def reader(self) -> AttributeReader | None:
        """The header reader; None where h5lens cannot parse the superblock."""
        if self._reader is None:
            superblock = self.superblock()
            if superblock is None:
                return None
            self._reader = AttributeReader(self.read_at, superblock, self.file_size)
        return self._reader

    def attributes(self, obj: h5py.HLObject) -> list[HeaderAttribute] | None:
        """``obj``'s attributes in h5py's order, or None where h5py must read them all."""
        if self.reader() is None:
            return None
        assert self._reader is not None
        try:
            # get_objinfo reads only the header (h5o.get_info would also size a dataset's storage)
            address = int(h5py.h5g.get_objinfo(obj.id).objno[0])
            found = self._reader.resolved(self._reader.read(address))
            # libhdf5's own count: an attribute the header parse missed leaves the object to h5py
            if h5py.h5a.get_num_attrs(obj.id) != len(found):
                return None
        except (UnsupportedIndexError, OSError, RuntimeError, ValueError, TypeError, IndexError, struct.error):
            return None
        return found


def cached_reader(raw: TrackedFile) -> ReadAt:
    """Reads of a remote file served only from what libhdf5 has already fetched (opening an
    object reads its header): a header not all in the cache is left to h5py rather than
    costing a request."""

    def read_at(offset: int, length: int) -> bytes:
        found = raw.cached(offset, min(length, raw.size - offset))
        if found is None:
            raise UnsupportedIndexError("the object header is not in the read cache")
        return found

    return read_at
