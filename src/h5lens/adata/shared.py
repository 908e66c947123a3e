"""One store per manifest in each dask worker process.

A lazy AnnData's tasks each carry the zarr group they read, and with it the store. Pickled
as it is, a store travels with its whole manifest and arrives as a new object per task: a
new manifest to decode, new source readers, a new S3 session per task. A
:class:`SharedManifestStore` travels as a small handle instead, and a worker process keeps
the store each handle names (:data:`_CACHE`): every task of one manifest in a process
reads through one store, one filesystem, one HTTP session.

Handles:

* ``("load", ...)``: the manifest is the file at its location, unchanged since the client
  read it. The handle is the location and the options; the worker reads the manifest
  itself, once, and checks that it records the same sources the client saw. Keyed on the
  location and the options: every lazy read of one manifest shares one store.
* ``("object", bytes)``: a manifest object (built in memory, edited, a view): the handle
  carries it, pickled once on the client; the worker unpickles it once per process.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zarr

from h5lens.errors import StaleSourceError
from h5lens.manifest.limits import DEFAULT_LIMITS, Limits
from h5lens.manifest.model import Manifest
from h5lens.read.options import load_manifest
from h5lens.store import ManifestStore

if TYPE_CHECKING:
    from h5lens.read.options import OpenOptions

# Stores kept per worker process. Bounded: a long-lived worker reading many collections
# must not keep every manifest it ever saw. A store dropped here still serves the tasks
# that hold it.
CACHE_SIZE = 256
_CACHE: OrderedDict[str, ManifestStore] = OrderedDict()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Origin:
    """Where a manifest was read from, and how: enough for a worker to read it again."""

    location: str
    storage_options: dict[str, Any]
    limits: Limits


class SharedManifestStore(ManifestStore):
    """A :class:`ManifestStore` that pickles as a handle to one store per process."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        source_options: dict[str, Any] | None = None,
        source_urls: dict[str, str] | None = None,
        allow_local: Iterable[str] | bool = (),
        origin: Origin | None = None,
        key: str | None = None,
        decoded_cache_bytes: int = 0,
    ) -> None:
        super().__init__(
            manifest,
            source_options=source_options,
            source_urls=source_urls,
            allow_local=allow_local,
            decoded_cache_bytes=decoded_cache_bytes,
        )
        self._origin = origin
        self._key = key or (_origin_key(self, origin) if origin is not None else uuid.uuid4().hex)
        self._payload: bytes | None = None

    @classmethod
    def of(cls, store: ManifestStore, origin: Origin | None = None) -> SharedManifestStore:
        shared = cls(
            store.manifest,
            source_options=store.source_options,
            source_urls=store.source_urls,
            allow_local=store.allow_local,
            origin=origin,
            decoded_cache_bytes=store.decoded_cache_bytes,
        )
        shared.checking_as(store)
        return shared

    @property
    def key(self) -> str:
        return self._key

    def __dask_tokenize__(self) -> str:
        # dask names the tasks that read this store by it: cheap, and the same every time
        return self._key

    def __reduce__(self) -> tuple[Any, ...]:
        return (_shared_store, (self._key, self._handle()))

    def _handle(self) -> tuple[Any, ...]:
        # checks_on_read: a worker's store checks each source before it reads it, as this one does
        on_read = self.checks_on_read
        common = (self.source_options, self.source_urls, self.allow_local, self.decoded_cache_bytes, on_read)
        if self._origin is not None:
            sources = tuple(s.to_dict() for s in self.manifest.sources)
            return ("load", self._origin, sources, *common)
        if self._payload is None:  # once per store, however many tasks carry it
            self._payload = pickle.dumps((self.manifest, *common), protocol=pickle.HIGHEST_PROTOCOL)
        return ("object", self._payload)


def _origin_key(store: ManifestStore, origin: Origin) -> str:
    sources = [s.to_dict() for s in store.manifest.sources]
    text = repr(
        (
            origin.location,
            sorted(origin.storage_options.items()),
            repr(origin.limits),
            sorted(store.source_options.items()),
            sorted(store.source_urls.items()),
            store.allow_local,
            store.decoded_cache_bytes,
            sources,
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _shared_store(key: str, handle: tuple[Any, ...]) -> ManifestStore:
    """The store ``key`` names in this process, built from ``handle`` the first time."""
    with _LOCK:
        store = _CACHE.get(key)
        if store is not None:
            _CACHE.move_to_end(key)
            return store
        store = _build(key, handle)
        _CACHE[key] = store
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
        return store


def _build(key: str, handle: tuple[Any, ...]) -> SharedManifestStore:
    if handle[0] == "object":
        manifest, source_options, source_urls, allow_local, cache_bytes, on_read = pickle.loads(handle[1])
        made = SharedManifestStore(
            manifest,
            source_options=source_options,
            source_urls=source_urls,
            allow_local=allow_local,
            key=key,
            decoded_cache_bytes=cache_bytes,
        )
        if on_read:
            made.check_sources_on_first_read()
        return made
    _, origin, sources, source_options, source_urls, allow_local, cache_bytes, on_read = handle
    manifest = load_manifest(origin.location, storage_options=origin.storage_options or None, limits=origin.limits)
    found = tuple(s.to_dict() for s in manifest.sources)
    if found != sources:
        raise StaleSourceError(
            f"{origin.location}: the manifest changed after it was opened (its sources are now "
            f"{[s['url'] for s in found]}); open it again",
            url=origin.location,
        )
    made = SharedManifestStore(
        manifest,
        source_options=source_options,
        source_urls=source_urls,
        allow_local=allow_local,
        origin=origin,
        key=key,
        decoded_cache_bytes=cache_bytes,
    )
    if on_read:
        made.check_sources_on_first_read()
    return made


def shared_store(group: zarr.Group, origin: Origin | None) -> SharedManifestStore:
    """The store of ``group`` (the root of a manifest's store) as a :class:`SharedManifestStore`."""
    from h5lens.read.open import store_of

    return SharedManifestStore.of(store_of(group), origin)


def origin_of(store: ManifestStore, options: OpenOptions) -> Origin | None:
    """The origin of a store's manifest if it was read from a file (and not changed since)."""
    location = store.manifest.location
    if location is None:
        return None
    return Origin(location, dict(options.storage_options or {}), options.limits or DEFAULT_LIMITS)


def cached_stores() -> int:
    """How many stores this process holds (for tests and diagnostics)."""
    return len(_CACHE)
