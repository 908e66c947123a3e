"""Open a manifest as AnnData / TreeData, eagerly or lazily.

anndata reads most manifests as they are (``anndata.read_zarr``). An eager read here is
h5lens's own walk of the manifest (:mod:`h5lens.adata.eager`: no event-loop round
trip per node), with anndata's public ``read_dispatched`` for the encodings h5lens leaves
to it: arrays of numbers and text and sparse matrices read whole through h5lens's read
plan (faster than zarr's per-chunk pipeline, with no hook into zarr), and what anndata
cannot read resolved by h5lens: ``dict`` 0.2.0 (escaped keys, unescaped strictly),
``accessor`` elements (parsed by ``anndata.acc`` into the reference they stand for), the
convention's proposal-form scalars (``_SCALAR`` arrays of shape (1,)). String columns get
the dtype ``read_h5ad`` gives them (anndata's zarr path leaves them as numpy strings).
Lazy reads: :mod:`h5lens.adata.lazy`. Nothing is registered in anndata.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Unpack, cast

import zarr

from h5lens.adata.adapter import require
from h5lens.adata.eager import EagerReader
from h5lens.adata.lazy import prefetch_for_lazy, read_lazy
from h5lens.adata.shared import SharedManifestStore, origin_of, shared_store
from h5lens.errors import H5LensError, ManifestFormatError
from h5lens.format import convention
from h5lens.manifest.model import Manifest
from h5lens.read.linked_files import Indexer
from h5lens.read.open import load_or_index, open_group, root_group, store_of
from h5lens.read.options import OpenKwargs, OpenOptions, PathOrManifest
from h5lens.read.rectilinear import rectilinear_allowed

if TYPE_CHECKING:
    import anndata



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
    join: Literal["inner", "outer"] = "inner",
    label: str | None = None,
    keys: Collection[str] | None = None,
    index_unique: str | None = None,
    block_bytes: int | None = None,
    options: OpenOptions | None = None,
    index: Indexer | None = None,
    **given: Unpack[OpenKwargs],
) -> anndata.AnnData:
    """Read an h5ad (or h5td) manifest as an :class:`anndata.AnnData`.

    ``lazy=True`` gives ``anndata.experimental.read_lazy`` semantics: dask-backed
    arrays and lazy dataframes that read only the chunks a computation needs; dask tasks
    read through one store per manifest and worker process (see :mod:`h5lens.adata.shared`),
    so they compute on a distributed cluster too. The options (``options=`` or keywords)
    are :func:`h5lens.open_store`'s.

    A list (or tuple) of manifests gives one AnnData concatenated along obs by
    ``anndata.concat`` (``join``, ``label``, ``keys``, ``index_unique`` as it takes them):
    lazily, each file's tasks read through that file's manifest.

    ``block_bytes`` (lazy): the dask blocks of sparse ``X`` and layers hold about this many
    bytes (64 MiB by default), along the axis they are stored by (rows of csr, columns of
    csc), never fewer than anndata's default block (1000); a slice reads only the rows it
    asks for, whatever the block size. Dense arrays of numbers (``X``, layers, ``obsm``,
    ``varm``, ``uns``) are cut into row blocks of about this many bytes if given (whole
    stored chunks; a list of manifests gives it), else into their stored chunks.

    ``index``: how an HDF5 file (an ``.h5ad``) given in place of a manifest is indexed in
    memory (``h5lens.read_anndata`` passes :func:`h5lens.index`, as :func:`h5lens.open`
    does); without it such a file is refused.
    """
    require("anndata", "h5lens.read_anndata")
    opening = OpenOptions.of(options, given)
    if lazy:
        require("dask", "h5lens.read_anndata(lazy=True)")
        require("xarray", "h5lens.read_anndata(lazy=True)")
    if isinstance(manifest, (list, tuple)):
        from h5lens.adata.blocks import DEFAULT_BLOCK_BYTES
        from h5lens.adata.collection import read_collection

        # a collection is computed, not sliced row by row: lazy blocks sized for a cluster
        blocks = (block_bytes or DEFAULT_BLOCK_BYTES) if lazy else None
        return read_collection(
            manifest,
            lambda one: _open_anndata(one, opening, lazy=lazy, index=index),
            lambda opened: opened.read(blocks),
            join=join,
            label=label,
            keys=keys,
            index_unique=index_unique,
        )
    return _open_anndata(cast("PathOrManifest", manifest), opening, lazy=lazy, index=index).read(block_bytes)


@dataclass(frozen=True)
class _Opened:
    """An AnnData manifest opened, its source checked and its bytes on their way: what is
    left is reading it (:meth:`read`), on the calling thread."""

    group: zarr.Group
    lazy_store: SharedManifestStore | None  # lazy reads: the store dask tasks read through

    def read(self, block_bytes: int | None) -> Any:
        # arrays on a rectilinear grid (h5lens combine's) need zarr's flag while parsed
        with rectilinear_allowed(store_of(self.group).manifest.nodes.values()):
            if self.lazy_store is not None:
                return read_lazy(self.lazy_store, block_bytes)
            with _naming_bad_chunks(self.group):
                return _read_eager(self.group)


def _open_anndata(manifest: PathOrManifest, opening: OpenOptions, *, lazy: bool, index: Indexer | None = None) -> _Opened:
    """Open an AnnData manifest for reading: the manifest loaded, its sources verified, and
    what the read will take asked for at once (remote sources: merged requests, in flight
    while the caller goes on), instead of one round trip per element as the reader walks
    the tree. The waits of an open are its round trips, so a collection opens its members
    side by side (:mod:`h5lens.adata.collection`)."""
    # An eager read checks its sources while its bytes are on their way (below): one round
    # trip less than checking first; nothing is decoded before the check has passed.
    root = _open_root(manifest, ("anndata", "treedata"), opening if lazy else opening.but(verify=False), index)
    # The AnnData part of a TreeData file (before any read, so that one store fetches).
    group = _as_anndata_root(root)
    if lazy:
        # a manifest read here from a file, as it is there, travels to workers as its location;
        # a Manifest object may differ from any file (built, edited): it travels whole
        from_file = group is root and not isinstance(manifest, Manifest)
        origin = origin_of(store_of(root), opening) if from_file else None
        store = shared_store(group, origin)
        prefetch_for_lazy(store)
        return _Opened(group, store)
    # An eager read touches every chunk
    store_of(group).prefetch_all()
    if opening.verify:
        try:
            store_of(root).verify_sources()
        except BaseException:
            for opened in {id(s): s for s in (store_of(group), store_of(root))}.values():
                opened.close()
            raise
    return _Opened(group, None)


def _read_eager(group: zarr.Group) -> Any:
    """The AnnData of ``group`` read whole, as ``read_h5ad`` reads the file, by h5lens's
    own walk of the manifest (:mod:`h5lens.adata.eager`)."""
    return EagerReader(store_of(group)).read_root()


@contextlib.contextmanager
def _naming_bad_chunks(group: zarr.Group) -> Iterator[None]:
    """A read that fails inside a codec (a damaged chunk, a manifest pointing at the wrong
    bytes) surfaces as the codec's bare error: re-raise it as SourceReadError naming the
    first chunk that does not decode (h5lens.read.check.diagnose), when one does not."""
    try:
        yield
    except H5LensError:
        raise
    except Exception as e:
        from h5lens.read.check import diagnose

        found = diagnose(group, e)
        if found is None:
            raise
        raise found from e


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
    part = ManifestStore(
        view, source_options=store.source_options, source_urls=store.source_urls, allow_local=store.allow_local
    ).checking_as(store)
    return root_group(part)


def read_treedata(
    manifest: PathOrManifest,
    *,
    lazy: bool = False,
    options: OpenOptions | None = None,
    index: Indexer | None = None,
    **given: Unpack[OpenKwargs],
) -> Any:
    """Read an h5td manifest (or an h5ad one with trees) as a :class:`treedata.TreeData`.

    ``lazy=True`` reads the AnnData part as :func:`read_anndata` does lazily (dask-backed,
    reading only the chunks a computation needs) and the trees, which are small, eagerly.
    The options are :func:`h5lens.open_store`'s.
    """
    require("treedata", "h5lens.read_treedata")
    import treedata

    opening = OpenOptions.of(options, given)
    group = _open_root(manifest, ("treedata", "anndata"), opening, index)
    if not lazy:
        if "raw.treedata" in group:  # treedata's legacy layout: its own reader reads it
            with _naming_bad_chunks(group):
                return treedata.read_zarr(group.store)
        part = _as_anndata_root(group)
        store_of(part).prefetch_all()
        with _naming_bad_chunks(part), rectilinear_allowed(store_of(part).manifest.nodes.values()):
            adata = _read_eager(part)
        with _naming_bad_chunks(group):
            return treedata.read_tree_elems(group, adata)
    store = store_of(group)
    # verified above, unless its many sources are checked as they are read: then these reads check them
    adata = read_anndata(store.manifest, lazy=True, options=opening if store.checks_on_read else opening.but(verify=False))
    return treedata.read_tree_elems(group, adata)


def _open_root(
    manifest: PathOrManifest, allowed: tuple[str, ...], options: OpenOptions, index: Indexer | None = None
) -> zarr.Group:
    """Open the manifest (an HDF5 file indexed with ``index``) and check its root is one of
    ``allowed``."""
    group = open_group(manifest if index is None else load_or_index(manifest, options, index), options=options)
    _check_root(group, allowed)
    return group
