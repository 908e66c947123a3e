"""Every read of a remote file a scan makes: ranged GETs, one at a time or in batches.

libhdf5 reads a remote file through a block cache (:class:`h5lens.scan.source.TrackedFile`),
whose misses come here one request at a time (:meth:`RemoteRanges.fetch_sync`); what
h5lens reads itself (chunk indexes, the chunks of small arrays) goes through here too:
ranges asked for together are fetched together, in one batch of concurrent requests
(:meth:`~h5lens.fetch.blocks.ChunkFetcher.read_together`, the batcher a store's reads use
too, keeping all it fetched). Requests run on zarr's event loop thread,
through the byte client of :func:`h5lens.fetch.clients.open_client` (obstore where the
options allow it, fsspec otherwise), as every other read of h5lens does.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from h5lens.fetch import planner
from h5lens.fetch.blocks import BatchStats, ChunkFetcher
from h5lens.fetch.clients import open_client

T = TypeVar("T")


class RemoteRanges:
    """Batched ranged reads of one remote file, for the scanner (see the module docstring)."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None,
        *,
        on_batch: Callable[[BatchStats], None] | None = None,
        cached: Callable[[int, int], bytes | None] | None = None,
    ) -> None:
        self.url = url
        self.source = open_client(url, storage_options)
        self.fetcher = ChunkFetcher(
            self.source, planner=planner.scan(self.source.cost), keep="all", cached=cached, on_batch=on_batch
        )
        self.batched = self.fetcher.read_together  # ``await batched([(offset, length), ...])``

    @property
    def client(self) -> str:
        """Which client sends the requests (``obstore`` or ``fsspec``), for the log."""
        return self.source.name

    @property
    def stats(self) -> BatchStats:
        return self.fetcher.stats

    def stat(self) -> dict[str, Any]:
        """The file's size and ETag: the first request, which fails fast (the probe policy)."""
        return self.source.stat(probe=True)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on zarr's event loop thread (where the clients' sessions live)."""
        from zarr.core.sync import sync

        return sync(coroutine)

    def fetch_sync(self, offset: int, length: int) -> bytes:
        """One range, one request (libhdf5's block reads)."""
        return self.run(self._fetch(offset, length))

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, length)``, fetched as one batch."""
        return self.run(self.fetcher.read_together(list(ranges)))

    async def _fetch(self, offset: int, length: int) -> bytes:
        return bytes(await self.source.get(offset, length))

    def close(self) -> None:
        self.fetcher.close()
        self.source.close()


__all__ = ["RemoteRanges"]
