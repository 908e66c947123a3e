"""Byte-range reads from the sources a manifest points at (local files or fsspec URLs)."""

from __future__ import annotations

import asyncio
import os
import posixpath
from typing import Any

from h5lens.errors import SourceNotFoundError, SourceReadError


def resolve_url(url: str, location: str | None) -> str:
    """Resolve a source URL written relative to the manifest at ``location``."""
    if "://" in url or os.path.isabs(url) or location is None:
        return url
    if "://" in location and not location.startswith("file://"):
        return posixpath.normpath(posixpath.join(posixpath.dirname(location), url)).replace(":/", "://", 1)
    base = os.path.dirname(location.removeprefix("file://"))
    return os.path.normpath(os.path.join(base, url))


class LocalReader:
    """``os.pread`` on a file descriptor opened on first use (so readers pickle)."""

    def __init__(self, path: str) -> None:
        self.path = path.removeprefix("file://")
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceNotFoundError(f"{self.path}: source file not found") from None
        return self._fd

    def read_sync(self, offset: int, length: int) -> bytes:
        data = os.pread(self._open(), length, offset)
        if len(data) != length:
            raise SourceReadError(
                f"{self.path}: short read of bytes {offset}-{offset + length} ({len(data)} of {length}); "
                "the source is truncated or changed"
            )
        return data

    async def read(self, offset: int, length: int) -> bytes:
        return await asyncio.to_thread(self.read_sync, offset, length)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_fd": None}


class FsspecReader:
    """Ranged reads through an fsspec filesystem (s3, http, gcs ...)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self._fs = None
        self._path: str | None = None

    def _filesystem(self):
        if self._fs is None:
            import fsspec

            self._fs, self._path = fsspec.core.url_to_fs(self.url, **self.storage_options)
        return self._fs, self._path

    async def read(self, offset: int, length: int) -> bytes:
        fs, path = self._filesystem()
        try:
            if getattr(fs, "async_impl", False) and getattr(fs, "asynchronous", False):
                data = await fs._cat_file(path, start=offset, end=offset + length)
            else:
                data = await asyncio.to_thread(fs.cat_file, path, start=offset, end=offset + length)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{self.url}: source not found") from None
        except OSError as e:
            raise SourceReadError(f"{self.url}: reading bytes {offset}-{offset + length} failed ({e})") from e
        if len(data) != length:
            raise SourceReadError(
                f"{self.url}: short read of bytes {offset}-{offset + length} ({len(data)} of {length})"
            )
        return data

    def close(self) -> None:
        self._fs = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options, "_fs": None, "_path": None}


def make_reader(url: str, storage_options: dict[str, Any] | None = None) -> LocalReader | FsspecReader:
    if "://" not in url or url.startswith("file://"):
        return LocalReader(url)
    return FsspecReader(url, storage_options)
