"""Public data with no setup: an ``s3://`` source read with unsigned requests when no
credentials are found.

Public buckets (CELLxGENE's, the open-data registry's) need no credentials, and their users
expect a plain ``h5lens index s3://…`` to work as ``aws s3 cp --no-sign-request`` does. So,
where the storage options name no credentials (no ``key``/``secret``, ``token``,
``profile``, ``session``, no ``anon`` either way) and botocore's own chain finds none (the
environment, the shared files, SSO, a container's or an instance's role: the chain s3fs
would use), the source is read unsigned (obstore's ``skip_signature``, s3fs's
``anon=True``), and h5lens says so once per bucket and process: an INFO record on the
``h5lens.fetch`` logger (the command line shows it with ``-v``). Credentials that are
configured anywhere always win. A request refused to an unsigned reader says the data
needs credentials (:func:`h5lens.fetch.backend_errors.storage_error`'s ``unsigned``).

Google Cloud Storage and Azure behave alike through their fsspec filesystems (gcsfs goes
anonymous by itself when it finds no credentials; adlfs reads a public container with an
account name alone): h5lens says so in the same words (:func:`anonymous_by_default`).

Only reads: a destination is written with the credentials configured, or refused for
want of them.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

__all__ = ["CREDENTIAL_OPTIONS", "anonymous_by_default", "reads_unsigned", "s3_credentials_found"]

logger = logging.getLogger("h5lens.fetch")

# Options that say how to sign (or not to): the user decided; h5lens does not second-guess.
_SIGNING_OPTIONS = frozenset(
    {"anon", "key", "secret", "token", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
     "profile", "session"}
)  # fmt: skip

_FOUND: dict[tuple[tuple[str, str], ...], bool] = {}
_SAID: set[tuple[str, str, str]] = set()
_LOCK = threading.Lock()


def s3_credentials_found() -> bool:
    """Whether botocore's credential chain finds credentials (asked once per process and AWS
    environment: the answer is kept while no ``AWS_*`` variable changes)."""
    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    with _LOCK:
        known = _FOUND.get(environment)
    if known is not None:
        return known
    try:
        import botocore.session
    except ImportError:  # no botocore: obstore's environment variables are all there is
        found = bool(os.environ.get("AWS_ACCESS_KEY_ID"))
    else:
        try:
            found = botocore.session.get_session().get_credentials() is not None
        except Exception:  # noqa: BLE001 - a broken profile: credentials were configured; s3fs will say what fails
            found = True
    with _LOCK:
        _FOUND[environment] = found
    return found


def reads_unsigned(url: str, storage_options: dict[str, Any] | None) -> bool:
    """Whether ``url`` is an ``s3://`` source that h5lens reads unsigned because nothing
    configures its signing and no credentials are found (see the module docstring); the
    first time per bucket and endpoint, says so on the ``h5lens.fetch`` logger."""
    if not url.lower().startswith(("s3://", "s3a://")):
        return False
    options = storage_options or {}
    if _SIGNING_OPTIONS & set(options) or s3_credentials_found():
        return False
    endpoint = str(options.get("endpoint_url") or (options.get("client_kwargs") or {}).get("endpoint_url") or "")
    _say_once(url, endpoint)
    return True


# gcsfs's options that give credentials, and adlfs's
_GCS_CREDENTIALS = frozenset({"token", "credentials"})
_AZURE_CREDENTIALS = frozenset(
    {"account_key", "sas_token", "connection_string", "credential", "client_id", "client_secret", "tenant_id"}
)
# Every option that says how to authenticate, on any backend: options for one source prefix
# that name any of them replace all of them (h5lens.fetch.source_options)
CREDENTIAL_OPTIONS = _SIGNING_OPTIONS | _GCS_CREDENTIALS | _AZURE_CREDENTIALS


def anonymous_by_default(url: str, storage_options: dict[str, Any] | None, fs: Any) -> bool:
    """Whether the fsspec filesystem ``fs`` made for ``url`` went anonymous by itself because
    it found no credentials (gcsfs falls back to anonymous access, adlfs reads a public
    container without any); the first time per bucket, says so as :func:`reads_unsigned` does."""
    scheme = url.split("://", 1)[0].lower()
    options = storage_options or {}
    if scheme in ("gs", "gcs"):
        method = getattr(getattr(fs, "credentials", None), "method", None)  # gcsfs: how it authenticated
        anonymous = not (_GCS_CREDENTIALS & set(options)) and method == "anon"
    elif scheme in ("az", "abfs", "abfss"):
        found = [getattr(fs, name, None) for name in ("credential", "account_key", "sas_token", "connection_string")]
        anonymous = not (_AZURE_CREDENTIALS & set(options)) and not any(found)
    else:
        return False
    if anonymous:
        _say_once(url, str(options.get("endpoint_url") or options.get("account_name") or ""))
    return anonymous


def _say_once(url: str, endpoint: str) -> None:
    scheme, _, rest = url.partition("://")
    bucket = rest.split("/", 1)[0]
    with _LOCK:
        first = (scheme, endpoint, bucket) not in _SAID
        _SAID.add((scheme, endpoint, bucket))
    if first:
        logger.info("%s://%s: no credentials found; reading it with unsigned requests, as public data", scheme, bucket)
