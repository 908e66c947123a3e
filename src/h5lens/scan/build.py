"""Walk records → Manifest: one zarr.json document and one chunk table per node."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import h5py
import numpy as np

from h5lens.errors import (
    H5LensError,
    MaterializeLimitError,
    NotHDF5Error,
    SourceNotFoundError,
    UnsupportedFeatureError,
)
from h5lens.format import convention
from h5lens.format.dtypes_forms import ragged_element, record_fields
from h5lens.manifest.documents import check_documents, chunk_shape_of
from h5lens.manifest.locations import is_remote
from h5lens.manifest.model import MISSING, ChunkTable, ChunkTableBuilder, Manifest, NodeMap
from h5lens.scan import chunks as chunk_scan
from h5lens.scan.arrays import (
    bytes_codec,
    chunk_nbytes,
    document,
    finish_scalar,
    inline_array,
    store_inline,
    value_codecs,
)
from h5lens.scan.attr_headers import AttributeHeaders, cached_reader
from h5lens.scan.codecs import (
    Filter,
    ambiguous_length,
    read_pipeline,
    translate_pipeline,
    untranslatable,
)
from h5lens.scan.dtypes import BYTE_STRING_PLAN, TypePlan, plan_type
from h5lens.scan.external import external_table, read_stream
from h5lens.scan.external import segments as external_segments
from h5lens.scan.global_heap import HeapCheck
from h5lens.scan.hdf5 import reader_for
from h5lens.scan.hdf5_types import element_dtype, stored_layout
from h5lens.scan.header_arrays import HeaderDocuments, TypeTemplate, learn_template
from h5lens.scan.materialize import (
    ResolvePath,
    chunk_selection,
    compound_plan,
    compound_values,
    encode_chunks,
    is_bytes_values,
    read_values,
    reference_path,
)
from h5lens.scan.node_documents import datatype_document, group_document, group_node, node_attributes
from h5lens.scan.options import (
    CONVENTIONS,
    DEFAULT_INLINE_THRESHOLD,
    DefaultLimit,
    ScanOptions,
    ScanProgress,
)
from h5lens.scan.other_files import OtherFiles
from h5lens.scan.profiles import ProfileContext
from h5lens.scan.ragged import Made, ragged_base, ragged_nodes, record_nodes
from h5lens.scan.regions import Resolver
from h5lens.scan.registry import apply_profiles
from h5lens.scan.small_arrays import inline_small_chunks
from h5lens.scan.source import OpenSource, TrackedFile, open_source
from h5lens.scan.unreadable import LeftOut, check_inside_file, unreadable
from h5lens.scan.virtual import virtual_table
from h5lens.scan.walk import DatasetRecord, GroupRecord, Opener, Walk, walk, zarr_path

logger = logging.getLogger("h5lens.scan")


class _ScanState(TypedDict):
    """Where the scan is, as the progress callback reports it."""

    done: int  # datasets scanned
    path: str  # the HDF5 path being scanned
    chunks: int  # chunks found so far


def build_manifest(
    opened: OpenSource,
    options: ScanOptions,
    *,
    writer: str,
    progress: Callable[[ScanProgress], None] | None = None,
) -> Manifest:
    files = OtherFiles(opened.source, opened.storage_options)
    try:
        return _build_on(opened, options, files, writer=writer, progress=progress)
    finally:
        files.close()


def _build_on(
    opened: OpenSource,
    options: ScanOptions,
    files: OtherFiles,
    *,
    writer: str,
    progress: Callable[[ScanProgress], None] | None,
) -> Manifest:
    if not opened.remote:
        return _build(opened, options, files, writer=writer, progress=progress)
    # libhdf5 reads a remote file with h5py's lock held, waiting on the event loop thread
    # that fetches the bytes; a cyclic collection there that frees an h5py object would
    # wait for that lock. No cyclic collection until the scan is done (the scan makes no cycles).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(opened, options, files, writer=writer, progress=progress)
    finally:
        if gc_was_enabled:
            gc.enable()


def _build(
    opened: OpenSource,
    options: ScanOptions,
    files: OtherFiles,
    *,
    writer: str,
    progress: Callable[[ScanProgress], None] | None = None,
) -> Manifest:
    h5 = opened.h5
    found = walk(h5)
    resolve = _resolver(h5, found)
    nan_strings = options.convention == "proposal"

    nodes = NodeMap()
    tables: dict[str, ChunkTable] = {}
    # A dataset with no zarr form may still be rewritten by a profile (an old h5ad's compound
    # obsm becomes plain arrays); the refusal stands only if no profile takes the node.
    refused: dict[str, UnsupportedFeatureError] = {}
    records: list[GroupRecord | DatasetRecord] = [*found.groups, *found.datasets, *found.datatypes]
    left_out = LeftOut(options.skip_unreadable, opened.failure, {r.h5_path: r.key for r in records})
    indexes = chunk_scan.IndexWalks(opened)
    # local files: preads (a few µs a header), not the buffered reader's seek and read
    read_at = reader_for(opened.raw) if not isinstance(opened.raw, TrackedFile) else opened.read
    heaps = HeapCheck(h5, read_at, opened.source.size, indexes.superblock)
    # attribute values from the object headers (a remote file's: only from what libhdf5 has read)
    header_read = cached_reader(opened.raw) if isinstance(opened.raw, TrackedFile) else read_at
    headers = AttributeHeaders(header_read, indexes.superblock, opened.source.size)
    types: dict[str, dict[str, str]] = {}  # node -> attribute -> numpy type name (attribute_types)
    base = indexes.superblock()
    local_data = None if opened.remote or isinstance(opened.raw, TrackedFile) else read_at
    made_from_headers = None
    if base is not None:
        paths = {g.address: zarr_path(g.key) for g in found.groups if g.address is not None}
        paths.update((d.address, zarr_path(d.key)) for d in found.datasets if d.address is not None)
        made_from_headers = HeaderDocuments(headers, base.base_address, local_data, paths)
    sizeof_offsets = base.sizeof_offsets if base is not None else 8
    for group in found.groups:
        group_types: dict[str, str] = {}
        attributes = None if made_from_headers is None else made_from_headers.group(group, resolve, nan_strings, group_types)
        if attributes is None:
            group_types = {}
            nodes[group.key] = group_document(h5, group, resolve, nan_strings, heaps, group_types, headers, left_out)
        else:
            nodes[group.key] = group_node(group, attributes)
        types[group.key] = group_types
    for named in found.datatypes:
        try:
            nodes[named.key] = datatype_document(
                h5, named, resolve, nan_strings, heaps, types.setdefault(named.key, {}), headers, left_out
            )
        except UnsupportedFeatureError as e:
            if left_out.node(named.key, e) is not None:
                raise
    state: _ScanState = {"done": 0, "path": "/", "chunks": 0}

    def report() -> None:
        if progress is not None:
            progress(ScanProgress(state["done"], len(found.datasets), state["path"], opened.bytes_read, state["chunks"]))

    opened.on_read(report)
    if opened.remote:
        # Every chunk index at once, level by level: a few round trips in all, and only
        # the index nodes' bytes (libhdf5 would walk them node by node through its blocks).
        indexes.walk_all(_chunk_index_addresses(h5, found))
    opener = Opener(h5)
    for number, record in enumerate(found.datasets):
        state["done"], state["path"] = number, record.h5_path
        report()
        found_types: dict[str, str] = {}
        try:
            plain = None if made_from_headers is None else made_from_headers.dataset(
                record, options, resolve, nan_strings, found_types, functools.partial(_template, opener, record.h5_path, sizeof_offsets)
            )  # fmt: skip
            if plain is not None:
                nodes[record.key] = plain[0]
                check_inside_file(record.h5_path, plain[1], opened.source.size)
                tables[record.key] = plain[1]
                state["chunks"] += plain[1].n_present
                types[record.key] = found_types
                continue
            found_types = {}
            ds = opener.dataset(record.h5_path)  # MATLAB files hold tens of thousands
            dtype = element_dtype(ds, record.h5_path)  # once: both need it
            made = _ragged(ds, record, options, resolve, nan_strings, heaps, found_types, headers, dtype, left_out)
            if made is None:
                doc, table = _array(
                    ds, record, options, resolve, nan_strings, indexes, heaps, files, found_types, headers, dtype,
                    left_out,
                )  # fmt: skip
                made = [(record.key, doc, table)]
            for _, _, made_table in made:
                if made_table is not None:
                    check_inside_file(record.h5_path, made_table, opened.source.size)
        except UnsupportedFeatureError as e:
            refused[record.key] = e  # a profile may still give it a form
            continue
        except NotHDF5Error as e:  # damage met in this dataset
            if left_out.node(record.key, e) is not None:
                raise
            continue
        except H5LensError:
            raise
        except (OSError, RuntimeError, KeyError) as e:
            error = left_out.node(record.key, unreadable(h5, record.h5_path, e))
            if error is not None:
                raise error from e
            continue
        for key, doc, made_table in made:  # one array, or a ragged dataset's group and buffers
            nodes[key] = doc
            if made_table is not None:
                tables[key] = made_table
                state["chunks"] += made_table.n_present
        types[record.key] = found_types
    state["done"], state["path"] = len(found.datasets), ""
    report()
    opened.on_read(None)
    if made_from_headers is not None:
        logger.debug("made from their headers: %d datasets and %d groups", made_from_headers.datasets,
                     made_from_headers.groups)  # fmt: skip

    if options.profiles:
        apply_profiles(ProfileContext(h5, nodes, tables, options, found, refused=refused))
    unreadable_objects = left_out.finish(refused)
    inline_small_chunks(opened, tables, options.inline_threshold)
    if opened.remote:
        logger.info("%s: scanned; %s", opened.source.url, opened.read_summary())
    check_documents(nodes)
    return Manifest(
        nodes, tables, list(files.sources), options.convention, writer, attribute_types=_kept_types(types, nodes),
        unreadable=unreadable_objects,
    )  # fmt: skip


def _kept_types(types: dict[str, dict[str, str]], nodes: NodeMap) -> dict[str, dict[str, str]]:
    """The attribute types of the attributes the manifest holds once profiles have rewritten
    nodes (netCDF bookkeeping hidden, old encodings upgraded)."""
    kept: dict[str, dict[str, str]] = {}
    for path, names in types.items():
        doc = nodes.get(path)
        held = {} if doc is None else doc.get("attributes", {})
        found = {name: type_name for name, type_name in names.items() if name in held}
        if found:
            kept[path] = found
    return kept


def _chunk_index_addresses(h5: h5py.File, found: Walk) -> list[int]:
    """Object header addresses of the datasets whose chunks :func:`_array` will reference."""
    addresses = []
    for record in found.datasets:
        try:
            ds = h5[record.h5_path]
            if _referenced_chunked(ds, record.h5_path):
                addresses.append(chunk_scan.header_address(ds.id))
        except (H5LensError, OSError, RuntimeError, KeyError):
            continue  # _array reports it, with the path
    return addresses


def _plan_of(ds: h5py.Dataset, path: str, dtype: np.dtype | None = None) -> TypePlan:
    """How ``ds``'s elements are written: their numpy dtype as h5py reads them (``dtype``, if
    known), and how the stored bytes relate to it (:mod:`h5lens.scan.hdf5_types`)."""
    dtype = element_dtype(ds, path) if dtype is None else dtype
    return plan_type(dtype, path).with_layout(stored_layout(ds.id.get_type(), dtype))


def _referenced_chunked(ds: h5py.Dataset, path: str) -> bool:
    """Whether ``_array`` will reference ``ds``'s chunks (and so needs its chunk table)."""
    if ds.shape is None or 0 in ds.shape or not _plan_of(ds, path).raw:
        return False
    dcpl = ds.id.get_create_plist()
    if dcpl.get_layout() != h5py.h5d.CHUNKED or _external(dcpl):
        return False
    itemsize = ds.dtype.base.itemsize if ds.dtype.subdtype else ds.dtype.itemsize
    return translate_pipeline(read_pipeline(dcpl), itemsize) is not None


