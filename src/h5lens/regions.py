"""Bulk reads of a manifest's arrays: regions, runs and many chunks at once.

What h5lens's codec pipeline (:mod:`h5lens.pipeline`), lazy sparse matrices
(:mod:`h5lens.read.lazy_sparse`) and whole-array reads (:mod:`h5lens.read.whole`) ask a
:class:`~h5lens.store.ManifestStore` for, beside zarr's Store contract: the chunks a
selection covers, planned from the chunk table, fetched together (:mod:`h5lens.fetch`)
and decoded in bulk (:mod:`h5lens.read.bulk`, :mod:`h5lens.read.text`). A failed read
names the chunk key and the bytes the manifest gave it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from h5lens.errors import H5LensError
from h5lens.manifest.zarr_keys import chunk_key
from h5lens.read.bulk import ArrayCodec, array_codec
from h5lens.read.text import TextCodec, text_codec

if TYPE_CHECKING:
    from h5lens.fetch.sources import SourceReads
    from h5lens.manifest.model import Manifest
    from h5lens.manifest.zarr_keys import KeyGrammar


class RegionReads:
    """The bulk reads of :class:`~h5lens.store.ManifestStore`, which provides the manifest,
    its key grammar, its source reads and its chunk descriptions (the stubs below)."""

    manifest: Manifest
    _codecs: dict[str, ArrayCodec | None]
    _text_codecs: dict[str, TextCodec | None]

    @property
    def grammar(self) -> KeyGrammar:
        raise NotImplementedError

    @property
    def reads(self) -> SourceReads:
        raise NotImplementedError

    def describe_flat_chunk(self, path: str, flat: int) -> str:
        raise NotImplementedError

    def _grid_index(self, path: str, flat: int) -> tuple[int, ...]:
        raise NotImplementedError

    def array_codec(self, path: str) -> ArrayCodec | None:
        """How array ``path``'s chunks decode, when h5lens decodes them itself (cached)."""
        if path not in self._codecs:
            doc = self.manifest.nodes.get(path)
            self._codecs[path] = None if doc is None or path not in self.manifest.chunks else array_codec(path, doc)
        return self._codecs[path]

    def region_codec(self, path: str) -> ArrayCodec | TextCodec | None:
        """How array ``path``'s chunks decode in a region read: its :meth:`array_codec`, or
        for a text array its :class:`~h5lens.read.text.TextCodec` (cached)."""
        found = self.array_codec(path)
        if found is not None:
            return found
        if path not in self._text_codecs:
            doc = self.manifest.nodes.get(path)
            self._text_codecs[path] = None if doc is None or path not in self.manifest.chunks else text_codec(path, doc)
        return self._text_codecs[path]

    def bulk_plan(self, keys: list[str]) -> tuple[ArrayCodec, np.ndarray] | None:
        """The codec of the one array ``keys`` are chunks of, and their flat indices in its
        grid; None if they are not all chunks of one array h5lens decodes itself."""
        located = self.grammar.chunk(keys[0])
        if located is None:
            return None
        path, _ = located
        codec = self.array_codec(path)
        if codec is None:
            return None
        flats = self.grammar.flat_indices(path, keys, self.manifest.chunks[path].grid_shape)
        return None if flats is None else (codec, flats)

    async def read_region_async(self, path: str, bounds: list[tuple[int, int]]) -> np.ndarray | None:
        """The values of array ``path`` in ``[start, stop)`` per axis (within its shape), read
        in bulk; None if h5lens does not decode this array itself (read it through zarr)."""
        from h5lens.read.bulk import assemble, off_loop

        plan = self._region_plan(path, bounds)
        if plan is None or isinstance(plan, np.ndarray):
            return plan
        codec, lo, flats = plan
        payloads = await self.read_many_async(path, flats)
        return await off_loop(payloads, assemble, codec, bounds, lo, flats, payloads, self._describer(path))

    def read_region_now(self, path: str, bounds: list[tuple[int, int]]) -> np.ndarray | None:
        """:meth:`read_region_async` on the calling thread, without zarr's event loop (a hop
        to it costs more than reading a small region): for a region whose chunks are
        inline or in local files, and few enough bytes to decode without a thread
        (:func:`h5lens.read.bulk.decodes_here`). None otherwise: read it the async way."""
        from h5lens.read.bulk import assemble, decodes_here

        plan = self._region_plan(path, bounds)
        if plan is None or isinstance(plan, np.ndarray):
            return plan
        codec, lo, flats = plan
        if not decodes_here(int(self.manifest.chunks[path].length.reshape(-1)[flats].sum())):
            return None
        try:
            payloads = self.reads.read_many_now(path, flats)
        except H5LensError as e:
            self._name_failed_chunk(path, e)
            raise
        if payloads is None:
            return None
        return assemble(codec, bounds, lo, flats, payloads, self._describer(path))

    def _region_plan(
        self, path: str, bounds: list[tuple[int, int]]
    ) -> tuple[ArrayCodec | TextCodec, np.ndarray, np.ndarray] | np.ndarray | None:
        """(codec, first chunk index per axis, flat indices of the chunks) of a region; its
        (empty) values if it holds none; None if h5lens does not decode the array."""
        from h5lens.read.bulk import region_chunks

        codec = self.region_codec(path)
        if codec is None:
            return None
        if any(stop <= start for start, stop in bounds):
            return np.empty(tuple(max(0, stop - start) for start, stop in bounds), dtype=codec.dtype)
        lo, flats = region_chunks(codec, self.manifest.chunks[path].grid_shape, bounds)
        return codec, lo, flats

    def _describer(self, path: str) -> Callable[[int], str]:
        def describe(flat: int) -> str:
            return self.describe_flat_chunk(path, flat)

        return describe

    def read_region(self, path: str, bounds: list[tuple[int, int]]) -> np.ndarray | None:
        """:meth:`read_region_async` from synchronous code."""
        from zarr.core.sync import sync

        return sync(self.read_region_async(path, bounds))

    async def read_runs_async(self, path: str, starts: np.ndarray, stops: np.ndarray) -> np.ndarray | None:
        """The values of runs ``[starts[i], stops[i])`` of 1-d array ``path`` (within its
        length), one after the other, every chunk they touch read at once; None if h5lens
        does not decode this array itself (read it through zarr)."""
        from h5lens.read.bulk import gather_runs, off_loop, run_chunks

        codec = self.array_codec(path)
        if codec is None or len(codec.shape) != 1:
            return None
        starts = np.asarray(starts, dtype=np.int64)
        stops = np.asarray(stops, dtype=np.int64)
        flats = run_chunks(codec.chunk_shape[0], starts, stops)
        payloads = await self.read_many_async(path, flats) if flats.size else {}
        return await off_loop(payloads, gather_runs, codec, starts, stops, flats, payloads, self._describer(path))

    def read_runs(self, path: str, starts: np.ndarray, stops: np.ndarray) -> np.ndarray | None:
        """:meth:`read_runs_async` from synchronous code."""
        from zarr.core.sync import sync

        return sync(self.read_runs_async(path, starts, stops))

    async def read_many_async(self, path: str, flats: np.ndarray) -> dict[int, bytes | memoryview]:
        """The stored bytes of the present chunks among ``flats`` of array ``path``; a failed
        read names the chunk key and the bytes the manifest gave it."""
        try:
            return await self.reads.read_many(path, flats)
        except H5LensError as e:
            self._name_failed_chunk(path, e)
            raise

    def _name_failed_chunk(self, path: str, error: H5LensError) -> None:
        """Add the chunk key and bytes a failed read was about (if it knows) to ``error``."""
        found = getattr(error, "chunk", None)
        if found is not None:
            flat, offset, length = found
            key = chunk_key(path, self._grid_index(path, flat), self.grammar.arrays[path][0])
            error.add_note(f"while reading chunk {key!r} (/{path}, bytes {offset}-{offset + length})")


__all__ = ["RegionReads"]
