"""A manifest's root as a zarr group with consolidated metadata, built from the manifest.

anndata's lazy reader (``anndata.experimental.read_lazy``) opens every element of an
AnnData as a zarr node, and asks for a consolidated group to make that cheap. Opened from
a store, each zarr node costs about 1.4 ms: its ``zarr.json`` fetched through zarr's event
loop, decoded and parsed (libhdf5 opens a dataset in 0.1 ms). A manifest holds every
node's document already, so :func:`consolidated_root` parses them once, into zarr's own
:class:`~zarr.core.group.ConsolidatedMetadata`: members then resolve in memory, without a
store read. The documents are the bytes the store serves as ``zarr.json``, decoded as
zarr decodes them, so a node reads the same either way.

``hide`` leaves subtrees out of the group's listing (and of the parse): elements a reader
builds itself, from the manifest, instead of through zarr.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import TYPE_CHECKING

import zarr
from zarr.core.group import AsyncGroup, ConsolidatedMetadata

from h5lens.manifest.zarr_keys import metadata_key
from h5lens.read.rectilinear import rectilinear_allowed

if TYPE_CHECKING:
    from zarr.core.metadata.v3 import ArrayV3Metadata

    from h5lens.store import ManifestStore


def consolidated_root(store: ManifestStore, *, hide: Collection[str] = ()) -> zarr.Group:
    """The root group of ``store``, its members (all but the ``hide`` subtrees) from
    consolidated metadata."""
    from zarr.core.group import GroupMetadata
    from zarr.storage import StorePath

    hidden = tuple(hide)
    documents = store.metadata
    # in path order: each group's members come out sorted by name, as the store lists them
    members = {
        path: json.loads(documents[metadata_key(path)])
        for path in sorted(store.manifest.nodes)
        if path and not _under(path, hidden)
    }
    with rectilinear_allowed(members.values()):
        consolidated = ConsolidatedMetadata.from_dict({"kind": "inline", "must_understand": False, "metadata": members})
    root = GroupMetadata.from_dict(json.loads(documents[metadata_key("")]))
    metadata = GroupMetadata(attributes=root.attributes, consolidated_metadata=consolidated)
    return zarr.Group(AsyncGroup(metadata=metadata, store_path=StorePath(store, "")))


def members(group: zarr.Group) -> list[tuple[str, zarr.Array | zarr.Group]]:
    """``dict(group).items()`` (zarr's order), answered from the group's consolidated
    metadata on the calling thread: each member built as zarr builds it from consolidated
    metadata (``zarr.AsyncArray`` / ``zarr.AsyncGroup`` over the same store), without the hop
    to zarr's event loop that ``Group.members`` and ``Group.__getitem__`` take. A group
    without consolidated metadata is listed by zarr."""
    from zarr.core.group import GroupMetadata
    from zarr.storage import StorePath

    found = group.metadata.consolidated_metadata
    if found is None:
        return list(dict(group).items())
    store = group.store_path.store
    prefix = f"{group.path}/" if group.path else ""
    out: list[tuple[str, zarr.Array | zarr.Group]] = []
    for name, metadata in found.metadata.items():
        where = StorePath(store, prefix + name)
        if isinstance(metadata, GroupMetadata):
            out.append((name, zarr.Group(zarr.AsyncGroup(metadata=metadata, store_path=where))))
        else:
            out.append((name, zarr.Array(zarr.AsyncArray(metadata=metadata, store_path=where))))
    return out


def node_at(store: ManifestStore, path: str) -> zarr.Array | zarr.Group:
    """The node at ``path`` as ``zarr.open_group(store)[path]`` gives it (a group without
    consolidated metadata: its members are looked up through the store), built on the calling
    thread from its document, with no trip to zarr's event loop and no store read."""
    from zarr.core.group import GroupMetadata
    from zarr.core.metadata.v3 import ArrayV3Metadata
    from zarr.storage import StorePath

    document = json.loads(store.metadata[metadata_key(path)])
    where = StorePath(store, path)
    if document.get("node_type") == "group":
        return zarr.Group(AsyncGroup(metadata=GroupMetadata.from_dict(document), store_path=where))
    with rectilinear_allowed([document]):
        metadata = ArrayV3Metadata.from_dict(document)
    return zarr.Array(zarr.AsyncArray(metadata=metadata, store_path=where))


def array_metadata(store: ManifestStore, path: str) -> ArrayV3Metadata:
    """zarr's metadata of the array at ``path``, parsed from its document (no store read)."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    document = json.loads(store.metadata[metadata_key(path)])
    with rectilinear_allowed([document]):
        return ArrayV3Metadata.from_dict(document)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


__all__ = ["array_metadata", "consolidated_root", "members", "node_at"]
