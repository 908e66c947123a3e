"""A local file's chunks read through a read-only memory map: no copy, no allocation.

A loader's preload reads hundreds of chunks of a local file at once (16 MB in 450 ranges at
10^6 cells); ``os.pread`` copies each into a new bytes object on the event-loop thread,
before any inflating can start (4.7 ms a preload, a tenth of it). Mapped, a range is a view
of the page cache: the decode threads read it in place, and only the page-table entries of
the pages touched are made, 64 KB at a time.

Two things a map changes, and what is done about them:

* The pages a read touched would stay in the process's resident memory for as long as the
  map lives (clean file pages, which the kernel may take back, but counted in RSS): after
  every :data:`RESIDENT_BYTES` read the map's pages are let go (``MADV_DONTNEED``; a view
  still in use faults its page back in from the page cache), so the resident share stays
  about that much.
* A file that shrinks under a map raises SIGBUS where ``pread`` raises an error: the file's
  size is checked before every read (a range past its end is refused as ``pread`` refuses
  it; a file that grew or shrank is mapped again), and ``H5LENS_LOCAL_READS=pread`` reads
  without a map. Platforms without ``madvise`` (Windows) and files that cannot be mapped
  read with ``pread``.
"""

from __future__ import annotations

import mmap
import os
import threading

LOCAL_READS_ENV = "H5LENS_LOCAL_READS"
# Bytes read through a map between two releases of its pages (see the module docstring).
RESIDENT_BYTES = 32 << 20
# Ranges in one read from which it goes through the map.
MAP_FROM = 4


def maps_wanted() -> bool:
    """Whether local multi-chunk reads go through a map (``H5LENS_LOCAL_READS`` is not
    ``pread``, and the platform can let a map's pages go)."""
    return os.environ.get(LOCAL_READS_ENV, "map").strip().lower() != "pread" and hasattr(mmap.mmap, "madvise")


class FileMap:
    """The whole of one open file mapped read-only, made again when the file's size
    changes; :meth:`views` gives ranges of it."""

    def __init__(self) -> None:
        self._map: tuple[mmap.mmap, memoryview, int] | None = None  # the map, a view of it, the size it covers
        self._since_release = 0
        self._lock = threading.Lock()
        self.failed = False  # the file cannot be mapped: read it with pread

    def views(self, fd: int, size: int, offsets: list[int], lengths: list[int]) -> list[memoryview] | None:
        """Views of ranges ``[offsets[i], offsets[i] + lengths[i])`` of the file open as
        ``fd``, whose size is ``size`` now (every range within it: the caller checks); None
        if it cannot be mapped."""
        with self._lock:
            held = self._map
            if held is None or held[2] != size:
                held = self._map = self._mapped(fd, size)
                self._since_release = 0
                if held is None:
                    return None
            mapping, whole, _ = held
            asked = sum(lengths)
            self._since_release += asked
            if self._since_release > RESIDENT_BYTES:
                mapping.madvise(mmap.MADV_DONTNEED)
                self._since_release = asked
        return [whole[offset : offset + length] for offset, length in zip(offsets, lengths, strict=True)]

    def _mapped(self, fd: int, size: int) -> tuple[mmap.mmap, memoryview, int] | None:
        if size == 0:
            return None
        try:
            mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            return mapping, memoryview(mapping), size
        except (OSError, ValueError):  # a FIFO, a filesystem without mmap: pread reads it
            self.failed = True
            return None

    def release(self) -> None:
        """Forget the map (views still held keep it alive until they go)."""
        with self._lock:
            self._map = None
