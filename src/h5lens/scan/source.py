"""Open the file to index (local path or fsspec URL) and record its provenance."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import h5py

from h5lens.backend_errors import anon_requested, storage_error
from h5lens.errors import InvalidOptionError, NotHDF5Error, SourceNotFoundError
from h5lens.manifest.model import Source
from h5lens.scan.options import DEFAULT_READ_BLOCK_SIZE, MIN_READ_BLOCK_SIZE

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


class TrackedFile:
    """The file object libhdf5 reads a remote file through: counts the bytes it reads (for
    progress) and keeps the backend's exception, which h5py turns into a bare OSError
    ("unable to open file") that would otherwise hide a network or permission failure."""

    REPORT_EVERY = 1 << 20

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.bytes_read = 0
        self.failure: BaseException | None = None
        self.on_read: Callable[[], None] | None = None
        self._reported = 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.inner.read(size)
        except Exception as e:
            self.failure = e
            raise
        self.bytes_read += len(data)
        if self.on_read is not None and self.bytes_read - self._reported >= self.REPORT_EVERY:
            self._reported = self.bytes_read
            self.on_read()  # only updates a display: no h5py call may happen in here
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class OpenSource:
    """An HDF5 file opened for scanning, plus a raw handle for reading chunk bytes."""

    h5: h5py.File
    raw: BinaryIO | TrackedFile  # a remote file's bytes go through a TrackedFile
    source: Source

    @property
    def bytes_read(self) -> int:
        """Bytes libhdf5 and h5lens have read from a remote source so far (0 for local files)."""
        return self.raw.bytes_read if isinstance(self.raw, TrackedFile) else 0

    def on_read(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` every MiB read from a remote source (progress displays)."""
        if isinstance(self.raw, TrackedFile):
            self.raw.on_read = callback

    def failure(self, error: BaseException) -> BaseException:
        """The error to raise for ``error`` from libhdf5: the storage failure under it, if any."""
        if isinstance(self.raw, TrackedFile) and self.raw.failure is not None:
            return storage_error(self.raw.failure, self.source.url, "reading")
        return error

    def read(self, offset: int, length: int) -> bytes:
        try:
            self.raw.seek(offset)
            data = self.raw.read(length)
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
            self.raw.close()


def open_source(
    url: str, *, storage_options: dict[str, Any] | None = None, read_block_size: int = DEFAULT_READ_BLOCK_SIZE
) -> OpenSource:
    """Open ``url`` for scanning; raise an h5lens error if it is missing or not HDF5.

    Remote files are read in blocks of ``read_block_size`` bytes: larger blocks mean
    fewer requests and more bytes beyond the metadata."""
    if read_block_size < MIN_READ_BLOCK_SIZE:
        raise InvalidOptionError(f"read_block_size must be at least {MIN_READ_BLOCK_SIZE} bytes. Got {read_block_size}")
    raw: BinaryIO | TrackedFile
    if is_remote(url):
        raw, source = _open_remote(url, storage_options, read_block_size)
    else:
        raw, source = _open_local(url)

    try:
        try:
            head = raw.read(len(HDF5_SIGNATURE))
            raw.seek(0)
        except Exception as e:  # noqa: BLE001
            raise storage_error(e, url, "reading", anon=anon_requested(storage_options)) from e
        if source.size == 0:
            raise NotHDF5Error(f"{url}: empty file (0 bytes), not HDF5")
        try:
            # local files go through libhdf5's own driver: no Python call per read
            h5 = h5py.File(raw if is_remote(url) else url.removeprefix("file://"), "r")
        except OSError as e:
            if isinstance(raw, TrackedFile) and raw.failure is not None:
                raise storage_error(raw.failure, url, "reading") from None
            what = "not an HDF5 file" if head != HDF5_SIGNATURE else "unreadable HDF5 file"
            raise NotHDF5Error(f"{url}: {what} ({_first_line(e)})") from None
    except BaseException:
        raw.close()
        raise
    return OpenSource(h5, raw, source)


def _open_remote(url: str, storage_options: dict[str, Any] | None, block_size: int) -> tuple[TrackedFile, Source]:
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        info = fs.info(path)
    except Exception as e:  # noqa: BLE001 - every backend failure becomes an h5lens error naming the URL
        raise storage_error(e, url, "opening", anon=anon_requested(storage_options)) from e
    if info.get("type") == "directory":
        raise NotHDF5Error(f"{url}: a directory (a prefix of other objects), not a file")
    try:
        # size= spares the second HEAD that open() would make to learn it
        raw = fs.open(path, "rb", block_size=block_size, cache_type="blockcache", size=info.get("size"))
    except Exception as e:  # noqa: BLE001
        raise storage_error(e, url, "opening", anon=anon_requested(storage_options)) from e
    etag = info.get("ETag") or info.get("etag")
    return TrackedFile(raw), Source(url, int(info.get("size") or 0), None, etag.strip('"') if etag else None)


def _open_local(url: str) -> tuple[BinaryIO, Source]:
    local = url.removeprefix("file://")
    try:
        stat = os.stat(local)
    except FileNotFoundError:
        raise SourceNotFoundError(f"{url}: no such file") from None
    except OSError as e:
        raise storage_error(e, url, "opening") from None
    if os.path.isdir(local):
        raise NotHDF5Error(f"{url}: a directory, not a file")
    if not os.path.isfile(local):
        raise NotHDF5Error(f"{url}: not a regular file")
    try:
        raw = open(local, "rb")  # noqa: SIM115 - closed by OpenSource.close
    except OSError as e:
        raise storage_error(e, url, "opening") from None
    return raw, Source(url, stat.st_size, stat.st_mtime, None)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
