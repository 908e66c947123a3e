"""xarray's zarr data store, reading the arrays h5lens decodes in whole regions.

``engine="h5lens"`` opens a manifest through xarray's own zarr backend (every decoding
option, group and chunking is xarray's); this subclass of its ``ZarrStore`` changes one
thing: a variable's values are read by :meth:`h5lens.store.ManifestStore.read_region`
(h5lens's read plan: the chunks a selection covers fetched at once, decoded together,
laid out with one transpose; on the calling thread when they are local and few bytes)
instead of zarr's per-chunk indexing and event loop, which costs tens of microseconds a chunk
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

from h5lens import convention
from h5lens.long_double import FloatLayout, layout_in, to_longdouble
from h5lens.read.attribute_types import typed_attributes
from h5lens.read.plan import decoder, region_of
from h5lens.store import ManifestStore


class RegionArrayWrapper(ZarrArrayWrapper):
    """A zarr array of a ManifestStore whose basic and outer slices are read in regions."""

    __slots__ = ("_store", "_path")

    def __init__(self, zarr_array: Any, store: Any, path: str) -> None:
        super().__init__(zarr_array)
        self._store = store
        self._path = path

    def _region(self, key: tuple[Any, ...]) -> np.ndarray | None:
        found = region_of(key, tuple(self.shape), tuple(self._array.chunks))
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


class LongDoubleArrayWrapper(ZarrArrayWrapper):
    """A zarr array of the stored bits of floats h5py reads as np.longdouble
    (``_FLOAT_LAYOUT``, :mod:`h5lens.long_double`), read as np.longdouble."""

    __slots__ = ("_layout", "_where")

    def __init__(self, zarr_array: Any, layout: FloatLayout, where: str) -> None:
        super().__init__(zarr_array)
        self.dtype = np.dtype(np.longdouble)
        self._layout = layout
        self._where = where

    def _values(self, raw: Any) -> Any:
        return to_longdouble(raw, self._layout, self._where)

    def _getitem(self, key: Any) -> Any:
        return self._values(super()._getitem(key))

    def _oindex(self, key: Any) -> Any:
        return self._values(super()._oindex(key))

    def _vindex(self, key: Any) -> Any:
        return self._values(super()._vindex(key))

    async def _async_getitem(self, key: Any) -> Any:
        return self._values(await super()._async_getitem(key))

    async def _async_oindex(self, key: Any) -> Any:
        return self._values(await super()._async_oindex(key))

    async def _async_vindex(self, key: Any) -> Any:
        return self._values(await super()._async_vindex(key))


class RegionZarrStore(ZarrStore):
    """xarray's ZarrStore, with :class:`RegionArrayWrapper` for the arrays h5lens decodes and
    attributes of the HDF5 types the manifest records (:mod:`h5lens.read.attribute_types`)."""

    def open_store_variable(self, name: str) -> Variable:
        variable = super().open_store_variable(name)
        zarr_array = self.members[name]
        store = zarr_array.store
        path = zarr_array.path
        attrs = variable.attrs
        if isinstance(store, ManifestStore):
            attrs = typed_attributes(store.manifest.attribute_types.get(path), attrs)
        data = variable._data
        layout = layout_in(attrs, path) if isinstance(store, ManifestStore) else None
        if layout is not None:  # long doubles' stored bits, read as np.longdouble
            attrs = {k: v for k, v in attrs.items() if k != convention.FLOAT_LAYOUT}
            data = indexing.LazilyIndexedArray(LongDoubleArrayWrapper(zarr_array, layout, "/" + path))
        elif isinstance(store, ManifestStore) and decoder(store, path, text=False) is not None:
            data = indexing.LazilyIndexedArray(RegionArrayWrapper(zarr_array, store, path))
        # text stays zarr's to read: xarray types it as zarr gives it
        return Variable(variable.dims, data, attrs, variable.encoding)

    def get_attrs(self) -> dict[str, Any]:
        attrs = super().get_attrs()
        store = self.zarr_group.store
        if not isinstance(store, ManifestStore):
            return attrs
        return typed_attributes(store.manifest.attribute_types.get(self.zarr_group.path), attrs)


__all__ = ["LongDoubleArrayWrapper", "RegionArrayWrapper", "RegionZarrStore"]
