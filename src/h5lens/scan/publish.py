"""``h5lens publish``: index, check, and write a manifest where others will read it."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from h5lens.errors import H5LensError, InvalidOptionError, ManifestFormatError, SourceReadError, StorageError
from h5lens.manifest import io
from h5lens.manifest.destination import check_destination, refuse_local_sources
from h5lens.manifest.documents import chunk_shape_of
from h5lens.manifest.locations import absolute, is_remote, local_path
from h5lens.manifest.model import MISSING, Manifest, Source
from h5lens.scan.report import summarize

SAMPLE_CHUNKS_PER_ARRAY = 2


@dataclass
class PublishReport:
    destination: str
    manifest_bytes: int
    checked_chunks: int
    summary: dict[str, int]
    form: str = "json"  # "json" or "compact"


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
        if not isinstance(array, zarr.Array):  # a chunk table belongs to an array node
            raise ManifestFormatError(f"/{path}: chunks recorded for a node zarr opens as a group")
        chunk_shape = chunk_shape_of(manifest.nodes[path])
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
    format: str | None = None,  # noqa: A002 - as Manifest.save
    force: bool = False,
    **index_options: Any,
) -> PublishReport:
    """Index ``source``, check that sampled chunks decode, then write ``destination`` atomically.

    ``url`` records another location for the source (a manifest built from a local copy
    that points at the bucket): that location's own identity (size, and ETag or mtime)
    is recorded, so readers' change check guards the object they will read; it must be
    reachable and of the indexed size, and the sampled chunks are read from it.

    Nothing is written at ``destination`` unless every step succeeds: the destination is
    checked first (never one of the sources; its directory or bucket must exist), the
    manifest is written under a temporary name, read back and compared, and only then
    moved into place. An existing file there that is not a manifest is replaced only with
    ``force``; a manifest for object storage must not point at a local path (give ``url``).
    Sources in the destination's directory or above it are recorded relative to it.
    """
    import h5lens

    options = source_options or storage_options
    check_destination(destination, sources=[source, url], storage_options=storage_options, force=force)
    refuse_local_sources(destination, [url if url is not None else absolute(source)])
    io.choose_format_for(destination, format)  # a form the name contradicts: refused before the scan
    manifest = h5lens.index(source, storage_options=options, **index_options)
    if url is not None:
        manifest = with_source_url(manifest, url)
        manifest = replace(manifest, sources=[_identity_at(url, manifest.sources[0], options)])
    checked = check_sample(manifest, source_options=options)
    form = _write_checked(manifest, destination, storage_options, format)
    size = _size(destination, storage_options)
    return PublishReport(destination, size, checked, summarize(manifest), form)


def _identity_at(url: str, indexed: Source, options: dict[str, Any] | None) -> Source:
    """The source as found at ``url``: it must be there, and as big as the file indexed."""
    from h5lens.fetch import open_client

    client = open_client(url, options)
    try:
        found = client.stat(fingerprint=not is_remote(url), probe=True)
    except H5LensError as e:
        raise type(e)(f"url={url}: cannot be reached to record its identity ({e})").at_cli(
            f"--url {url}: cannot be reached to record its identity ({e})"
        ) from None
    finally:
        client.close()
    if found.get("size") is not None and indexed.size is not None and found["size"] != indexed.size:
        said = f"{url}: holds {found['size']} bytes, the file indexed {indexed.size}: not the same file"
        raise InvalidOptionError(f"url={said}").at_cli(f"--url {said}")
    return Source(url, found.get("size"), found.get("mtime"), found.get("etag"), found.get("fingerprint"))


def _write_checked(
    manifest: Manifest, destination: str, storage_options: dict[str, Any] | None, format: str | None  # noqa: A002
) -> str:
    """Write under a temporary name beside the destination, read it back, compare, then
    move it into place; the temporary copy is removed whatever happens. Returns the form."""
    from h5lens.fetch.backend_errors import anon_requested, storage_error
    from h5lens.manifest.files import write_bytes_atomic

    form = io.choose_format(manifest, format, destination)
    payload = io.encode(io.relative_to(manifest, destination), form)
    remote = is_remote(destination)
    staging = f"{destination}.{uuid.uuid4().hex[:12]}.h5lens-staging"
    fs = None
    try:
        write_bytes_atomic(staging, payload, storage_options=storage_options)
        written = Manifest.load(staging, storage_options=storage_options)
        expected = io.relative_to(manifest, destination)
        if written.to_dict() != replace(expected, location=written.location).to_dict():
            raise StorageError(f"{destination}: the manifest read back differs from the one written")
        if remote:
            import fsspec

            try:
                fs, path = fsspec.core.url_to_fs(destination, **(storage_options or {}))
                fs.copy(fs._strip_protocol(staging), path)  # server-side: the object appears whole
            except Exception as e:  # noqa: BLE001
                raise storage_error(e, destination, "writing", anon=anon_requested(storage_options)) from e
        else:
            os.replace(staging.removeprefix("file://"), destination.removeprefix("file://"))
    finally:
        _remove_quietly(staging, fs, storage_options)
    return form


def _remove_quietly(path: str, fs: Any, storage_options: dict[str, Any] | None) -> None:
    if not is_remote(path):
        local = local_path(path)
        if os.path.exists(local):
            os.unlink(local)
        return
    try:
        if fs is None:
            import fsspec

            fs, _ = fsspec.core.url_to_fs(path, **(storage_options or {}))
        fs.rm_file(fs._strip_protocol(path))
    except Exception:  # noqa: BLE001 - best effort: the staging object may never have been written
        pass


def _size(path: str, storage_options: dict[str, Any] | None) -> int:
    if "://" not in path:
        return os.path.getsize(path)
    import fsspec

    fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    return int(fs.info(fs_path)["size"])
