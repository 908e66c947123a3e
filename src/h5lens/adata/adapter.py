"""What h5lens's AnnData readers take from anndata: its public API, and one private name.

Public API, used as documented: ``anndata.experimental.read_dispatched`` (every element
of an AnnData read through h5lens's callback), ``read_elem_lazy``, ``anndata.io.read_elem``,
``anndata.acc.A.from_json`` and ``anndata.AnnData``.

Encodings anndata cannot read from zarr yet (``dict`` 0.2.0, escaped keys; ``accessor``
0.1.0) are read here, by the container that holds them (:class:`OwnEncodings`): nothing is
registered in anndata's registry. When anndata reads an encoding itself, h5lens leaves it
to anndata; to ask, it looks at anndata's private read registry (the one private name,
:data:`PRIVATE_NAMES`, held by a test by name). Without it (a release that moved it) h5lens
reads both encodings itself, which is correct either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from h5lens.format import convention
from h5lens.format.keys import unescape_key
from h5lens.read.consolidated import members

if TYPE_CHECKING:
    from h5lens.manifest.model import Manifest

# anndata's own private names h5lens reads (only reads: nothing is written into them)
PRIVATE_NAMES = ("anndata._io.specs.registry._REGISTRY", "anndata._io.specs.registry.IOSpec")

# (encoding-type, encoding-version) h5lens reads when anndata does not; zarr node type
OWN_ENCODINGS = {("dict", "0.2.0"): zarr.Group, ("accessor", "0.1.0"): zarr.Array}

# The members of anndata's AnnData (and raw) encoding, in the order its reader takes them.
ANNDATA_ELEMENTS = ("X", "obs", "var", "obsm", "varm", "obsp", "varp", "layers", "uns", "raw")


def require(module: str, what: str) -> None:
    """Import ``module`` (anndata, treedata, dask, xarray), or say which extra installs it."""
    import importlib

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"{what} needs {module}: pip install 'h5lens[anndata]'", name=module) from e


@cache
def anndata_reads(kind: str, version: str) -> bool:
    """Whether anndata reads encoding ``kind`` ``version`` from zarr itself."""
    node = OWN_ENCODINGS.get((kind, version))
    try:
        from anndata._io.specs.registry import _REGISTRY, IOSpec
    except ImportError:
        return node is None
    if node is None:
        return True
    return bool(_REGISTRY.has_read(node, IOSpec(kind, version)))


def own_encoding(attributes: dict[str, Any]) -> tuple[str, str] | None:
    """The encoding of a node (its attributes) if h5lens reads it and anndata does not."""
    found = (attributes.get("encoding-type"), attributes.get("encoding-version"))
    if found in OWN_ENCODINGS and not anndata_reads(*found):
        return found
    return None


def scalar_value(elem: zarr.Array) -> Any:
    """A 0-d (or the convention's proposal-form ``_SCALAR`` (1,)) array's value, as a
    Python value where numpy gives a scalar."""
    value: Any = elem[()]
    if elem.attrs.get(convention.SCALAR) is True and np.shape(value) == (1,):
        value = value[0]
    return value.item() if isinstance(value, np.generic) else value


class OwnEncodings:
    """Containers (the AnnData root, ``raw``, ``dict``) whose members include an encoding
    anndata cannot read are read here, member by member; each member is read by
    ``read_member`` (anndata's dispatch, through h5lens's callback) unless it is one of
    those encodings, which this reads."""

    def __init__(self, manifest: Manifest, read_member: Callable[[Any], Any]) -> None:
        self.manifest = manifest
        self.read_member = read_member

    def holds_one(self, elem: zarr.Group) -> bool:
        """Whether a member of ``elem`` has an encoding h5lens reads and anndata does not."""
        path = elem.path
        prefix = f"{path}/" if path else ""
        for name in self.manifest.children(path) if path in self.manifest.nodes else ():
            doc = self.manifest.nodes.get(prefix + name)
            if doc is not None and own_encoding(doc.get("attributes", {})) is not None:
                return True
        return False

    def read_container(self, elem: zarr.Group, kind: str) -> Any:
        """``elem`` (an ``anndata``, ``raw`` or ``dict`` group) read as anndata reads it."""
        if kind in ("anndata", "raw"):
            import anndata

            return anndata.AnnData(**{k: self.read(elem[k]) for k in ANNDATA_ELEMENTS if k in elem})
        return {name: self.read(child) for name, child in members(elem)}

    def read(self, elem: Any) -> Any:
        found = own_encoding(dict(elem.attrs))
        if found == ("dict", "0.2.0"):
            return {unescape_key(name): self.read(child) for name, child in members(elem)}
        if found == ("accessor", "0.1.0"):
            from anndata.acc import A

            return A.from_json(json.loads(scalar_value(elem)))
        return self.read_member(elem)


def read_legacy_raw(root_members: Collection[str], adata: Any, read: Callable[[str], Any]) -> Any:
    """Top-level ``raw.X`` / ``raw.var`` / ``raw.varm`` (anndata < 0.7), as anndata's
    ``read_h5ad`` takes them: gathered into ``adata.raw``, or refused beside a ``raw``
    group. ``root_members`` are the names at the root, ``read`` reads one of them. The h5ad
    profile moves them into a ``raw`` group; a manifest from elsewhere may not."""
    legacy = [name for name in root_members if name.startswith("raw.")]
    if not legacy or ("raw" not in root_members and "raw.X" not in legacy):  # read_h5ad's two branches
        return adata
    import anndata

    if adata.raw is not None:
        raise ValueError("Store has both legacy and current raw formats.")  # anndata's words
    parts = {key: read(f"raw.{key}") for key in ("X", "var", "varm") if f"raw.{key}" in root_members}
    raw = anndata.AnnData(**parts)
    raw.obs_names = adata.obs_names
    adata.raw = raw
    return adata


__all__ = [
    "ANNDATA_ELEMENTS",
    "OWN_ENCODINGS",
    "PRIVATE_NAMES",
    "OwnEncodings",
    "anndata_reads",
    "own_encoding",
    "read_legacy_raw",
    "require",
    "scalar_value",
]
