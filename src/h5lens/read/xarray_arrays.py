"""xarray's zarr data store, reading the arrays h5lens decodes in whole regions, with
the encoding xarray's ``h5netcdf`` engine gives.

``engine="h5lens"`` opens a manifest through xarray's own zarr backend (every decoding
option, group and chunking is xarray's); this subclass of its ``ZarrStore`` changes three
things:

* a variable's values are read by :meth:`h5lens.store.ManifestStore.read_region`
  (h5lens's read plan: the chunks a selection covers fetched at once, decoded together,
  laid out with one transpose; on the calling thread when they are local and few bytes)
  instead of zarr's per-chunk indexing and event loop, which costs tens of microseconds a
  chunk before any byte is read. Selections it does not cover (arrays of points, arrays
  h5lens does not decode itself) go to zarr as before;
* a variable-length string variable is given to xarray as h5netcdf gives it (``object``
  values, ``encoding["dtype"] = str``), so xarray decodes it to the same fixed-width
  unicode, not numpy's ``StringDType``;
* each variable's ``encoding`` is h5netcdf's (``zlib``, ``shuffle``, ``complevel``,
  ``chunksizes``, ``contiguous``, ``fletcher32``, ``source``, ``original_shape`` ...) and the
  dataset's ``encoding["unlimited_dims"]`` its group's unlimited dimensions, not zarr's
  ``compressors`` / ``filters`` / ``serializer``: ``Dataset.to_netcdf`` then writes the
  variables compressed, chunked and unlimited as the file stored them. They come from the
  HDF5 storage the netCDF profile records in each group's ``_nc_storage`` attribute
  (:mod:`h5lens.scan.netcdf`); a manifest without one (an HDF5 file no netCDF library
  wrote) gives what its codecs say (:func:`_pipeline_of_codecs`).

Imported when a manifest is opened, never by the backend's entry point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from xarray.backends.zarr import ZarrArrayWrapper, ZarrStore
from xarray.coding.strings import create_vlen_dtype
from xarray.core import indexing
from xarray.core.variable import Variable

from h5lens.codecs import table
from h5lens.engine.plan import decoder, region_of
from h5lens.format import convention
from h5lens.format.long_double import FloatFields, FloatLayout, float_form_in, h5py_dtype, to_h5py
from h5lens.manifest.documents import ArrayDocument
from h5lens.read.attribute_types import typed_attributes
from h5lens.store import ManifestStore

# The group attributes the netCDF profile records HDF5 storage in (h5lens.scan.netcdf.STORAGE,
# ENUMS, repeated here: the reader side never imports the scanner; tests/test_xarray_encoding.py
# checks they agree).
STORAGE = "_nc_storage"
ENUMS = "_nc_enums"  # h5lens.scan.netcdf.ENUMS: an enum variable's mapping, by variable name


class RegionArrayWrapper(ZarrArrayWrapper):
    """A zarr array of a ManifestStore whose basic and outer slices are read in regions."""

    __slots__ = ("_store", "_path")

    def __init__(self, zarr_array: Any, store: Any, path: str) -> None:
        super().__init__(zarr_array)
        self._store = store
        self._path = path

    def _region(self, key: tuple[Any, ...]) -> np.ndarray | None:
        try:
            chunks: tuple[int, ...] | None = tuple(self._array.chunks)
        except NotImplementedError:  # a rectilinear grid (h5lens combine's): no one chunk shape
            chunks = None
        found = region_of(key, tuple(self.shape), chunks)
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
    """A zarr array of the stored bits of long doubles (``_FLOAT_LAYOUT``,
    :mod:`h5lens.format.long_double`): real ones, complex pairs or record members, read as h5py
    gives them (np.longdouble, np.clongdouble, records holding them)."""

    __slots__ = ("_form", "_where")

    def __init__(self, zarr_array: Any, form: FloatLayout | FloatFields, where: str) -> None:
        super().__init__(zarr_array)
        self.dtype = h5py_dtype(np.dtype(zarr_array.dtype), form)
        self._form = form
        self._where = where

    def _values(self, raw: Any) -> Any:
        return to_h5py(raw, self._form, self._where)

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


class TextArrayWrapper(RegionArrayWrapper):
    """A variable-length string array as h5netcdf's engine gives one to xarray: ``object``
    values (numpy's vlen-str dtype), read in regions where h5lens decodes the array, else
    through zarr (whose ``StringDType`` values are given as ``object``)."""

    __slots__ = ()

    def __init__(self, zarr_array: Any, store: Any, path: str) -> None:
        super().__init__(zarr_array, store, path)
        self.dtype = create_vlen_dtype(str)

    def _getitem(self, key: Any) -> Any:
        return _as_objects(super()._getitem(key))

    def _oindex(self, key: Any) -> Any:
        return _as_objects(super()._oindex(key))

    def _vindex(self, key: Any) -> Any:
        return _as_objects(super()._vindex(key))

    async def _async_getitem(self, key: Any) -> Any:
        return _as_objects(await super()._async_getitem(key))

    async def _async_oindex(self, key: Any) -> Any:
        return _as_objects(await super()._async_oindex(key))

    async def _async_vindex(self, key: Any) -> Any:
        return _as_objects(await super()._async_vindex(key))


def _as_objects(values: Any) -> Any:
    values = np.asarray(values)
    return values if values.dtype == object else values.astype(object)


class RegionZarrStore(ZarrStore):
    """xarray's ZarrStore, with :class:`RegionArrayWrapper` for the arrays h5lens decodes,
    attributes of the HDF5 types the manifest records (:mod:`h5lens.read.attribute_types`),
    and h5netcdf's encoding (:func:`h5netcdf_encoding`)."""

    def open_store_variable(self, name: str) -> Variable:
        variable = super().open_store_variable(name)
        zarr_array = self.members[name]
        store = zarr_array.store
        if not isinstance(store, ManifestStore):
            return variable
        path = zarr_array.path
        attrs = typed_attributes(store.manifest.attribute_types.get(path), variable.attrs, as_h5py=True)
        data = variable._data
        form = float_form_in(attrs, path)
        text = _is_vlen_text(zarr_array)
        if form is not None:  # long doubles' stored bits, read as h5py gives them
            attrs = {k: v for k, v in attrs.items() if k != convention.FLOAT_LAYOUT}
            data = indexing.LazilyIndexedArray(LongDoubleArrayWrapper(zarr_array, form, "/" + path))
        elif text:
            data = indexing.LazilyIndexedArray(TextArrayWrapper(zarr_array, store, path))
        elif decoder(store.engine, path, text=False) is not None:
            data = indexing.LazilyIndexedArray(RegionArrayWrapper(zarr_array, store, path))
        document = ArrayDocument.of(store.manifest.nodes[path])
        recorded = self._storage().get("variables", {}).get(name)
        recorded = recorded if isinstance(recorded, Mapping) else None
        encoding = h5netcdf_encoding(
            dims=tuple(variable.dims),
            shape=tuple(variable.shape),
            dtype=str if text else h5py_dtype(_stored_dtype(zarr_array), form) if form is not None
            else self._h5py_dtype(name, recorded, _stored_dtype(zarr_array)),
            storage=recorded,
            codecs=document.codecs if document is not None else (),
            zarr_chunks=tuple(variable.encoding["chunks"]),
            source=store.source_url(0) if store.manifest.sources else None,
        )
        return Variable(variable.dims, data, attrs, encoding)

    def get_attrs(self) -> dict[str, Any]:
        attrs = super().get_attrs()
        store = self.zarr_group.store
        if not isinstance(store, ManifestStore):
            return attrs
        return typed_attributes(store.manifest.attribute_types.get(self.zarr_group.path), attrs, as_h5py=True)

    def get_encoding(self) -> dict[str, Any]:
        """h5netcdf's: the group's own unlimited dimensions, where the manifest records them
        (nothing where it does not: it cannot tell)."""
        storage = self._storage()
        if not storage:
            return {}
        return {"unlimited_dims": set(storage.get("unlimited", ()))}

    def _h5py_dtype(self, name: str, recorded: Mapping[str, Any] | None, dtype: np.dtype) -> np.dtype:
        """``dtype`` with the metadata h5netcdf's is given: a fixed-length text variable's
        character set (h5py's), an enum's name and mapping (h5netcdf's; ``to_netcdf`` then
        writes the enum type again)."""
        if recorded is None:
            return dtype
        charset = recorded.get("charset")
        if dtype.kind == "S" and charset in ("ascii", "utf-8"):
            return np.dtype(dtype, metadata={"h5py_encoding": charset})
        enum_name = recorded.get("enum")
        store = self.zarr_group.store
        if not isinstance(enum_name, str) or not isinstance(store, ManifestStore):
            return dtype
        doc = store.manifest.nodes.get(self.zarr_group.path) or {}
        mapping = ((doc.get("attributes") or {}).get(ENUMS) or {}).get(name)
        if not isinstance(mapping, Mapping):
            return dtype
        return np.dtype(dtype, metadata={"enum": dict(mapping), "enum_name": enum_name})

    def _storage(self) -> Mapping[str, Any]:
        """This group's ``_nc_storage`` record, from the manifest's document (no zarr read)."""
        store = self.zarr_group.store
        if not isinstance(store, ManifestStore):
            return {}
        doc = store.manifest.nodes.get(self.zarr_group.path) or {}
        found = (doc.get("attributes") or {}).get(STORAGE)
        return found if isinstance(found, Mapping) else {}


def _is_vlen_text(zarr_array: Any) -> bool:
    serializer = getattr(zarr_array, "serializer", None)
    return serializer is not None and serializer.to_dict().get("name") == "vlen-utf8"


def _stored_dtype(zarr_array: Any) -> np.dtype:
    """The dtype h5py gives the dataset: zarr's, in the byte order the chunks hold."""
    dtype = np.dtype(zarr_array.dtype)
    serializer = getattr(zarr_array, "serializer", None)
    endian = serializer.to_dict().get("configuration", {}).get("endian") if serializer is not None else None
    if endian in ("big", "little") and dtype.kind in "biufcmM" and dtype.itemsize > 1:
        return dtype.newbyteorder(">" if endian == "big" else "<")
    return dtype


# -- h5netcdf's encoding -----------------------------------------------------------------

# h5py's names for HDF5 filters (h5py._hl.filters.get_filter_name); others by their id
_H5PY_NAMES = {
    table.DEFLATE: "gzip",
    table.SZIP: "szip",
    table.SHUFFLE: "shuffle",
    table.FLETCHER32: "fletcher32",
    table.LZF: "lzf",
    table.SCALEOFFSET: "scaleoffset",
}
# the filters h5py knows as its own (h5py._hl.filters._COMP_FILTERS): any other makes
# h5py's Dataset.compression "unknown"
_H5PY_OWN = frozenset(_H5PY_NAMES.values())
# h5netcdf's Variable.filters() table (h5netcdf.core), keyed by h5py's filter names
_H5NETCDF_COMPRESSION = {
    "1": "zlib",
    "2": "szip",
    "307": "bzip2",
    "32004": "blosc",
    "32015": "zstd",
    "zlib": "zlib",
    "szip": "szip",
    "bzip2": "bzip2",
    "blosc": "blosc",
    "zstd": "zstd",
}
_SZIP_EC_OPTION_MASK = 4
_SZIP_NN_OPTION_MASK = 32


def h5netcdf_encoding(
    *,
    dims: tuple[str, ...],
    shape: tuple[int, ...],
    dtype: Any,
    storage: Mapping[str, Any] | None,
    codecs: Sequence[Mapping[str, Any]],
    zarr_chunks: tuple[int, ...],
    source: str | None,
) -> dict[str, Any]:
    """A variable's encoding as xarray's h5netcdf engine builds it
    (``H5NetCDFStore.open_store_variable``) from h5netcdf's and h5py's view of the dataset:
    from the recorded HDF5 ``storage`` (chunk shape, filter pipeline), or without one from
    the zarr ``codecs`` (then a dataset without filters may be chunked or contiguous: the
    layout is left out, the zarr chunks given as ``preferred_chunks``)."""
    encoding: dict[str, Any] = {"dtype": dtype}
    if storage is not None:
        pipeline = [(int(code), tuple(int(v) for v in values)) for code, values in storage.get("filters", [])]
        recorded = storage.get("chunks")
        chunks = tuple(int(c) for c in recorded) if recorded is not None and shape else None
        layout_known = True
    else:
        pipeline = _pipeline_of_codecs(codecs)
        chunks = zarr_chunks if pipeline and shape else None  # HDF5 filters need chunks
        layout_known = bool(pipeline) or not shape
    if chunks:
        encoding["contiguous"] = False
        encoding["chunksizes"] = chunks
        encoding["preferred_chunks"] = dict(zip(dims, chunks, strict=True))
    elif layout_known:
        encoding["contiguous"] = True
        encoding["chunksizes"] = None
    else:
        encoding["preferred_chunks"] = dict(zip(dims, zarr_chunks, strict=True))
    filters = _h5py_filters(pipeline)
    encoding.update(_h5netcdf_filters(filters))
    compression = _h5py_compression(filters)
    if compression == "gzip":
        encoding["zlib"] = True
        encoding["complevel"] = filters["gzip"]
    elif compression is not None:
        encoding["compression"] = compression
        encoding["compression_opts"] = filters.get(compression)
    if source is not None:
        encoding["source"] = source
    encoding["original_shape"] = shape
    return encoding


def _h5py_filters(pipeline: Sequence[tuple[int, tuple[int, ...]]]) -> dict[str, Any]:
    """h5py's ``Dataset._filters`` of a filter pipeline (``h5py._hl.filters.get_filters``):
    name -> settings, in pipeline order."""
    out: dict[str, Any] = {}
    for code, values in pipeline:
        setting: Any
        if code == table.DEFLATE:
            setting = values[0] if values else None
        elif code == table.SZIP and len(values) >= 2:
            mask, pixels = values[0], values[1]
            if mask & _SZIP_EC_OPTION_MASK:
                setting = ("ec", pixels)
            elif mask & _SZIP_NN_OPTION_MASK:
                setting = ("nn", pixels)
            else:
                setting = (mask, pixels)
        elif code == table.LZF:
            setting = None
        else:
            setting = values or None
        out[_H5PY_NAMES.get(code, str(code))] = setting
    return out


def _h5py_compression(filters: Mapping[str, Any]) -> str | None:
    """h5py's ``Dataset.compression``."""
    for name in ("gzip", "lzf", "szip"):
        if name in filters:
            return name
    return "unknown" if any(name not in _H5PY_OWN for name in filters) else None


def _h5netcdf_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """h5netcdf's ``Variable.filters()``."""
    out: dict[str, Any] = {
        "zlib": False,
        "szip": False,
        "bzip2": False,
        "blosc": False,
        "zstd": False,
        "shuffle": "shuffle" in filters,
        "fletcher32": "fletcher32" in filters,
    }
    if _h5py_compression(filters) == "gzip":
        out["zlib"] = True
        out["complevel"] = filters["gzip"]
    for name, setting in filters.items():
        compression = _H5NETCDF_COMPRESSION.get(name)
        if compression is not None:
            out[compression] = True
            if setting:
                out["complevel"] = setting[0]
    return out


def _pipeline_of_codecs(codecs: Sequence[Mapping[str, Any]]) -> list[tuple[int, tuple[int, ...]]]:
    """The HDF5 filters (id, cd_values) the zarr ``codecs`` decode, as far as a codec tells
    (:mod:`h5lens.codecs.table` in reverse): for manifests that do not record the pipeline."""
    out: list[tuple[int, tuple[int, ...]]] = []
    for codec in codecs:  # in the order they encode, as HDF5's pipeline lists filters
        name = codec.get("name")
        config = codec.get("configuration") or {}
        if name == "numcodecs.zlib":
            out.append((table.DEFLATE, (int(config.get("level", 6)),)))
        elif name in ("numcodecs.shuffle", "h5lens.shuffle"):
            out.append((table.SHUFFLE, (int(config.get("elementsize", 1)),)))
        elif name == "numcodecs.bz2":
            out.append((table.BZIP2, (int(config.get("level", 9)),)))
        elif name == "zstd":
            out.append((table.ZSTD, (int(config.get("level", 3)) & 0xFFFFFFFF,)))
        elif name == "imagecodecs_lz4h5":
            out.append((table.LZ4, (int(config.get("blocksize", 0)),)))
        elif name == "imagecodecs_szip":
            keys = ("options_mask", "pixels_per_block", "bits_per_pixel", "pixels_per_scanline")
            out.append((table.SZIP, tuple(int(config.get(k, 0)) for k in keys)))
        else:
            found = _FILTER_OF_CODEC.get(str(name))
            if found is not None:
                out.append((found, ()))
    return out


# codecs whose settings h5netcdf does not report: the filter id alone
_FILTER_OF_CODEC = {
    f.codec: f.filter_id
    for f in table.FILTERS.values()
    if f.filter_id not in (table.DEFLATE, table.SHUFFLE, table.BZIP2, table.ZSTD, table.LZ4, table.SZIP)
}


__all__ = ["LongDoubleArrayWrapper", "RegionArrayWrapper", "RegionZarrStore", "TextArrayWrapper", "h5netcdf_encoding"]
