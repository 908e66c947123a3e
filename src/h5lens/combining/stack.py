"""Arrays of many files concatenated along axis 0 by reference: one chunk table over every
file's chunks, on a regular chunk grid where the chunks allow one and a rectilinear one
(zarr's ``"rectilinear"`` grid, each chunk's length along axis 0 given) where they do not.

Each file's chunks keep their bytes where they lie. One chunk per file may have to be
written: the last chunk of a file whose rows end inside it (HDF5 stores an edge chunk
whole, padded past the data, and a contiguous dataset's tail slab is stored so too), when
another file's rows follow. A zarr reader decodes a chunk of a rectilinear grid to exactly
its length, so that chunk is decoded, cut to its rows and encoded again with the array's
own codecs, inline (:func:`h5lens.combining.written.encode_chunks`); the last file's last
chunk stays a reference (a grid may end past the array). A chunk stored raw (no codec but
``bytes``: what ``write_h5ad`` writes by default) is not written: its first rows are the
first bytes of it, so it stays a reference of fewer bytes. Nothing else is written.

Arrays can be concatenated so when every file's array has the same data type, codecs, fill
value, and shape and chunking along the other axes; :func:`why_not` says why not otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.combining.inputs import Input
from h5lens.combining.written import encode_chunks
from h5lens.engine.plan import whole
from h5lens.manifest.documents import ArrayDocument, rectilinear_json
from h5lens.manifest.model import INLINE, MISSING, ChunkTable


@dataclass(frozen=True)
class Stacked:
    """The concatenated array: its document and chunk table, whether its grid is
    rectilinear, and the bytes written (chunks cut short)."""

    doc: dict[str, Any]
    table: ChunkTable
    rectilinear: bool
    written_bytes: int


@dataclass(frozen=True)
class Part:
    """One file's array: which input, its path there, and where its sources are in the
    combined manifest's source table."""

    item: Input
    path: str
    sources: np.ndarray


def _kind(doc: dict[str, Any], same_fill: bool = True) -> str:
    """What must agree between the files' arrays (all of the document but its shape, grid
    along axis 0 and attributes; and but the fill value unless ``same_fill``)."""
    view = ArrayDocument.of(doc)
    assert view is not None
    rest_chunks = _rest_chunks(view)
    left_out = ("shape", "chunk_grid", "attributes", "chunk_key_encoding", *(() if same_fill else ("fill_value",)))
    body = {k: v for k, v in doc.items() if k not in left_out}
    return json.dumps([body, list(view.shape[1:]), list(rest_chunks)], sort_keys=True, allow_nan=True, default=repr)


def _edges(view: ArrayDocument, grid0: int) -> np.ndarray:
    """Each chunk's length along axis 0 (the last as stored: it may reach past the rows)."""
    head = view.chunk_shape[0] if view.edges is None else view.edges[0]
    if isinstance(head, int):
        return np.full(grid0, head, dtype=np.int64)
    return np.asarray(head[:grid0], dtype=np.int64)


def why_not(parts: Sequence[Part], *, same_fill: bool = True) -> str | None:
    """Why these arrays cannot be concatenated by reference, or None if they can.
    ``same_fill=False``: their fill values may differ (the combined array has the first
    file's; a caller that allows it checks the files' chunks are all stored)."""
    docs = [part.item.manifest.nodes.get(part.path) for part in parts]
    if any(doc is None or doc.get("node_type") != "array" for doc in docs):
        return "not an array in every file"
    views = [ArrayDocument.of(doc) for doc in docs if doc is not None]
    if any(view is None or not view.shape for view in views):
        return "0-d"
    if any(view is not None and view.edges is not None and not all(_uniform(e) for e in view.edges[1:]) for view in views):
        return "chunks of varying size along an axis but the first"
    kinds = [_kind(doc, same_fill) for doc in docs if doc is not None]
    if len(set(kinds)) > 1:
        first = kinds[0]
        other = next(i for i, kind in enumerate(kinds) if kind != first)
        return (
            f"its data type, codecs, fill value, or shape or chunks beyond the first axis differ between "
            f"{parts[0].item.name} and {parts[other].item.name}"
        )
    return None


