"""Arrays whose files were encoded differently, each file's rows decoded with its own
encoding: what ``engine="h5lens"`` gives of a manifest ``h5lens combine --encoding
per-file`` made.

Such an array holds every file's stored values, and its codec chain starts with
``h5lens.per_file_encoding`` (:mod:`h5lens.codecs.per_file`), which records each file's
values of the attributes that differ by its rows and refuses zarr's readers. Here the codec
is taken out (:func:`h5lens.codecs.per_file.stored_values`: the same manifest, whose arrays
then read as their stored values), and :class:`PerFileZarrStore` gives xarray each such variable decoded file
by file, by xarray's own CF decoding (``decode_cf_variable``) with the options the dataset
is opened with, as ``xr.open_mfdataset`` decodes each file before concatenating. Files
in a row that share their encoding are decoded together.

The decoded variable's attributes and encoding are the first file's, as ``open_mfdataset``
keeps them. Where the options leave a difference undecoded (``mask_and_scale=False`` with
files of different ``scale_factor``; ``decode_times=False`` with different time units),
the stored values would be shown under one file's attributes: the variable is refused,
naming the attribute and two files.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from xarray.backends import BackendArray
from xarray.backends.zarr import FillValueCoder
from xarray.conventions import decode_cf_variable
from xarray.core import indexing
from xarray.core.variable import Variable

from h5lens.codecs.per_file import FileEncoding, Record, stored_values
from h5lens.errors import UnsupportedFeatureError
from h5lens.read.attribute_types import typed_attributes
from h5lens.read.xarray_arrays import RegionZarrStore
from h5lens.store import ManifestStore

# A stored array at most this big is read whole once, when a variable is opened (a time
# coordinate: xarray reads its first and last values per file to choose its type)
WHOLE_BYTES = 1 << 20


def stored_values_store(store: ManifestStore) -> tuple[ManifestStore, dict[str, Record]]:
    """A store of ``store``'s manifest whose per-file arrays read as their stored values
    (``store`` itself where there are none), with the same sources and options; its sources
    are checked as ``store``'s are (not again if ``store`` checked them at open)."""
    manifest, records = stored_values(store.manifest)
    if not records:
        return store, records
    opened = ManifestStore(
        manifest,
        source_options=store.source_options,
        source_urls=store.source_urls,
        allow_local=store.allow_local,
        decoded_cache_bytes=store.decoded_cache_bytes,
    ).checking_as(store)  # a combined manifest's many sources: checked as they are read, as store's are
    return opened, records


@dataclass(frozen=True)
class Decoding:
    """The CF decoding options a dataset is opened with (xarray's, each a value or a mapping
    of variable name to value)."""

    mask_and_scale: Any = True
    decode_times: Any = True
    use_cftime: Any = None
    decode_timedelta: Any = None

    def of(self, name: Hashable) -> dict[str, Any]:
        """The options for variable ``name``, as ``xarray.conventions.decode_cf_variables`` picks them."""

        def pick(value: Any, default: Any) -> Any:
            return value.get(name, default) if isinstance(value, Mapping) else value

        return {
            "mask_and_scale": pick(self.mask_and_scale, True),
            "decode_times": pick(self.decode_times, True),
            "use_cftime": pick(self.use_cftime, None),
            "decode_timedelta": pick(self.decode_timedelta, None),
        }


class PerFileZarrStore(RegionZarrStore):
    """:class:`~h5lens.read.xarray_arrays.RegionZarrStore` over a store of stored values
    (:func:`stored_values_store`), giving each variable whose files were encoded differently
    decoded file by file (:meth:`per_file` says which, and with what options)."""

    _records: Mapping[str, Record] = {}
    _decoding: Decoding = Decoding()

    def per_file(self, records: Mapping[str, Record], decoding: Decoding) -> PerFileZarrStore:
        self._records = records
        self._decoding = decoding
        return self

    def open_store_variable(self, name: str) -> Variable:
        variable = super().open_store_variable(name)
        zarr_array = self.members[name]
        assert isinstance(zarr_array, zarr.Array)  # a variable: xarray's ZarrStore lists arrays only
        found = self._records.get(zarr_array.path)
        store = zarr_array.store
        if found is None or not isinstance(store, ManifestStore):
            return variable
        return decode_per_file(name, variable, found, self._decoding.of(name), np.dtype(zarr_array.dtype), store)


