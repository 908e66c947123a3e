"""Reading the bytes of HDF5 files: the one layer every scan, read, check and destination reads through.

* :mod:`~h5lens.fetch.protocol`: :class:`ByteReader`, every capability a reader declares;
* one reader per module: :mod:`~h5lens.fetch.local` (pread, views of a map:
  :mod:`~h5lens.fetch.mapped`), :mod:`~h5lens.fetch.obstore_client`,
  :mod:`~h5lens.fetch.fsspec_client`; :mod:`~h5lens.fetch.clients` chooses one for a URL
  (:func:`open_client`), and asks a URL whether it exists and for its first bytes;
* :mod:`~h5lens.fetch.retry`: the one retry policy of every request;
* :mod:`~h5lens.fetch.cost`: what a request and a byte cost, per kind of source (a stated
  model; the bandwidth in all measured while reading);
* :mod:`~h5lens.fetch.planner`: which requests fetch a set of ranges, decided from that model
  (gaps bridged where the request saved costs more than their bytes, long requests split
  into parallel parts);
* :mod:`~h5lens.fetch.blocks`: the one batcher: requests of one event-loop turn merged,
  read ahead and kept (a store's reads; a scan's, in lockstep);
* :mod:`~h5lens.fetch.readahead`: the one read-ahead window;
* :mod:`~h5lens.fetch.sources`: what a store reads and when (read-ahead, whole arrays,
  prefetch), the one read planner every reader of a manifest goes through.
"""

from h5lens.fetch.blocks import ChunkFetcher
from h5lens.fetch.clients import Client, exists, open_client, read_head
from h5lens.fetch.cost import BandwidthMeter, CostModel
from h5lens.fetch.fsspec_client import FsspecClient
from h5lens.fetch.local import LocalClient
from h5lens.fetch.obstore_client import ObstoreClient
from h5lens.fetch.planner import READS, SCAN, Planner
from h5lens.fetch.protocol import ByteReader
from h5lens.fetch.sources import ChunkRead, ReadStats, SourceReads

__all__ = [
    "READS",
    "SCAN",
    "BandwidthMeter",
    "ByteReader",
    "ChunkFetcher",
    "ChunkRead",
    "Client",
    "CostModel",
    "FsspecClient",
    "LocalClient",
    "ObstoreClient",
    "Planner",
    "ReadStats",
    "SourceReads",
    "exists",
    "open_client",
    "read_head",
]
