"""A csr/csc matrix of a manifest as an array dask reads in blocks of its major axis.

anndata's lazy sparse matrices (``read_elem_lazy``) build each block with ``map_blocks``
over its backed sparse dataset, through zarr arrays: a slice of the lazy matrix reads
whole blocks, and every block pays zarr's per-chunk pipeline three times (indptr,
indices, data). :class:`LazySparse` is what ``dask.array.from_array`` takes instead:
``__getitem__`` of a major-axis slice or index array reads the rows' ``indptr``
entries, then every chunk of ``data`` and ``indices`` those rows touch at once
(:meth:`h5lens.store.ManifestStore.read_runs`), and builds the scipy matrix. dask fuses a
slice of a block into the block's read, so ``X[1000:1100]`` reads those rows only,
whatever the block size; blocks are then sized for computing (by bytes,
:mod:`h5lens.adata.blocks`), not for slicing.

Pickled, it carries its store (a handle to one store per worker process,
:mod:`h5lens.adata.shared`) and the array's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from h5lens.adata.columns import ColumnMaps
    from h5lens.store import ManifestStore


class LazySparse:
    """The csr (rows) or csc (columns) matrix group at ``path`` of ``store`` (one
    :func:`h5lens.adata.blocks.is_sparse_matrix` accepts), described by its manifest
    documents: no zarr node is opened to make it."""

    ndim = 2

    def __init__(self, store: ManifestStore, path: str) -> None:
        from h5lens.read.consolidated import array_metadata

        self.store = store
        self.path = path
        attributes = store.manifest.nodes[path].get("attributes", {})
        self.csr = attributes["encoding-type"] == "csr_matrix"
        shape = cast("list[int]", attributes["shape"])  # anndata records the shape as a list of ints
        self.shape = (int(shape[0]), int(shape[1]))
        self._prefix = f"{path}/" if path else ""
        self.dtype = array_metadata(store, f"{self._prefix}data").dtype.to_native_dtype()
        self.indptr_path = f"{self._prefix}indptr"

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        key = getattr(self.store, "key", None) or str(id(self.store))
        return ("h5lens.LazySparse", key, self.path)

    @property
    def major(self) -> int:
        return self.shape[0] if self.csr else self.shape[1]

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            key = (key,)
        key = key + (slice(None),) * (2 - len(key))
        major_key, minor_key = key if self.csr else key[::-1]
        matrix = self._major(major_key)
        if not _whole(minor_key, self.shape[1 if self.csr else 0]):
            matrix = matrix[:, minor_key] if self.csr else matrix[minor_key, :]
        return matrix

    def _major(self, major_key: Any) -> Any:
        """The matrix of the major-axis rows ``major_key`` (a slice or integer indices)."""
        import scipy.sparse as sp

        rows, indptr, data, indices = self._stored(major_key)
        return self._build(sp, indptr, data, indices, rows.size, self.shape[1] if self.csr else self.shape[0])

    def _stored(self, major_key: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The major-axis rows ``major_key`` (a slice or integer indices) as stored: their
        numbers, and their (indptr, data, indices)."""
        from h5lens.engine.plan import region_of

        n = self.major
        region = region_of(major_key, (n,)) if isinstance(major_key, slice) else None
        if region is not None and region[1] == (slice(None),):  # a run of rows (the one converter)
            (start, stop), = region[0]
            rows = None
        else:  # any step (negative too), bool masks, negative or unsorted indices
            where = major_key if isinstance(major_key, slice) else np.asarray(major_key)
            rows = np.arange(n, dtype=np.int64)[where]
            start, stop = (int(rows.min()), int(rows.max()) + 1) if rows.size else (0, 0)
            if rows.size and np.array_equal(rows, np.arange(start, stop)):
                rows = None
        numbers = np.arange(start, max(start, stop), dtype=np.int64) if rows is None else rows
        if stop <= start:
            return numbers, np.zeros(numbers.size + 1, np.int64), np.empty(0, self.dtype), np.empty(0, np.int32)
        pointers = self._read(self.indptr_path, np.asarray([start]), np.asarray([stop + 1]))
        if rows is None:
            first, last = int(pointers[0]), int(pointers[-1])
            starts, stops = np.asarray([first]), np.asarray([last])
            indptr = pointers - first
        else:
            local = rows - start
            starts, stops = pointers[local], pointers[local + 1]
            indptr = np.r_[0, np.cumsum(stops - starts)]
        indices, data = self._read_both(starts, stops)
        return numbers, indptr, data, indices

    def _build(self, sp: Any, indptr: np.ndarray, data: np.ndarray, indices: np.ndarray, count: int, minor: int) -> Any:
        if self.csr:
            return sp.csr_matrix((data, indices, indptr), shape=(count, minor))
        return sp.csc_matrix((data, indices, indptr), shape=(minor, count))

    def _read_both(self, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The runs of ``indices`` and of ``data``, fetched together (one round trip, not two)."""
        import asyncio

        from zarr.core.sync import sync

        async def both() -> list[np.ndarray | None]:
            return await asyncio.gather(
                *(self.store.engine.read_runs_async(f"{self._prefix}{name}", starts, stops) for name in ("indices", "data"))
            )

        indices, data = sync(both())
        if indices is None:
            indices = self._read(f"{self._prefix}indices", starts, stops)
        if data is None:
            data = self._read(f"{self._prefix}data", starts, stops)
        return indices, data

    def _read(self, path: str, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """Runs of a 1-d member, in bulk; through zarr where h5lens does not decode it."""
        found = self.store.read_runs(path, starts, stops)
        if found is not None:
            return found
        import zarr

        array = zarr.open_array(self.store, path=path, mode="r")
        lengths = np.maximum(stops - starts, 0)
        positions = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
            starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths
        )
        return np.asarray(array.get_coordinate_selection(positions))


class RemappedSparse(LazySparse):
    """A csr matrix of a combined AnnData whose files have different var: the values of the
    rows asked for, as stored, then each file's columns mapped to the combined var
    (:mod:`h5lens.adata.columns`)."""

    def __init__(self, store: ManifestStore, path: str, maps: ColumnMaps) -> None:
        from h5lens.adata.columns import COLUMNS

        super().__init__(store, path)
        self.maps = maps
        self.indptr_path = f"{COLUMNS}/{path}/indptr"
        self.dtype = maps.dtype(path)

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        key = getattr(self.store, "key", None) or str(id(self.store))
        return ("h5lens.RemappedSparse", key, self.path)

    def remapped_parts(self, major_key: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, indices, indptr) of the rows ``major_key``, in the combined var's columns."""
        rows, indptr, data, indices = self._stored(major_key)
        return self.maps.csr_parts(self.path, rows, indptr, data, indices)

    def _major(self, major_key: Any) -> Any:
        import scipy.sparse as sp

        data, indices, indptr = self.remapped_parts(major_key)
        return sp.csr_matrix((data, indices, indptr), shape=(indptr.size - 1, self.shape[1]))


def _whole(key: Any, size: int) -> bool:
    if isinstance(key, slice):
        return key.indices(size) == (0, size, 1)
    return False


def lazy_sparse(store: ManifestStore, path: str, block: int) -> Any:
    """A dask array of the csr/csc matrix at ``path`` in blocks of ``block`` major-axis rows."""
    import dask.array as da
    import scipy.sparse as sp
    from dask.base import tokenize

    source = LazySparse(store, path)
    chunks = (block, -1) if source.csr else (-1, block)
    meta = (sp.csr_matrix if source.csr else sp.csc_matrix)((0, 0), dtype=source.dtype)
    name = "h5lens-sparse-" + tokenize(source, block)
    return da.from_array(source, chunks=chunks, asarray=False, fancy=True, meta=meta, name=name)


def read_remapped(store: ManifestStore, matrix: str, maps: ColumnMaps) -> Any:
    """The whole matrix, in memory, as ``anndata.concat`` of the files gives it."""
    from h5lens.adata.blocks import sparse_matrix
    from h5lens.adata.columns import RemappedDense

    if maps.matrices[matrix]["kind"] == "array":
        return RemappedDense(store, matrix, maps)[:, :]
    source = RemappedSparse(store, matrix, maps)
    data, indices, indptr = source.remapped_parts(slice(None))
    return sparse_matrix("csr_matrix", (data, indices, indptr), source.shape)


def lazy_remapped(store: ManifestStore, matrix: str, maps: ColumnMaps, block_bytes: int) -> Any:
    """The matrix as a dask array in row blocks of about ``block_bytes``."""
    import dask.array as da
    from dask.base import tokenize

    from h5lens.adata.blocks import row_block_for_bytes, sparse_row_block
    from h5lens.adata.columns import RemappedDense

    if maps.matrices[matrix]["kind"] == "array":
        source = RemappedDense(store, matrix, maps)
        nbytes = source.shape[0] * source.shape[1] * source.dtype.itemsize
        block = row_block_for_bytes(source.shape[0], nbytes, block_bytes)
        meta = np.empty((0, 0), dtype=source.dtype)
        name = "h5lens-remapped-dense-" + tokenize(source, block)
        return da.from_array(source, chunks=(block, -1), meta=meta, name=name)
    import scipy.sparse as sp

    sparse = RemappedSparse(store, matrix, maps)
    block = sparse_row_block(store, matrix, block_bytes)
    meta = sp.csr_matrix((0, 0), dtype=sparse.dtype)
    name = "h5lens-remapped-sparse-" + tokenize(sparse, block)
    return da.from_array(sparse, chunks=(block, -1), asarray=False, fancy=True, meta=meta, name=name)


__all__ = ["LazySparse", "RemappedSparse", "lazy_remapped", "lazy_sparse", "read_remapped"]
