"""Chunk tables and the other parts a manifest is made of, below every other manifest module.

A :class:`ChunkTable` holds where each chunk of one array lives as numpy arrays
shaped like the chunk grid (source index, offset, length), with named
sentinels for chunks that are absent (read as the fill value) and chunks whose
bytes are stored inline. This maps one-to-one onto kerchunk references and
onto Parquet columns.

This module imports nothing of h5lens but its errors, so that modules that need only
tables and sources (:mod:`h5lens.manifest.identity`, :mod:`h5lens.fetch`) stay below the manifest
and its files.

The format modules read files into :class:`ManifestParts` and write any
``ManifestParts``; only :mod:`h5lens.manifest.model` builds a
:class:`~h5lens.manifest.model.Manifest` (parts with views and file methods), so that
imports run one way, type annotations included: tables, the forms, ``io``, the model.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError, UnsupportedFeatureError

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

    def pop(self, key: str, *default: Any) -> Any:
        self._changed()
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, dict[str, Any]]:
        self._changed()
        return super().popitem()

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self._changed()
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self._changed()
        super().clear()

    # mypy wants `|=` to take only what `|` takes, but dict's `|=` takes any mapping or
    # pairs and `|` only dicts: typeshed's own dict.__ior__ carries the same ignore.
    def __ior__(self, other: Any) -> NodeMap:  # type: ignore[override, misc]
        self.update(other)
        return self


class Frozen(dict):  # typed by its subclasses below
    """A dict that does not change once made: a manifest's nodes and tables. A change is a
    new manifest (``dataclasses.replace(manifest, nodes={**manifest.nodes, path: doc})``),
    as zarr's and VirtualiZarr's metadata objects are, so that what a store derived from
    a manifest (documents, key grammar, source readers) stays true for its life."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a Manifest does not change: make a new one, e.g. dataclasses.replace(manifest, nodes={**manifest.nodes, ...})"
        )

    __setitem__ = __delitem__ = pop = popitem = setdefault = update = clear = __ior__ = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy rebuild it whole (their default sets items one by one)
        return (type(self), (dict(self),))


class FrozenNodes(Frozen, dict[str, dict[str, Any]]):
    """node path -> zarr.json document, in a :class:`Manifest`."""


class FrozenTables(Frozen, dict[str, "ChunkTable"]):
    """array path -> chunk table, in a :class:`Manifest` (the compact form's lazily decoded
    tables are a read-only mapping of their own)."""


def children_index(nodes: Mapping[str, Any]) -> dict[str, list[str]]:
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


FINGERPRINT_PREFIX = "sha256:"


def is_fingerprint(value: object) -> bool:
    """A source fingerprint as :mod:`h5lens.manifest.identity` writes it: ``sha256:`` and 64 hex digits."""
    digits = value[len(FINGERPRINT_PREFIX) :] if isinstance(value, str) and value.startswith(FINGERPRINT_PREFIX) else ""
    return len(digits) == 64 and all(c in "0123456789abcdef" for c in digits)


@dataclass(frozen=True)
class Source:
    """One file that chunk references point into, with what identifies its version."""

    url: str
    size: int | None = None
    mtime: float | None = None
    etag: str | None = None
    fingerprint: str | None = None  # local files: see h5lens.manifest.identity

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "size": self.size}
        if self.mtime is not None:
            out["mtime"] = self.mtime
        if self.etag is not None:
            out["etag"] = self.etag
        if self.fingerprint is not None:
            out["fingerprint"] = self.fingerprint
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Source:
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise ManifestFormatError(f"Expected a source object with a 'url'. Got {data!r}")
        url, size, mtime, etag = data["url"], data.get("size"), data.get("mtime"), data.get("etag")
        found = data.get("fingerprint")
        if found is not None and not is_fingerprint(found):
            raise ManifestFormatError(f"source {url}: 'fingerprint' must be 'sha256:' and 64 hex digits. Got {found!r}")
        if size is not None and not (type(size) is int and 0 <= size < 2**63):
            raise ManifestFormatError(f"source {url}: 'size' must be a byte count. Got {size!r}")
        if mtime is not None and not (type(mtime) in (int, float) and math.isfinite(mtime)):
            raise ManifestFormatError(f"source {url}: 'mtime' must be a number. Got {mtime!r}")
        if etag is not None and not isinstance(etag, str):
            raise ManifestFormatError(f"source {url}: 'etag' must be a string. Got {etag!r}")
        return cls(url, size, mtime, etag, found)


