"""Matrices of a combined AnnData whose files have different var: each file's columns mapped
to the combined var as they are read, as ``anndata.concat(..., join=...)`` reindexes them.

``h5lens combine`` of files whose var differ keeps each file's matrix where it lies, its
columns numbered as in the file, and records in the group :data:`COLUMNS` at the root:

* ``rows`` (files + 1): where each file's rows begin in the combined obs;
* ``starts`` (files + 1) and ``map``: file ``f``'s column ``j`` is combined column
  ``map[starts[f] + j]``, or ``-1`` where the join drops it (``"inner"``);
* its attributes: ``width`` (the combined var's length), ``fill_value`` (``combine``'s, None
  for anndata's default: 0 in sparse matrices, NaN in dense ones) and ``matrices``, each
  remapped matrix's ``kind`` (``csr_matrix`` or ``array``) and ``dtype`` (what
  ``anndata.concat`` gives);
* for each csr matrix ``M``: ``M/indptr``, where each combined row's values lie in ``M``'s
  ``data`` and ``indices`` (every file's, concatenated by reference, as stored);
* for each dense matrix ``M``: ``M/<f>``, file ``f``'s array, referenced where it lies.

The matrix's own ``indptr`` (csr) or the matrix itself (dense) carries the codec
``h5lens.file_columns`` (:mod:`h5lens.codecs.file_columns`), which zarr's readers refuse
with the reason. This module reads them: a csr row range reads its ``indptr`` entries, then
its values, maps each value's column through its file's map, drops the columns the join
drops and adds a non-zero ``fill_value`` where a file lacks a column (as anndata does); a
dense row range reads each file's rows and places their columns. Costs follow the rows read.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from h5lens.errors import ManifestFormatError

if TYPE_CHECKING:
    from h5lens.store import ManifestStore

COLUMNS = "h5lens_columns"  # the group at the root that holds the column maps
FILL_WORDS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def fill_to_json(value: Any) -> Any:
    """A fill value as the group's attributes hold it (NaN and infinities as zarr spells them)."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    number = value.item() if isinstance(value, np.generic) else value
    if isinstance(number, float) and not np.isfinite(number):
        return "NaN" if np.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    if isinstance(number, (int, float)):
        return number
    raise ValueError(f"fill_value must be a number; got {value!r}")


def fill_from_json(value: Any) -> Any:
    return FILL_WORDS.get(value, value) if isinstance(value, str) else value


