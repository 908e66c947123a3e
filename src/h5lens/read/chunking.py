"""How an h5ad stores its rows: the stored chunk's rows per array, to choose a loader's block size.

A minibatch loader (annbatch's ``Loader``) reads blocks of ``chunk_size`` contiguous rows.
Each block reads whole stored chunks: every chunk it touches is fetched, however few of its
rows the block needs, and inflated (a deflate chunk only as far as the block reaches into it,
where that is under about half of it: :mod:`h5lens.codecs.table`). How many rows a stored chunk holds is therefore what a
``chunk_size`` should be measured against, and the h5ad decides it, not the loader:
``write_h5ad(compression="gzip")`` lets h5py guess the chunks: ``X/data`` and ``X/indices``
in chunks of a fixed number of *values* (9,766 for an X of 40 million), so the rows per chunk
depend on how many values each row holds; a dense array in chunks of ``chunks[0]`` rows that
also cut the columns.

:func:`stored_chunks` reads this off a manifest: the chunk shapes and stored bytes from the
chunk table, a csr matrix's ``indptr`` (one small array) for its values per row. Nothing
else is fetched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from h5lens.errors import UnsupportedFeatureError
from h5lens.manifest.tables import MISSING
from h5lens.read.open import PathOrManifest, open_group, store_of

if TYPE_CHECKING:
    from h5lens.store import ManifestStore


@dataclass(frozen=True)
class StoredChunks:
    """How one array of a matrix stores its rows.

    ``array`` is the array's path (``"X/data"``, ``"layers/counts"``); ``rows`` the matrix's
    rows; ``chunk_values`` the values of one stored chunk along axis 0 (of a 1-d array
    of a sparse matrix: values; of a dense array: rows); ``chunks`` the stored chunks along
    axis 0; ``column_chunks`` how many chunks one band of rows is cut into across the
    columns (1: chunks hold whole rows; always 1 for a sparse matrix's arrays);
    ``rows_per_chunk`` how many rows one stored chunk holds on average; ``stored_bytes``
    the mean stored (compressed) size of one chunk."""

    array: str
    rows: int
    chunk_values: int
    chunks: int
    column_chunks: int
    rows_per_chunk: float
    stored_bytes: float

    def inflation(self, chunk_size: int) -> float:
        """Values fetched per value used, on average, by blocks of ``chunk_size`` contiguous
        rows that start anywhere (and inflated, at most: a deflate chunk is inflated only as
        far as a block reaches where that pays): a block of ``b`` rows touches ``1 + b / r``
        stored chunks of ``r`` rows on average, so ``1 + r / b``. 2 at ``chunk_size == rows_per_chunk``; it
        falls towards 1 as blocks grow, and grows with ``r / b`` as blocks shrink (one
        row a block from chunks of 100 rows inflates 101 rows for each)."""
        if chunk_size < 1:
            raise ValueError(f"Expected a chunk_size of at least 1. Got {chunk_size}")
        return 1.0 + self.rows_per_chunk / chunk_size


def _mean_stored_bytes(store: ManifestStore, path: str) -> float:
    table = store.manifest.chunks[path]
    present = table.source.reshape(-1) != MISSING
    return float(table.length.reshape(-1)[present].mean()) if present.any() else 0.0


def _array(group: zarr.Group, name: str) -> zarr.Array:
    node = group[name]
    if not isinstance(node, zarr.Array):
        raise UnsupportedFeatureError(f"{group.path}/{name}: a csr matrix's {name} is an array; this is a group")
    return node


def _sparse(store: ManifestStore, group: zarr.Group, path: str) -> tuple[StoredChunks, ...]:
    indptr = np.asarray(_array(group, "indptr")[...], dtype=np.int64)
    n_rows = max(indptr.size - 1, 0)
    nnz = int(indptr[-1]) if indptr.size else 0
    found = []
    for name in ("data", "indices"):
        array = _array(group, name)
        values = int(array.chunks[0])
        chunks = math.ceil(nnz / values) if nnz else 0
        # rows per stored value, times values per chunk: every chunk holds `values` values
        # (but the last), so this is the mean over the chunks
        rows_per_chunk = n_rows * values / nnz if nnz else float(n_rows)
        found.append(
            StoredChunks(f"{path}/{name}", n_rows, values, chunks, 1, rows_per_chunk, _mean_stored_bytes(store, f"{path}/{name}"))
        )
    return tuple(found)


def _dense(store: ManifestStore, array: zarr.Array, path: str) -> StoredChunks:
    if array.ndim == 0:
        raise UnsupportedFeatureError(f"{path}: a 0-d array has no rows")
    rows = int(array.chunks[0])
    columns = math.ceil(array.shape[1] / array.chunks[1]) if array.ndim > 1 and array.shape[1] else 1
    return StoredChunks(
        path, int(array.shape[0]), rows, math.ceil(array.shape[0] / rows) if array.shape[0] else 0, columns,
        float(min(rows, array.shape[0])), _mean_stored_bytes(store, path),
    )


def stored_chunks(
    source: zarr.Group | PathOrManifest,
    path: str = "X",
    *,
    storage_options: dict[str, Any] | None = None,
) -> tuple[StoredChunks, ...]:
    """How the matrix at ``path`` (``"X"``, ``"layers/counts"``, ``"obsm/X_pca"``) stores its rows:
    one :class:`StoredChunks` per stored array (``data`` and ``indices`` of a csr matrix; the
    array itself if dense).

    ``source`` is a group :func:`h5lens.open_group` opened, or what it opens (a manifest
    object, path or URL, with ``storage_options``). A ``chunk_size`` of at least
    ``max(c.rows_per_chunk for c in stored_chunks(...))`` keeps each block's reads within
    about two stored chunks per array: see docs/ml-loading.md.

    A csc matrix stores columns, not rows: it raises :class:`~h5lens.errors.UnsupportedFeatureError`.
    """
    group = source if isinstance(source, zarr.Group) else open_group(source, storage_options=storage_options)
    store = store_of(group)
    node = group[path]
    kind = node.attrs.get("encoding-type")
    if isinstance(node, zarr.Group):
        if kind != "csr_matrix":
            raise UnsupportedFeatureError(
                f"{path}: rows are stored by csr matrices and dense arrays; this is {kind or 'a group'}"
            )
        return _sparse(store, node, path)
    return (_dense(store, node, path),)


__all__ = ["StoredChunks", "stored_chunks"]
