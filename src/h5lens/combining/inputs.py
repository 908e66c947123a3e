"""What ``combine`` takes: the manifests (objects, files, or HDF5 files indexed on the way),
each opened once, and the one table of sources the combined manifest records.

Each file's manifest records its sources with what identifies their version (size, ETag,
content fingerprint, mtime: :class:`~h5lens.manifest.tables.Source`). The combined
manifest keeps every source's record as it was, so a reader checks each file on its own
and names the one that changed (:class:`~h5lens.errors.StaleSourceError`). Sources are
recorded by their absolute URL (a file's manifest may record it relative to itself);
writing the combined manifest makes them relative to it where they lie beside it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from h5lens.errors import InvalidOptionError, NotAManifestError
from h5lens.format import convention
from h5lens.manifest.locations import is_remote, resolve
from h5lens.manifest.model import Manifest, Source
from h5lens.read.open import open_store
from h5lens.read.options import OpenOptions
from h5lens.store import ManifestStore

Indexer = Callable[..., Manifest]


@dataclass
class Input:
    """One manifest being combined: its name in messages, the manifest, a store to read the
    few values combine needs (indptr, a chunk cut short), opened on first use."""

    name: str
    manifest: Manifest
    options: OpenOptions
    # small arrays read by one pass over the files and used by a later one (csr indptr),
    # kept so that the later pass makes no request
    kept: dict[str, Any] = field(default_factory=dict, repr=False)
    _store: ManifestStore | None = field(default=None, repr=False)
    _verified: bool = field(default=False, repr=False)

    @property
    def store(self) -> ManifestStore:
        """A store of the manifest: its sources checked the first time it is opened (a file
        that changed since its manifest was made is refused, by name), not again when
        reopened: before the first read of their bytes (so that a prefetch's requests go out
        while the check's does), and all of them by :meth:`close` at the latest (a file whose
        bytes were not read is checked too). Closed by :meth:`close`, so that combining a
        thousand files never holds a thousand open."""
        if self._store is None:
            store = open_store(self.manifest, options=self.options.but(verify=False))
            if self.options.verify and not self._verified:
                store.check_sources_on_first_read()
            self._store = store
        return self._store

    def values(self, path: str, bounds: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
        """The values of array ``path`` of the file (of the region ``bounds``, whole if None),
        read by h5lens (through zarr where it does not decode the array); a small array kept
        by an earlier pass (:attr:`kept`) is not read again."""
        if bounds is None and path in self.kept:
            return np.asarray(self.kept[path])
        doc = self.manifest.nodes[path]
        region = list(bounds) if bounds is not None else [(0, int(n)) for n in doc["shape"]]
        found = self.store.read_region(path, region) if region else None
        if found is not None:
            return np.asarray(found)
        import zarr

        from h5lens.read.rectilinear import rectilinear_allowed

        with rectilinear_allowed([doc]):
            array = zarr.open_array(self.store, path=path, mode="r", zarr_format=3)
        return np.asarray(array[tuple(slice(a, b) for a, b in region)] if region else array[...])

    def close(self) -> None:
        """Close the store, its sources checked first if no read checked them all."""
        store, self._store = self._store, None
        if store is None:
            return
        try:
            if store.checks_on_read:
                store.verify_sources()  # those already checked are not checked again
                self._verified = True
        finally:
            store.close()


# Manifests loaded at once: each load is a few requests (HEAD, GET) of small objects, so a
# thousand manifests on object storage take a thousand round trips; threads overlap them.
LOADING_THREADS = 32


def load_inputs(
    manifests: Sequence[Any],
    *,
    options: OpenOptions,
    index: Indexer | None = None,
    scheduler: Any = None,
    workers: int | None = None,
) -> list[Input]:
    """The manifests to combine, loaded (at once, on threads), in the order given.

    An HDF5 file given in place of a manifest is indexed with ``index``: in this process,
    or, when ``scheduler`` or ``workers`` is given, one dask.distributed task per file, as
    :func:`h5lens.index_many` runs them (``scheduler``: a ``distributed.Client`` or an
    address; else a LocalCluster of ``workers`` processes, closed after)."""
    if isinstance(manifests, (str, os.PathLike, Manifest)):
        raise InvalidOptionError("combine takes a list of manifests; got one")
    given = list(manifests)
    if len(given) < 1:
        raise InvalidOptionError("combine needs at least one manifest")
    loaded: list[Manifest | None] = [None] * len(given)
    files: list[int] = []  # the positions of HDF5 files, indexed below

    def load(number: int) -> None:
        item = given[number]
        if isinstance(item, Manifest):
            loaded[number] = item
            return
        try:
            loaded[number] = options.load(os.fspath(item))
        except NotAManifestError as e:
            if e.kind != "hdf5":
                raise
            if index is None:
                raise InvalidOptionError(
                    f"{os.fspath(item)}: an HDF5 file; pass index=h5lens.index to index it"
                ) from None
            files.append(number)

    if len(given) == 1:
        load(0)
    else:
        with ThreadPoolExecutor(min(LOADING_THREADS, len(given))) as pool:
            list(pool.map(load, range(len(given))))  # the first failure, in order, is raised
    if files:
        assert index is not None
        files.sort()
        made = _index_files([os.fspath(given[n]) for n in files], options, index, scheduler, workers)
        for number, made_here in zip(files, made, strict=True):
            loaded[number] = made_here
    found = []
    for number, (item, manifest) in enumerate(zip(given, loaded, strict=True)):
        if manifest is None:  # pragma: no cover - every position was loaded or indexed above
            raise AssertionError(f"manifest {number} neither loaded nor indexed")
        # in messages: the manifest file, or for a Manifest object made in memory its file's URL
        name = (
            os.fspath(item) if not isinstance(item, Manifest) else (manifest.location or _source_of(manifest, number))
        )
        found.append(Input(name, manifest, options))
    return found


def _index_files(
    files: list[str], options: OpenOptions, index: Indexer, scheduler: Any, workers: int | None
) -> list[Manifest]:
    """Each HDF5 file's manifest, made in memory: here, one after another, or on a dask
    cluster when one is asked for (the first file that fails is raised, named)."""
    kwargs = {"storage_options": options.storage_options, "convention": convention.DEFAULT_PROFILE}
    if scheduler is None and workers is None:
        return [index(file, **kwargs) for file in files]
    from h5lens.many.cluster import client_for

    with client_for(scheduler, workers) as client:
        # pure=False: indexed again on every call, not a result the scheduler remembers
        futures = [client.submit(index, file, pure=False, **kwargs) for file in files]
        try:
            return list(client.gather(futures))
        finally:
            for future in futures:
                future.release()


# Files read at once by each pass of combine over the files (their var, obs, indptr, the chunk
# a file's rows end in): each is a few small requests, so on object storage the passes are
# round trips, which threads overlap; locally they are small reads and the GIL is let go.
FILE_THREADS = 8
REMOTE_FILE_THREADS = 32  # files on object storage: waiting on round trips, not on the cores


def each_file(inputs: Sequence[Input], work: Callable[[Input], Any]) -> list[Any]:
    """``work(item)`` for every input, in order, ``FILE_THREADS`` files at a time; each
    file's store is closed after its work, so that no more than that are ever open."""

    def one(item: Input) -> Any:
        try:
            return work(item)
        finally:
            item.close()

    if len(inputs) < 2:
        return [one(item) for item in inputs]
    remote = any(
        is_remote(resolve(source.url, item.manifest.location)) for item in inputs for source in item.manifest.sources
    )
    with ThreadPoolExecutor(min(REMOTE_FILE_THREADS if remote else FILE_THREADS, len(inputs))) as pool:
        return list(pool.map(one, inputs))  # the first failure, in order, is raised


