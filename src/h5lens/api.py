"""The public entry points: index a file, open a manifest."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import zarr

from h5lens import __version__
from h5lens.errors import NotHDF5Error
from h5lens.manifest.model import Manifest
from h5lens.scan.build import build_manifest
from h5lens.scan.options import (
    DEFAULT_CONVENTION,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_READ_BLOCK_SIZE,
    DEFAULT_SLAB_BYTES,
    ScanOptions,
    ScanProgress,
)
from h5lens.scan.source import open_source
from h5lens.store import ManifestStore

PathOrManifest = Manifest | str | os.PathLike[str]


def index(
    source: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
    convention: str = DEFAULT_CONVENTION,
    slab_bytes: int = DEFAULT_SLAB_BYTES,
    materialize_limit: int | None = None,
    url: str | None = None,
    progress: Callable[[ScanProgress], None] | None = None,
    read_block_size: int = DEFAULT_READ_BLOCK_SIZE,
) -> Manifest:
    """Scan the HDF5 file ``source`` (path or fsspec URL) into a :class:`Manifest`.

    Parameters
    ----------
    inline_threshold
        Arrays whose whole stored size is at most this many bytes are copied into the
        manifest; the chunks of bigger arrays stay references however small each is.
    convention
        ``"released"`` (what readers of the unified convention ship: 0-d scalars, bare
        NaN tokens) or ``"proposal"`` (``_SCALAR`` shape-(1,) arrays, NaN as strings).
    slab_bytes
        Target size of the virtual chunks big contiguous datasets are cut into.
    materialize_limit
        Refuse (:class:`~h5lens.errors.MaterializeLimitError`) to copy more than this many
        bytes of one dataset into the manifest; ``None`` copies whatever must be copied.
    url
        The URL to record for the source instead of ``source`` (e.g. a path relative to
        where the manifest will live, or the bucket a local copy came from).
    progress
        Called with a :class:`~h5lens.scan.build.ScanProgress` (datasets done and total, the
        HDF5 path, bytes read from a remote source, chunks found) per dataset, and every
        MiB read from a remote source.
    read_block_size
        Remote files only: libhdf5's metadata reads are served from blocks of this many
        bytes. Larger blocks take fewer requests and fetch more bytes that are not
        metadata (chunk indexes sit between the chunks); see docs/cloud.md.
    """
    location = os.fspath(source)
    opened = open_source(location, storage_options=storage_options, read_block_size=read_block_size)
    try:
        manifest = build_manifest(
            opened,
            ScanOptions(inline_threshold, convention, slab_bytes, materialize_limit),
            writer=__version__,
            progress=progress,
        )
    except (NotHDF5Error, OSError, RuntimeError) as e:
        # libhdf5 reports a failed remote read as an unreadable file: say what really failed
        failure = opened.failure(e)
        if failure is e:
            raise
        raise failure from None
    finally:
        opened.close()
    recorded = url if url is not None else _default_url(location)
    manifest.sources[0] = type(manifest.sources[0])(
        recorded, manifest.sources[0].size, manifest.sources[0].mtime, manifest.sources[0].etag
    )
    return manifest


def _default_url(location: str) -> str:
    if "://" in location and not location.startswith("file://"):
        return location
    return os.path.abspath(location.removeprefix("file://"))


def load_manifest(manifest: PathOrManifest, *, storage_options: dict[str, Any] | None = None) -> Manifest:
    if isinstance(manifest, Manifest):
        return manifest
    return Manifest.from_json(os.fspath(manifest), storage_options=storage_options)


def open_store(
    manifest: PathOrManifest,
    *,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    source_urls: dict[str, str] | None = None,
    verify: bool = True,
) -> ManifestStore:
    """A :class:`ManifestStore` for a manifest object or file.

    With ``verify`` (the default) each source is checked once (one HEAD or stat) and a
    source that changed since indexing raises :class:`~h5lens.errors.StaleSourceError`.
    """
    loaded = load_manifest(manifest, storage_options=storage_options)
    options = source_options if source_options is not None else storage_options
    store = ManifestStore(loaded, source_options=options, source_urls=source_urls)
    if verify:
        store.verify_sources()
    return store


def open_group(
    manifest: PathOrManifest,
    *,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    source_urls: dict[str, str] | None = None,
    verify: bool = True,
) -> zarr.Group:
    """Open a manifest (object, path or URL) as a read-only zarr v3 group.

    ``storage_options`` apply to reading the manifest and, unless ``source_options``
    is given, to the source files it points at. ``source_urls`` maps recorded source
    URLs to others (a moved bucket, a local mirror). ``verify=False`` skips the check
    that sources are unchanged since indexing.
    """
    store = open_store(
        manifest,
        storage_options=storage_options,
        source_options=source_options,
        source_urls=source_urls,
        verify=verify,
    )
    return zarr.open_group(store, mode="r", zarr_format=3)
