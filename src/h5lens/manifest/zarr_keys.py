"""The zarr v3 key grammar of a manifest: one module builds and parses every key.

* metadata keys: ``zarr.json`` (the root) and ``<path>/zarr.json``;
* chunk keys, per the array's ``chunk_key_encoding``:

  - ``default`` with separator ``/`` or ``.``: ``<path>/c/1/0``, ``<path>/c.1.0``,
    a 0-d array's single chunk ``<path>/c``;
  - ``v2`` with separator ``.`` or ``/``: ``<path>/1.0``, ``<path>/1/0``, 0-d ``<path>/0``;

  and for an array at the root of the manifest the same without ``<path>/``
  (``c/0``, ``c``), as tools that write a single array do.

The JSON writer, the JSON parser, the store and the validator all go through here,
so a key that parses is a key the store serves, and a key that does not is an error
naming it — a chunk the manifest holds is never read as the fill value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError

METADATA = "zarr.json"


def metadata_key(path: str) -> str:
    """The key of node ``path``'s metadata document (``""`` is the root)."""
    return f"{path}/{METADATA}" if path else METADATA


def metadata_path(key: str) -> str | None:
    """The node path a metadata key names; None if ``key`` is not a metadata key."""
    if key == METADATA:
        return ""
    if key.endswith("/" + METADATA):
        return key[: -len(METADATA) - 1]
    return None


def join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


@dataclass(frozen=True)
class KeyEncoding:
    """An array's ``chunk_key_encoding``: how a grid index becomes a key below the array."""

    name: str = "default"  # "default" | "v2"
    separator: str = "/"

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], where: str = "") -> KeyEncoding:
        """Parse an array document's ``chunk_key_encoding``; raise naming the array if it is none we know."""
        encoding = doc.get("chunk_key_encoding", {"name": "default"})
        if isinstance(encoding, str):
            encoding = {"name": encoding}
        if not isinstance(encoding, Mapping):
            raise ManifestFormatError(f"{where}: chunk_key_encoding must be an object. Got {encoding!r}")
        name = encoding.get("name")
        configuration = encoding.get("configuration") or {}
        default_separator = "/" if name == "default" else "."
        separator = configuration.get("separator", default_separator) if isinstance(configuration, Mapping) else None
        if name not in ("default", "v2") or separator not in ("/", "."):
            raise ManifestFormatError(
                f"{where}: chunk_key_encoding {encoding!r} is not one h5lens reads "
                "(default or v2, with separator '/' or '.')"
            )
        return cls(name, separator)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def tail(self, index: tuple[int, ...]) -> str:
        """The key of chunk ``index`` relative to its array (``c/1/0``, ``c``, ``1.0``, ``0``)."""
        if self.name == "default":
            return "c" + "".join(self.separator + str(i) for i in index)
        return self.separator.join(map(str, index)) if index else "0"

    def tail_prefix(self) -> str:
        """What every chunk tail of a non-0-d array starts with (``c/``, ``c.``, or nothing)."""
        return "c" + self.separator if self.name == "default" else ""

    def parse_tail(self, tail: str, ndim: int) -> tuple[int, ...] | None:
        """The grid index a key tail names for an ``ndim``-d array; None if it names none."""
        if self.name == "default":
            if ndim == 0:
                return () if tail == "c" else None
            if not tail.startswith("c" + self.separator):
                return None
            parts = tail[2:].split(self.separator)
        else:
            if ndim == 0:
                return () if tail == "0" else None
            parts = tail.split(self.separator)
        if len(parts) != ndim or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        return tuple(int(p) for p in parts)


DEFAULT_ENCODING = KeyEncoding()


def chunk_key(path: str, index: tuple[int, ...], encoding: KeyEncoding = DEFAULT_ENCODING) -> str:
    return join(path, encoding.tail(index))


class KeyGrammar:
    """Splits any key of one manifest into what it names, given the manifest's arrays.

    Built once per manifest (a dict of array path → (encoding, ndim)); each split costs a
    few dict lookups, one per ``/`` in the key at most."""

    def __init__(self, arrays: Mapping[str, tuple[KeyEncoding, int]]) -> None:
        self.arrays = dict(arrays)

    @classmethod
    def of_documents(cls, nodes: Mapping[str, Mapping[str, Any]]) -> KeyGrammar:
        arrays = {
            path: (KeyEncoding.from_document(doc, "/" + path), len(doc.get("shape", ())))
            for path, doc in nodes.items()
            if doc.get("node_type") == "array"
        }
        return cls(arrays)

    def split_chunk_key(self, key: str) -> tuple[str, str] | None:
        """(array path, key tail) if ``key`` lies below an array; the tail is not parsed yet."""
        # The common case first: "X/data/c/12" splits at its last "/c/" ("/c" for 0-d).
        head, sep, _ = key.rpartition("/c/")
        if sep and head in self.arrays and self.arrays[head][0] == DEFAULT_ENCODING:
            return head, key[len(head) + 1 :]
        cut = len(key)
        while cut > 0:
            cut = key.rfind("/", 0, cut)
            path = key[:cut] if cut > 0 else ""
            if path in self.arrays:
                return path, key[cut + 1 :] if cut > 0 else key
            if cut <= 0:
                break
        return None

    def chunk(self, key: str) -> tuple[str, tuple[int, ...]] | None:
        """(array path, grid index) of a chunk key; None if ``key`` is not one."""
        split = self.split_chunk_key(key)
        if split is None:
            return None
        path, tail = split
        encoding, ndim = self.arrays[path]
        index = encoding.parse_tail(tail, ndim)
        if index is None:
            return None
        return path, index

    def flat_indices(self, path: str, keys: list[str], grid: tuple[int, ...]) -> np.ndarray | None:
        """The flat indices (C order of ``grid``) of chunk keys ``keys`` of array ``path``;
        None if one is not a chunk key of that array or lies outside the grid."""
        # the default encoding's keys ("<path>/c/i/j") parse without the grammar
        head = (f"{path}/c/" if path else "c/") if self.arrays[path][0] == DEFAULT_ENCODING else None
        indices: list[tuple[int, ...]] = []
        if head is not None and len(grid) == 1:  # the common case, without a tuple per key
            try:
                parsed = np.fromiter((int(key[len(head) :]) for key in keys), np.int64, len(keys))
            except ValueError:
                parsed = None
            if parsed is not None and all(key.startswith(head) for key in keys):
                if parsed.size and (parsed.min() < 0 or parsed.max() >= grid[0]):
                    return None
                return parsed
        for key in keys:
            if head is not None and key.startswith(head):
                try:
                    indices.append(tuple(int(part) for part in key[len(head) :].split("/")))
                    continue
                except ValueError:
                    pass
            found = self.chunk(key)
            if found is None or found[0] != path:
                return None
            indices.append(found[1])
        try:
            array = np.asarray(indices, dtype=np.int64).reshape(len(indices), len(grid))
            flats = np.ravel_multi_index(tuple(array.T), grid)
        except ValueError:
            return None  # a key outside the grid: zarr's own pipeline answers it
        return np.asarray(flats, dtype=np.int64)
