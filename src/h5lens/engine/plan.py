"""The one read plan: a selection of one array → its chunks → their bytes → decoded → laid out.

Every route h5lens takes to read an array's values goes through a :class:`ReadPlan`:
regions (``store.read_region``: the xarray engine, navigation, ``read_anndata``'s whole
arrays, text), runs of a 1-d array (lazy sparse rows), and the chunk list zarr hands
h5lens's codec pipeline (:mod:`h5lens.pipeline`). A plan is a value: the array's path, its
codec (:func:`decoder`, the one place that decides whether h5lens decodes an array) and a
layout (:mod:`h5lens.engine.layouts`: a region, runs, or zarr's per-chunk selections), which
names the chunks. Running it asks for their stored bytes at once (the chunk source's
``read_many``: inline bytes from the manifest, ``pread`` or a map of local files, merged and
parallel requests to object storage) and hands them to the one decode kernel
(:func:`h5lens.engine.kernel.decode`).

It runs two ways, the same steps either way: :meth:`ReadPlan.now` on the calling thread,
for chunks that are inline or in local files and few enough bytes to decode without a
thread (no hop to an event loop, which costs more than such a read), and
:meth:`ReadPlan.run` on the event loop (decoding moved to threads when it is long).

:func:`region_of` is the one converter from a selection to a region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from h5lens.engine.codec import ArrayCodec
from h5lens.engine.decoded_cache import Decoded
from h5lens.engine.kernel import decode, decodes_here
from h5lens.engine.layouts import Layout, Region, Runs, Selected, Selection
from h5lens.engine.offload import off_loop
from h5lens.engine.source import ChunkSource, Payloads
from h5lens.engine.text import TextCodec

Codec = ArrayCodec | TextCodec
Bounds = list[tuple[int, int]]


class ReadEngine(Protocol):
    """What a plan asks of the engine that runs it (:class:`h5lens.engine.reader.ReadEngine`):
    stated here, so that plans depend on no engine module."""

    @property
    def source(self) -> ChunkSource: ...

    def array_codec(self, path: str) -> ArrayCodec | None: ...

    def region_codec(self, path: str) -> Codec | None: ...

    def read_many_now(self, path: str, flats: np.ndarray) -> Payloads | None: ...

    async def read_many_async(self, path: str, flats: np.ndarray) -> Payloads: ...

    def describer(self, path: str) -> Callable[[int], str]: ...


# Whether h5lens decodes chunks itself: ``h5lens.fast_reads(False)`` turns it off for its
# own context (the thread, and the tasks and event-loop reads it starts: zarr's sync hands
# its coroutines the caller's context), not for every thread of the process.
_decoding: ContextVar[bool] = ContextVar("h5lens_decoding", default=True)


def decodes() -> bool:
    """Whether h5lens decodes chunks itself in this context."""
    return _decoding.get()


def set_decoding(on: bool) -> Token[bool]:
    """Turn h5lens's own decoding on or off in this context; the token puts it back."""
    return _decoding.set(on)


def reset_decoding(token: Token[bool]) -> None:
    _decoding.reset(token)


def decoder(engine: ReadEngine, path: str, *, text: bool = True) -> Codec | None:
    """How h5lens decodes the chunks of array ``path`` of ``engine``'s source; None when it does not
    (zarr's own codec pipeline reads that array), and for every array while
    ``h5lens.fast_reads(False)`` holds in this context. ``text=False``: numbers only."""
    if not _decoding.get():
        return None
    return engine.region_codec(path) if text else engine.array_codec(path)


@dataclass(frozen=True)
class ReadPlan:
    """The chunks of array ``path`` its ``layout`` names, decoded by ``codec`` into it."""

    path: str
    codec: Codec
    layout: Layout

    @property
    def flats(self) -> np.ndarray:
        return self.layout.flats

    def stored_bytes(self, engine: ReadEngine) -> int:
        """The stored bytes the plan reads (from the chunk table, nothing fetched)."""
        table = engine.source.tables[self.path]
        return int(table.length.reshape(-1)[self.flats].sum()) if self.flats.size else 0

    def now(self, engine: ReadEngine) -> Any:
        """The plan run on the calling thread, if its chunks are inline or local and few
        enough bytes (:func:`~h5lens.engine.kernel.decodes_here`); None otherwise (run it
        with :meth:`run`)."""
        nbytes = self.stored_bytes(engine)
        if not decodes_here(nbytes) or not engine.source.chunk_bytes.reads_here(self.path, self.flats):
            return None  # decided before the kept chunks are taken: run() takes them, once
        kept, missing = self._kept()
        payloads = engine.read_many_now(self.path, missing)
        if payloads is None:
            return None
        payloads.update(kept)
        return decode(self.codec, payloads, self.layout, nbytes, engine.describer(self.path))

    async def run(self, engine: ReadEngine) -> Any:
        """The plan run on the event loop: fetched at once, decoded with the other reads of
        the same turn, off the loop if they are long (:mod:`h5lens.engine.offload`)."""
        kept, missing = self._kept()
        payloads = await engine.read_many_async(self.path, missing) if missing.size else {}
        payloads.update(kept)
        nbytes = self.stored_bytes(engine)
        return await off_loop(nbytes, decode, self.codec, payloads, self.layout, nbytes, engine.describer(self.path))

    def _kept(self) -> tuple[dict[int, Decoded], np.ndarray]:
        """The chunks the store keeps decoded (``decoded_cache_bytes``) and the others."""
        cache = self.codec.cache
        if cache is None or not self.flats.size:
            return {}, self.flats
        kept = cache.take(self.path, self.flats.tolist())
        if not kept:
            return {}, self.flats
        return kept, np.asarray([f for f in self.flats.tolist() if f not in kept], dtype=np.int64)


