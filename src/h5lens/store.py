"""ManifestStore: a read-only zarr v3 store over a Manifest.

Metadata keys return the manifest's ``zarr.json`` documents, chunk keys the
inline bytes or the referenced byte range of the source file. A key the
manifest does not hold is ``None`` (never a parent's document).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from h5lens.errors import H5LensError
from h5lens.fetch import FsspecReader, LocalReader, make_reader, resolve_url
from h5lens.manifest.model import Manifest
from h5lens.manifest.refs_json import chunk_prefix, dumps_document, metadata_key


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
        self._metadata: dict[str, bytes] | None = None
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
        state["_metadata"] = None
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

    def _locate(self, key: str) -> tuple[str, tuple[int, ...]] | None:
        """Split a chunk key into (array path, chunk index); None if it is not one."""
        chunks = self.manifest.chunks
        if key.endswith("/c") and key[:-2] in chunks:
            return key[:-2], ()
        cut = key.rfind("/c/")
        while cut >= 0:
            path, rest = key[:cut], key[cut + 3 :]
            if path in chunks:
                parts = rest.split("/")
                if all(p.isdigit() for p in parts):
                    return path, tuple(int(p) for p in parts)
                return None
            cut = key.rfind("/c/", 0, cut)
        return None

    async def _chunk_bytes(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        located = self._locate(key)
        if located is None:
            return None
        path, index = located
        entry = self.manifest.chunks[path].lookup(index)
        if entry is None:
            return None
        if isinstance(entry, bytes):
            return _slice(entry, byte_range)
        source, offset, length = entry
        start, stop = _range(length, byte_range)
        self.stats.record(stop - start)
        try:
            return await self._reader(source).read(offset + start, stop - start)
        except H5LensError as e:
            e.add_note(f"while reading chunk {key!r}")
            raise

    # -- Store API ------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        doc = self.metadata.get(key)
        data = _slice(doc, byte_range) if doc is not None else await self._chunk_bytes(key, byte_range)
        if data is None:
            return None
        return prototype.buffer.from_bytes(data)

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
            elif self.manifest.chunks[path].n_present:
                yield "c"
            return
        base = path + "/" if path else ""
        seen: set[str] = set()
        for key in self._all_keys():
            if key.startswith(base):
                head = key[len(base) :].split("/", 1)[0]
                if head not in seen:
                    seen.add(head)
                    yield head

    def _all_keys(self) -> Iterable[str]:
        import numpy as np

        from h5lens.manifest.model import MISSING

        yield from sorted(self.metadata)
        for path in sorted(self.manifest.chunks):
            table = self.manifest.chunks[path]
            prefix = chunk_prefix(path)
            if table.grid_shape == ():
                if table.lookup(()) is not None:
                    yield prefix
                continue
            for index in np.argwhere(table.source != MISSING):
                yield prefix + "/" + "/".join(str(int(i)) for i in index)

    def close(self) -> None:
        for reader in self._readers or []:
            reader.close()
        self._readers = None
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
