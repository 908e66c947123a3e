"""h5lens's zarr codec pipeline: a whole selection planned from the chunk table.

Every zarr reader (xarray, ``anndata.read_zarr``, hdmf-zarr) reads through the codec
pipeline named by zarr's ``codec_pipeline.path`` setting. For an array of an h5lens
:class:`~h5lens.store.ManifestStore` whose codecs h5lens decodes itself (numbers through
the filter table's codecs: the arrays HDF5 files hold), this pipeline reads a selection in
one go (:mod:`h5lens.read.bulk`): the chunks' byte ranges from the manifest, fetched at
once (merged, in parallel), decoded in bulk and written in place. A region (slices of step
1 and integers, what xarray, anndata and hdmf-zarr ask for) does not even wait for zarr to
list its chunks one by one: see ``_install_region_reads``; and a small one of a local
file is read on the calling thread, without zarr's event loop: see
``_install_inline_reads``. Everything else (other
stores, other codecs, writes) goes to the pipeline that was configured before, unchanged:
the manifest keeps zarr's standard codecs, and plain zarr without h5lens reads it too.

Turning it on: an h5lens store turns it on when it is created (``fast_reads(False)``
opts out for the process; ``H5LENS_FAST_READS=0`` before the first store does too);
``with fast_reads(): ...`` turns it on for a block and restores what was there after.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self, cast, runtime_checkable

import numpy as np
from zarr.abc.codec import CodecPipeline
from zarr.registry import register_pipeline

if TYPE_CHECKING:
    from zarr.abc.codec import Codec, GetResult
    from zarr.abc.store import ByteGetter, ByteSetter, Store
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.dtype import ZDType
    from zarr.core.indexing import SelectorTuple
    from zarr.core.metadata import ArrayMetadata
    from zarr.core.metadata.v3 import RectilinearChunkGridMetadata, RegularChunkGridMetadata

PATH = "h5lens.pipeline.H5LensCodecPipeline"
ENV = "H5LENS_FAST_READS"
_DEFAULT_FALLBACK = "zarr.core.codec_pipeline.BatchedCodecPipeline"


@dataclass
class _Setting:
    fallback: str = _DEFAULT_FALLBACK  # the pipeline other arrays use: what was configured before
    declined: bool = False  # fast_reads(False): stores do not turn it on


_setting = _Setting()


@runtime_checkable
class BulkReadable(Protocol):
    """What this pipeline asks of a store (:class:`h5lens.store.ManifestStore` answers it):
    named here, so that the pipeline needs no import of the store that turns it on."""

    def bulk_plan(self, keys: list[str]) -> tuple[Any, np.ndarray] | None: ...

    async def read_many_async(self, path: str, flats: np.ndarray) -> dict[int, bytes | memoryview]: ...

    def describe_flat_chunk(self, path: str, flat: int) -> str: ...


@runtime_checkable
class RegionReadable(BulkReadable, Protocol):
    """Whole regions at once (:meth:`h5lens.store.ManifestStore.read_region_async`)."""

    def array_codec(self, path: str) -> Any: ...

    async def read_region_async(self, path: str, bounds: list[tuple[int, int]]) -> np.ndarray | None: ...

    def read_region_now(self, path: str, bounds: list[tuple[int, int]]) -> np.ndarray | None: ...

    def region_codec(self, path: str) -> Any: ...


def _configured() -> str:
    from zarr.core.config import config

    return str(config.get("codec_pipeline.path"))


def _fallback_class() -> type[CodecPipeline]:
    from zarr.registry import _pipeline_registry

    _pipeline_registry.lazy_load()
    found = _pipeline_registry.get(_setting.fallback)
    if found is None:  # a pipeline that was configured and is gone: zarr's own
        found = _pipeline_registry.get(_DEFAULT_FALLBACK)
    assert found is not None
    return found


def _switch_on() -> None:
    from zarr.core.config import config

    _install_region_reads()
    _install_inline_reads()
    current = _configured()
    if current != PATH:
        _setting.fallback = current
        config.set({"codec_pipeline.path": PATH})


def _switch_off() -> None:
    from zarr.core.config import config

    if _configured() == PATH:
        config.set({"codec_pipeline.path": _setting.fallback})


def enable_for_stores() -> None:
    """Called when an h5lens store is created: on, unless declined."""
    if _setting.declined or os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    _switch_on()


class fast_reads:
    """h5lens's pipeline for h5lens stores, in this process.

    ``fast_reads()`` turns it on (a store does so when it is created), ``fast_reads(False)``
    turns it off and keeps stores from turning it on again; as a context manager either
    holds for the block, and what was there before comes back after it."""

    def __init__(self, enabled: bool = True) -> None:
        self._before = (_configured(), _setting.declined, _setting.fallback)
        _setting.declined = not enabled
        if enabled:
            _switch_on()
        else:
            _switch_off()

    def __enter__(self) -> fast_reads:
        return self

    def __exit__(self, *exc: object) -> None:
        from zarr.core.config import config

        path, _setting.declined, _setting.fallback = self._before
        config.set({"codec_pipeline.path": path})


def enabled() -> bool:
    """Whether zarr arrays of h5lens stores read through h5lens's pipeline now."""
    return _configured() == PATH


