"""h5lens's zarr codec pipeline: a whole selection planned from the chunk table.

zarr reads every array through the codec pipeline named by its ``codec_pipeline.path``
setting, its public extension point for pipelines of other projects (zarrs-python's is
one). While :func:`h5lens.fast_reads` is on, that setting names this pipeline: for an
array of an h5lens :class:`~h5lens.store.ManifestStore` whose numbers h5lens decodes (the
filter table's codecs: the arrays HDF5 files hold), the chunks zarr lists for a selection
are read as one plan (:func:`h5lens.engine.plan.chunks_plan`): fetched at once (merged, in
parallel), decoded in bulk, written in place; so are the shards of a view in whole rows
(:func:`h5lens.whole_rows`), as the stored chunks they are made of. A selection whose parts
zarr places outside the output (annbatch's indexer over chunks that cut the columns) is
refused before anything is read, naming the array. Everything else (other stores, other codecs,
writes) is built and read by the pipeline that was configured before, exactly as zarr
builds it: arrays of other stores never see this class. The manifest keeps zarr's standard
codecs, so plain zarr without h5lens reads it too.

Nothing here is turned on by building, opening or unpickling a store: see
:mod:`h5lens.fast`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, cast

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

    from h5lens.adata.whole_rows import WholeRowsStore
    from h5lens.engine.layouts import Selection
    from h5lens.engine.plan import ReadPlan
    from h5lens.store import ManifestStore

PATH = "h5lens.pipeline.H5LensCodecPipeline"
DEFAULT = "zarr.core.codec_pipeline.BatchedCodecPipeline"  # zarr's own default


@dataclass
class _Fallback:
    path: str = DEFAULT  # the pipeline every other array gets: what was configured before


fallback = _Fallback()


def fallback_class() -> type[CodecPipeline]:
    """The pipeline class arrays of other stores get (and, inside, arrays h5lens does not
    decode): the one configured before h5lens's; zarr's default if that one is gone."""
    from zarr.registry import _pipeline_registry

    _pipeline_registry.lazy_load()
    found = _pipeline_registry.get(fallback.path) or _pipeline_registry.get(DEFAULT)
    assert found is not None
    return found


class H5LensCodecPipeline(CodecPipeline):
    """The pipeline zarr builds for each array while :func:`h5lens.fast_reads` is on.

    For arrays of other stores, both constructors hand zarr what the pipeline configured
    before builds (zarr then never sees this class). For an array of a ManifestStore, this
    wraps that pipeline: reads of arrays h5lens decodes go through a read plan, everything
    else to the wrapped pipeline."""

    def __init__(self, inner: CodecPipeline, store: ManifestStore | WholeRowsStore) -> None:
        self.inner = inner
        self.store = store

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_codecs(cls, codecs: Iterable[Codec]) -> Self:
        # Not this class: the one configured before, for arrays of any other store.
        return fallback_class().from_codecs(codecs)  # type: ignore[return-value]

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata: ArrayMetadata, store: Store) -> Self:
        from h5lens.adata.whole_rows import WholeRowsStore
        from h5lens.store import ManifestStore

        if not isinstance(store, ManifestStore | WholeRowsStore):
            # exactly what zarr does with the configured class (which may decline too: zarr
            # then builds it from_codecs, above)
            return fallback_class().from_array_metadata_and_store(array_metadata, store)  # type: ignore[return-value]
        from zarr.core.array import create_codec_pipeline
        from zarr.core.metadata import ArrayV3Metadata

        if not isinstance(array_metadata, ArrayV3Metadata):
            raise NotImplementedError("h5lens manifests are zarr v3")
        # what zarr builds for this array without a store: from_codecs below (the pipeline
        # configured before), as each zarr release builds it (3.4 also evolves it to the chunk)
        return cls(create_codec_pipeline(array_metadata), store)

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
        from h5lens.adata.whole_rows import WholeRowsStore
        from h5lens.engine.layouts import Selection

        batch = list(batch_info)
        target = out.as_numpy_array()
        if isinstance(self.store, WholeRowsStore):
            return await self._read_view(self.store, batch, out, drop_axes)
        outside = _placed_outside(batch, target.shape)
        if outside is not None:
            raise _refusal(self.store, outside, target.shape)
        selection = Selection([item[2] for item in batch], [item[3] for item in batch], drop_axes, [item[4] for item in batch])
        keys = [item[0].path for item in cast("list[Any]", batch)]  # zarr hands StorePaths: a key each
        plan = _keys_plan(self.store, keys, selection, target)
        if plan is None:
            return tuple(await self.inner.read(batch, out, drop_axes))
        present = await plan.run(self.store.engine)
        return tuple({"status": "present" if p else "missing"} for p in present)

    async def _read_view(
        self, view: WholeRowsStore, batch: list[Any], out: NDBuffer, drop_axes: tuple[int, ...]
    ) -> tuple[GetResult, ...]:
        """A view's shards read as the stored chunks they are made of, in one plan of the
        base store; through zarr's sharding codec (the wrapped pipeline) where h5lens declines."""
        from h5lens.adata.whole_rows import stored_parts

        parts = stored_parts(view, batch, drop_axes)
        plan = None if parts is None else _keys_plan(view.base, parts[0], parts[1], out.as_numpy_array())
        if parts is None or plan is None:
            return tuple(await self.inner.read(batch, out, drop_axes))
        found_parts: list[bool] = await plan.run(view.base.engine)
        present = [False] * len(batch)
        for items, found in zip(parts[2], found_parts, strict=True):
            for item in items:
                present[item] = present[item] or found
        return tuple({"status": "present" if p else "missing"} for p in present)


