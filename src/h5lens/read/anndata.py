"""Open a manifest as AnnData / TreeData, eagerly or lazily.

anndata 0.13 reads most manifests as they are (``anndata.read_zarr``). What it
cannot read, this layer resolves: ``dict`` 0.2.0 (escaped keys, unescaped
strictly), ``accessor`` elements (parsed by ``anndata.acc`` into the reference
they stand for), the convention's proposal-form scalars (``_SCALAR`` arrays of
shape (1,)). Eager reads also give string columns the dtype ``read_h5ad``
gives them (anndata's zarr path leaves them as numpy strings).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zarr

from h5lens import convention
from h5lens.errors import ManifestFormatError
from h5lens.keys import unescape_key
from h5lens.manifest.limits import Limits
from h5lens.read.open import PathOrManifest, open_group, store_of

if TYPE_CHECKING:
    from collections.abc import Callable

    import anndata
    from anndata._io.specs.registry import IOSpec

_registered = False


def _register_readers() -> None:
    """Teach anndata's registry the encodings it cannot read from zarr yet (idempotent)."""
    global _registered
    if _registered:
        return
    from anndata._io.specs.registry import _REGISTRY, IOSpec

    def read_dict_escaped(elem: zarr.Group, *, _reader: Any) -> dict[str, Any]:
        return {unescape_key(name): _reader.read_elem(child) for name, child in elem.members()}

    def read_accessor(elem: zarr.Array, *, _reader: Any) -> Any:
        from anndata.acc import A
        from anndata.acc._parse_json import parse_json

        return parse_json(A, json.loads(_scalar(elem)))

    if not _REGISTRY.has_read(zarr.Group, IOSpec("dict", "0.2.0")):
        _REGISTRY.register_read(zarr.Group, IOSpec("dict", "0.2.0"))(read_dict_escaped)
    if not _REGISTRY.has_read(zarr.Array, IOSpec("accessor", "0.1.0")):
        _REGISTRY.register_read(zarr.Array, IOSpec("accessor", "0.1.0"))(read_accessor)
    _registered = True


def _scalar(elem: zarr.Array) -> Any:
    value: Any = elem[()]  # a 0-d or (1,) array's value: any numpy scalar or array
    if elem.attrs.get(convention.SCALAR) is True and np.shape(value) == (1,):
        value = value[0]
    return value.item() if isinstance(value, np.generic) else value


def _as_h5ad_reads(read_func: Callable[[Any], Any], elem_name: str, elem: Any, iospec: IOSpec) -> Any:
    """The read_dispatched callback that makes zarr reads match read_h5ad's (and fast)."""
    kind = iospec.encoding_type
    fast = _read_whole_element(elem, kind)
    if fast is not None:
        return fast
    if isinstance(elem, zarr.Array) and elem.attrs.get(convention.SCALAR) is True and elem.shape == (1,):
        if kind in ("string", "numeric-scalar"):
            return _scalar(elem)
    if kind == "string-array" and isinstance(elem, zarr.Array):
        # h5py hands anndata object arrays of str (pandas infers its string dtype from them)
        strings: Any = elem[()]  # an array of str (numpy's StringDType or objects)
        return strings.astype(object)
    return read_func(elem)


def _read_whole_element(elem: Any, kind: str) -> Any:
    """Dense arrays and sparse matrices read in one batch of merged requests (see read.whole)."""
    from h5lens.read.whole import read_whole
    from h5lens.store import ManifestStore

    if not isinstance(elem.store, ManifestStore):
        return None
    if kind == "array" and isinstance(elem, zarr.Array):
        return read_whole(elem.store, elem.path)
    if kind in ("csr_matrix", "csc_matrix") and isinstance(elem, zarr.Group):
        parts = [read_whole(elem.store, f"{elem.path}/{name}") for name in ("data", "indices", "indptr")]
        if any(p is None for p in parts):
            return None
        import anndata
        import scipy.sparse as sp

        arrays = anndata.settings.use_sparse_array_on_read
        if kind == "csr_matrix":
            matrix = sp.csr_array if arrays else sp.csr_matrix
        else:
            matrix = sp.csc_array if arrays else sp.csc_matrix
        return matrix(tuple(parts), shape=_sparse_shape(elem))
    return None


