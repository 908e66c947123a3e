"""The obstore byte reader: ``s3://``, ``az://`` / ``abfs://`` and plain ``http(s)://`` URLs
through obstore (Rust, ``object_store``): about a tenth of s3fs's CPU per request, requests in
parallel without the GIL, its HTTP connections shared by every client of the same store (made once per process,
:func:`_shared_store`), and many ranges asked for in one call (:meth:`ObstoreClient.get_many`).

If its first request fails for a reason other than the object's absence, the client goes on
through fsspec (:class:`~h5lens.fetch.fsspec_client.FsspecClient`: whatever s3fs can read,
h5lens reads); :mod:`h5lens.fetch.clients` chooses which client a URL gets.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from h5lens.errors import AccessDeniedError, H5LensError, SourceNotFoundError, SourceReadError, StorageError, first_line
from h5lens.fetch import cost as costs
from h5lens.fetch import retry
from h5lens.fetch.backend_errors import PROBE_CONNECT_TIMEOUT, redact_urls, signed_denied, unsigned_refused
from h5lens.fetch.cost import CostModel
from h5lens.fetch.fsspec_client import FsspecClient
from h5lens.fetch.protocol import FetchedOrFailed, each_alone
from h5lens.fetch.ranges import FirstRequest, RangeIgnoredError, past_end

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


def forced_client() -> str:
    """``auto``, ``obstore`` or ``fsspec`` (``H5LENS_CLIENT``; ``H5LENS_SCAN_CLIENT``, its
    earlier name, is still read)."""
    return (os.environ.get(CLIENT_ENV) or os.environ.get("H5LENS_SCAN_CLIENT") or "auto").strip().lower()


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
    from obstore.store import AzureStore, HTTPStore, S3Store

    settings = {**config["config"], "retry_config": policy.obstore_config()}
    # obstore's own default, said here: the bound h5lens documents for a first request
    settings["client_options"] = {"connect_timeout": f"{PROBE_CONNECT_TIMEOUT}s", **settings.get("client_options", {})}
    if config["kind"] == "s3":
        store = S3Store(config["bucket"], **settings)
    elif config["kind"] == "azure":
        store = AzureStore(config["bucket"], **settings)
    else:
        store = HTTPStore.from_url(config["bucket"], **settings)
    with _STORES_LOCK:
        _STORES[key] = store
        while len(_STORES) > _MAX_STORES:
            _STORES.popitem(last=False)
    return store


# The probe (the first request to a source: index's stat) and the requests before an
# object's first answer give up sooner: an endpoint that is down is reported in about a
# second, not after a whole backoff (:data:`h5lens.fetch.retry.PROBE`).
PROBE_POLICY = retry.PROBE
# The ranges of a batched call that failed are asked for again one by one, once each: the
# call's requests have had the policy's attempts; this only finds which range failed.
ALONE_POLICY = retry.RetryPolicy(attempts=1)


class ObstoreClient:
    """Ranged GETs of one object through obstore (see the module docstring); falls back to
    an :class:`FsspecClient` when its first request fails for another reason than the
    object's absence or a server that ignores ``Range``. Until the object's first answer,
    requests go through the probe policy (where fsspec can take over: not when forced)."""

    local = False
    concurrency = OBSTORE_CONCURRENCY
    maps = False

    def __init__(
        self, url: str, storage_options: dict[str, Any] | None, config: dict[str, Any], *, unsigned: bool = False
    ) -> None:
        self.url = url
        self.unsigned = unsigned  # read unsigned because no credentials were found (h5lens.fetch.credentials)
        self._cost = costs.from_environment(replace(costs.OBJECT_STORE, in_flight=self.concurrency))
        self.storage_options = dict(storage_options or {})
        self.config = config
        self._fallback: FsspecClient | None = None
        self._forced = forced_client() == "obstore"  # forced: no falling back
        self._answered = False  # whether a request has succeeded through obstore
        self._first = FirstRequest(url)

    @property
    def name(self) -> str:
        return "fsspec" if self._fallback is not None else "obstore"

    @property
    def cost(self) -> CostModel:
        return self._fallback.cost if self._fallback is not None else self._cost

    def views(self, offsets: np.ndarray, lengths: np.ndarray) -> None:
        return None  # nothing to map: every range is a request

    @property
    def _confirmed(self) -> bool:
        """Whether obstore is this client's for good (it answered, or it was forced): no
        falling back to fsspec, and the retry policy's full patience."""
        return self._answered or self._forced

    def _store(self, probe: bool = False) -> Any:
        first_contact = (probe or not self._answered) and not self._forced
        return _shared_store(self.config, PROBE_POLICY if first_contact else retry.policy())

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
        self._answered = True
        return self._checked(memoryview(data), offset, length)

    def batches(self) -> int:
        """How many ranges :meth:`get_many` asks obstore for in one call: :data:`BATCH` once
        the first request has been answered through obstore (until then each goes alone: 0)."""
        return BATCH if self._fallback is None and self._confirmed and self._first.passed else 0

    async def get_many(self, ranges: Sequence[tuple[int, int]]) -> list[FetchedOrFailed]:
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
        out: list[FetchedOrFailed] = []
        for data, (offset, length) in zip(found, ranges, strict=True):
            try:
                out.append(self._checked(memoryview(data), offset, length))
            except H5LensError as e:
                out.append(e)
        return out

    async def _each(self, ranges: Sequence[tuple[int, int]], store: Any = None) -> list[FetchedOrFailed]:
        """Each range asked for on its own (through ``store``, default the policy's): its
        bytes or its error."""
        return await each_alone(self.get if store is None else lambda o, n: self._get(o, n, store), ranges)

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
        self._answered = True
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

        return not self._confirmed and not isinstance(error, (FileNotFoundError, oe.NotSupportedError, H5LensError))

    def _fall_back(self, error: BaseException) -> FsspecClient:
        logger.info(
            "%s: obstore failed on a first request (%s); reading through fsspec", self.url, redact_urls(first_line(error))
        )
        self._fallback = FsspecClient(self.url, self.storage_options, unsigned=self.unsigned)
        return self._fallback

    def _error(self, error: BaseException, offset: int, length: int, *, explain: bool = False) -> H5LensError:
        """obstore's exceptions (after its retries) as h5lens errors naming the URL and bytes."""
        import obstore.exceptions as oe

        where = f"bytes {offset}-{offset + length}"
        detail = redact_urls(first_line(error))
        if isinstance(error, H5LensError):
            return error
        if isinstance(error, FileNotFoundError):  # obstore >= 0.12 raises the builtin for a missing object
            return self._missing(detail, f" while reading {where}")
        if isinstance(error, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            return self._denied(f"reading {where} of it", detail)
        if isinstance(error, oe.NotSupportedError):
            return RangeIgnoredError(
                f"{self.url}: the server ignores HTTP Range requests (it answers with the whole file), "
                "so chunks cannot be read one by one; download the file and index or read the local copy"
            )
        if explain:  # a request the server refused: past the end of the object? (one HEAD says)
            import obstore

            try:  # through the probe policy, forced or not: only an explanation
                size = int(obstore.head(_shared_store(self.config, PROBE_POLICY), self.config["path"])["size"])
            except Exception:  # noqa: BLE001 - the HEAD is only an explanation
                size = None
            if isinstance(size, int) and offset + length > size:
                return past_end(self.url, offset, length, f"the object ({size} bytes)")
        # obstore's errors say nothing typed about the connection: an object that never
        # answered is a failure of its storage (check the endpoint), one that did, of these bytes
        failed = SourceReadError if self._answered else StorageError
        return failed(f"{self.url}: reading {where} failed ({detail})")

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
        self._answered = True
        etag = meta.get("e_tag")
        found: dict[str, Any] = {"size": int(meta["size"]), "etag": etag.strip('"') if isinstance(etag, str) else None}
        if found["etag"] is None and meta.get("last_modified") is not None:
            found["mtime"] = meta["last_modified"].timestamp()
        return found

    def _stat_error(self, error: BaseException) -> H5LensError:
        import obstore.exceptions as oe

        detail = redact_urls(first_line(error))
        if isinstance(error, FileNotFoundError):
            return self._missing(detail, directory=True)
        if isinstance(error, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            return self._denied("checking it", detail)
        return StorageError(f"{self.url}: checking it failed ({detail})")

    def _denied(self, doing: str, detail: str) -> H5LensError:
        """A request refused: to a reader that went unsigned for want of credentials, the
        data needs them; to one told to (``anon``), it may; else check the credentials."""
        if self.unsigned:
            return unsigned_refused(self.url, doing, detail)
        if self.config["config"].get("skip_signature"):
            return AccessDeniedError(
                f"{self.url}: access denied while {doing} ({detail}); anonymous access was asked for (--anon): "
                "the data may need credentials"
            )
        return signed_denied(self.url, doing, detail, requester_pays=bool(self.config["config"].get("request_payer")))

    def _missing(self, detail: str, doing: str = "", *, directory: bool = False) -> H5LensError:
        """The error for an object obstore did not find. On S3, one listing of its key says
        more (obstore's error does not say which of object and bucket is missing): a bucket
        that does not list (denied apart) is not there; with ``directory``, a key that other
        objects' keys start with is a directory, not a file."""
        if self.config["kind"] == "s3":
            import obstore
            import obstore.exceptions as oe

            try:
                listed = obstore.list_with_delimiter(_shared_store(self.config, PROBE_POLICY), self.config["path"])
            except (oe.PermissionDeniedError, oe.UnauthenticatedError):
                pass  # not allowed to list: which is missing, nobody says
            except Exception:  # noqa: BLE001 - the GET just reached the server: the bucket is missing
                return SourceNotFoundError(f"{self.url}: no such bucket ({detail})")
            else:
                if directory and (listed.get("common_prefixes") or listed.get("objects")):
                    from h5lens.errors import NotHDF5Error

                    return NotHDF5Error(f"{self.url}: a directory (a prefix of other objects), not a file")
        return SourceNotFoundError(f"{self.url}: no such file or object{doing} ({detail})")

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()
            self._fallback = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fallback": None}


__all__ = ["BATCH", "OBSTORE_CONCURRENCY", "PROBE_POLICY", "ObstoreClient", "forced_client"]
