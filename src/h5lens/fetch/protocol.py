"""What every reader of bytes in h5lens reads through: the :class:`ByteReader` protocol.

A scan's reads, a store's, ``validate``'s, ``index-many``'s, a destination's check and a
manifest's own bytes all go through a byte reader made by
:func:`h5lens.fetch.clients.open_client`, one kind per module:

* :class:`~h5lens.fetch.local.LocalClient`: ``os.pread``, and many ranges at once as views of a map;
* :class:`~h5lens.fetch.obstore_client.ObstoreClient`: object storage and HTTP through obstore;
* :class:`~h5lens.fetch.fsspec_client.FsspecClient`: any fsspec URL.

Every capability a caller may use is declared here, so no caller asks a reader what it is:
whether it answers at once (``local``), how many requests it keeps in flight
(``concurrency``), what a request and a byte cost (``cost``, which the planner decides from:
:mod:`h5lens.fetch.cost`), whether it gives many ranges as views of a map (``maps`` /
:meth:`ByteReader.views`) and how many ranges it sends in one call (:meth:`ByteReader.batches` /
:meth:`ByteReader.get_many`). Errors are h5lens errors naming the URL and the bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from h5lens.fetch.cost import CostModel

Fetched = bytes | memoryview
# what get_many gives for each range: its bytes, or the error that range met
FetchedOrFailed = bytes | memoryview | BaseException


@runtime_checkable
class ByteReader(Protocol):
    """Bytes of one file or object, local or remote (see the module docstring)."""

    url: str
    local: bool  # get_sync answers at once (a page-cache read): read on the calling thread
    concurrency: int  # requests in flight at most (the others wait)

    @property
    def name(self) -> str:
        """How the bytes are read (``pread``, ``obstore``, ``fsspec``), for logs and reports."""
        ...

    @property
    def cost(self) -> CostModel:
        """What a request and a byte cost on this reader: what its planners decide from."""
        ...

    @property
    def maps(self) -> bool:
        """Whether :meth:`views` gives many ranges at once as views of a map of the file."""
        ...

    def batches(self) -> int:
        """How many ranges :meth:`get_many` sends in one call now (0: each is a request of its own)."""
        ...

    async def get(self, offset: int, length: int) -> Fetched:
        """Bytes ``[offset, offset + length)``, or an h5lens error naming the URL and bytes."""
        ...

    async def get_many(self, ranges: Sequence[tuple[int, int]]) -> list[FetchedOrFailed]:
        """The bytes of each ``(offset, length)``, as :meth:`get` gives them; a range that
        failed has its error as its entry (the others are kept)."""
        ...

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> Fetched:
        """:meth:`get` without an event loop; with ``exact=False``, fewer at the end."""
        ...

    def views(self, offsets: np.ndarray, lengths: np.ndarray) -> list[memoryview] | None:
        """Many ranges at once as views of a map of the file (no copy); None where this
        reader does not map them (read them with :meth:`get_sync` or :meth:`get`)."""
        ...

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """What identifies the source's version: ``size``, and ``etag``, ``mtime`` or (a
        local file, with ``fingerprint``) ``fingerprint``. ``probe``: a first request, which
        gives up within seconds if the endpoint does not answer."""
        ...

    def close(self) -> None: ...


async def each_alone(get: Callable[[int, int], Awaitable[Fetched]], ranges: Sequence[tuple[int, int]]) -> list[FetchedOrFailed]:
    """``get`` of each range, concurrently: its bytes or its error (a reader's
    :meth:`ByteReader.get_many` where it has no batched call)."""
    return list(await asyncio.gather(*(get(o, n) for o, n in ranges), return_exceptions=True))


__all__ = ["ByteReader", "Fetched", "FetchedOrFailed", "each_alone"]
