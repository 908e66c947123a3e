"""obstore's store options for a URL and fsspec-style storage options, where they say it all.

h5lens reads ``s3://``, ``az://`` / ``abfs://`` and plain ``http(s)://`` sources through
obstore when the options can be given to obstore exactly (:func:`obstore_config`); anything only botocore or aiohttp
understands goes through fsspec instead (:mod:`h5lens.fetch.clients`).
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["obstore_azure_config", "obstore_config", "obstore_http_config", "obstore_s3_config"]

# s3fs options that only concern caching, listing or writing: nothing a ranged GET needs.
_IGNORABLE = frozenset(
    {
        "asynchronous", "loop", "skip_instance_cache", "use_listings_cache", "listings_expiry_time",
        "max_paths", "default_block_size", "default_fill_cache", "default_cache_type", "cache_regions",
        "fixed_upload_size", "max_concurrency", "version_aware",
    }
)  # fmt: skip
_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
_REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
# URL paths obstore's HTTPStore takes as they are (object_store re-encodes anything else)
_PLAIN_HTTP_PATH = re.compile(r"[A-Za-z0-9._~/+-]+")


def obstore_s3_config(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``obstore.store.S3Store`` keyword arguments equivalent to s3fs's ``storage_options``
    for ``url``, or None when obstore cannot be relied on to do what s3fs would."""
    if not url.startswith("s3://"):
        return None
    options = dict(storage_options or {})
    client_kwargs = dict(options.pop("client_kwargs", None) or {})
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not bucket or not key:
        return None
    config: dict[str, Any] = {}
    endpoint = options.pop("endpoint_url", None) or client_kwargs.pop("endpoint_url", None)
    region = client_kwargs.pop("region_name", None) or options.pop("region_name", None) or options.pop("region", None)
    if client_kwargs:  # verify=, proxies=, ...: botocore settings obstore would not honour
        return None
    if endpoint:
        config["endpoint"] = endpoint
        if str(endpoint).startswith("http://"):
            config["client_options"] = {"allow_http": True}
    if region:
        config["region"] = region
    elif not endpoint and not any(os.environ.get(k) for k in _REGION_ENV):
        return None  # s3fs finds a bucket's region itself; obstore would need to be told
    anon = bool(options.pop("anon", False))
    key_id = options.pop("key", None) or options.pop("aws_access_key_id", None)
    secret = options.pop("secret", None) or options.pop("aws_secret_access_key", None)
    token = options.pop("token", None) or options.pop("aws_session_token", None)
    if options.pop("requester_pays", False) | bool(options.pop("request_payer", False)):
        config["request_payer"] = True
    if any(k not in _IGNORABLE for k in options):
        return None  # a profile, a session, botocore configuration: s3fs's own business
    if anon:
        config["skip_signature"] = True
    elif key_id and secret:
        config.update(access_key_id=key_id, secret_access_key=secret)
        if token:
            config["token"] = token
    elif not any(os.environ.get(k) for k in _CREDENTIAL_ENV):
        return None  # credentials from a profile file or instance metadata: botocore's chain
    return {"kind": "s3", "bucket": bucket, "path": key, "config": config}


def obstore_http_config(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """obstore ``HTTPStore`` settings for a plain ``http(s)://`` URL without options; None
    for anything fsspec's HTTP filesystem is needed for (headers, query strings, odd paths)."""
    if not url.startswith(("http://", "https://")) or storage_options:
        return None
    scheme, rest = url.split("://", 1)
    host, _, path = rest.partition("/")
    if not host or not path or not _PLAIN_HTTP_PATH.fullmatch(path) or "//" in path or path.endswith("/"):
        return None
    directory, _, name = path.rpartition("/")
    base = f"{scheme}://{host}/{directory + '/' if directory else ''}"
    config: dict[str, Any] = {"client_options": {"allow_http": True}} if scheme == "http" else {}
    return {"kind": "http", "bucket": base, "path": name, "config": config}


_AZURE_SCHEMES = ("az", "abfs", "abfss")


def obstore_azure_config(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``obstore.store.AzureStore`` keyword arguments equivalent to adlfs's
    ``storage_options`` for an ``az://`` / ``abfs://`` URL, where they name the account and
    its key, a SAS token or anonymous access (a ``connection_string`` holding them, or
    ``account_name`` with ``account_key`` / ``sas_token`` / ``anon``); None for the rest
    (azure-identity's credentials, the environment: adlfs's business)."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in _AZURE_SCHEMES:
        return None
    container, _, key = rest.partition("/")
    if not container or not key or "@" in container:  # container@account.dfs...: adlfs's form
        return None
    options = dict(storage_options or {})
    parts: dict[str, str] = {}
    connection = options.pop("connection_string", None)
    if connection:
        pairs = (item.partition("=") for item in str(connection).split(";"))
        parts = {name.strip(): value for name, sep, value in pairs if sep}
    account = options.pop("account_name", None) or parts.get("AccountName")
    account_key = options.pop("account_key", None) or parts.get("AccountKey")
    sas = options.pop("sas_token", None) or parts.get("SharedAccessSignature")
    anon = options.pop("anon", None)
    if any(k not in _IGNORABLE for k in options) or not account:
        return None
    config: dict[str, Any] = {"account_name": account}
    if account_key:
        config["account_key"] = account_key
    elif sas:
        config["sas_key"] = str(sas).lstrip("?")
    elif anon:
        config["skip_signature"] = True
    else:
        return None
    endpoint = parts.get("BlobEndpoint")
    if not endpoint and parts.get("EndpointSuffix"):
        endpoint = f"{parts.get('DefaultEndpointsProtocol', 'https')}://{account}.blob.{parts['EndpointSuffix']}"
    if endpoint:
        config["endpoint"] = endpoint.rstrip("/")
        if endpoint.startswith("http://"):
            config["client_options"] = {"allow_http": True}
    return {"kind": "azure", "bucket": container, "path": key, "config": config}


def obstore_config(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """What an :class:`ObstoreClient` needs for ``url``, or None if obstore is not installed
    or cannot be relied on for these options."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        return None
    return (
        obstore_s3_config(url, storage_options)
        or obstore_http_config(url, storage_options)
        or obstore_azure_config(url, storage_options)
    )
