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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from h5lens.errors import InvalidOptionError
from h5lens.manifest.locations import resolve
from h5lens.manifest.model import Manifest, Source
from h5lens.read.open import load_or_index, open_store
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
    _store: ManifestStore | None = field(default=None, repr=False)
    _verified: bool = field(default=False, repr=False)

    @property
    def store(self) -> ManifestStore:
        """A store of the manifest: its sources checked the first time (a file that changed
        since its manifest was made is refused, by name), not again when reopened. Closed by
        :meth:`close`, so that combining a thousand files never holds a thousand open."""
        if self._store is None:
            options = self.options.but(verify=False) if self._verified else self.options
            self._store = open_store(self.manifest, options=options)
            self._verified = True
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def load_inputs(
    manifests: Sequence[Any], *, options: OpenOptions, index: Indexer | None = None
) -> list[Input]:
    """The manifests to combine, loaded (an HDF5 file is indexed with ``index``)."""
    if isinstance(manifests, (str, os.PathLike, Manifest)):
        raise InvalidOptionError("combine takes a list of manifests; got one")
    found = []
    for number, given in enumerate(manifests):
        manifest = load_or_index(given, options, index)
        # in messages: the manifest file, or for a Manifest object made in memory its file's URL
        name = os.fspath(given) if not isinstance(given, Manifest) else (manifest.location or _source_of(manifest, number))
        found.append(Input(name, manifest, options))
    if len(found) < 1:
        raise InvalidOptionError("combine needs at least one manifest")
    return found


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


__all__ = ["Indexer", "Input", "SourceTable", "load_inputs"]
