"""Decoded chunks kept for the next read that needs them: a bounded cache, in bytes.

A minibatch loader over an h5ad draws blocks of a few dozen cells at random, and the h5ad's
chunks hold a hundred or more: every chunk is inflated again by each block that touches it,
in this preload or a later epoch. With ``decoded_cache_bytes`` (an opening option, off by
default: a reader of a whole array gains nothing and would hold memory for nothing), a
store keeps the decoded bytes of the chunks it read, least recently used out first, and a
read takes those it finds instead of fetching and inflating them again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class Decoded(bytes):
    """A chunk's bytes already decoded (as the decoders give them, before the bulk unshuffle):
    read plans hand them on in place of stored bytes."""

    __slots__ = ()


class DecodedChunks:
    """Decoded chunks of one store, by (array path, flat index); at most ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._chunks: OrderedDict[tuple[str, int], Decoded] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # decode threads put, the event loop takes
        self.hits = 0
        self.misses = 0

    def take(self, path: str, flats: list[int]) -> dict[int, Decoded]:
        """The decoded chunks held among ``flats`` (marked as used)."""
        found: dict[int, Decoded] = {}
        with self._lock:
            for flat in flats:
                data = self._chunks.get((path, flat))
                if data is not None:
                    self._chunks.move_to_end((path, flat))
                    found[flat] = data
            self.hits += len(found)
            self.misses += len(flats) - len(found)
        return found

    def put(self, path: str, flat: int, data: bytes | memoryview) -> None:
        if len(data) > self.max_bytes:
            return
        kept = Decoded(data)
        with self._lock:
            old = self._chunks.pop((path, flat), None)
            if old is not None:
                self._bytes -= len(old)
            self._chunks[(path, flat)] = kept
            self._bytes += len(kept)
            while self._bytes > self.max_bytes and self._chunks:
                _, dropped = self._chunks.popitem(last=False)
                self._bytes -= len(dropped)

    @property
    def nbytes(self) -> int:
        return self._bytes
