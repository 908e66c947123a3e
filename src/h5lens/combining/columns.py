"""Matrices along obs of AnnData files whose var differ: referenced as each file stores them,
with each file's column map recorded for h5lens's reader (:mod:`h5lens.adata.columns`, which
says what is recorded), and the member every reader must read refused to zarr's readers
(:mod:`h5lens.codecs.file_columns`).

``anndata.concat(..., join=...)`` reindexes each file's matrix to the combined var (the
union or the intersection of the files' var, in the order anndata computes it):
:func:`column_map` is anndata's reindexer as an array, :func:`result_dtype` the data type
its reindexing and concatenation give. A csr matrix's ``data`` and ``indices`` are
concatenated by reference (:mod:`h5lens.combining.stack`), its ``indptr`` written; a dense
matrix is referenced file by file (its chunks across the columns may differ between files:
nothing has to agree but being an array of numbers). Nothing of a matrix's values is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from h5lens.adata.columns import COLUMNS, fill_to_json
from h5lens.codecs.file_columns import codec_json
from h5lens.combining.inputs import Input
from h5lens.combining.result import Combined
from h5lens.combining.stack import Part, stack
from h5lens.combining.written import write_anndata_elements
from h5lens.format.convention import DTYPE
from h5lens.manifest.model import ChunkTableBuilder

GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {}}


def column_map(combined_var: Any, file_var: Any) -> np.ndarray:
    """Each of a file's columns' place in the combined var, -1 where the join drops it:
    anndata's ``Reindexer`` (``old_pos`` → ``new_pos``) as one array."""
    return np.asarray(combined_var.get_indexer(file_var), dtype=np.int64)


def result_dtype(dtypes: Sequence[np.dtype], lacking: Sequence[bool], fill_value: Any, *, sparse: bool) -> np.dtype:
    """The data type of ``anndata.concat``'s matrix: a file whose var lacks combined columns
    is filled with ``fill_value`` (anndata's default: 0 in sparse matrices, NaN in dense
    ones), which promotes its type as ``numpy.result_type(dtype, asarray(fill).dtype)``
    (``Reindexer._apply_to_array_api``; ``_apply_to_sparse`` only for a non-zero fill); the
    files' matrices are then concatenated (``np.concatenate`` / ``sparse.vstack``: their
    result type)."""
    fill = (0 if sparse else np.nan) if fill_value is None else fill_value
    promoted = [
        np.result_type(dtype, np.asarray(fill).dtype) if lacks and (not sparse or fill != 0) else np.dtype(dtype)
        for dtype, lacks in zip(dtypes, lacking, strict=True)
    ]
    return np.result_type(*promoted)


def _marker(doc: dict[str, Any]) -> ChunkTableBuilder:
    """A chunk table of one inline chunk for a marker array (zarr decodes a chunk that is
    there, and so meets the codec that refuses; a missing one would read as the fill value)."""
    grid = (1,) * len(doc["shape"])
    builder = ChunkTableBuilder(grid)
    builder.set_inline(np.asarray([0]), [b"\0"])
    return builder


def _marker_doc(matrix: str, shape: list[int], dtype: np.dtype, attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(1, n) for n in shape]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN" if dtype.kind == "f" else (False if dtype.kind == "b" else 0),
        "codecs": [codec_json(matrix, COLUMNS)],
        "attributes": {**attributes, DTYPE: dtype.name},
    }


