"""Arrays on a rectilinear chunk grid, read as the regular arrays they are made of.

``h5lens combine`` concatenates arrays of many files along axis 0 without copying their
chunks: the combined array's chunk grid is *rectilinear* (zarr's ``"rectilinear"`` grid,
each chunk's length along axis 0 given), each file's chunks one run of equal lengths. The
decode kernel and its layouts (:mod:`h5lens.engine.kernel`, :mod:`h5lens.engine.layouts`)
know regular grids: a :class:`SegmentedCodec` cuts such an array into *segments*, the runs
of equal chunk lengths along axis 0, each a regular array of its own (an
:class:`~h5lens.engine.codec.ArrayCodec` with that chunk length) whose chunks are a stretch
of the array's chunk table. A read is then one read plan per segment it touches
(:mod:`h5lens.engine.plan`), joined. Only axis 0 may vary; an array whose other axes vary
gets no codec, and zarr reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.engine.codec import ArrayCodec, array_codec
from h5lens.manifest.documents import ArrayDocument


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of the array, whose chunks along axis 0 all have one length:
    ``codec`` reads them as a regular array of ``stop - start`` rows, its first chunk chunk
    ``first_chunk`` of the array along axis 0."""

    start: int
    stop: int
    first_chunk: int
    codec: ArrayCodec

    @property
    def grid(self) -> tuple[int, ...]:
        rows, chunk = self.stop - self.start, self.codec.chunk_shape[0]
        return (-(-rows // chunk), *(-(-n // c) for n, c in zip(self.codec.shape[1:], self.codec.chunk_shape[1:], strict=True)))


@dataclass(frozen=True)
class SegmentedCodec:
    """How the numbers of an array on a rectilinear grid (varying along axis 0 only) decode:
    segment by segment. ``chunk_shape`` is the largest chunk (dask's blocks, a bound)."""

    path: str
    dtype: np.dtype
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    segments: tuple[Segment, ...]
    per_row: int  # chunks of the grid per chunk along axis 0 (the other axes' grid)
    streams = False
    cache = None

    @property
    def starts(self) -> np.ndarray:
        return np.asarray([s.start for s in self.segments], dtype=np.int64)

    def touched(self, lo: int, hi: int) -> list[int]:
        """The segments rows ``[lo, hi)`` (non-empty) touch, in order."""
        starts = self.starts
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        last = int(np.searchsorted(starts, hi - 1, side="right")) - 1
        return list(range(first, last + 1))

    def flat_offset(self, segment: Segment) -> int:
        """What to add to a segment's flat chunk index to find it in the array's table."""
        return segment.first_chunk * self.per_row


def segmented_codec(path: str, doc: Mapping[str, Any]) -> SegmentedCodec | None:
    """The :class:`SegmentedCodec` of an array of numbers on a rectilinear grid whose other
    axes are regular; None for any other array, or where a segment's codecs are not all
    h5lens's to decode (zarr reads it then)."""
    view = ArrayDocument.of(doc)
    if view is None or view.edges is None or not view.shape:
        return None
    rest = tuple(_regular(axis, n) for axis, n in zip(view.edges[1:], view.shape[1:], strict=True))
    if any(chunk is None for chunk in rest):
        return None
    grid = view.grid_shape
    head = view.edges[0]
    edges = np.full(grid[0], head, dtype=np.int64) if isinstance(head, int) else np.asarray(head[: grid[0]], dtype=np.int64)
    segments: list[Segment] = []
    if edges.size:
        breaks = np.flatnonzero(np.diff(edges)) + 1
        firsts = np.r_[0, breaks].tolist()
        lasts = [*breaks.tolist(), int(edges.size)]
        row_starts = np.r_[0, np.cumsum(edges)].tolist()
        for first, last in zip(firsts, lasts, strict=True):
            start, stop = int(row_starts[first]), min(int(row_starts[last]), view.shape[0])
            chunk = int(edges[first])
            part = {
                **doc,
                "shape": [stop - start, *view.shape[1:]],
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk, *rest]}},
            }
            codec = array_codec(path, part)
            if codec is None:
                return None
            segments.append(Segment(start, stop, first, codec))
    dtype = segments[0].codec.dtype if segments else None
    if dtype is None:
        return None
    return SegmentedCodec(
        path=path,
        dtype=dtype,
        shape=view.shape,
        chunk_shape=view.chunk_shape,
        segments=tuple(segments),
        per_row=math.prod(grid[1:]),
    )


def _regular(axis: int | tuple[int, ...], extent: int) -> int | None:
    """The chunk length of an axis that is regular (a bare integer, or edges all of one
    length covering the extent, as ``h5lens combine`` writes them for Icechunk); None otherwise."""
    if isinstance(axis, int):
        return axis
    covering = axis[: max(1, -(-extent // axis[0]))]
    return axis[0] if len(set(covering)) == 1 else None


__all__ = ["Segment", "SegmentedCodec", "segmented_codec"]
