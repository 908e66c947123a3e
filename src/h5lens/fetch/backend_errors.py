"""What storage backends raise, as h5lens errors: by exception type and HTTP status (text
only where a backend gives nothing else: fsspec's unknown protocol is a plain ValueError).

fsspec backends raise in their own vocabularies: s3fs turns S3 error codes into builtin
``OSError`` subclasses with the botocore ``ClientError`` as ``__cause__``; botocore
raises ``NoCredentialsError`` or ``EndpointConnectionError`` (not ``OSError``s);
aiohttp raises ``ClientConnectorError``; fsspec raises ``ImportError`` for a backend
that is not installed and ``ValueError`` for a protocol it does not know.
:func:`storage_error` maps each to the documented h5lens error naming the URL;
:func:`is_transient` says which failures are worth another attempt.
"""

from __future__ import annotations

import asyncio
import errno
import re
import socket
from typing import Any

from h5lens.errors import (
    AccessDeniedError,
    H5LensError,
    InvalidOptionError,
    SourceNotFoundError,
    StorageError,
    first_line,
)

# Server answers that another attempt may get past (throttling, server errors).
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# errnos s3fs gives those answers (SlowDown / ServiceUnavailable: EBUSY; InternalError:
# EREMOTEIO), and the socket errors of a dropped connection.
_TRANSIENT_ERRNO = frozenset(
    e
    for e in (
        errno.EBUSY,
        getattr(errno, "EREMOTEIO", errno.EIO),
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EPIPE,
    )
)


