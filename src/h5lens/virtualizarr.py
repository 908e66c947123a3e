"""h5lens as a VirtualiZarr parser: ``open_virtual_dataset(url, parser=H5LensParser(), registry=...)``.

VirtualiZarr (≥ 2.8) takes parsers: objects called with ``(url, registry)`` that return its
``ManifestStore``. :class:`H5LensParser` indexes the file with h5lens (or takes a manifest
made before) and hands VirtualiZarr the same arrays, chunk references and inline chunks
h5lens would serve itself, so its writers (kerchunk, Icechunk) and its combining get what
h5lens reads: compact datasets, LZF, chunks that skip filters, fletcher32, object
references, links.

How each part of a manifest becomes VirtualiZarr's (see docs/xarray.md):

* chunk references → virtual references ``[url, offset, length]`` (the source URL as an
  absolute URI, as VirtualiZarr requires); absent chunks → missing (the fill value);
* inline chunks (small arrays, materialised data: vlen strings, object references as
  paths, compact datasets, filters without a codec) → VirtualiZarr's inlined chunks,
  which its kerchunk writer writes as ``base64:`` references and its Icechunk writer as
  native chunks;
* ``zarr.json`` documents → ``ArrayV3Metadata`` unchanged (codecs, fill values, attributes
  of the unified convention: ``_DTYPE``, ``_LINKS``, ``{"_REFERENCE": …}``);
* arrays without ``dimension_names`` (HDF5 that is not netCDF: no dimension scales) get
  netCDF-C's phony names, ``phony_dim_<n>``, as xarray's h5netcdf engine names them with
  ``phony_dims="sort"``: VirtualiZarr's xarray layer needs a name for every axis.

This module imports VirtualiZarr only when used (``pip install 'h5lens[virtualizarr]'``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from h5lens.errors import H5LensError, InvalidOptionError
from h5lens.manifest.documents import ArrayDocument
from h5lens.manifest.model import INLINE, MISSING, ChunkTable, Manifest

if TYPE_CHECKING:
    from obspec_utils.registry import ObjectStoreRegistry
    from virtualizarr.manifests import ChunkManifest, ManifestArray, ManifestGroup, ManifestStore

__all__ = ["H5LensParser", "manifest_group", "manifest_store"]


def _require_virtualizarr() -> None:
    try:
        import virtualizarr  # noqa: F401
    except ImportError as e:
        raise ImportError("h5lens.virtualizarr needs VirtualiZarr >= 2.8: pip install 'h5lens[virtualizarr]'") from e


class H5LensParser:
    """A VirtualiZarr parser backed by h5lens.

    Parameters
    ----------
    manifest
        A manifest made before (object, or path/URL of a manifest file): used as it is
        instead of indexing ``url`` (its recorded source URLs must resolve in the registry).
    group
        The group to open as the root (``"obs"``, ``"/a/b"``); default the file's root.
    drop_variables
        Arrays of that group to leave out.
    storage_options
        fsspec options for indexing a remote ``url`` (h5lens reads the file's metadata
        through fsspec; chunk reads afterwards go through the registry), or for reading
        ``manifest``.
    index_options
        Passed to :func:`h5lens.index` (``inline_threshold``, ``materialize_limit``…).
    """

    def __init__(
        self,
        *,
        manifest: Manifest | str | os.PathLike[str] | None = None,
        group: str | None = None,
        drop_variables: Iterable[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        **index_options: Any,
    ) -> None:
        _require_virtualizarr()
        if manifest is not None and index_options:
            raise InvalidOptionError(f"index options {sorted(index_options)} given with a manifest made before")
        self.manifest = manifest
        self.group = group
        self.drop_variables = tuple(drop_variables or ())
        self.storage_options = storage_options
        self.index_options = index_options

    def __call__(self, url: str, registry: ObjectStoreRegistry) -> ManifestStore:
        """Index ``url`` (or load the manifest given) and return VirtualiZarr's ``ManifestStore``."""
        return manifest_store(self.load(url), registry, group=self.group, drop_variables=self.drop_variables)

    def load(self, url: str) -> Manifest:
        """The h5lens manifest this parser presents for ``url``."""
        if self.manifest is not None:
            from h5lens.read.open import load_manifest

            return load_manifest(self.manifest, storage_options=self.storage_options)
        from h5lens.api import index

        location = url.removeprefix("file://") if url.startswith("file://") else url
        return index(location, storage_options=self.storage_options, url=_uri(url), **self.index_options)


def _uri(url: str) -> str:
    """An absolute URI, as VirtualiZarr's chunk manifests require."""
    from virtualizarr.manifests.manifest import validate_and_normalize_path_to_uri

    if "://" not in url:
        url = os.path.abspath(url)
    return validate_and_normalize_path_to_uri(url)


def _source_uris(manifest: Manifest) -> list[str]:
    from h5lens.manifest.locations import resolve

    return [_uri(resolve(source.url, manifest.location)) for source in manifest.sources]


