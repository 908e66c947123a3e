"""Byte-range readers of the sources a manifest points at: local files and fsspec URLs.

A reader owns what it opened (a file descriptor; an HTTP session and its read-ahead
tasks) and closes it in ``close()``. Remote reads are retried when the failure is
transient, decided by exception type and HTTP status (:mod:`h5lens.backend_errors`).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import weakref
from typing import Any

from h5lens.backend_errors import anon_requested, http_status, is_transient, storage_error
from h5lens.errors import SourceNotFoundError, SourceReadError, StorageError
from h5lens.locations import is_remote

# fsspec backends (s3fs, botocore) retry throttling and 5xx themselves; these retries
# cover what they give up on, and connection resets between them (decided by exception
# type and HTTP status: backend_errors.is_transient).
RETRIES = 2
RETRY_BASE_SECONDS = 0.2


class _Tasks:
    """Background reads (read-ahead, prefetch) a reader owns: cancelled when it closes,
    so nothing is left pending when the event loop or the interpreter ends."""

    def _init_tasks(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        _LIVE.add(self)

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            loop = task.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        self._tasks.clear()

    def close(self) -> None:
        """Cancel the tasks and close what the reader opened (each reader its own)."""
        raise NotImplementedError


class LocalReader(_Tasks):
    """``os.pread`` on a file descriptor opened on first use (so readers pickle)."""

    def __init__(self, path: str) -> None:
        self.path = path.removeprefix("file://")
        self._fd: int | None = None
        self._init_tasks()

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceNotFoundError(f"{self.path}: source file not found") from None
            except OSError as e:
                raise storage_error(e, self.path, "opening") from None
        return self._fd

    def read_sync(self, offset: int, length: int) -> bytes:
        fd = self._open()
        try:
            data = os.pread(fd, length, offset)
        except OSError as e:
            raise SourceReadError(f"{self.path}: reading bytes {offset}-{offset + length} failed ({e.strerror})") from None
        if len(data) != length:
            size = os.fstat(fd).st_size
            raise SourceReadError(
                f"{self.path}: bytes {offset}-{offset + length} end past the end of the file ({size} bytes): "
                "the manifest's reference does not fit this file"
            )
        return data

    async def read(self, offset: int, length: int) -> bytes:
        # A page-cache read of one chunk takes microseconds; a thread hop costs more than it.
        return self.read_sync(offset, length)

    def stat(self, *, fingerprint: bool = False) -> dict[str, Any]:
        """Size and mtime; with ``fingerprint``, also the content fingerprint (two preads)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{self.path}: source file not found") from None
        except OSError as e:
            raise storage_error(e, self.path, "checking") from None
        found: dict[str, Any] = {"size": st.st_size, "mtime": st.st_mtime}
        if fingerprint:
            from h5lens.identity import fingerprint as content

            found["fingerprint"] = content(self.read_sync, st.st_size)
        return found

    def close(self) -> None:
        self._cancel_tasks()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_fd": None, "_tasks": set()}


