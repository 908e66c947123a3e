"""Reading the bytes of HDF5 files: one layer for scans and reads.

* :mod:`~h5lens.fetch.obstore_client`: byte clients (pread, obstore, fsspec): ``get(offset,
  length)`` and ``stat()``, errors named with the URL and the bytes;
* :mod:`~h5lens.fetch.retry`: the one retry policy of every request;
* :mod:`~h5lens.fetch.planner`: which requests fetch a set of ranges (merged across
  small gaps, long ones split into parallel parts);
* :mod:`~h5lens.fetch.blocks`: the one batcher: requests of one event-loop turn merged,
  read ahead and kept (a store's reads; a scan's, in lockstep);
* :mod:`~h5lens.fetch.sources`: what a store reads and when (read-ahead, whole arrays,
  prefetch), the one read planner every reader of a manifest goes through.
"""

from h5lens.fetch.blocks import ChunkFetcher
from h5lens.fetch.obstore_client import ByteReader, Client, FsspecClient, LocalClient, ObstoreClient, open_client
from h5lens.fetch.planner import READS, SCAN, Planner
from h5lens.fetch.sources import ChunkRead, ReadStats, SourceReads

__all__ = [
    "READS",
    "SCAN",
    "ByteReader",
    "ChunkFetcher",
    "ChunkRead",
    "Client",
    "FsspecClient",
    "LocalClient",
    "ObstoreClient",
    "Planner",
    "ReadStats",
    "SourceReads",
    "open_client",
]