def manifest_store(
    manifest: Manifest,
    registry: ObjectStoreRegistry | None = None,
    *,
    group: str | None = None,
    drop_variables: Iterable[str] = (),
) -> ManifestStore:
    """VirtualiZarr's ``ManifestStore`` for an h5lens manifest, reading through ``registry``."""
    _require_virtualizarr()
    from virtualizarr.manifests import ManifestStore

    return ManifestStore(manifest_group(manifest, group=group, drop_variables=drop_variables), registry=registry)


def manifest_group(
    manifest: Manifest, *, group: str | None = None, drop_variables: Iterable[str] = ()
) -> ManifestGroup:
    """VirtualiZarr's ``ManifestGroup`` for the group ``group`` of an h5lens manifest."""
    _require_virtualizarr()
    root = (group or "").strip("/")
    if root not in manifest.nodes or manifest.nodes[root].get("node_type") != "group":
        raise H5LensError(f"/{root}: not a group of the manifest")
    urls = _source_uris(manifest)
    names = _phony_names(manifest)
    return _group(manifest, root, urls, names, set(drop_variables))


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _group(manifest: Manifest, key: str, urls: list[str], names: dict[str, list[str]], drop: set[str]) -> ManifestGroup:
    from virtualizarr.manifests import ManifestGroup

    arrays: dict[str, ManifestArray] = {}
    groups: dict[str, ManifestGroup] = {}
    for name in manifest.children(key):
        if name in drop:
            continue
        child = _join(key, name)
        doc = manifest.nodes[child]
        if doc.get("node_type") == "group":
            groups[name] = _group(manifest, child, urls, names, set())
        else:
            arrays[name] = _array(manifest, child, urls, names.get(child))
    return ManifestGroup(arrays=arrays, groups=groups, attributes=dict(manifest.nodes[key].get("attributes") or {}))


def _array(manifest: Manifest, key: str, urls: list[str], dims: list[str] | None) -> ManifestArray:
    from virtualizarr.manifests import ManifestArray
    from zarr.core.metadata.v3 import ArrayV3Metadata

    doc = dict(manifest.nodes[key])
    if doc.get("dimension_names") is None and dims is not None:
        doc["dimension_names"] = dims
    try:
        metadata = ArrayV3Metadata.from_dict(doc)
    except (TypeError, ValueError) as e:
        raise H5LensError(f"/{key}: VirtualiZarr cannot hold this array's metadata ({e})") from e
    return ManifestArray(metadata=metadata, chunkmanifest=_chunk_manifest(manifest.chunks[key], urls, key))


def _chunk_manifest(table: ChunkTable, urls: list[str], key: str) -> ChunkManifest:
    from virtualizarr.manifests import ChunkManifest
    from virtualizarr.manifests.manifest import INLINED_CHUNK_PATH, MISSING_CHUNK_PATH

    grid = table.grid_shape
    source = table.source
    paths = np.full(grid, MISSING_CHUNK_PATH, dtype=np.dtypes.StringDType())
    for number in np.unique(source[source >= 0]).tolist():
        if number >= len(urls):
            raise H5LensError(f"/{key}: a chunk refers to source {number}, which the manifest does not list")
        paths[source == number] = urls[number]
    paths[source == INLINE] = INLINED_CHUNK_PATH
    offsets = np.where(source >= 0, table.offset, 0).astype(np.uint64)
    lengths = np.where(source == MISSING, 0, table.length).astype(np.uint64)
    inlined = {
        tuple(int(i) for i in np.unravel_index(flat, grid)) if grid else (): payload
        for flat, payload in table.inline.items()
    }
    return ChunkManifest.from_arrays(
        paths=paths, offsets=offsets, lengths=lengths, validate_paths=False, inlined=inlined
    )


def _phony_names(manifest: Manifest) -> dict[str, list[str]]:
    """netCDF-C's phony dimension names (h5netcdf's ``phony_dims="sort"``) for the arrays
    that have no ``dimension_names``: per group, as many ``phony_dim_<n>`` of each length
    as one array needs, numbered through the file in group order."""
    names: dict[str, list[str]] = {}
    count = 0
    pending = [""]
    while pending:
        key = pending.pop(0)
        children = [_join(key, name) for name in manifest.children(key)]
        views = {child: ArrayDocument.of(manifest.nodes[child]) for child in children}
        shapes = {child: view.shape for child, view in views.items() if view is not None and view.dimension_names is None}
        wanted: Counter[int] = Counter()
        for shape in shapes.values():
            wanted |= Counter(shape)
        by_size: dict[int, list[str]] = {}
        for size, n in wanted.items():
            by_size[size] = [f"phony_dim_{count + i}" for i in range(n)]
            count += n
        for child, shape in shapes.items():
            used: Counter[int] = Counter()
            axes = []
            for size in shape:
                axes.append(by_size[size][used[size]])
                used[size] += 1
            names[child] = axes
        pending[0:0] = [c for c in children if manifest.nodes[c].get("node_type") == "group"]
    return names
