"""Icechunk as a destination: a manifest committed to an Icechunk repository.

:func:`to_icechunk` writes, in one commit, what a manifest holds:

* every ``zarr.json`` document (groups and arrays, attributes included) as it is, except
  an array's ``chunk_key_encoding``, which becomes zarr's default (``c/0/1``), the one
  Icechunk stores (keys change, values do not);
* chunk references as Icechunk *virtual* references ``[url, offset, length]``, one
  columnar call per array and source, each with the source's identity as the checksum
  Icechunk checks before serving the bytes: the ETag, or else (local files) the
  modification time rounded up to the second; a source modified afterwards is refused,
  not misread;
* inline chunks (small arrays, materialised data) as Icechunk's own chunks;
* absent chunks as nothing (they read as the fill value).

The commit message names the sources; its metadata (``"h5lens"``) records them with a
digest of the manifest, so writing the same manifest of unchanged sources again commits
nothing.

Icechunk reads virtual chunks only through *virtual chunk containers* declared in the
repository's configuration, and only those the reader authorises.
:func:`open_repository` creates or opens a repository declaring and authorising the
containers a manifest needs (``file:///dir/`` for local files, ``s3://bucket/``,
``https://host/``); :func:`virtual_chunk_credentials` gives a reader what to authorise.

Icechunk is imported only when used (``pip install 'h5lens[icechunk]'``).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import numpy as np

from h5lens._version import __version__
from h5lens.errors import (
    AccessDeniedError,
    H5LensError,
    InvalidOptionError,
    SourceNotFoundError,
    StorageError,
    UnsupportedFeatureError,
    first_line,
)
from h5lens.locations import is_remote, local_path
from h5lens.manifest.model import ChunkTable, Manifest, Source
from h5lens.manifest.zarr_keys import DEFAULT_ENCODING, chunk_key, metadata_key

if TYPE_CHECKING:
    from icechunk import Repository, Session, VirtualChunkContainer
    from icechunk.credentials import AnyCredential
    from icechunk.store import IcechunkStore

__all__ = [
    "SCHEME",
    "check_destination",
    "check_location",
    "open_repository",
    "parse_destination",
    "quiet_logs",
    "source_uris",
    "to_icechunk",
    "virtual_chunk_containers",
    "virtual_chunk_credentials",
    "write_destination",
]

SCHEME = "icechunk://"
INSTALL_HINT = "pip install 'h5lens[icechunk]'"
METADATA_KEY = "h5lens"  # the commit metadata h5lens writes, and reads back to skip an unchanged commit
_INLINE_BATCH = 1000  # inline chunks written concurrently


def _require_icechunk() -> None:
    # set_virtual_refs_arr with a checksum and the explicit LocalFileSystemAccess /
    # HttpAccess authorisations are Icechunk 2.3's
    try:
        import icechunk
    except ImportError as e:
        raise InvalidOptionError(f"writing to Icechunk needs the icechunk package (>= 2.3): {INSTALL_HINT}") from e
    version = tuple(int(part) for part in icechunk.__version__.split(".")[:2] if part.isdigit())
    if version < (2, 3):
        raise InvalidOptionError(f"h5lens needs icechunk >= 2.3, found {icechunk.__version__}: {INSTALL_HINT}")


def quiet_logs() -> None:
    """Show only Icechunk's errors on stderr (it warns, e.g., that a local repository is not
    safe for concurrent commits), unless ``ICECHUNK_LOG`` says otherwise: for the command
    line, whose output is its own lines."""
    _require_icechunk()
    import icechunk

    if not os.environ.get("ICECHUNK_LOG"):
        icechunk.set_logs_filter("error")


# -- source URLs and their containers ---------------------------------------------------------


def _source_uri(url: str) -> str:
    """The absolute URL Icechunk records for a source. Icechunk percent-decodes the path
    of a location before reading, so local paths and S3 keys are percent-encoded (a key
    with ``#``, ``?``, ``%`` or a space would be read as another object otherwise);
    HTTP URLs are URLs already."""
    if not is_remote(url):
        return Path(os.path.abspath(local_path(url))).as_uri()
    scheme, rest = url.split("://", 1)
    if scheme.lower() != "s3":
        return url
    bucket, _, key = rest.partition("/")
    return f"s3://{bucket}/{quote(key, safe='/')}"


def source_uris(manifest: Manifest) -> list[str]:
    """The absolute URL of each of the manifest's sources (relative ones resolved against
    the manifest's location), as :func:`to_icechunk` records them."""
    from h5lens.locations import resolve

    return [_source_uri(resolve(source.url, manifest.location)) for source in manifest.sources]


def _prefix(uri: str) -> str:
    """The container h5lens declares for a source: its bucket on S3, its host over HTTP,
    and for a local file its directory (not ``file:///``: a reader who authorises it lets
    the repository read that directory only). Icechunk matches a percent-encoded container
    prefix when writing but not when reading, so a local prefix stops above the first
    directory whose name needs encoding (``file:///data/`` for ``/data/my files/x.h5``)."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        directories = uri.removeprefix("file://").split("/")[:-1]
        plain = next((i for i, name in enumerate(directories) if "%" in name), len(directories))
        return "file://" + "/".join(directories[:plain]) + "/"
    if parts.scheme in ("s3", "http", "https"):
        return f"{parts.scheme}://{parts.netloc}/"
    raise InvalidOptionError(
        f"{uri}: h5lens writes Icechunk references to local files, s3:// and http(s):// sources, not {parts.scheme}://"
    )


def _prefixes(manifest: Manifest) -> list[str]:
    return sorted({_prefix(uri) for uri in source_uris(manifest)})


def _s3_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """fsspec's (s3fs's) storage options as Icechunk's S3 settings."""
    client_kwargs = options.get("client_kwargs") or {}
    endpoint = options.get("endpoint_url") or client_kwargs.get("endpoint_url")
    region = options.get("region") or options.get("region_name") or client_kwargs.get("region_name")
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region is None and endpoint:
        region = "us-east-1"  # S3-compatible endpoints (MinIO, moto, Ceph) take any region; the SDK wants one
    return {
        "region": region,
        "endpoint_url": endpoint,
        "allow_http": bool(endpoint and str(endpoint).startswith("http://")),
        "force_path_style": bool(endpoint),  # S3-compatible endpoints rarely serve bucket subdomains
    }


