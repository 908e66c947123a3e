"""Open a manifest as a zarr v3 store or group: the reader side, no scanner needed."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import zarr

from h5lens.errors import ManifestFormatError
from h5lens.manifest.limits import Limits
from h5lens.manifest.model import Manifest
from h5lens.store import ManifestStore

PathOrManifest = Manifest | str | os.PathLike[str]


def load_manifest(
    manifest: PathOrManifest, *, storage_options: dict[str, Any] | None = None, limits: Limits | None = None
) -> Manifest:
    if isinstance(manifest, Manifest):
        return manifest
    return Manifest.load(os.fspath(manifest), storage_options=storage_options, limits=limits)


def open_store(
    manifest: PathOrManifest,
    *,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    source_urls: dict[str, str] | None = None,
    verify: bool = True,
    allow_local: Iterable[str] | bool = (),
    limits: Limits | None = None,
) -> ManifestStore:
    """A :class:`ManifestStore` for a manifest object or file.

    With ``verify`` (the default) each source is checked once (one HEAD or stat) and a
    source that changed since indexing raises :class:`~h5lens.errors.StaleSourceError`.
    A manifest read from a remote URL may not read local files unless ``allow_local``
    names them (path prefixes, or True); a manifest that claims more than ``limits``
    (:class:`~h5lens.manifest.limits.Limits`) is refused: see docs/security.md.
    """
    loaded = load_manifest(manifest, storage_options=storage_options, limits=limits)
    options = source_options if source_options is not None else storage_options
    store = ManifestStore(loaded, source_options=options, source_urls=source_urls, allow_local=allow_local)
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
    allow_local: Iterable[str] | bool = (),
    limits: Limits | None = None,
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
        allow_local=allow_local,
        limits=limits,
    )
    root = store.manifest.nodes.get("")
    where = store.manifest.location or "manifest"
    if root is None:
        raise ManifestFormatError(f"{where}: no root group (the key zarr.json is missing)")
    if root.get("node_type") != "group":
        raise ManifestFormatError(f"{where}: the root is an array; open it with zarr.open_array(h5lens.open_store(...))")
    return zarr.open_group(store, mode="r", zarr_format=3)


def store_of(group: zarr.Group) -> ManifestStore:
    """The :class:`ManifestStore` under a group that :func:`open_group` opened (zarr types
    ``group.store`` as any store; this says which one, and refuses any other)."""
    store = group.store
    if not isinstance(store, ManifestStore):
        raise TypeError(f"not a group opened from a manifest: its store is a {type(store).__name__}")
    return store
