"""The fsspec byte client: any fsspec URL (s3 through s3fs, http, gcs, azure, ssh ...), and
whatever obstore cannot be relied on for (:mod:`h5lens.fetch.clients` chooses).

A client owns what it opens: one asynchronous filesystem per event loop it is used on, and
the HTTP session that filesystem's ``set_session`` made, closed by :meth:`FsspecClient.close`
on the loop that made it (a session of a loop the client is no longer used on is closed when
it moves on). Its blocking calls (``get_sync``, ``stat``) run on zarr's event loop, through
the same filesystem and session: no second, blocking filesystem with a session of its own.
Clients nobody closed are closed at exit while zarr's loop still runs, and so are the
closings of clients collected unclosed that were still under way.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import numpy as np

from h5lens.errors import SourceReadError, StorageError
from h5lens.fetch import cost as costs
from h5lens.fetch import retry
from h5lens.fetch.backend_errors import (
    PROBE_CONNECT_TIMEOUT,
    anon_requested,
    http_status,
    is_transient,
    requester_pays_asked,
    storage_error,
    unreachable,
)
from h5lens.fetch.cost import CostModel
from h5lens.fetch.credentials import anonymous_by_default
from h5lens.fetch.protocol import FetchedOrFailed, each_alone
from h5lens.fetch.ranges import FirstRequest, RangeIgnoredError, past_end

T = TypeVar("T")

FSSPEC_CONCURRENCY = 64  # s3fs spends ~1 ms of CPU per request: more in flight does not help
# object storage as the cost model has it, read at s3fs's pace
FSSPEC_COST = replace(costs.OBJECT_STORE, in_flight=FSSPEC_CONCURRENCY, request_cost=1e-3)


class FsspecClient:
    """Ranged reads through an async fsspec filesystem (s3, http, gcs ...), retried by the
    retry policy when the failure is transient (by exception type and HTTP status); until
    the endpoint has answered once, a request it cannot be connected to gives up after the
    policy's ``unanswered_attempts``. The client owns its filesystem and HTTP session, and
    closes them in :meth:`close`."""

    local = False
    concurrency = FSSPEC_CONCURRENCY
    name = "fsspec"
    maps = False

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, *, unsigned: bool = False) -> None:
        self.url = url
        # read unsigned because no credentials were found (h5lens.fetch.credentials): a
        # refusal then says the data needs credentials
        self.unsigned = unsigned
        self.cost: CostModel = costs.from_environment(FSSPEC_COST)
        self.storage_options = fsspec_options(url, storage_options)
        self.requester_pays = requester_pays_asked(self.storage_options)
        self._fs: Any = None
        self._path: str | None = None
        self._client: Any = None  # the HTTP session set_session made: ours to close
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first = FirstRequest(url)
        self._answered = False  # whether a request has succeeded (then: the policy's full patience)
        self._making: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    async def _filesystem(self) -> tuple[Any, str]:
        # An async filesystem's session belongs to the event loop that made it.
        loop = asyncio.get_running_loop()
        if self._fs is None or self._loop is not loop:
            # requests sent at once all find no filesystem: one makes it, the others wait
            # (each making its own would leave every session but the last one unclosed)
            lock = self._making.setdefault(loop, asyncio.Lock())
            async with lock:
                if self._fs is None or self._loop is not loop:
                    await self._make(loop)
        assert self._path is not None  # set together with self._fs
        return self._fs, self._path

    async def _make(self, loop: asyncio.AbstractEventLoop) -> None:
        self._release(wait=False)  # the session of another loop, closed on that loop
        import fsspec

        protocol = self.url.split("://", 1)[0]
        # h5lens's own instance (not fsspec's shared one): its retries are set below
        options = {**self.storage_options, "skip_instance_cache": True}
        try:
            asynchronous = bool(getattr(fsspec.get_filesystem_class(protocol), "async_impl", False))
            if asynchronous:
                options["asynchronous"] = True
                if protocol in ("s3", "s3a") and not {"session", "profile"} & set(options):
                    options["session"] = _aiobotocore_session(loop)
            fs, path = fsspec.core.url_to_fs(self.url, **options)
            _own_retries_only(fs)
            client = await fs.set_session() if asynchronous and hasattr(fs, "set_session") else None
        except Exception as e:  # noqa: BLE001 - a missing backend, an unknown protocol
            anon = anon_requested(self.storage_options)
            raise storage_error(
                e, self.url, "opening", anon=anon, unsigned=self.unsigned, requester_pays=self.requester_pays
            ) from e
        self._fs, self._path, self._client, self._loop = fs, path, client, loop
        if anonymous_by_default(self.url, self.storage_options, fs):
            self.unsigned = True
        if client is not None:
            _live(self)

    async def _retried(self, attempt: Callable[[], Awaitable[T]], *, probe: bool = False) -> T:
        """``attempt()`` under the retry policy; a failure to connect to an endpoint that
        has not answered yet (or on a ``probe``) is given the policy's ``unanswered_attempts``."""
        limit_unanswered = probe or not self._answered
        found = await retry.policy().run(attempt, is_transient, unanswered=unreachable if limit_unanswered else None)
        self._answered = True
        return found

    async def get(self, offset: int, length: int, *, exact: bool = True) -> bytes:
        return await self._first.run(lambda: self._get(offset, length, exact))

    async def _get(self, offset: int, length: int, exact: bool) -> bytes:
        fs, path = await self._filesystem()

        async def attempt() -> bytes:
            if getattr(fs, "asynchronous", False):
                return await fs._cat_file(path, start=offset, end=offset + length)
            return await asyncio.to_thread(fs.cat_file, path, start=offset, end=offset + length)

        try:
            data = await self._retried(attempt)
        except Exception as e:  # noqa: BLE001 - classified by type and status
            raise self._read_error(e, offset, length, getattr(e, "attempts", 1)) from e
        if len(data) > length:  # an HTTP server that ignores Range sent the whole file
            raise RangeIgnoredError(
                f"{self.url}: the server ignores HTTP Range requests (it answered with {len(data)} bytes for "
                f"{length}), so chunks cannot be read one by one; download the file and index or read the local copy"
            )
        if len(data) != length and exact:  # the object is shorter than the reference: no retry helps
            raise past_end(self.url, offset, length, f"the object ({len(data)} of {length} bytes came back)")
        return data

    async def get_many(self, ranges: Sequence[tuple[int, int]]) -> list[FetchedOrFailed]:
        return await each_alone(self.get, ranges)

    def batches(self) -> int:
        return 0  # fsspec's cat_ranges is a gather of single requests: nothing saved

    def views(self, offsets: np.ndarray, lengths: np.ndarray) -> None:
        return None  # nothing to map: every range is a request

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> bytes:
        from zarr.core.sync import sync

        return sync(self.get(offset, length, exact=exact))

    def _read_error(self, error: BaseException, offset: int, length: int, attempts: int) -> Exception:
        """The error of a read that failed: an endpoint that cannot be reached is a
        :class:`StorageError` (nothing was read: check the endpoint); other failures of
        storage, a :class:`SourceReadError` naming the bytes."""
        if http_status(error) == 416:
            return past_end(self.url, offset, length, "the object (HTTP 416)")
        anon = anon_requested(self.storage_options)
        found = storage_error(
            error, self.url, f"reading bytes {offset}-{offset + length} of", anon=anon, unsigned=self.unsigned,
            requester_pays=self.requester_pays,
        )  # fmt: skip
        if type(found) is not StorageError:
            return found
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return StorageError(f"{found}{tries}") if unreachable(error) else SourceReadError(f"{found}{tries}")

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """Size and ETag (object storage identifies versions by ETag: no fingerprint)."""
        del fingerprint
        from zarr.core.sync import sync

        return sync(self._stat(probe))

    async def _stat(self, probe: bool) -> dict[str, Any]:
        fs, path = await self._filesystem()

        async def attempt() -> dict[str, Any]:
            if getattr(fs, "asynchronous", False):
                return await _object_info(fs, path)
            return await asyncio.to_thread(fs.info, path)

        try:  # retried as reads are: a 503 on the HEAD is as transient as on a GET
            info = await self._retried(attempt, probe=probe)
        except Exception as e:  # noqa: BLE001
            anon = anon_requested(self.storage_options)
            found = storage_error(
                e, self.url, "checking", anon=anon, unsigned=self.unsigned, requester_pays=self.requester_pays
            )
            attempts = getattr(e, "attempts", 1)
            if unreachable(e) and attempts > 1:
                found = StorageError(f"{found} after {attempts} attempts")
            raise found from e
        if info.get("type") == "directory":
            from h5lens.errors import NotHDF5Error

            raise NotHDF5Error(f"{self.url}: a directory (a prefix of other objects), not a file")
        return {"size": info.get("size"), "etag": version_tag(self.url, info)}

    def close(self, *, wait: bool = True) -> None:
        """Close the HTTP session, on its own loop (waiting for it unless ``wait`` is false
        or this runs on that loop)."""
        self._release(wait=wait)

    def _release(self, *, wait: bool) -> None:
        client, loop = self._client, self._loop
        self._fs = self._path = self._client = self._loop = None
        _LIVE.discard(self)
        closer = getattr(client, "close", None)
        if closer is None or loop is None or loop.is_closed() or not loop.is_running():
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        future = asyncio.run_coroutine_threadsafe(closer(), loop)
        if wait and not on_loop:
            try:
                future.result(timeout=2)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        elif not future.done():  # finished at exit at the latest, before zarr stops its loop
            _CLOSING.add(future)
            future.add_done_callback(_CLOSING.discard)

    def __del__(self) -> None:
        # A client dropped without close(): its session still belongs to a live loop.
        try:
            self.close(wait=False)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url, "storage_options": self.storage_options, "unsigned": self.unsigned, "cost": self.cost,
            "requester_pays": self.requester_pays,
            "_fs": None, "_path": None, "_client": None, "_loop": None, "_first": FirstRequest(self.url), "_answered": False,
            "_making": weakref.WeakKeyDictionary(),
        }  # fmt: skip