def _sparse_shape(elem: zarr.Group | zarr.Array) -> tuple[int, ...]:
    # anndata's csr/csc encoding records the matrix shape as a list of ints
    return tuple(cast("list[int]", elem.attrs["shape"]))


def _check_root(group: zarr.Group, allowed: tuple[str, ...]) -> str:
    kind = group.attrs.get("encoding-type")
    if kind in allowed:
        return kind
    legacy = kind is None and "obs" in group and "var" in group
    if legacy and "anndata" in allowed:
        return "anndata"
    found = f"encoding-type {kind!r}" if kind is not None else f"members {sorted(group.keys())[:8]}"
    raise ManifestFormatError(f"the manifest is not an {' / '.join(allowed)} file: its root has {found}")


def read_anndata(
    manifest: PathOrManifest,
    *,
    lazy: bool = False,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    source_urls: dict[str, str] | None = None,
    verify: bool = True,
    allow_local: Iterable[str] | bool = (),
    limits: Limits | None = None,
) -> anndata.AnnData:
    """Read an h5ad (or h5td) manifest as an :class:`anndata.AnnData`.

    ``lazy=True`` gives ``anndata.experimental.read_lazy`` semantics: dask-backed
    arrays and lazy dataframes that read only the chunks a computation needs. The other
    arguments are as for :func:`h5lens.open_group`.
    """
    import anndata

    group = _open_root(
        manifest, ("anndata", "treedata"), storage_options, source_options, source_urls, verify, allow_local, limits
    )
    # The AnnData part of a TreeData file (before any read, so that one store fetches).
    group = _as_anndata_root(group)
    if lazy:
        return _finer_sparse_blocks(anndata.experimental.read_lazy(group), group)
    # An eager read touches every chunk: ask for all of them at once (merged requests),
    # instead of one round trip per element as the reader walks the tree.
    store_of(group).prefetch_all()
    from anndata.experimental import read_dispatched

    adata = read_dispatched(group, _as_h5ad_reads)
    return _with_legacy_raw(adata, group)


def _with_legacy_raw(adata: Any, group: zarr.Group) -> Any:
    """Top-level ``raw.X`` / ``raw.var`` / ``raw.varm`` (anndata < 0.7), as anndata's own
    readers take them: gathered into ``adata.raw``, or refused beside a ``raw`` group. The
    h5ad profile moves them into a ``raw`` group; a manifest from elsewhere may not."""
    legacy = [name for name in group if name.startswith("raw.")]
    if not legacy or ("raw" not in group and "raw.X" not in legacy):  # read_h5ad's two branches
        return adata
    import anndata
    from anndata._io.specs import read_elem
    from anndata._io.utils import _read_legacy_raw
    from anndata._io.zarr import read_dataframe

    raw = anndata.AnnData(**_read_legacy_raw(group, adata.raw, read_dataframe, read_elem))
    raw.obs_names = adata.obs_names
    adata.raw = raw
    return adata


# anndata computes lazy sparse matrices in blocks of 1000 rows: a slice of 1% of a 50k-row
# matrix then fetches twice what it asks for. Blocks of about n/500 rows (at most 1000)
# keep what a slice fetches close to what it needs.
_SLICE_RESOLUTION = 500