class FsspecReader(_Tasks):
    """Ranged reads through an async fsspec filesystem (s3, http, gcs ...), retried with
    backoff when the failure is transient (by exception type and HTTP status). The reader
    owns its filesystem and HTTP session, and closes them in :meth:`close`."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self._fs: Any = None
        self._path: str | None = None
        self._client: Any = None  # the HTTP session set_session made: ours to close
        self._loop: asyncio.AbstractEventLoop | None = None
        self._init_tasks()

    def _sync_filesystem(self) -> tuple[Any, str]:
        import fsspec

        try:
            return fsspec.core.url_to_fs(self.url, **self.storage_options)
        except Exception as e:  # noqa: BLE001 - a missing backend, an unknown protocol
            raise storage_error(e, self.url, "opening") from e

    async def _filesystem(self) -> tuple[Any, str]:
        # An async filesystem's session belongs to the event loop that made it.
        loop = asyncio.get_running_loop()
        if self._fs is None or self._loop is not loop:
            import fsspec

            try:
                cls = fsspec.get_filesystem_class(self.url.split("://", 1)[0])
                if getattr(cls, "async_impl", False):
                    options = {**self.storage_options, "asynchronous": True, "skip_instance_cache": True}
                    self._fs, self._path = fsspec.core.url_to_fs(self.url, **options)
                    if hasattr(self._fs, "set_session"):
                        self._client = await self._fs.set_session()
                else:
                    self._fs, self._path = self._sync_filesystem()
            except Exception as e:  # noqa: BLE001
                raise storage_error(e, self.url, "opening", anon=anon_requested(self.storage_options)) from e
            self._loop = loop
            _LIVE.add(self)
        assert self._path is not None  # set together with self._fs
        return self._fs, self._path

    async def read(self, offset: int, length: int) -> bytes:
        fs, path = await self._filesystem()
        for attempt in range(RETRIES + 1):
            try:
                if getattr(fs, "asynchronous", False):
                    data = await fs._cat_file(path, start=offset, end=offset + length)
                else:
                    data = await asyncio.to_thread(fs.cat_file, path, start=offset, end=offset + length)
            except Exception as e:  # noqa: BLE001 - classified by type and status, below
                if attempt < RETRIES and is_transient(e):
                    await asyncio.sleep(RETRY_BASE_SECONDS * 2**attempt)
                    continue
                raise self._read_error(e, offset, length, attempt + 1) from e
            if len(data) != length:  # the object is shorter than the reference: no retry helps
                raise SourceReadError(
                    f"{self.url}: bytes {offset}-{offset + length} end past the end of the object "
                    f"({len(data)} of {length} bytes came back): the manifest's reference does not fit this source"
                )
            return data
        raise AssertionError("unreachable")

    def _read_error(self, error: BaseException, offset: int, length: int, attempts: int) -> Exception:
        where = f"bytes {offset}-{offset + length}"
        if http_status(error) == 416:
            return SourceReadError(
                f"{self.url}: {where} lie past the end of the object (HTTP 416): "
                "the manifest's reference does not fit this source"
            )
        found = storage_error(error, self.url, f"reading {where} of", anon=anon_requested(self.storage_options))
        if type(found) is StorageError:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            return SourceReadError(f"{found}{tries}")
        return found

    def stat(self, *, fingerprint: bool = False) -> dict[str, Any]:
        """Size and ETag (object storage identifies versions by ETag: no fingerprint)."""
        fs, path = self._sync_filesystem()
        try:
            info = fs.info(path)
        except Exception as e:  # noqa: BLE001
            raise storage_error(e, self.url, "checking", anon=anon_requested(self.storage_options)) from e
        etag = info.get("ETag") or info.get("etag")
        return {"size": info.get("size"), "etag": etag.strip('"') if isinstance(etag, str) else etag}

    def close(self, *, wait: bool = True) -> None:
        """Cancel read-ahead still in flight and close the HTTP session, on its own loop
        (waiting for it unless ``wait`` is false or this runs on that loop)."""
        self._cancel_tasks()
        client, loop = self._client, self._loop
        self._fs = self._client = self._loop = None
        _LIVE.discard(self)
        closer = getattr(client, "close", None)
        if closer is None or loop is None or loop.is_closed() or not loop.is_running():
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        future = asyncio.run_coroutine_threadsafe(closer(), loop)
        if wait and not on_loop:
            try:
                future.result(timeout=2)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def __del__(self) -> None:
        # A reader dropped without close(): its session still belongs to a live loop.
        try:
            self.close(wait=False)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "storage_options": self.storage_options,
            "_fs": None,
            "_path": None,
            "_client": None,
            "_loop": None,
            "_tasks": set(),
        }


# Readers with a session or tasks: closed at exit, while zarr's event loop still runs
# (by the time the garbage collector would get to them, the loop is gone). Weak: a
# reader closed or collected leaves it.
_LIVE: weakref.WeakSet[_Tasks] = weakref.WeakSet()


@atexit.register
def _close_live_readers() -> None:
    for reader in list(_LIVE):
        try:
            reader.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def make_reader(url: str, storage_options: dict[str, Any] | None = None) -> LocalReader | FsspecReader:
    if not is_remote(url):
        return LocalReader(url)
    return FsspecReader(url, storage_options)