@dataclass(frozen=True, eq=False)
class ChunkTable:
    """Where each chunk of one array lives; grids shaped like the chunk grid. Immutable.

    ``source[i]`` is a source index, ``MISSING`` (the fill value) or ``INLINE`` (the bytes
    are ``inline[flat i]``); ``offset`` / ``length`` give the byte range (``length`` is the
    inline payload's size for inline chunks). Checked once, here: dtypes, one grid shape,
    C order, inline bytes exactly where the grid says. Changes make a new table
    (:meth:`with_inline`, :meth:`reshaped`, ``dataclasses.replace``); the scanner and the
    parsers build tables through :class:`ChunkTableBuilder`.
    """

    source: np.ndarray  # int32
    offset: np.ndarray  # uint64
    length: np.ndarray  # uint64
    inline: Mapping[int, bytes] = field(default_factory=lambda: MappingProxyType({}))  # flat index -> bytes

    def __post_init__(self) -> None:
        grids = {
            "source": (self.source, np.int32),
            "offset": (self.offset, np.uint64),
            "length": (self.length, np.uint64),
        }
        for name, (grid, dtype) in grids.items():
            if not isinstance(grid, np.ndarray) or grid.dtype != dtype:
                raise ManifestFormatError(
                    f"Expected a {np.dtype(dtype)} {name} grid. Got {getattr(grid, 'dtype', type(grid))}"
                )
            if not grid.flags.c_contiguous:
                raise ManifestFormatError(f"Expected a C-contiguous {name} grid")
        if not (self.source.shape == self.offset.shape == self.length.shape):
            raise ManifestFormatError(
                f"Expected source, offset and length grids of one shape. Got "
                f"{self.source.shape}, {self.offset.shape}, {self.length.shape}"
            )
        flat_source = self.source.reshape(-1)
        if (flat_source < INLINE).any():
            raise ManifestFormatError(f"Expected source indices >= 0, MISSING or INLINE. Got {int(flat_source.min())}")
        inline_at = np.flatnonzero(flat_source == INLINE)
        if set(inline_at.tolist()) != set(self.inline):
            raise ManifestFormatError(
                f"Expected inline bytes exactly for the {inline_at.size} chunks marked INLINE. Got {len(self.inline)}"
            )
        if inline_at.size:
            sizes = np.fromiter(
                (len(self.inline[i]) for i in inline_at.tolist()), dtype=np.uint64, count=inline_at.size
            )
            if not np.array_equal(sizes, self.length.reshape(-1)[inline_at]):
                raise ManifestFormatError("Expected the length of each inline chunk to be its payload's size")
        for grid in (self.source, self.offset, self.length):
            grid.flags.writeable = False
        if not isinstance(self.inline, MappingProxyType):
            object.__setattr__(self, "inline", MappingProxyType(dict(self.inline)))

    @classmethod
    def empty(cls, grid_shape: tuple[int, ...]) -> ChunkTable:
        return ChunkTableBuilder(grid_shape).build()

    @classmethod
    def one_inline(cls, ndim: int, payload: bytes) -> ChunkTable:
        """The table of an array of one chunk (a grid of ``ndim`` axes of 1) stored inline:
        valid as made, so not checked again (a MATLAB file has tens of thousands)."""
        grid = (1,) * ndim
        source = np.full(grid, INLINE, dtype=np.int32)
        offset = np.zeros(grid, dtype=np.uint64)
        length = np.full(grid, len(payload), dtype=np.uint64)
        for array in (source, offset, length):
            array.flags.writeable = False
        table = object.__new__(cls)
        for name, value in (("source", source), ("offset", offset), ("length", length)):
            object.__setattr__(table, name, value)
        object.__setattr__(table, "inline", MappingProxyType({0: payload}))
        return table

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ChunkTable)
            and np.array_equal(self.source, other.source)
            and np.array_equal(self.offset, other.offset)
            and np.array_equal(self.length, other.length)
            and dict(self.inline) == dict(other.inline)
        )

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        # mappingproxy does not pickle; the grids' read-only flags are restored by __post_init__
        return (ChunkTable, (self.source.copy(), self.offset.copy(), self.length.copy(), dict(self.inline)))

    def with_inline(self, flat_indices: np.ndarray, payloads: list[bytes]) -> ChunkTable:
        """A copy with these chunks (flat indices in C order) stored inline."""
        builder = ChunkTableBuilder.from_table(self)
        builder.set_inline(flat_indices, payloads)
        return builder.build()

    def reshaped(self, grid_shape: tuple[int, ...]) -> ChunkTable:
        """The same chunks on a grid of another shape with as many cells (a 0-d array's one
        chunk as shape (1,))."""
        return ChunkTable(
            self.source.reshape(grid_shape).copy(),
            self.offset.reshape(grid_shape).copy(),
            self.length.reshape(grid_shape).copy(),
            dict(self.inline),
        )

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


