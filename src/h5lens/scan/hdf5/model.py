"""What a chunk-index walk takes and gives: the reader it calls, the table it returns, the
error it raises where it stops, and the kinds of chunk index it knows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

# Called once per level of a walk with absolute ``(offset, length)`` pairs; returns the bytes of each.
ReadRanges = Callable[[list[tuple[int, int]]], Awaitable[Sequence[bytes]]]

MAX_DEPTH = 64  # more levels than any real index: a loop in a corrupt file


class UnsupportedIndexError(Exception):
    """The walker met something it does not understand or that does not add up.

    The message names it; the caller falls back to libhdf5.
    """


class IndexType(StrEnum):
    """The chunk indexes libhdf5 writes (a string enum: each compares equal to its name)."""

    BTREE_V1 = "btree_v1"  # data layout message versions 1 to 3 (libhdf5 before 1.10, or libver earliest)
    SINGLE = "single"  # layout 4+: one chunk, the dataset at its maximum size
    IMPLICIT = "implicit"  # layout 4+: no index, chunks allocated early in one block
    FIXED_ARRAY = "fixed_array"  # layout 4+: no unlimited dimension
    EXTENSIBLE_ARRAY = "extensible_array"  # layout 4+: one unlimited dimension
    BTREE_V2 = "btree_v2"  # layout 4+: more than one unlimited dimension


@dataclass(frozen=True)
class ChunkIndex:
    """A dataset's chunk table, one row per allocated chunk, sorted by grid index."""

    grid_index: np.ndarray  # int64 (n, ndim): chunk offset / chunk shape
    address: np.ndarray  # uint64 (n,): absolute file offset of the stored chunk
    size: np.ndarray  # uint64 (n,): stored (filtered) size in bytes
    filter_mask: np.ndarray  # uint32 (n,): bit i set = filter i skipped for that chunk
    chunk_shape: tuple[int, ...]
    shape: tuple[int, ...]  # the dataspace's current dims
    maxshape: tuple[int | None, ...]  # None where unlimited
    element_size: int
    index_type: IndexType
    layout_version: int
    filtered: bool
    reads: int  # read_ranges calls (round trips) the walk made
    unfiltered_edges: bool = False  # partial edge chunks are stored without the filters

    def partial_edges(self) -> np.ndarray:
        """Rows whose chunk reaches past the dataspace's current dims (a partial edge chunk)."""
        return partial_edge_rows(self.grid_index, self.chunk_shape, self.shape)

    def __len__(self) -> int:
        return len(self.address)


def partial_edge_rows(grid_index: np.ndarray, chunk_shape: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """Boolean per row of ``grid_index``: the chunk reaches past ``shape`` along some axis."""
    if not len(grid_index):
        return np.zeros(0, bool)
    ends = (grid_index[:, : len(shape)] + 1) * np.asarray(chunk_shape[: len(shape)], np.int64)
    return np.any(ends > np.asarray(shape, np.int64), axis=1)
