"""Open a manifest as a zarr v3 store or group: the reader side, no scanner needed."""

from __future__ import annotations

import os
from typing import Any

import zarr

from h5lens.manifest.model import Manifest
from h5lens.store import ManifestStore

PathOrManifest = Manifest | str | os.PathLike[str]


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


def store_of(group: zarr.Group) -> ManifestStore:
    """The :class:`ManifestStore` under a group that :func:`open_group` opened (zarr types
    ``group.store`` as any store; this says which one, and refuses any other)."""
    store = group.store
    if not isinstance(store, ManifestStore):
        raise TypeError(f"not a group opened from a manifest: its store is a {type(store).__name__}")
    return store
