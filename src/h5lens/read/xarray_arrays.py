"""xarray's zarr data store, reading the arrays h5lens decodes in whole regions.

``engine="h5lens"`` opens a manifest through xarray's own zarr backend (every decoding
option, group and chunking is xarray's); this subclass of its ``ZarrStore`` changes one
thing: a variable's values are read by :meth:`h5lens.store.ManifestStore.read_region`
(the chunks a selection covers fetched at once, decoded together, laid out with one
transpose) instead of zarr's per-chunk indexing, which costs tens of microseconds a chunk
before any byte is read. Selections it does not cover (arrays of points, arrays h5lens
does not decode itself) go to zarr as before. Imported when a manifest is opened, never
by the backend's entry point.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xarray.backends.zarr import ZarrArrayWrapper, ZarrStore
from xarray.core import indexing
from xarray.core.variable import Variable


def region_of(key: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[list[tuple[int, int]], tuple[Any, ...]] | None:
    """A basic key (integers, slices) as the region it covers, ``[start, stop)`` per axis,
    and what to take of that region to give the key's result; None for other keys."""
    if len(key) != len(shape):
        return None
    bounds: list[tuple[int, int]] = []
    post: list[Any] = []
    for item, n in zip(key, shape, strict=True):
        if isinstance(item, (int, np.integer)):
            i = int(item) + (n if item < 0 else 0)
            if not 0 <= i < n:
                return None  # let zarr say what it says
            bounds.append((i, i + 1))
            post.append(0)
        elif isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step < 0:
                return None
            count = len(range(start, stop, step))
            if count == 0:
                bounds.append((0, 0))
                post.append(slice(None))
                continue
            last = start + (count - 1) * step
            bounds.append((start, last + 1))
            post.append(slice(None, None, step) if step != 1 else slice(None))
        else:
            return None
    return bounds, tuple(post)


class RegionArrayWrapper(ZarrArrayWrapper):
    """A zarr array of a ManifestStore whose basic and outer slices are read in regions."""

    __slots__ = ("_store", "_path")

    def __init__(self, zarr_array: Any, store: Any, path: str) -> None:
        super().__init__(zarr_array)
        self._store = store
        self._path = path

    def _region(self, key: tuple[Any, ...]) -> np.ndarray | None:
        found = region_of(key, tuple(self.shape))
        if found is None:
            return None
        bounds, post = found
        values = self._store.read_region(self._path, bounds)
        return None if values is None else values[post]

    def _getitem(self, key: Any) -> Any:
        values = self._region(key if isinstance(key, tuple) else (key,))
        return super()._getitem(key) if values is None else values

    def _oindex(self, key: Any) -> Any:
        values = self._region(key if isinstance(key, tuple) else (key,))
        return super()._oindex(key) if values is None else values


class RegionZarrStore(ZarrStore):
    """xarray's ZarrStore, with :class:`RegionArrayWrapper` for the arrays h5lens decodes."""

    def open_store_variable(self, name: str) -> Variable:
        variable = super().open_store_variable(name)
        zarr_array = self.members[name]
        store = zarr_array.store
        path = zarr_array.path
        if not hasattr(store, "array_codec") or store.array_codec(path) is None:
            return variable
        data = indexing.LazilyIndexedArray(RegionArrayWrapper(zarr_array, store, path))
        return Variable(variable.dims, data, variable.attrs, variable.encoding)


__all__ = ["RegionArrayWrapper", "RegionZarrStore", "region_of"]
