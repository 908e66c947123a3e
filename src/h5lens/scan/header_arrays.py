"""Documents of plain contiguous datasets and of groups made from their object headers,
with no h5py object opened.

A MATLAB v7.3 file holds tens of thousands of tiny datasets (a struct field each, a cell's
element each); opening each through h5py and asking libhdf5 for its type, space, layout,
fill value and attributes costs a dozen library calls and most of a scan. Yet such a
dataset is a few header messages: its shape (the dataspace), where its bytes are (the
layout) and its attributes. This module reads those from the header bytes h5lens parses
anyway and builds the same document :func:`h5lens.scan.build._array` would.

What the header alone does not settle exactly is settled by libhdf5, once per distinct
message: the element type (its plan, as h5py reads it) and the fill value are computed
through h5py for the first dataset whose datatype and fill value messages have those
bytes, and reused for every later one with the same bytes (a type's plan and its fill
value are functions of those bytes alone). Anything else (a filter pipeline, external
storage, a chunked, compact or virtual layout, a shared message, a message this module
does not know, an attribute the header parse leaves to h5py, a count of attributes that
differs from libhdf5's) leaves the object to the full path, which says what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5lens.manifest.model import MISSING, ChunkTable
from h5lens.scan import chunks as chunk_scan
from h5lens.scan.arrays import bytes_codec, document, finish_scalar, inline_array
from h5lens.scan.attr_headers import AttributeHeaders
from h5lens.scan.attrs import ResolveRef, header_attributes_json
from h5lens.scan.dtypes import TypePlan, fill_value_json
from h5lens.scan.hdf5.attributes import _dataspace, header_attributes
from h5lens.scan.hdf5.model import UnsupportedIndexError
from h5lens.scan.hdf5.object_header import MSG_FLAG_SHARED, ObjectHeader
from h5lens.scan.hdf5.reads import ReadAt
from h5lens.scan.options import DefaultLimit, ScanOptions
from h5lens.scan.walk import DatasetRecord, GroupRecord

# Whether scans take this path (tests compare its documents with the full path's).
ENABLED = True

_MSG_NIL, _MSG_DATASPACE, _MSG_DATATYPE = 0x0000, 0x0001, 0x0003
_MSG_FILL_OLD, _MSG_FILL = 0x0004, 0x0005
_MSG_LAYOUT = 0x0008
_MSG_ATTRIBUTE, _MSG_COMMENT = 0x000C, 0x000D
_MSG_MTIME_OLD, _MSG_MTIME = 0x000E, 0x0012
_MSG_ATTRIBUTE_INFO, _MSG_REFCOUNT = 0x0015, 0x0016
# messages that change nothing in a contiguous dataset's document (h5lens keeps no comment
# or time); any other one (a pipeline, external files, ...) leaves the dataset to h5py
_DATASET_MESSAGES = frozenset(
    (_MSG_NIL, _MSG_DATASPACE, _MSG_DATATYPE, _MSG_FILL_OLD, _MSG_FILL, _MSG_LAYOUT, _MSG_ATTRIBUTE, _MSG_COMMENT,
     _MSG_MTIME_OLD, _MSG_MTIME, _MSG_ATTRIBUTE_INFO, _MSG_REFCOUNT)
)  # fmt: skip
# a group's header: its links (symbol table, link info, links, group info) and the above
_GROUP_MESSAGES = frozenset((*_DATASET_MESSAGES, 0x0002, 0x0006, 0x000A, 0x0011))
_LAYOUT_CONTIGUOUS = 1


@dataclass(frozen=True)
class TypeTemplate:
    """What libhdf5 says about datasets of one datatype and fill value message."""

    plan: TypePlan
    itemsize: int  # of one stored element
    fill: Any  # h5py's fill value (None: undefined)
    fill_json: Any
    codecs: tuple[dict[str, Any], ...]
    # object references (a MATLAB cell's elements): each stored element is the address of
    # the object it names, and the values stored inline are the paths of those objects
    references: bool = False


Learn = Callable[[], TypeTemplate | None]


class HeaderDocuments:
    """Makes documents from object headers read through ``headers``' reader."""

    def __init__(
        self,
        headers: AttributeHeaders,
        base_address: int,
        read_data: ReadAt | None = None,
        paths: dict[int, str] | None = None,
    ) -> None:
        """``read_data``: reads a local file's bytes (small datasets' values are then read
        here, as :func:`~h5lens.scan.small_arrays.inline_small_chunks` would read them);
        ``paths``: object header address -> the path the manifest holds the object at
        (datasets of object references are then made here too)."""
        self.headers = headers
        self.base = base_address
        self.read_data = read_data
        self.paths = paths or {}
        self._templates: dict[tuple[bytes, bytes | None, bytes | None], TypeTemplate | None] = {}
        self.datasets = 0  # made here
        self.groups = 0

    def _header(self, address: int | None) -> ObjectHeader | None:
        if address is None or not ENABLED:
            return None
        reader = self.headers.reader()
        if reader is None:
            return None
        try:
            return reader.header(address)
        except (UnsupportedIndexError, OSError, ValueError, IndexError):
            return None

    def _attributes(
        self, header: ObjectHeader, count: int | None, path: str, resolve: ResolveRef, nan_strings: bool,
        types: dict[str, str],
    ) -> dict[str, Any] | None:  # fmt: skip
        reader = self.headers.reader()
        assert reader is not None
        try:
            parsed = reader.resolved(header_attributes(header, reader.sb))
        except (UnsupportedIndexError, ValueError, IndexError):
            return None
        if count is None or count != len(parsed):  # libhdf5's count: nothing missed
            return None
        return header_attributes_json(parsed, path, resolve, nan_as_string=nan_strings, types=types)

    def group(
        self, record: GroupRecord, resolve: ResolveRef, nan_strings: bool, types: dict[str, str]
    ) -> dict[str, Any] | None:
        """The group's attributes from its header; None: h5py's path reads them."""
        header = self._header(record.address)
        if header is None or any(m.type not in _GROUP_MESSAGES for m in header.messages):
            return None
        attributes = self._attributes(header, record.attribute_count, record.h5_path, resolve, nan_strings, types)
        self.groups += attributes is not None
        return attributes

    def dataset(
        self,
        record: DatasetRecord,
        options: ScanOptions,
        resolve: ResolveRef,
        nan_strings: bool,
        types: dict[str, str],
        learn: Callable[[], TypeTemplate | None],
    ) -> tuple[dict[str, Any], ChunkTable] | None:
        """The document and chunk table of a plain contiguous dataset; None for any other
        (``learn``: the template of this dataset's type, from h5py, when none is known)."""
        header = self._header(record.address)
        if header is None:
            return None
        by_type: dict[int, bytes] = {}
        for m in header.messages:
            if m.type not in _DATASET_MESSAGES:
                return None
            if m.type == _MSG_ATTRIBUTE:
                continue
            if m.flags & MSG_FLAG_SHARED or m.type in by_type:
                return None
            by_type[m.type] = m.data
        datatype, space, layout = by_type.get(_MSG_DATATYPE), by_type.get(_MSG_DATASPACE), by_type.get(_MSG_LAYOUT)
        if datatype is None or space is None or layout is None:
            return None
        key = (datatype, by_type.get(_MSG_FILL), by_type.get(_MSG_FILL_OLD))
        if key in self._templates:
            template = self._templates[key]
        else:
            template = self._templates[key] = learn()
        if template is None:
            return None
        reader = self.headers.reader()
        assert reader is not None
        sb = reader.sb
        try:
            shape = _dataspace(space, sb.sizeof_lengths)
        except UnsupportedIndexError:
            return None
        if shape is None:
            return None  # null dataspace
        stored = _contiguous(layout, sb.sizeof_offsets, sb.sizeof_lengths, sb.undefined_address)
        if stored is None:
            return None
        address, size = stored
        shape = shape + template.plan.extra_shape
        if size != int(np.prod(shape, dtype=np.int64)) * template.itemsize and address is not None:
            return None
        if template.references:
            return self._references(record, options, resolve, nan_strings, types, header, template, shape, address)
        chunk_shape = chunk_scan.plan_slabs(shape, template.itemsize, options.slab_bytes)
        if shape and shape[0] % chunk_shape[0]:
            return None  # a partial tail slab: read through h5py
        attributes = self._attributes(header, record.attribute_count, record.h5_path, resolve, nan_strings, types)
        if attributes is None:
            return None
        offset = None if address is None or size == 0 else self.base + address
        doc = document(
            record.h5_path, template.plan, shape, chunk_shape, list(template.codecs), template.fill, attributes,
            fill_json=template.fill_json,
        )  # fmt: skip
        if offset is not None and self.read_data is not None and size <= options.inline_threshold:
            # one chunk (a slab is at least the whole of a small array), its bytes inline
            payload = self.read_data(offset, size)
            if len(payload) == size and tuple(chunk_shape) == tuple(max(1, n) for n in shape):
                self.datasets += 1
                return finish_scalar(doc, ChunkTable.one_inline(len(shape), payload), options)
        table, _ = chunk_scan.scan_contiguous(offset, shape, chunk_shape, template.itemsize)
        if template.fill is None and (table.source == MISSING).any():
            return None  # the full path refuses it, and says why
        self.datasets += 1
        return finish_scalar(doc, table.build(), options)


    def _references(
        self,
        record: DatasetRecord,
        options: ScanOptions,
        resolve: ResolveRef,
        nan_strings: bool,
        types: dict[str, str],
        header: ObjectHeader,
        template: TypeTemplate,
        shape: tuple[int, ...],
        address: int | None,
    ) -> tuple[dict[str, Any], ChunkTable] | None:
        """A contiguous dataset of object references: the paths of their targets, inline
        (what the full path reads through h5py, reference by reference)."""
        count = int(np.prod(shape, dtype=np.int64))
        if self.read_data is None or not isinstance(options.materialize_limit, DefaultLimit):
            return None  # a remote file's data is fetched in one batch later; a limit is checked there
        if address is None:
            if count:
                return None  # never written: the full path says what that reads as
            raw = b""
        else:
            nbytes = count * template.itemsize
            end = self.headers.file_size
            if end is not None and self.base + address + nbytes > end:
                return None  # the dataspace claims more than the file holds: the full path says so
            raw = self.read_data(self.base + address, nbytes)
            if len(raw) != nbytes:
                return None
        paths = []
        for target in np.frombuffer(raw, f"<u{template.itemsize}").tolist():
            found = "" if target == 0 else self.paths.get(target)  # 0: a null reference
            if found is None:
                return None  # not an object the walk recorded: the full path resolves it
            paths.append(found)
        attributes = self._attributes(header, record.attribute_count, record.h5_path, resolve, nan_strings, types)
        if attributes is None:
            return None
        values = np.array(paths, dtype=np.dtypes.StringDType()).reshape(shape)
        self.datasets += 1
        return inline_array(record.h5_path, template.plan, values, attributes, template.fill, options)


