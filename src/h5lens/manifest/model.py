"""The in-memory manifest: zarr.json documents plus one chunk table per array.

:class:`Manifest` sits at the top of ``h5lens.manifest``: its parts (:class:`ChunkTable`,
:class:`Source`, ...) live in :mod:`h5lens.manifest.tables` and are re-exported here; the
file forms (:mod:`h5lens.manifest.io`) read files into parts and write manifests without
knowing this class, so imports run one way, up to here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from h5lens.manifest import io
from h5lens.manifest.limits import DEFAULT_LIMITS, Limits
from h5lens.manifest.tables import (
    FINGERPRINT_PREFIX,
    INLINE,
    MISSING,
    ChunkTable,
    ChunkTableBuilder,
    FrozenNodes,
    FrozenTables,
    ManifestParts,
    NodeMap,
    Source,
    Unreadable,
    children_index,
    is_fingerprint,
)

# The tables and sources live in h5lens.manifest.tables; their names stay importable from here.
__all__ = [
    "FINGERPRINT_PREFIX",
    "INLINE",
    "MISSING",
    "ChunkTable",
    "ChunkTableBuilder",
    "FrozenNodes",
    "FrozenTables",
    "Manifest",
    "ManifestParts",
    "NodeMap",
    "Source",
    "Unreadable",
    "children_index",
    "is_fingerprint",
]


@dataclass(eq=False, frozen=True)
class Manifest(ManifestParts):
    """zarr v3 metadata documents plus chunk references for one HDF5 file.

    ``nodes`` maps a node path (``""`` for the root, ``"X/data"``) to its
    ``zarr.json`` document; ``chunks`` maps each array path to its table. The fields are
    those of :class:`~h5lens.manifest.tables.ManifestParts`, what the file forms read and
    write.

    A manifest does not change once made (its fields, its ``nodes`` and ``chunks`` and
    ``sources``): a change is a new manifest, ``dataclasses.replace(manifest, ...)``, as
    zarr's and VirtualiZarr's metadata are. What a store derives from it stays true.
    """

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, FrozenNodes):
            object.__setattr__(self, "nodes", FrozenNodes(self.nodes))
        if isinstance(self.chunks, dict) and not isinstance(self.chunks, FrozenTables):
            object.__setattr__(self, "chunks", FrozenTables(self.chunks))
        if not isinstance(self.sources, tuple):
            object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "attribute_types", {p: dict(n) for p, n in self.attribute_types.items() if n})
        object.__setattr__(self, "unreadable", tuple(sorted(self.unreadable, key=Unreadable.sort_key)))

    def __eq__(self, other: object) -> bool:
        """Equal content: documents (NaN attributes compare as written), tables, sources."""
        if not isinstance(other, Manifest):
            return NotImplemented
        if (self.sources, self.convention, self.location) != (other.sources, other.convention, other.location):
            return False
        if self.attribute_types != other.attribute_types or self.unreadable != other.unreadable:
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

    # -- views -----------------------------------------------------------
    def arrays(self) -> list[str]:
        return [p for p, doc in self.nodes.items() if doc.get("node_type") == "array"]

    def groups(self) -> list[str]:
        return [p for p, doc in self.nodes.items() if doc.get("node_type") == "group"]

    def children(self, path: str) -> list[str]:
        """Names of the direct children of group ``path``, sorted."""
        return list(self._children_index.get(path, ()))

    def unreadable_at(self, path: str, attribute: str | None = None) -> Unreadable | None:
        """The record of the node at ``path`` (or of its ``attribute``) if the scan left it
        out as unreadable (``skip_unreadable``); None for anything else."""
        return self._unreadable_index.get((path, attribute))

    def refuse_unreadable(self, path: str, attribute: str | None = None) -> None:
        """Raise :class:`~h5lens.errors.UnsupportedFeatureError` saying why the node at
        ``path`` (or its ``attribute``) is not in the manifest, if the scan left it out as
        unreadable; nothing otherwise."""
        found = self.unreadable_at(path, attribute)
        if found is not None:
            raise found.error()

    def unreadable_children(self, path: str) -> list[Unreadable]:
        """The nodes directly below group ``path`` that the scan left out as unreadable."""
        prefix = path + "/" if path else ""
        return [
            entry
            for entry in self.unreadable
            if entry.attribute is None
            and entry.path != path
            and entry.path.startswith(prefix)
            and "/" not in entry.path[len(prefix) :]
        ]

    @cached_property
    def _unreadable_index(self) -> dict[tuple[str, str | None], Unreadable]:
        return {(entry.path, entry.attribute): entry for entry in self.unreadable}

    @cached_property
    def _children_index(self) -> dict[str, list[str]]:
        """parent path -> sorted child names, built once (listing every group stays linear)."""
        return children_index(self.nodes)

    # -- files (the formats live in h5lens.manifest.io; the model knows none) ---------
    @classmethod
    def from_parts(cls, parts: ManifestParts) -> Manifest:
        """The manifest a reader of one of the file forms returned the parts of."""
        return cls(**{f.name: getattr(parts, f.name) for f in fields(ManifestParts)})

    def to_dict(self) -> dict[str, Any]:
        """The kerchunk reference JSON (version 1, zarr v3 keys) as a dict."""
        return io.to_dict(self)

    def to_json(
        self, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None, force: bool = False
    ) -> None:
        """Write the manifest to ``path`` (local or fsspec URL) atomically, as JSON."""
        io.write(self, path, storage_options=storage_options, format="json", force=force)

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,  # noqa: A002 - the documented name
        storage_options: dict[str, Any] | None = None,
        force: bool = False,
        relative_sources: bool = True,
    ) -> str:
        """Write the manifest to ``path`` atomically. ``format``: ``"json"`` or ``"compact"``;
        ``None`` takes the form the name says (``.json``, ``.h5lens``), else compact above
        100,000 chunk references. An existing file that is not a manifest is replaced only
        with ``force``. With ``relative_sources``, a source in the manifest's directory or
        above it is recorded relative to it (the two then travel together). Returns the form
        written."""
        return io.write(
            self, path, storage_options=storage_options, format=format, force=force, relative_sources=relative_sources
        )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        storage_options: dict[str, Any] | None = None,
        limits: Limits | None = None,
    ) -> Manifest:
        """Read a manifest in either form (detected from the file). Manifests are untrusted
        input, checked against ``limits`` (:class:`h5lens.manifest.limits.Limits`). An
        Icechunk repository (``icechunk://``) is read by :func:`h5lens.load_manifest`."""
        if os.fspath(path).startswith("icechunk://"):
            from h5lens.errors import InvalidOptionError

            raise InvalidOptionError(f"{os.fspath(path)}: an Icechunk repository; read it with h5lens.load_manifest")
        return cls.from_parts(io.read(path, storage_options=storage_options, limits=limits or DEFAULT_LIMITS))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        return cls.from_parts(io.from_dict(data))

    @classmethod
    def from_json(cls, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> Manifest:
        """Read a manifest written by :meth:`to_json` (or any kerchunk v1 refs with zarr v3 keys;
        the compact form too: the form is detected from the file)."""
        return cls.from_parts(io.read(path, storage_options=storage_options))
