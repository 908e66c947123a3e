"""Manifests in files: the one place that knows the file formats.

The model (:mod:`h5lens.manifest.model`) holds a manifest in memory and knows no format;
its ``to_json`` / ``from_json`` / ``to_dict`` / ``from_dict`` conveniences come here.
Today's format is kerchunk reference JSON version 1 with zarr v3 keys
(:mod:`h5lens.manifest.refs_json`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from h5lens.manifest.model import Manifest


def to_dict(manifest: Manifest) -> dict[str, Any]:
    """The kerchunk reference JSON (version 1, zarr v3 keys) as a dict."""
    from h5lens.manifest.refs_json import manifest_to_refs

    return manifest_to_refs(manifest)


def from_dict(data: dict[str, Any]) -> Manifest:
    from h5lens.manifest.refs_json import manifest_from_refs

    return manifest_from_refs(data)


def write(manifest: Manifest, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> None:
    """Write ``manifest`` at ``path`` (local or fsspec URL) atomically, never over one of its sources."""
    from h5lens.manifest.refs_json import write_json

    write_json(manifest, os.fspath(path), storage_options=storage_options)


def read(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> Manifest:
    """Read a manifest file (local or fsspec URL)."""
    from h5lens.manifest.refs_json import read_json

    return read_json(os.fspath(path), storage_options=storage_options)