@dataclass(frozen=True)
class _Run:
    """Files in a row that share their encoding: rows ``[start, stop)``, their attributes
    and encoding as xarray is given them, and how many files (the first's source named)."""

    start: int
    stop: int
    attrs: dict[str, Any]
    source: int


def decode_per_file(
    name: str, variable: Variable, found: Record, options: dict[str, Any], stored: np.dtype, store: ManifestStore
) -> Variable:
    """``variable`` (the stored values of a per-file array) decoded file by file: a lazy
    variable with the first file's attributes and encoding."""
    if not variable.shape or not found.files or found.rows != variable.shape[0]:
        raise UnsupportedFeatureError(
            f"{found.array}: its per-file record covers {found.rows} rows, the array has "
            f"{variable.shape[0] if variable.shape else 0}"
        )
    common = {k: v for k, v in variable.attrs.items() if k not in found.attributes}
    runs = [
        _Run(files[0].start, files[-1].stop, {**common, **_attributes(files[0], stored)}, files[0].source)
        for files in _runs(found.files)
    ]
    raw = _Stored(variable._data, variable.shape, variable.dtype)  # xarray's lazy array of the stored values
    decoded = [
        decode_cf_variable(
            name,
            Variable(
                variable.dims,
                indexing.LazilyIndexedArray(_Rows(raw, run.start, run.stop)),
                run.attrs,
                dict(variable.encoding),
            ),
            concat_characters=False,
            stack_char_dim=False,
            **options,
        )
        for run in runs
    ]
    _check_decoded_alike(found, runs, decoded, store)
    dtype = np.result_type(*(d.dtype for d in decoded))
    array = PerFileArray(name, raw, tuple(runs), dtype, tuple(variable.dims), options)
    return Variable(variable.dims, indexing.LazilyIndexedArray(array), decoded[0].attrs, decoded[0].encoding)


def _runs(files: tuple[FileEncoding, ...]) -> list[list[FileEncoding]]:
    """The files in runs of one encoding (empty files left out; the first, if all are)."""
    found: list[list[FileEncoding]] = []
    for file in files:
        if file.stop == file.start:
            continue
        if found and (found[-1][-1].attributes, found[-1][-1].types) == (file.attributes, file.types):
            found[-1].append(file)
        else:
            found.append([file])
    return found or [list(files[:1])]


def _attributes(file: FileEncoding, stored: np.dtype) -> dict[str, Any]:
    """A file's attributes as xarray's zarr store gives them (a ``_FillValue`` in its JSON
    form read back as a value of the stored type), with their recorded HDF5 types."""
    values = dict(file.attributes)
    if "_FillValue" in values:
        values["_FillValue"] = FillValueCoder.decode(values["_FillValue"], stored)
    return typed_attributes(file.types, values, as_h5py=True)


def _check_decoded_alike(found: Record, runs: list[_Run], decoded: list[Variable], store: ManifestStore) -> None:
    """The runs' attributes once decoded agree: else the options leave a difference
    undecoded, which one variable's attributes cannot say."""
    first = decoded[0].attrs
    for run, other in zip(runs[1:], decoded[1:], strict=True):
        for key in sorted(set(first) | set(other.attrs), key=str):
            if key in first and key in other.attrs and _same(first[key], other.attrs[key]):
                continue
            raise UnsupportedFeatureError(
                f"{found.array}: attribute {key!r} differs between {_named(store, runs[0].source)} and "
                f"{_named(store, run.source)}, and the decoding options asked for leave it undecoded: their values "
                "would be shown under one of them. Open with mask_and_scale and decode_times on (the default), "
                "which decode each file with its own"
            )


