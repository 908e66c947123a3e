"""How many rows each dask task of a lazy matrix reads.

Computing wants blocks big enough that a task's overhead (scheduling, deserializing, a
round trip to object storage) is small against its reading: :func:`row_block_for_bytes`,
about ``target`` bytes of data per block, and never fewer rows than anndata's own default
block. A hundred small files then make a hundred tasks, not thousands of 1-row ones.
Slicing does not need small blocks: a slice of a sparse matrix's block reads only the
rows it asks for (:mod:`h5lens.adata.lazy_sparse`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zarr

from h5lens.manifest.model import MISSING
from h5lens.read.rectilinear import largest_chunks

if TYPE_CHECKING:
    from h5lens.store import ManifestStore

# What a block of a lazy read over a collection holds: big against a task's overhead
# (milliseconds) and an S3 request's latency, small against a worker's memory.
DEFAULT_BLOCK_BYTES = 64 << 20
# anndata's own row block for lazy sparse matrices (anndata._io.specs.lazy_methods):
# byte-sized blocks are never finer than what anndata would make by itself.
ANNDATA_ROW_BLOCK = 1000
def row_block_for_bytes(n_rows: int, nbytes: int, target: int, *, at_least: int = ANNDATA_ROW_BLOCK) -> int:
    """Rows per block so that a block holds about ``target`` of a matrix's ``nbytes``
    (spread evenly over ``n_rows``), never fewer than ``at_least`` rows. A matrix smaller
    than one block is one block (``at_least`` may exceed ``n_rows``: anndata allows it)."""
    if n_rows <= 0:
        return at_least
    per_row = max(nbytes / n_rows, 1.0)
    return max(at_least, min(n_rows, int(target // per_row)))


def stored_bytes(store: ManifestStore, paths: list[str]) -> int:
    """Bytes the chunks of these arrays take in their sources (or inline)."""
    total = 0
    for path in paths:
        table = store.manifest.chunks.get(path)
        if table is not None:
            total += int(np.asarray(table.length)[np.asarray(table.source) != MISSING].sum())
    return total


def sparse_row_block(store: ManifestStore, path: str, target: int) -> int:
    """Major-axis rows (columns for CSC) per block of the csr/csc matrix group at ``path``.

    Sized by the larger of what the block stores and what it holds decoded (data plus
    indices): a well-compressed matrix must not make blocks that burst a worker. Read from
    the manifest's documents (:func:`is_sparse_matrix` checked them), not through zarr."""
    from h5lens.read.consolidated import array_metadata

    attributes = store.manifest.nodes[path].get("attributes", {})
    shape = cast("list[int]", attributes["shape"])  # anndata records the shape as a list of ints
    major = 0 if attributes.get("encoding-type") == "csr_matrix" else 1
    prefix = f"{path}/" if path else ""
    decoded = 0
    for name in ("data", "indices"):
        member = array_metadata(store, prefix + name)
        decoded += math.prod(member.shape) * member.dtype.to_native_dtype().itemsize
    stored = stored_bytes(store, [f"{prefix}{name}" for name in ("data", "indices", "indptr")])
    return row_block_for_bytes(int(shape[major]), max(decoded, stored), target)


def is_sparse_matrix(store: ManifestStore, path: str) -> bool:
    """Whether ``path`` is a csr/csc matrix group of anndata's encoding with its three
    member arrays and a shape of two integers: one h5lens reads lazily itself."""
    nodes = store.manifest.nodes
    doc = nodes.get(path)
    if doc is None or doc.get("node_type") != "group":
        return False
    attributes = doc.get("attributes", {})
    shape = attributes.get("shape")
    if attributes.get("encoding-type") not in ("csr_matrix", "csc_matrix") or not (
        isinstance(shape, list) and len(shape) == 2 and all(type(n) is int for n in shape)
    ):
        return False
    prefix = f"{path}/" if path else ""
    return all(nodes.get(prefix + name, {}).get("node_type") == "array" for name in ("data", "indices", "indptr"))


def dense_row_block(array: zarr.Array, store: ManifestStore, target: int) -> int:
    """Rows per block of a dense matrix: about ``target`` bytes decoded, a whole number of
    its stored chunks (a block never splits a chunk that another block then reads again)."""
    n_rows = int(array.shape[0]) if array.shape else 0
    chunks = largest_chunks(array)  # (a rectilinear grid, h5lens combine's: its longest chunk)
    chunk_rows = max(1, int(chunks[0])) if chunks else 1
    decoded = math.prod(array.shape) * np.dtype(str(array.dtype)).itemsize
    nbytes = max(decoded, stored_bytes(store, [array.path]))
    rows = row_block_for_bytes(n_rows, nbytes, target, at_least=chunk_rows)
    return -(-rows // chunk_rows) * chunk_rows


def sparse_matrix(kind: str, parts: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    """A scipy csr / csc matrix (or array, as anndata's settings say) of (data, indices, indptr)."""
    import anndata
    import scipy.sparse as sp

    arrays = anndata.settings.use_sparse_array_on_read
    if kind == "csr_matrix":
        matrix = sp.csr_array if arrays else sp.csr_matrix
    else:
        matrix = sp.csc_array if arrays else sp.csc_matrix
    return matrix(parts, shape=shape)