def stack(parts: Sequence[Part]) -> Stacked:
    """The arrays of ``parts`` (which :func:`why_not` accepts) concatenated along axis 0."""
    docs = [part.item.manifest.nodes[part.path] for part in parts]
    views = [ArrayDocument.of(doc) for doc in docs]
    first_doc = docs[0]
    rest = views[0].shape[1:]  # type: ignore[union-attr]
    rows = [view.shape[0] for view in views]  # type: ignore[union-attr]
    tables = [part.item.manifest.chunks[part.path] for part in parts]
    per_row = math.prod(tables[0].grid_shape[1:])
    live = [i for i, n in enumerate(rows) if n > 0]  # files with rows of this array
    last_live = live[-1] if live else -1
    edges_all: list[np.ndarray] = []
    sources, offsets, lengths = [], [], []
    inline: dict[int, bytes] = {}
    written = 0
    chunk_rows = 0  # chunks along axis 0 so far
    for i in live:
        view, table, part = views[i], tables[i], parts[i]
        assert view is not None
        grid0 = table.grid_shape[0]
        edges = _edges(view, grid0)
        valid_last = rows[i] - int(edges[:-1].sum())
        source = table.source.reshape(grid0, per_row).copy()
        offset = table.offset.reshape(grid0, per_row)
        length = table.length.reshape(grid0, per_row).copy()
        referenced = source >= 0
        source[referenced] = part.sources[source[referenced]]
        part_inline = {flat + chunk_rows * per_row: data for flat, data in table.inline.items()}
        prefix = _raw_prefix(view, valid_last) if valid_last < edges[-1] and i != last_live else None
        tail_inline = [(chunk_rows + grid0 - 1) * per_row + j for j in range(per_row)]
        if prefix is not None and _cut_in_place(source[grid0 - 1], length[grid0 - 1], tail_inline, part_inline, prefix):
            # stored raw, in C order: its first rows are the first bytes of the chunk, left where they lie
            edges = edges.copy()
            edges[-1] = valid_last
        elif valid_last < edges[-1] and i != last_live:  # cut short: written anew, exactly its rows
            # encoded with the combined array's fill value (a chunk left out as all fill reads back as
            # it), on a regular grid across the other axes (a combined manifest appended to has edges)
            cut_grid = {"name": "regular", "configuration": {"chunk_shape": [max(1, valid_last), *_rest_chunks(view)]}}
            cut_doc = {**docs[i], "fill_value": first_doc.get("fill_value"), "chunk_grid": cut_grid}
            payloads = _cut_chunks(part, view, cut_doc, rows[i] - valid_last, rows[i])
            edges = edges.copy()
            edges[-1] = valid_last
            tail = grid0 - 1
            for j in range(per_row):
                flat = (chunk_rows + tail) * per_row + j
                part_inline.pop(flat, None)
                index = np.unravel_index(j, tables[0].grid_shape[1:]) if rest else ()
                data = payloads.get((0, *(int(k) for k in index)))
                if data is None:
                    source[tail, j], length[tail, j] = MISSING, 0
                else:
                    source[tail, j], length[tail, j] = INLINE, len(data)
                    part_inline[flat] = data
                    written += len(data)
            offset = offset.copy()
            offset[tail, :] = 0
        sources.append(source)
        offsets.append(offset)
        lengths.append(length)
        inline.update(part_inline)
        edges_all.append(edges)
        chunk_rows += grid0
    total = sum(rows)
    edges = np.concatenate(edges_all) if edges_all else np.empty(0, dtype=np.int64)
    grid_rest = tables[0].grid_shape[1:]
    if edges.size:
        table = ChunkTable(
            np.ascontiguousarray(np.concatenate(sources).reshape(edges.size, *grid_rest)),
            np.ascontiguousarray(np.concatenate(offsets).reshape(edges.size, *grid_rest)),
            np.ascontiguousarray(np.concatenate(lengths).reshape(edges.size, *grid_rest)),
            inline,
        )
    else:
        table = ChunkTable.empty((0, *grid_rest))
    rest_chunks = _rest_chunks(views[0])  # type: ignore[arg-type]
    # regular where every chunk is as long (the last may reach past the rows, as any grid's)
    regular = edges.size == 0 or bool(np.all(edges == edges[0]))
    doc = {**first_doc, "shape": [total, *rest]}
    if regular:
        first = int(edges[0]) if edges.size else max(1, views[0].chunk_shape[0])  # type: ignore[union-attr]
        doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": [first, *rest_chunks]}}
    else:
        # every axis as its list of edges: Icechunk (2.3) reads no bare integer for an axis
        rest_edges = [[c] * max(1, -(-n // c)) for c, n in zip(rest_chunks, rest, strict=True)]
        doc["chunk_grid"] = rectilinear_json([edges.tolist(), *rest_edges])
    return Stacked(doc, table, not regular, written)


def _uniform(axis: int | tuple[int, ...]) -> bool:
    """Whether an axis of a rectilinear grid is regular: every chunk of one length (a last
    chunk cut to the extent would decode to fewer values than the others)."""
    return isinstance(axis, int) or len(set(axis)) == 1


def _rest_chunks(view: ArrayDocument) -> list[int]:
    """The chunk length along each axis but the first (regular there: why_not checks)."""
    if view.edges is None:
        return list(view.chunk_shape[1:])
    return [axis if isinstance(axis, int) else axis[0] for axis in view.edges[1:]]


# the data types whose stored size is their numpy item size (a raw chunk is then rows of them)
_RAW_TYPES = frozenset(
    ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
     "float64", "complex64", "complex128")
)  # fmt: skip


def _raw_prefix(view: ArrayDocument, rows: int) -> int | None:
    """The bytes of the first ``rows`` rows of a chunk of an array stored raw (its only codec
    ``bytes``, so C order), which are a prefix of the chunk; None for any other array."""
    codecs = view.codecs
    if len(codecs) != 1 or codecs[0].get("name") != "bytes" or view.data_type not in _RAW_TYPES:
        return None
    return rows * math.prod(_rest_chunks(view)) * np.dtype(view.data_type).itemsize


def _cut_in_place(
    source: np.ndarray, length: np.ndarray, flats: list[int], inline: dict[int, bytes], prefix: int
) -> bool:
    """A row of raw chunks cut to their first ``prefix`` bytes where they are (references
    given fewer bytes, inline payloads sliced); False, nothing changed, if one of them is
    missing or holds fewer bytes."""
    for j, flat in enumerate(flats):
        if source[j] >= 0:
            if length[j] < prefix:
                return False
        elif source[j] != INLINE or len(inline.get(flat, b"")) < prefix:
            return False
    for j, flat in enumerate(flats):
        length[j] = prefix
        if source[j] == INLINE:
            inline[flat] = inline[flat][:prefix]
    return True


def _cut_chunks(part: Part, view: ArrayDocument, doc: dict[str, Any], start: int, stop: int) -> dict[tuple[int, ...], bytes]:
    """Rows ``[start, stop)`` of the file's array (its last chunk's rows) encoded anew as one
    row of chunks of exactly those rows."""
    try:
        values = part.item.values(part.path, [(start, stop), *whole(view.shape[1:])])
    finally:
        part.item.close()  # one file open at a time
    return encode_chunks(doc, values)


__all__ = ["Part", "Stacked", "stack", "why_not"]