def _finer_sparse_blocks(adata: Any, group: zarr.Group) -> Any:
    from anndata.experimental import read_elem_lazy

    def finer(key: str) -> Any:
        elem = group[key]
        kind = elem.attrs.get("encoding-type")
        if kind not in ("csr_matrix", "csc_matrix"):
            return None
        major = 0 if kind == "csr_matrix" else 1
        shape = _sparse_shape(elem)
        stride = max(1, min(1000, -(-shape[major] // _SLICE_RESOLUTION)))
        return read_elem_lazy(elem, chunks=(stride, -1) if major == 0 else (-1, stride))

    if "X" in group:
        x = finer("X")
        if x is not None:
            adata.X = x
    layers = group.get("layers")
    if isinstance(layers, zarr.Group):  # read_lazy has read it as a dict: a group
        escaped = layers.attrs.get("encoding-version") == "0.2.0"
        for name, _ in layers.members():
            layer = finer(f"layers/{name}")
            if layer is not None:
                adata.layers[unescape_key(name) if escaped else name] = layer
    return adata


# TreeData's own elements beside the AnnData ones (treedata's on-disk format).
TREE_ELEMENTS = ("obst", "vart", "label", "alignment", "allow_overlap", "raw.treedata")


def _as_anndata_root(group: zarr.Group) -> zarr.Group:
    """The AnnData part of a TreeData root: anndata's root encoding, without the tree
    elements (anndata's readers pass every root member to ``AnnData(...)``). Other roots
    are returned as they are; nothing else is hidden."""
    from h5lens.store import ManifestStore

    store = group.store
    if not isinstance(store, ManifestStore):
        return group
    manifest = store.manifest
    trees = [name for name in TREE_ELEMENTS if name in manifest.nodes]
    if group.attrs.get("encoding-type") != "treedata" and not trees:
        return group
    from dataclasses import replace

    hidden = tuple(trees)
    nodes = {k: v for k, v in manifest.nodes.items() if k.split("/", 1)[0] not in hidden}
    chunks = {k: v for k, v in manifest.chunks.items() if k in nodes}
    root = dict(nodes[""])
    root["attributes"] = {**root.get("attributes", {}), "encoding-type": "anndata", "encoding-version": "0.1.0"}
    nodes[""] = root
    view = replace(manifest, nodes=nodes, chunks=chunks, recorded=None)
    return zarr.open_group(
        ManifestStore(
            view, source_options=store.source_options, source_urls=store.source_urls, allow_local=store.allow_local
        ),
        mode="r",
        zarr_format=3,
    )


def read_treedata(
    manifest: PathOrManifest,
    *,
    lazy: bool = False,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    source_urls: dict[str, str] | None = None,
    verify: bool = True,
    allow_local: Iterable[str] | bool = (),
    limits: Limits | None = None,
) -> Any:
    """Read an h5td manifest (or an h5ad one with trees) as a :class:`treedata.TreeData`.

    ``lazy=True`` reads the AnnData part as :func:`read_anndata` does lazily (dask-backed,
    reading only the chunks a computation needs) and the trees, which are small, eagerly.
    """
    import treedata

    group = _open_root(
        manifest, ("treedata", "anndata"), storage_options, source_options, source_urls, verify, allow_local, limits
    )
    if not lazy:
        return treedata.read_zarr(group.store)
    store = store_of(group)
    adata = read_anndata(store.manifest, lazy=True, source_options=store.source_options,
                         source_urls=store.source_urls, verify=False, allow_local=store.allow_local)
    return treedata.read_tree_elems(group, adata)


def _open_root(
    manifest: PathOrManifest,
    allowed: tuple[str, ...],
    storage_options: dict[str, Any] | None,
    source_options: dict[str, Any] | None,
    source_urls: dict[str, str] | None,
    verify: bool,
    allow_local: Iterable[str] | bool,
    limits: Limits | None,
) -> zarr.Group:
    """Open the manifest, check its root is one of ``allowed``, teach anndata what it lacks."""
    group = open_group(
        manifest,
        storage_options=storage_options,
        source_options=source_options,
        source_urls=source_urls,
        verify=verify,
        allow_local=allow_local,
        limits=limits,
    )
    _check_root(group, allowed)
    _register_readers()
    return group
