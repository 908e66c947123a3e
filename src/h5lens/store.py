"""ManifestStore: a read-only zarr v3 store over a Manifest.

Metadata keys return the manifest's ``zarr.json`` documents, chunk keys the
inline bytes or the referenced byte range of the source file. A key the
manifest does not hold is ``None`` (never a parent's document). Every byte read
from a source goes through one :class:`~h5lens.fetch.sources.SourceReads`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from h5lens.codecs import register as register_codecs
from h5lens.engine.decoded_cache import DecodedChunks
from h5lens.engine.reader import ReadEngine
from h5lens.errors import (
    H5LensError,
    InvalidOptionError,
    RefusedSourceError,
    SourceReadError,
)
from h5lens.fetch.sources import ChunkRead, ReadStats, SourceReads
from h5lens.first_reads import CHECK_AT_OPEN, CheckedReads, SourceChecks, check_source
from h5lens.manifest.checks import VLEN_ALONE, codec_names, vlen_count_problem
from h5lens.manifest.documents import chunk_shape_of
from h5lens.manifest.locations import is_remote, resolve
from h5lens.manifest.model import MISSING, Manifest
from h5lens.manifest.refs_json import dumps_document
from h5lens.manifest.tables import ChunkTable
from h5lens.manifest.zarr_keys import DEFAULT_ENCODING, METADATA, KeyGrammar, chunk_key, metadata_key, metadata_path

__all__ = ["ManifestStore", "ReadStats"]

# zarr finds h5lens.lzf through the "zarr.codecs" entry point of an installed h5lens; a
# source checkout on sys.path has none, and a store is where LZF chunks get decoded.
register_codecs()

_READ_ONLY = "ManifestStore is read-only"
# zarr's own words for a write to a read-only store (Store._check_writable): zarr's callers
# and its store conformance tests match on them
_WRITE_REFUSED = "store was opened in read-only mode and does not support writing (ManifestStore is read-only)"


class _NoWritableCopyError(NotImplementedError, ValueError):
    """``with_read_only(False)``: a NotImplementedError, which is how zarr is told that a
    store has no writable copy (it falls back or says so), and a ValueError, which is what
    h5lens raised for it before."""


class ManifestStore(Store):
    """Serve a :class:`~h5lens.manifest.model.Manifest` as a read-only zarr v3 store.

    ``source_options`` are the fsspec storage options used to read the source
    files; ``source_urls`` remaps source URLs (a moved bucket, a local mirror).
    """

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(
        self,
        manifest: Manifest,
        *,
        source_options: dict[str, Any] | None = None,
        source_urls: dict[str, str] | None = None,
        read_only: bool = True,
        allow_local: Iterable[str] | bool = (),
        decoded_cache_bytes: int = 0,
    ) -> None:
        if not read_only:
            raise ValueError(_READ_ONLY)
        super().__init__(read_only=True)
        self.manifest = manifest
        self.source_options = dict(source_options or {})
        self.source_urls = dict(source_urls or {})
        self.allow_local: tuple[str, ...] | bool = allow_local if isinstance(allow_local, bool) else tuple(allow_local)
        self._check_local_sources()
        if type(decoded_cache_bytes) is not int or decoded_cache_bytes < 0:
            raise InvalidOptionError(f"decoded_cache_bytes must be a byte count (0: off). Got {decoded_cache_bytes!r}")
        self.decoded_cache_bytes = decoded_cache_bytes
        self._decoded: DecodedChunks | None = None
        self._reads: SourceReads | None = None
        self._metadata: dict[str, bytes] | None = None
        self._grammar: KeyGrammar | None = None
        self._vlen_items: dict[str, int] | None = None
        self._tree: dict[str, list[str]] | None = None
        self._engine: ReadEngine | None = None
        self._checks: SourceChecks | None = None
        self._check_on_read = False

    # -- identity and pickling -------------------------------------------
    def __eq__(self, other: object) -> bool:
        """Stores are equal when they serve the same manifest (by value) from the same sources."""
        return (
            isinstance(other, ManifestStore)
            and other.source_options == self.source_options
            and other.source_urls == self.source_urls
            and (other.manifest is self.manifest or other.manifest == self.manifest)
        )

    def __hash__(self) -> int:
        return hash((len(self.manifest.nodes), tuple(s.url for s in self.manifest.sources)))

    def __repr__(self) -> str:
        sources = ", ".join(s.url for s in self.manifest.sources)
        return f"ManifestStore({len(self.manifest.nodes)} nodes, sources=[{sources}])"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reads"] = None
        state["_metadata"] = None
        state["_grammar"] = None
        state["_vlen_items"] = None
        state["_tree"] = None
        state["_engine"] = None  # built again on first use, with the process's own caches
        state["_decoded"] = None  # each process keeps its own
        state["_checks"] = None  # a copy in another process checks the sources it reads itself
        return state

    @property
    def decoded_chunks(self) -> DecodedChunks | None:
        """The decoded chunks kept for later reads (``decoded_cache_bytes``; None when off):
        see :mod:`h5lens.engine.decoded_cache`."""
        if self.decoded_cache_bytes and self._decoded is None:
            self._decoded = DecodedChunks(self.decoded_cache_bytes)
        return self._decoded

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def with_read_only(self, read_only: bool = False) -> ManifestStore:
        if not read_only:
            raise _NoWritableCopyError(
                f"with_read_only is not implemented for the {type(self)} store type. {_READ_ONLY}"
            )
        return self

    # -- lookups ------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, bytes]:
        if self._metadata is None:
            self._metadata = {
                metadata_key(path): dumps_document(doc).encode() for path, doc in self.manifest.nodes.items()
            }
        return self._metadata

    @property
    def grammar(self) -> KeyGrammar:
        """The key grammar of this manifest's arrays (built once)."""
        if self._grammar is None:
            self._grammar = KeyGrammar.of_documents(self.manifest.nodes)
        return self._grammar

    @property
    def reads(self) -> SourceReads:
        """Every read of the sources this store makes (readers opened on first use)."""
        if self._reads is None:
            urls = [self.source_url(i) for i in range(len(self.manifest.sources))]
            if self._check_on_read:
                self._reads = CheckedReads(urls, self.manifest.chunks, self.source_options, self.checks)
            else:
                self._reads = SourceReads(urls, self.manifest.chunks, self.source_options)
        return self._reads

    # -- the read engine (h5lens.engine) and what it reads through -------------------
    @property
    def engine(self) -> ReadEngine:
        """The read engine over this store's arrays (built on first use): regions, runs and
        many chunks at once, each through one read plan."""
        if self._engine is None:
            self._engine = ReadEngine(self)
        return self._engine

    @property
    def documents(self) -> Mapping[str, dict[str, Any]]:
        return self.manifest.nodes

    @property
    def tables(self) -> Mapping[str, ChunkTable]:
        return self.manifest.chunks

    @property
    def chunk_bytes(self) -> SourceReads:
        return self.reads

    def chunk_key_at(self, path: str, flat: int) -> str:
        return chunk_key(path, self._grid_index(path, flat), self.grammar.arrays[path][0])

    def read_region(self, path: str, bounds: Sequence[tuple[int, int]]) -> np.ndarray | None:
        """The values of array ``path`` in ``[start, stop)`` per axis, read as one plan
        (:meth:`h5lens.engine.reader.ReadEngine.read_region`); None if h5lens does not
        decode the array itself (read it through zarr)."""
        return self.engine.read_region(path, bounds)

    def read_runs(self, path: str, starts: np.ndarray, stops: np.ndarray) -> np.ndarray | None:
        """The values of runs ``[starts[i], stops[i])`` of 1-d array ``path``, one after the
        other (:meth:`h5lens.engine.reader.ReadEngine.read_runs`); None if h5lens does not
        decode the array itself."""
        return self.engine.read_runs(path, starts, stops)

    @property
    def stats(self) -> ReadStats:
        """Requests and bytes read from the sources (inline chunks and metadata cost none)."""
        return self.reads.stats

    def _node_tree(self) -> dict[str, list[str]]:
        """path -> sorted names one level below it that lead to a node (built once). Unlike
        ``Manifest.children`` it has the groups a manifest names only as part of a deeper
        node's path (one written by another tool may have no document for them): zarr lists
        a store by its keys, and ``a/b/zarr.json`` is a key below ``a``."""
        if self._tree is None:
            below: dict[str, set[str]] = {}
            for path in self.manifest.nodes:
                parts = path.split("/") if path else []
                for depth, name in enumerate(parts):
                    below.setdefault("/".join(parts[:depth]), set()).add(name)
            self._tree = {path: sorted(names) for path, names in below.items()}
        return self._tree

    def remapped(self, index: int) -> str | None:
        """Where the caller said to read source ``index`` from (``source_urls``, keyed by the
        URL as recorded or as it resolves against the manifest), or None."""
        url = self.manifest.sources[index].url
        found = self.source_urls.get(url)
        if found is None:
            found = self.source_urls.get(resolve(url, self.manifest.location))
        return found

    def source_url(self, index: int) -> str:
        remapped = self.remapped(index)
        if remapped is not None:
            return remapped
        return resolve(self.manifest.sources[index].url, self.manifest.location)

    def _check_local_sources(self) -> None:
        """A manifest read from a remote URL reaches only remote sources (or local files the
        caller allowed, or remapped with ``source_urls``): someone else's manifest must not
        make h5lens read this machine's files."""
        location = self.manifest.location
        if location is None or not is_remote(location) or self.allow_local is True:
            return
        for index in range(len(self.manifest.sources)):
            if self.remapped(index) is not None:
                continue  # the caller chose where this source is read from
            url = self.source_url(index)
            if is_remote(url):
                continue
            path = os.path.realpath(url.removeprefix("file://"))
            allowed = () if self.allow_local is False else self.allow_local
            if not any(path == os.path.realpath(p) or path.startswith(os.path.realpath(p).rstrip("/") + "/") for p in allowed):
                said = f"{location} points at the local file {url}: a manifest read from a remote URL may not read local files"
                raise RefusedSourceError(
                    f"{said}; pass allow_local=[...] (or remap the source with source_urls) to allow it"
                ).at_cli(f"{said}; pass --allow-local DIR (or remap the source with --source-url OLD=NEW) to allow it")

    def describe_key(self, key: str) -> str:
        """Where a chunk key's bytes are, for messages: the chunk key, its array, and the source
        URL and byte range it points at (or that it is inline)."""
        located = self.grammar.chunk(key)
        if located is None:
            return f"key {key!r} (not a chunk of this manifest)"
        path, index = located
        entry = self.manifest.chunks[path].lookup(index)
        if entry is None:
            return f"chunk {key!r} of /{path} (absent: the fill value)"
        if isinstance(entry, bytes):
            return f"chunk {key!r} of /{path} (inline, {len(entry)} bytes)"
        source, offset, length = entry
        return f"chunk {key!r} of /{path} ({self.source_url(source)}, bytes {offset}-{offset + length})"

    def describe_chunk(self, path: str, index: tuple[int, ...]) -> str:
        return self.describe_key(chunk_key(path, index, self.grammar.arrays[path][0]))

    def describe_flat_chunk(self, path: str, flat: int) -> str:
        """:meth:`describe_chunk` of the chunk at ``flat`` in the array's grid, C order."""
        return self.describe_chunk(path, self._grid_index(path, flat))

    def _grid_index(self, path: str, flat: int) -> tuple[int, ...]:
        grid = self.manifest.chunks[path].grid_shape
        return tuple(int(i) for i in np.unravel_index(flat, grid)) if grid else ()

    def _resolve(self, key: str, byte_range: ByteRequest | None) -> bytes | ChunkRead | None:
        """What ``key`` holds: bytes in the manifest, a byte range of a source, or None."""
        doc = self.metadata.get(key)
        if doc is not None:
            return _slice(doc, byte_range)
        located = self.grammar.chunk(key)
        if located is None:
            node = metadata_path(key)
            if node is not None:  # a node indexing left out as unreadable: raise why, not "no such node"
                self.manifest.refuse_unreadable(node)
            return None
        path, index = located
        table = self.manifest.chunks[path]
        entry = table.lookup(index)
        if entry is None or isinstance(entry, bytes):  # inline chunks were checked when loaded
            return entry if entry is None else _slice(entry, byte_range)
        source, offset, length = entry
        start, stop = byte_bounds(length, byte_range)
        flat = int(np.ravel_multi_index(index, table.grid_shape)) if index else 0
        return ChunkRead(path, flat, source, offset, length, start, stop)

    @property
    def vlen_items(self) -> dict[str, int]:
        """Arrays whose chunks a variable-length codec alone decodes → items per chunk."""
        if self._vlen_items is None:
            self._vlen_items = {
                path: math.prod(chunk_shape_of(doc))
                for path, doc in self.manifest.nodes.items()
                if doc.get("node_type") == "array" and codec_names(doc) in VLEN_ALONE
            }
        return self._vlen_items

    def _check_vlen(self, key: str, path: str, data: bytes | memoryview) -> None:
        """A referenced variable-length chunk holds the item count it must (see
        :func:`~h5lens.manifest.checks.vlen_count_problem`; inline ones are checked when
        a manifest is loaded)."""
        expected = self.vlen_items.get(path)
        if expected is None:
            return
        problem = vlen_count_problem(data, expected)
        if problem is not None:
            raise SourceReadError(f"chunk {key!r} of /{path}: {problem}; the manifest or its source is damaged")

    def _note(self, error: H5LensError, key: str, chunk: ChunkRead) -> None:
        error.add_note(
            f"while reading chunk {key!r} (/{chunk.path}, bytes {chunk.offset + chunk.start}-{chunk.offset + chunk.stop})"
        )

    # -- sources ----------------------------------------------------------------
    def verify_sources(self) -> None:
        """Check that every source is the file that was indexed (:mod:`h5lens.manifest.identity`:
        size and ETag, content fingerprint or mtime), those not checked yet at once on threads;
        raises for the first (in source order) that is missing or changed."""
        self.checks.ensure(range(len(self.manifest.sources)))

    def check_sources(self) -> None:
        """Check the sources as a store opened with ``verify`` does: all now (one round of
        checks on threads) when there are at most :data:`~h5lens.first_reads.CHECK_AT_OPEN`,
        else each before its first byte is read (a combined manifest of many files)."""
        if len(self.manifest.sources) <= CHECK_AT_OPEN:
            self.verify_sources()
        else:
            self.check_sources_on_first_read()

    def check_sources_on_first_read(self) -> None:
        """Check each source before its first byte is read (:mod:`h5lens.first_reads`), not
        all now: a manifest of many files opens without a round trip per file, and reads check
        only the files they read. Every read source is still checked, with the same errors."""
        if self._reads is None:
            self._check_on_read = True
        else:  # reads already made unchecked: check now
            self.verify_sources()

    @property
    def checks_on_read(self) -> bool:
        return self._check_on_read

    def checking_as(self, other: ManifestStore) -> ManifestStore:
        """This store (a view or a copy of ``other``'s manifest, with its sources) checking its
        sources as ``other`` does: on first read, sharing what ``other`` checked already."""
        if other.checks_on_read and self._reads is None:
            self._check_on_read = True
            if [s.url for s in self.manifest.sources] == [s.url for s in other.manifest.sources]:
                self._checks = other.checks
        return self

    @property
    def checks(self) -> SourceChecks:
        """Which sources were checked (:class:`h5lens.first_reads.SourceChecks`)."""
        if self._checks is None:
            self._checks = SourceChecks(self.manifest.sources, self.check_source)
        return self._checks

    def check_source(self, index: int) -> None:
        """Check that source ``index`` is there and is the file indexed; raises naming it."""
        check_source(self.reads, index, self.manifest.sources[index], self.source_url(index), self.remapped(index))

    def prefetch_all(self, budget: int | None = None, paths: Callable[[str], bool] | None = None) -> int:
        """Start fetching every referenced chunk of remote sources (of the arrays ``paths``
        accepts), in file order, up to ``budget`` bytes, as one batch of merged requests (for
        reads that will touch everything, like an eager AnnData read). Returns the bytes
        requested."""
        from zarr.core.sync import sync

        requested, start = self.reads.prefetch(paths=paths) if budget is None else self.reads.prefetch(budget, paths)
        if start is not None:
            sync(start())
        return requested

    def read_chunks(self, path: str, flats: np.ndarray | None = None) -> dict[int, bytes | memoryview]:
        """The stored (encoded) bytes of many chunks of array ``path`` at once, by flat index
        in C order of its chunk grid (every present chunk by default): merged requests for
        remote sources, whatever a prefetch already fetched, inline chunks from the manifest."""
        from zarr.core.sync import sync

        return sync(self.reads.read_many(path, flats))

    # -- synchronous reads (zarr's FusedCodecPipeline) ------------------------
    @property
    def _supports_sync_io(self) -> bool:
        # Only local sources read synchronously: remote reads need the event loop to merge.
        return self.reads.all_local

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        from zarr.core.buffer import default_buffer_prototype

        prototype = prototype or default_buffer_prototype()
        found = self._resolve(key, byte_range)
        if isinstance(found, ChunkRead):
            with self._naming(key, found):
                found = self._checked(key, found, self.reads.read_sync(found), byte_range)
        return None if found is None else prototype.buffer.from_bytes(found)

    def set_sync(self, key: str, value: Buffer) -> None:
        raise ValueError(_WRITE_REFUSED)

    def delete_sync(self, key: str) -> None:
        raise ValueError(_WRITE_REFUSED)

    # -- Store API ------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if byte_range is not None and not isinstance(byte_range, (RangeByteRequest, OffsetByteRequest, SuffixByteRequest)):
            raise TypeError(f"Unexpected byte_range, got {byte_range!r}")
        found = self._resolve(key, byte_range)
        if isinstance(found, ChunkRead):
            with self._naming(key, found):
                found = self._checked(key, found, await self.reads.read(found), byte_range)
        return None if found is None else prototype.buffer.from_bytes(found)

    @contextlib.contextmanager
    def _naming(self, key: str, chunk: ChunkRead) -> Iterator[None]:
        """A failed read of ``chunk`` names the key and the bytes the manifest gave it."""
        try:
            yield
        except H5LensError as e:
            self._note(e, key, chunk)
            raise

    def _checked(self, key: str, chunk: ChunkRead, data: bytes, byte_range: ByteRequest | None) -> bytes:
        if byte_range is None:
            self._check_vlen(key, chunk.path, data)
        return data

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def getsize(self, key: str) -> int:
        """The size of a key's value from the manifest alone (no source is read)."""
        doc = self.metadata.get(key)
        if doc is not None:
            return len(doc)
        located = self.grammar.chunk(key)
        entry = None if located is None else self.manifest.chunks[located[0]].lookup(located[1])
        if entry is None:
            raise FileNotFoundError(key)
        return len(entry) if isinstance(entry, bytes) else entry[2]

    async def exists(self, key: str) -> bool:
        if key in self.metadata:
            return True
        located = self.grammar.chunk(key)
        return located is not None and self.manifest.chunks[located[0]].lookup(located[1]) is not None

    async def set(self, key: str, value: Buffer) -> None:
        raise ValueError(_WRITE_REFUSED)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        raise ValueError(_WRITE_REFUSED)

    async def delete(self, key: str) -> None:
        raise ValueError(_WRITE_REFUSED)

    async def list(self) -> AsyncIterator[str]:
        for key in self._keys_under(""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in self._keys_under(prefix):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The names one level below ``prefix``, as zarr lists a store by its keys: a node's
        ``zarr.json``, the nodes below it, and the heads of the chunk keys below it."""
        path = prefix.rstrip("/")
        seen: set[str] = set()
        names = [METADATA] if path in self.manifest.nodes else []
        for name in (*names, *self._node_tree().get(path, ())):
            if name not in seen:
                seen.add(name)
                yield name
        base = path + "/" if path else ""
        for array in self._arrays_at_or_above(path):
            if array == path and self.grammar.arrays[path][0] == DEFAULT_ENCODING and self.grammar.arrays[path][1]:
                # every chunk key of the array is <path>/c/i/j...: no need to list them
                if "c" not in seen and self.manifest.chunks[path].n_present:
                    seen.add("c")
                    yield "c"
                continue
            # other encodings name chunks at this level ("0.1", "c.0"); an array above
            # ``path`` may have chunk keys below it (path "c" of an array at the root)
            for key in self._chunk_keys(array):
                if key.startswith(base):
                    head = key[len(base) :].split("/", 1)[0]
                    if head not in seen:
                        seen.add(head)
                        yield head

    def _arrays_at_or_above(self, path: str) -> Iterator[str]:
        """The arrays (with chunk tables) at ``path`` and at each of its ancestors, the root first."""
        parts = path.split("/") if path else []
        for depth in range(len(parts) + 1):
            ancestor = "/".join(parts[:depth])
            if ancestor in self.manifest.chunks and ancestor in self.grammar.arrays:
                yield ancestor

    def _keys_under(self, prefix: str) -> Iterator[str]:
        """Every key that may start with ``prefix`` (callers filter): metadata keys, and the
        chunk keys of the arrays whose keys can start with it only (not every key of every
        array). ``prefix`` is a string prefix, as zarr's ``list_prefix`` takes it: "c" may
        begin "cc/0" as well as "c/0"."""
        yield from sorted(self.metadata)
        for path in sorted(self.manifest.chunks):
            # array path's keys are "<path>/<tail>" ("<tail>" at the root)
            below = path + "/"
            if not path or below.startswith(prefix) or prefix.startswith(below):
                yield from self._chunk_keys(path)

    def _chunk_keys(self, path: str) -> Iterator[str]:
        """The keys of array ``path``'s present chunks, in C order."""
        table = self.manifest.chunks[path]
        encoding = self.grammar.arrays[path][0]
        if table.grid_shape == ():
            if table.lookup(()) is not None:
                yield chunk_key(path, (), encoding)
            return
        for index in np.argwhere(table.source != MISSING):
            yield chunk_key(path, tuple(int(i) for i in index), encoding)

    def close(self) -> None:
        if self._reads is not None:
            self._reads.close()
        if self._checks is not None:
            self._checks.close()
        super().close()


def byte_bounds(length: int, byte_range: ByteRequest | None) -> tuple[int, int]:
    """``[start, stop)`` of an object of ``length`` bytes that a zarr byte request asks for
    (clipped to it)."""
    if byte_range is None:
        return 0, length
    if isinstance(byte_range, RangeByteRequest):
        return min(byte_range.start, length), min(byte_range.end, length)
    if isinstance(byte_range, OffsetByteRequest):
        return min(byte_range.offset, length), length
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, length - byte_range.suffix), length
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


def _slice(data: bytes, byte_range: ByteRequest | None) -> bytes:
    start, stop = byte_bounds(len(data), byte_range)
    return data[start:stop]
