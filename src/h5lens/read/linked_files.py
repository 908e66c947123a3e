"""Where the file an external link names is found: its manifest, or the file indexed on the fly.

The order (:mod:`h5lens.read.navigate` describes it for users): a manifest ``<source>.json``
beside the referring manifest (``source`` resolved against the manifest's own location,
for manifests kept apart from the data), then a manifest ``<file>.json`` beside the linked
HDF5 file, then the linked HDF5 file itself, indexed by the ``index`` function given
(:func:`h5lens.index`). This module never imports the scanner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from h5lens.errors import SourceNotFoundError
from h5lens.manifest.locations import resolve
from h5lens.manifest.model import Manifest
from h5lens.read.options import OpenOptions

# index(url, storage_options=..., convention=...) -> the manifest of an HDF5 file that has
# none yet: h5lens.index is one
Indexer = Callable[..., Manifest]


def load_external(
    manifest: Manifest, source: str, *, options: OpenOptions | None = None, index: Indexer | None = None
) -> Manifest:
    """The manifest of the file an external link of ``manifest`` names as ``source``.

    The order of the module docstring: ``<source>.json`` beside the manifest, then
    ``<file>.json`` beside the linked HDF5 file, then the HDF5 file indexed on the fly
    with ``index`` (``h5lens.index``); without one, a missing manifest is an error.
    """
    options = options or OpenOptions()
    storage_options = options.storage_options
    target = external_url(manifest, source)
    candidates = []
    if manifest.location is not None:
        candidates.append(resolve(source + ".json", manifest.location))
    candidates.append(target + ".json")
    for candidate in dict.fromkeys(candidates):
        if exists(candidate, storage_options):
            return options.load(candidate)
    if not exists(target, storage_options):
        raise SourceNotFoundError(
            f"external link source {source!r}: neither {target!r} nor a manifest "
            f"({' or '.join(dict.fromkeys(candidates))}) exists"
        )
    if index is None:
        raise SourceNotFoundError(
            f"external link source {source!r}: no manifest ({' or '.join(dict.fromkeys(candidates))}); "
            "pass index=h5lens.index to index it on the fly"
        )
    return index(target, storage_options=storage_options, convention=manifest.convention)


def external_url(manifest: Manifest, source: str) -> str:
    """``source`` resolved against the directory of the manifest's HDF5 file."""
    base = resolve(manifest.sources[0].url, manifest.location) if manifest.sources else None
    return resolve(source, base)


def exists(url: str, storage_options: dict[str, Any] | None) -> bool:
    """Whether ``url`` names a file there is (:func:`h5lens.fetch.exists`: one stat)."""
    from h5lens.fetch.clients import exists as file_exists

    return file_exists(url, storage_options)


__all__ = ["Indexer", "exists", "external_url", "load_external"]
