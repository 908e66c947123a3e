"""Where a manifest is written: never over a source, and checked before any scan starts.

A manifest written over the HDF5 file it describes destroys the data; a destination
that cannot be written (no such directory, no such bucket, no permission) should fail
in the first second, not after a long scan.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from h5lens.backend_errors import anon_requested, storage_error
from h5lens.errors import AccessDeniedError, H5LensError, InvalidOptionError, StorageError

# Protocols whose first path component is a bucket (or container) that must exist.
_BUCKET_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2"})


def is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def location_key(url: str) -> tuple[str, str]:
    """A comparable form of a location: (protocol, path) with links, ``file://``, ``.``
    and ``..`` resolved for local paths, and the protocol's own normal form for URLs."""
    if not is_remote(url):
        return ("file", os.path.realpath(url.removeprefix("file://")))
    import fsspec

    protocol = url.split("://", 1)[0].lower()
    try:
        cls = fsspec.get_filesystem_class(protocol)
        path = cls._strip_protocol(url)
        protocol = cls.protocol if isinstance(cls.protocol, str) else cls.protocol[0]
    except (ImportError, ValueError):
        path = url.split("://", 1)[1]
    return (protocol, str(path).rstrip("/"))


def same_location(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name the same file or object (hard links included, locally)."""
    if location_key(a) == location_key(b):
        return True
    if not is_remote(a) and not is_remote(b):
        try:
            return os.path.samefile(a.removeprefix("file://"), b.removeprefix("file://"))
        except OSError:
            return False
    return False


def refuse_sources(destination: str, sources: Iterable[str | None]) -> None:
    """Raise :class:`InvalidOptionError` if ``destination`` is one of ``sources``."""
    for source in sources:
        if source and same_location(destination, source):
            raise InvalidOptionError(
                f"{destination}: this is the source {source}; writing the manifest there would overwrite the data"
            )


def check_destination(
    destination: str, *, sources: Iterable[str | None] = (), storage_options: dict[str, Any] | None = None
) -> None:
    """Refuse a destination that is a source or that cannot be written, before any work.

    Local: its directory must exist and be writable, and it must not be a directory.
    Object storage: its bucket must exist and be reachable with these options (writing
    rights show only when writing; the write itself is still atomic)."""
    refuse_sources(destination, sources)
    if not is_remote(destination):
        _check_local(destination)
        return
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(destination, **(storage_options or {}))
        check_bucket(destination, fs, path)
        if fs.isdir(path):
            raise InvalidOptionError(f"{destination}: a directory (prefix); give the manifest a file name")
    except H5LensError:
        raise
    except Exception as e:  # noqa: BLE001 - every backend failure, named with the URL
        raise storage_error(e, destination, "checking the destination", anon=anon_requested(storage_options)) from e


def check_bucket(url: str, fs: Any, path: str) -> None:
    """On object storage, the bucket of ``url`` (``path`` on ``fs``) must exist: a prefix
    needs no creating, a bucket does."""
    if url.split("://", 1)[0].lower() in _BUCKET_PROTOCOLS:
        bucket = path.split("/", 1)[0]
        if not fs.exists(bucket):
            raise StorageError(f"{url}: the bucket {bucket!r} does not exist")


def _check_local(destination: str) -> None:
    path = os.path.abspath(destination.removeprefix("file://"))
    if os.path.isdir(path):
        raise InvalidOptionError(f"{destination}: a directory; give the manifest a file name")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StorageError(f"{destination}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise AccessDeniedError(f"{destination}: no permission to write there")
