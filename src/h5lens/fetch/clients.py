"""Byte clients: the one way h5lens reads bytes of a file, local or remote.

Every read of a source (a scan's, a store's, ``validate``'s, ``index-many``'s) goes
through a client made by :func:`open_client`, which says ``get(offset, length)`` for
exactly those bytes (or an h5lens error naming the URL and the bytes) and ``stat()``
for what identifies the file's version. Three kinds:

* :class:`LocalClient`: ``os.pread`` on a file descriptor (synchronous; a page-cache read
  costs less than a thread hop), and many ranges at once as views of a read-only map of
  the file (:mod:`h5lens.fetch.mapped`);
* :class:`ObstoreClient`: obstore (Rust, ``object_store``) for ``s3://`` and plain
  ``http(s)://`` URLs: about a tenth of s3fs's CPU per request, requests in parallel
  without the GIL, and its HTTP connections shared by every client of the same store
  (made once per process, :func:`_shared_store`);
* :class:`FsspecClient`: any fsspec URL (gcs, azure, ssh ...) and anything obstore cannot
  be relied on for: S3 options that only botocore understands (a profile, ``client_kwargs``,
  ``config_kwargs``), HTTP with headers or query strings.

obstore is used when the options say all it needs (:mod:`h5lens.fetch.obstore_options`); if its
first request fails for a reason other than the object's absence, the client goes on
through fsspec (whatever s3fs can read, h5lens reads). ``H5LENS_CLIENT=fsspec`` (or
``obstore``) forces a choice. Retries follow :mod:`h5lens.fetch.retry`, one policy for all;
HTTP servers that ignore ``Range`` are found once (:mod:`h5lens.fetch.ranges`).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from h5lens.backend_errors import anon_requested, http_status, is_transient, storage_error
from h5lens.errors import AccessDeniedError, H5LensError, SourceNotFoundError, SourceReadError, StorageError, first_line
from h5lens.fetch import retry
from h5lens.fetch.mapped import MAP_FROM, FileMap, maps_wanted
from h5lens.fetch.obstore_options import obstore_config
from h5lens.fetch.ranges import FirstRequest, RangeIgnoredError
from h5lens.locations import is_remote

logger = logging.getLogger("h5lens.fetch")

CLIENT_ENV = "H5LENS_CLIENT"
# Requests in flight per source: object storage serves each connection on its own. 256
# rather than 128: a loader's preload of 312 ranged GETs (10^6 cells) then leaves in one wave
# (61k against 53k cells/s), and a remote scan of 10^6 chunks (17,888 GETs at +20 ms) takes
# 3.9-4.4 s against 5.0 (loader_bench.py, remote_scan.py --files big); whole-array reads unchanged.
# (Since BATCH: that scan 3.3-3.5 s, half the CPU.)
OBSTORE_CONCURRENCY = 256
# Ranges one obstore call fetches (get_ranges sends at most 10 requests in parallel).
BATCH = 10
FSSPEC_CONCURRENCY = 64  # s3fs spends ~1 ms of CPU per request: more in flight does not help

def forced_client() -> str:
    """``auto``, ``obstore`` or ``fsspec`` (``H5LENS_CLIENT``; ``H5LENS_SCAN_CLIENT``, its
    earlier name, is still read)."""
    return (os.environ.get(CLIENT_ENV) or os.environ.get("H5LENS_SCAN_CLIENT") or "auto").strip().lower()


# -- local files ------------------------------------------------------------------------
class LocalClient:
    """``os.pread`` on a file descriptor opened on first use (so clients pickle)."""

    local = True
    concurrency = 1
    name = "pread"

    def __init__(self, path: str) -> None:
        self.url = path
        self.path = path.removeprefix("file://")
        self._fd: int | None = None
        self._file_map: FileMap | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceNotFoundError(f"{self.path}: source file not found") from None
            except OSError as e:
                raise storage_error(e, self.path, "opening") from None
        return self._fd

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> bytes:
        """Bytes ``[offset, offset + length)``; with ``exact=False``, fewer at the end of the file."""
        fd = self._open()
        try:
            data = os.pread(fd, length, offset)
        except OSError as e:
            raise SourceReadError(f"{self.path}: reading bytes {offset}-{offset + length} failed ({e.strerror})") from None
        if len(data) != length and exact:
            raise past_end(self.path, offset, length, f"the file ({os.fstat(fd).st_size} bytes)")
        return data

    async def get(self, offset: int, length: int) -> bytes:
        # A page-cache read of one chunk takes microseconds; a thread hop costs more than it.
        return self.get_sync(offset, length)

    def views(self, offsets: np.ndarray, lengths: np.ndarray) -> list[memoryview] | None:
        """Many ranges at once as views of a read-only map of the file (:mod:`h5lens.fetch.mapped`:
        no copy); a range past the file's end is refused as :meth:`get_sync` refuses it. None
        for fewer than ``MAP_FROM`` ranges (a lazy AnnData's small reads: a pread or two costs
        less than the size check) and where local reads do not map (read them with :meth:`get_sync`)."""
        if len(offsets) < MAP_FROM or not maps_wanted() or (self._file_map is not None and self._file_map.failed):
            return None
        fd = self._open()
        try:
            size = os.fstat(fd).st_size
        except OSError as e:
            raise storage_error(e, self.path, "checking") from None
        ends = offsets + lengths
        if int(ends.max()) > size:
            first = int(np.argmax(ends > size))
            raise past_end(self.path, int(offsets[first]), int(lengths[first]), f"the file ({size} bytes)")
        if self._file_map is None:
            self._file_map = FileMap()
        return self._file_map.views(fd, size, offsets.tolist(), lengths.tolist())

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """Size and mtime; with ``fingerprint``, also the content fingerprint (two preads)."""
        del probe  # a local file answers at once
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{self.path}: source file not found") from None
        except OSError as e:
            raise storage_error(e, self.path, "checking") from None
        found: dict[str, Any] = {"size": st.st_size, "mtime": st.st_mtime}
        if fingerprint:
            from h5lens.identity import fingerprint as content

            found["fingerprint"] = content(self.get_sync, st.st_size)
        return found

    def close(self) -> None:
        if self._file_map is not None:
            self._file_map.release()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "path": self.path, "_fd": None, "_file_map": None}


# -- obstore ----------------------------------------------------------------------------
_STORES: OrderedDict[tuple[str, ...], Any] = OrderedDict()
_STORES_LOCK = threading.Lock()
_MAX_STORES = 64


def _shared_store(config: dict[str, Any], policy: retry.RetryPolicy) -> Any:
    """One obstore store per bucket (or HTTP directory), settings and retry policy, for the
    whole process: its connection pool serves every client (a new store costs ~8 ms and
    new TLS connections)."""
    import orjson

    key = (config["kind"], config["bucket"], orjson.dumps(config["config"], option=orjson.OPT_SORT_KEYS).decode(), repr(policy))
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is not None:
            _STORES.move_to_end(key)
            return store
    from obstore.store import HTTPStore, S3Store

    settings = {**config["config"], "retry_config": policy.obstore_config()}
    if config["kind"] == "s3":
        store = S3Store(config["bucket"], **settings)
    else:
        store = HTTPStore.from_url(config["bucket"], **settings)
    with _STORES_LOCK:
        _STORES[key] = store
        while len(_STORES) > _MAX_STORES:
            _STORES.popitem(last=False)
    return store


# The probe (the first request to a source: index's stat) gives up sooner: an endpoint
# that is down is reported in about a second, not after a whole backoff.
PROBE_POLICY = retry.RetryPolicy(attempts=4, first_backoff=0.1, max_backoff=0.4, deadline=20.0)
# The ranges of a batched call that failed are asked for again one by one, once each: the
# call's requests have had the policy's attempts; this only finds which range failed.
ALONE_POLICY = retry.RetryPolicy(attempts=1)


class ObstoreClient:
    """Ranged GETs of one object through obstore (see the module docstring); falls back to
    an :class:`FsspecClient` when its first request fails for another reason than the
    object's absence or a server that ignores ``Range``."""

    local = False
    concurrency = OBSTORE_CONCURRENCY

    def __init__(self, url: str, storage_options: dict[str, Any] | None, config: dict[str, Any]) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.config = config
        self._fallback: FsspecClient | None = None
        self._confirmed = forced_client() == "obstore"  # forced: no falling back
        self._first = FirstRequest(url)

    @property
    def name(self) -> str:
        return "fsspec" if self._fallback is not None else "obstore"

    def _store(self, probe: bool = False) -> Any:
        return _shared_store(self.config, PROBE_POLICY if probe else retry.policy())

    async def get(self, offset: int, length: int) -> bytes | memoryview:
        if self._fallback is not None:
            return await self._fallback.get(offset, length)
        return await self._first.run(lambda: self._get(offset, length))

    async def _get(self, offset: int, length: int, store: Any = None) -> bytes | memoryview:
        if self._fallback is not None:
            return await self._fallback.get(offset, length)
        import obstore

        try:
            data = await obstore.get_range_async(store or self._store(), self.config["path"], start=offset, length=length)
        except Exception as e:  # noqa: BLE001 - obstore's errors, named below
            return await self._failed(e, offset, length)
        self._confirmed = True
        return self._checked(memoryview(data), offset, length)

    def batches(self) -> bool:
        """Whether :meth:`get_many` asks obstore for its ranges in one call (once the first
        request has been answered through obstore: until then each goes alone)."""
        return self._fallback is None and self._confirmed and self._first.passed

    async def get_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | memoryview | BaseException]:
        """The bytes of each ``(offset, length)``, as :meth:`get` gives them, asked for in
        one call (obstore's ``get_ranges``: at most :data:`BATCH` requests, sent in
        parallel, handed over to Python once: about half the CPU per request of a call
        each, which a loader's hundreds of requests per preload feel). Ranges are never
        merged (``coalesce=0``; they must not touch). If the call fails (a request failed
        after the retry policy's attempts, or at once), each range is asked for once more on
        its own, without retries: those that come back are kept, and a range that fails
        again has that error, naming it, as its entry."""
        if not self.batches() or len(ranges) == 1:
            return await self._each(ranges)
        import obstore

        try:
            found = await obstore.get_ranges_async(
                self._store(), self.config["path"], starts=[o for o, _ in ranges], lengths=[n for _, n in ranges], coalesce=0
            )
        except Exception:  # noqa: BLE001 - which range failed: each asked for alone says
            return await self._each(ranges, _shared_store(self.config, ALONE_POLICY))
        out: list[bytes | memoryview | BaseException] = []
        for data, (offset, length) in zip(found, ranges, strict=True):
            try:
                out.append(self._checked(memoryview(data), offset, length))
            except H5LensError as e:
                out.append(e)
        return out

    async def _each(self, ranges: Sequence[tuple[int, int]], store: Any = None) -> list[bytes | memoryview | BaseException]:
        """Each range asked for on its own (through ``store``, default the policy's): its
        bytes or its error."""
        ask = self.get if store is None else lambda o, n: self._get(o, n, store)
        return list(await asyncio.gather(*(ask(o, n) for o, n in ranges), return_exceptions=True))

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> bytes | memoryview:
        """Bytes ``[offset, offset + length)`` without an event loop; with ``exact=False``,
        fewer at the end of the object."""
        if self._fallback is not None:
            return self._fallback.get_sync(offset, length, exact=exact)
        import obstore

        try:
            data = obstore.get_range(self._store(), self.config["path"], start=offset, length=length)
        except Exception as e:  # noqa: BLE001
            if self._falls_back(e):
                return self._fall_back(e).get_sync(offset, length, exact=exact)
            raise self._error(e, offset, length, explain=True) from e
        self._confirmed = True
        return self._checked(memoryview(data), offset, length, exact)

    def _checked(self, data: memoryview, offset: int, length: int, exact: bool = True) -> memoryview:
        if len(data) != length and (exact or len(data) > length):
            raise past_end(self.url, offset, length, f"the object ({len(data)} of {length} bytes came back)")
        return data

    async def _failed(self, error: BaseException, offset: int, length: int) -> bytes | memoryview:
        if self._falls_back(error):
            return await self._fall_back(error).get(offset, length)
        raise self._error(error, offset, length, explain=True) from error

    def _falls_back(self, error: BaseException) -> bool:
        import obstore.exceptions as oe

        return not self._confirmed and not isinstance(error, (oe.NotFoundError, oe.NotSupportedError, H5LensError))

    def _fall_back(self, error: BaseException) -> FsspecClient:
        logger.info("%s: obstore failed on a first request (%s); reading through fsspec", self.url, first_line(error))
        self._fallback = FsspecClient(self.url, self.storage_options)
        return self._fallback

    def _error(self, error: BaseException, offset: int, length: int, *, explain: bool = False) -> H5LensError:
        """obstore's exceptions (after its retries) as h5lens errors naming the URL and bytes."""
        import obstore.exceptions as oe

        where = f"bytes {offset}-{offset + length}"
        detail = first_line(error)
        if isinstance(error, H5LensError):
            return error
        if isinstance(error, oe.NotFoundError):
            return SourceNotFoundError(f"{self.url}: no such file or object while reading {where} ({detail})")
        if isinstance(error, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            return AccessDeniedError(f"{self.url}: access denied while reading {where} ({detail})")
        if isinstance(error, oe.NotSupportedError):
            return RangeIgnoredError(
                f"{self.url}: the server ignores HTTP Range requests (it answers with the whole file), "
                "so chunks cannot be read one by one; download the file and index or read the local copy"
            )
        if explain:  # a request the server refused: past the end of the object? (one HEAD says)
            try:
                size = self.stat(probe=True)["size"]
            except Exception:  # noqa: BLE001 - the HEAD is only an explanation
                size = None
            if isinstance(size, int) and offset + length > size:
                return past_end(self.url, offset, length, f"the object ({size} bytes)")
        return SourceReadError(f"{self.url}: reading {where} failed ({detail})")

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """Size and ETag (object storage identifies versions by ETag: no fingerprint); an
        HTTP server without ETags: size and Last-Modified."""
        del fingerprint
        if self._fallback is not None:
            return self._fallback.stat(probe=probe)
        import obstore

        try:
            meta = obstore.head(self._store(probe=probe), self.config["path"])
        except Exception as e:  # noqa: BLE001
            if self._falls_back(e):
                return self._fall_back(e).stat(probe=probe)
            raise self._stat_error(e) from e
        self._confirmed = True
        etag = meta.get("e_tag")
        found: dict[str, Any] = {"size": int(meta["size"]), "etag": etag.strip('"') if isinstance(etag, str) else None}
        if found["etag"] is None and meta.get("last_modified") is not None:
            found["mtime"] = meta["last_modified"].timestamp()
        return found

    def _stat_error(self, error: BaseException) -> H5LensError:
        import obstore.exceptions as oe

        detail = first_line(error)
        if isinstance(error, oe.NotFoundError):
            if self.config["kind"] == "s3" and self._is_prefix():
                from h5lens.errors import NotHDF5Error

                return NotHDF5Error(f"{self.url}: a directory (a prefix of other objects), not a file")
            return SourceNotFoundError(f"{self.url}: no such file or object ({detail})")
        if isinstance(error, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            return AccessDeniedError(f"{self.url}: access denied while checking it ({detail})")
        return StorageError(f"{self.url}: checking it failed ({detail})")

    def _is_prefix(self) -> bool:
        """Whether the missing object's key is a prefix of others (a "directory")."""
        import obstore

        try:
            listed = obstore.list_with_delimiter(self._store(probe=True), self.config["path"])
        except Exception:  # noqa: BLE001 - only an explanation
            return False
        return bool(listed.get("common_prefixes") or listed.get("objects"))

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()
            self._fallback = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fallback": None}


# -- fsspec -----------------------------------------------------------------------------
class FsspecClient:
    """Ranged reads through an async fsspec filesystem (s3, http, gcs ...), retried by the
    retry policy when the failure is transient (by exception type and HTTP status). The
    client owns its filesystem and HTTP session, and closes them in :meth:`close`."""

    local = False
    concurrency = FSSPEC_CONCURRENCY
    name = "fsspec"

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = _fsspec_options(url, storage_options)
        self._fs: Any = None
        self._path: str | None = None
        self._client: Any = None  # the HTTP session set_session made: ours to close
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first = FirstRequest(url)
        self._sync: dict[bool, tuple[Any, str]] = {}  # blocking filesystems (stat), probe or not

    def _sync_filesystem(self, probe: bool = False) -> tuple[Any, str]:
        import fsspec

        from h5lens.backend_errors import probe_options

        made = self._sync.get(probe)
        if made is not None:
            return made
        options = probe_options(self.url, self.storage_options) if probe else self.storage_options
        try:
            # h5lens's own instance (not fsspec's shared one): its retries are set below
            fs, path = fsspec.core.url_to_fs(self.url, **{**options, "skip_instance_cache": True})
        except Exception as e:  # noqa: BLE001 - a missing backend, an unknown protocol
            raise storage_error(e, self.url, "opening") from e
        _own_retries_only(fs)
        self._sync[probe] = (fs, path)
        return fs, path

    async def _filesystem(self) -> tuple[Any, str]:
        # An async filesystem's session belongs to the event loop that made it.
        loop = asyncio.get_running_loop()
        if self._fs is None or self._loop is not loop:
            import fsspec

            try:
                cls = fsspec.get_filesystem_class(self.url.split("://", 1)[0])
                if getattr(cls, "async_impl", False):
                    options = {**self.storage_options, "asynchronous": True, "skip_instance_cache": True}
                    if self.url.startswith(("s3://", "s3a://")) and not {"session", "profile"} & set(options):
                        options["session"] = _aiobotocore_session(loop)
                    self._fs, self._path = fsspec.core.url_to_fs(self.url, **options)
                    _own_retries_only(self._fs)
                    if hasattr(self._fs, "set_session"):
                        self._client = await self._fs.set_session()
                else:
                    self._fs, self._path = self._sync_filesystem()
            except Exception as e:  # noqa: BLE001
                raise storage_error(e, self.url, "opening", anon=anon_requested(self.storage_options)) from e
            self._loop = loop
            _LIVE.add(self)
        assert self._path is not None  # set together with self._fs
        return self._fs, self._path

    async def get(self, offset: int, length: int, *, exact: bool = True) -> bytes:
        return await self._first.run(lambda: self._get(offset, length, exact))

    async def _get(self, offset: int, length: int, exact: bool) -> bytes:
        fs, path = await self._filesystem()

        async def attempt() -> bytes:
            if getattr(fs, "asynchronous", False):
                return await fs._cat_file(path, start=offset, end=offset + length)
            return await asyncio.to_thread(fs.cat_file, path, start=offset, end=offset + length)

        try:
            data = await retry.policy().run(attempt, is_transient)
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

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> bytes:
        from zarr.core.sync import sync

        return sync(self.get(offset, length, exact=exact))

    def _read_error(self, error: BaseException, offset: int, length: int, attempts: int) -> Exception:
        where = f"bytes {offset}-{offset + length}"
        if http_status(error) == 416:
            return past_end(self.url, offset, length, "the object (HTTP 416)")
        found = storage_error(error, self.url, f"reading {where} of", anon=anon_requested(self.storage_options))
        if type(found) is StorageError:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            return SourceReadError(f"{found}{tries}")
        return found

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """Size and ETag (object storage identifies versions by ETag: no fingerprint)."""
        del fingerprint
        fs, path = self._sync_filesystem(probe)
        try:  # retried as reads are: a 503 on the HEAD is as transient as on a GET
            info = (PROBE_POLICY if probe else retry.policy()).run_sync(lambda: fs.info(path), is_transient)
        except Exception as e:  # noqa: BLE001
            raise storage_error(e, self.url, "checking", anon=anon_requested(self.storage_options)) from e
        if info.get("type") == "directory":
            from h5lens.errors import NotHDF5Error

            raise NotHDF5Error(f"{self.url}: a directory (a prefix of other objects), not a file")
        etag = info.get("ETag") or info.get("etag")
        return {"size": info.get("size"), "etag": etag.strip('"') if isinstance(etag, str) else etag}

    def close(self, *, wait: bool = True) -> None:
        """Close the HTTP session, on its own loop (waiting for it unless ``wait`` is false
        or this runs on that loop)."""
        client, loop = self._client, self._loop
        self._fs = self._client = self._loop = None
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

    def __del__(self) -> None:
        # A client dropped without close(): its session still belongs to a live loop.
        try:
            self.close(wait=False)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url, "storage_options": self.storage_options, "_fs": None, "_path": None,
            "_client": None, "_loop": None, "_first": FirstRequest(self.url), "_sync": {},
        }


def _fsspec_options(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """The options h5lens makes an fsspec filesystem with: for s3, a connection pool as
    wide as the requests in flight (botocore's default is 10) and botocore's own retries
    off (one attempt each: h5lens's policy retries, see :mod:`h5lens.fetch.retry`), unless
    the caller set them."""
    options = dict(storage_options or {})
    if url.startswith(("s3://", "s3a://")):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", FSSPEC_CONCURRENCY)
        config.setdefault("retries", {"total_max_attempts": 1})
        options["config_kwargs"] = config
    return options


def _own_retries_only(fs: Any) -> None:
    """s3fs retries a failed call up to five times itself (``S3FileSystem.retries``); on a
    filesystem h5lens made for itself (never fsspec's shared instance), one attempt, so a
    request makes at most the policy's attempts in all, not the product of three layers'."""
    if isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1


def past_end(url: str, offset: int, length: int, end: str) -> SourceReadError:
    """A reference whose bytes run past the end of its source (``end``: which end, and how
    it showed): no retry helps, the manifest does not fit the source."""
    return SourceReadError(
        f"{url}: bytes {offset}-{offset + length} end past the end of {end}: "
        "the manifest's reference does not fit this source"
    )


# Clients with an HTTP session: closed at exit, while zarr's event loop still runs (by the
# time the garbage collector would get to them, the loop is gone). Weak: a client closed
# or collected leaves it.
_LIVE: weakref.WeakSet[FsspecClient] = weakref.WeakSet()

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


@atexit.register
def _close_live_clients() -> None:
    for client in list(_LIVE):
        try:
            client.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


@runtime_checkable
class ByteReader(Protocol):
    """What every reader of h5lens reads bytes through: a local file, object storage or
    HTTP, all alike (:func:`open_client` makes the one that fits a URL). ``local`` readers
    answer ``get_sync`` at once (a page-cache read), so planners read them on the calling
    thread; the others are read on zarr's event loop, ``concurrency`` requests at a time."""

    url: str
    local: bool
    concurrency: int

    @property
    def name(self) -> str:
        """How the bytes are read (``pread``, ``obstore``, ``fsspec``), for logs and reports."""
        ...

    async def get(self, offset: int, length: int) -> bytes | memoryview:
        """Bytes ``[offset, offset + length)``, or an h5lens error naming the URL and bytes."""
        ...

    def get_sync(self, offset: int, length: int, *, exact: bool = True) -> bytes | memoryview:
        """:meth:`get` without an event loop; with ``exact=False``, fewer at the end."""
        ...

    def stat(self, *, fingerprint: bool = False, probe: bool = False) -> dict[str, Any]:
        """What identifies the source's version (size, and ETag, mtime or fingerprint)."""
        ...

    def close(self) -> None: ...


Client = ByteReader  # the name the readers have used


def open_client(url: str, storage_options: dict[str, Any] | None = None) -> ByteReader:
    """The client that reads ``url`` (see the module docstring). Nothing is sent yet."""
    if not is_remote(url):
        return LocalClient(url)
    forced = forced_client()
    config = obstore_config(url, storage_options) if forced != "fsspec" else None
    if forced == "obstore" and config is None:
        logger.info("%s: obstore cannot be configured from these storage options; using fsspec", url)
    if config is not None:
        return ObstoreClient(url, storage_options, config)
    return FsspecClient(url, storage_options)


__all__ = [
    "ByteReader",
    "CLIENT_ENV",
    "Client",
    "FsspecClient",
    "LocalClient",
    "ObstoreClient",
    "PROBE_POLICY",
    "obstore_config",
    "open_client",
]