def _resolver(h5: h5py.File, found: Walk) -> Resolver:
    return Resolver(h5, found)


def _template(opener: Opener, path: str, sizeof_offsets: int) -> TypeTemplate | None:
    """What h5py says of the type and fill value of the dataset at ``path``, for the datasets
    made from their headers (:mod:`h5lens.scan.header_arrays`); None where it says no."""
    try:
        ds = opener.dataset(path)
        dtype = element_dtype(ds, path)
        if dtype.hasobject and h5py.check_ref_dtype(dtype) is not h5py.Reference:
            # variable-length values: never made from headers, and their fill value is not
            # read here (h5py 3 crashes reading sequences of region references a second time)
            return None
        plan = _plan_of(ds, path, dtype)
        return learn_template(ds, plan, _fill_value(ds, ds.id.get_create_plist()), path, sizeof_offsets)
    except (H5LensError, OSError, RuntimeError, KeyError, TypeError, ValueError):
        return None  # the full path says what is wrong, with the path


def _array(
    ds: h5py.Dataset,
    record: DatasetRecord,
    options: ScanOptions,
    resolve: ResolvePath,
    nan_strings: bool,
    indexes: chunk_scan.IndexWalks | None = None,
    heaps: HeapCheck | None = None,
    files: OtherFiles | None = None,
    types: dict[str, str] | None = None,
    headers: AttributeHeaders | None = None,
    dtype: np.dtype | None = None,
    left_out: LeftOut | None = None,
) -> tuple[dict[str, Any], ChunkTable]:
    path = record.h5_path
    plan = _plan_of(ds, path, dtype)
    dcpl = ds.id.get_create_plist()
    fill = _fill_value(ds, dcpl)
    attributes = node_attributes(ds, path, resolve, nan_strings, heaps, types, headers, left_out)
    layout = dcpl.get_layout()

    if ds.shape is None:  # null dataspace (h5py.Empty): no elements at all
        if plan.kind == "compound" and not plan.raw:
            plan = compound_plan(plan, compound_values(np.zeros(0, ds.dtype), plan, path, resolve))
        doc = document(path, plan, (0,), (1,), value_codecs(plan, 0), fill, attributes)
        doc["attributes"][convention.EMPTY] = True
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

    if referencable and pipeline is not None:  # pipeline is None only when not referencable
        codecs = [*plan.array_codecs, bytes_codec(plan)] + pipeline
        if hdf5_chunks is not None:  # chunked
            doc = document(path, plan, shape, hdf5_chunks, codecs, fill, attributes)
            walked = indexes.get(ds.id) if indexes is not None and 0 not in shape else None
            edges = (lambda: indexes.unfiltered_edges(ds.id)) if indexes is not None else None
            scan = chunk_scan.scan_chunked(ds.id, shape, hdf5_chunks, walked, edges)
            table = scan.table
            redo = scan.masked + scan.unsure
            common = scan.common_mask()
            active = filters
            if common:  # most chunks skip the same filters (LZF gives up on random floats): their chain
                kept = [f for i, f in enumerate(filters) if not (common >> i) & 1]
                alike = translate_pipeline(kept, base_itemsize)
                if alike is not None:
                    active = kept
                    doc = document(path, plan, shape, hdf5_chunks, [*plan.array_codecs, bytes_codec(plan)] + alike,
                                   fill, attributes)  # fmt: skip
                    redo = [i for i, m in zip(scan.masked, scan.masks, strict=True) if m != common]
                    redo += _unmasked(table, set(scan.masked))
            suspect = ambiguous_length(active, chunk_nbytes(doc, base_itemsize))
            if suspect is not None:
                masked = set(redo)
                for index in np.argwhere((table.source == 0) & (table.length == suspect)):
                    if tuple(int(i) for i in index) not in masked:
                        redo.append(tuple(int(i) for i in index))
        else:
            chunk_shape = chunk_scan.plan_slabs(shape, base_itemsize, options.slab_bytes)
            doc = document(path, plan, shape, chunk_shape, codecs, fill, attributes)
            table, tail = chunk_scan.scan_contiguous(chunk_scan.contiguous_offset(ds.id), shape, chunk_shape, base_itemsize)
            redo = [tail] if tail is not None else []
        if redo:  # chunks whose stored bytes the array's codecs cannot decode as they are
            _check_limit(path, options, len(redo) * chunk_nbytes(doc, base_itemsize), "chunks that skip filters")
            regions = [(idx, read_values(ds, plan, chunk_selection(idx, chunk_shape_of(doc), shape), path, resolve)) for idx in redo]
            store_inline(table, redo, encode_chunks(doc, regions))
        if fill is None and (table.source == MISSING).any():
            raise UnsupportedFeatureError(
                f"{path}: chunks never written and no fill value defined (H5Pset_fill_value with none): "
                "h5py cannot read them either"
            )
        return finish_scalar(doc, table.build(), options)

    if files is not None and plan.raw and layout == h5py.h5d.CONTIGUOUS and _external(dcpl):
        stream = external_segments(dcpl, files)
        zero_fill = fill is None or not np.asarray(fill).tobytes().strip(b"\0")
        slabs = external_table(path, shape, base_itemsize, stream, files, options.slab_bytes, zero_fill=zero_fill)
        if slabs is not None:  # references into the raw files
            built = slabs[1].build()
            _check_limit(path, options, built.inline_bytes, "external raw files end before their segments do")
            doc = document(path, plan, shape, slabs[0], [*plan.array_codecs, bytes_codec(plan)], fill, attributes)
            return finish_scalar(doc, built, options)
        # copied, but read from the raw files as resolved here (h5py looks only in the working directory)
        total = int(np.prod(ds.shape, dtype=np.int64)) * ds.dtype.itemsize
        _check_limit(path, options, total, "external raw storage split inside an element")
        values = np.frombuffer(read_stream(path, stream, files, total), dtype=ds.dtype).reshape(ds.shape)
        return inline_array(path, plan, values, attributes, fill, options)

    virtual_reason = None
    if files is not None and plan.raw and layout == h5py.h5d.VIRTUAL and 0 not in shape and shape:
        made = _virtual(ds, path, plan, shape, fill, attributes, options, resolve, nan_strings, files)
        if not isinstance(made, str):
            return made
        virtual_reason = f"a virtual dataset whose mappings are no set of whole source chunks ({made})"
    if layout == h5py.h5d.VIRTUAL and ds.file.driver == "fileobj":
        # libhdf5 opens a virtual dataset's sources by local name: through a remote file it
        # would find none and give fill values for all of them
        raise UnsupportedFeatureError(
            f"{path}: {virtual_reason or 'a virtual dataset h5lens does not reference'} in a remote file, whose "
            "sources libhdf5 cannot open to copy it; index a local copy of the files"
        )

    # Everything else is decoded by h5py and stored inline.
    reason = virtual_reason or  _materialize_reason(plan, layout, dcpl, filters, base_itemsize)
    estimate = int(np.prod(shape, dtype=np.int64)) * max(base_itemsize, 1)
    _check_limit(path, options, estimate, reason, values=not plan.raw and not plan.converted)
    if heaps is not None:
        heaps.check_dataset(ds, path)  # before h5py parses them: damage can make libhdf5 loop
    values = read_values(ds, plan, (), path, resolve)
    if plan.kind == "string" and is_bytes_values(values):
        plan = BYTE_STRING_PLAN  # not UTF-8 text: the bytes, exactly as h5py reads them
    if plan.kind == "compound" and not plan.raw:
        plan = compound_plan(plan, values)
    values = values.reshape(shape) if values.shape != shape else values
    return inline_array(path, plan, values, attributes, fill, options, chunk_shape=hdf5_chunks)