def reference_by_file(
    combined: Combined,
    inputs: Sequence[Input],
    mappings: Sequence[np.ndarray],
    matrices: Sequence[tuple[str, str]],
    maps: Sequence[np.ndarray],
    rows: Sequence[int],
    *,
    width: int,
    join: str,
    fill_value: Any,
    pointers: dict[str, list[np.ndarray]],
) -> None:
    """Matrices ``matrices`` ((path, kind): ``csr_matrix`` or ``array``) of every file,
    referenced into ``combined`` with the files' column ``maps`` (into a combined var of
    ``width`` columns); ``rows``: each file's rows; ``pointers``: each csr matrix's ``indptr`` of every file (read by the caller)."""
    lacking = [np.unique(m[m >= 0]).size < width for m in maps]
    described: dict[str, dict[str, Any]] = {}
    n_obs = int(sum(rows))
    for matrix, kind in matrices:
        parts = [Part(item, matrix, mapping) for item, mapping in zip(inputs, mappings, strict=True)]
        if kind == "csr_matrix":
            dtypes = [np.dtype(item.manifest.nodes[f"{matrix}/data"]["data_type"]) for item in inputs]
        else:
            dtypes = [np.dtype(item.manifest.nodes[matrix]["data_type"]) for item in inputs]
        dtype = result_dtype(dtypes, lacking, fill_value, sparse=kind == "csr_matrix")
        described[matrix] = {"kind": kind, "dtype": dtype.name}
        first = inputs[0].manifest.nodes
        if kind == "csr_matrix":
            for member in ("data", "indices"):
                stacked = stack([Part(p.item, f"{matrix}/{member}", p.sources) for p in parts])
                combined.nodes[f"{matrix}/{member}"] = stacked.doc
                combined.chunks[f"{matrix}/{member}"] = stacked.table
                combined.referenced[f"{matrix}/{member}"] = stacked
            indptr = offset_pointers(pointers[matrix])
            written = write_anndata_elements({"indptr": indptr})
            written.nodes.pop("", None)
            written.chunks.pop("", None)
            combined.add(written.under(f"{COLUMNS}/{matrix}"), f"{COLUMNS}/{matrix}/indptr")
            attributes = {**first[matrix].get("attributes", {}), "shape": [n_obs, width]}
            combined.nodes[matrix] = {**first[matrix], "attributes": attributes}
            doc = _marker_doc(matrix, [n_obs + 1], np.dtype(np.int64), {})
            combined.nodes[f"{matrix}/indptr"] = doc
            combined.chunks[f"{matrix}/indptr"] = _marker(doc).build()
        else:
            for number, part in enumerate(parts):
                stacked = stack([part])
                where = f"{COLUMNS}/{matrix}/{number}"
                combined.nodes[where] = {**stacked.doc, "attributes": {DTYPE: stacked.doc["data_type"]}}
                combined.chunks[where] = stacked.table
                combined.referenced[where] = stacked
            attributes = {k: v for k, v in first[matrix].get("attributes", {}).items() if k != DTYPE}
            doc = _marker_doc(matrix, [n_obs, width], dtype, attributes)
            combined.nodes[matrix] = doc
            combined.chunks[matrix] = _marker(doc).build()
        _groups(combined, f"{COLUMNS}/{matrix}")
    written = write_anndata_elements(
        {
            "rows": np.concatenate([[0], np.cumsum(rows)]).astype(np.int64),
            "starts": np.concatenate([[0], np.cumsum([m.size for m in maps])]).astype(np.int64),
            "map": np.concatenate(maps).astype(np.int64) if maps else np.empty(0, np.int64),
        }
    )
    written.nodes.pop("", None)
    written.chunks.pop("", None)
    combined.add(written.under(COLUMNS), COLUMNS)
    combined.nodes[COLUMNS] = {
        **GROUP,
        "attributes": {
            "description": "each file's columns in the combined var, applied by h5lens's reader (h5lens.read_anndata)",
            "join": join,
            "width": width,
            "fill_value": fill_to_json(fill_value),
            "matrices": described,
        },
    }
    combined.remapped.extend(matrix for matrix, _ in matrices)


def offset_pointers(pointers: Sequence[np.ndarray]) -> np.ndarray:
    """The files' ``indptr`` as one, into their values concatenated."""
    before = np.cumsum([0, *(int(p[-1]) - int(p[0]) for p in pointers[:-1])])
    head = pointers[0][:1] - pointers[0][0]
    return np.concatenate([head, *((p[1:] - p[0]) + b for p, b in zip(pointers, before, strict=True))]).astype(np.int64)


def _groups(combined: Combined, path: str) -> None:
    """Plain groups for ``path`` and each group above it the combine has not made."""
    parts = path.split("/")
    for end in range(1, len(parts) + 1):
        combined.nodes.setdefault("/".join(parts[:end]), dict(GROUP))


__all__ = ["column_map", "offset_pointers", "reference_by_file", "result_dtype"]