def region_plan(engine: ReadEngine, path: str, bounds: Sequence[tuple[int, int]]) -> ReadPlan | np.ndarray | None:
    """The plan of the region ``[start, stop)`` per axis (within the shape) of array
    ``path``; its values at once if it holds none; None if h5lens does not decode it."""
    codec = decoder(engine, path)
    if codec is None:
        return None
    if any(stop <= start for start, stop in bounds):
        return np.empty(tuple(max(0, stop - start) for start, stop in bounds), dtype=codec.dtype)
    return ReadPlan(path, codec, Region(codec, engine.source.tables[path].grid_shape, bounds))


def runs_plan(
    engine: ReadEngine, path: str, starts: np.ndarray, stops: np.ndarray, out: np.ndarray | None = None
) -> ReadPlan | None:
    """The plan of runs ``[starts[i], stops[i])`` of 1-d array ``path``, one after the
    other (into ``out`` where :func:`~h5lens.engine.layouts.runs_out` takes it); None if
    h5lens does not decode its numbers."""
    codec = decoder(engine, path, text=False)
    if not isinstance(codec, ArrayCodec) or len(codec.shape) != 1:
        return None
    layout = Runs(codec, np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64), out)
    return ReadPlan(path, codec, layout)


def chunks_plan(engine: ReadEngine, path: str, flats: np.ndarray, selection: Selection, out: np.ndarray) -> ReadPlan | None:
    """The plan of the chunks ``flats`` of array ``path`` that zarr lists for a selection (its
    pipeline's ``read``): each chunk's part written into ``out`` (the result says, per
    chunk, whether it was present); None unless h5lens decodes the array's numbers."""
    codec = decoder(engine, path, text=False)
    if not isinstance(codec, ArrayCodec):
        return None
    return ReadPlan(path, codec, Selected(codec, flats, selection, out))


# -- selections -> regions -----------------------------------------------------------------
def region_of(
    key: Any, shape: tuple[int, ...], chunks: tuple[int, ...] | None = None
) -> tuple[Bounds, tuple[Any, ...]] | None:
    """A basic selection (integers, slices of positive step, one Ellipsis) as the region it
    covers, ``[start, stop)`` per axis, and what to take of that region's values to give
    the selection's result (as numpy gives it: an integer drops its axis). None for any
    other selection, an integer out of range (whoever reads it says what it says), or, given
    the ``chunks`` shape, a step longer than a chunk (the region would read chunks the
    selection skips)."""
    parts = key if isinstance(key, tuple) else (key,)
    ellipses = [i for i, part in enumerate(parts) if part is Ellipsis]
    if len(ellipses) > 1:
        return None
    if ellipses:
        at, fill = ellipses[0], len(shape) - (len(parts) - 1)
        if fill < 0:
            return None
        parts = parts[:at] + (slice(None),) * fill + parts[at + 1 :]
    if len(parts) > len(shape):
        return None
    parts = parts + (slice(None),) * (len(shape) - len(parts))
    bounds: Bounds = []
    post: list[Any] = []
    for axis, (item, n) in enumerate(zip(parts, shape, strict=True)):
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            i = int(item) + (n if item < 0 else 0)
            if not 0 <= i < n:
                return None
            bounds.append((i, i + 1))
            post.append(0)
        elif isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step < 1 or (chunks is not None and step > 1 and step > chunks[axis]):
                return None
            count = len(range(start, stop, step))
            if count == 0:
                bounds.append((0, 0))
                post.append(slice(None))
                continue
            bounds.append((start, start + (count - 1) * step + 1))
            post.append(slice(None, None, step) if step != 1 else slice(None))
        else:
            return None
    return bounds, tuple(post)


def whole(shape: tuple[int, ...]) -> Bounds:
    """The region of a whole array."""
    return [(0, n) for n in shape]


__all__ = [
    "ReadPlan", "chunks_plan", "decoder", "decodes", "region_of", "region_plan", "reset_decoding", "runs_plan",
    "set_decoding", "whole",
]  # fmt: skip