def _source_of(manifest: Manifest, number: int) -> str:
    urls = [source.url for source in manifest.sources]
    return urls[0] if len(urls) == 1 else f"manifest {number} ({', '.join(urls[:2])})" if urls else f"manifest {number}"


class SourceTable:
    """The sources of the combined manifest: every input's, by absolute URL, once each.
    The same file recorded with two different versions (two manifests made at different
    times) is refused, naming it: one of them would be read stale."""

    def __init__(self) -> None:
        self.sources: list[Source] = []
        self._at: dict[str, int] = {}
        self._named: dict[str, str] = {}

    def add(self, item: Input) -> np.ndarray:
        """Where each of ``item``'s sources is in the table (its source index → the table's)."""
        mapping = np.empty(len(item.manifest.sources), dtype=np.int32)
        for number, source in enumerate(item.manifest.sources):
            url = resolve(source.url, item.manifest.location)
            source = replace(source, url=url)
            at = self._at.get(url)
            if at is None:
                at = self._at[url] = len(self.sources)
                self.sources.append(source)
                self._named[url] = item.name
            elif self.sources[at] != source:
                raise InvalidOptionError(
                    f"{url}: recorded differently by {self._named[url]} and {item.name} (indexed at different "
                    "times?); index it again so that both manifests record the file as it is"
                )
            mapping[number] = at
        return mapping


__all__ = ["Indexer", "Input", "SourceTable", "each_file", "load_inputs"]
