"""h5py traversal → node records. No zarr here.

The walk is depth-first in h5py's iteration order (by name, or by creation
order where the file tracks it), so output is deterministic. Each object is
recorded once, at the first path that reaches it; further hard links to it,
soft links and external links become link entries on the parent group
(the convention's parent-centric ``_LINKS``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field

import h5py

from h5lens.errors import NotHDF5Error, UnsupportedFeatureError
from h5lens.format.keys import escape_key


@dataclass(frozen=True)
class LinkEntry:
    """One ``_LINKS`` entry: a child that is a link, not an object of its own."""

    name: str  # escaped child name
    source: str  # "." for the same file, else the external file name
    path: str  # target path ("/a/b"), segments escaped (the zarr path in the target's manifest)


@dataclass
class GroupRecord:
    h5_path: str
    key: str  # zarr path, escaped segments, "" for the root
    links: list[LinkEntry] = field(default_factory=list)
    # the object header's address (relative to the base address) and libhdf5's count of
    # the object's attributes, where the walk knows them: the scan reads headers itself
    address: int | None = None
    attribute_count: int | None = None


@dataclass
class DatasetRecord:
    h5_path: str
    key: str
    address: int | None = None  # as GroupRecord's
    attribute_count: int | None = None


@dataclass
class Walk:
    """Everything the walk found, plus the object-address → path map for references."""

    groups: list[GroupRecord]
    datasets: list[DatasetRecord]
    canonical: dict[int, str]  # object identity -> "/escaped/zarr/path"
    # committed datatypes that carry attributes (the others are type definitions only)
    datatypes: list[DatasetRecord] = field(default_factory=list)

    def path_of(self, obj: h5py.HLObject) -> str | None:
        return self.canonical.get(_identity(obj))


def _identity(obj: h5py.HLObject) -> int:
    # h5py hashes an ObjectID by (file number, object address): equal for two hard links
    # to one object. h5o.get_info costs a walk of a dataset's chunk index; this does not.
    return hash(obj.id)


def zarr_path(key: str) -> str:
    return "/" + key


def walk(h5: h5py.File) -> Walk:
    """Record every group, dataset and link reachable from the root of ``h5``."""
    groups: list[GroupRecord] = []
    datasets: list[DatasetRecord] = []
    datatypes: list[DatasetRecord] = []
    try:
        canonical: dict[int, str] = {_identity(h5): "/"}
    except (TypeError, RuntimeError, OSError) as e:  # h5py hashes by the object's address
        raise NotHDF5Error(f"/: cannot read the root group ({_cause(e)})") from None
    pending_soft: list[tuple[GroupRecord, str, str]] = []  # (parent, child name, target)

    root = GroupRecord("/", "", address=_address(h5), attribute_count=_attribute_count(h5.id))
    groups.append(root)
    # Depth-first in iteration order, as h5py's visit does: an object reached by two
    # hard links is recorded at the name that comes first in that order.
    stack: list[tuple[GroupRecord, h5py.Group, Iterator[tuple[str | bytes, int, bytes, int]]]] = [
        (root, h5, _members(h5, root))
    ]
    while stack:
        record, group, members = stack[-1]
        member = next(members, None)
        if member is None:
            stack.pop()
            continue
        name, kind, raw, address = member
        if not isinstance(name, str) or not _is_text(name):  # h5py lists such names as bytes
            raise UnsupportedFeatureError(
                f"{record.h5_path.rstrip('/')}/{name!r}: an HDF5 name that is not UTF-8 text has no zarr key"
            )
        escaped = escape_key(name)
        if kind == h5py.h5l.TYPE_SOFT:
            target = _text(group.id.links.get_val(raw))
            pending_soft.append((record, escaped, _absolute(record.h5_path, target)))
            continue
        if kind == h5py.h5l.TYPE_EXTERNAL:
            filename, path = group.id.links.get_val(raw)
            record.links.append(LinkEntry(escaped, _text(filename), _escaped_path(_text(path))))
            continue
        child_h5 = posixpath.join(record.h5_path, name)
        child_key = f"{record.key}/{escaped}" if record.key else escaped
        if kind != h5py.h5l.TYPE_HARD:
            raise UnsupportedFeatureError(f"{child_h5}: a user-defined link (type {kind}) has no zarr form")
        try:
            object_id = h5py.h5o.open(group.id, raw)
            identity = hash(object_id)
        except (KeyError, OSError, RuntimeError, ValueError, TypeError) as e:
            raise NotHDF5Error(f"{child_h5}: cannot open object ({_cause(e)})") from None
        if identity in canonical:  # a further hard link to an object already recorded
            record.links.append(LinkEntry(escaped, ".", canonical[identity]))
            continue
        canonical[identity] = zarr_path(child_key)
        count = _attribute_count(object_id)
        if isinstance(object_id, h5py.h5g.GroupID):
            child = GroupRecord(child_h5, child_key, address=address, attribute_count=count)
            groups.append(child)
            child_group = h5py.Group(object_id)
            stack.append((child, child_group, _members(child_group, child)))
        elif isinstance(object_id, h5py.h5d.DatasetID):
            datasets.append(DatasetRecord(child_h5, child_key, address, count))
        elif isinstance(object_id, h5py.h5t.TypeID) and h5py.h5a.get_num_attrs(object_id):
            # a committed datatype is a type definition (the datasets using it carry the type);
            # one with attributes becomes a node of its own, so that they do not vanish
            datatypes.append(DatasetRecord(child_h5, child_key))

    resolved: dict[str, str] = {}  # soft links often share targets (NWB links many to one)
    for record, name, target in pending_soft:
        found = resolved.get(target)
        if found is None:
            found = resolved[target] = _soft_target(h5, target, canonical)
        record.links.append(LinkEntry(name, ".", found))
    for record in groups:
        record.links.sort(key=lambda entry: entry.name)
    return Walk(groups, datasets, canonical, datatypes)


class Opener:
    """Opens the walk's datasets by path from their parent group, kept open while consecutive
    paths share it (the walk lists a group's members together): libhdf5 then resolves one
    link, not the whole path (each step through a group of thousands of members, a MATLAB
    file's ``#refs#``, costs tens of µs). The same object ``h5[path]`` gives."""

    def __init__(self, h5: h5py.File) -> None:
        self.h5 = h5
        self.readonly = h5.mode == "r"
        self._parent: tuple[str, h5py.h5g.GroupID] | None = None

    def dataset(self, h5_path: str) -> h5py.Dataset:
        parent, _, name = h5_path.rpartition("/")
        if self._parent is None or self._parent[0] != parent:
            self._parent = None
            self._parent = (parent, h5py.h5o.open(self.h5.id, (parent or "/").encode("utf-8")))
        oid = h5py.h5o.open(self._parent[1], name.encode("utf-8"))
        if not isinstance(oid, h5py.h5d.DatasetID):
            raise KeyError(f"{h5_path} is not a dataset")
        return h5py.Dataset(oid, readonly=self.readonly)


def _cause(error: BaseException) -> BaseException:
    """libhdf5's own error where h5py raised another while handling it (a damaged object
    header makes ``hash`` fail with "cannot be hashed"; the header's fault is the context)."""
    return error.__context__ if isinstance(error, TypeError) and error.__context__ else error


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _members(group: h5py.Group, record: GroupRecord) -> Iterator[tuple[str | bytes, int, bytes, int]]:
    """(name, link type, raw name, object header address of a hard link's target) of each
    member, in h5py's order (creation order where the group tracks it, else by name), from
    one link iteration: no per-name lookups, which cost ~100 µs each through h5py's
    high-level API (minutes for a 10^6-member group)."""
    found: list[tuple[bytes, int, int]] = []
    try:
        links = group.id.links
        tracked = group.id.get_create_plist().get_link_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
        index = h5py.h5.INDEX_CRT_ORDER if tracked else h5py.h5.INDEX_NAME
        links.iterate(lambda raw, info: found.append((raw, info.type, info.u)), idx_type=index, info=True)
    except (OSError, RuntimeError, ValueError) as e:
        raise NotHDF5Error(f"{record.h5_path}: cannot list group members ({e})") from None
    return ((_name(raw), kind, raw, u) for raw, kind, u in found)


def _address(obj: h5py.HLObject) -> int | None:
    try:
        return int(h5py.h5g.get_objinfo(obj.id).objno[0])
    except (OSError, RuntimeError, ValueError, TypeError):
        return None


def _attribute_count(object_id: h5py.h5o.ObjectID) -> int | None:
    try:
        return int(h5py.h5a.get_num_attrs(object_id))
    except (OSError, RuntimeError, ValueError, TypeError):
        return None


def _name(raw: bytes) -> str | bytes:
    """A member name as h5py gives it: text when UTF-8, else the bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _text(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")


def _absolute(group_path: str, target: str) -> str:
    return posixpath.normpath(posixpath.join(group_path, target))


def _soft_target(h5: h5py.File, target: str, canonical: dict[int, str]) -> str:
    """The recorded path of what a soft link reaches; its escaped text if it dangles (or
    loops: HDF5 stops following soft links after 16 hops)."""
    try:
        identity: int | None = hash(h5py.h5o.open(h5.id, target.encode("utf-8", "surrogateescape")))
    except (KeyError, OSError, RuntimeError, ValueError, TypeError):
        identity = None
    if identity is not None:
        found = canonical.get(identity)
        if found is not None:
            return found
    return _escaped_path(target)


def _escaped_path(path: str) -> str:
    """An HDF5 path as the zarr path h5lens writes for it: every segment escaped."""
    return "/" + "/".join(escape_key(p) for p in path.split("/") if p)
