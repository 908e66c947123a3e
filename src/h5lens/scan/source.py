"""Open the file to index (local path or fsspec URL) and record its provenance."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import h5py

from h5lens.errors import InvalidOptionError, NotHDF5Error, SourceNotFoundError
from h5lens.manifest.model import Source

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# libhdf5 reaches metadata through many small dependent reads: a block cache turns them into few requests.
REMOTE_BLOCK_SIZE = 1 << 20


def is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


@dataclass
class OpenSource:
    """An HDF5 file opened for scanning, plus a raw handle for reading chunk bytes."""

    h5: h5py.File
    raw: BinaryIO
    source: Source

    def read(self, offset: int, length: int) -> bytes:
        self.raw.seek(offset)
        data = self.raw.read(length)
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
    url: str, *, storage_options: dict[str, Any] | None = None, read_block_size: int = REMOTE_BLOCK_SIZE
) -> OpenSource:
    """Open ``url`` for scanning; raise an h5lens error if it is missing or not HDF5.

    Remote files are read in blocks of ``read_block_size`` bytes: larger blocks mean
    fewer requests and more bytes beyond the metadata."""
    if read_block_size < 4096:
        raise InvalidOptionError(f"read_block_size must be at least 4096 bytes. Got {read_block_size}")
    if is_remote(url):
        import fsspec

        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{url}: no such file") from None
        # size= spares the second HEAD that open() would make to learn it
        raw = fs.open(path, "rb", block_size=read_block_size, cache_type="blockcache", size=info.get("size"))
        etag = info.get("ETag") or info.get("etag")
        source = Source(url, int(info.get("size") or 0), None, etag.strip('"') if etag else None)
    else:
        local = url.removeprefix("file://")
        try:
            stat = os.stat(local)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{url}: no such file") from None
        if not os.path.isfile(local):
            raise NotHDF5Error(f"{url}: not a regular file")
        raw = open(local, "rb")  # noqa: SIM115 - closed by OpenSource.close
        source = Source(url, stat.st_size, stat.st_mtime, None)

    try:
        head = raw.read(len(HDF5_SIGNATURE))
        raw.seek(0)
        if source.size == 0:
            raise NotHDF5Error(f"{url}: empty file (0 bytes), not HDF5")
        try:
            # local files go through libhdf5's own driver: no Python call per read
            h5 = h5py.File(raw if is_remote(url) else url.removeprefix("file://"), "r")
        except OSError as e:
            what = "not an HDF5 file" if head != HDF5_SIGNATURE else "unreadable HDF5 file"
            raise NotHDF5Error(f"{url}: {what} ({_first_line(e)})") from None
    except BaseException:
        raw.close()
        raise
    return OpenSource(h5, raw, source)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
