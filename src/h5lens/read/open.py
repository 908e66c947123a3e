"""Open a manifest as a zarr v3 store or group: the reader side, no scanner needed."""

from __future__ import annotations

import os
from typing import Unpack, cast

import zarr

from h5lens.errors import InvalidOptionError, ManifestFormatError, NotAManifestError
from h5lens.format import convention
from h5lens.manifest.model import Manifest
from h5lens.read.linked_files import Indexer
from h5lens.read.options import OpenKwargs, OpenOptions, PathOrManifest, load_manifest
from h5lens.store import ManifestStore

__all__ = [
    "OpenKwargs",
    "OpenOptions",
    "PathOrManifest",
    "load_manifest",
    "load_or_index",
    "open_group",
    "open_store",
    "root_group",
    "store_of",
]


def load_or_index(manifest: PathOrManifest, options: OpenOptions, index: Indexer | None) -> Manifest:
    """The manifest (an object, or a file or repository in any form, whatever its name
    says); an HDF5 file indexed in memory with ``index`` (:func:`h5lens.index`, which the
    API layer passes: this side imports no scanner), refused without one."""
    if isinstance(manifest, Manifest):
        return manifest
    location = os.fspath(manifest)
    storage_options = options.storage_options
    try:  # a manifest in either form, whatever its name says; an HDF5 file is indexed
        return options.load(location)
    except NotAManifestError as e:
        if e.kind != "hdf5":
            raise
        if index is None:
            raise InvalidOptionError(f"{location}: an HDF5 file; pass index=h5lens.index to index it") from None
    return index(location, storage_options=storage_options, convention=convention.DEFAULT_PROFILE)


def open_store(
    manifest: PathOrManifest, *, options: OpenOptions | None = None, **given: Unpack[OpenKwargs]
) -> ManifestStore:
    """A :class:`ManifestStore` for a manifest object, file (JSON or compact) or Icechunk
    repository (``icechunk://PATH``).

    The options (:class:`~h5lens.read.options.OpenOptions`, or the same as keywords):
    ``storage_options``, ``source_options``, ``source_urls``, ``verify`` (the default:
    each source is checked once, one HEAD or stat, and a source that changed since indexing
    raises :class:`~h5lens.errors.StaleSourceError`), ``allow_local`` (what a manifest
    read from a remote URL may read locally) and ``limits``: see docs/security.md.
    """
    return OpenOptions.of(options, given).store(manifest)


def open_group(
    manifest: PathOrManifest, *, options: OpenOptions | None = None, **given: Unpack[OpenKwargs]
) -> zarr.Group:
    """Open a manifest (object, path or URL, ``icechunk://PATH``) as a read-only zarr v3 group.

    ``storage_options`` apply to reading the manifest and, unless ``source_options``
    is given, to the source files it points at. ``source_urls`` maps recorded source
    URLs to others (a moved bucket, a local mirror). ``verify=False`` skips the check
    that sources are unchanged since indexing. The options are those of
    :func:`open_store`.
    """
    return root_group(open_store(manifest, options=options, **given))


def root_group(store: ManifestStore) -> zarr.Group:
    """The root group of ``store``, as ``zarr.open_group(store, mode="r")`` opens it, built
    from its document on the calling thread (no trip to zarr's event loop)."""
    from h5lens.read.consolidated import node_at

    root = store.manifest.nodes.get("")
    where = store.manifest.location or "manifest"
    if root is None:
        raise ManifestFormatError(f"{where}: no root group (the key zarr.json is missing)")
    if root.get("node_type") != "group":
        raise ManifestFormatError(f"{where}: the root is an array; open it with zarr.open_array(h5lens.open_store(...))")
    return cast("zarr.Group", node_at(store, ""))  # a group: its document says so (above)


def store_of(group: zarr.Group) -> ManifestStore:
    """The :class:`ManifestStore` under a group that :func:`open_group` opened (zarr types
    ``group.store`` as any store; this says which one, and refuses any other)."""
    store = group.store
    if not isinstance(store, ManifestStore):
        raise TypeError(f"not a group opened from a manifest: its store is a {type(store).__name__}")
    return store
