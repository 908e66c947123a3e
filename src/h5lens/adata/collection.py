"""Many manifests as one AnnData, concatenated along obs by ``anndata.concat`` itself.

Lazily, each manifest is read as :func:`h5lens.read_anndata` reads one (dask arrays and
lazy dataframes over a :class:`~h5lens.adata.shared.SharedManifestStore`) with blocks sized
for a cluster, and ``anndata.concat`` joins the lazy objects: ``join``, ``label``,
``keys`` and ``index_unique`` mean what they mean there. Every task reads through its own
file's manifest, so the result computes on any dask scheduler, a distributed cluster
included, without the client opening a source.

Opening a manifest waits on round trips (the manifest, its source's HEAD or stat): the
members are opened side by side on a few threads, each member's reads then in flight
together, and read one after another on the calling thread (decoding and anndata's
assembly hold the GIL: threads would gain nothing there). Local members gain little from
the threads and lose nothing measurable (``benchmarks/small_files.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal, TypeVar

from h5lens.errors import InvalidOptionError

if TYPE_CHECKING:
    import anndata

    from h5lens.read.options import PathOrManifest

Opened = TypeVar("Opened")

# Manifests opened at once (each waits on a round trip or two when remote).
OPEN_AT_ONCE = 16


def read_collection(
    manifests: Sequence[PathOrManifest],
    open_one: Callable[[PathOrManifest], Opened],
    read_opened: Callable[[Opened], anndata.AnnData],
    *,
    join: Literal["inner", "outer"],
    label: str | None,
    keys: Collection[str] | None,
    index_unique: str | None,
) -> anndata.AnnData:
    """``anndata.concat`` of ``read_opened(open_one(m))`` over ``manifests``."""
    import anndata

    if not manifests:
        raise InvalidOptionError("read_anndata: the list of manifests is empty")
    if keys is not None and len(keys) != len(manifests):
        raise InvalidOptionError(f"keys: {len(keys)} given for {len(manifests)} manifests")
    parts = [read_opened(opened) for opened in open_all(manifests, open_one)]
    return anndata.concat(parts, axis="obs", join=join, label=label, keys=keys, index_unique=index_unique)


def open_all(manifests: Sequence[PathOrManifest], open_one: Callable[[PathOrManifest], Opened]) -> list[Opened]:
    """``open_one`` of each manifest, in order, side by side on a few threads (the first
    failure raised, as a loop would raise it)."""
    if len(manifests) < 2:
        return [open_one(m) for m in manifests]
    with ThreadPoolExecutor(min(OPEN_AT_ONCE, len(manifests)), thread_name_prefix="h5lens-open") as pool:
        return list(pool.map(open_one, manifests))