def _virtual(
    ds: h5py.Dataset,
    path: str,
    plan: TypePlan,
    shape: tuple[int, ...],
    fill: Any,
    attributes: dict[str, Any],
    options: ScanOptions,
    resolve: ResolvePath,
    nan_strings: bool,
    files: OtherFiles,
) -> tuple[dict[str, Any], ChunkTable] | str:
    """A virtual dataset as references into its sources' chunks (:mod:`h5lens.scan.virtual`),
    or why it cannot be."""
    probe = document(path, plan, shape, shape, [bytes_codec(plan)], fill, attributes)  # its type and fill

    def index_source(source: h5py.Dataset, source_path: str) -> tuple[dict[str, Any], ChunkTable]:
        # files=None: a source that is itself virtual is copied, not followed (no cycles)
        return _array(source, DatasetRecord(source_path, source_path.strip("/")), options, resolve, nan_strings)

    made = virtual_table(path, shape, probe, ds.id.get_create_plist(), ds.file, files, _open_other(files), index_source)
    if isinstance(made, str):
        return made
    codecs, chunk, table = made
    doc = document(path, plan, shape, chunk, codecs, fill, attributes)
    return finish_scalar(doc, table, options)


def _open_other(files: OtherFiles) -> Callable[[str], contextlib.AbstractContextManager[h5py.File]]:
    """Opens a virtual dataset's source file (local, or remote through the scan's client)."""

    @contextlib.contextmanager
    def open_file(url: str) -> Iterator[h5py.File]:
        if is_remote(url):
            with contextlib.closing(open_source(url, storage_options=files.storage_options)) as opened:
                yield opened.h5
            return
        if not os.path.exists(url):
            raise SourceNotFoundError(f"{url}: no such file")
        with h5py.File(url, "r") as h5:
            yield h5

    return open_file


