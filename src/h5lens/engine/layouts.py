"""Where a read plan's decoded values go: a region, runs of a 1-d array, or zarr's selection
of each chunk. Each layout lists the chunks it needs (``chunks``, flat indices, each once)
and places their values with one method, :meth:`Layout.place`, called by the decode kernel
(:mod:`h5lens.engine.kernel`) with every chunk at once or, where chunks stream, with one at a
time from any thread (each writes only its own part of the output). Absent chunks arrive
as the fill value: a layout never asks which chunks are stored.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from h5lens.engine.codec import ArrayCodec
from h5lens.engine.text import TextCodec

Codec = ArrayCodec | TextCodec
# Runs of at least this many values on average are placed piece by piece as chunks stream
_LONG_RUN = 64


class Layout(Protocol):
    flats: np.ndarray  # the chunks the layout needs (flat indices, each once)
    chunks: list[int]  # the same, as the order place() counts in

    @property
    def needs(self) -> dict[int, int] | None:
        """Values of each chunk it places, where not all (then chunks stream)."""

    def place(self, first: int, values: np.ndarray) -> None:
        """Place the values ``(n, *chunk_shape)`` of chunks ``chunks[first : first + n]``."""

    def target(self, row: int) -> np.ndarray | None:
        """Where the whole of chunk ``chunks[row]`` goes, if that is one C-contiguous part of
        the output: a streamed chunk is then decoded (or unshuffled) there, not placed."""

    def result(self, present: Container[int]) -> Any:
        """What the read gives, once every chunk is placed (``present``: the stored ones)."""


class Region:
    """The region ``[start, stop)`` per axis (non-empty, within the shape) of an array; its
    values are the result."""

    needs = None

    def __init__(self, codec: Codec, grid: tuple[int, ...], bounds: Sequence[tuple[int, int]]) -> None:
        self.bounds = [(int(a), int(b)) for a, b in bounds]
        self.chunk_shape = codec.chunk_shape
        chunk = np.asarray(codec.chunk_shape, dtype=np.int64)
        self.lo = np.asarray([b[0] for b in bounds], dtype=np.int64) // chunk
        self.counts = tuple(((np.asarray([b[1] for b in bounds], dtype=np.int64) - 1) // chunk + 1 - self.lo).tolist())
        positions = np.indices(self.counts).reshape(len(bounds), -1) + self.lo[:, None]
        self.flats = np.ravel_multi_index(tuple(positions), grid).astype(np.int64)
        self.chunks = self.flats.tolist()
        self.dtype = codec.dtype
        # where chunks stream, each is placed into the output as it comes; else it is their block, laid out
        self.out = np.empty(tuple(stop - start for start, stop in self.bounds), dtype=codec.dtype) if codec.streams else None

    def place(self, first: int, values: np.ndarray) -> None:
        if first == 0 and len(values) == len(self.chunks):  # every chunk: laid side by side with one transpose
            nd = len(self.bounds)
            laid = values.astype(self.dtype, copy=False).reshape(*self.counts, *self.chunk_shape)
            laid = laid.transpose(*(k for axis in range(nd) for k in (axis, nd + axis)))  # (g0, c0, g1, c1, ...)
            whole = laid.reshape(*(n * c for n, c in zip(self.counts, self.chunk_shape, strict=True)))
            origin = (self.lo * np.asarray(self.chunk_shape)).tolist()
            self.out = whole[tuple(slice(b[0] - o, b[1] - o) for b, o in zip(self.bounds, origin, strict=True))]
            return
        assert self.out is not None  # chunks stream
        for i, chunk_values in enumerate(values, first):
            within, into = self._slices(i)
            self.out[into] = chunk_values[within]

    def target(self, row: int) -> np.ndarray | None:
        within, into = self._slices(row)
        if self.out is None or any(part.stop - part.start != c for part, c in zip(within, self.chunk_shape, strict=True)):
            return None
        found = self.out[into]
        return found if found.flags.c_contiguous else None

    def result(self, present: Container[int]) -> np.ndarray:
        assert self.out is not None  # every chunk placed
        return self.out

    def _slices(self, row: int) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """Chunk ``row``'s part in the region: where in the chunk, where in the output."""
        within, into = [], []
        for axis, (g, c) in enumerate(zip(np.unravel_index(row, self.counts), self.chunk_shape, strict=True)):
            start = (int(g) + int(self.lo[axis])) * c
            begin, end = max(self.bounds[axis][0], start), min(self.bounds[axis][1], start + c)
            within.append(slice(begin - start, end - start))
            into.append(slice(begin - self.bounds[axis][0], end - self.bounds[axis][0]))
        return tuple(within), tuple(into)


