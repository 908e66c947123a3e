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
from h5lens.keys import escape_key


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


@dataclass
class DatasetRecord:
    h5_path: str
    key: str


@dataclass
class Walk:
    """Everything the walk found, plus the object-address → path map for references."""

    groups: list[GroupRecord]
    datasets: list[DatasetRecord]
    canonical: dict[int, str]  # object identity -> "/escaped/zarr/path"

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
    canonical: dict[int, str] = {_identity(h5): "/"}
    pending_soft: list[tuple[GroupRecord, str, str]] = []  # (parent, child name, target)

    root = GroupRecord("/", "")
    groups.append(root)
    # Depth-first in iteration order, as h5py's visit does: an object reached by two
    # hard links is recorded at the name that comes first in that order.
    stack: list[tuple[GroupRecord, Iterator[tuple[str, h5py.Group]]]] = [(root, _members(h5, root))]
    while stack:
        record, members = stack[-1]
        member = next(members, None)
        if member is None:
            stack.pop()
            continue
        name, group = member
        if not isinstance(name, str) or not _is_text(name):  # h5py lists such names as bytes
            raise UnsupportedFeatureError(
                f"{record.h5_path.rstrip('/')}/{name!r}: an HDF5 name that is not UTF-8 text has no zarr key"
            )
        child_h5 = posixpath.join(record.h5_path, name)
        child_key = f"{record.key}/{escape_key(name)}" if record.key else escape_key(name)
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink):
            pending_soft.append((record, escape_key(name), _absolute(record.h5_path, link.path)))
            continue
        if isinstance(link, h5py.ExternalLink):
            record.links.append(LinkEntry(escape_key(name), link.filename, _escaped_path(link.path)))
            continue
        try:
            obj = group[name]
        except (KeyError, OSError, RuntimeError) as e:
            raise NotHDF5Error(f"{child_h5}: cannot open object ({e})") from None
        identity = _identity(obj)
        if identity in canonical:  # a further hard link to an object already recorded
            record.links.append(LinkEntry(escape_key(name), ".", canonical[identity]))
            continue
        canonical[identity] = zarr_path(child_key)
        if isinstance(obj, h5py.Group):
            child = GroupRecord(child_h5, child_key)
            groups.append(child)
            stack.append((child, _members(obj, child)))
        elif isinstance(obj, h5py.Dataset):
            datasets.append(DatasetRecord(child_h5, child_key))
        elif isinstance(obj, h5py.Datatype) and len(obj.attrs):
            # a committed datatype is a type definition (the datasets using it carry the type);
            # attributes on it have nowhere to go in zarr, and must not vanish
            raise UnsupportedFeatureError(
                f"{child_h5}: committed datatype with attributes {sorted(obj.attrs)}; zarr has no node for it"
            )

    for record, name, target in pending_soft:
        record.links.append(LinkEntry(name, ".", _soft_target(h5, target, canonical)))
    for record in groups:
        record.links.sort(key=lambda entry: entry.name)
    return Walk(groups, datasets, canonical)


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _members(group: h5py.Group, record: GroupRecord) -> Iterator[tuple[str, h5py.Group]]:
    try:
        names = list(group.keys())
    except (OSError, RuntimeError) as e:
        raise NotHDF5Error(f"{record.h5_path}: cannot list group members ({e})") from None
    return ((name, group) for name in names)


def _absolute(group_path: str, target: str) -> str:
    return posixpath.normpath(posixpath.join(group_path, target))


def _soft_target(h5: h5py.File, target: str, canonical: dict[int, str]) -> str:
    """The recorded path of what a soft link reaches; its escaped text if it dangles."""
    try:
        obj = h5.get(target)
    except (KeyError, OSError, RuntimeError):
        obj = None
    if obj is not None:
        found = canonical.get(_identity(obj))
        if found is not None:
            return found
    return _escaped_path(target)


def _escaped_path(path: str) -> str:
    """An HDF5 path as the zarr path h5lens writes for it: every segment escaped."""
    return "/" + "/".join(escape_key(p) for p in path.split("/") if p)
