"""The in-memory manifest: zarr.json documents plus one chunk table per array.

A :class:`ChunkTable` holds where each chunk of one array lives as numpy arrays
shaped like the chunk grid (source index, offset, length), with named
sentinels for chunks that are absent (read as the fill value) and chunks whose
bytes are stored inline. This maps one-to-one onto kerchunk references and
onto Parquet columns.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError

MISSING = -1  # no chunk: readers see the fill value
INLINE = -2  # bytes stored in ChunkTable.inline


class NodeMap(dict[str, dict[str, Any]]):
    """node path -> zarr.json document, counting changes to its keys so that indexes
    built over it (children by parent) are rebuilt only when the tree changed."""

    version = 0

    def _changed(self) -> None:
        self.version += 1

    def __setitem__(self, key: str, value: dict[str, Any]) -> None:
        if key not in self:
            self._changed()
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._changed()
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:  # type: ignore[override]
        self._changed()
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, dict[str, Any]]:
        self._changed()
        return super().popitem()

    def setdefault(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if key not in self:
            self._changed()
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self._changed()
        super().clear()

    def __ior__(self, other: Any) -> NodeMap:  # type: ignore[override]
        self.update(other)
        return self


def children_index(nodes: dict[str, Any]) -> dict[str, list[str]]:
    """parent path -> sorted names of its direct children."""
    index: dict[str, list[str]] = {}
    for node in nodes:
        if node == "":
            continue
        parent, _, name = node.rpartition("/")
        index.setdefault(parent, []).append(name)
    for names in index.values():
        names.sort()
    return index


@dataclass(frozen=True)
class Source:
    """One file that chunk references point into, with what identifies its version."""

    url: str
    size: int | None = None
    mtime: float | None = None
    etag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "size": self.size}
        if self.mtime is not None:
            out["mtime"] = self.mtime
        if self.etag is not None:
            out["etag"] = self.etag
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Source:
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise ManifestFormatError(f"Expected a source object with a 'url'. Got {data!r}")
        return cls(data["url"], data.get("size"), data.get("mtime"), data.get("etag"))


@dataclass
class ChunkTable:
    """Where each chunk of one array lives; arrays shaped like the chunk grid."""

    source: np.ndarray  # int32: source index, MISSING or INLINE
    offset: np.ndarray  # uint64
    length: np.ndarray  # uint64
    inline: dict[int, bytes] = field(default_factory=dict)  # flat chunk index -> bytes

    @classmethod
    def empty(cls, grid_shape: tuple[int, ...]) -> ChunkTable:
        return cls(
            np.full(grid_shape, MISSING, dtype=np.int32),
            np.zeros(grid_shape, dtype=np.uint64),
            np.zeros(grid_shape, dtype=np.uint64),
        )

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ChunkTable)
            and np.array_equal(self.source, other.source)
            and np.array_equal(self.offset, other.offset)
            and np.array_equal(self.length, other.length)
            and self.inline == other.inline
        )

    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not (self.source.shape == self.offset.shape == self.length.shape):
            raise ManifestFormatError(
                f"Expected source, offset and length grids of one shape. Got "
                f"{self.source.shape}, {self.offset.shape}, {self.length.shape}"
            )

    def set_inline(self, index: tuple[int, ...], data: bytes) -> None:
        flat = int(np.ravel_multi_index(index, self.grid_shape)) if self.grid_shape else 0
        self.source[index] = INLINE
        self.offset[index] = 0
        self.length[index] = len(data)
        self.inline[flat] = data

    def set_inline_many(self, flat_indices: np.ndarray, payloads: list[bytes]) -> None:
        """Store many chunks inline at once (``flat_indices`` in C order of the grid)."""
        for grid in (self.source, self.offset, self.length):
            if not grid.flags.c_contiguous:
                raise ValueError("chunk grids must be C-contiguous")
        self.source.reshape(-1)[flat_indices] = INLINE
        self.offset.reshape(-1)[flat_indices] = 0
        self.length.reshape(-1)[flat_indices] = [len(p) for p in payloads]
        self.inline.update(zip(flat_indices.tolist(), payloads, strict=True))

    def lookup(self, index: tuple[int, ...]) -> tuple[int, int, int] | bytes | None:
        """``(source, offset, length)``, the inline bytes, or None for an absent chunk."""
        if len(index) != self.source.ndim or any(
            i < 0 or i >= n for i, n in zip(index, self.source.shape, strict=True)
        ):
            return None
        src = int(self.source[index])
        if src == MISSING:
            return None
        if src == INLINE:
            flat = int(np.ravel_multi_index(index, self.grid_shape)) if self.grid_shape else 0
            return self.inline[flat]
        return src, int(self.offset[index]), int(self.length[index])

    def digest(self) -> str:
        """A CRC-32 of where every present chunk is (grid position, source, offset, length)
        and of the inline bytes: recorded at indexing, so that a chunk reference deleted or
        edited later is found by ``h5lens validate`` (a missing chunk reads as fill values)."""
        source = self.source.reshape(-1)
        present = np.flatnonzero(source != MISSING)
        crc = zlib.crc32(present.astype("<i8").tobytes())
        crc = zlib.crc32(source[present].astype("<i4").tobytes(), crc)
        crc = zlib.crc32(self.offset.reshape(-1)[present].astype("<u8").tobytes(), crc)
        crc = zlib.crc32(self.length.reshape(-1)[present].astype("<u8").tobytes(), crc)
        for flat in sorted(self.inline):
            crc = zlib.crc32(self.inline[flat], crc)
        return f"{crc:08x}"

    @property
    def n_present(self) -> int:
        return int(np.count_nonzero(self.source != MISSING))

    @property
    def referenced_bytes(self) -> int:
        return int(self.length[self.source >= 0].sum())

    @property
    def inline_bytes(self) -> int:
        return sum(len(b) for b in self.inline.values())


@dataclass
class Manifest:
    """zarr v3 metadata documents plus chunk references for one HDF5 file.

    ``nodes`` maps a node path (``""`` for the root, ``"X/data"``) to its
    ``zarr.json`` document; ``chunks`` maps each array path to its table.
    """

    nodes: dict[str, dict[str, Any]]
    chunks: dict[str, ChunkTable]
    sources: list[Source]
    convention: str = "released"
    writer: str = ""
    # where the manifest was read from: relative source URLs resolve against it
    location: str | None = None
    # what the writer recorded of each array's chunk table ({"chunks": n, "digest": crc}),
    # for validate to compare with the tables as read; None when the file recorded none
    recorded: dict[str, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, NodeMap):
            self.nodes = NodeMap(self.nodes)

    def __eq__(self, other: object) -> bool:
        """Equal content: documents (NaN attributes compare as written), tables, sources."""
        if not isinstance(other, Manifest):
            return NotImplemented
        if (self.sources, self.convention, self.location) != (other.sources, other.convention, other.location):
            return False
        if self.nodes.keys() != other.nodes.keys() or self.chunks.keys() != other.chunks.keys():
            return False
        import json

        def text(doc: dict[str, Any]) -> str:
            return json.dumps(doc, sort_keys=True, allow_nan=True)

        return all(text(self.nodes[k]) == text(other.nodes[k]) for k in self.nodes) and all(
            self.chunks[k] == other.chunks[k] for k in self.chunks
        )

    __hash__ = None  # type: ignore[assignment]
    _children_cache: tuple[tuple[int, int], dict[str, list[str]]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    # -- views -----------------------------------------------------------
    def arrays(self) -> list[str]:
        return [p for p, doc in self.nodes.items() if doc.get("node_type") == "array"]

    def groups(self) -> list[str]:
        return [p for p, doc in self.nodes.items() if doc.get("node_type") == "group"]

    def children(self, path: str) -> list[str]:
        """Names of the direct children of group ``path``, sorted."""
        return list(self._children_index().get(path, ()))

    def _children_index(self) -> dict[str, list[str]]:
        """parent path -> sorted child names, built once (listing every group stays linear),
        and again only after a node was added or removed."""
        if not isinstance(self.nodes, NodeMap):
            self.nodes = NodeMap(self.nodes)
        fingerprint = (id(self.nodes), self.nodes.version)
        if self._children_cache is None or self._children_cache[0] != fingerprint:
            self._children_cache = (fingerprint, children_index(self.nodes))
        return self._children_cache[1]

    @property
    def n_chunks(self) -> int:
        return sum(t.n_present for t in self.chunks.values())

    # -- serialisation ---------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The kerchunk reference JSON (version 1, zarr v3 keys) as a dict."""
        from h5lens.manifest.refs_json import manifest_to_refs

        return manifest_to_refs(self)

    def to_json(self, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> None:
        """Write the manifest to ``path`` (local or fsspec URL) atomically."""
        from h5lens.manifest.refs_json import write_json

        write_json(self, os.fspath(path), storage_options=storage_options)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        from h5lens.manifest.refs_json import manifest_from_refs

        return manifest_from_refs(data)

    @classmethod
    def from_json(cls, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> Manifest:
        """Read a manifest written by :meth:`to_json` (or any kerchunk v1 refs with zarr v3 keys)."""
        from h5lens.manifest.refs_json import read_json

        return read_json(os.fspath(path), storage_options=storage_options)
