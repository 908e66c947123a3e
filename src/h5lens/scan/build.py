"""Walk records → Manifest: one zarr.json document and one chunk table per node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5lens.errors import H5LensError, InvalidOptionError, MaterializeLimitError, NotHDF5Error, UnsupportedFeatureError
from h5lens.fetch.blocks import merge_plan
from h5lens.manifest.documents import check_documents
from h5lens.manifest.model import ChunkTable, ChunkTableBuilder, Manifest, NodeMap
from h5lens.scan import chunks as chunk_scan
from h5lens.scan.attrs import read_attributes
from h5lens.scan.codecs import ambiguous_length, read_pipeline, translate_pipeline, untranslatable
from h5lens.scan.dtypes import BYTE_STRING_PLAN, TypePlan, fill_value_json, plan_type
from h5lens.scan.materialize import (
    chunk_selection,
    compound_plan,
    compound_values,
    encode_chunks,
    is_bytes_values,
    read_values,
)
from h5lens.scan.profiles import ProfileContext, apply_profiles
from h5lens.scan.source import OpenSource
from h5lens.scan.walk import DatasetRecord, GroupRecord, Walk, walk

CONVENTIONS = ("released", "proposal")
DEFAULT_INLINE_THRESHOLD = 1000
# Materialised arrays larger than this are compressed inline.
_COMPRESS_INLINE_ABOVE = 64 << 10
_DEFAULT_KEY_ENCODING = {"name": "default", "configuration": {"separator": "/"}}


@dataclass(frozen=True)
class ScanProgress:
    """Where a scan is, for progress displays: called per dataset, and for remote files
    also every MiB that libhdf5 reads (a big chunk index can take a while)."""

    datasets_done: int
    datasets_total: int
    path: str  # the HDF5 path being scanned
    bytes_read: int  # from a remote source so far (0 for local files, read by libhdf5 natively)
    chunks: int  # chunks found so far


@dataclass(frozen=True)
class ScanOptions:
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD
    convention: str = "released"
    slab_bytes: int = chunk_scan.DEFAULT_SLAB_BYTES
    materialize_limit: int | None = None  # bytes; None: no limit
    profiles: bool = True  # rewrite h5ad / h5td layouts into what their zarr readers expect


def build_manifest(
    opened: OpenSource,
    options: ScanOptions,
    *,
    writer: str,
    progress: Callable[[ScanProgress], None] | None = None,
) -> Manifest:
    if options.convention not in CONVENTIONS:
        raise InvalidOptionError(f"convention must be one of {CONVENTIONS}. Got {options.convention!r}")
    h5 = opened.h5
    found = walk(h5)
    resolve = _resolver(h5, found)
    nan_strings = options.convention == "proposal"

    nodes = NodeMap()
    tables: dict[str, ChunkTable] = {}
    # A dataset with no zarr form may still be rewritten by a profile (an old h5ad's compound
    # obsm becomes plain arrays); the refusal stands only if no profile takes the node.
    refused: dict[str, UnsupportedFeatureError] = {}
    for group in found.groups:
        nodes[group.key] = _group_document(h5, group, resolve, nan_strings)
    state = {"done": 0, "path": "/", "chunks": 0}

    def report() -> None:
        if progress is not None:
            progress(ScanProgress(state["done"], len(found.datasets), state["path"], opened.bytes_read, state["chunks"]))

    opened.on_read(report)
    for number, record in enumerate(found.datasets):
        state.update(done=number, path=record.h5_path)
        report()
        try:
            doc, table = _array(h5[record.h5_path], record, options, resolve, nan_strings, opened.raw)
        except UnsupportedFeatureError as e:
            refused[record.key] = e
            continue
        except H5LensError:
            raise
        except (OSError, RuntimeError, KeyError) as e:
            raise NotHDF5Error(f"{record.h5_path}: cannot read dataset ({_first_line(e)})") from e
        nodes[record.key] = doc
        tables[record.key] = table
        state["chunks"] += table.n_present
    state.update(done=len(found.datasets), path="")
    report()
    opened.on_read(None)

    if options.profiles:
        apply_profiles(ProfileContext(h5, nodes, tables, options, found, refused=refused))
    for error in refused.values():
        raise error
    _inline_small_chunks(opened, tables, options.inline_threshold)
    check_documents(nodes)
    return Manifest(nodes, tables, [opened.source], options.convention, writer)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _resolver(h5: h5py.File, found: Walk):
    def resolve(ref: h5py.Reference) -> str | None:
        try:
            target = h5[ref]
        except (ValueError, KeyError, OSError, RuntimeError):
            return None
        return found.path_of(target) or target.name

    return resolve


def _group_document(h5: h5py.File, group: GroupRecord, resolve, nan_strings: bool) -> dict[str, Any]:
    attributes = read_attributes(h5[group.h5_path], group.h5_path, resolve, nan_as_string=nan_strings)
    if group.links:
        attributes["_LINKS"] = [{"name": e.name, "source": e.source, "path": e.path} for e in group.links]
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def _array(
    ds: h5py.Dataset, record: DatasetRecord, options: ScanOptions, resolve, nan_strings: bool, raw: Any = None
) -> tuple[dict[str, Any], ChunkTable]:
    path = record.h5_path
    plan = plan_type(ds.dtype, path)
    attributes = read_attributes(ds, path, resolve, nan_as_string=nan_strings)
    dcpl = ds.id.get_create_plist()
    layout = dcpl.get_layout()

    if ds.shape is None:  # null dataspace (h5py.Empty): no elements at all
        if plan.kind == "compound" and not plan.raw:
            plan = compound_plan(plan, compound_values(np.zeros(0, ds.dtype), plan, path, resolve))
        doc = _document(path, plan, (0,), (1,), _value_codecs(plan, 0), ds.fillvalue, attributes)
        doc["attributes"]["_EMPTY"] = True
        return doc, ChunkTable.empty((0,))

    shape = tuple(ds.shape) + plan.extra_shape
    base_itemsize = ds.dtype.base.itemsize if ds.dtype.subdtype else ds.dtype.itemsize
    filters = read_pipeline(dcpl)
    chunked = layout == h5py.h5d.CHUNKED
    hdf5_chunks = tuple(ds.chunks) + plan.extra_shape if chunked else None

    referencable = plan.raw and layout in (h5py.h5d.CHUNKED, h5py.h5d.CONTIGUOUS) and not _external(dcpl)
    pipeline = translate_pipeline(filters, base_itemsize) if referencable and chunked else []
    if pipeline is None:
        referencable = False

    if referencable:
        codecs = [_bytes_codec(plan)] + pipeline
        if chunked:
            doc = _document(path, plan, shape, hdf5_chunks, codecs, ds.fillvalue, attributes)
            scan = chunk_scan.scan_chunked(ds.id, shape, hdf5_chunks, raw)
            table = scan.table
            redo = scan.masked
            suspect = ambiguous_length(filters, _chunk_nbytes(doc, base_itemsize))
            if suspect is not None:
                masked = set(redo)
                for index in np.argwhere((table.source == 0) & (table.length == suspect)):
                    if tuple(int(i) for i in index) not in masked:
                        redo.append(tuple(int(i) for i in index))
        else:
            chunk_shape = chunk_scan.plan_slabs(shape, base_itemsize, options.slab_bytes)
            doc = _document(path, plan, shape, chunk_shape, codecs, ds.fillvalue, attributes)
            table, tail = chunk_scan.scan_contiguous(ds.id.get_offset(), shape, chunk_shape, base_itemsize)
            redo = [tail] if tail is not None else []
        if redo:  # chunks whose stored bytes the array's codecs cannot decode as they are
            _check_limit(path, options, len(redo) * _chunk_nbytes(doc, base_itemsize), "chunks that skip filters")
            regions = [(idx, read_values(ds, plan, chunk_selection(idx, doc_chunks(doc), shape), path, resolve)) for idx in redo]
            _store_inline(table, redo, encode_chunks(doc, regions))
        return _finish_scalar(doc, table.build(), options)

    # Everything else is decoded by h5py and stored inline.
    reason = _materialize_reason(plan, layout, dcpl, filters, base_itemsize)
    estimate = int(np.prod(shape, dtype=np.int64)) * max(base_itemsize, 1)
    _check_limit(path, options, estimate, reason)
    values = read_values(ds, plan, (), path, resolve)
    if plan.kind == "string" and is_bytes_values(values):
        plan = BYTE_STRING_PLAN  # not UTF-8 text: the bytes, exactly as h5py reads them
    if plan.kind == "compound" and not plan.raw:
        plan = compound_plan(plan, values)
    values = values.reshape(shape) if values.shape != shape else values
    return inline_array(path, plan, values, attributes, ds.fillvalue, options, chunk_shape=hdf5_chunks)


def inline_array(
    path: str,
    plan: TypePlan,
    values: np.ndarray,
    attributes: dict[str, Any],
    fill: Any,
    options: ScanOptions,
    *,
    chunk_shape: tuple[int, ...] | None = None,
) -> tuple[dict[str, Any], ChunkTable]:
    """An array whose chunks are ``values`` encoded inline (zarr encodes them)."""
    shape = tuple(values.shape)
    chunk_shape = chunk_shape or chunk_scan.plan_slabs(shape, _value_itemsize(plan, values), options.slab_bytes)
    codecs = _value_codecs(plan, values.nbytes)
    doc = _document(path, plan, shape, chunk_shape, codecs, fill, attributes)
    table = ChunkTableBuilder(chunk_scan.grid_shape(shape, chunk_shape))
    if shape and 0 in shape:
        return _finish_scalar(doc, table.build(), options)
    if shape:
        regions = [(idx, values[chunk_selection(idx, chunk_shape, shape)]) for idx in np.ndindex(table.grid_shape)]
    else:
        regions = [((), values)]
    encoded = encode_chunks(doc, regions)
    _store_inline(table, list(encoded), encoded)
    return _finish_scalar(doc, table.build(), options)


def values_plan(values: np.ndarray, path: str) -> TypePlan:
    """The storage plan for values made in memory (by a profile), not read from HDF5."""
    kind = values.dtype.kind
    if kind == "T" or (kind == "O" and all(isinstance(v, str) for v in values.ravel())):
        return TypePlan("string", np.dtypes.StringDType(), None, False, "string", "str")
    if kind == "U":
        return TypePlan("string", np.dtypes.StringDType(), None, False, "string", "str")
    return plan_type(values.dtype, path)


def doc_chunks(doc: dict[str, Any]) -> tuple[int, ...]:
    return tuple(doc["chunk_grid"]["configuration"]["chunk_shape"])


def _external(dcpl: h5py.h5p.PropDCID) -> bool:
    return dcpl.get_external_count() > 0


def _materialize_reason(plan: TypePlan, layout: int, dcpl, filters, itemsize: int) -> str:
    if not plan.raw:
        return f"{plan.kind} values are not stored in the dataset's chunks"
    if layout == h5py.h5d.COMPACT:
        return "compact storage"
    if layout == h5py.h5d.VIRTUAL:
        return "virtual dataset"
    if _external(dcpl):
        return "external raw storage"
    names = ", ".join(f.label for f in untranslatable(filters, itemsize))
    return f"filters with no zarr codec: {names}"


def _check_limit(path: str, options: ScanOptions, nbytes: int, reason: str) -> None:
    if options.materialize_limit is not None and nbytes > options.materialize_limit:
        raise MaterializeLimitError(
            f"{path}: {reason}; its {nbytes} bytes would be copied into the manifest, "
            f"more than materialize_limit={options.materialize_limit}"
        )


def _chunk_nbytes(doc: dict[str, Any], itemsize: int) -> int:
    return int(np.prod(doc_chunks(doc), dtype=np.int64)) * itemsize


def _value_itemsize(plan: TypePlan, values: np.ndarray) -> int:
    if plan.kind in ("string", "reference", "vlen-bytes"):
        return 16  # a typical short string; only used to size chunks
    return values.dtype.itemsize


def _store_inline(
    table: ChunkTableBuilder, indices: list[tuple[int, ...]], encoded: dict[tuple[int, ...], bytes]
) -> None:
    absent = [table.flat(idx) for idx in indices if tuple(idx) not in encoded]
    if absent:  # equal to the fill value everywhere: absent is exact
        table.clear(np.asarray(absent, dtype=np.int64))
    present = [tuple(idx) for idx in indices if tuple(idx) in encoded]
    if present:
        table.set_inline(np.asarray([table.flat(idx) for idx in present], dtype=np.int64), [encoded[idx] for idx in present])


def _bytes_codec(plan: TypePlan) -> dict[str, Any]:
    if plan.endian is None:
        return {"name": "bytes", "configuration": {}}
    return {"name": "bytes", "configuration": {"endian": plan.endian}}


def _value_codecs(plan: TypePlan, nbytes: int) -> list[dict[str, Any]]:
    if plan.kind in ("string", "reference"):
        return [{"name": "vlen-utf8", "configuration": {}}]
    if plan.kind == "vlen-bytes":
        return [{"name": "vlen-bytes", "configuration": {}}]
    endian = None if plan.numpy_dtype.itemsize <= 1 else "little"
    codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": endian} if endian else {}}]
    if nbytes > _COMPRESS_INLINE_ABOVE:
        codecs.append({"name": "zstd", "configuration": {"level": 3, "checksum": False}})
    return codecs


def _document(
    path: str,
    plan: TypePlan,
    shape: tuple[int, ...],
    chunk_shape: tuple[int, ...],
    codecs: list[dict[str, Any]],
    fill: Any,
    attributes: dict[str, Any],
) -> dict[str, Any]:
    attributes = dict(attributes)
    if plan.dtype_attr is not None:
        attributes["_DTYPE"] = plan.dtype_attr
    if plan.reference_fields:
        attributes["_REFERENCE_FIELDS"] = list(plan.reference_fields)
    if plan.enum is not None:
        attributes["_ENUM"] = plan.enum
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": plan.data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(1, c) for c in chunk_shape]}},
        "chunk_key_encoding": _DEFAULT_KEY_ENCODING,
        "fill_value": fill_value_json(plan, fill, path),
        "codecs": codecs,
        "attributes": attributes,
    }


def _finish_scalar(
    doc: dict[str, Any], table: ChunkTable, options: ScanOptions
) -> tuple[dict[str, Any], ChunkTable]:
    """The proposal writes 0-d datasets as shape (1,) with ``_SCALAR: true``."""
    if doc["shape"] or options.convention != "proposal":
        return doc, table
    doc["shape"] = [1]
    doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": [1]}}
    doc["attributes"]["_SCALAR"] = True
    return doc, table.reshaped((1,))


def _inline_small_chunks(opened: OpenSource, tables: dict[str, ChunkTable], threshold: int) -> None:
    """Copy the referenced chunks of small *arrays* (whole stored size at most ``threshold``
    bytes) into the manifest. The chunks of a big array stay references however small each
    one is: the manifest is a map of the data, not a copy of it.

    Reads go in file order, neighbouring chunks merged into one read (for a remote
    source, one request instead of thousands).
    """
    if threshold <= 0:
        return
    paths, flats, offsets, lengths = [], [], [], []
    for number, (path, table) in enumerate(tables.items()):
        referenced = table.referenced_bytes
        if referenced == 0 or referenced + table.inline_bytes > threshold:
            continue
        small = np.flatnonzero((table.source >= 0).reshape(-1))
        paths.append(np.full(small.size, number))
        flats.append(small)
        offsets.append(table.offset.reshape(-1)[small])
        lengths.append(table.length.reshape(-1)[small])
    if not flats:
        return
    which, flat = np.concatenate(paths), np.concatenate(flats)
    offset, length = np.concatenate(offsets).astype(np.int64), np.concatenate(lengths).astype(np.int64)
    order = np.argsort(offset, kind="stable")
    which, flat, offset, length = which[order], flat[order], offset[order], length[order]
    payloads = read_merged(opened, offset, length)
    names = list(tables)
    for number in np.unique(which).tolist():
        mine = np.flatnonzero(which == number)
        name = names[number]
        tables[name] = tables[name].with_inline(flat[mine], [payloads[i] for i in mine.tolist()])


def read_merged(opened: OpenSource, offset: np.ndarray, length: np.ndarray) -> list[bytes]:
    """Read ranges sorted by offset, neighbours merged into one read as the readers merge
    them (:func:`h5lens.fetch.merge_plan`: one plan for every reader of bytes)."""
    out: list[bytes] = []
    ends = offset + length
    for lo, hi in merge_plan(offset, length):
        base = int(offset[lo])
        block = memoryview(opened.read(base, int(ends[lo:hi].max()) - base))
        for i in range(lo, hi):
            start = int(offset[i]) - base
            out.append(bytes(block[start : start + int(length[i])]))
    return out


__all__ = ["ScanOptions", "ScanProgress", "build_manifest", "CONVENTIONS", "DEFAULT_INLINE_THRESHOLD", "UnsupportedFeatureError"]