def _ragged(
    ds: h5py.Dataset,
    record: DatasetRecord,
    options: ScanOptions,
    resolve: ResolvePath,
    nan_strings: bool,
    heaps: HeapCheck | None,
    types: dict[str, str] | None = None,
    headers: AttributeHeaders | None = None,
    dtype: np.dtype | None = None,
    left_out: LeftOut | None = None,
) -> Made | None:
    """A dataset of variable-length sequences of numbers as an awkward-array group and its
    buffers (:mod:`h5lens.scan.ragged`); None for every other dataset."""
    path = record.h5_path
    dtype = element_dtype(ds, path) if dtype is None else dtype
    fields = record_fields(dtype)  # a compound with members that are sequences
    base = None if fields is not None else ragged_base(dtype, path)
    if base is None and fields is None:
        return None
    attributes = node_attributes(ds, path, resolve, nan_strings, heaps, types, headers, left_out)
    count = 0 if ds.shape is None else int(np.prod(ds.shape, dtype=np.int64))
    _check_limit(path, options, 8 * count, "variable-length sequences are not stored in the dataset's chunks",
                 values=True)  # fmt: skip
    if heaps is not None:
        heaps.check_dataset(ds, path)  # before h5py parses them: damage can make libhdf5 loop
    if fields is not None:
        return record_nodes(record.key, path, None if ds.shape is None else np.asarray(ds[()]).reshape(ds.shape),
                            fields, attributes, options)  # fmt: skip
    assert base is not None
    values: np.ndarray | None = None
    if ds.shape is not None:  # h5py gives a scalar's one sequence as an array of its values
        read = ds[()]
        values = np.empty(ds.shape, dtype=object)
        if ds.shape == ():
            values[()] = read
        else:
            values[...] = read
        if ragged_element(base) == "reference":  # the targets' paths, as a dataset of references holds them
            for i, sequence in enumerate(values.ravel().tolist()):
                values.flat[i] = np.array([reference_path(r, path, resolve) for r in sequence], dtype=object)
    return ragged_nodes(record.key, path, values, base, attributes, options)


