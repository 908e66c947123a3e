"""The local byte reader: ``os.pread`` on a file descriptor, many ranges at once as views of
a read-only map of the file (:mod:`h5lens.fetch.mapped`).

Synchronous: a page-cache read of one chunk takes microseconds, less than a thread hop, so
readers read local files on the calling thread. Its cost model (:data:`h5lens.fetch.cost.LOCAL`)
merges neighbouring ranges only where a pread needs it (gaps of up to 16 KB, which cost no
more to copy than another pread would); views of a map are never merged.
"""

from __future__ import annotations

import os
import stat as stat_
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from h5lens.errors import NotHDF5Error, SourceReadError
from h5lens.fetch import cost as costs
from h5lens.fetch.backend_errors import storage_error
from h5lens.fetch.mapped import MAP_FROM, FileMap, maps_wanted
from h5lens.fetch.planner import LOCAL
from h5lens.fetch.protocol import ByteReader, FetchedOrFailed, each_alone
from h5lens.fetch.ranges import past_end


class LocalClient:
    """``os.pread`` on a file descriptor opened on first use (so clients pickle), or on one
    the caller has open (``descriptor``: the caller's to close)."""

    local = True
    concurrency = 1
    name = "pread"
    cost = costs.LOCAL

    def __init__(self, path: str, *, descriptor: int | None = None) -> None:
        self.url = path
        self.path = path.removeprefix("file://")
        self._fd: int | None = descriptor
        self._owns_fd = descriptor is None
        self._file_map: FileMap | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except OSError as e:  # not found, denied, ...: named with the path
                raise storage_error(e, self.path, "opening") from None
        return self._fd

    @property
    def maps(self) -> bool:
        return maps_wanted() and not (self._file_map is not None and self._file_map.failed)

    def batches(self) -> bool:
        return False  # each range is a pread (or a view: :meth:`views`)

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> bytes:
        """Bytes ``[offset, offset + length)``; with ``exact=False``, fewer at the end of the file."""
        fd = self._open()
        try:
            data = os.pread(fd, length, offset)
        except OSError as e:
            raise SourceReadError(f"{self.path}: reading bytes {offset}-{offset + length} failed ({e.strerror})") from None
        if len(data) != length and exact:
            raise past_end(self.path, offset, length, f"the file ({os.fstat(fd).st_size} bytes)")
        return data

    async def get(self, offset: int, length: int) -> bytes:
        # A page-cache read of one chunk takes microseconds; a thread hop costs more than it.
        return self.get_sync(offset, length)

    async def get_many(self, ranges: Sequence[tuple[int, int]]) -> list[FetchedOrFailed]:
        return await each_alone(self.get, ranges)

    def views(self, offsets: np.ndarray, lengths: np.ndarray) -> list[memoryview] | None:
        """Many ranges at once as views of a read-only map of the file (no copy); a range
        past the file's end is refused as :meth:`get_sync` refuses it. None for fewer than
        ``MAP_FROM`` ranges (a lazy AnnData's small reads: a pread or two costs less than
        the size check) and where local reads do not map."""
        if len(offsets) < MAP_FROM or not self.maps:
            return None
        fd = self._open()
        try:
            size = os.fstat(fd).st_size
        except OSError as e:
            raise storage_error(e, self.path, "checking") from None
        ends = offsets + lengths
        if int(ends.max()) > size:
            first = int(np.argmax(ends > size))
            raise past_end(self.path, int(offsets[first]), int(lengths[first]), f"the file ({size} bytes)")
        if self._file_map is None:
            self._file_map = FileMap()
        return self._file_map.views(fd, size, offsets.tolist(), lengths.tolist())

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """Size and mtime; with ``fingerprint``, also the content fingerprint (two preads).
        A directory (or any other thing that is not a regular file) is refused."""
        del probe  # a local file answers at once
        try:
            found = os.stat(self.path) if self._fd is None else os.fstat(self._fd)
        except OSError as e:
            raise storage_error(e, self.path, "checking") from None
        if stat_.S_ISDIR(found.st_mode):
            raise NotHDF5Error(f"{self.path}: a directory, not a file")
        if not stat_.S_ISREG(found.st_mode):
            raise NotHDF5Error(f"{self.path}: not a regular file")
        info: dict[str, Any] = {"size": found.st_size, "mtime": found.st_mtime}
        if fingerprint:
            from h5lens.manifest.identity import fingerprint as content

            info["fingerprint"] = content(self.get_sync, found.st_size)
        return info

    def close(self) -> None:
        if self._file_map is not None:
            self._file_map.release()
        if self._fd is not None and self._owns_fd:
            os.close(self._fd)
        if self._owns_fd:
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "path": self.path, "_fd": None, "_owns_fd": True, "_file_map": None}


def read_now(
    reader: ByteReader, offsets: np.ndarray, lengths: np.ndarray, on_request: Callable[[int], None] | None = None
) -> list[memoryview]:
    """Many ranges of a local reader, on the calling thread: views of its map where it maps
    them (:meth:`LocalClient.views`), else one pread per run of neighbours (the local
    planner's), sliced; each range a view of its run's buffer. ``on_request(nbytes)`` is
    called for each read made (the map counts as one)."""
    views = reader.views(offsets, lengths)
    if views is not None:
        if on_request is not None:
            on_request(int(lengths.sum()))
        return views
    order = np.argsort(offsets, kind="stable")
    sorted_offsets, sorted_lengths = offsets[order], lengths[order]
    out: list[memoryview] = [memoryview(b"")] * len(offsets)
    order_list = order.tolist()
    for lo, hi in LOCAL.runs(sorted_offsets, sorted_lengths):
        start = int(sorted_offsets[lo])
        end = int((sorted_offsets[lo:hi] + sorted_lengths[lo:hi]).max())
        block = memoryview(reader.get_sync(start, end - start))
        if on_request is not None:
            on_request(end - start)
        for i, begin, n in zip(order_list[lo:hi], (sorted_offsets[lo:hi] - start).tolist(), sorted_lengths[lo:hi].tolist(), strict=True):
            out[i] = block[begin : begin + n]
    return out


__all__ = ["LocalClient", "read_now"]
