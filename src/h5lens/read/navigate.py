"""Navigate a manifest the way h5py navigates the HDF5 file it came from.

:func:`open` gives the root :class:`Group`. Whatever convention profile wrote
the manifest, nodes come back as the HDF5 file holds them:

* a group is a mapping of its members, by their HDF5 names (escaped keys are
  unescaped); ``_LINKS`` entries are members like any other, so ``group[name]``
  follows soft, hard and external links;
* ``attrs`` hide the convention's reserved attributes (they are in
  ``convention_attrs``), give ``{"_REFERENCE": ...}`` values as the nodes they
  point at, and under the ``proposal`` profile read ``"NaN"``, ``"Infinity"``
  and ``"-Infinity"`` as floats;
* a dataset reads scalars as scalars (0-d arrays and ``_SCALAR`` shape-(1,)
  arrays alike), object references as nodes (:meth:`Dataset.paths` gives the
  stored paths), compound fields listed in ``_REFERENCE_FIELDS`` as nodes, and a
  null dataspace (``_EMPTY``) as :class:`h5py.Empty`.

External links (``_LINKS`` entries whose ``source`` is not ``"."``) name another
HDF5 file, relative to the directory of the file that holds the link (as HDF5
resolves them). The linked file is opened from the first of (:mod:`h5lens.read.linked_files`):

1. a manifest ``<source>.json`` beside the referring manifest (``source`` resolved
   against the manifest's own location, for manifests kept apart from the data);
2. a manifest ``<file>.json`` beside the linked HDF5 file;
3. the linked HDF5 file itself, indexed on the fly in the referring manifest's
   convention (in memory; nothing is written) by the ``index`` function given to
   :func:`open` — :func:`h5lens.open` gives :func:`h5lens.index`. This module never
   imports the scanner: a reader-only install navigates manifests without h5py.

Each linked file is opened once per tree returned by :func:`open`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Unpack

import numpy as np
import zarr

from h5lens.format import convention
from h5lens.format.dtypes_forms import restore_array_fields, view_array_fields
from h5lens.format.keys import escape_key, unescape_key
from h5lens.format.long_double import float_form_in, h5py_dtype, to_h5py
from h5lens.manifest.documents import ArrayDocument
from h5lens.manifest.model import Manifest
from h5lens.read.attribute_types import netcdf_fill_value, typed
from h5lens.read.check import read_checked
from h5lens.read.linked_files import Indexer, external_url, load_external
from h5lens.read.open import load_or_index
from h5lens.read.options import OpenKwargs, OpenOptions, PathOrManifest
from h5lens.read.rectilinear import rectilinear_allowed
from h5lens.read.references import Region, each, with_targets
from h5lens.read.references import parse as parse_region

__all__ = [
    "RESERVED_ATTRIBUTES",
    "Dataset",
    "Group",
    "Link",
    "Node",
    "load_external",
    "open",
]

#: Attributes the convention reserves; hidden from ``Node.attrs``.
RESERVED_ATTRIBUTES = convention.RESERVED_ATTRIBUTES
_MAX_LINK_DEPTH = 64


class Link(NamedTuple):
    """One ``_LINKS`` entry: ``source`` is ``"."`` for the same file."""

    name: str  # unescaped member name
    source: str
    path: str


def open(  # noqa: A001 - the module's entry point; h5lens.open passes h5lens.index as index
    manifest_or_path: PathOrManifest,
    *,
    index: Indexer | None = None,
    options: OpenOptions | None = None,
    **given: Unpack[OpenKwargs],
) -> Group:
    """The root group of a manifest (object, manifest file or URL in any form,
    ``icechunk://PATH``, or an HDF5 file to index).

    An HDF5 file is indexed with ``index`` first (:func:`h5lens.open` passes
    :func:`h5lens.index`). The options are :func:`h5lens.open_store`'s and apply to every
    file reached, external links' too: each manifest's sources are checked once (unless
    ``verify=False``), a source that changed since indexing raises
    :class:`~h5lens.errors.StaleSourceError`.
    """
    opening = OpenOptions.of(options, given)
    manifest = load_or_index(manifest_or_path, opening, index)
    return _File(manifest, opening, {}, index).root()


def empty(dtype: np.dtype) -> Any:
    """A null dataspace's value: ``h5py.Empty`` where h5py is installed (what h5py gives),
    else a stand-in with the same ``dtype`` (a reader-only install has no h5py)."""
    try:
        import h5py
    except ImportError:
        return Empty(dtype)
    return h5py.Empty(dtype)


@dataclass(frozen=True)
class Empty:
    """The value of a null dataspace without h5py: no elements, only a dtype."""

    dtype: np.dtype


# Datasets of other kinds, built on Node in their own modules (h5lens.read.ragged, which
# adds itself here when imported: h5lens.api imports it with this module), tried before
# a plain Dataset: (does this node's document say it is one, the class).
DATASET_KINDS: list[tuple[Callable[[dict[str, Any]], bool], Callable[[Any, str], Node]]] = []


class _File:
    """One manifest being navigated, and the linked files reached from it (shared cache)."""

    def __init__(self, manifest: Manifest, options: OpenOptions, opened: dict[str, _File], index: Indexer | None):
        self.manifest = manifest
        self.index = index
        self.options = options
        self.store = options.store(manifest)  # its sources verified once per file, as open_store does
        self.proposal = manifest.convention == "proposal"
        self._opened = opened
        self._arrays: dict[str, zarr.Array] = {}
        self._depth = 0  # links followed in the current lookup (a cycle of soft links ends)
        if manifest.sources:
            opened.setdefault(self.url, self)

    @property
    def url(self) -> str:
        return self.store.source_url(0) if self.manifest.sources else "."

    def root(self) -> Group:
        return Group(self, "/")

    def node(self, path: str) -> Node:
        """The node at escaped zarr ``path`` ("/a/b"), following links on the way."""
        key = path.strip("/")
        doc = self.manifest.nodes.get(key)
        if doc is not None:
            for is_kind, kind in DATASET_KINDS:
                if is_kind(doc):
                    return kind(self, "/" + key)
            return Group(self, "/" + key) if doc.get("node_type") == "group" else Dataset(self, "/" + key)
        self.manifest.refuse_unreadable(key)  # indexed with skip_unreadable: not here, and why
        node: Node = self.root()
        for part in key.split("/"):
            if not isinstance(node, Group):
                raise KeyError(f"{path!r}: {node.path!r} is a dataset")
            node = node._member(part)
        return node

    def external(self, source: str) -> _File:
        url = external_url(self.manifest, source)
        found = self._opened.get(url)
        if found is None:
            manifest = load_external(self.manifest, source, options=self.options, index=self.index)
            found = _File(manifest, self.options, self._opened, self.index)
            self._opened[url] = found
        return found

    def region(self, value: Any, where: str) -> Region | None:
        """A ``_REGION_REFERENCE`` object (or its JSON text) as a Region; None if null."""
        found = parse_region(value, where)
        return None if found is None else Region(self.resolve(found[0], found[1]), found[2])

    def resolve(self, source: str, path: str) -> Node:
        if self._depth > _MAX_LINK_DEPTH:
            raise KeyError(f"{path!r}: more than {_MAX_LINK_DEPTH} links followed (a cycle of links?)")
        self._depth += 1
        try:
            if source == ".":
                return self.node(path)
            external = self.external(source)
            try:
                return external.node(path)  # the linked file's zarr path (escaped)
            except KeyError:
                return external.root()[path] if path.strip("/") else external.root()  # its HDF5 path
        finally:
            self._depth -= 1

    def array(self, key: str) -> zarr.Array:
        found = self._arrays.get(key)
        if found is None:
            with rectilinear_allowed([self.store.manifest.nodes.get(key.strip("/"), {})]):
                found = zarr.open_array(self.store, path=key, mode="r", zarr_format=3)
            self._arrays[key] = found
        return found


class Node:
    """A group or dataset: ``path`` is its escaped zarr path in its file ("/" the root)."""

    def __init__(self, file: _File, path: str) -> None:
        self._file = file
        self.path = path

    @property
    def _key(self) -> str:
        return self.path.strip("/")

    @property
    def _doc(self) -> dict[str, Any]:
        return self._file.manifest.nodes[self._key]

    @property
    def name(self) -> str:
        """The HDF5 name (unescaped); ``""`` for the root."""
        return unescape_key(self._key.rpartition("/")[2]) if self._key else ""

    @property
    def h5_path(self) -> str:
        """The HDF5 path: ``path`` with every segment unescaped."""
        return "/" + "/".join(unescape_key(p) for p in self._key.split("/")) if self._key else "/"

    @property
    def file(self) -> str:
        """URL of the HDF5 file holding this node."""
        return self._file.url

    @property
    def manifest(self) -> Manifest:
        return self._file.manifest

    @property
    def convention_attrs(self) -> dict[str, Any]:
        """The reserved attributes (``_DTYPE``, ``_LINKS``, ...) as stored."""
        return {k: v for k, v in self._doc.get("attributes", {}).items() if k in RESERVED_ATTRIBUTES}

    @property
    def attrs(self) -> Attributes:
        """User attributes; references resolve to nodes when read."""
        raw = {k: v for k, v in self._doc.get("attributes", {}).items() if k not in RESERVED_ATTRIBUTES}
        types = self._file.manifest.attribute_types.get(self._key)
        return Attributes(self._file, raw, types, self._key, self._doc.get("data_type"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and other._file is self._file and other.path == self.path

    def __hash__(self) -> int:
        return hash((id(self._file), self.path))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.h5_path!r} in {self.file}>"


class Attributes(Mapping[str, Any]):
    """A node's attributes, read-only; ``_REFERENCE`` values resolve on access."""

    def __init__(
        self, file: _File, raw: dict[str, Any], types: Mapping[str, str] | None = None, key: str = "",
        data_type: Any = None,
    ) -> None:  # fmt: skip
        self._file = file
        self.raw = raw
        self._types = types or {}
        self._key = key  # the node's
        self._data_type = data_type  # an array's: a netCDF float _FillValue's type

    def __getitem__(self, name: str) -> Any:
        if name not in self.raw:  # indexed with skip_unreadable: not here, and why
            self._file.manifest.refuse_unreadable(self._key, name)
        value = self._decode(self.raw[name])
        if name == "_FillValue":  # the netCDF profile's form for xarray's zarr reader (base64)
            value = netcdf_fill_value(value, self._data_type)
        found = self._types.get(name)
        return value if found is None else typed(value, found)  # the HDF5 type JSON lost

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def _decode(self, value: Any) -> Any:
        if convention.is_bytes_value(value):  # byte strings that are not UTF-8, as h5py's bytes
            return convention.decode_bytes_value(value)
        if isinstance(value, dict):
            ref = value.get(convention.REFERENCE)
            if len(value) == 1 and isinstance(ref, dict):
                return self._file.resolve(ref.get("source", "."), ref["path"])
            if len(value) == 1 and isinstance(value.get(convention.REGION_REFERENCE), dict):
                return self._file.region(value[convention.REGION_REFERENCE], "attribute")
            return {k: self._decode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._decode(v) for v in value]
        if self._file.proposal and isinstance(value, str) and value in convention.NON_FINITE_TEXT:
            return convention.NON_FINITE_TEXT[value]
        return value

    def __repr__(self) -> str:
        return f"<Attributes {list(self.raw)}>"


class Group(Node, Mapping[str, Node]):
    """A group: a mapping of HDF5 member names to nodes, links followed."""

    def _members(self) -> dict[str, tuple[str, Link | None]]:
        """HDF5 name -> (escaped name, link entry or None for a child object)."""
        members: dict[str, tuple[str, Link | None]] = {}
        for child in self._file.manifest.children(self._key):
            members[unescape_key(child)] = (child, None)
        for entry in self._doc.get("attributes", {}).get(convention.LINKS, []):
            name = unescape_key(entry["name"])
            members[name] = (entry["name"], Link(name, entry["source"], entry["path"]))
        return members

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._members()))

    def __len__(self) -> int:
        return len(self._members())

    def __contains__(self, name: object) -> bool:
        """A member name (a dangling link is a member that raises KeyError when read), or a path that resolves."""
        if not isinstance(name, str):
            return False
        if "/" not in name:
            return name in self._members() or self._absent(name)
        try:
            self[name]
        except KeyError:
            return False
        return True

    def __getitem__(self, name: str | Region) -> Node:
        if isinstance(name, Region):  # as h5py's file[ref]: the dataset it selects from
            return name.node
        members = self._members()
        if name in members:
            return self._follow(*members[name])
        index = convention.dataframe_index(self._doc.get("attributes", {})) if name == convention.INDEX_ALIAS else None
        if index is not None and index in members:  # a dataframe's index, whatever its column is called
            return self._follow(*members[index])
        if "/" in name:
            node: Node = self._file.root() if name.startswith("/") else self
            for part in (p for p in name.split("/") if p):
                if not isinstance(node, Group):
                    raise KeyError(f"{name!r}: {node.h5_path!r} is a dataset")
                node = node[part]
            return node
        self._absent(name)
        raise KeyError(f"{name!r} is not a member of {self.h5_path!r}")

    def _absent(self, name: str) -> bool:
        """False for a name that is no member; raises why if indexing left it out as unreadable."""
        for escaped in (name, escape_key(name)):
            self._file.manifest.refuse_unreadable(f"{self._key}/{escaped}".lstrip("/"))
        return False

    def _member(self, escaped: str) -> Node:
        """The member stored under the escaped name ``escaped``."""
        for stored, link in self._members().values():
            if stored == escaped:
                return self._follow(stored, link)
        raise KeyError(f"{escaped!r} is not a member of {self.path!r}")

    def _follow(self, escaped: str, link: Link | None) -> Node:
        if link is not None:
            return self._file.resolve(link.source, link.path)
        key = f"{self._key}/{escaped}" if self._key else escaped
        return self._file.node("/" + key)

    def link(self, name: str) -> Link | None:
        """The ``_LINKS`` entry of member ``name``; None for a child object (KeyError if absent)."""
        members = self._members()
        if name not in members:
            raise KeyError(f"{name!r} is not a member of {self.h5_path!r}")
        return members[name][1]

    def walk(self) -> Iterator[tuple[str, Node]]:
        """``(HDF5 path, node)`` of every object below this group, depth-first; links not followed."""
        for name, (escaped, link) in sorted(self._members().items()):
            if link is not None:
                continue
            node = self._follow(escaped, None)
            yield node.h5_path, node
            if isinstance(node, Group):
                yield from node.walk()