class ChunkTableBuilder:
    """Builds a :class:`ChunkTable` column-wise: references and inline chunks are set on
    mutable grids, then :meth:`build` checks them once and freezes them."""

    def __init__(self, grid_shape: tuple[int, ...]) -> None:
        self.source = np.full(grid_shape, MISSING, dtype=np.int32)
        self.offset = np.zeros(grid_shape, dtype=np.uint64)
        self.length = np.zeros(grid_shape, dtype=np.uint64)
        self.inline: dict[int, bytes] = {}

    @classmethod
    def from_table(cls, table: ChunkTable) -> ChunkTableBuilder:
        builder = cls(table.grid_shape)
        builder.source[...] = table.source
        builder.offset[...] = table.offset
        builder.length[...] = table.length
        builder.inline = dict(table.inline)
        return builder

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape)

    def refer(
        self, flat_indices: np.ndarray, offsets: np.ndarray | int, lengths: np.ndarray | int, source: Any = 0
    ) -> None:
        """Chunks at these flat indices are byte ranges of source(s) ``source`` (an offset or
        length given as one number holds for every chunk)."""
        flat_indices = np.asarray(flat_indices, dtype=np.int64)
        if self.inline:  # no Python object per chunk in the usual case, where none is inline
            for flat in set(flat_indices.tolist()) & set(self.inline):
                del self.inline[flat]
        self.source.reshape(-1)[flat_indices] = source
        self.offset.reshape(-1)[flat_indices] = offsets
        self.length.reshape(-1)[flat_indices] = lengths

    def set_inline(self, flat_indices: np.ndarray, payloads: list[bytes]) -> None:
        """Chunks at these flat indices are stored inline."""
        flat_indices = np.asarray(flat_indices, dtype=np.int64)
        self.source.reshape(-1)[flat_indices] = INLINE
        self.offset.reshape(-1)[flat_indices] = 0
        self.length.reshape(-1)[flat_indices] = [len(p) for p in payloads]
        self.inline.update(zip(flat_indices.tolist(), payloads, strict=True))

    def clear(self, flat_indices: np.ndarray) -> None:
        """These chunks are absent: the fill value."""
        flat_indices = np.asarray(flat_indices, dtype=np.int64)
        for flat in flat_indices.tolist():
            self.inline.pop(flat, None)
        self.source.reshape(-1)[flat_indices] = MISSING
        self.offset.reshape(-1)[flat_indices] = 0
        self.length.reshape(-1)[flat_indices] = 0

    def flat(self, index: tuple[int, ...]) -> int:
        return int(np.ravel_multi_index(index, self.grid_shape)) if self.grid_shape else 0

    def build(self) -> ChunkTable:
        return ChunkTable(self.source, self.offset, self.length, self.inline)


