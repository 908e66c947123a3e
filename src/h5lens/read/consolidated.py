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

import functools
import json
from collections.abc import Collection, Generator
from typing import TYPE_CHECKING, Any

import zarr
from zarr.core.group import AsyncGroup, ConsolidatedMetadata

from h5lens.manifest.zarr_keys import metadata_key

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
    consolidated = ConsolidatedMetadata.from_dict({"kind": "inline", "must_understand": False, "metadata": members})
    root = GroupMetadata.from_dict(json.loads(documents[metadata_key("")]))
    metadata = GroupMetadata(attributes=root.attributes, consolidated_metadata=consolidated)
    _install_lookups_here()
    return zarr.Group(AsyncGroup(metadata=metadata, store_path=StorePath(store, "")))


# zarr's Group sends every member lookup to its event-loop thread and waits, even where
# consolidated metadata answers it without a read: a hop of 0.1-0.5 ms, and anndata's
# reader makes one per element (anndata dispatches on the exact zarr classes, so a
# subclass cannot take them). For groups of an h5lens store with consolidated metadata,
# ``zarr.Group.__getitem__`` and ``keys`` answer on the calling thread, from it; a name
# that is not a direct member, any other group, and any zarr whose methods do not take
# the arguments this was written for, go through zarr's own.
def _install_lookups_here() -> None:
    import inspect

    from h5lens.store import ManifestStore

    getitem, keys = zarr.Group.__getitem__, zarr.Group.keys
    if getattr(getitem, "_h5lens_consolidated", False):
        return
    if list(inspect.signature(getitem).parameters) != ["self", "path"] or list(inspect.signature(keys).parameters) != ["self"]:
        return

    def consolidated(group: zarr.Group) -> ConsolidatedMetadata | None:
        found = group._async_group.metadata.consolidated_metadata
        return found if found is not None and isinstance(group._async_group.store_path.store, ManifestStore) else None

    @functools.wraps(getitem)
    def __getitem__(self: zarr.Group, path: str) -> Any:
        found = consolidated(self)
        if found is None or path not in found.metadata:
            return getitem(self, path)
        group = self._async_group
        member = group._getitem_consolidated(group.store_path / path, path, prefix=group.name)
        return zarr.Group(member) if isinstance(member, AsyncGroup) else zarr.Array(member)

    @functools.wraps(keys)
    def keys_here(self: zarr.Group) -> Generator[str]:
        found = consolidated(self)
        if found is None:
            yield from keys(self)
        else:
            yield from list(found.metadata)

    __getitem__._h5lens_consolidated = True  # type: ignore[attr-defined]
    zarr.Group.__getitem__ = __getitem__  # type: ignore[method-assign]
    zarr.Group.keys = keys_here  # type: ignore[method-assign]


def array_metadata(store: ManifestStore, path: str) -> ArrayV3Metadata:
    """zarr's metadata of the array at ``path``, parsed from its document (no store read)."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    return ArrayV3Metadata.from_dict(json.loads(store.metadata[metadata_key(path)]))


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


__all__ = ["array_metadata", "consolidated_root"]