def _placed_outside(batch: list[Any], shape: tuple[int, ...]) -> tuple[Any, ...] | None:
    """The first item of zarr's chunk list whose part goes past the end of the output (numpy
    would write it short, or fail deep in the decoding), if any: what annbatch's
    ``MultiBasicIndexer`` hands over for an array whose chunks cut the columns."""
    for item in batch:
        where = item[3]
        for axis, part in enumerate(where if isinstance(where, tuple) else ()):
            if isinstance(part, slice) and axis < len(shape) and part.stop is not None and part.stop > shape[axis]:
                return tuple(item)
    return None


def _refusal(store: ManifestStore, item: tuple[Any, ...], shape: tuple[int, ...]) -> Exception:
    """The error for a chunk list placed outside its output, naming the array: annbatch's
    refusal where the array's chunks cut the columns."""
    from h5lens.adata.whole_rows import cuts_columns, refusal
    from h5lens.errors import InvalidOptionError
    from h5lens.manifest.documents import ArrayDocument

    key = item[0].path
    located = store.grammar.chunk(key)
    path = located[0] if located is not None else key
    array = ArrayDocument.of(store.manifest.nodes.get(path, {}))
    if array is not None and cuts_columns(array.shape, array.chunk_shape):
        return refusal(path, array.shape, array.chunk_shape)
    return InvalidOptionError(
        f"/{path}: zarr placed part of chunk {key!r} at {item[3]}, outside an output of shape {shape}; "
        "nothing was read (the selection's indexer is at fault)"
    )


def _keys_plan(store: ManifestStore, keys: list[str], selection: Selection, out: Any) -> ReadPlan | None:
    """The read plan of the chunk keys zarr lists for a selection: all chunks of one array
    whose numbers h5lens decodes; None for anything else."""
    from h5lens.engine.plan import chunks_plan

    located = store.grammar.chunk(keys[0]) if keys else None
    if located is None:
        return None
    path = located[0]
    flats = store.grammar.flat_indices(path, keys, store.manifest.chunks[path].grid_shape)
    return None if flats is None else chunks_plan(store.engine, path, flats, selection, out)


# zarr finds a pipeline named by codec_pipeline.path in its registry: registered here, when this
# module is imported (by fast_reads(), or by a user who sets codec_pipeline.path to PATH)
register_pipeline(H5LensCodecPipeline)

__all__ = ["DEFAULT", "PATH", "H5LensCodecPipeline", "fallback", "fallback_class"]
