"""Manifest files as bytes: written whole or not at all, read by byte ranges.

Neither knows a manifest form: :mod:`h5lens.manifest.io` encodes and decodes, these move
the bytes, locally or on object storage.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from h5lens.errors import H5LensError, ManifestLimitError


def write_bytes_atomic(path: str, payload: bytes, *, storage_options: dict[str, Any] | None = None) -> None:
    """Write ``payload`` at ``path`` so that readers see the old content or the new, never
    a part: a temporary file renamed into place, or one PUT on object storage."""
    from h5lens.fetch.backend_errors import anon_requested, storage_error

    if "://" not in path or path.startswith("file://"):
        local = path.removeprefix("file://")
        directory = os.path.dirname(os.path.abspath(local))
        tmp = os.path.join(directory, f".{os.path.basename(local)}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(payload)
            os.replace(tmp, local)
        except OSError as e:
            raise storage_error(e, path, "writing") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return
    import fsspec

    # Object stores publish an object only when its upload completes: one PUT is atomic.
    try:
        fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
        fs.pipe_file(fs_path, payload)
    except Exception as e:  # noqa: BLE001 - every backend failure, named with the URL
        raise storage_error(e, path, "writing", anon=anon_requested(storage_options)) from e


class FileRanges:
    """Byte ranges of one file, local or remote (picklable: a manifest's lazily loaded chunk
    tables travel to dask workers with it), read through the byte reader of
    :func:`h5lens.fetch.open_client`, as sources are.

    The reader is this object's to close: inside ``with ranges:`` one reader serves every
    read (reading a manifest: its head, then the rest); a read outside opens one and closes
    it before returning (a compact manifest's chunk table, loaded when first used). Nothing
    is left open after a read that failed (a manifest that does not exist)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self._client: Any = None
        self._held = 0  # reads (and ``with`` blocks) in progress: the client stays open
        self._lock = threading.Lock()  # lazily loaded tables may be read from several threads

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.storage_options = state["url"], state["storage_options"]
        self._client, self._held, self._lock = None, 0, threading.Lock()

    def __enter__(self) -> FileRanges:
        with self._lock:
            self._held += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._held -= 1
            client = self._client if not self._held else None
            if client is not None:
                self._client = None
        if client is not None:
            client.close()

    def close(self) -> None:
        """Close the client, if one is open (reads in progress have had their bytes)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _fail(self, error: BaseException) -> Exception:
        from h5lens.fetch.backend_errors import anon_requested, storage_error

        return storage_error(error, self.url, "reading the manifest", anon=anon_requested(self.storage_options))

    def _reader(self) -> Any:
        with self._lock:
            if self._client is None:
                from h5lens.fetch.clients import open_client  # the manifest layer needs no reader until it reads

                self._client = open_client(self.url, self.storage_options)
            return self._client

    def __call__(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` (fewer at the end of the file)."""
        with self:
            try:
                return bytes(self._reader().get_sync(offset, length, exact=False))
            except H5LensError:
                raise
            except OSError as e:  # a backend's own failure: named with the path
                raise self._fail(e) from None

    def whole(self, limit: int) -> bytes:
        """The whole file, refused before reading if it is larger than ``limit`` bytes."""
        with self:
            size = self._reader().stat(probe=True).get("size")
            if size is not None and size > limit:
                raise ManifestLimitError(
                    f"{self.url}: a manifest of {size:,} bytes exceeds the limit of {limit:,} "
                    "(Limits.manifest_bytes); raise it with limits=Limits(...) if this manifest is trusted"
                )
            return self(0, limit + 1 if size is None else size)
