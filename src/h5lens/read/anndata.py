"""Open a manifest as AnnData / TreeData, eagerly or lazily.

anndata 0.13 reads most manifests as they are (``anndata.read_zarr``). What it
cannot read, this layer resolves: ``dict`` 0.2.0 (escaped keys, unescaped
strictly), ``accessor`` elements (parsed by ``anndata.acc`` into the reference
they stand for), the convention's proposal-form scalars (``_SCALAR`` arrays of
shape (1,)). Eager reads also give string columns the dtype ``read_h5ad``
gives them (anndata's zarr path leaves them as numpy strings).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import zarr

from h5lens import convention
from h5lens.errors import H5LensError, ManifestFormatError
from h5lens.keys import unescape_key
from h5lens.manifest.limits import Limits
from h5lens.manifest.model import Manifest
from h5lens.read.blocks import DEFAULT_BLOCK_BYTES, dense_row_block, is_sparse_matrix, sparse_row_block
from h5lens.read.consolidated import consolidated_root
from h5lens.read.open import PathOrManifest, open_group, store_of
from h5lens.read.shared import origin_of, shared_store

if TYPE_CHECKING:
    from collections.abc import Callable

    import anndata
    from anndata._io.specs.registry import IOSpec

    from h5lens.store import ManifestStore

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
    legacy = convention.legacy_anndata_root(group.attrs, group.__contains__)
    if legacy and "anndata" in allowed:
        return "anndata"
    found = f"encoding-type {kind!r}" if kind is not None else f"members {sorted(group.keys())[:8]}"
    raise ManifestFormatError(f"the manifest is not an {' / '.join(allowed)} file: its root has {found}")


def read_anndata(
    manifest: PathOrManifest | Sequence[PathOrManifest],
    *,
    lazy: bool = False,
    storage_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
    source_urls: dict[str, str] | None = None,
    verify: bool = True,
    allow_local: Iterable[str] | bool = (),
    limits: Limits | None = None,
    join: Literal["inner", "outer"] = "inner",
    label: str | None = None,
    keys: Collection[str] | None = None,
    index_unique: str | None = None,
    block_bytes: int | None = None,
) -> anndata.AnnData:
    """Read an h5ad (or h5td) manifest as an :class:`anndata.AnnData`.

    ``lazy=True`` gives ``anndata.experimental.read_lazy`` semantics: dask-backed
    arrays and lazy dataframes that read only the chunks a computation needs; dask tasks
    read through one store per manifest and worker process (see :mod:`h5lens.read.shared`),
    so they compute on a distributed cluster too. The other arguments are as for
    :func:`h5lens.open_group`.

    A list (or tuple) of manifests gives one AnnData concatenated along obs by
    ``anndata.concat`` (``join``, ``label``, ``keys``, ``index_unique`` as it takes them):
    lazily, each file's tasks read through that file's manifest.

    ``block_bytes`` (lazy): the dask blocks of sparse ``X`` and layers hold about this many
    bytes (64 MiB by default), along the axis they are stored by (rows of csr, columns of
    csc), never fewer than anndata's default block (1000); a slice reads only the rows it
    asks for, whatever the block size. Dense ones are cut into row blocks of about this
    many bytes if given (whole stored chunks), else into their stored chunks.
    """
    if isinstance(manifest, (list, tuple)):
        from h5lens.read.collection import read_collection

        return read_collection(
            manifest,
            read_anndata,
            lazy=lazy,
            join=join,
            label=label,
            keys=keys,
            index_unique=index_unique,
            block_bytes=block_bytes,
            options={
                "storage_options": storage_options,
                "source_options": source_options,
                "source_urls": source_urls,
                "verify": verify,
                "allow_local": allow_local,
                "limits": limits,
            },
        )
    root = _open_root(
        cast("PathOrManifest", manifest), ("anndata", "treedata"), storage_options, source_options, source_urls, verify, allow_local, limits
    )
    # The AnnData part of a TreeData file (before any read, so that one store fetches).
    group = _as_anndata_root(root)
    if lazy:
        # a manifest read here from a file, as it is there, travels to workers as its location;
        # a Manifest object may differ from any file (built, edited): it travels whole
        from_file = group is root and not isinstance(manifest, Manifest)
        origin = origin_of(store_of(root), storage_options, limits) if from_file else None
        store = shared_store(group, origin)
        _prefetch_for_lazy(store)
        return _read_lazy(store, block_bytes)
    # An eager read touches every chunk: ask for all of them at once (merged requests),
    # instead of one round trip per element as the reader walks the tree.
    store_of(group).prefetch_all()
    from anndata.experimental import read_dispatched

    with _naming_bad_chunks(group):
        adata = read_dispatched(group, _as_h5ad_reads)
        return _with_legacy_raw(adata, group)


# A lazy AnnData over remote sources: files of at most this many bytes in all (their sizes
# as the manifest records them, so no chunk table is read to decide) are fetched whole, at
# once (as s3fs's 50 MiB read-ahead does for read_h5ad): one batch of requests costs less
# than the round trips of reading them element by element (4 MiB: 40 ms at one S3
# stream's 100 MB/s, two round trips).
LAZY_WHOLE_BYTES = 4 << 20
# Otherwise the dataframes (obs, var: their indexes and categories are read when the AnnData
# opens, their columns by any selection on them and by to_memory) and the sparse matrices'
# indptr (read to cut X into blocks), up to this many bytes, in file order.
LAZY_FRAMES_BYTES = 16 << 20


def _lazy_frames(path: str) -> bool:
    return path.startswith(("obs/", "var/")) or path.endswith("/indptr")


def _prefetch_for_lazy(store: ManifestStore) -> None:
    """Start fetching, in one batch of merged requests, what a lazy AnnData reads anyway,
    instead of one round trip per element as anndata's reader walks the tree."""
    sizes = [source.size for source in store.manifest.sources]
    if all(size is not None for size in sizes) and sum(s for s in sizes if s is not None) <= LAZY_WHOLE_BYTES:
        store.prefetch_all()
    else:
        store.prefetch_all(LAZY_FRAMES_BYTES, paths=_lazy_frames)


