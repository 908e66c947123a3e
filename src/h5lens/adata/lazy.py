"""A lazy AnnData over a manifest: anndata's lazy reader, element for element, fed by h5lens.

``read_anndata(m, lazy=True)`` gives ``anndata.experimental.read_lazy`` semantics. Its
reader is anndata's own lazy callback, written out here (:class:`_LazyReads`) because
anndata's public ``read_dispatched`` lets a caller take elements over: dense arrays of
numbers become dask arrays h5lens reads through its read plan, sparse ``X`` and layers
:mod:`h5lens.adata.lazy_sparse` matrices sized by bytes, and ``dict`` 0.2.0 / accessors
(which anndata cannot read yet) are read by h5lens. obs and var are anndata's lazy
dataframes, read through zarr over the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zarr

from h5lens.adata.adapter import OwnEncodings
from h5lens.adata.blocks import DEFAULT_BLOCK_BYTES, dense_row_block, is_sparse_matrix, sparse_row_block
from h5lens.adata.columns import COLUMNS, ColumnMaps, remapped
from h5lens.adata.lazy_dense import lazy_dense
from h5lens.engine.plan import decoder
from h5lens.format.keys import unescape_key
from h5lens.read.consolidated import consolidated_root, members
from h5lens.read.open import store_of

if TYPE_CHECKING:
    from h5lens.store import ManifestStore

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


def prefetch_for_lazy(store: ManifestStore) -> None:
    """Start fetching, in one batch of merged requests, what a lazy AnnData reads anyway,
    instead of one round trip per element as anndata's reader walks the tree."""
    sizes = [source.size for source in store.manifest.sources]
    if all(size is not None for size in sizes) and sum(s for s in sizes if s is not None) <= LAZY_WHOLE_BYTES:
        store.prefetch_all()
    else:
        store.prefetch_all(LAZY_FRAMES_BYTES, paths=_lazy_frames)


def read_lazy(store: ManifestStore, block_bytes: int | None) -> Any:
    """The AnnData of the store's root read as ``anndata.experimental.read_lazy`` reads it
    (:class:`_LazyReads`), over the root as a consolidated group (:mod:`h5lens.read.consolidated`:
    no zarr node opened through the store), with ``X`` and the layers h5lens reads itself
    (:func:`_lazy_blocks`) left out of its walk."""
    layers = store.manifest.children("layers") if "layers" in store.manifest.nodes else []
    mapped = remapped(store)  # a combined AnnData's matrices whose files' columns h5lens maps
    sparse = [
        path for path in ("X", *(f"layers/{name}" for name in layers)) if path not in mapped and is_sparse_matrix(store, path)
    ]
    walk = consolidated_root(store, hide=[*sparse, *mapped, *([COLUMNS] if mapped else [])])
    return _lazy_blocks(_LazyReads(store, block_bytes).read(walk), walk, sparse, block_bytes, mapped)


class _LazyReads:
    """The ``read_dispatched`` callback of a lazy read: ``anndata.experimental.read_lazy``'s
    own (anndata 0.13's, element for element: obs and var as lazy dataframes with their
    index read, matrices and arrays as dask arrays, uns in memory), but that dense arrays of
    numbers are read through h5lens's read plan (:mod:`h5lens.adata.lazy_dense`) and the
    encodings anndata cannot read are read by h5lens (:mod:`h5lens.adata.adapter`)."""

    LAZY = frozenset({"csr_matrix", "csc_matrix", "array", "string-array", "dataframe", "categorical"})

    def __init__(self, store: ManifestStore, block_bytes: int | None = None) -> None:
        self.store = store
        self.block_bytes = block_bytes
        self.own = OwnEncodings(store.manifest, self.read)

    def read(self, elem: Any) -> Any:
        from anndata.experimental import read_dispatched

        return read_dispatched(elem, self.callback)

    def callback(self, read_func: Callable[[Any], Any], elem_name: str, elem: Any, iospec: Any) -> Any:
        from anndata.experimental import read_dispatched, read_elem_lazy

        kind = iospec.encoding_type
        if kind in ("anndata", "raw") or elem_name.endswith("/"):
            import anndata

            return anndata.AnnData(**{name: self.own.read(member) for name, member in members(elem)})
        if kind in self.LAZY or "nullable" in kind:
            if kind == "array" and isinstance(elem, zarr.Array) and decoder(self.store.engine, elem.path, text=False) is not None:
                return lazy_dense(self.store, elem.path, self._row_blocks(elem))
            if kind == "dataframe" and (elem_name[:4] in {"/obs", "/var"} or elem_name[:8] in {"/raw/obs", "/raw/var"}):
                return read_elem_lazy(elem, use_range_index=False)
            return read_elem_lazy(elem)
        if kind == "awkward-array":
            return read_dispatched(elem, None)  # type: ignore[arg-type]  # anndata reads it in memory
        if kind == "dict":
            return {name: self.own.read(member) for name, member in members(elem)}
        return read_func(elem)


    def _row_blocks(self, elem: zarr.Array) -> tuple[int, ...] | None:
        """Blocks of whole rows holding about ``block_bytes`` (whole stored chunks), if it is
        given; else None (the stored chunks, as anndata cuts it). A collection's ``obsm`` in
        its stored chunks would make a task per chunk of every file: thousands of tiny ones."""
        if self.block_bytes is None or elem.ndim == 0:
            return None
        return (dense_row_block(elem, self.store, self.block_bytes), *elem.shape[1:])


def _lazy_blocks(adata: Any, walk: zarr.Group, sparse: list[str], block_bytes: int | None, mapped: list[str]) -> Any:
    """X and layers read lazily in blocks sized by bytes (``block_bytes``, by default
    :data:`~h5lens.adata.blocks.DEFAULT_BLOCK_BYTES`): the ``sparse`` ones (left out of
    anndata's walk) along their major axis (rows of csr, columns of csc) through
    :mod:`h5lens.adata.lazy_sparse`, whose slices read only the rows they ask for; dense
    ones in whole stored chunks, if ``block_bytes`` is given (else as anndata cut them)."""
    from h5lens.adata.lazy_sparse import lazy_sparse

    store = store_of(walk)
    target = DEFAULT_BLOCK_BYTES if block_bytes is None else block_bytes
    maps = ColumnMaps.of(store) if mapped else None

    def reblocked(key: str) -> Any:
        if maps is not None and key in mapped:
            from h5lens.adata.lazy_sparse import lazy_remapped

            return lazy_remapped(store, key, maps, target)
        if key in sparse:
            return lazy_sparse(store, key, sparse_row_block(store, key, target))
        if block_bytes is None:
            return None
        elem = walk[key]
        if isinstance(elem, zarr.Array) and elem.attrs.get("encoding-type") == "array" and elem.ndim == 2:
            rows = dense_row_block(elem, store, block_bytes)
            if decoder(store.engine, key, text=False) is not None:
                return lazy_dense(store, key, (rows, elem.shape[1]))
            from anndata.experimental import read_elem_lazy

            return read_elem_lazy(elem, chunks=(rows, -1))
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



__all__ = ["LAZY_FRAMES_BYTES", "LAZY_WHOLE_BYTES", "prefetch_for_lazy", "read_lazy"]
