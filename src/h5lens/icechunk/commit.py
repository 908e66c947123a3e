"""What a commit of a manifest writes (documents, virtual references, inline chunks) and
records (its sources and a digest: an unchanged manifest commits nothing)."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from h5lens._version import __version__
from h5lens.errors import (
    H5LensError,
    InvalidOptionError,
    StorageError,
    UnsupportedFeatureError,
    first_line,
)
from h5lens.icechunk.containers import container_prefix, require_icechunk, source_uris
from h5lens.icechunk.repository import check_location, icechunk_error, open_repository, parse_destination
from h5lens.manifest.model import ChunkTable, Manifest, Source
from h5lens.manifest.tables import attribute_types_json, unreadable_json
from h5lens.manifest.zarr_keys import DEFAULT_ENCODING, chunk_key, metadata_key

if TYPE_CHECKING:
    from icechunk import Repository, Session
    from icechunk.store import IcechunkStore

METADATA_KEY = "h5lens"  # the commit metadata h5lens writes, and reads back to skip an unchanged commit
_INLINE_BATCH = 1000  # inline chunks written concurrently


# -- what a commit records ----------------------------------------------------------------------


def _digest(manifest: Manifest) -> str:
    """A SHA-256 of what the commit holds: documents, chunk grids, inline bytes."""
    from h5lens.manifest.refs_json import dumps_document

    h = hashlib.sha256(manifest.convention.encode())
    for path in sorted(manifest.nodes):
        h.update(b"\0node\0" + path.encode() + b"\0" + dumps_document(manifest.nodes[path]).encode())
    for path in sorted(manifest.chunks):
        table = manifest.chunks[path]
        h.update(b"\0chunks\0" + path.encode() + repr(table.grid_shape).encode())
        for grid in (table.source, table.offset, table.length):
            h.update(np.ascontiguousarray(grid).tobytes())
        for flat in sorted(table.inline):
            h.update(flat.to_bytes(8, "little") + table.inline[flat])
    return h.hexdigest()


def _record(manifest: Manifest, uris: list[str]) -> dict[str, Any]:
    sources = [replace(s, url=uri).to_dict() for s, uri in zip(manifest.sources, uris, strict=True)]
    # what a reader needs beside the documents and references to read the manifest back
    # whole (h5lens.icechunk.snapshot): its convention and the attributes' HDF5 types
    record = {
        "writer": f"h5lens {__version__}",
        "convention": manifest.convention,
        "sources": sources,
        "digest": _digest(manifest),
        **attribute_types_json(manifest),
        **unreadable_json(manifest),  # what the scan left out (skip_unreadable), as the other forms say it
    }
    # through JSON, so it compares equal to what Icechunk gives back (lists, floats)
    return dict(json.loads(json.dumps(record)))


def _same(recorded: Any, record: Mapping[str, Any]) -> bool:
    """The branch holds this manifest of these sources (the writer's version aside)."""
    if not isinstance(recorded, Mapping):
        return False
    kept = ("sources", "digest", "convention", "attribute_types", "unreadable")
    return all(recorded.get(key) == record.get(key) for key in kept)


def _checksum(source: Source) -> str | datetime.datetime | None:
    """What Icechunk checks before serving a chunk of ``source``: the ETag, else the
    modification time. Icechunk compares whole seconds (a sub-second time is refused for
    the very file it came from), so the time is rounded up: the file as indexed passes,
    a later modification (in a later second) does not."""
    if source.etag:
        return source.etag
    if source.mtime is not None:
        return datetime.datetime.fromtimestamp(math.ceil(source.mtime), tz=datetime.UTC)
    return None


def _message(record: Mapping[str, Any]) -> str:
    described = []
    for entry in record["sources"]:
        identity = [f"{entry['size']} bytes"] if entry.get("size") is not None else []
        if entry.get("etag"):
            identity.append(f"ETag {entry['etag']}")
        elif entry.get("mtime") is not None:
            identity.append(f"modified {datetime.datetime.fromtimestamp(entry['mtime'], tz=datetime.UTC).isoformat()}")
        described.append(f"{entry['url']} ({', '.join(identity)})" if identity else entry["url"])
    return f"h5lens: references to {'; '.join(described)}"


# -- writing ----------------------------------------------------------------------------------


def to_icechunk(
    manifest: Manifest,
    repo_or_session: Repository | Session,
    *,
    message: str | None = None,
    branch: str = "main",
    storage_options: dict[str, Any] | None = None,
    verify: bool = True,
) -> str:
    """Commit the manifest to an Icechunk repository; return the snapshot id.

    ``repo_or_session`` is an :class:`icechunk.Repository` (written on ``branch``) or a
    writable :class:`icechunk.Session`. The branch's (or session's) content is replaced by
    the manifest's groups, arrays, attributes, inline chunks and virtual references, in
    one commit whose message names the sources (or ``message``) and whose metadata
    records them.

    Given a Repository whose branch already holds this manifest of the same sources (same
    size, ETag or mtime, committed by h5lens), nothing is committed and the branch's
    snapshot id is returned.

    The repository's configuration must declare a virtual chunk container for each
    source (:func:`open_repository` does). With ``verify``, the sources are first checked
    to be the files indexed (size, ETag or mtime; ``storage_options`` are fsspec's, for
    remote sources): references to a file changed since would only be refused later.
    """
    require_icechunk()
    import icechunk

    uris = source_uris(manifest)
    repo: Repository | None = None
    if isinstance(repo_or_session, icechunk.Repository):
        repo = repo_or_session
        config = repo.config
    elif isinstance(repo_or_session, icechunk.Session):
        if repo_or_session.read_only:
            raise InvalidOptionError("to_icechunk needs a writable Icechunk session (repo.writable_session(branch))")
        config = repo_or_session.config
        branch = repo_or_session.branch or branch
    else:
        raise InvalidOptionError(
            f"to_icechunk writes to an icechunk.Repository or a writable icechunk.Session, not {type(repo_or_session).__name__}"
        )
    where = f"Icechunk branch {branch!r}"
    _check_containers(uris, config)
    documents = _documents(manifest)
    if verify:
        _verify_sources(manifest, storage_options)
    record = _record(manifest, uris)

    try:
        if repo is not None:
            if branch not in repo.list_branches():
                raise InvalidOptionError(f"{where}: no such branch (the repository has {sorted(repo.list_branches())})")
            tip = repo.lookup_branch(branch)
            if _same(repo.lookup_snapshot(tip).metadata.get(METADATA_KEY), record):
                return tip
            session = repo.writable_session(branch)
        else:
            session = repo_or_session  # type: ignore[assignment]
        _write(session.store, manifest, documents, uris)
        return session.commit(message or _message(record), metadata={METADATA_KEY: record})
    except icechunk.ConflictError as e:
        raise StorageError(f"{where}: another commit landed while writing ({first_line(e)}); write again") from e
    except icechunk.IcechunkError as e:
        raise icechunk_error(e, where) from e


def _check_containers(uris: list[str], config: Any) -> None:
    # Icechunk would only drop such references (set_virtual_refs_arr returns them as failed)
    declared = list((config.virtual_chunk_containers or {}).keys())
    for uri in uris:
        if not any(uri.startswith(prefix) for prefix in declared):
            raise InvalidOptionError(
                f"{uri}: the Icechunk repository declares no virtual chunk container for this source "
                f"(it has {declared or 'none'}); open it with h5lens.icechunk.open_repository(..., manifest=manifest) "
                f"or declare VirtualChunkContainer({container_prefix(uri)!r}, ...)"
            )


def _verify_sources(manifest: Manifest, storage_options: dict[str, Any] | None) -> None:
    from h5lens.store import ManifestStore

    store = ManifestStore(manifest, source_options=storage_options)
    try:
        store.verify_sources()
    finally:
        store.close()


def _documents(manifest: Manifest) -> dict[str, bytes]:
    """Every node's ``zarr.json`` as Icechunk stores it, checked before anything is written.

    Icechunk parses metadata as strict JSON: the bare ``NaN`` / ``Infinity`` tokens the
    released convention writes for such attributes (as zarr-python does) are refused, by
    Icechunk as for zarr-python's own writes. The proposal convention writes them as strings."""
    documents = {}
    for path, doc in manifest.nodes.items():
        if doc.get("node_type") == "array":
            doc = {**doc, "chunk_key_encoding": DEFAULT_ENCODING.to_json()}
        try:
            documents[path] = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
        except ValueError as e:
            attributes = doc.get("attributes") or {}
            name = next((k for k, v in attributes.items() if not _finite(v)), None)
            what = f"the attribute {name!r}" if name is not None else "its metadata"
            raise UnsupportedFeatureError(
                f"/{path}: {what} holds NaN or Infinity, which Icechunk cannot store (strict JSON); "
                "index with convention='proposal' (--convention proposal), which writes them as strings"
            ) from e
    return documents


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def _write(store: IcechunkStore, manifest: Manifest, documents: dict[str, bytes], uris: list[str]) -> None:
    from zarr.core.sync import sync

    sync(_write_async(store, manifest, documents, uris))


async def _write_async(store: IcechunkStore, manifest: Manifest, documents: dict[str, bytes], uris: list[str]) -> None:
    from zarr.core.buffer import default_buffer_prototype

    buffer = default_buffer_prototype().buffer
    checksums = [_checksum(source) for source in manifest.sources]
    await store.clear()
    # parents before children: Icechunk places a node under its parent group
    for path in sorted(documents, key=lambda p: (p.count("/") + bool(p), p)):
        try:
            await store.set(metadata_key(path), buffer.from_bytes(documents[path]))
        except Exception as e:  # noqa: BLE001 - Icechunk's and zarr's refusals alike, named with the node
            raise StorageError(f"/{path}: Icechunk refused this node ({first_line(e)})") from e
    for path in sorted(manifest.chunks):
        table = manifest.chunks[path]
        try:
            await _set_references(store, path, table, uris, checksums)
            await _set_inline(store, path, table, buffer)
        except H5LensError:
            raise
        except Exception as e:  # noqa: BLE001
            raise StorageError(f"/{path}: Icechunk refused this array's chunks ({first_line(e)})") from e


async def _set_references(
    store: IcechunkStore,
    path: str,
    table: ChunkTable,
    uris: list[str],
    checksums: list[str | datetime.datetime | None],
) -> None:
    """One columnar call per source the array's chunks point into (a checksum is per call):
    the cost follows the number of arrays, not of chunks."""
    flat = table.source.reshape(-1)
    numbers = np.unique(flat[flat >= 0]).tolist()
    if not numbers:
        return
    offsets = np.ascontiguousarray(table.offset.reshape(-1), dtype=np.uint64)
    lengths = np.ascontiguousarray(table.length.reshape(-1), dtype=np.uint64)
    for number in numbers:
        if number >= len(uris):
            raise H5LensError(f"/{path}: a chunk refers to source {number}, which the manifest does not list")
        mine = flat == number
        if mine.all():
            locations = [uris[number]] * flat.size
        else:
            # Icechunk skips empty locations: other sources' chunks, inline and absent ones
            column = np.full(flat.size, "", dtype=object)
            column[mine] = uris[number]
            locations = column.tolist()
        failed = await store.set_virtual_refs_arr_async(
            "/" + path, table.grid_shape, locations, offsets, lengths, checksum=checksums[number]
        )
        if failed:
            raise InvalidOptionError(
                f"/{path}: Icechunk refused {len(failed)} references to {uris[number]} (no virtual chunk container for it)"
            )


async def _set_inline(store: IcechunkStore, path: str, table: ChunkTable, buffer: Any) -> None:
    grid = table.grid_shape
    items = sorted(table.inline.items())
    for start in range(0, len(items), _INLINE_BATCH):
        batch = items[start : start + _INLINE_BATCH]
        keys = [
            chunk_key(path, tuple(int(i) for i in np.unravel_index(flat, grid)) if grid else (), DEFAULT_ENCODING)
            for flat, _ in batch
        ]
        await asyncio.gather(*(store.set(key, buffer.from_bytes(data)) for key, (_, data) in zip(keys, batch, strict=True)))


# -- the command line's destination -------------------------------------------------------------


def check_destination(
    destination: str, *, sources: Iterable[str | None] = (), storage_options: dict[str, Any] | None = None
) -> None:
    """Refuse, before a scan, an ``icechunk://PATH`` that is malformed or cannot hold a
    repository (see :func:`check_location`)."""
    check_location(parse_destination(destination), sources=sources, storage_options=storage_options)


def write_destination(
    destination: str, manifest: Manifest, *, storage_options: dict[str, Any] | None = None
) -> tuple[str, bool]:
    """Commit the manifest to the repository ``icechunk://PATH`` names (created if there is
    none, declaring the containers its sources need), on ``main``; ``storage_options``
    serve the repository and S3 sources alike. Returns the snapshot id and whether a
    commit was made (none when the branch already holds this manifest)."""
    import icechunk

    location = parse_destination(destination)
    _documents(manifest)  # what would be refused, refused before a repository is created
    repo = open_repository(location, manifest=manifest, storage_options=storage_options)
    try:
        before = repo.lookup_branch("main")
    except icechunk.IcechunkError as e:
        raise icechunk_error(e, location) from e
    snapshot = to_icechunk(manifest, repo, storage_options=storage_options)
    return snapshot, snapshot != before