@dataclass(frozen=True)
class Unreadable:
    """An object the scan left out because it could not read it (``h5lens.index(...,
    skip_unreadable=True)``): the node at ``path`` (a node path, as ``nodes`` are keyed), or
    with ``attribute`` that one attribute of the node. ``reason`` is the one line indexing
    without ``skip_unreadable`` refuses the file with; it names the HDF5 path."""

    path: str
    reason: str
    attribute: str | None = None

    @property
    def where(self) -> str:
        """``/path``, or ``/path attribute 'name'``."""
        node = "/" + self.path
        return node if self.attribute is None else f"{node} attribute {self.attribute!r}"

    @property
    def line(self) -> str:
        """One line naming it and why (the reason, which names it as the file does)."""
        return self.reason if self.reason.startswith(self.where + ": ") else f"{self.where}: {self.reason}"

    def error(self) -> UnsupportedFeatureError:
        """What reading it raises: it is not in the manifest, and why."""
        reason = self.reason.removeprefix(self.where + ": ")  # the reason names it too, mostly
        return UnsupportedFeatureError(
            f"{self.where}: not in this manifest, left out as unreadable when the file was indexed: {reason}"
        )

    def sort_key(self) -> tuple[str, bool, str]:
        """Nodes in path order, each node's attributes after it."""
        return self.path, self.attribute is not None, self.attribute or ""

    def to_dict(self) -> dict[str, str]:
        out = {"path": self.path}
        if self.attribute is not None:
            out["attribute"] = self.attribute
        out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, value: Any, where: str) -> Unreadable:
        """One entry of a manifest file's ``unreadable`` list, checked."""
        if not isinstance(value, dict) or set(value) - {"path", "attribute", "reason"}:
            raise ManifestFormatError(
                f"{where}: Expected each 'unreadable' entry to be an object of 'path', 'attribute' and 'reason'. "
                f"Got {value!r:.80}."
            )
        path, attribute, reason = value.get("path"), value.get("attribute"), value.get("reason")
        if not isinstance(path, str) or path.startswith("/") or path.endswith("/"):
            raise ManifestFormatError(
                f"{where}: Expected an 'unreadable' entry's path to be a node path. Got {path!r:.80}."
            )
        if attribute is not None and not isinstance(attribute, str):
            raise ManifestFormatError(
                f"{where}: Expected the attribute of unreadable /{path} to be a name. Got {attribute!r:.80}."
            )
        if not isinstance(reason, str) or not reason:
            raise ManifestFormatError(f"{where}: Expected a reason for unreadable /{path}. Got {reason!r:.80}.")
        return cls(path, reason, attribute)


