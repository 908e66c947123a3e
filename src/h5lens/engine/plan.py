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

import asyncio
from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from h5lens.engine.codec import ArrayCodec
from h5lens.engine.decoded_cache import Decoded
from h5lens.engine.kernel import decode, decodes_here
from h5lens.engine.layouts import Layout, Region, Runs, Selected, Selection, runs_out
from h5lens.engine.offload import off_loop
from h5lens.engine.segments import SegmentedCodec
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

    def segmented_codec(self, path: str) -> SegmentedCodec | None: ...

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


def decoder(engine: ReadEngine, path: str, *, text: bool = True) -> Codec | SegmentedCodec | None:
    """How h5lens decodes the chunks of array ``path`` of ``engine``'s source; None when it does not
    (zarr's own codec pipeline reads that array), and for every array while
    ``h5lens.fast_reads(False)`` holds in this context. ``text=False``: numbers only. The
    numbers of an array on a rectilinear grid decode segment by segment (:class:`SegmentedCodec`)."""
    if not _decoding.get():
        return None
    found = engine.region_codec(path) if text else engine.array_codec(path)
    return found if found is not None else engine.segmented_codec(path)


@dataclass(frozen=True)
class ReadPlan:
    """The chunks of array ``path`` its ``layout`` names, decoded by ``codec`` into it.
    ``offset``: what to add to the layout's flat indices to find them in the array's chunk
    table (a segment of a rectilinear grid, :mod:`h5lens.engine.segments`, is laid out as a
    regular array of its own)."""

    path: str
    codec: Codec
    layout: Layout
    offset: int = 0

    @property
    def flats(self) -> np.ndarray:
        return self.layout.flats

    @property
    def stored_flats(self) -> np.ndarray:
        """The chunks' flat indices in the array's chunk table."""
        return self.layout.flats + self.offset if self.offset else self.layout.flats

    def stored_bytes(self, engine: ReadEngine) -> int:
        """The stored bytes the plan reads (from the chunk table, nothing fetched)."""
        table = engine.source.tables[self.path]
        return int(table.length.reshape(-1)[self.stored_flats].sum()) if self.flats.size else 0

    def reads_here(self, engine: ReadEngine) -> bool:
        """Whether its chunks are inline or local and few enough bytes to decode on the calling thread."""
        return decodes_here(self.stored_bytes(engine)) and engine.source.chunk_bytes.reads_here(self.path, self.stored_flats)

    def now(self, engine: ReadEngine) -> Any:
        """The plan run on the calling thread, if its chunks are inline or local and few
        enough bytes (:func:`~h5lens.engine.kernel.decodes_here`); None otherwise (run it
        with :meth:`run`)."""
        if not self.reads_here(engine):
            return None  # decided before the kept chunks are taken: run() takes them, once
        kept, missing = self._kept()
        payloads = engine.read_many_now(self.path, missing + self.offset if self.offset else missing)
        if payloads is None:
            return None
        payloads = self._local(payloads)
        payloads.update(kept)
        nbytes = self.stored_bytes(engine)
        return decode(self.codec, payloads, self.layout, nbytes, self._describer(engine))

    async def run(self, engine: ReadEngine) -> Any:
        """The plan run on the event loop: fetched at once, decoded with the other reads of
        the same turn, off the loop if they are long (:mod:`h5lens.engine.offload`)."""
        kept, missing = self._kept()
        stored = missing + self.offset if self.offset else missing
        payloads = self._local(await engine.read_many_async(self.path, stored)) if missing.size else {}
        payloads.update(kept)
        nbytes = self.stored_bytes(engine)
        return await off_loop(nbytes, decode, self.codec, payloads, self.layout, nbytes, self._describer(engine))

    def _local(self, payloads: dict[int, Any]) -> dict[int, Any]:
        """Payloads keyed by the layout's flat indices."""
        return {flat - self.offset: data for flat, data in payloads.items()} if self.offset else payloads

    def _describer(self, engine: ReadEngine) -> Any:
        describe = engine.describer(self.path)
        return (lambda flat: describe(flat + self.offset)) if self.offset else describe

    def _kept(self) -> tuple[dict[int, Decoded], np.ndarray]:
        """The chunks the store keeps decoded (``decoded_cache_bytes``) and the others."""
        cache = self.codec.cache
        if cache is None or not self.flats.size:
            return {}, self.flats
        kept = cache.take(self.path, self.flats.tolist())
        if not kept:
            return {}, self.flats
        return kept, np.asarray([f for f in self.flats.tolist() if f not in kept], dtype=np.int64)


def region_plan(
    engine: ReadEngine, path: str, bounds: Sequence[tuple[int, int]]
) -> ReadPlan | SegmentedPlan | np.ndarray | None:
    """The plan of the region ``[start, stop)`` per axis (within the shape) of array
    ``path``; its values at once if it holds none; None if h5lens does not decode it."""
    codec = decoder(engine, path)
    if codec is None:
        return None
    if any(stop <= start for start, stop in bounds):
        return np.empty(tuple(max(0, stop - start) for start, stop in bounds), dtype=codec.dtype)
    if isinstance(codec, SegmentedCodec):
        return _segmented_region(path, codec, bounds)
    return ReadPlan(path, codec, Region(codec, engine.source.tables[path].grid_shape, bounds))


def runs_plan(
    engine: ReadEngine, path: str, starts: np.ndarray, stops: np.ndarray, out: np.ndarray | None = None
) -> ReadPlan | SegmentedPlan | None:
    """The plan of runs ``[starts[i], stops[i])`` of 1-d array ``path``, one after the
    other (into ``out`` where :func:`~h5lens.engine.layouts.runs_out` takes it); None if
    h5lens does not decode its numbers."""
    codec = decoder(engine, path, text=False)
    if isinstance(codec, SegmentedCodec) and len(codec.shape) == 1:
        return _segmented_runs(path, codec, np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64), out)
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


