"""Which virtual chunk containers a manifest's sources need, and the credentials that
authorise them; Icechunk imported on first use."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from h5lens.errors import (
    InvalidOptionError,
)
from h5lens.manifest.locations import is_remote, local_path
from h5lens.manifest.model import Manifest

if TYPE_CHECKING:
    from icechunk import VirtualChunkContainer
    from icechunk.credentials import AnyCredential

INSTALL_HINT = "pip install 'h5lens[icechunk]'"


def require_icechunk(doing: str = "writing to Icechunk") -> None:
    # set_virtual_refs_arr with a checksum and the explicit LocalFileSystemAccess /
    # HttpAccess authorisations are Icechunk 2.3's
    try:
        import icechunk
    except ImportError as e:
        raise InvalidOptionError(f"{doing} needs the icechunk package (>= 2.3): {INSTALL_HINT}") from e
    version = tuple(int(part) for part in icechunk.__version__.split(".")[:2] if part.isdigit())
    if version < (2, 3):
        raise InvalidOptionError(f"h5lens needs icechunk >= 2.3, found {icechunk.__version__}: {INSTALL_HINT}")


def quiet_logs() -> None:
    """Show only Icechunk's errors on stderr (it warns, e.g., that a local repository is not
    safe for concurrent commits), unless ``ICECHUNK_LOG`` says otherwise: for the command
    line, whose output is its own lines."""
    require_icechunk()
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
    from h5lens.manifest.locations import resolve

    return [_source_uri(resolve(source.url, manifest.location)) for source in manifest.sources]


def container_prefix(uri: str) -> str:
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


def source_prefixes(manifest: Manifest) -> list[str]:
    return sorted({container_prefix(uri) for uri in source_uris(manifest)})


def s3_options(options: Mapping[str, Any]) -> dict[str, Any]:
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


def static_keys(options: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    key = options.get("key") or options.get("aws_access_key_id")
    secret = options.get("secret") or options.get("aws_secret_access_key")
    if key and secret:
        return str(key), str(secret), options.get("token") or options.get("aws_session_token")
    return None


def make_container(prefix: str, options: Mapping[str, Any]) -> VirtualChunkContainer:
    from urllib.request import url2pathname

    import icechunk

    scheme = prefix.split("://", 1)[0]
    store: Any
    if scheme == "file":
        store = icechunk.local_filesystem_store(url2pathname(urlsplit(prefix).path))
    elif scheme == "s3":
        s3 = s3_options(options)
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


def credential_for(prefix: str, options: Mapping[str, Any]) -> AnyCredential:
    import icechunk

    scheme = prefix.split("://", 1)[0]
    if scheme == "file":
        return icechunk.credentials.LocalFileSystemAccess
    if scheme != "s3":
        return icechunk.credentials.HttpAccess
    if options.get("anon"):
        return icechunk.Credentials.S3(icechunk.s3_anonymous_credentials())
    keys = static_keys(options)
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
    require_icechunk()
    options = storage_options or {}
    return {prefix: make_container(prefix, options) for prefix in source_prefixes(manifest)}


def virtual_chunk_credentials(
    manifest: Manifest, storage_options: dict[str, Any] | None = None
) -> dict[str, AnyCredential | None]:
    """What a reader passes as ``authorize_virtual_chunk_access`` to read the manifest's
    sources through a repository h5lens wrote: local files and HTTP need no credentials;
    S3 takes ``key`` / ``secret`` / ``token`` or ``anon`` from fsspec's
    ``storage_options``, else the environment (``AWS_ACCESS_KEY_ID``, profiles, roles)."""
    require_icechunk()
    options = storage_options or {}
    return {prefix: credential_for(prefix, options) for prefix in source_prefixes(manifest)}
