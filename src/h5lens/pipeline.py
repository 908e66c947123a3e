"""h5lens's zarr codec pipeline: a whole selection planned from the chunk table.

Every zarr reader (xarray, ``anndata.read_zarr``, hdmf-zarr) reads through the codec
pipeline named by zarr's ``codec_pipeline.path`` setting. For an array of an h5lens
:class:`~h5lens.store.ManifestStore` whose codecs h5lens decodes itself (numbers through
the filter table's codecs: the arrays HDF5 files hold), this pipeline reads a selection in
one go (:mod:`h5lens.read.bulk`): the chunks' byte ranges from the manifest, fetched at
once (merged, in parallel), decoded in bulk and written in place. Everything else (other
stores, other codecs, writes) goes to the pipeline that was configured before, unchanged:
the manifest keeps zarr's standard codecs, and plain zarr without h5lens reads it too.

Turning it on: an h5lens store turns it on when it is created (``fast_reads(False)``
opts out for the process; ``H5LENS_FAST_READS=0`` before the first store does too);
``with fast_reads(): ...`` turns it on for a block and restores what was there after.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

import numpy as np
from zarr.abc.codec import CodecPipeline
from zarr.registry import register_pipeline

if TYPE_CHECKING:
    from zarr.abc.codec import Codec, GetResult
    from zarr.abc.store import ByteGetter, ByteSetter, Store
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.metadata.v3 import RectilinearChunkGridMetadata, RegularChunkGridMetadata
    from zarr.core.indexing import SelectorTuple
    from zarr.core.metadata import ArrayMetadata
    from zarr.core.dtype import ZDType

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


class fast_reads:  # noqa: N801 - used as a function and as a context manager
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
        from h5lens.read.bulk import Selection, scatter

        store = self.store
        payloads = await store.read_many_async(codec.path, flats)
        target = out.as_numpy_array()
        selection = Selection(
            [item[2] for item in batch], [item[3] for item in batch], drop_axes, [item[4] for item in batch]
        )

        def describe(flat: int) -> str:
            return store.describe_flat_chunk(codec.path, flat)

        present = await asyncio.to_thread(scatter, codec, flats, payloads, selection, target, describe)
        return tuple({"status": "present" if p else "missing"} for p in present)

    def _plan(self, batch: list[Any]) -> tuple[Any, np.ndarray] | None:
        """The array's codec and the flat indices of the chunks, when h5lens decodes them."""
        if not batch:
            return None
        store = self.store
        keys = [item[0].path for item in batch]
        return store.bulk_plan(keys)


register_pipeline(H5LensCodecPipeline)

__all__ = ["ENV", "PATH", "H5LensCodecPipeline", "enable_for_stores", "enabled", "fast_reads"]