def _same(a: Any, b: Any) -> bool:
    try:
        left, right = np.asarray(a), np.asarray(b)
        return left.dtype == right.dtype and np.array_equal(left, right, equal_nan=left.dtype.kind in "fc")
    except (TypeError, ValueError):
        return bool(a == b)


def _named(store: ManifestStore, source: int) -> str:
    return store.source_url(source) if 0 <= source < len(store.manifest.sources) else f"source {source}"


class _Stored:
    """The stored values of the array: read through xarray's lazy array (h5lens's region
    reads), or held whole once read, when small."""

    def __init__(self, lazy: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.lazy = lazy
        self.shape = shape
        self.dtype = dtype
        self.whole: np.ndarray | None = None

    def get(self, key: tuple[Any, ...]) -> np.ndarray:
        """The values an outer key (integers, slices, 1-d integer arrays) selects."""
        if self.whole is None and int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize <= WHOLE_BYTES:
            self.whole = np.asarray(self.lazy)
        source = indexing.NumpyIndexingAdapter(self.whole) if self.whole is not None else self.lazy
        return np.asarray(indexing.apply_indexer(source, indexing.OuterIndexer(key)))


class _Rows(BackendArray):
    """Rows ``[start, stop)`` of the stored values: what xarray decodes one run from (its
    type chosen from them, its first and last values read for a time coordinate)."""

    def __init__(self, stored: _Stored, start: int, stop: int) -> None:
        self.stored = stored
        self.start = start
        self.shape = (stop - start, *stored.shape[1:])
        self.dtype = stored.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._read)

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        return self.stored.get((_shifted(key[0], self.start, self.shape[0]), *key[1:]))


def _shifted(k: Any, start: int, length: int) -> Any:
    """An axis-0 key of the rows as a key of the whole array."""
    if isinstance(k, slice):
        first, last, step = k.indices(length)
        return slice(first + start, last + start, step) if step > 0 else np.arange(first, last, step) + start
    return np.asarray(k) + start if not isinstance(k, int | np.integer) else int(k) + start


class PerFileArray(BackendArray):
    """The decoded values of an array whose files were encoded differently: a selection's
    stored values read at once, each run's rows decoded with its own attributes."""

    def __init__(
        self, name: str, stored: _Stored, runs: tuple[_Run, ...], dtype: np.dtype, dims: tuple[Hashable, ...],
        options: dict[str, Any],
    ) -> None:  # fmt: skip
        self.name = name
        self.stored = stored
        self.runs = runs
        self.shape = stored.shape
        self.dtype = dtype
        self.dims = dims
        self.options = options

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._read)

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        values = self.stored.get(key)
        k0 = key[0]
        if isinstance(k0, int | np.integer):  # one row: its axis dropped
            row = int(k0) % self.shape[0]
            run = next(r for r in self.runs if r.start <= row < r.stop)
            return self._decoded(values, run)
        rows = np.arange(*k0.indices(self.shape[0])) if isinstance(k0, slice) else np.asarray(k0) % self.shape[0]
        out = np.empty(values.shape, dtype=self.dtype)
        for run in self.runs:
            mine = (rows >= run.start) & (rows < run.stop)
            if mine.all():
                return self._decoded(values, run)
            if mine.any():
                out[mine] = self._decoded(values[mine], run)
        return out

    def _decoded(self, values: np.ndarray, run: _Run) -> np.ndarray:
        dims = tuple(f"axis_{i}" for i in range(values.ndim))
        decoded = decode_cf_variable(
            self.name, Variable(dims, values, dict(run.attrs)), concat_characters=False, stack_char_dim=False,
            **self.options,
        )  # fmt: skip
        return np.asarray(decoded.values, dtype=self.dtype)


__all__ = ["Decoding", "PerFileArray", "PerFileZarrStore", "decode_per_file", "stored_values_store"]