# -- arrays on a rectilinear grid: one plan per segment, joined ------------------------------
class SegmentedPlan:
    """The read plans of the segments a read of an array on a rectilinear grid touches
    (:mod:`h5lens.engine.segments`), run together and joined into the read's result."""

    def __init__(self, parts: list[ReadPlan], join: Callable[[list[Any]], Any]) -> None:
        self.parts, self.join = parts, join

    def now(self, engine: ReadEngine) -> Any:
        """As :meth:`ReadPlan.now`: every part on the calling thread, or None."""
        if not all(part.reads_here(engine) for part in self.parts):
            return None
        if not decodes_here(sum(part.stored_bytes(engine) for part in self.parts)):
            return None
        found = [part.now(engine) for part in self.parts]
        return None if any(values is None for values in found) else self.join(found)

    async def run(self, engine: ReadEngine) -> Any:
        """As :meth:`ReadPlan.run`: the parts fetched and decoded together."""
        found = await asyncio.gather(*(part.run(engine) for part in self.parts))
        return self.join(list(found))


def _segmented_region(path: str, codec: SegmentedCodec, bounds: Sequence[tuple[int, int]]) -> SegmentedPlan:
    """The region ``bounds`` (non-empty) of an array on a rectilinear grid: each segment's
    rows of it read as a region of that segment, stacked along axis 0."""
    lo, hi = bounds[0]
    parts = []
    for number in codec.touched(lo, hi):
        segment = codec.segments[number]
        local = [(max(lo, segment.start) - segment.start, min(hi, segment.stop) - segment.start), *bounds[1:]]
        layout = Region(segment.codec, segment.grid, local)
        parts.append(ReadPlan(path, segment.codec, layout, codec.flat_offset(segment)))
    return SegmentedPlan(parts, lambda found: found[0] if len(found) == 1 else np.concatenate(found, axis=0))


def _segmented_runs(
    path: str, codec: SegmentedCodec, starts: np.ndarray, stops: np.ndarray, out: np.ndarray | None
) -> SegmentedPlan:
    """Runs ``[starts[i], stops[i])`` of a 1-d array on a rectilinear grid: each run cut where
    it crosses segments, each segment's pieces read as runs of it, and the pieces put back in
    the runs' order."""
    keep = stops > starts
    starts, stops = starts[keep], stops[keep]
    bounds = np.r_[codec.starts, codec.shape[0]]
    first = np.searchsorted(bounds, starts, side="right") - 1
    last = np.searchsorted(bounds, stops - 1, side="right") - 1
    counts = last - first + 1
    run = np.repeat(np.arange(len(starts)), counts)
    segment = first[run] + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    lo = np.maximum(starts[run], bounds[segment])
    hi = np.minimum(stops[run], bounds[segment + 1])
    take = hi - lo
    at = np.cumsum(take) - take  # where each piece goes in the result
    total = int(take.sum())
    numbers = np.unique(segment).tolist()
    mines = [segment == number for number in numbers]
    gather = False
    if len(numbers) == 1:
        result, views = out, [out]
    elif all(_one_stretch(at[mine], take[mine]) for mine in mines):
        # each segment's pieces one stretch of the result (a block of rows over many files):
        # each segment decodes straight into its stretch, nothing is gathered after
        result = runs_out(codec.segments[0].codec, starts, stops, out)
        result = np.empty(total, dtype=codec.dtype) if result is None else result
        firsts = [int(at[mine][0]) for mine in mines]
        views = [result[a : a + int(take[mine].sum())] for a, mine in zip(firsts, mines, strict=True)]
    else:
        result, views, gather = None, [None] * len(numbers), True
    parts, places = [], []
    for number, mine, view in zip(numbers, mines, views, strict=True):
        part = codec.segments[number]
        layout = Runs(part.codec, lo[mine] - part.start, hi[mine] - part.start, view)
        parts.append(ReadPlan(path, part.codec, layout, codec.flat_offset(part)))
        if gather:  # pieces interleaved with other segments' (rows in any order): gathered
            pieces = take[mine]
            places.append(np.arange(int(pieces.sum()), dtype=np.int64) + np.repeat(at[mine] - (np.cumsum(pieces) - pieces), pieces))

    def join(found: list[np.ndarray]) -> np.ndarray:
        if len(found) == 1:
            return found[0]
        if not gather:
            for values, view in zip(found, views, strict=True):
                if values is not view:  # the layout kept its own buffer
                    view[...] = values  # type: ignore[index]
            assert result is not None
            return result
        gathered = runs_out(codec.segments[0].codec, starts, stops, out)
        gathered = np.empty(total, dtype=codec.dtype) if gathered is None else gathered
        for values, where in zip(found, places, strict=True):
            gathered[where] = values
        return gathered

    if not parts:  # no run holds anything
        return SegmentedPlan([], lambda found: np.empty(0, dtype=codec.dtype))
    return SegmentedPlan(parts, join)


def _one_stretch(at: np.ndarray, take: np.ndarray) -> bool:
    """Whether pieces placed at ``at``, ``take`` values each, follow one another."""
    return bool(np.array_equal(at[1:], (at + take)[:-1]))


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
    "ReadPlan", "SegmentedPlan", "chunks_plan", "decoder", "decodes", "region_of", "region_plan", "reset_decoding", "runs_plan",
    "set_decoding", "whole",
]  # fmt: skip