def _static_keys(options: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    key = options.get("key") or options.get("aws_access_key_id")
    secret = options.get("secret") or options.get("aws_secret_access_key")
    if key and secret:
        return str(key), str(secret), options.get("token") or options.get("aws_session_token")
    return None


def _container(prefix: str, options: Mapping[str, Any]) -> VirtualChunkContainer:
    from urllib.request import url2pathname

    import icechunk

    scheme = prefix.split("://", 1)[0]
    store: Any
    if scheme == "file":
        store = icechunk.local_filesystem_store(url2pathname(urlsplit(prefix).path))
    elif scheme == "s3":
        s3 = _s3_options(options)
        store = icechunk.s3_store(
            region=s3["region"],
            endpoint_url=s3["endpoint_url"],
            allow_http=s3["allow_http"],
            anonymous=bool(options.get("anon")),
            s3_compatible=bool(s3["endpoint_url"]),
            force_path_style=s3["force_path_style"],
        )
    else:
        store = icechunk.http_store()
    return icechunk.VirtualChunkContainer(prefix, store)


def _credential(prefix: str, options: Mapping[str, Any]) -> AnyCredential:
    import icechunk

    scheme = prefix.split("://", 1)[0]
    if scheme == "file":
        return icechunk.credentials.LocalFileSystemAccess
    if scheme != "s3":
        return icechunk.credentials.HttpAccess
    if options.get("anon"):
        return icechunk.Credentials.S3(icechunk.s3_anonymous_credentials())
    keys = _static_keys(options)
    if keys is not None:
        key, secret, token = keys
        return icechunk.Credentials.S3(
            icechunk.s3_static_credentials(access_key_id=key, secret_access_key=secret, session_token=token)
        )
    return icechunk.Credentials.S3(icechunk.s3_from_env_credentials())


def virtual_chunk_containers(
    manifest: Manifest, storage_options: dict[str, Any] | None = None
) -> dict[str, VirtualChunkContainer]:
    """Icechunk's virtual chunk containers for the manifest's sources, by URL prefix:
    ``file:///dir/`` (a local file's directory), ``s3://bucket/`` (with the endpoint and
    region of fsspec's ``storage_options``), ``https://host/``. To declare in a
    repository's configuration (``config.set_virtual_chunk_container``)."""
    _require_icechunk()
    options = storage_options or {}
    return {prefix: _container(prefix, options) for prefix in _prefixes(manifest)}


def virtual_chunk_credentials(
    manifest: Manifest, storage_options: dict[str, Any] | None = None
) -> dict[str, AnyCredential | None]:
    """What a reader passes as ``authorize_virtual_chunk_access`` to read the manifest's
    sources through a repository h5lens wrote: local files and HTTP need no credentials;
    S3 takes ``key`` / ``secret`` / ``token`` or ``anon`` from fsspec's
    ``storage_options``, else the environment (``AWS_ACCESS_KEY_ID``, profiles, roles)."""
    _require_icechunk()
    options = storage_options or {}
    return {prefix: _credential(prefix, options) for prefix in _prefixes(manifest)}


# -- where the repository is ------------------------------------------------------------------


def parse_destination(text: str) -> str:
    """``icechunk://PATH`` → the repository's location: a local directory (``icechunk://repo``,
    ``icechunk:///abs/repo``) or an S3 prefix (``icechunk://s3://bucket/prefix``)."""
    location = text[len(SCHEME) :] if text.startswith(SCHEME) else ""
    if not location.strip():
        raise InvalidOptionError(f"{text}: expected icechunk://PATH (a local directory) or icechunk://s3://BUCKET/PREFIX")
    if "://" in location and not location.startswith(("s3://", "file://")):
        raise InvalidOptionError(f"{text}: Icechunk repositories h5lens writes are local directories or on s3://")
    if location.startswith("s3://") and not location.removeprefix("s3://").split("/", 1)[0]:
        raise InvalidOptionError(f"{text}: expected icechunk://s3://BUCKET/PREFIX")
    return location


def _storage(location: str, options: Mapping[str, Any]) -> Any:
    import icechunk

    if not location.startswith("s3://"):
        return icechunk.local_filesystem_storage(os.path.abspath(location.removeprefix("file://")))
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    s3 = _s3_options(options)
    keys = _static_keys(options)
    anon = bool(options.get("anon"))
    return icechunk.s3_storage(
        bucket=bucket,
        prefix=prefix.strip("/") or None,
        region=s3["region"],
        endpoint_url=s3["endpoint_url"],
        allow_http=s3["allow_http"],
        access_key_id=keys[0] if keys else None,
        secret_access_key=keys[1] if keys else None,
        session_token=keys[2] if keys else None,
        anonymous=anon or None,
        from_env=None if anon or keys else True,
        force_path_style=s3["force_path_style"],
    )


def check_location(
    location: str, *, sources: Iterable[str | None] = (), storage_options: dict[str, Any] | None = None
) -> None:
    """Refuse, before a scan, a repository location that is a source, a file, a directory
    holding something other than an Icechunk repository, or in a bucket that does not exist."""
    from h5lens.destination import refuse_sources

    refuse_sources(location, sources)
    if location.startswith("s3://"):
        from h5lens.backend_errors import anon_requested, probe_options, storage_error
        from h5lens.destination import check_bucket

        try:
            import fsspec

            fs, path = fsspec.core.url_to_fs(location, **probe_options(location, storage_options))
            check_bucket(location, fs, path)
        except H5LensError:
            raise
        except Exception as e:  # noqa: BLE001 - every backend failure, named with the URL
            raise storage_error(e, location, "checking the destination", anon=anon_requested(storage_options)) from e
        return
    path = os.path.abspath(location.removeprefix("file://"))
    if os.path.isdir(path):
        if os.listdir(path):
            _require_icechunk()
            import icechunk

            try:
                repository = icechunk.Repository.exists(icechunk.local_filesystem_storage(path))
            except icechunk.IcechunkError as e:
                raise _icechunk_error(e, location) from e
            if not repository:
                raise InvalidOptionError(f"{location}: a directory that is neither empty nor an Icechunk repository")
        if not os.access(path, os.W_OK | os.X_OK):
            raise AccessDeniedError(f"{location}: no permission to write there")
        return
    if os.path.exists(path):
        raise InvalidOptionError(f"{location}: a file, not an Icechunk repository (a directory)")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StorageError(f"{location}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise AccessDeniedError(f"{location}: no permission to write there")


def open_repository(
    location: str,
    *,
    manifest: Manifest | None = None,
    storage_options: dict[str, Any] | None = None,
    create: bool = True,
) -> Repository:
    """The Icechunk repository at ``location`` (a local directory, or ``s3://bucket/prefix``
    with fsspec's ``storage_options``: ``endpoint_url``, ``key``, ``secret``, ``anon``,
    ``client_kwargs={"region_name": ...}``), created if there is none and ``create``.

    With ``manifest``, the virtual chunk containers its sources need are added to the
    repository's configuration (and saved there; a container already covering a source
    is kept) and authorised for this process with the same storage options, so the
    repository returned can both write the manifest and read it back. Without, the
    containers the repository declares are authorised (a repository on object storage
    gets no access to local files), so that one written by ``h5lens index --to
    icechunk://...`` reads back as it is."""
    _require_icechunk()
    import icechunk

    options = storage_options or {}
    prefixes = _prefixes(manifest) if manifest is not None else []
    try:
        storage = _storage(location, options)
        exists = icechunk.Repository.exists(storage)
        if not exists and not create:
            raise SourceNotFoundError(f"{location}: no Icechunk repository there")
        config = (icechunk.Repository.fetch_config(storage) if exists else None) or icechunk.RepositoryConfig.default()
        declared = list(config.virtual_chunk_containers or {})
        added = [p for p in prefixes if not any(p.startswith(have) for have in declared)]
        for prefix in added:
            config.set_virtual_chunk_container(_container(prefix, options))
        if manifest is not None:
            # authorise what the manifest's sources are read through, nothing else the repository declares
            wanted = [have for have in [*declared, *added] if any(p.startswith(have) for p in prefixes)]
        else:  # what the repository declares; local files only for a repository that is local itself
            remote = is_remote(location)
            wanted = [have for have in declared if not (remote and have.startswith("file://"))]
        credentials: dict[str, AnyCredential | None] = {have: _credential(have, options) for have in wanted}
        if exists:
            repo = icechunk.Repository.open(storage, config=config, authorize_virtual_chunk_access=credentials)
            if added:
                repo.save_config()
        else:
            repo = icechunk.Repository.create(storage, config=config, authorize_virtual_chunk_access=credentials)
    except icechunk.IcechunkError as e:
        raise _icechunk_error(e, location) from e
    return repo


def _icechunk_error(error: BaseException, where: str) -> H5LensError:
    text = first_line(error)
    lowered = str(error).lower()
    if any(word in lowered for word in ("forbidden", "accessdenied", "access denied", "invalidaccesskeyid", "403")):
        return AccessDeniedError(f"{where}: access denied ({text})")
    if "nosuchbucket" in lowered.replace(" ", ""):
        return StorageError(f"{where}: the bucket does not exist ({text})")
    return StorageError(f"{where}: Icechunk: {text}")


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
    sources = [Source(uri, s.size, s.mtime, s.etag).to_dict() for s, uri in zip(manifest.sources, uris, strict=True)]
    record = {"writer": f"h5lens {__version__}", "sources": sources, "digest": _digest(manifest)}
    # through JSON, so it compares equal to what Icechunk gives back (lists, floats)
    return dict(json.loads(json.dumps(record)))


def _same(recorded: Any, record: Mapping[str, Any]) -> bool:
    """The branch holds this manifest of these sources (the writer's version aside)."""
    if not isinstance(recorded, Mapping):
        return False
    return recorded.get("sources") == record["sources"] and recorded.get("digest") == record["digest"]


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
    _require_icechunk()
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
        raise _icechunk_error(e, where) from e


def _check_containers(uris: list[str], config: Any) -> None:
    # Icechunk would only drop such references (set_virtual_refs_arr returns them as failed)
    declared = list((config.virtual_chunk_containers or {}).keys())
    for uri in uris:
        if not any(uri.startswith(prefix) for prefix in declared):
            raise InvalidOptionError(
                f"{uri}: the Icechunk repository declares no virtual chunk container for this source "
                f"(it has {declared or 'none'}); open it with h5lens.icechunk.open_repository(..., manifest=manifest) "
                f"or declare VirtualChunkContainer({_prefix(uri)!r}, ...)"
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
        raise _icechunk_error(e, location) from e
    snapshot = to_icechunk(manifest, repo, storage_options=storage_options)
    return snapshot, snapshot != before
