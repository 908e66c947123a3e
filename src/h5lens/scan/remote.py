"""Every read of a remote file a scan makes: ranged GETs, one at a time or in batches.

libhdf5 reads a remote file through a block cache (:class:`h5lens.scan.source.TrackedFile`),
whose misses come here one request at a time (:meth:`RemoteRanges.fetch_sync`); what
h5lens reads itself (chunk indexes, the chunks of small arrays) goes through here too:
ranges asked for together are fetched together, in one batch of concurrent requests
(:class:`~h5lens.scan.batch_reads.BatchedRanges`). Requests run on zarr's event loop thread.

Two clients can send the requests. obstore (Rust, ``object_store``) costs about a tenth
of s3fs's CPU per request, which is what a scan of many index nodes spends its time
on; it is used for ``s3://`` URLs when it is installed and the storage options say all
it needs (explicit credentials, ``anon``, or credentials in the environment; an
endpoint or a region). Anything else, or an obstore failure on the first request,
goes through fsspec (:class:`~h5lens.fetch.FsspecReader`, with its retries).
``H5LENS_SCAN_CLIENT=fsspec`` (or ``obstore``) forces a choice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from h5lens.errors import AccessDeniedError, H5LensError, SourceNotFoundError, SourceReadError
from h5lens.fetch.readers import FsspecReader
from h5lens.scan.batch_reads import BatchedRanges, BatchStats

logger = logging.getLogger("h5lens.scan")

CLIENT_ENV = "H5LENS_SCAN_CLIENT"
OBSTORE_CONCURRENCY = 128  # requests in flight: S3 serves each connection on its own
FSSPEC_CONCURRENCY = 64  # s3fs spends ~1 ms of CPU per request: more in flight does not help
T = TypeVar("T")

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


def obstore_config(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``obstore.store.S3Store`` keyword arguments equivalent to s3fs's ``storage_options``
    for ``url``, or None when obstore cannot be relied on to do what s3fs would."""
    if not url.startswith("s3://"):
        return None
    try:
        import obstore  # noqa: F401
    except ImportError:
        return None
    options = dict(storage_options or {})
    client_kwargs = dict(options.pop("client_kwargs", None) or {})
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not bucket or not key:
        return None
    config: dict[str, Any] = {}
    endpoint = options.pop("endpoint_url", None) or client_kwargs.pop("endpoint_url", None)
    region = client_kwargs.pop("region_name", None) or options.pop("region_name", None)
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
    if options.pop("requester_pays", False):
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
    return {"bucket": bucket, "path": key, "config": config}


def _fsspec_options(url: str, storage_options: dict[str, Any] | None, concurrency: int) -> dict[str, Any]:
    options = dict(storage_options or {})
    if url.startswith("s3://") and "config_kwargs" not in options:
        options["config_kwargs"] = {"max_pool_connections": concurrency}  # botocore's default is 10
    return options


class RemoteRanges:
    """Batched ranged reads of one remote file, for the scanner (see the module docstring)."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None,
        *,
        on_batch: Callable[[BatchStats], None] | None = None,
        cached: Callable[[int, int], bytes | None] | None = None,
    ) -> None:
        self.url = url
        self.storage_options = storage_options
        forced = os.environ.get(CLIENT_ENV, "auto").strip().lower()
        config = obstore_config(url, storage_options) if forced != "fsspec" else None
        if forced == "obstore" and config is None:
            logger.info("%s: obstore cannot be configured from these storage options; using fsspec", url)
        self._obstore: Any = None
        self._path = ""
        self._fsspec: FsspecReader | None = None
        if config is not None:
            from obstore.store import S3Store

            self._obstore = S3Store(config["bucket"], **config["config"])
            self._path = config["path"]
            concurrency = OBSTORE_CONCURRENCY
        else:
            concurrency = FSSPEC_CONCURRENCY
        self._confirmed = False  # obstore answered once: no falling back after that
        self.batched = BatchedRanges(self._fetch, concurrency=concurrency, on_batch=on_batch, cached=cached)

    @property
    def client(self) -> str:
        return "obstore" if self._obstore is not None else "fsspec"

    @property
    def stats(self) -> BatchStats:
        return self.batched.stats

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on zarr's event loop thread (where the readers' sessions live)."""
        from zarr.core.sync import sync

        return sync(coroutine)

    def fetch_sync(self, offset: int, length: int) -> bytes:
        """One range, one request (libhdf5's block reads)."""
        return self.run(self._fetch(offset, length))

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, length)``, fetched as one batch."""
        return self.run(self.batched(list(ranges)))

    async def _fetch(self, offset: int, length: int) -> bytes:
        if self._obstore is not None:
            try:
                data = await self._obstore.get_range_async(self._path, start=offset, length=length)
            except Exception as e:  # noqa: BLE001 - obstore's errors, named below
                if self._confirmed:
                    raise _obstore_error(e, self.url, offset, length) from e
                logger.info("%s: obstore failed on a first request (%s); scanning through fsspec", self.url, e)
                self._obstore = None
            else:
                self._confirmed = True
                data = bytes(data)
                if len(data) != length:
                    raise SourceReadError(
                        f"{self.url}: bytes {offset}-{offset + length}: {len(data)} of {length} bytes came back"
                    )
                return data
        if self._fsspec is None:
            self.batched.concurrency = min(self.batched.concurrency, FSSPEC_CONCURRENCY)
            self._fsspec = FsspecReader(self.url, _fsspec_options(self.url, self.storage_options, FSSPEC_CONCURRENCY))
        return await self._fsspec.read(offset, length)

    def close(self) -> None:
        if self._fsspec is not None:
            self._fsspec.close()
            self._fsspec = None
        self._obstore = None


def _obstore_error(error: BaseException, url: str, offset: int, length: int) -> H5LensError:
    """obstore's exceptions (which retried what could be retried) as h5lens errors."""
    import obstore.exceptions as oe

    where = f"bytes {offset}-{offset + length}"
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, oe.NotFoundError):
        return SourceNotFoundError(f"{url}: no such file or object while reading {where} ({detail})")
    if isinstance(error, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
        return AccessDeniedError(f"{url}: access denied while reading {where} ({detail})")
    return SourceReadError(f"{url}: reading {where} failed ({type(error).__name__}: {detail})")


__all__ = ["CLIENT_ENV", "RemoteRanges", "obstore_config"]
