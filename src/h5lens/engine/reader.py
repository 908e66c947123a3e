"""The read engine of one chunk source: regions, runs and many chunks of its arrays at once.

What h5lens's readers (the xarray engine, navigation, AnnData, lazy arrays), its codec
pipeline and its hooks ask of an array beside zarr's Store contract: each a read plan
(:mod:`h5lens.engine.plan`) run on the calling thread where that pays and on the event loop
otherwise. A failed read names the chunk key and the bytes the manifest gave it.
:class:`~h5lens.store.ManifestStore` *has* one (``store.engine``), built on first use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from h5lens.engine.codec import ArrayCodec, array_codec
from h5lens.engine.plan import ReadPlan, SegmentedPlan, region_plan, runs_plan
from h5lens.engine.segments import SegmentedCodec, segmented_codec
from h5lens.engine.source import ChunkSource, Payloads
from h5lens.engine.text import TextCodec, text_codec
from h5lens.errors import H5LensError


class ReadEngine:
    """Reads the arrays of ``source`` through read plans; how each array's chunks decode
    is decided once per array and kept."""

    def __init__(self, source: ChunkSource) -> None:
        self.source = source
        self._codecs: dict[str, ArrayCodec | None] = {}
        self._text_codecs: dict[str, TextCodec | None] = {}
        self._segmented: dict[str, SegmentedCodec | None] = {}

    # -- how an array decodes ----------------------------------------------------------
    def array_codec(self, path: str) -> ArrayCodec | None:
        """How array ``path``'s numbers decode, when h5lens decodes them itself (cached)."""
        if path not in self._codecs:
            doc = self.source.documents.get(path)
            codec = None if doc is None or path not in self.source.tables else array_codec(path, doc)
            kept = self.source.decoded_chunks
            self._codecs[path] = codec if codec is None or kept is None else dataclasses.replace(codec, cache=kept)
        return self._codecs[path]

    def region_codec(self, path: str) -> ArrayCodec | TextCodec | None:
        """How array ``path``'s chunks decode in a region read: its :meth:`array_codec`, or
        for a text array its :class:`~h5lens.engine.text.TextCodec` (cached)."""
        found = self.array_codec(path)
        if found is not None:
            return found
        if path not in self._text_codecs:
            doc = self.source.documents.get(path)
            self._text_codecs[path] = None if doc is None or path not in self.source.tables else text_codec(path, doc)
        return self._text_codecs[path]

    def segmented_codec(self, path: str) -> SegmentedCodec | None:
        """How the numbers of array ``path`` decode segment by segment, if it lies on a
        rectilinear grid (:mod:`h5lens.engine.segments`) (cached)."""
        if path not in self._segmented:
            doc = self.source.documents.get(path)
            found = None if doc is None or path not in self.source.tables else segmented_codec(path, doc)
            self._segmented[path] = found
        return self._segmented[path]

    # -- regions and runs: each one read plan; None where h5lens does not decode the array ----
    def read_region(self, path: str, bounds: Sequence[tuple[int, int]]) -> np.ndarray | None:
        """The values of array ``path`` in ``[start, stop)`` per axis (within its shape)
        (:func:`h5lens.engine.plan.region_plan`): on the calling thread when its chunks are
        inline or local and few bytes, else on the event loop."""
        return _now_or_loop(self, region_plan(self, path, bounds))

    async def read_region_async(self, path: str, bounds: Sequence[tuple[int, int]]) -> np.ndarray | None:
        """:meth:`read_region` on the event loop."""
        plan = region_plan(self, path, bounds)
        return plan if plan is None or isinstance(plan, np.ndarray) else await plan.run(self)

    def read_region_now(self, path: str, bounds: Sequence[tuple[int, int]]) -> np.ndarray | None:
        """:meth:`read_region` on the calling thread only: None where that does not apply
        (remote chunks, too many bytes, an array h5lens does not decode)."""
        plan = region_plan(self, path, bounds)
        return plan if plan is None or isinstance(plan, np.ndarray) else plan.now(self)

    def read_runs(self, path: str, starts: np.ndarray, stops: np.ndarray) -> np.ndarray | None:
        """The values of runs ``[starts[i], stops[i])`` of 1-d array ``path`` (within its
        length), one after the other (:func:`h5lens.engine.plan.runs_plan`)."""
        return _now_or_loop(self, runs_plan(self, path, starts, stops))

    async def read_runs_async(
        self, path: str, starts: np.ndarray, stops: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray | None:
        """:meth:`read_runs` on the event loop; written into ``out`` (1-d, of the array's
        dtype, as many values as the runs hold) where it fits, saving a copy."""
        plan = runs_plan(self, path, starts, stops, out)
        return None if plan is None else await plan.run(self)

    # -- stored bytes -------------------------------------------------------------------
    async def read_many_async(self, path: str, flats: np.ndarray) -> Payloads:
        """The stored bytes of the present chunks among ``flats`` of array ``path``; a failed
        read names the chunk key and the bytes the manifest gave it."""
        try:
            return await self.source.chunk_bytes.read_many(path, flats)
        except H5LensError as e:
            self.name_failed_chunk(path, e)
            raise

    def read_many_now(self, path: str, flats: np.ndarray) -> Payloads | None:
        """:meth:`read_many_async` on the calling thread; None where that needs the loop."""
        try:
            return self.source.chunk_bytes.read_many_now(path, flats)
        except H5LensError as e:
            self.name_failed_chunk(path, e)
            raise

    def describer(self, path: str) -> Callable[[int], str]:
        """Names a chunk of array ``path`` by its flat index, for messages."""

        def describe(flat: int) -> str:
            return self.source.describe_flat_chunk(path, flat)

        return describe

    def name_failed_chunk(self, path: str, error: H5LensError) -> None:
        """Add the chunk key and bytes a failed read was about (if it knows) to ``error``."""
        found = getattr(error, "chunk", None)
        if found is not None:
            flat, offset, length = found
            key = self.source.chunk_key_at(path, flat)
            error.add_note(f"while reading chunk {key!r} (/{path}, bytes {offset}-{offset + length})")


def _now_or_loop(engine: ReadEngine, plan: ReadPlan | SegmentedPlan | np.ndarray | None) -> Any:
    if plan is None or isinstance(plan, np.ndarray):
        return plan
    found = plan.now(engine)
    if found is not None:
        return found
    from zarr.core.sync import sync

    return sync(plan.run(engine))


__all__ = ["ReadEngine"]
