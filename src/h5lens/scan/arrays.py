"""zarr.json documents for HDF5 datasets, and arrays whose values are stored inline.

Used by the scanner (:mod:`h5lens.scan.build`) and by profiles (which put arrays made
in memory), so that both write documents one way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5lens.format import convention
from h5lens.format.long_double import fields_json
from h5lens.manifest.documents import chunk_shape_of, grid_shape
from h5lens.manifest.model import ChunkTable, ChunkTableBuilder
from h5lens.manifest.zarr_keys import DEFAULT_ENCODING
from h5lens.scan import chunks as chunk_scan
from h5lens.scan.dtypes import TypePlan, fill_value_json, plan_type
from h5lens.scan.materialize import chunk_selection, encode_chunks
from h5lens.scan.options import ScanOptions

_UNSET: Any = object()

# Materialised arrays larger than this are compressed inline.
_COMPRESS_INLINE_ABOVE = 64 << 10


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
    codecs = value_codecs(plan, values.nbytes)
    doc = document(path, plan, shape, chunk_shape, codecs, fill, attributes)
    table = ChunkTableBuilder(grid_shape(shape, chunk_shape))
    if shape and 0 in shape:
        return finish_scalar(doc, table.build(), options)
    if shape:
        regions = [(idx, values[chunk_selection(idx, chunk_shape, shape)]) for idx in np.ndindex(table.grid_shape)]
    else:
        regions = [((), values)]
    encoded = encode_chunks(doc, regions)
    store_inline(table, list(encoded), encoded)
    return finish_scalar(doc, table.build(), options)


def values_plan(values: np.ndarray, path: str) -> TypePlan:
    """The storage plan for values made in memory (by a profile), not read from HDF5."""
    kind = values.dtype.kind
    if kind == "T" or (kind == "O" and all(isinstance(v, str) for v in values.ravel())):
        return TypePlan("string", np.dtypes.StringDType(), None, False, "string", "str")
    if kind == "U":
        return TypePlan("string", np.dtypes.StringDType(), None, False, "string", "str")
    return plan_type(values.dtype, path)


def chunk_nbytes(doc: dict[str, Any], itemsize: int) -> int:
    return int(np.prod(chunk_shape_of(doc), dtype=np.int64)) * itemsize


def _value_itemsize(plan: TypePlan, values: np.ndarray) -> int:
    if plan.kind in ("string", "reference", "region", "vlen-bytes"):
        return 16  # a typical short string; only used to size chunks
    return values.dtype.itemsize


def store_inline(
    table: ChunkTableBuilder, indices: list[tuple[int, ...]], encoded: dict[tuple[int, ...], bytes]
) -> None:
    absent = [table.flat(idx) for idx in indices if tuple(idx) not in encoded]
    if absent:  # equal to the fill value everywhere: absent is exact
        table.clear(np.asarray(absent, dtype=np.int64))
    present = [tuple(idx) for idx in indices if tuple(idx) in encoded]
    if present:
        table.set_inline(np.asarray([table.flat(idx) for idx in present], dtype=np.int64), [encoded[idx] for idx in present])


def bytes_codec(plan: TypePlan) -> dict[str, Any]:
    if plan.endian is None:
        return {"name": "bytes", "configuration": {}}
    return {"name": "bytes", "configuration": {"endian": plan.endian}}


def value_codecs(plan: TypePlan, nbytes: int) -> list[dict[str, Any]]:
    if plan.kind in ("string", "reference", "region"):
        return [{"name": "vlen-utf8", "configuration": {}}]
    if plan.kind == "vlen-bytes":
        return [{"name": "vlen-bytes", "configuration": {}}]
    endian = None if plan.known_dtype().itemsize <= 1 else "little"
    codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": endian} if endian else {}}]
    if nbytes > _COMPRESS_INLINE_ABOVE:
        codecs.append({"name": "zstd", "configuration": {"level": 3, "checksum": False}})
    return codecs


def document(
    path: str,
    plan: TypePlan,
    shape: tuple[int, ...],
    chunk_shape: tuple[int, ...],
    codecs: list[dict[str, Any]],
    fill: Any,
    attributes: dict[str, Any],
    *,
    fill_json: Any = _UNSET,
) -> dict[str, Any]:
    """``fill_json``: ``fill``'s JSON form where the caller has it already."""
    attributes = dict(attributes)
    if plan.dtype_attr is not None:
        attributes[convention.DTYPE] = plan.dtype_attr
    if plan.reference_fields:
        attributes[convention.REFERENCE_FIELDS] = list(plan.reference_fields)
    if plan.array_fields:
        attributes[convention.ARRAY_FIELDS] = plan.array_fields_json()
    if plan.enum is not None:
        attributes[convention.ENUM] = plan.enum
    if plan.float_layout is not None:
        attributes[convention.FLOAT_LAYOUT] = plan.float_layout.to_json()
    elif plan.float_fields:
        attributes[convention.FLOAT_LAYOUT] = fields_json(plan.float_fields)
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": plan.data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(1, c) for c in chunk_shape]}},
        "chunk_key_encoding": DEFAULT_ENCODING.to_json(),
        "fill_value": fill_value_json(plan, fill, path) if fill_json is _UNSET else fill_json,
        "codecs": codecs,
        "attributes": attributes,
    }


def finish_scalar(
    doc: dict[str, Any], table: ChunkTable, options: ScanOptions
) -> tuple[dict[str, Any], ChunkTable]:
    """The proposal writes 0-d datasets as shape (1,) with ``_SCALAR: true``."""
    if doc["shape"] or options.convention != "proposal":
        return doc, table
    doc["shape"] = [1]
    doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": [1]}}
    doc["attributes"][convention.SCALAR] = True
    return doc, table.reshaped((1,))


