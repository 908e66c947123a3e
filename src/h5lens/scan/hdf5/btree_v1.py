"""The version 1 B-tree of raw data chunks: the chunk index of data layout version 3.

Specification: III.A.1 "Disk Format: Level 1A1 - Version 1 B-trees" (node type 1, the
chunk keys). libhdf5: H5B.c (``H5B__cache_deserialize``: the node) and H5Dbtree.c (the
chunk key, ``H5D__btree_decode_key``).
"""

from __future__ import annotations

import numpy as np

from h5lens.scan.hdf5.fields import le_columns, le_uint, record_view
from h5lens.scan.hdf5.messages import Dataset
from h5lens.scan.hdf5.model import MAX_DEPTH, UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io
from h5lens.scan.hdf5.records import Chunks
from h5lens.scan.hdf5.superblock import Superblock

_SIGNATURE = b"TREE"
_RAW_DATA_CHUNKS = 1  # node type
_ENTRIES_USED_AT = 6  # offset of the node's "entries used" field (2 bytes)


def node_prefix_size(sizeof_offsets: int) -> int:
    """Signature (4), node type (1), node level (1), entries used (2), then the addresses
    of the left and right siblings."""
    return 4 + 1 + 1 + 2 + 2 * sizeof_offsets


def chunk_key_size(rank: int) -> int:
    """Stored chunk size (4), filter mask (4), then the chunk's offset in elements along each
    dimension plus a 0 for the element (8 bytes each)."""
    return 4 + 4 + 8 * (rank + 1)


def node_size(entries: int, rank: int, sizeof_offsets: int) -> int:
    """A node with ``entries`` children: the prefix, then keys and child addresses
    interleaved, one key more than children."""
    key = chunk_key_size(rank)
    return node_prefix_size(sizeof_offsets) + entries * (key + sizeof_offsets) + key


def _entries_used(node: bytes) -> int:
    return le_uint(node, _ENTRIES_USED_AT, 2)


async def walk_btree_v1(io: Io, ds: Dataset) -> Chunks:
    """Version-1 B-tree of raw data chunks (node type 1), read a level at a time.

    A node: "TREE", type, level, entries used, two sibling addresses, then keys and
    child addresses interleaved. A chunk key: stored size (4), filter mask (4), and
    the chunk's offset in elements along each dimension plus a 0 for the element.
    """
    sb, layout = io.sb, ds.layout
    if layout.address == sb.undefined_address:
        return Chunks.empty(ds.rank)
    o = sb.sizeof_offsets
    key = chunk_key_size(ds.rank)
    prefix = node_prefix_size(o)
    nodes: list[int] = [layout.address]
    level: int | None = None
    seen: set[int] = set()
    leaves: list[Chunks] = []
    for _ in range(MAX_DEPTH):
        if not nodes:
            return Chunks.concat(leaves, ds.rank)
        if seen.intersection(nodes) or len(set(nodes)) != len(nodes):
            raise UnsupportedIndexError("v1 B-tree: a node is reached twice")
        seen.update(nodes)
        # Nodes are allocated for 2K entries; a file with a bigger K shows it in "entries used".
        full = node_size(2 * sb.chunk_btree_k, ds.rank, o)
        blobs = await io.read([(a, full) for a in nodes], "v1 B-tree node", clamp=True)
        short = [i for i, b in enumerate(blobs) if len(b) < prefix or len(b) < node_size(_entries_used(b), ds.rank, o)]
        if short:
            again = await io.read(
                [(nodes[i], node_size(_entries_used(blobs[i]), ds.rank, o)) for i in short], "v1 B-tree node"
            )
            for i, blob in zip(short, again, strict=True):
                blobs[i] = blob
        level = _btree_v1_level(blobs, level)
        # One array of every entry of the level: decoded at once, not node by node.
        records = np.concatenate([record_view(b, prefix, _entries_used(b), key + o, "v1 B-tree node") for b in blobs])
        if level > 0:
            nodes = le_columns(records[:, key:]).tolist()
            continue
        leaves.append(_btree_v1_chunks(records, key, ds, sb))
        nodes = []
    raise UnsupportedIndexError("v1 B-tree: deeper than any real index")


def _btree_v1_level(blobs: list[bytes], parent_level: int | None) -> int:
    levels = set()
    for blob in blobs:
        if blob[:4] != _SIGNATURE or blob[4] != _RAW_DATA_CHUNKS:
            raise UnsupportedIndexError("v1 B-tree: not a raw data chunk node (TREE, type 1)")
        levels.add(blob[5])
    if len(levels) != 1:
        raise UnsupportedIndexError(f"v1 B-tree: nodes of levels {sorted(levels)} side by side")
    (level,) = levels
    if parent_level is not None and level != parent_level - 1:
        raise UnsupportedIndexError(f"v1 B-tree: a level-{level} node under a level-{parent_level} node")
    return level


def _btree_v1_chunks(records: np.ndarray, key: int, ds: Dataset, sb: Superblock) -> Chunks:
    """A leaf level's records (key, child address) as chunks: the key's size, mask and offsets."""
    rank = ds.rank
    size = le_columns(records[:, 0:4])
    mask = le_columns(records[:, 4:8]).astype(np.uint32)
    offsets = records[:, 8:key].copy().view("<u8").reshape(len(records), rank + 1)
    if np.any(offsets[:, rank] != 0):
        raise UnsupportedIndexError("v1 B-tree: a chunk key with a non-zero element offset")
    chunk = np.asarray(ds.layout.chunk_shape, np.uint64)
    if np.any(offsets[:, :rank] % chunk):
        raise UnsupportedIndexError("v1 B-tree: a chunk offset that is not a multiple of the chunk shape")
    grid = (offsets[:, :rank] // chunk).astype(np.int64)
    return Chunks(grid, le_columns(records[:, key:]), size, mask)