@dataclass(frozen=True)
class ColumnMaps:
    """The column maps of a combined AnnData (see the module's docstring)."""

    rows: np.ndarray  # (files + 1,) int64
    starts: np.ndarray  # (files + 1,) int64
    map: np.ndarray  # (sum of the files' var,) int64
    width: int
    fill_value: Any  # None: anndata's default
    matrices: dict[str, dict[str, Any]]

    @classmethod
    def of(cls, store: ManifestStore) -> ColumnMaps | None:
        """The store's column maps, or None when its manifest has none."""
        nodes = store.manifest.nodes
        if COLUMNS not in nodes:
            return None
        from h5lens.read.whole import read_whole

        attributes = nodes[COLUMNS].get("attributes", {})
        found = [read_whole(store, f"{COLUMNS}/{name}") for name in ("rows", "starts", "map")]
        if any(a is None for a in found) or not isinstance(attributes.get("matrices"), dict):
            raise ManifestFormatError(f"/{COLUMNS}: not the column maps h5lens combine writes")
        rows, starts, mapping = (np.asarray(a, dtype=np.int64) for a in found if a is not None)
        width = int(attributes["width"])
        if rows.shape != starts.shape or int(starts[-1]) != mapping.size or (mapping >= width).any():
            raise ManifestFormatError(f"/{COLUMNS}: its rows, starts and map disagree")
        return cls(rows, starts, mapping, width, fill_from_json(attributes.get("fill_value")), attributes["matrices"])

    @cached_property
    def missing(self) -> list[np.ndarray]:
        """The combined columns each file lacks (an outer join's), in order."""
        out = []
        for f in range(self.rows.size - 1):
            mine = self.map[self.starts[f] : self.starts[f + 1]]
            out.append(np.setdiff1d(np.arange(self.width, dtype=np.int64), mine[mine >= 0]))
        return out

    def files_of(self, rows: np.ndarray) -> np.ndarray:
        """The file each combined row comes from."""
        return np.searchsorted(self.rows, rows, side="right") - 1

    def fill(self, kind: str) -> Any:
        if self.fill_value is not None:
            return self.fill_value
        return 0 if kind == "csr_matrix" else np.nan

    def dtype(self, matrix: str) -> np.dtype:
        return np.dtype(self.matrices[matrix]["dtype"])

    def csr_parts(
        self, matrix: str, rows: np.ndarray, indptr: np.ndarray, data: np.ndarray, indices: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The combined (data, indices, indptr) of ``rows`` (combined row numbers) from their
        values as stored (``indptr`` of those rows into ``data`` / ``indices``)."""
        count = rows.size
        lengths = np.diff(indptr).astype(np.int64)
        files = self.files_of(rows)
        value_files = np.repeat(files, lengths)
        local = indices.astype(np.int64, copy=False)
        widths = np.diff(self.starts)
        if local.size and ((local < 0) | (local >= widths[value_files])).any():
            raise ManifestFormatError(f"/{matrix}: a stored column index lies outside its file's var")
        mapped = self.map[self.starts[value_files] + local]
        row_of = np.repeat(np.arange(count, dtype=np.int64), lengths)
        keep = mapped >= 0
        if not keep.all():  # columns an inner join drops
            mapped, data, row_of = mapped[keep], data[keep], row_of[keep]
        dtype = self.dtype(matrix)
        values = data.astype(dtype, copy=False)
        fill = self.fill("csr_matrix")
        if fill != 0:  # anndata writes a non-zero fill into every column a file lacks
            extra = [(r, self.missing[f]) for r, f in enumerate(files.tolist()) if self.missing[f].size]
            if extra:
                extra_rows = np.concatenate([np.full(cols.size, r, np.int64) for r, cols in extra])
                row_of = np.concatenate([row_of, extra_rows])
                mapped = np.concatenate([mapped, *(cols for _, cols in extra)])
                values = np.concatenate([values, np.full(extra_rows.size, fill, dtype=dtype)])
                order = np.argsort(row_of, kind="stable")
                row_of, mapped, values = row_of[order], mapped[order], values[order]
        pointers = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(row_of, minlength=count), out=pointers[1:])
        index_dtype = np.int32 if self.width < 2**31 else np.int64
        return values, mapped.astype(index_dtype), pointers

    def dense_rows(self, store: ManifestStore, matrix: str, start: int, stop: int) -> np.ndarray:
        """Combined rows ``[start, stop)`` of dense matrix ``matrix``, every column."""
        dtype = self.dtype(matrix)
        files = range(int(self.files_of(np.asarray([start]))[0]), self.rows.size - 1) if stop > start else range(0)
        gaps = any(self.missing[f].size for f in files if self.rows[f] < stop)
        out = np.full((stop - start, self.width), self.fill("array"), dtype=dtype) if gaps else np.empty((stop - start, self.width), dtype)
        for f in files:
            first, last = int(self.rows[f]), int(self.rows[f + 1])
            if first >= stop:
                break
            lo, hi = max(start, first), min(stop, last)
            if hi <= lo:
                continue
            mine = self.map[self.starts[f] : self.starts[f + 1]]
            keep = mine >= 0
            values = _region(store, f"{COLUMNS}/{matrix}/{f}", lo - first, hi - first, mine.size)
            out[lo - start : hi - start][:, mine[keep]] = values[:, keep] if not keep.all() else values
        return out


def _region(store: ManifestStore, path: str, start: int, stop: int, width: int) -> np.ndarray:
    """Rows ``[start, stop)`` of a file's dense array, read by h5lens (zarr where it does not decode it)."""
    found = store.read_region(path, [(start, stop), (0, width)])
    if found is not None:
        return np.asarray(found)
    import zarr

    from h5lens.read.rectilinear import rectilinear_allowed

    with rectilinear_allowed([store.manifest.nodes[path]]):
        array = zarr.open_array(store, path=path, mode="r", zarr_format=3)
    return np.asarray(array[start:stop])


def remapped(store: ManifestStore) -> list[str]:
    """The matrices of the store's manifest whose columns h5lens maps (none, usually)."""
    doc = store.manifest.nodes.get(COLUMNS)
    if doc is None:
        return []
    matrices = doc.get("attributes", {}).get("matrices", {})
    return [path for path in matrices if path in store.manifest.nodes] if isinstance(matrices, dict) else []


class RemappedDense:
    """A dense matrix of a combined AnnData (each file's columns placed), sliced as numpy
    slices it: what ``dask.array.from_array`` takes."""

    ndim = 2

    def __init__(self, store: ManifestStore, matrix: str, maps: ColumnMaps) -> None:
        self.store = store
        self.matrix = matrix
        self.maps = maps
        self.shape = (int(maps.rows[-1]), maps.width)
        self.dtype = maps.dtype(matrix)

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        key = getattr(self.store, "key", None) or str(id(self.store))
        return ("h5lens.RemappedDense", key, self.matrix)

    def __getitem__(self, key: Any) -> np.ndarray:
        if not isinstance(key, tuple):
            key = (key,)
        key = key + (slice(None),) * (2 - len(key))
        rows = np.arange(self.shape[0], dtype=np.int64)[key[0]]
        if np.ndim(rows) == 0:  # an integer: one row, without its axis
            return self.maps.dense_rows(self.store, self.matrix, int(rows), int(rows) + 1)[0][key[1]]
        start, stop = (int(rows.min()), int(rows.max()) + 1) if rows.size else (0, 0)
        block = self.maps.dense_rows(self.store, self.matrix, start, stop)
        return block[rows - start][:, key[1]]


__all__ = [
    "COLUMNS",
    "ColumnMaps",
    "RemappedDense",
    "fill_from_json",
    "fill_to_json",
    "remapped",
]