class Runs:
    """Runs ``[starts[i], stops[i])`` of a 1-d array, one after the other; written into ``out``
    where it fits (:func:`runs_out`), and the result. Long runs (a loader's blocks of rows) are
    cut into pieces, one per chunk they cross, each copied as its chunk comes (a chunk's
    values are read while they are in the CPU's cache, and only as far as its pieces reach:
    ``needs``); short ones are gathered from every chunk at once, without a Python loop."""

    def __init__(self, codec: ArrayCodec, starts: np.ndarray, stops: np.ndarray, out: np.ndarray | None = None) -> None:
        self.chunk = chunk = codec.chunk_shape[0]
        lengths = np.maximum(stops - starts, 0)
        keep = lengths > 0
        self.starts, self.stops, self.lengths = starts[keep], stops[keep], lengths[keep]
        total = int(self.lengths.sum())
        given = runs_out(codec, starts, stops, out)
        self.out = given if given is not None else np.empty(total, dtype=codec.dtype)
        self.flats = run_chunks(chunk, self.starts, self.stops)
        self.chunks = self.flats.tolist()
        self.needs: dict[int, int] | None = None
        if total >= _LONG_RUN * len(self.lengths) or codec.streams:
            self.pieces, self.needs, self.whole = _run_pieces(chunk, self.starts, self.stops)

    def place(self, first: int, values: np.ndarray) -> None:
        out = self.out
        if self.needs is not None:
            for i in range(len(values)):
                chunk_values = values[i]  # 1-d: the array's chunks are
                for at, offset, take in self.pieces[self.chunks[first + i]]:
                    out[at : at + take] = chunk_values[offset : offset + take]
            return
        flats, chunk, starts, lengths = self.flats, self.chunk, self.starts, self.lengths
        flat_values = values.reshape(-1)  # every chunk's, in order (short runs never stream)
        if not len(lengths):
            return
        before = np.r_[0, np.cumsum(lengths)[:-1]]
        if len(flats) == int(flats[-1]) - int(flats[0]) + 1:  # the chunks are one stretch of the array
            origin = int(flats[0]) * chunk
            if np.array_equal(starts[1:], self.stops[:-1]):  # and so are the runs (a CSC's columns, say)
                out[...] = flat_values[int(starts[0]) - origin : int(self.stops[-1]) - origin]
                return
            out[...] = flat_values[np.arange(len(out), dtype=np.int64) + np.repeat(starts - before - origin, lengths)]
            return
        positions = np.arange(len(out), dtype=np.int64) + np.repeat(starts - before, lengths)  # no loop over runs
        out[...] = flat_values[np.searchsorted(flats, positions // chunk) * chunk + positions % chunk]

    def target(self, row: int) -> np.ndarray | None:
        at = self.whole.get(self.chunks[row]) if self.needs is not None else None
        return None if at is None else self.out[at : at + self.chunk]

    def result(self, present: Container[int]) -> np.ndarray:
        return self.out


@dataclass(frozen=True)
class Selection:
    """Which part of each chunk goes where in the output, as zarr's indexers say it."""

    chunk: Sequence[Any]  # per chunk: the selection within the chunk
    out: Sequence[Any]  # per chunk: where it goes in the output
    drop_axes: tuple[int, ...] = ()
    complete: Sequence[bool] | None = None  # per chunk: the whole chunk is selected


class Selected:
    """The chunks zarr lists for a selection (its pipeline's ``read``), each part written into
    ``out``; a chunk listed more than once (annbatch's blocks of neighbouring rows) is decoded
    once. The result says, per listed chunk, whether it is stored."""

    needs = None

    def __init__(self, codec: ArrayCodec, listed: np.ndarray, selection: Selection, out: np.ndarray) -> None:
        self.listed = listed.tolist()
        self.chunks = list(dict.fromkeys(self.listed))
        self.flats = np.asarray(self.chunks, dtype=np.int64)
        self.items: dict[int, list[int]] = {}
        for item, flat in enumerate(self.listed):
            self.items.setdefault(flat, []).append(item)
        self.codec, self.selection, self.out = codec, selection, out

    def place(self, first: int, values: np.ndarray) -> None:
        selection, out = self.selection, self.out
        if first == 0 and len(values) == len(self.listed) and self._one_stretch():
            begin = selection.chunk[0][0].start
            stop = (len(values) - 1) * self.codec.chunk_shape[0] + selection.chunk[-1][0].stop
            out[selection.out[0][0].start : selection.out[-1][0].stop] = values.reshape(-1)[begin:stop]
            return
        for i, chunk_values in enumerate(values, first):
            for item in self.items[self.chunks[i]]:
                part = chunk_values[selection.chunk[item]]
                out[selection.out[item]] = part.squeeze(axis=selection.drop_axes) if selection.drop_axes else part

    def target(self, row: int) -> None:
        return None  # zarr's selections: placed by place()

    def result(self, present: Container[int]) -> list[bool]:
        return [flat in present for flat in self.listed]

    def _one_stretch(self) -> bool:
        """A 1-d run of consecutive chunks, each whole but maybe the first and the last, into
        a contiguous stretch of the output: one copy does it all."""
        selection, flats = self.selection, self.flats
        if len(self.codec.chunk_shape) != 1 or selection.drop_axes or selection.complete is None or len(flats) < 2:
            return False
        if int(flats[-1]) - int(flats[0]) != len(flats) - 1 or np.any(np.diff(flats) != 1):
            return False
        if not all(selection.complete[1:-1]):
            return False
        ends = (selection.chunk[0], selection.chunk[-1], selection.out[0], selection.out[-1])
        if not all(isinstance(e, tuple) and len(e) == 1 and isinstance(e[0], slice) and e[0].step in (None, 1) for e in ends):
            return False
        return bool(selection.chunk[0][0].stop == self.codec.chunk_shape[0] and selection.chunk[-1][0].start == 0)


def run_chunks(chunk: int, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The sorted flat indices of the chunks (``chunk`` items each) that the non-empty runs
    ``[starts[i], stops[i])`` of a 1-d array touch."""
    if not len(starts):
        return np.empty(0, dtype=np.int64)
    first, last = starts // chunk, (stops - 1) // chunk
    counts = last - first + 1
    steps = np.ones(int(counts.sum()), dtype=np.int64)
    heads = np.r_[0, np.cumsum(counts)[:-1]]
    steps[heads] = first - np.r_[0, last[:-1]]  # each run starts over at its first chunk
    steps[0] = first[0]
    return np.unique(np.cumsum(steps))


def _run_pieces(
    chunk: int, starts: np.ndarray, stops: np.ndarray
) -> tuple[dict[int, list[tuple[int, int, int]]], dict[int, int], dict[int, int]]:
    """Non-empty runs ``[starts[i], stops[i])`` of a 1-d array of chunks of ``chunk`` values,
    one after the other, cut where they cross chunks: per chunk, its pieces as (where in the
    runs' values, where in the chunk, how many values), how far into the chunk they reach
    (the values before that are all a read needs of it), and, for the chunks one piece takes
    whole, where it goes. Computed for all runs at once."""
    first, last = starts // chunk, (stops - 1) // chunk
    counts = last - first + 1
    run = np.repeat(np.arange(len(starts)), counts)
    flat = first[run] + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    lo = np.maximum(starts[run], flat * chunk)
    take = np.minimum(stops[run], (flat + 1) * chunk) - lo
    at = np.cumsum(take) - take
    by_chunk = np.argsort(flat, kind="stable")
    flats, begins = np.unique(flat[by_chunk], return_index=True)
    inside = (lo - flat * chunk)[by_chunk]
    rows = list(zip(at[by_chunk].tolist(), inside.tolist(), take[by_chunk].tolist(), strict=True))
    ends = [*begins.tolist()[1:], len(rows)]
    flat_list = flats.tolist()
    reach = np.maximum.reduceat(inside + take[by_chunk], begins) if len(begins) else np.empty(0, dtype=np.int64)
    pieces = {f: rows[b:e] for f, b, e in zip(flat_list, begins.tolist(), ends, strict=True)}
    alone = (np.diff(np.r_[begins, len(rows)]) == 1) & (take[by_chunk][begins] == chunk)
    whole = dict(zip(flats[alone].tolist(), at[by_chunk][begins][alone].tolist(), strict=True))
    return pieces, dict(zip(flat_list, reach.tolist(), strict=True)), whole


def runs_out(codec: ArrayCodec, starts: np.ndarray, stops: np.ndarray, out: np.ndarray | None) -> np.ndarray | None:
    """``out`` if the values of runs ``[starts[i], stops[i])`` can be written straight into
    it (the caller's buffer: a loader's preload; one copy less), else None."""
    if out is None or out.dtype != codec.dtype or out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable:
        return None
    return out if out.size == int(np.maximum(stops - starts, 0).sum()) else None


__all__ = ["Layout", "Region", "Runs", "Selected", "Selection", "run_chunks", "runs_out"]