def learn_template(
    ds: h5py.Dataset, plan: TypePlan, fill: Any, path: str, sizeof_offsets: int
) -> TypeTemplate | None:
    """The template of ``ds``'s datatype and fill value (its ``plan`` and h5py's ``fill``),
    or None where datasets of this type are not made from their headers (their values are
    not their stored bytes as they are). Only the type counts here: each dataset's own
    messages say whether it is a plain contiguous one."""
    if plan.kind == "reference" and not plan.extra_shape and h5py.check_ref_dtype(ds.dtype) is h5py.Reference:
        file_type = ds.id.get_type()
        if file_type.get_class() == h5py.h5t.REFERENCE and file_type.get_size() == sizeof_offsets:
            # an H5R_OBJECT1 reference is stored as the address of its object
            return TypeTemplate(plan, sizeof_offsets, fill, None, (), references=True)
        return None
    if not plan.raw or plan.converted or ds.dtype.subdtype is not None or plan.numpy_dtype is None:
        return None
    if ds.dtype.hasobject:
        return None
    return TypeTemplate(
        plan, ds.dtype.itemsize, fill, fill_value_json(plan, fill, path), (*plan.array_codecs, bytes_codec(plan))
    )


def _contiguous(body: bytes, sizeof_offsets: int, sizeof_lengths: int, undefined: int) -> tuple[int | None, int] | None:
    """IV.A.2.i, versions 3 and 4, class 1 (contiguous): address, size. (None, size) where
    no storage is allocated; None for any other layout."""
    if len(body) < 2 or body[0] not in (3, 4) or body[1] != _LAYOUT_CONTIGUOUS:
        return None
    end = 2 + sizeof_offsets + sizeof_lengths
    if len(body) < end:
        return None
    address = int.from_bytes(body[2 : 2 + sizeof_offsets], "little")
    size = int.from_bytes(body[2 + sizeof_offsets : end], "little")
    return (None if address == undefined else address), size