@contextlib.contextmanager
def _naming_bad_chunks(group: zarr.Group) -> Iterator[None]:
    """A read that fails inside a codec (a damaged chunk, a manifest pointing at the wrong
    bytes) surfaces as the codec's bare error: re-raise it as SourceReadError naming the
    first chunk that does not decode (h5lens.read.check.diagnose), when one does not."""
    try:
        yield
    except H5LensError:
        raise
    except Exception as e:  # noqa: BLE001 - narrowed down below, re-raised if not a chunk's
        from h5lens.read.check import diagnose

        found = diagnose(group, e)
        if found is None:
            raise
        raise found from e


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


def _read_lazy(store: ManifestStore, block_bytes: int | None) -> Any:
    """``anndata.experimental.read_lazy`` over the store's root, as a consolidated group
    (:mod:`h5lens.read.consolidated`: no zarr node opened through the store), with ``X``
    and the layers h5lens reads itself (:func:`_lazy_blocks`) left out of its walk."""
    import anndata

    layers = store.manifest.children("layers") if "layers" in store.manifest.nodes else []
    sparse = [path for path in ("X", *(f"layers/{name}" for name in layers)) if is_sparse_matrix(store, path)]
    walk = consolidated_root(store, hide=sparse)
    return _lazy_blocks(anndata.experimental.read_lazy(walk), walk, sparse, block_bytes)


def _lazy_blocks(adata: Any, walk: zarr.Group, sparse: list[str], block_bytes: int | None) -> Any:
    """X and layers read lazily in blocks sized by bytes (``block_bytes``, by default
    :data:`~h5lens.read.blocks.DEFAULT_BLOCK_BYTES`): the ``sparse`` ones (left out of
    anndata's walk) along their major axis (rows of csr, columns of csc) through
    :mod:`h5lens.read.lazy_sparse`, whose slices read only the rows they ask for; dense
    ones in whole stored chunks, if ``block_bytes`` is given (else as anndata cut them)."""
    from anndata.experimental import read_elem_lazy

    from h5lens.read.lazy_sparse import lazy_sparse

    store = store_of(walk)
    target = DEFAULT_BLOCK_BYTES if block_bytes is None else block_bytes

    def reblocked(key: str) -> Any:
        if key in sparse:
            return lazy_sparse(store, key, sparse_row_block(store, key, target))
        if block_bytes is None:
            return None
        elem = walk[key]
        if isinstance(elem, zarr.Array) and elem.attrs.get("encoding-type") == "array" and elem.ndim == 2:
            return read_elem_lazy(elem, chunks=(dense_row_block(elem, store, block_bytes), -1))
        return None

    if "X" in store.manifest.nodes:
        x = reblocked("X")
        if x is not None:
            adata.X = x
    layers = walk.get("layers")
    if isinstance(layers, zarr.Group):  # read_lazy has read it as a dict: a group
        escaped = layers.attrs.get("encoding-version") == "0.2.0"
        # anndata keeps X among the layers, under None: only the named ones are re-laid
        read = {name: layer for name, layer in adata.layers.items() if name is not None}
        for name in read:
            del adata.layers[name]
        for name in store.manifest.children("layers"):  # in the order the store lists them
            key = unescape_key(name) if escaped else name
            layer = reblocked(f"layers/{name}")
            if layer is None:
                layer = read.get(key)
            if layer is not None:
                adata.layers[key] = layer
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
        with _naming_bad_chunks(group):
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