def _fill_value(ds: h5py.Dataset, dcpl: h5py.h5p.PropDCID) -> Any:
    """h5py's fill value; None where the dataset leaves it undefined (``H5Pset_fill_value``
    with no value, as PyTables writes some columns: h5py's ``fillvalue`` then raises), which
    makes it zarr's default (zeros): what libhdf5 gives there is unspecified."""
    if dcpl.fill_value_defined() == h5py.h5d.FILL_VALUE_UNDEFINED:
        return None
    return ds.fillvalue


def _unmasked(table: ChunkTableBuilder, masked: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The stored chunks not in ``masked`` (they went through every filter)."""
    found = np.argwhere(table.source >= 0)
    return [index for index in (tuple(int(i) for i in row) for row in found) if index not in masked]


def _external(dcpl: h5py.h5p.PropDCID) -> bool:
    return dcpl.get_external_count() > 0


def _materialize_reason(
    plan: TypePlan, layout: int, dcpl: h5py.h5p.PropDCID, filters: list[Filter], itemsize: int
) -> str:
    if plan.converted:
        return "its elements are stored in a layout only libhdf5 converts (a user-defined float, or compound members of such types)"
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


def _check_limit(path: str, options: ScanOptions, nbytes: int, reason: str, *, values: bool = False) -> None:
    """Refuse to copy more than the limit; ``values``: variable-length values, which the
    default limit lets through (:class:`~h5lens.scan.options.DefaultLimit`)."""
    limit = options.materialize_limit
    if values and isinstance(limit, DefaultLimit):
        return
    if limit is not None and nbytes > limit:
        said = f"{path}: {reason}; its {nbytes:,} bytes would be copied into the manifest, more than"
        raise MaterializeLimitError(
            f"{said} materialize_limit={limit:,}; raise it (None: no limit) to copy them"
        ).at_cli(f"{said} the limit of {limit:,} bytes; raise it with --materialize-limit SIZE (or none)")


__all__ = ["CONVENTIONS", "DEFAULT_INLINE_THRESHOLD", "ScanOptions", "ScanProgress", "UnsupportedFeatureError", "build_manifest"]
