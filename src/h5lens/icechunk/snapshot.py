"""An Icechunk snapshot read back as a manifest: the documents of its nodes, its virtual
references and inline chunks, and the sources h5lens recorded when it committed them.

Read this way, ``icechunk://PATH`` opens through every h5lens opener (``h5lens.open``,
``open_group``, ``read_anndata``, the xarray engine, ``validate``, the command line), reads
through h5lens's own fetch and decode path, and is verified as every manifest is: a
source rewritten since indexing is refused by the size, ETag or modification time the
commit recorded. Icechunk's own store (``repo.readonly_session(...).store``) remains the
way to read it with zarr alone.

References stay references; chunks Icechunk holds itself (the inline chunks of the
manifest, kept by Icechunk inline or, above its inline threshold, as chunk objects of the
repository) become inline chunks again. A snapshot another writer made reads the same
way: sources it references without h5lens's record are checked only for being there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import numpy as np

from h5lens.errors import H5LensError, InvalidOptionError, ManifestFormatError
from h5lens.manifest.checks import check_node_path, check_ranges, check_vlen_inline, grid_shape_of
from h5lens.manifest.documents import check_documents
from h5lens.manifest.limits import DEFAULT_LIMITS, Limits
from h5lens.manifest.tables import ChunkTable, ChunkTableBuilder, ManifestParts, Source, parts_of_file
from h5lens.manifest.zarr_keys import DEFAULT_ENCODING, chunk_key, join, metadata_key

if TYPE_CHECKING:
    from icechunk.store import IcechunkStore

SCHEME = "icechunk://"
METADATA_KEY = "h5lens"  # the commit metadata to_icechunk writes (h5lens.icechunk.commit)
_NATIVE, _VIRTUAL, _INLINE = 1, 2, 3  # icechunk.ChunkType values, as array_chunk_iterator gives them
_BATCH = 100_000  # chunk references per batch Icechunk hands back
_CONCURRENT = 256  # documents read at once


def is_icechunk(location: str) -> bool:
    return location.startswith(SCHEME)


def read_parts(
    text: str,
    *,
    storage_options: dict[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> ManifestParts:
    """The manifest committed in the repository ``icechunk://PATH`` names (a local directory
    or ``icechunk://s3://BUCKET/PREFIX``): at the tip of ``main``, or of the version a
    fragment names (``#branch=NAME``, ``#tag=NAME``, ``#snapshot=ID``).

    The manifest's location names the snapshot read (``icechunk://PATH#snapshot=ID``): what
    reads it again (a dask worker) reads the same snapshot, whatever the branch holds by then.
    """
    from h5lens.icechunk.containers import require_icechunk
    from h5lens.icechunk.repository import icechunk_error, open_repository, parse_destination

    require_icechunk(f"reading {text}")
    import icechunk
    from zarr.core.sync import sync

    repository, version = split_version(text)
    location = parse_destination(repository)
    repo = open_repository(location, storage_options=storage_options, create=False)
    try:
        kind, name = version
        if kind == "tag":
            session = repo.readonly_session(tag=name)
        elif kind == "snapshot":
            session = repo.readonly_session(snapshot_id=name)
        else:
            session = repo.readonly_session(branch=name)
        record = repo.lookup_snapshot(session.snapshot_id).metadata.get(METADATA_KEY)
        return sync(_read(session.store, f"{repository}#snapshot={session.snapshot_id}", record, limits))
    except icechunk.IcechunkError as e:
        raise icechunk_error(e, text) from e


_VERSIONS = ("branch", "tag", "snapshot")


def split_version(text: str) -> tuple[str, tuple[str, str]]:
    """``icechunk://PATH#KIND=NAME`` → (``icechunk://PATH``, (KIND, NAME)); ``main`` by default."""
    repository, hash_, fragment = text.partition("#")
    if not hash_:
        return text, ("branch", "main")
    kind, equals, name = fragment.partition("=")
    if kind not in _VERSIONS or not equals or not name.strip():
        raise InvalidOptionError(
            f"{text}: after '#', name a version as branch=NAME, tag=NAME or snapshot=ID"
        )
    return repository, (kind, name)


async def _read(store: IcechunkStore, where: str, record: Any, limits: Limits) -> ManifestParts:
    record = record if isinstance(record, Mapping) else {}
    nodes = await _documents(store, where, limits)
    check_documents(nodes, limits=limits)
    sources = _recorded_sources(record, where)
    numbers = {uri: i for i, uri in enumerate(_uris(record))}
    chunks: dict[str, ChunkTable] = {}
    total = 0
    for path, doc in nodes.items():
        if doc.get("node_type") != "array":
            continue
        grid = grid_shape_of(doc)
        limits.check_grid(grid, "/" + path)
        chunks[path] = await _table(store, path, grid, sources, numbers)
        total += chunks[path].n_present
        limits.check("chunk references:", total, "chunk_refs", where)
    for path, table in chunks.items():
        check_ranges(path, table, sources, DEFAULT_ENCODING)
        check_vlen_inline(path, nodes[path], table, DEFAULT_ENCODING)
    return parts_of_file(
        record, nodes=nodes, chunks=chunks, sources=sources, location=where, recorded=None, writer_key="writer"
    )


async def _documents(store: IcechunkStore, where: str, limits: Limits) -> dict[str, dict[str, Any]]:
    """Every node's ``zarr.json``, parents first, a level of the tree at a time."""
    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()
    gate = asyncio.Semaphore(_CONCURRENT)

    async def document(path: str) -> dict[str, Any] | None:
        async with gate:
            found = await store.get(metadata_key(path), prototype)
        if found is None:
            return None
        raw = found.to_bytes()
        limits.check("a document of", len(raw), "document_bytes", "/" + path)
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise ManifestFormatError(f"{where}: /{path}: zarr.json is not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise ManifestFormatError(f"{where}: /{path}: zarr.json is not a JSON object")
        return doc

    async def children(path: str) -> list[str]:
        async with gate:
            return [join(path, name) async for name in store.list_dir(path) if name != "zarr.json"]

    root = await document("")
    if root is None:
        raise ManifestFormatError(f"{where}: no root group (the key zarr.json is missing)")
    nodes = {"": root}
    level = [""] if root.get("node_type") == "group" else []
    while level:
        candidates = [c for names in await asyncio.gather(*(children(p) for p in level)) for c in names]
        found = await asyncio.gather(*(document(c) for c in candidates))
        level = []
        for path, doc in zip(candidates, found, strict=True):
            if doc is None:  # a group's chunk-less prefix, not a node
                continue
            check_node_path(metadata_key(path), path)
            nodes[path] = doc
            if doc.get("node_type") == "group":
                level.append(path)
    return nodes


def _uris(record: Mapping[str, Any]) -> list[str]:
    entries = record.get("sources") or []
    return [e["url"] for e in entries if isinstance(e, Mapping) and isinstance(e.get("url"), str)]


def _recorded_sources(record: Mapping[str, Any], where: str) -> list[Source]:
    """The sources as h5lens recorded them (their URLs as h5lens reads them: local paths,
    S3 keys unquoted), with what identifies each version."""
    entries = record.get("sources") or []
    if not isinstance(entries, list):
        raise ManifestFormatError(f"{where}: the commit's h5lens.sources is not a list")
    sources = []
    for entry in entries:
        source = Source.from_dict(dict(entry) if isinstance(entry, Mapping) else entry)
        sources.append(Source(reader_url(source.url), source.size, source.mtime, source.etag, source.fingerprint))
    return sources


def reader_url(uri: str) -> str:
    """The URL h5lens reads for one Icechunk records (which percent-encodes local paths and
    S3 keys: see h5lens.icechunk.containers)."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return url2pathname(parts.path)
    if parts.scheme == "s3":
        return f"s3://{parts.netloc}/{unquote(parts.path.lstrip('/'))}"
    return uri


async def _table(
    store: IcechunkStore, path: str, grid: tuple[int, ...], sources: list[Source], numbers: dict[str, int]
) -> ChunkTable:
    """The chunk table of one array from Icechunk's columns of references (no Python object
    per chunk but for inline ones)."""
    builder = ChunkTableBuilder(grid)
    async for coords, kinds, paths, offsets, lengths, inlined in store.array_chunk_iterator("/" + path, batch_size=_BATCH):
        flat: np.ndarray = np.asarray(
            np.ravel_multi_index(tuple(np.asarray(coords, dtype=np.int64).T), grid)
            if grid
            else np.zeros(len(kinds), dtype=np.int64)
        )
        kinds = np.asarray(kinds)
        native = np.flatnonzero(kinds == _NATIVE)
        if native.size:
            # the manifest's inline chunks above Icechunk's inline threshold: stored as
            # chunk objects of the repository, inline again in the manifest
            builder.set_inline(flat[native], await _native(store, path, np.asarray(coords)[native]))
        virtual = np.flatnonzero(kinds == _VIRTUAL)
        if virtual.size:
            column = _source_numbers([paths[i] for i in virtual.tolist()], sources, numbers)
            builder.refer(flat[virtual], np.asarray(offsets)[virtual], np.asarray(lengths)[virtual], column)
        inline = np.flatnonzero(kinds == _INLINE)
        if inline.size:
            builder.set_inline(flat[inline], [bytes(inlined[i]) for i in inline.tolist()])
    try:
        return builder.build()
    except H5LensError as e:
        raise ManifestFormatError(f"/{path}: {e}") from None


async def _native(store: IcechunkStore, path: str, coords: np.ndarray) -> list[bytes]:
    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()
    gate = asyncio.Semaphore(_CONCURRENT)

    async def one(index: tuple[int, ...]) -> bytes:
        async with gate:
            found = await store.get(chunk_key(path, index, DEFAULT_ENCODING), prototype)
        if found is None:
            raise ManifestFormatError(f"/{path}: chunk {index} is listed by Icechunk but cannot be read")
        return found.to_bytes()

    return list(await asyncio.gather(*(one(tuple(int(i) for i in row)) for row in coords)))


def _source_numbers(uris: list[str], sources: list[Source], numbers: dict[str, int]) -> np.ndarray:
    """Each reference's source number; a URL the commit did not record (a snapshot another
    writer made) becomes a source of unknown version, checked only for being there."""
    if uris[0] in numbers and uris.count(uris[0]) == len(uris):  # the usual case: one source
        return np.full(len(uris), numbers[uris[0]], dtype=np.int32)
    column = np.empty(len(uris), dtype=np.int32)
    for i, uri in enumerate(uris):
        number = numbers.get(uri)
        if number is None:
            number = numbers[uri] = len(sources)
            sources.append(Source(reader_url(uri)))
        column[i] = number
    return column