# The packages whose exceptions are storage failures (rather than a bug of h5lens's).
STORAGE_PACKAGES = frozenset({"botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "fsspec", "urllib3"})


def from_storage_backend(error: BaseException) -> bool:
    """Whether ``error`` or one of its causes was raised by a storage backend's package."""
    return any(type(e).__module__.split(".", 1)[0] in STORAGE_PACKAGES for e in error_chain(error))


def error_chain(error: BaseException) -> list[BaseException]:
    """The error and its causes / contexts, outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def http_status(error: BaseException) -> int | None:
    """The HTTP status of a failed request, where the error (or its cause) carries one."""
    for item in error_chain(error):
        response = getattr(item, "response", None)  # botocore ClientError
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        status = getattr(item, "status", None)  # aiohttp ClientResponseError
        if isinstance(status, int) and 100 <= status < 600:
            return status
    return None


def error_code(error: BaseException) -> str | None:
    """The S3 error code (``NoSuchBucket``, ``NoSuchKey``, ``SlowDown`` ...) of a failed request."""
    for item in error_chain(error):
        response = getattr(item, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if isinstance(code, str):
                return code
    return None


def _botocore(name: str) -> type[BaseException] | None:
    try:
        import botocore.exceptions as bex
    except ImportError:
        return None
    found = getattr(bex, name, None)
    return found if isinstance(found, type) else None


def _aiohttp_connection_errors() -> tuple[type[BaseException], ...]:
    try:
        import aiohttp
    except ImportError:
        return ()
    return (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


def _aiohttp_connect_errors() -> tuple[type[BaseException], ...]:
    """aiohttp's failures to connect at all: refused, no route, a name that does not resolve,
    no connection within the connect timeout."""
    try:
        import aiohttp
    except ImportError:
        return ()
    timeout = getattr(aiohttp, "ConnectionTimeoutError", None)  # aiohttp >= 3.10
    return (aiohttp.ClientConnectorError,) if timeout is None else (aiohttp.ClientConnectorError, timeout)


def _is(error: BaseException, *names: str) -> bool:
    classes = tuple(c for c in (_botocore(n) for n in names) if c is not None)
    return bool(classes) and isinstance(error, classes)


def is_transient(error: BaseException) -> bool:
    """Whether another attempt at the same request may succeed."""
    if isinstance(error, H5LensError):
        return False
    status = http_status(error)
    if status is not None:
        return status in TRANSIENT_STATUS
    for item in error_chain(error):
        if isinstance(item, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
            return True
        if isinstance(item, _aiohttp_connection_errors()):
            return True
        if _is(item, "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError"):
            return True
        if isinstance(item, OSError) and item.errno in _TRANSIENT_ERRNO:
            return True
    return False


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or a cause) says that no connection to the endpoint could be made:
    refused, no route, a host name that does not resolve, no connection within the connect
    timeout. The endpoint never answered: nothing was read, and what the caller can do is
    check the endpoint (or wait for it), not the data."""
    return _connect_failure(error) is not None


def _connect_failure(error: BaseException) -> BaseException | None:
    for item in error_chain(error):
        if _is(item, "EndpointConnectionError", "ConnectTimeoutError"):
            return item
        if isinstance(item, (ConnectionRefusedError, socket.gaierror, *_aiohttp_connect_errors())):
            return item
    return None


def with_object(action: str) -> str:
    """``action`` as said after "while": "checking" becomes "checking it", "reading bytes 0-9
    of" becomes "reading bytes 0-9 of it" (the message names the URL first: "it" is that
    object); an action that names its object ("checking the destination") stays as it is."""
    words = action.split()
    return action if len(words) > 1 and words[-1] not in _PREPOSITIONS else f"{action} it"


_PREPOSITIONS = frozenset({"of", "to", "into", "from", "with", "at", "in", "on"})


def unsigned_refused(url: str, doing: str, detail: str) -> AccessDeniedError:
    """The error of a request refused to a reader that went unsigned because no credentials
    were found (:mod:`h5lens.fetch.credentials`): the data is not public, it needs credentials."""
    said = (
        f"{url}: access denied to unsigned requests while {doing} ({detail}); "
        "no credentials were found, and this data needs them: configure credentials"
    )
    python, cli = _WHERE_CREDENTIALS.get(url.split("://", 1)[0].lower(), _WHERE_CREDENTIALS["s3"])
    return AccessDeniedError(f"{said} ({python})").at_cli(f"{said} ({cli})")


# Where credentials go, per scheme: in Python's words, and the command line's.
_WHERE_CREDENTIALS = {
    "s3": (
        "storage_options key and secret, the AWS environment variables or a profile",
        "-s key=… -s secret=…, the AWS environment variables or a profile",
    ),
    "gs": (
        "storage_options token=…, GOOGLE_APPLICATION_CREDENTIALS or gcloud's application-default login",
        "-s token=…, GOOGLE_APPLICATION_CREDENTIALS or gcloud's application-default login",
    ),
    "az": (
        "storage_options account_name with account_key or sas_token, or the AZURE_STORAGE_* variables",
        "-s account_name=… -s account_key=… or -s sas_token=…, or the AZURE_STORAGE_* variables",
    ),
}
_WHERE_CREDENTIALS.update(
    s3a=_WHERE_CREDENTIALS["s3"],
    gcs=_WHERE_CREDENTIALS["gs"],
    abfs=_WHERE_CREDENTIALS["az"],
    abfss=_WHERE_CREDENTIALS["az"],
)


def requester_pays_asked(storage_options: dict[str, Any] | None) -> bool:
    """Whether the options say to pay for requests (s3fs's ``requester_pays``, obstore's ``request_payer``)."""
    options = storage_options or {}
    return bool(options.get("requester_pays") or options.get("request_payer"))


def signed_denied(url: str, doing: str, detail: str, *, requester_pays: bool = False) -> AccessDeniedError:
    """A signed request refused. S3 answers a requester-pays bucket asked without
    ``x-amz-request-payer`` with a plain 403 AccessDenied, so the message names that cause
    too, with the option that sends the header."""
    said = f"{url}: access denied while {doing} ({detail}); check the credentials and what they allow"
    if requester_pays or url.split("://", 1)[0].lower() not in ("s3", "s3a"):
        return AccessDeniedError(said)
    return AccessDeniedError(
        f"{said}, and if the bucket is requester-pays, pass storage_options={{'requester_pays': True}}"
    ).at_cli(f"{said}, and if the bucket is requester-pays, pass -s requester_pays=true")


def storage_error(
    error: BaseException,
    url: str,
    action: str = "reading",
    *,
    anon: bool = False,
    unsigned: bool = False,
    requester_pays: bool = False,
) -> H5LensError:
    """The h5lens error for ``error``, raised while ``action`` ``url`` (see :func:`with_object`);
    the message is one line and starts with ``url``. ``unsigned``: the request went unsigned
    because no credentials were found (a refusal then says the data needs them);
    ``requester_pays``: the requests said the requester pays (else a refusal on S3 names that
    cause too)."""
    if isinstance(error, H5LensError):
        return error
    detail = _reason(error)
    status = http_status(error)
    doing = with_object(action)
    for item in error_chain(error):
        if _is(item, "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
            said = f"{url}: no credentials while {doing} ({detail}); configure credentials, or pass"
            return AccessDeniedError(f"{said} storage_options={{'anon': True}} for public data").at_cli(
                f"{said} --anon for public data"
            )
    # before "not found": fsspec's HTTP filesystem says FileNotFoundError for a host it
    # cannot connect to (the connection error is its cause)
    failed_to_connect = _connect_failure(error)
    if failed_to_connect is not None:
        return StorageError(f"{url}: cannot reach the storage endpoint ({_reason(failed_to_connect)})")
    if isinstance(error, FileNotFoundError) or status == 404:
        what = "bucket" if error_code(error) == "NoSuchBucket" else "file or object"
        return SourceNotFoundError(f"{url}: no such {what} ({detail})")
    if isinstance(error, PermissionError) or status in (401, 403):
        if unsigned:
            return unsigned_refused(url, doing, detail)
        if not anon:
            return signed_denied(url, doing, detail, requester_pays=requester_pays)
        hint = "; anonymous access was asked for (--anon): the data may need credentials"
        return AccessDeniedError(f"{url}: access denied while {doing} ({detail}){hint}")
    if isinstance(error, ImportError):
        return StorageError(f"{url}: the storage backend for this URL is not installed ({detail})")
    if isinstance(error, ValueError) and "protocol" in detail.lower():  # fsspec: "Protocol not known"
        return InvalidOptionError(f"{url}: {detail}")
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return StorageError(f"{url}: timed out while {doing}")
    return StorageError(f"{url}: {doing} failed ({type(error).__name__}: {detail})")


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:  # without the (maybe temporary) file name
        return redact_urls(error.strerror)
    return redact_urls(first_line(error))


# A URL's query string in a library's message: a signed URL's signature, a SAS token.
_QUERY = re.compile(r"((?:https?|s3|gs|az|abfss?)://[^\s?'\"<>)]*)\?[^\s'\"<>)]*")


def redact_urls(text: str) -> str:
    """``text`` with the query string of every URL in it replaced by ``?…``: what a backend's
    message quotes of a request may hold a signature or a token (a signed redirect target,
    an Azure SAS), which no message h5lens writes may."""
    return _QUERY.sub(r"\1?…", text)


# The first request to a store (is the source there, can the destination be written, the
# first read of a manifest or a source) fails within seconds, naming the cause, whatever the
# reason: botocore's defaults (a 60 s connect timeout, five attempts) kept a user waiting 25 s
# to learn that an endpoint is down, and h5lens's own policy (8 attempts) 7-9 s.
PROBE_CONNECT_TIMEOUT = 5  # seconds; obstore's default too
PROBE_READ_TIMEOUT = 20
# Attempts at a request to an endpoint that has not answered yet: of a probe (whatever the
# failure), and of any request while the endpoint cannot be connected to
# (:func:`unreachable`; :attr:`h5lens.fetch.retry.RetryPolicy.unanswered_attempts`).
PROBE_ATTEMPTS = 2


def probe_options(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` for a first request to ``url``: bounded connect and read timeouts
    and attempts (s3 through botocore: :data:`PROBE_ATTEMPTS` in all), unless the caller
    configured them."""
    options = dict(storage_options or {})
    if url.split("://", 1)[0].lower() in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", PROBE_CONNECT_TIMEOUT)
        config.setdefault("read_timeout", PROBE_READ_TIMEOUT)
        # botocore's max_attempts counts retries after the first; total_max_attempts, all
        config.setdefault("retries", {"total_max_attempts": PROBE_ATTEMPTS, "mode": "standard"})
        options["config_kwargs"] = config
    return options


def anon_requested(storage_options: dict[str, Any] | None) -> bool:
    return bool((storage_options or {}).get("anon"))
