"""Many manifests as one AnnData, concatenated along obs by ``anndata.concat`` itself.

Lazily, each manifest is read as :func:`h5lens.read_anndata` reads one (dask arrays and
lazy dataframes over a :class:`~h5lens.read.shared.SharedManifestStore`) with blocks sized
for a cluster, and ``anndata.concat`` joins the lazy objects: ``join``, ``label``,
``keys`` and ``index_unique`` mean what they mean there. Every task reads through its own
file's manifest, so the result computes on any dask scheduler, a distributed cluster
included, without the client opening a source.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Literal

from h5lens.errors import InvalidOptionError
from h5lens.read.blocks import DEFAULT_BLOCK_BYTES

if TYPE_CHECKING:
    import anndata

    from h5lens.read.options import OpenOptions, PathOrManifest


def read_collection(
    manifests: Sequence[PathOrManifest],
    read_one: Callable[..., anndata.AnnData],
    *,
    lazy: bool,
    join: Literal["inner", "outer"],
    label: str | None,
    keys: Collection[str] | None,
    index_unique: str | None,
    block_bytes: int | None,
    options: OpenOptions,
) -> anndata.AnnData:
    """``anndata.concat`` of ``read_one(m, lazy=lazy, ...)`` over ``manifests``."""
    import anndata

    if not manifests:
        raise InvalidOptionError("read_anndata: the list of manifests is empty")
    if keys is not None and len(keys) != len(manifests):
        raise InvalidOptionError(f"keys: {len(keys)} given for {len(manifests)} manifests")
    if lazy:  # a collection is computed, not sliced row by row: blocks sized for a cluster
        block_bytes = block_bytes or DEFAULT_BLOCK_BYTES
    parts = [read_one(m, lazy=lazy, block_bytes=block_bytes, options=options) for m in manifests]
    return anndata.concat(parts, axis="obs", join=join, label=label, keys=keys, index_unique=index_unique)
