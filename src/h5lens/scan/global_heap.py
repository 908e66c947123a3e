"""Global heap collections checked before libhdf5 reads variable-length data from them.

Variable-length strings live in global heap collections ("GCOL", HDF5 file format
specification III.E); a dataset stores, per element, a length and the address of its
collection. libhdf5 parses a whole collection the first time it touches it, and that parse
never ends on some damage: an object of index 0 and size 0 (free space of no size) leaves
its cursor where it was, forever; an object whose size runs past the collection makes it
read outside its buffer. h5py then hangs or worse, and with it the scan.

So before h5py reads a variable-length dataset, the collections its elements point at are
walked here the way libhdf5 walks them, and one that would not parse is refused with an
error naming the dataset. The element descriptors are read from the dataset's storage:
contiguous, or chunked with the filters variable-length data is written with (deflate,
shuffle, fletcher32), undone by the filter table's decoders (:mod:`h5lens.codecs.table`),
which never inflate past a chunk's size whatever the stream claims; attribute values from the attribute messages of the object header,
read by h5lens's own header parser. Compact datasets and attributes in dense storage (a
fractal heap) are not reached, nor are variable-length fields inside compounds.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import h5py
import numpy as np

from h5lens.codecs.table import DEFLATE, FILTERS, FLETCHER32, SHUFFLE, ChunkDecoder, decoder
from h5lens.errors import NotHDF5Error
from h5lens.scan.chunks import contiguous_offset
from h5lens.scan.hdf5 import Superblock, UnsupportedIndexError, unfiltered_edges
from h5lens.scan.hdf5.global_heap import collection_objects, collection_size
from h5lens.scan.hdf5.global_heap import header_size as collection_header_size
from h5lens.scan.hdf5.object_header import object_header_messages

ReadRange = Callable[[int, int], bytes]

_UNDEFINED = (0, 2**64 - 1, 2**32 - 1)
_FILTERS_READ = (DEFLATE, SHUFFLE, FLETCHER32)  # what variable-length data is written with
_MSG_ATTRIBUTE = 0x000C


class HeapCheck:
    """Checks collections once each (datasets share them), reading through ``read``.
    ``superblock`` (h5lens's parse of it, or None) lets attribute values be checked too:
    their descriptors are read from the object headers."""

    def __init__(
        self,
        h5: h5py.File,
        read: ReadRange,
        file_size: int | None,
        superblock: Callable[[], Superblock | None] | None = None,
    ) -> None:
        self.read = read
        self.file_size = file_size
        fcpl = h5.id.get_create_plist()
        self.sizeof_addr, self.sizeof_size = fcpl.get_sizes()
        # HDF5 addresses count from the base address, the superblock's position: a user block
        # (every MATLAB v7.3 file has 512 bytes) shifts every one of them. libhdf5 reports the
        # superblock's position as the user block size.
        self.base = int(fcpl.get_userblock())
        self.superblock = superblock
        self.checked: set[int] = set()

    def check_attributes(self, obj: h5py.HLObject, path: str) -> None:
        """Refuse ``obj`` if a collection holding one of its variable-length attribute values
        would not parse. Attributes in dense storage (a fractal heap) are not reached."""
        superblock = self.superblock() if self.superblock is not None else None
        if superblock is None:
            return
        try:
            messages = object_header_messages(
                self.read, int(h5py.h5g.get_objinfo(obj.id).objno[0]), superblock=superblock, file_size=self.file_size
            )
            addresses = {
                address
                for mtype, _, body in messages
                if mtype == _MSG_ATTRIBUTE
                for address in self._attribute_addresses(body, superblock)
            }
        except (UnsupportedIndexError, OSError, RuntimeError, ValueError, struct.error):
            return  # reading the attributes will fail and say so, if they are damaged
        if addresses - self.checked:
            self._check_collections(addresses, f"{path} (an attribute)")

    def check_dataset(self, ds: h5py.Dataset, path: str) -> None:
        """Refuse ``ds`` if a collection its variable-length elements point at would not
        parse. Other datasets, layouts and filters not read here pass unchecked (as does
        storage that does not decode: h5py then fails on it, and says so)."""
        if not _is_variable(ds.id.get_type()):
            return
        try:
            descriptors = self._descriptors(ds)
        except (zlib.error, ValueError, LookupError, OSError, RuntimeError):  # a short or failing checksum too
            return
        if descriptors is not None:
            self._check_collections(set(np.unique(descriptors).tolist()), path)

    def _check_collections(self, addresses: set[int], path: str) -> None:
        for address in sorted(addresses):
            if address in _UNDEFINED or address in self.checked:
                continue
            problem = self._collection_problem(address)
            if problem is not None:
                raise NotHDF5Error(
                    f"{path}: the global heap collection at byte {address} that holds its values is damaged "
                    f"({problem}); libhdf5 would not finish reading it"
                )
            self.checked.add(address)

    def _attribute_addresses(self, body: bytes, superblock: Superblock) -> list[int]:
        """Collection addresses of one attribute message's values, if it holds
        variable-length values of a datatype of its own (IV.A.2.m)."""
        version, flags = body[0], body[1]
        name_size, type_size, space_size = struct.unpack_from("<HHH", body, 2)
        if version == 1:
            pad = lambda n: -(-n // 8) * 8  # noqa: E731 - version 1 pads each part to 8 bytes
            at = 8
            name_end = at + pad(name_size)
            type_at, space_at = name_end, name_end + pad(type_size)
            data_at = space_at + pad(space_size)
        elif version in (2, 3):
            if flags & 0x03:
                return []  # a shared datatype or dataspace: not read here
            at = 8 if version == 2 else 9
            type_at = at + name_size
            space_at = type_at + type_size
            data_at = space_at + space_size
        else:
            return []
        datatype = body[type_at : type_at + type_size]
        if len(datatype) < 8 or datatype[0] & 0x0F != 9:  # class 9: variable-length
            return []
        count = _element_count(body[space_at : space_at + space_size], superblock)
        element = 4 + self.sizeof_addr + 4
        data = body[data_at : data_at + count * element]
        if count == 0 or len(data) < count * element or self.sizeof_addr not in (4, 8):
            return []
        if count > 64:
            return self._addresses(data).tolist()
        layout = "<IQI" if self.sizeof_addr == 8 else "<III"
        return [address for length, address, _ in struct.iter_unpack(layout, data) if length]

    def _addresses(self, raw: bytes) -> np.ndarray:
        """Collection addresses of the non-empty descriptors in ``raw``."""
        size = 4 + self.sizeof_addr + 4
        record = np.dtype([("length", "<u4"), ("address", f"<u{self.sizeof_addr}"), ("index", "<u4")])
        values = np.frombuffer(raw[: len(raw) - len(raw) % size], dtype=record)
        return values["address"][values["length"] > 0].astype(np.uint64)

    # -- the descriptors: (length u32, collection address, object index u32) per element --
    def _descriptors(self, ds: h5py.Dataset) -> np.ndarray | None:
        dcpl = ds.id.get_create_plist()
        layout = dcpl.get_layout()
        if layout == h5py.h5d.CONTIGUOUS and dcpl.get_external_count() == 0:
            offset = contiguous_offset(ds.id)
            if offset is None:
                return None
            raw = self.read(offset, ds.id.get_storage_size())
        elif layout == h5py.h5d.CHUNKED:
            chunked = self._chunked_storage(ds, dcpl)
            if chunked is None:
                return None
            raw = chunked
        else:
            return None
        if self.sizeof_addr not in (4, 8):
            return None
        return self._addresses(raw)

    def _chunked_storage(self, ds: h5py.Dataset, dcpl: h5py.h5p.PropDCID) -> bytes | None:
        element = 4 + self.sizeof_addr + 4
        pipeline = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
        if any(f[0] not in _FILTERS_READ for f in pipeline):
            return None
        # the filter table's decoders, configured from the filters' own cd_values (the element
        # size libhdf5 shuffles by is the one the filter recorded)
        undo: list[ChunkDecoder] = []
        for f in pipeline:
            found = decoder(FILTERS[f[0]].codec_json(tuple(f[2]), element) or {}, element)
            if found is None:
                return None
            undo.append(found)
        # a checksum may come before the other filters: their output is at most 4 bytes more
        most = int(np.prod(ds.chunks)) * element + 4
        pieces: list[bytes] = []
        raw_edges = self._unfiltered_edges(ds) if pipeline else False
        if raw_edges is None:
            return None  # not known which chunks skip the filters: not read here
        shape = np.asarray(ds.shape, np.int64)
        chunk_shape = np.asarray(ds.chunks, np.int64)

        def take(info: h5py.h5d.StoreInfo) -> None:
            data = self.read(info.byte_offset, info.size)
            if raw_edges and np.any(np.asarray(info.chunk_offset, np.int64) + chunk_shape > shape):
                pieces.append(data)  # a partial edge chunk stored without the filters
                return
            for position in reversed(range(len(undo))):  # undo the pipeline, last filter first
                if not info.filter_mask & (1 << position):
                    data = bytes(undo[position](data, most))
            pieces.append(data)

        ds.id.chunk_iter(take)
        return b"".join(pieces)

    def _unfiltered_edges(self, ds: h5py.Dataset) -> bool | None:
        superblock = self.superblock() if self.superblock is not None else None
        if superblock is None:
            return None
        try:
            return unfiltered_edges(
                self.read, int(h5py.h5g.get_objinfo(ds.id).objno[0]), superblock=superblock, file_size=self.file_size
            )
        except (UnsupportedIndexError, OSError, ValueError, struct.error):
            return None

    # -- one collection, walked as libhdf5's H5HG__cache_heap_deserialize walks it --------
    def _collection_problem(self, address: int) -> str | None:
        """What keeps libhdf5 from parsing the collection at HDF5 ``address``, or None."""
        start = self.base + address  # absolute file offset
        header = collection_header_size(self.sizeof_size)
        if self.file_size is not None and start + header > self.file_size:
            return "it lies past the end of the file"
        try:
            size = collection_size(self.read(start, header), self.sizeof_size)
            if self.file_size is not None and start + size > self.file_size:
                return f"its size {size} runs past the end of the file"
            collection_objects(self.read(start, size), self.sizeof_size, start)
        except UnsupportedIndexError as e:
            return str(e)
        return None


def _is_variable(file_type: h5py.h5t.TypeID) -> bool:
    return file_type.get_class() == h5py.h5t.VLEN or (
        file_type.get_class() == h5py.h5t.STRING and file_type.is_variable_str()
    )


def _element_count(space: bytes, superblock: Superblock) -> int:
    """Elements of a dataspace message: 1 for a scalar, 0 for a null dataspace."""
    if len(space) < 8:
        return 0
    version, rank = space[0], space[1]
    if version == 2 and space[3] == 2:
        return 0  # null
    if rank == 0:
        return 1
    start = 8 if version == 1 else 4
    n = superblock.sizeof_lengths
    dims = [int.from_bytes(space[start + i * n : start + (i + 1) * n], "little") for i in range(rank)]
    return int(np.prod(dims, dtype=np.int64)) if dims else 1