async def _object_info(fs: Any, path: str) -> dict[str, Any]:
    """``fs._info(path)`` in one request where the filesystem can: gcsfs's ``_info`` lists
    the key as a directory alongside getting the object (and, the listing empty, gets the
    object again), three requests where its ``_get_object`` is one. Only an object that is
    not there is asked about again, as ``_info`` (a directory, or nothing)."""
    protocols = getattr(fs, "protocol", ())
    gcs = "gs" in (protocols if isinstance(protocols, (tuple, list)) else (protocols,))
    get_object = getattr(fs, "_get_object", None) if gcs else None
    if get_object is None:
        return cast("dict[str, Any]", await fs._info(path))
    try:
        return cast("dict[str, Any]", await get_object(path))
    except FileNotFoundError:
        return cast("dict[str, Any]", await fs._info(path))


def version_tag(url: str, info: dict[str, Any]) -> str | None:
    """What identifies the version of the object ``info`` describes: on Google Cloud Storage
    its generation (a new one for every write of the data; its ETag changes with its
    metadata too), elsewhere its ETag."""
    if url.split("://", 1)[0].lower() in ("gs", "gcs") and info.get("generation"):
        return str(info["generation"])
    etag = info.get("ETag") or info.get("etag")
    return etag.strip('"') if isinstance(etag, str) else etag