@contextmanager
def _nothing() -> Iterator[None]:
    yield


class H5LensCodecPipeline(CodecPipeline):
    """The pipeline zarr builds for each array while :func:`fast_reads` is on.

    For arrays of other stores, :meth:`from_codecs` builds the pipeline configured before
    (zarr then never sees this class). For an array of a ManifestStore, this wraps that
    pipeline: reads of arrays h5lens decodes itself go through :mod:`h5lens.read.bulk`,
    everything else to the wrapped pipeline."""

    def __init__(self, inner: CodecPipeline, store: BulkReadable) -> None:
        self.inner = inner
        self.store = store

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_codecs(cls, codecs: Iterable[Codec]) -> Self:
        # Not this class: the one configured before, for arrays of any other store.
        return _fallback_class().from_codecs(codecs)  # type: ignore[return-value]

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata: ArrayMetadata, store: Store) -> Self:
        if not isinstance(store, BulkReadable):
            raise NotImplementedError("h5lens's pipeline reads h5lens stores only")
        from zarr.core.array_spec import ArrayConfig, ArraySpec
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.metadata import ArrayV3Metadata
        from zarr.core.metadata.v3 import RegularChunkGridMetadata

        if not isinstance(array_metadata, ArrayV3Metadata):
            raise NotImplementedError("h5lens manifests are zarr v3")
        # what zarr's create_codec_pipeline does with the configured class
        inner = _fallback_class().from_codecs(array_metadata.codecs)
        grid = array_metadata.chunk_grid
        chunk_shape = grid.chunk_shape if isinstance(grid, RegularChunkGridMetadata) else (1,) * len(array_metadata.shape)
        spec = ArraySpec(
            shape=chunk_shape,
            dtype=array_metadata.data_type,
            fill_value=array_metadata.fill_value,
            config=ArrayConfig.from_dict({}),
            prototype=default_buffer_prototype(),
        )
        return cls(inner.evolve_from_array_spec(spec), store)

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        return type(self)(self.inner.evolve_from_array_spec(array_spec), self.store)

    # -- what zarr asks of every pipeline: the wrapped one answers -------------------------
    @property
    def supports_partial_decode(self) -> bool:
        return self.inner.supports_partial_decode

    @property
    def supports_partial_encode(self) -> bool:
        return self.inner.supports_partial_encode

    def validate(
        self,
        *,
        shape: tuple[int, ...],
        dtype: ZDType[Any, Any],
        chunk_grid: RegularChunkGridMetadata | RectilinearChunkGridMetadata,
    ) -> None:
        self.inner.validate(shape=shape, dtype=dtype, chunk_grid=chunk_grid)

    def compute_encoded_size(self, byte_length: int, array_spec: ArraySpec) -> int:
        return self.inner.compute_encoded_size(byte_length, array_spec)

    def __iter__(self) -> Iterator[Codec]:
        return iter(self.inner)  # type: ignore[call-overload]  # every pipeline iterates its codecs

    async def decode(self, chunk_bytes_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]) -> Iterable[NDBuffer | None]:
        return await self.inner.decode(chunk_bytes_and_specs)

    async def encode(self, chunk_arrays_and_specs: Iterable[tuple[NDBuffer | None, ArraySpec]]) -> Iterable[Buffer | None]:
        return await self.inner.encode(chunk_arrays_and_specs)

    async def write(
        self,
        batch_info: Iterable[tuple[ByteSetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        value: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        await self.inner.write(batch_info, value, drop_axes)

    # -- reads ----------------------------------------------------------------------
    async def read(
        self,
        batch_info: Iterable[tuple[ByteGetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        out: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> tuple[GetResult, ...]:
        batch = list(batch_info)
        planned = self._plan(batch)
        if planned is None:
            return tuple(await self.inner.read(batch, out, drop_axes))
        codec, flats = planned
        from h5lens.read.bulk import Selection, off_loop, scatter

        store = self.store
        payloads = await store.read_many_async(codec.path, flats)
        target = out.as_numpy_array()
        selection = Selection(
            [item[2] for item in batch], [item[3] for item in batch], drop_axes, [item[4] for item in batch]
        )

        def describe(flat: int) -> str:
            return store.describe_flat_chunk(codec.path, flat)

        present = await off_loop(payloads, scatter, codec, flats, payloads, selection, target, describe)
        return tuple({"status": "present" if p else "missing"} for p in present)

    async def read_region(
        self, path: str, metadata: Any, config: Any, chunk_grid: Any, indexer: Any, prototype: Any, out: Any
    ) -> Any:
        """What zarr's ``_get_selection`` returns, for a region of an array h5lens decodes
        itself (read at once, no per-chunk list); None for anything else (zarr reads it)."""
        bounds = self.region_of(path, metadata, config, chunk_grid, indexer, prototype)
        if bounds is None:
            return None
        values = await cast("RegionReadable", self.store).read_region_async(path, bounds)
        return None if values is None else _as_selected(values, metadata, indexer, out)

    def region_of(
        self, path: str, metadata: Any, config: Any, chunk_grid: Any, indexer: Any, prototype: Any
    ) -> list[tuple[int, int]] | None:
        """``[start, stop)`` per axis of the region a selection (a zarr indexer) reads, if
        h5lens reads it at once: slices of step 1 and integers, C order, numpy output, an
        array h5lens decodes itself on its regular grid; None for anything else."""
        from zarr.core.buffer import cpu

        if not isinstance(self.store, RegionReadable) or prototype.nd_buffer is not cpu.NDBuffer:
            return None
        if config.order != "C" or config.read_missing_chunks is False or not chunk_grid.is_regular:
            return None
        codec = self.store.region_codec(path)
        if codec is None or codec.chunk_shape != tuple(chunk_grid.chunk_shape) or codec.shape != tuple(metadata.shape):
            return None
        bounds = _region_bounds(indexer, codec.shape)
        return bounds or None

    def _plan(self, batch: list[Any]) -> tuple[Any, np.ndarray] | None:
        """The array's codec and the flat indices of the chunks, when h5lens decodes them."""
        if not batch:
            return None
        store = self.store
        keys = [item[0].path for item in batch]
        return store.bulk_plan(keys)


register_pipeline(H5LensCodecPipeline)


def _as_selected(values: np.ndarray, metadata: Any, indexer: Any, out: Any) -> Any:
    """A region's values as zarr's ``_get_selection`` returns them for ``indexer``: in
    ``out`` if given, else an array of the array's dtype (a scalar for a 0-d selection)."""
    from zarr.core.buffer import cpu
    from zarr.core.indexing import BasicIndexer

    values = values.reshape(indexer.shape)
    if out is not None:
        if out.shape != indexer.shape:
            return None  # zarr's own message for it
        out.as_numpy_array()[...] = values
        result = out
    else:
        dtype = metadata.dtype.to_native_dtype()
        if values.dtype != dtype or not values.flags.c_contiguous or not values.flags.writeable:
            values = np.array(values, dtype=dtype, order="C")  # a copy that keeps 0-d as 0-d
        result = cpu.NDBuffer.from_numpy_array(values)
    if isinstance(indexer, BasicIndexer) and indexer.shape == ():
        return result.as_scalar()
    return result.as_ndarray_like()


# -- whole regions, before zarr lists every chunk ----------------------------------------
# zarr hands a pipeline one (key, spec, chunk selection, out selection) tuple per chunk,
# built in Python: 20-30 µs a chunk, more than a 400 B chunk's whole read costs. For a
# region (slices of step 1 and integers) of an array of an h5lens store that h5lens decodes
# itself, that list is not needed: the region's chunks come from the chunk table at once
# (ManifestStore.read_region_async). zarr has no hook before the list, so the module
# function every zarr read goes through (``zarr.core.array._get_selection``, private, zarr
# pinned to 3.4.x) is wrapped; a zarr whose function does not take the arguments this was
# written for is left alone, and its reads go through :meth:`H5LensCodecPipeline.read`.
_SELECTION_PARAMETERS = (
    "store_path", "metadata", "codec_pipeline", "config", "chunk_grid", "indexer", "prototype", "out", "fields",
)


def _install_region_reads() -> bool:
    """Wrap zarr's ``_get_selection`` (once); whether reads of regions now come here."""
    import inspect

    import zarr.core.array as zarr_array

    original = zarr_array._get_selection
    if getattr(original, "_h5lens_regions", False):
        return True
    if tuple(inspect.signature(original).parameters) != _SELECTION_PARAMETERS:
        return False

    @functools.wraps(original)
    async def _get_selection(
        store_path: Any,
        metadata: Any,
        codec_pipeline: Any,
        config: Any,
        chunk_grid: Any,
        indexer: Any,
        *,
        prototype: Any,
        out: Any = None,
        fields: Any = None,
    ) -> Any:
        if isinstance(codec_pipeline, H5LensCodecPipeline) and not fields:  # zarr passes [] for none
            values = await codec_pipeline.read_region(store_path.path, metadata, config, chunk_grid, indexer, prototype, out)
            if values is not None:
                return values
        return await original(
            store_path, metadata, codec_pipeline, config, chunk_grid, indexer, prototype=prototype, out=out, fields=fields
        )

    _get_selection._h5lens_regions = True  # type: ignore[attr-defined]
    zarr_array._get_selection = _get_selection
    return True


def _region_bounds(indexer: Any, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """``[start, stop)`` per axis of a selection made of slices of step 1 and integers, in
    a zarr Basic or Orthogonal indexer; None for any other selection."""
    from zarr.core.indexing import BasicIndexer, IntDimIndexer, OrthogonalIndexer, SliceDimIndexer

    if type(indexer) not in (BasicIndexer, OrthogonalIndexer) or len(indexer.dim_indexers) != len(shape):
        return None
    bounds = []
    for dim in indexer.dim_indexers:
        if type(dim) is SliceDimIndexer and dim.step == 1:
            bounds.append((dim.start, max(dim.start, dim.stop)))
        elif type(dim) is IntDimIndexer:
            bounds.append((dim.dim_sel, dim.dim_sel + 1))
        else:
            return None
    return bounds


# -- small regions, on the calling thread -------------------------------------------------
# zarr's synchronous API runs every read on its event-loop thread and waits for it: a hop
# that costs 0.1-0.5 ms, more than reading and decoding a small region of a local file
# (libhdf5 reads one in ~10 µs). An AnnData's obs columns, xarray's coordinates and an NWB
# file's small datasets are dozens of such reads. So ``zarr.Array``'s two synchronous
# region methods (``get_basic_selection``, ``get_orthogonal_selection``: what ``[...]``
# and ``.oindex`` call) are wrapped: a region of an array h5lens decodes itself, whose
# chunks are inline or in local files and few enough bytes to decode without a thread
# (ManifestStore.read_region_now), is read right here; everything else, and every read of
# a zarr whose methods do not take the arguments this was written for, goes to zarr's.
def _install_inline_reads() -> bool:
    """Wrap ``zarr.Array``'s synchronous region methods (once); whether they now read
    small local regions on the calling thread."""
    import inspect

    import zarr
    from zarr.core.indexing import BasicIndexer, OrthogonalIndexer

    installed = True
    for name, indexer_class in (("get_basic_selection", BasicIndexer), ("get_orthogonal_selection", OrthogonalIndexer)):
        original = getattr(zarr.Array, name)
        if getattr(original, "_h5lens_inline", False):
            continue
        parameters = inspect.signature(original).parameters
        positional = [n for n, p in parameters.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        keywords = {n for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
        if positional != ["self", "selection"] or keywords != {"out", "prototype", "fields"} or len(parameters) != 5:
            installed = False
            continue
        setattr(zarr.Array, name, _reading_here(original, indexer_class))
    return installed


def _reading_here(original: Any, indexer_class: type) -> Any:
    @functools.wraps(original)
    def method(self: Any, selection: Any = Ellipsis, *, out: Any = None, prototype: Any = None, fields: Any = None) -> Any:
        if out is None and prototype is None and not fields and _integers_and_slices(selection):
            values = _read_here(self, indexer_class, selection)
            if values is not None:
                return values
        return original(self, selection, out=out, prototype=prototype, fields=fields)

    method._h5lens_inline = True  # type: ignore[attr-defined]
    return method


def _integers_and_slices(selection: Any) -> bool:
    """Whether a selection is made of integers, slices and Ellipsis only (checked before
    zarr builds an indexer for it, so that other selections cost nothing more)."""
    parts = selection if isinstance(selection, tuple) else (selection,)
    return all(
        part is Ellipsis or isinstance(part, slice) or (isinstance(part, int | np.integer) and not isinstance(part, bool))
        for part in parts
    )


def _read_here(array: Any, indexer_class: type, selection: Any) -> Any:
    """The selection's values read on this thread, or None (zarr's method reads it)."""
    from zarr.core.buffer import default_buffer_prototype

    async_array = array.async_array
    pipeline = async_array.codec_pipeline
    if not isinstance(pipeline, H5LensCodecPipeline):
        return None
    chunk_grid = async_array._chunk_grid
    indexer = indexer_class(selection, array.shape, chunk_grid)  # as zarr's method builds it
    path = async_array.store_path.path
    metadata = async_array.metadata
    bounds = pipeline.region_of(path, metadata, async_array.config, chunk_grid, indexer, default_buffer_prototype())
    if bounds is None:
        return None
    values = cast("RegionReadable", pipeline.store).read_region_now(path, bounds)  # region_of checked it
    return None if values is None else _as_selected(values, metadata, indexer, None)


__all__ = ["ENV", "PATH", "H5LensCodecPipeline", "enable_for_stores", "enabled", "fast_reads"]
