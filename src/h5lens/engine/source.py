"""What the read engine reads through: a chunk source.

The engine knows arrays by their manifest path and chunks by their flat index in C order of
the chunk grid. A chunk source gives it the manifest's documents and chunk tables, every
present chunk's stored bytes (on the event loop, or on the calling thread where that needs
no loop), and words for a chunk in messages. :class:`~h5lens.store.ManifestStore` is the
one chunk source h5lens has; the engine imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from h5lens.engine.decoded_cache import DecodedChunks
from h5lens.manifest.tables import ChunkTable

Payloads = dict[int, bytes | memoryview]


class ChunkBytes(Protocol):
    """The stored bytes of many chunks of one array at once."""

    async def read_many(self, path: str, flats: np.ndarray) -> Payloads:
        """Every present chunk among ``flats`` (absent ones are not in the result); a failed
        read raises an h5lens error whose ``chunk`` attribute is ``(flat, offset, length)``."""
        ...

    def reads_here(self, path: str, flats: np.ndarray) -> bool:
        """Whether every present chunk among ``flats`` is inline or local (read without the loop)."""
        ...

    def read_many_now(self, path: str, flats: np.ndarray) -> Payloads | None:
        """As :meth:`read_many`, on the calling thread; None where that needs the event loop
        (remote chunks)."""
        ...


class ChunkSource(Protocol):
    """An engine's chunk source: documents, chunk tables, bytes, and names for chunks."""

    @property
    def documents(self) -> Mapping[str, dict[str, Any]]:
        """Node path -> ``zarr.json`` document."""
        ...

    @property
    def tables(self) -> Mapping[str, ChunkTable]:
        """Array path -> chunk table."""
        ...

    @property
    def chunk_bytes(self) -> ChunkBytes: ...

    @property
    def decoded_chunks(self) -> DecodedChunks | None:
        """Decoded chunks kept for later reads, if the source keeps any."""
        ...

    def describe_flat_chunk(self, path: str, flat: int) -> str:
        """A chunk, for messages: its key, array, and where its bytes are."""
        ...

    def chunk_key_at(self, path: str, flat: int) -> str:
        """The zarr key of a chunk."""
        ...


__all__ = ["ChunkBytes", "ChunkSource", "Payloads"]