def fsspec_options(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """The options h5lens makes an fsspec filesystem with, unless the caller set them: for
    s3, a connection pool as wide as the requests in flight (botocore's default is 10),
    botocore's own retries off (one attempt each: h5lens's policy retries, see
    :mod:`h5lens.fetch.retry`) and a bounded connect timeout (botocore's default is 60 s;
    obstore's, 5 s as here); for http(s), the same connect timeout (aiohttp's: 30 s)."""
    options = dict(storage_options or {})
    protocol = url.split("://", 1)[0].lower()
    if protocol in ("s3", "s3a"):
        if "request_payer" in options:  # obstore's name for it
            options["requester_pays"] = bool(options.pop("request_payer")) or bool(options.get("requester_pays"))
        region = options.pop("region", None) or options.pop("region_name", None)
        if region:  # obstore's names (and botocore's): s3fs takes it in client_kwargs, else ignores it
            options["client_kwargs"] = {"region_name": region, **(options.get("client_kwargs") or {})}
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", FSSPEC_CONCURRENCY)
        config.setdefault("retries", {"total_max_attempts": 1})
        config.setdefault("connect_timeout", PROBE_CONNECT_TIMEOUT)
        options["config_kwargs"] = config
    elif protocol in ("http", "https"):
        try:
            import aiohttp
        except ImportError:  # fsspec's HTTP filesystem needs it: its own error says so
            return options
        client_kwargs = dict(options.get("client_kwargs") or {})
        # aiohttp's default total (5 min) kept; only connecting is bounded
        client_kwargs.setdefault("timeout", aiohttp.ClientTimeout(total=300, sock_connect=PROBE_CONNECT_TIMEOUT))
        options["client_kwargs"] = client_kwargs
    return options


def _own_retries_only(fs: Any) -> None:
    """s3fs retries a failed call up to five times itself (``S3FileSystem.retries``); on a
    filesystem h5lens made for itself (never fsspec's shared instance), one attempt, so a
    request makes at most the policy's attempts in all, not the product of three layers'."""
    if isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1


# Clients with an HTTP session: closed at exit, while zarr's event loop still runs (by the
# time the garbage collector would get to them, the loop is gone). Weak: a client closed
# or collected leaves it.
_LIVE: weakref.WeakSet[FsspecClient] = weakref.WeakSet()
# Closings not waited for (a client collected, or moved to another loop): a program that
# ends at once would have zarr stop its loop in the middle of one, leaving its session open.
_CLOSING: set[concurrent.futures.Future[Any]] = set()
_AT_EXIT = threading.Lock()
_at_exit_registered = False


def _live(client: FsspecClient) -> None:
    """Track ``client`` until it is closed; the first time, register the closing at exit
    after zarr's own (``atexit`` runs the last registered first: ours, then zarr's, which
    stops its loop)."""
    global _at_exit_registered
    _LIVE.add(client)
    with _AT_EXIT:
        if not _at_exit_registered:
            import zarr.core.sync  # noqa: F401 - registers zarr's cleanup first

            atexit.register(_close_live_clients)
            _at_exit_registered = True


def _close_live_clients() -> None:
    for client in list(_LIVE):
        try:
            client.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    concurrent.futures.wait(list(_CLOSING), timeout=2)


# One aiobotocore session per event loop for the s3 clients made on it: each new session
# loads botocore's service models again (~130 ms a client, against ~10 ms from a loaded
# session). Not shared across loops: a session's refreshable credentials hold asyncio
# locks of the loop that first used them. A user's own ``session`` or ``profile`` wins.
_SESSIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _aiobotocore_session(loop: asyncio.AbstractEventLoop) -> Any:
    session = _SESSIONS.get(loop)
    if session is None:
        from aiobotocore.session import AioSession

        session = _SESSIONS[loop] = AioSession()
    return session


__all__ = ["FSSPEC_CONCURRENCY", "FSSPEC_COST", "FsspecClient", "fsspec_options", "version_tag"]