@dataclass(frozen=True)
class _Shape:
    stored: tuple[int, ...]
    scalar: bool
    empty: bool


class Dataset(Node):
    """A dataset: h5py-like ``shape``, ``dtype`` and indexing."""

    @property
    def _array(self) -> zarr.Array:
        return self._file.array(self._key)

    @property
    def _layout(self) -> _Shape:
        view = ArrayDocument.of(self._doc)
        assert view is not None  # a Dataset is made for arrays only
        attributes = view.attributes
        stored = view.shape
        scalar = stored == () or (attributes.get(convention.SCALAR) is True and stored == (1,))
        return _Shape(stored, scalar, attributes.get(convention.EMPTY) is True)

    @property
    def is_scalar(self) -> bool:
        return self._layout.scalar

    @property
    def is_empty(self) -> bool:
        """A null dataspace (``h5py.Empty``)."""
        return self._layout.empty

    @property
    def is_reference(self) -> bool:
        """A dataset of object or region references (``_DTYPE: "object_reference"``,
        ``"region_reference"``): read as nodes and :class:`~h5lens.read.references.Region`."""
        return self._doc.get("attributes", {}).get(convention.DTYPE) in ("object_reference", "region_reference")

    @property
    def is_region_reference(self) -> bool:
        return self._doc.get("attributes", {}).get(convention.DTYPE) == "region_reference"

    @property
    def reference_fields(self) -> tuple[str, ...]:
        return tuple(self._doc.get("attributes", {}).get(convention.REFERENCE_FIELDS, ()))

    @property
    def enum(self) -> dict[str, int] | None:
        """The ``_ENUM`` mapping of an enum dataset, else None."""
        return self._doc.get("attributes", {}).get(convention.ENUM)

    @property
    def shape(self) -> tuple[int, ...] | None:
        """As h5py gives it: ``()`` for scalars, None for a null dataspace."""
        layout = self._layout
        if layout.empty:
            return None
        return () if layout.scalar else layout.stored

    @property
    def ndim(self) -> int:
        return len(self.shape or ())

    @property
    def size(self) -> int:
        return 0 if self.shape is None else int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of what reading gives: references (and reference fields) are objects."""
        dtype = self._array.dtype
        if self.is_reference:
            return np.dtype(object)
        if convention.ARRAY_FIELDS in self._doc.get("attributes", {}):  # array members, as HDF5 holds them
            dtype = restore_array_fields(dtype, self._doc["attributes"][convention.ARRAY_FIELDS])
        floats = float_form_in(self._doc.get("attributes", {}), self.h5_path)  # long doubles' stored bits
        if floats is not None:
            dtype = h5py_dtype(dtype, floats)
        fields = self.reference_fields
        members = dtype.fields  # None exactly when dtype.names is
        if fields and dtype.names and members is not None:
            return np.dtype([(n, object if n in fields else members[n][0]) for n in dtype.names])
        return dtype

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of an unsized dataset")
        return shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self[...], dtype=dtype)

    def read(self) -> Any:
        """All values: ``self[()]``."""
        return self[()]

    def paths(self, key: Any = ()) -> Any:
        """The stored target paths of a reference dataset (``""`` for a null reference)."""
        if not self.is_reference:
            raise TypeError(f"{self.h5_path!r} is not a dataset of object references")
        return self._raw(key)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, Region):  # as h5py's dataset[ref]: the values the region selects
            if key.node != self:
                raise ValueError(f"the region selects from {key.node.h5_path!r}, not {self.h5_path!r}")
            return key.read()
        floats = float_form_in(self._doc.get("attributes", {}), self.h5_path)  # long doubles: their stored bits
        if self.is_empty:
            if _whole(key):
                return empty(self._array.dtype if floats is None else self.dtype)
            raise ValueError(f"{self.h5_path!r} has a null dataspace: only [()] reads it")
        values = self._raw(key)
        if convention.ARRAY_FIELDS in self._doc.get("attributes", {}):
            values = view_array_fields(values, self._doc["attributes"][convention.ARRAY_FIELDS])
        if floats is not None:  # as np.longdouble, or an error saying why not on this platform
            values = to_h5py(values, floats, self.h5_path)
        if self.is_reference:
            return self._targets(values)
        if self.reference_fields:
            return self._with_nodes(values)
        return values

    def _raw(self, key: Any) -> Any:
        layout = self._layout
        # read_checked: a chunk that does not decode is a SourceReadError naming it
        if not layout.scalar:
            values = read_checked(self._array, key)
            # one element: a scalar, as h5py gives it (zarr gives a 0-d array)
            return _scalar(values) if isinstance(values, np.ndarray) and values.ndim == 0 else values
        value = read_checked(self._array, () if layout.stored == () else 0)
        if isinstance(key, tuple) and key == ():
            return _scalar(value)
        return value[key]

    def _resolve_path(self, path: str) -> Node | None:
        return self._file.node(path) if path else None

    def _targets(self, paths: Any) -> Any:
        if self.is_region_reference:
            return each(paths, lambda text: self._file.region(text, self.h5_path))
        return each(paths, self._resolve_path)

    def _with_nodes(self, values: Any) -> Any:
        return with_targets(values, self.reference_fields, self.dtype, self._targets)


def _whole(key: Any) -> bool:
    return key is Ellipsis or (isinstance(key, tuple) and key in ((), (Ellipsis,)))


def _scalar(value: np.ndarray) -> Any:
    item = value[()]
    if isinstance(item, np.str_):
        return str(item)
    if isinstance(item, np.bytes_):
        return bytes(item)
    if value.dtype.kind == "T":
        return str(item)
    return item
