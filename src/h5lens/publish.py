"""``h5lens publish``: index, check, and write a manifest where others will read it."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from h5lens.errors import H5LensError, SourceReadError
from h5lens.manifest.model import MISSING, Manifest
from h5lens.report import summarize

SAMPLE_CHUNKS_PER_ARRAY = 2


@dataclass
class PublishReport:
    destination: str
    manifest_bytes: int
    checked_chunks: int
    summary: dict[str, int]


def with_source_url(manifest: Manifest, url: str) -> Manifest:
    """The same manifest with its (single) source recorded under another URL."""
    if len(manifest.sources) != 1:
        raise H5LensError(f"expected a manifest with one source to rewrite, found {len(manifest.sources)}")
    return replace(manifest, sources=[replace(manifest.sources[0], url=url)])


def check_sample(
    manifest: Manifest, *, source_options: dict[str, Any] | None = None, per_array: int = SAMPLE_CHUNKS_PER_ARRAY
) -> int:
    """Decode the first and last present chunk of every array through zarr; return how many."""
    import zarr

    from h5lens.store import ManifestStore

    store = ManifestStore(manifest, source_options=source_options)
    store.verify_sources()
    group = zarr.open_group(store, mode="r", zarr_format=3)
    checked = 0
    for path, table in manifest.chunks.items():
        present = np.flatnonzero(table.source.reshape(-1) != MISSING)
        if present.size == 0:
            continue
        chosen = sorted({int(present[0]), int(present[-1])})[:per_array]
        array = group[path]
        chunk_shape = tuple(manifest.nodes[path]["chunk_grid"]["configuration"]["chunk_shape"])
        for flat in chosen:
            index = np.unravel_index(flat, table.grid_shape) if table.grid_shape else ()
            selection = tuple(
                slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunk_shape, array.shape, strict=True)
            )
            try:
                array[selection]
            except H5LensError:
                raise
            except Exception as e:
                raise SourceReadError(f"/{path}: chunk {tuple(int(i) for i in index)} does not decode ({e})") from e
            checked += 1
    return checked


def publish(
    source: str,
    destination: str,
    *,
    url: str | None = None,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    **index_options: Any,
) -> PublishReport:
    """Index ``source``, check that sampled chunks decode, then write ``destination`` atomically.

    ``url`` records another URL for the source (a manifest built from a local copy that
    points at the bucket); the check then reads from that URL. Nothing is written at
    ``destination`` unless every step succeeds.
    """
    import h5lens
    from h5lens.manifest.refs_json import read_json

    manifest = h5lens.index(source, storage_options=source_options or storage_options, **index_options)
    if url is not None:
        manifest = with_source_url(manifest, url)
    checked = check_sample(manifest, source_options=source_options or storage_options)
    manifest.to_json(destination, storage_options=storage_options)
    # Read back what landed: the bytes at the destination must be this manifest.
    written = read_json(destination, storage_options=storage_options)
    if written.to_dict() != manifest.to_dict():
        raise H5LensError(f"{destination}: the manifest read back differs from the one written")
    size = _size(destination, storage_options)
    return PublishReport(destination, size, checked, summarize(manifest))


def _size(path: str, storage_options: dict[str, Any] | None) -> int:
    if "://" not in path:
        return os.path.getsize(path)
    import fsspec

    fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    return int(fs.info(fs_path)["size"])
