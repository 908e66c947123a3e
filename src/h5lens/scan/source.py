"""Open the file to index (local path or fsspec URL) and record its provenance."""

from __future__ import annotations

import gc
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import h5py
import numpy as np

from h5lens.errors import H5LensError, InvalidOptionError, NotHDF5Error, first_line
from h5lens.fetch.backend_errors import anon_requested, storage_error
from h5lens.fetch.http_client import HEAD_BYTES, HTTPClient
from h5lens.fetch.local import LocalClient, read_now
from h5lens.fetch.protocol import ByteReader
from h5lens.fetch.ranges import PastEndError
from h5lens.fetch.readahead import Streams
from h5lens.manifest.locations import is_remote
from h5lens.manifest.model import Source
from h5lens.scan.options import DEFAULT_READ_BLOCK_SIZE, MIN_READ_BLOCK_SIZE, READ_CACHE_BYTES, READ_UNIT
from h5lens.scan.remote import RemoteRanges

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class TrackedFile:
    """The file object libhdf5 reads a remote file through.

    It serves reads from a cache of small blocks ("units", 4 KiB). A read that misses
    fetches the missing units with one request, sized by where the file's metadata lies,
    which nothing says before it is read: an object header read where its data begins and
    ends costs a unit's worth of someone else's chunks, not a block of them.

    * After a jump: ``JUMP_UNITS`` units around the read (libhdf5 reads next what was
      written just before or after: the header's B-tree root, its group's heap).
    * Near what is held (a gap of at most ``NEAR_UNITS`` units, or of at most as many as
      the held run next to it): the gap too. Metadata packed together (the object headers
      a file's writer put in one place, the end of a file closed by libhdf5) comes in a
      few requests that double what is held each time, as one read-ahead would.
    * Carrying on where a fetch ended: what is asked, and twice as much as that fetch
      once the run has shown itself (:class:`h5lens.fetch.readahead.Streams`: global
      heaps of strings read in turn with the chunks of heap IDs pointing into them).

    No fetch goes beyond ``block_size`` bytes but what a read asks for; a file no larger
    than that is fetched whole by the first read that misses (a request costs more than
    its bytes). It counts what it fetched (for progress), offers what it holds to h5lens's
    own reads (:meth:`cached`), and keeps the backend's exception, which h5py turns into a
    bare OSError ("unable to open file") that would otherwise hide a network or permission
    failure."""

    REPORT_EVERY = 1 << 20
    JUMP_UNITS = 4
    NEAR_UNITS = 4

    def __init__(
        self,
        fetch: Callable[[int, int], bytes],
        size: int,
        block_size: int,
        cache_bytes: int = READ_CACHE_BYTES,
        unit: int = READ_UNIT,
    ) -> None:
        self.fetch = fetch  # (offset, length) -> bytes: one request
        self.size = size
        self.block_size = block_size
        self.unit = min(unit, block_size)
        self.max_units = max(32, cache_bytes // self.unit)
        self.blocks: OrderedDict[int, bytes] = OrderedDict()  # unit number -> bytes, oldest first
        self.requests = 0
        self.bytes_read = 0
        self.failure: BaseException | None = None
        self.on_read: Callable[[], None] | None = None
        self._reported = 0
        self._pos = 0
        self._last_unit = max(0, (size - 1) // self.unit)
        self._most = max(1, self.block_size // self.unit)  # units a fetch takes beyond what is asked, at most
        self._near = min(self.NEAR_UNITS, self._most)
        self._streams = Streams(self._most, after_jump=self.JUMP_UNITS)

    def hold(self, offset: int, length: int) -> None:
        """Fetch the units of ``[offset, offset + length)`` now (bytes the client already
        holds: an HTTP check brings the file's first bytes)."""
        if length > 0 and self.size:
            first, last = offset // self.unit, min(self._last_unit, (offset + length - 1) // self.unit)
            self._fetch(first, last, request=False)
            self._streams.fetched(first, last + 1, asked=last - first + 1, carried=False)  # a run to carry on

    def _fetch(self, first: int, last: int, *, request: bool = True) -> bytes:
        """Units ``first..last`` (inclusive), in one request (``request``: counted as one);
        their bytes (a read takes them from here: the cache may not hold them all)."""
        start, end = first * self.unit, min(self.size, (last + 1) * self.unit)
        try:
            data = self.fetch(start, end - start)
        except Exception as e:
            self.failure = e
            raise
        self.requests += request
        self.bytes_read += len(data)
        for number in range(first, last + 1):
            at = (number - first) * self.unit
            self.blocks[number] = data[at : at + self.unit]
        while len(self.blocks) > self.max_units:
            self.blocks.popitem(last=False)
        if self.on_read is not None and self.bytes_read - self._reported >= self.REPORT_EVERY:
            self._reported = self.bytes_read
            self.on_read()  # only updates a display: no h5py call may happen in here
        return data

    def _gap(self, number: int, step: int) -> int:
        """How many missing units from ``number`` on (in direction ``step``: 1 or -1) are
        worth fetching with it: those before a held unit, if there are at most
        ``NEAR_UNITS`` of them or at most as many as the held run beyond them; else 0."""
        for gap in range(1, self._most + 1):
            at = number + step * gap
            if at < 0 or at > self._last_unit:
                return 0
            if at in self.blocks:
                run = 1
                while run < gap - 1 and at + step * run in self.blocks:
                    run += 1
                return gap - 1 if gap - 1 <= max(self._near, run) else 0
        return 0

    def _miss(self, number: int, last: int) -> tuple[int, bytes]:
        """Fetch from unit ``number`` (missing) through at least ``last``, missing units
        only (see the class docstring); returns the first unit fetched and the bytes."""
        if self.size <= self.block_size:  # a file no larger than a block: all of it not held yet
            start, run_end = number, number
            while start > 0 and start - 1 not in self.blocks:
                start -= 1
            while run_end < self._last_unit and run_end + 1 not in self.blocks:
                run_end += 1
            return start, self._fetch(start, run_end)
        asked = last - number + 1
        window, carried = self._streams.window(number, asked)
        start = number
        if not carried:  # a jump: the window around the read, as far back as the held units
            start = max(0, number - (window - 1) // 2)
            held = number - 1
            while held >= start and held not in self.blocks:
                held -= 1
            start = held + 1
        stop = min(self._last_unit, max(last, start + window - 1))
        start -= self._gap(start, -1)
        run_end = number
        while run_end < stop and run_end + 1 not in self.blocks:
            run_end += 1
        if run_end == stop:
            run_end += self._gap(run_end, 1)
        # no more than a block but what is asked: what lies before the read goes first
        allowed = max(self._most, min(run_end, last) - number + 1)
        start = max(start, min(number, run_end - allowed + 1))
        run_end = min(run_end, start + allowed - 1)
        data = self._fetch(start, run_end)
        self._streams.fetched(start, run_end + 1, asked=asked, carried=carried)
        return start, data

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if end <= self._pos:
            return b""
        first, last = self._pos // self.unit, (end - 1) // self.unit
        parts: list[bytes] = []
        number = first
        while number <= last:  # each run of missing units: one request
            held = self.blocks.get(number)
            if held is not None:
                self.blocks.move_to_end(number)
                parts.append(held)
                number += 1
                continue
            start, fetched = self._miss(number, last)
            after = min(last + 1, start + (len(fetched) + self.unit - 1) // self.unit)
            parts.extend(fetched[(n - start) * self.unit : (n - start + 1) * self.unit] for n in range(number, after))
            number = after
        begin = self._pos - first * self.unit
        data = (parts[0] if len(parts) == 1 else b"".join(parts))[begin : begin + end - self._pos]
        self._pos = end
        return data

    def cached(self, offset: int, length: int) -> bytes | None:
        """The bytes ``[offset, offset + length)`` if the cache holds them all, else None."""
        if length <= 0 or offset + length > self.size or offset // self.unit not in self.blocks:
            return None
        first, last = offset // self.unit, (offset + length - 1) // self.unit
        if any(n not in self.blocks for n in range(first, last + 1)):
            return None
        begin = offset - first * self.unit
        if first == last:
            return self.blocks[first][begin : begin + length]
        return b"".join(self.blocks[n] for n in range(first, last + 1))[begin : begin + length]

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._pos = offset
        elif whence == 1:
            self._pos += offset
        elif whence == 2:
            self._pos = self.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.blocks.clear()


@dataclass
class OpenSource:
    """An HDF5 file opened for scanning, plus handles for reading its bytes ourselves.

    Every byte goes through the file's byte reader (:mod:`h5lens.fetch`), ``reader``:
    libhdf5 reads a remote file through ``raw`` (a block cache in front of it); what h5lens
    reads itself (chunk indexes, small arrays' chunks) goes through ``ranges`` (batches of
    concurrent requests for exactly the bytes needed: :mod:`h5lens.scan.remote`). A local
    file libhdf5 reads with its own driver; h5lens, with preads and views of a map on the
    descriptor of ``raw``."""

    h5: h5py.File
    raw: BinaryIO | TrackedFile  # a remote file's bytes go through a TrackedFile
    source: Source
    reader: ByteReader  # the file's byte reader (local: over raw's descriptor)
    ranges: RemoteRanges | None = None  # remote files only
    storage_options: dict[str, Any] | None = None  # what the other files it names are read with

    @property
    def remote(self) -> bool:
        return self.ranges is not None

    @property
    def bytes_read(self) -> int:
        """Bytes libhdf5 and h5lens have read from a remote source so far (0 for local files)."""
        tracked = self.raw.bytes_read if isinstance(self.raw, TrackedFile) else 0
        return tracked + (self.ranges.stats.bytes if self.ranges is not None else 0)

    def on_read(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` every MiB read from a remote source (progress displays)."""
        if isinstance(self.raw, TrackedFile):
            self.raw.on_read = callback
        if self.ranges is not None:
            self.ranges.fetcher.on_batch = None if callback is None else (lambda _stats: callback())

    def read_summary(self) -> str:
        """What a remote scan fetched, and how (for the log)."""
        parts = []
        if isinstance(self.raw, TrackedFile):
            parts.append(
                f"libhdf5: {self.raw.requests} requests, {self.raw.bytes_read} bytes "
                f"({self.raw.unit >> 10}-{self.raw.block_size >> 10} KiB blocks)"
            )
        if self.ranges is not None:
            stats = self.ranges.stats
            parts.append(
                f"h5lens ({self.ranges.client}): {stats.batches} batches, {stats.requests} requests, "
                f"{stats.bytes} bytes for {stats.asked} asked"
            )
        return "; ".join(parts)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, length)``: a local file's through its map (or preads
        of neighbours merged: :func:`h5lens.fetch.local.read_now`); a remote one's in one
        batch of concurrent requests (neighbours merged where that costs few bytes)."""
        if self.ranges is None:
            offsets = np.fromiter((o for o, _ in ranges), np.int64, len(ranges))
            lengths = np.fromiter((n for _, n in ranges), np.int64, len(ranges))
            try:
                return [bytes(view) for view in read_now(self.reader, offsets, lengths)]
            except PastEndError as e:
                raise NotHDF5Error(f"{self.source.url}: {e.bytes_said}; the file is truncated") from None
        try:
            return self.ranges.read_ranges(ranges)
        except H5LensError:
            raise
        except Exception as e:  # noqa: BLE001 - a backend failure, named with the URL
            raise storage_error(e, self.source.url, "reading") from e

    def failure(self, error: BaseException) -> BaseException:
        """The error to raise for ``error`` from libhdf5: the storage failure under it, if any."""
        if isinstance(self.raw, TrackedFile) and self.raw.failure is not None:
            return storage_error(self.raw.failure, self.source.url, "reading")
        return error

    def read(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)``: a remote file's through libhdf5's block cache
        (what it holds is not fetched again), a local one's with a pread."""
        try:
            if isinstance(self.raw, TrackedFile):
                self.raw.seek(offset)
                data = self.raw.read(length)
            else:
                data = bytes(self.reader.get_sync(offset, length, exact=False))
        except H5LensError:
            raise
        except Exception as e:  # noqa: BLE001 - a backend failure, named with the URL
            raise storage_error(e, self.source.url, "reading") from e
        if len(data) != length:
            raise NotHDF5Error(
                f"{self.source.url}: short read at byte {offset} ({len(data)} of {length} bytes); "
                "the file is truncated"
            )
        return data

    def close(self) -> None:
        try:
            self.h5.close()
        finally:
            try:
                self.reader.close()  # a local file's map (its descriptor is raw's)
                self.raw.close()
            finally:
                if self.ranges is not None:
                    self.ranges.close()


def open_source(
    url: str, *, storage_options: dict[str, Any] | None = None, read_block_size: int = DEFAULT_READ_BLOCK_SIZE
) -> OpenSource:
    """Open ``url`` for scanning; raise an h5lens error if it is missing or not HDF5.

    Remote files are read in blocks of ``read_block_size`` bytes: larger blocks mean
    fewer requests and more bytes beyond the metadata."""
    if read_block_size < MIN_READ_BLOCK_SIZE:
        raise InvalidOptionError(f"read_block_size must be at least {MIN_READ_BLOCK_SIZE} bytes. Got {read_block_size}")
    _register_filter_plugins()
    raw: BinaryIO | TrackedFile
    reader: ByteReader
    ranges: RemoteRanges | None = None
    if is_remote(url):
        raw, source, ranges = _open_remote(url, storage_options, read_block_size)
        reader = ranges.source
    else:
        raw, reader, source = _open_local(url)

    try:
        try:
            if isinstance(raw, TrackedFile):
                head = raw.read(len(HDF5_SIGNATURE))
                raw.seek(0)
            else:
                head = bytes(reader.get_sync(0, len(HDF5_SIGNATURE), exact=False))
        except Exception as e:  # noqa: BLE001
            raise storage_error(e, url, "reading", anon=anon_requested(storage_options)) from e
        if source.size == 0:
            raise NotHDF5Error(f"{url}: empty file (0 bytes), not HDF5")
        try:
            # local files go through libhdf5's own driver: no Python call per read
            h5 = _open_h5(raw) if isinstance(raw, TrackedFile) else h5py.File(url.removeprefix("file://"), "r")
        except OSError as e:
            if isinstance(raw, TrackedFile) and raw.failure is not None:
                raise storage_error(raw.failure, url, "reading") from None
            what = "not an HDF5 file" if head != HDF5_SIGNATURE else "unreadable HDF5 file"
            raise NotHDF5Error(f"{url}: {what} ({first_line(e)})") from None
    except BaseException:
        reader.close()
        raw.close()
        if ranges is not None:
            ranges.close()
        raise
    return OpenSource(h5, raw, source, reader, ranges, storage_options)


def _open_h5(raw: TrackedFile) -> h5py.File:
    """libhdf5 reads through ``raw`` with h5py's lock held, while the bytes come from the event
    loop thread: no cyclic collection meanwhile (one that freed an h5py object there would
    wait for that lock). build_manifest does the same for the whole scan."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return h5py.File(raw, "r")
    finally:
        if gc_was_enabled:
            gc.enable()


def _open_remote(
    url: str, storage_options: dict[str, Any] | None, block_size: int
) -> tuple[TrackedFile, Source, RemoteRanges]:
    # libhdf5's reads and h5lens's own go through one client; what libhdf5's blocks hold
    # is never fetched again for h5lens.
    ranges = RemoteRanges(url, storage_options)
    try:
        info = ranges.stat()
    except BaseException:
        ranges.close()
        raise
    size = int(info.get("size") or 0)
    raw = TrackedFile(ranges.fetch_sync, size, block_size)
    if isinstance(ranges.source, HTTPClient):
        try:
            raw.hold(0, HEAD_BYTES)  # the check brought them: held without a request
        except BaseException:
            ranges.close()
            raise
    ranges.fetcher.cached = raw.cached
    return raw, Source(url, size, info.get("mtime") if info.get("etag") is None else None, info.get("etag")), ranges


def _register_filter_plugins() -> None:
    """Where hdf5plugin is installed, its filters join libhdf5's (importing it registers
    them): datasets written through them that no zarr codec reads are decoded by h5py and
    copied, instead of refused."""
    try:
        import hdf5plugin  # noqa: F401
    except ImportError:
        pass


def _open_local(url: str) -> tuple[BinaryIO, LocalClient, Source]:
    """The file open for h5lens's reads (libhdf5 opens it by its path), its byte reader on
    that descriptor, and what identifies it (size, mtime, content fingerprint)."""
    LocalClient(url).stat()  # no such file, a directory, not a regular file: said before opening
    try:
        raw = open(url.removeprefix("file://"), "rb")  # noqa: SIM115 - closed by OpenSource.close
    except OSError as e:
        raise storage_error(e, url, "opening") from None
    reader = LocalClient(url, descriptor=raw.fileno())
    try:
        info = reader.stat(fingerprint=True)
    except BaseException:
        raw.close()
        raise
    return raw, reader, Source(url, info["size"], info["mtime"], None, info["fingerprint"])
