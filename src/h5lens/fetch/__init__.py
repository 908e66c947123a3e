"""Reading the bytes a manifest points at.

* :mod:`~h5lens.fetch.readers`: local and fsspec readers (retries, errors, sessions);
* :mod:`~h5lens.fetch.blocks`: merged, cached requests to one remote source;
* :mod:`~h5lens.fetch.plan`: what to read and when (read-ahead, whole arrays, prefetch),
  the one read planner every reader of a manifest goes through.
"""

from h5lens.fetch.blocks import MAX_GAP, MAX_SPAN, ChunkFetcher, merge_plan
from h5lens.fetch.plan import ChunkRead, ReadStats, SourceReads
from h5lens.fetch.readers import FsspecReader, LocalReader, make_reader

__all__ = [
    "MAX_GAP",
    "MAX_SPAN",
    "ChunkFetcher",
    "ChunkRead",
    "FsspecReader",
    "LocalReader",
    "ReadStats",
    "SourceReads",
    "make_reader",
    "merge_plan",
]