def parse_unreadable(value: Any, where: str) -> tuple[Unreadable, ...]:
    """The ``unreadable`` record of a manifest file (absent: nothing was left out), sorted."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ManifestFormatError(f"{where}: Expected 'unreadable' to be a list. Got {type(value).__name__}.")
    return tuple(sorted((Unreadable.from_dict(entry, where) for entry in value), key=Unreadable.sort_key))


def unreadable_json(manifest: ManifestParts) -> dict[str, Any]:
    """The ``unreadable`` member of the ``h5lens`` object: written only when the scan left
    something out, so that every other manifest stays as it was."""
    if not manifest.unreadable:
        return {}
    return {"unreadable": [entry.to_dict() for entry in sorted(manifest.unreadable, key=Unreadable.sort_key)]}


@dataclass(eq=False, frozen=True)
class ManifestParts:
    """zarr v3 metadata documents plus chunk references: what a manifest holds. The readers
    of the file forms return these parts and their writers take them;
    :class:`~h5lens.manifest.model.Manifest` is the manifest built on them (its views and
    file methods), so that the forms need not know it.

    ``nodes`` maps a node path (``""`` for the root, ``"X/data"``) to its
    ``zarr.json`` document; ``chunks`` maps each array path to its table.
    """

    nodes: Mapping[str, dict[str, Any]]
    chunks: Mapping[str, ChunkTable]  # a dict, or tables decoded on first use (compact form)
    sources: Sequence[Source]
    convention: str = "released"
    writer: str = ""
    # where the manifest was read from: relative source URLs resolve against it
    location: str | None = None
    # what the writer recorded of each array's chunk table ({"chunks": n, "digest": crc}),
    # for validate to compare with the tables as read; None when the file recorded none
    recorded: dict[str, dict[str, Any]] | None = None
    # node path -> attribute name -> numpy type name, for the attributes whose HDF5 type a
    # JSON value loses (a float32 scale_factor reads back as float64): see attribute_types
    attribute_types: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # the objects the scan left out (``skip_unreadable``), sorted: see Unreadable
    unreadable: Sequence[Unreadable] = ()

    @property
    def n_chunks(self) -> int:
        return sum(t.n_present for t in self.chunks.values())


# Numeric types an attribute's JSON value does not say: JSON numbers read back as int64 or
# float64 (and true / false as bool), so only these are recorded. Complex values are
# written as [real, imaginary] pairs and datetime64 / timedelta64 values as their int64
# counts (NaT: the smallest int64), so their types are recorded too; long doubles as their
# exact hexadecimal text (h5lens.format.long_double).
ATTRIBUTE_TYPES = frozenset(
    {"int8", "int16", "int32", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "complex64", "complex128",
     "longdouble", "clongdouble"}
)
_TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as")
TIME_ATTRIBUTE_TYPES = frozenset(f"{kind}64[{unit}]" for kind in ("datetime", "timedelta") for unit in _TIME_UNITS)


def is_attribute_type(type_name: Any) -> bool:
    """Whether ``type_name`` is an attribute type a manifest may record: one of
    :data:`ATTRIBUTE_TYPES` or :data:`TIME_ATTRIBUTE_TYPES`, a ragged type (``"vlen[int32]1d"``),
    an opaque one (``"V3"``) or a compound one (``'record[["t","float32"]]'``), as
    :mod:`h5lens.format.dtypes_forms` names them."""
    from h5lens.format.dtypes_forms import is_opaque_type, parse_record_type, parse_vlen_type

    if not isinstance(type_name, str):
        return False
    return (
        type_name in ATTRIBUTE_TYPES
        or type_name in TIME_ATTRIBUTE_TYPES
        or parse_vlen_type(type_name) is not None
        or parse_record_type(type_name) is not None
        or is_opaque_type(type_name)
    )


def parse_attribute_types(value: Any, where: str) -> dict[str, dict[str, str]]:
    """The ``attribute_types`` record of a manifest file, checked: node path -> attribute
    name -> one of :data:`ATTRIBUTE_TYPES`."""
    from h5lens.errors import ManifestFormatError

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestFormatError(f"{where}: Expected 'attribute_types' to be an object. Got {type(value).__name__}.")
    out: dict[str, dict[str, str]] = {}
    for path, names in value.items():
        if not isinstance(path, str) or not isinstance(names, dict):
            raise ManifestFormatError(
                f"{where}: Expected 'attribute_types' to map node paths to objects. Got {path!r}."
            )
        for name, type_name in names.items():
            if not isinstance(name, str) or not is_attribute_type(type_name):
                raise ManifestFormatError(
                    f"{where}: attribute type {type_name!r} of /{path} attribute {name!r} is not one of "
                    f"{sorted(ATTRIBUTE_TYPES)}"
                )
        out[path] = dict(names)
    return out


def attribute_types_json(manifest: ManifestParts) -> dict[str, Any]:
    """The ``attribute_types`` member of the ``h5lens`` object (nothing when none is recorded)."""
    found = {path: dict(sorted(names.items())) for path, names in sorted(manifest.attribute_types.items()) if names}
    return {"attribute_types": found} if found else {}


def parts_of_file(
    info: Mapping[str, Any],
    *,
    nodes: dict[str, dict[str, Any]],
    chunks: Mapping[str, ChunkTable],
    sources: Sequence[Source],
    location: str | None,
    recorded: dict[str, dict[str, Any]] | None,
    writer_key: str = "version",
) -> ManifestParts:
    """The parts of a manifest file (either form), with what its ``.h5lens`` record says:
    the convention, the writer's version (under ``writer_key``: an Icechunk commit's record
    says ``writer``), the attribute types (checked against ``nodes``) and the objects left
    out as unreadable."""
    where = location or "manifest"
    convention = info.get("convention", "released")
    if not isinstance(convention, str):
        from h5lens.errors import ManifestFormatError

        raise ManifestFormatError(f"{where}: the convention is not a name: {convention!r}")
    return ManifestParts(
        nodes=nodes,
        chunks=chunks,
        sources=sources,
        convention=convention,
        writer=str(info.get(writer_key, "")),
        location=location,
        recorded=recorded,
        attribute_types=checked_attribute_types(info.get("attribute_types"), nodes, where),
        unreadable=parse_unreadable(info.get("unreadable"), where),
    )


def checked_attribute_types(value: Any, nodes: dict[str, dict[str, Any]], where: str) -> dict[str, dict[str, str]]:
    """The recorded attribute types, of attributes the manifest's nodes hold."""
    found = parse_attribute_types(value, where)
    for path, names in found.items():
        held = nodes.get(path, {}).get("attributes", {})
        missing = sorted(name for name in names if name not in held)
        if missing:
            from h5lens.errors import ManifestFormatError

            raise ManifestFormatError(f"{where}: attribute types for attributes /{path} does not hold: {missing[:3]}")
    return found
