"""Where an Icechunk repository is (``icechunk://PATH``, ``icechunk://s3://BUCKET/PREFIX``),
checked before any work, and opened or created with the containers a manifest needs."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from h5lens.errors import (
    AccessDeniedError,
    H5LensError,
    InvalidOptionError,
    SourceNotFoundError,
    StorageError,
    first_line,
)
from h5lens.icechunk.containers import (
    credential_for,
    make_container,
    require_icechunk,
    s3_options,
    source_prefixes,
    static_keys,
)
from h5lens.manifest.locations import is_remote
from h5lens.manifest.model import Manifest

if TYPE_CHECKING:
    from icechunk import Repository
    from icechunk.credentials import AnyCredential

SCHEME = "icechunk://"


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
    s3 = s3_options(options)
    keys = static_keys(options)
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
    from h5lens.manifest.destination import refuse_sources

    refuse_sources(location, sources)
    if location.startswith("s3://"):
        from h5lens.fetch.backend_errors import anon_requested, probe_options, storage_error
        from h5lens.manifest.destination import check_bucket

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
            require_icechunk()
            import icechunk

            try:
                repository = icechunk.Repository.exists(icechunk.local_filesystem_storage(path))
            except icechunk.IcechunkError as e:
                raise icechunk_error(e, location) from e
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
    require_icechunk()
    import icechunk

    options = storage_options or {}
    prefixes = source_prefixes(manifest) if manifest is not None else []
    try:
        storage = _storage(location, options)
        exists = icechunk.Repository.exists(storage)
        if not exists and not create:
            raise SourceNotFoundError(f"{location}: no Icechunk repository there")
        config = (icechunk.Repository.fetch_config(storage) if exists else None) or icechunk.RepositoryConfig.default()
        declared = list(config.virtual_chunk_containers or {})
        added = [p for p in prefixes if not any(p.startswith(have) for have in declared)]
        for prefix in added:
            config.set_virtual_chunk_container(make_container(prefix, options))
        if manifest is not None:
            # authorise what the manifest's sources are read through, nothing else the repository declares
            wanted = [have for have in [*declared, *added] if any(p.startswith(have) for p in prefixes)]
        else:  # what the repository declares; local files only for a repository that is local itself
            remote = is_remote(location)
            wanted = [have for have in declared if not (remote and have.startswith("file://"))]
        credentials: dict[str, AnyCredential | None] = {have: credential_for(have, options) for have in wanted}
        if exists:
            repo = icechunk.Repository.open(storage, config=config, authorize_virtual_chunk_access=credentials)
            if added:
                repo.save_config()
        else:
            repo = icechunk.Repository.create(storage, config=config, authorize_virtual_chunk_access=credentials)
    except icechunk.IcechunkError as e:
        raise icechunk_error(e, location) from e
    return repo


def icechunk_error(error: BaseException, where: str) -> H5LensError:
    text = first_line(error)
    lowered = str(error).lower()
    if any(word in lowered for word in ("forbidden", "accessdenied", "access denied", "invalidaccesskeyid", "403")):
        return AccessDeniedError(f"{where}: access denied ({text})")
    if "nosuchbucket" in lowered.replace(" ", ""):
        return StorageError(f"{where}: the bucket does not exist ({text})")
    return StorageError(f"{where}: Icechunk: {text}")
