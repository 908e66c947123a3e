"""ManifestStore: a read-only zarr v3 store over a Manifest.

Metadata keys return the manifest's ``zarr.json`` documents, chunk keys the
inline bytes or the referenced byte range of the source file. A key the
manifest does not hold is ``None`` (never a parent's document).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from h5lens.errors import H5LensError, StaleSourceError
from h5lens.fetch import (
    MAX_GAP,
    MAX_READAHEAD_CHUNKS,
    MAX_SPAN,
    READAHEAD_CACHE_BYTES,
    ChunkFetcher,
    FsspecReader,
    LocalReader,
    make_reader,
    resolve_url,
)
from h5lens.manifest.model import Manifest
from h5lens.manifest.refs_json import dumps_document
from h5lens.manifest.zarr_keys import DEFAULT_ENCODING, KeyGrammar, chunk_key, metadata_key


@dataclass(frozen=True)
class _Referenced:
    """A chunk key that points into a source: bytes [start, stop) of the chunk at offset."""

    key: str
    path: str
    index: tuple[int, ...]
    source: int
    offset: int
    length: int
    start: int
    stop: int

    def describe(self) -> str:
        return f"while reading chunk {self.key!r} (/{self.path}, bytes {self.offset + self.start}-{self.offset + self.stop})"


# zarr fetches up to async.concurrency chunks at once: reads may arrive a little out of order.
_REORDER = 16


@dataclass
class ReadStats:
    """Reads of referenced bytes this store made (inline chunks and metadata cost none)."""

    requests: int = 0
    bytes: int = 0

    def record(self, nbytes: int) -> None:
        self.requests += 1
        self.bytes += nbytes

    def reset(self) -> None:
        self.requests = 0
        self.bytes = 0


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
    ) -> None:
        super().__init__(read_only=True)
        self.manifest = manifest
        self.source_options = dict(source_options or {})
        self.source_urls = dict(source_urls or {})
        self._readers: list[LocalReader | FsspecReader] | None = None
        self._fetchers: dict[int, ChunkFetcher] = {}
        self._streaks: dict[str, tuple[int, int, int]] = {}  # array -> (last chunk read, read-ahead end, window)
        self._metadata: dict[str, bytes] | None = None
        self._grammar: KeyGrammar | None = None
        self.stats = ReadStats()

    # -- identity and pickling -------------------------------------------
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ManifestStore)
            and other.manifest is self.manifest
            and other.source_options == self.source_options
            and other.source_urls == self.source_urls
        )

    def __hash__(self) -> int:
        return id(self.manifest)

    def __repr__(self) -> str:
        sources = ", ".join(s.url for s in self.manifest.sources)
        return f"ManifestStore({len(self.manifest.nodes)} nodes, sources=[{sources}])"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_readers"] = None
        state["_fetchers"] = {}
        state["_streaks"] = {}
        state["_metadata"] = None
        state["_grammar"] = None
        state["stats"] = ReadStats()
        return state

    def with_read_only(self, read_only: bool = False) -> ManifestStore:
        if not read_only:
            raise ValueError("ManifestStore is read-only")
        return self

    # -- lookups ------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, bytes]:
        if self._metadata is None:
            self._metadata = {
                metadata_key(path): dumps_document(doc).encode() for path, doc in self.manifest.nodes.items()
            }
        return self._metadata

    def source_url(self, index: int) -> str:
        url = self.manifest.sources[index].url
        url = self.source_urls.get(url, url)
        return resolve_url(url, self.manifest.location)

    def _reader(self, index: int) -> LocalReader | FsspecReader:
        if self._readers is None:
            self._readers = [
                make_reader(self.source_url(i), self.source_options) for i in range(len(self.manifest.sources))
            ]
        return self._readers[index]

    @property
    def grammar(self) -> KeyGrammar:
        """The key grammar of this manifest's arrays (built once)."""
        if self._grammar is None:
            self._grammar = KeyGrammar.of_documents(self.manifest.nodes)
        return self._grammar

    def describe_key(self, key: str) -> str:
        """Where a chunk key's bytes are, for messages: the chunk key, its array, and the source
        URL and byte range it points at (or that it is inline)."""
        located = self._locate(key)
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

    def _locate(self, key: str) -> tuple[str, tuple[int, ...]] | None:
        """Split a chunk key into (array path, chunk index); None if it is not one."""
        return self.grammar.chunk(key)

    def _resolve(self, key: str, byte_range: ByteRequest | None) -> bytes | _Referenced | None:
        """What ``key`` holds: bytes in the manifest, a byte range of a source, or None."""
        doc = self.metadata.get(key)
        if doc is not None:
            return _slice(doc, byte_range)
        located = self._locate(key)
        if located is None:
            return None
        path, index = located
        entry = self.manifest.chunks[path].lookup(index)
        if entry is None or isinstance(entry, bytes):
            return entry if entry is None else _slice(entry, byte_range)
        source, offset, length = entry
        start, stop = _range(length, byte_range)
        return _Referenced(key, path, index, source, offset, length, start, stop)

    async def _read(self, ref: _Referenced, whole_chunk: bool) -> bytes:
        reader = self._reader(ref.source)
        try:
            if isinstance(reader, LocalReader):
                self.stats.record(ref.stop - ref.start)
                return await reader.read(ref.offset + ref.start, ref.stop - ref.start)
            fetcher = self._fetcher(ref.source, reader)
            if not whole_chunk:
                return await fetcher.read(ref.offset + ref.start, ref.stop - ref.start)
            ahead = self._read_ahead(ref.path, ref.index, ref.source)
            return await fetcher.read(ref.offset, ref.length, ahead)
        except H5LensError as e:
            e.add_note(ref.describe())
            raise

    def _fetcher(self, source: int, reader: FsspecReader) -> ChunkFetcher:
        fetcher = self._fetchers.get(source)
        if fetcher is None:
            fetcher = self._fetchers[source] = ChunkFetcher(reader, on_request=self.stats.record)
        return fetcher

    def _read_ahead(self, path: str, index: tuple[int, ...], source: int) -> list[tuple[int, int]]:
        """Chunks after this one to fetch with it, like an OS read-ahead.

        A read close behind the previous one counts as sequential; the window of
        chunks fetched ahead doubles each time reads come within half a window of
        its end, and starts over on a jump. What is fetched ahead is never more than
        what was read sequentially before it, so a slice costs at most about twice
        its chunks, while a full read needs only a few requests per array.
        """
        table = self.manifest.chunks[path]
        flat = int(np.ravel_multi_index(index, table.grid_shape)) if index else 0
        last, frontier, window = self._streaks.get(path, (-(1 << 30), 0, 0))
        sequential = last - _REORDER <= flat <= max(last, frontier) + 1
        if not sequential:
            self._streaks[path] = (flat, flat + 1, 0)
            return []
        last = max(last, flat)
        if frontier - flat > window // 2:
            self._streaks[path] = (last, frontier, window)
            return []
        window = min(max(1, 2 * window), MAX_READAHEAD_CHUNKS)
        begin = max(frontier, flat + 1)
        ahead = self._adjacent(table, source, flat, begin, begin + window)
        self._streaks[path] = (last, begin + len(ahead), window)
        return ahead

    @staticmethod
    def _adjacent(table, source: int, flat: int, begin: int, stop: int) -> list[tuple[int, int]]:
        sources = table.source.reshape(-1)
        offsets = table.offset.reshape(-1)
        lengths = table.length.reshape(-1)
        first = int(offsets[flat])
        end = first + int(lengths[flat])
        ahead: list[tuple[int, int]] = []
        for j in range(begin, min(stop, sources.size)):
            if sources[j] != source:
                break
            offset, length = int(offsets[j]), int(lengths[j])
            if offset < first or offset - end > MAX_GAP or offset + length - first > MAX_SPAN:
                break
            ahead.append((offset, length))
            end = max(end, offset + length)
        return ahead

    def prefetch_all(self, budget: int = READAHEAD_CACHE_BYTES) -> int:
        """Start fetching every referenced chunk of remote sources, in file order, up to
        ``budget`` bytes, as one batch of merged requests (for reads that will touch
        everything, like an eager AnnData read). Returns the bytes requested."""
        from zarr.core.sync import sync

        offsets: dict[int, list[np.ndarray]] = {}
        lengths: dict[int, list[np.ndarray]] = {}
        for table in self.manifest.chunks.values():
            sources = table.source.reshape(-1)
            for src in np.unique(sources[sources >= 0]).tolist():
                if isinstance(self._reader(src), LocalReader):
                    continue
                mine = sources == src
                offsets.setdefault(src, []).append(table.offset.reshape(-1)[mine].astype(np.int64))
                lengths.setdefault(src, []).append(table.length.reshape(-1)[mine].astype(np.int64))
        requested = 0
        plan: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for src in offsets:
            src_offsets = np.concatenate(offsets[src])
            src_lengths = np.concatenate(lengths[src])
            order = np.argsort(src_offsets, kind="stable")
            src_offsets, src_lengths = src_offsets[order], src_lengths[order]
            take = int(np.searchsorted(np.cumsum(src_lengths), budget - requested, side="right"))
            if take:
                plan[src] = (src_offsets[:take], src_lengths[:take])
                requested += int(src_lengths[:take].sum())

        async def start() -> None:
            for src, (src_offsets, src_lengths) in plan.items():
                self._fetcher(src, self._reader(src)).prefetch(src_offsets, src_lengths)

        if plan:
            sync(start())
        return requested

    def verify_sources(self) -> None:
        """Check once that every source is the file that was indexed (size, ETag or mtime)."""
        for index, recorded in enumerate(self.manifest.sources):
            if recorded.size is None and recorded.etag is None and recorded.mtime is None:
                continue
            found = self._reader(index).stat()
            changes = []
            if recorded.size is not None and found.get("size") is not None and found["size"] != recorded.size:
                changes.append(f"size {recorded.size} → {found['size']}")
            if recorded.etag is not None and found.get("etag") and found["etag"] != recorded.etag:
                changes.append(f"ETag {recorded.etag} → {found['etag']}")
            if recorded.mtime is not None and found.get("mtime") is not None and found["mtime"] != recorded.mtime:
                changes.append(f"mtime {recorded.mtime} → {found['mtime']}")
            if changes:
                raise StaleSourceError(
                    f"{self.source_url(index)}: changed since the manifest was written ({'; '.join(changes)}); "
                    "index it again, or open with verify=False to read it anyway",
                    url=self.source_url(index),
                    changes=tuple(changes),
                )

    # -- synchronous reads (zarr's FusedCodecPipeline) ------------------------
    @property
    def _supports_sync_io(self) -> bool:
        # Only local sources read synchronously: remote reads need the event loop to merge.
        return all(isinstance(self._reader(i), LocalReader) for i in range(len(self.manifest.sources)))

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        from zarr.core.buffer import default_buffer_prototype

        prototype = prototype or default_buffer_prototype()
        found = self._resolve(key, byte_range)
        if isinstance(found, _Referenced):
            reader = self._reader(found.source)
            if not isinstance(reader, LocalReader):
                raise TypeError("synchronous reads are for local sources only")
            self.stats.record(found.stop - found.start)
            try:
                found = reader.read_sync(found.offset + found.start, found.stop - found.start)
            except H5LensError as e:
                e.add_note(found.describe())
                raise
        return None if found is None else prototype.buffer.from_bytes(found)

    def set_sync(self, key: str, value: Buffer) -> None:
        raise NotImplementedError("ManifestStore is read-only")

    def delete_sync(self, key: str) -> None:
        raise NotImplementedError("ManifestStore is read-only")

    # -- Store API ------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        found = self._resolve(key, byte_range)
        if isinstance(found, _Referenced):
            found = await self._read(found, whole_chunk=byte_range is None)
        return None if found is None else prototype.buffer.from_bytes(found)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        import asyncio

        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        if key in self.metadata:
            return True
        located = self._locate(key)
        return located is not None and self.manifest.chunks[located[0]].lookup(located[1]) is not None

    async def set(self, key: str, value: Buffer) -> None:
        raise NotImplementedError("ManifestStore is read-only")

    async def delete(self, key: str) -> None:
        raise NotImplementedError("ManifestStore is read-only")

    async def list(self) -> AsyncIterator[str]:
        for key in self._all_keys():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in self._all_keys():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        path = prefix.rstrip("/")
        nodes = self.manifest.nodes
        if path in nodes:
            yield "zarr.json"
            if nodes[path].get("node_type") == "group":
                for name in self.manifest.children(path):
                    yield name
                return
            if self.grammar.arrays[path][0] == DEFAULT_ENCODING and len(nodes[path].get("shape", ())):
                if self.manifest.chunks[path].n_present:
                    yield "c"  # every chunk key is c/i/j...
                return
            seen: set[str] = set()
            cut = len(path) + 1 if path else 0
            for key in self._chunk_keys(path):
                head = key[cut:].split("/", 1)[0]
                if head not in seen:
                    seen.add(head)
                    yield head
            return
        base = path + "/" if path else ""
        seen = set()
        for key in self._all_keys():
            if key.startswith(base):
                head = key[len(base) :].split("/", 1)[0]
                if head not in seen:
                    seen.add(head)
                    yield head

    def _all_keys(self) -> Iterable[str]:
        yield from sorted(self.metadata)
        for path in sorted(self.manifest.chunks):
            yield from self._chunk_keys(path)

    def _chunk_keys(self, path: str) -> Iterable[str]:
        """The keys of array ``path``'s present chunks, in C order."""
        import numpy as np

        from h5lens.manifest.model import MISSING

        table = self.manifest.chunks[path]
        encoding = self.grammar.arrays[path][0]
        if table.grid_shape == ():
            if table.lookup(()) is not None:
                yield chunk_key(path, (), encoding)
            return
        for index in np.argwhere(table.source != MISSING):
            yield chunk_key(path, tuple(int(i) for i in index), encoding)

    def close(self) -> None:
        for reader in self._readers or []:
            reader.close()
        self._readers = None
        self._fetchers = {}
        super().close()


def _range(length: int, byte_range: ByteRequest | None) -> tuple[int, int]:
    if byte_range is None:
        return 0, length
    if isinstance(byte_range, RangeByteRequest):
        return min(byte_range.start, length), min(byte_range.end, length)
    if isinstance(byte_range, OffsetByteRequest):
        return min(byte_range.offset, length), length
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, length - byte_range.suffix), length
    raise TypeError(f"Unexpected byte_range {byte_range!r}")


def _slice(data: bytes, byte_range: ByteRequest | None) -> bytes:
    start, stop = _range(len(data), byte_range)
    return data[start:stop]
