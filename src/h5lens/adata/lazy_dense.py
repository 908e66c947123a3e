"""A dense array of a manifest as an array dask reads in blocks, through h5lens's read plan.

``dask.array.from_zarr`` reads each block through zarr: its event loop (a hop per block)
and its per-chunk pipeline. :class:`DenseSource` is what ``dask.array.from_array`` takes
instead: ``__getitem__`` of a block's slices is one region read
(:meth:`h5lens.store.ManifestStore.read_region`: on the calling thread when the chunks are
local and few bytes). Pickled, it carries its store (a handle to one store per worker
process, :mod:`h5lens.adata.shared`) and the array's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from h5lens.engine.plan import decoder, region_of

if TYPE_CHECKING:
    from h5lens.store import ManifestStore


class DenseSource:
    """The numbers of array ``path`` of ``store`` (one :func:`~h5lens.engine.plan.decoder`
    decodes), sliced as numpy slices them."""

    def __init__(self, store: ManifestStore, path: str) -> None:
        codec = decoder(store.engine, path, text=False)
        if codec is None:
            raise ValueError(f"/{path}: not an array of numbers h5lens decodes")
        self.store = store
        self.path = path
        self.shape = codec.shape
        self.chunks = codec.chunk_shape
        self.dtype = codec.dtype
        self.ndim = len(self.shape)

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        key = getattr(self.store, "key", None) or str(id(self.store))
        return ("h5lens.DenseSource", key, self.path)

    def __getitem__(self, key: Any) -> np.ndarray:
        found = region_of(key, self.shape, self.chunks)
        if found is not None:
            bounds, post = found
            values = self.store.read_region(self.path, bounds)
            if values is not None:
                return np.asarray(values[post])
        import zarr

        return np.asarray(zarr.open_array(self.store, path=self.path, mode="r")[key])


def lazy_dense(store: ManifestStore, path: str, chunks: tuple[int, ...] | None = None) -> Any:
    """A dask array of the numbers of array ``path`` in blocks of ``chunks`` (by default its
    stored chunks, as ``dask.array.from_zarr`` cuts it)."""
    import dask.array as da
    from dask.base import tokenize

    source = DenseSource(store, path)
    blocks = source.chunks if chunks is None else chunks
    meta = np.empty((0,) * source.ndim, dtype=source.dtype)
    return da.from_array(source, chunks=blocks, meta=meta, name="h5lens-dense-" + tokenize(source, blocks))


__all__ = ["DenseSource", "lazy_dense"]
