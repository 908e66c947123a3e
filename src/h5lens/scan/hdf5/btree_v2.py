"""The version 2 B-tree: the chunk index of datasets with more than one unlimited dimension
(layout 4+).

Specification: III.A.2 "Disk Format: Level 1A2 - Version 2 B-trees" (header "BTHD",
internal nodes "BTIN", leaves "BTLF"; record types 10 and 11) and VII.E "The Version 2
B-trees Index". libhdf5: H5B2cache.c (``H5B2__cache_hdr_deserialize``,
``H5B2__cache_int_deserialize``, ``H5B2__cache_leaf_deserialize``), H5B2hdr.c
(``H5B2__hdr_init``: the node geometry) and H5Dbtree2.c (the chunk records).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from h5lens.scan.hdf5.checksum import CHECKSUM_SIZE, verify_checksums
from h5lens.scan.hdf5.fields import enc_size, le_columns, record_view
from h5lens.scan.hdf5.messages import Dataset
from h5lens.scan.hdf5.model import MAX_DEPTH, UnsupportedIndexError
from h5lens.scan.hdf5.reads import Io
from h5lens.scan.hdf5.records import Chunks, check_filtered, read_index_header, size_width, sizes_and_masks
from h5lens.scan.hdf5.superblock import Superblock

_CHUNKS = 10  # record type: chunks without filters
_FILTERED_CHUNKS = 11
_NODE_PREFIX_SIZE = 4 + 1 + 1  # a node opens with its signature (4), version (1) and record type (1)
_NODE_OVERHEAD = _NODE_PREFIX_SIZE + CHECKSUM_SIZE  # and ends with its checksum
_GRID_INDEX_SIZE = 8  # a chunk record ends with its scaled offset, 8 bytes a dimension


def header_size(sizeof_offsets: int, sizeof_lengths: int) -> int:
    """Signature (4), version (1), record type (1), node size (4), record size (2), depth (2),
    split percent (1), merge percent (1), root node address (size of offsets), records in the
    root node (2), records in the tree (size of lengths), checksum."""
    return 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + sizeof_offsets + 2 + sizeof_lengths + CHECKSUM_SIZE


def node_size(nrec: int, record_size: int, pointer_size: int) -> int:
    """A node of ``nrec`` records: its prefix, the records, (internal nodes) one child pointer
    more than records, checksum. ``pointer_size`` is 0 for a leaf."""
    return _NODE_OVERHEAD + nrec * record_size + (nrec + 1) * pointer_size


@dataclass(frozen=True)
class _Btree2Geometry:
    """Sizes of the child pointers in internal nodes, as libhdf5 derives them (H5B2__hdr_init).

    A pointer is the child's address, its record count, and (below depth 1) the
    record count of its whole subtree; each count is as wide as the largest count
    possible there, which depends on the node size and the depth.
    """

    nrec_size: int  # bytes of a child's record count
    total_sizes: tuple[int, ...]  # per depth: bytes of a subtree's record count (0 for leaves)
    sizeof_offsets: int
    node_records: tuple[int, ...]  # per depth: the most records one node holds

    @classmethod
    def of(cls, node_bytes: int, record_size: int, depth: int, sizeof_offsets: int) -> _Btree2Geometry:
        max_leaf = (node_bytes - _NODE_OVERHEAD) // record_size
        nrec_size = enc_size(max_leaf)
        most, sizes, per_node = [max_leaf], [0], [max_leaf]
        for d in range(1, depth + 1):
            pointer = sizeof_offsets + nrec_size + sizes[d - 1]
            max_nrec = (node_bytes - (_NODE_OVERHEAD + pointer)) // (record_size + pointer)
            per_node.append(max_nrec)
            most.append((max_nrec + 1) * most[d - 1] + max_nrec)
            sizes.append(enc_size(most[d]))
        return cls(nrec_size, tuple(sizes), sizeof_offsets, tuple(per_node))

    def pointer_size(self, depth: int) -> int:
        """Bytes of one child pointer in an internal node at ``depth`` (>= 1)."""
        return self.sizeof_offsets + self.nrec_size + self.total_sizes[depth - 1]


async def walk_btree_v2(io: Io, ds: Dataset) -> Chunks:
    """Header "BTHD", then internal nodes "BTIN" down to leaves "BTLF", a level at a time.

    Unlike a v1 B-tree, internal nodes hold records too. A record is the chunk address,
    (filtered chunks only) its size and filter mask, then its grid index (8 bytes a dimension).
    """
    sb, o, n = io.sb, io.sb.sizeof_offsets, io.sb.sizeof_lengths
    if ds.layout.address == sb.undefined_address:
        return Chunks.empty(ds.rank)
    c = await read_index_header(io, ds.layout.address, header_size(o, n), b"BTHD", "v2 B-tree header")
    tree_type, node_bytes, record_size, depth = c.uint(1), c.uint(4), c.uint(2), c.uint(2)
    split, merge = c.uint(1), c.uint(1)
    root, root_nrec, total = c.uint(o), c.uint(2), c.uint(n)
    if tree_type not in (_CHUNKS, _FILTERED_CHUNKS):
        raise UnsupportedIndexError(f"v2 B-tree of record type {tree_type} is not a chunk index")
    filtered = tree_type == _FILTERED_CHUNKS
    check_filtered(filtered, ds, "v2 B-tree")
    if (node_bytes, split, merge) != ds.layout.params:
        raise UnsupportedIndexError("v2 B-tree: parameters differ from the data layout message's")
    width = size_width(record_size - _GRID_INDEX_SIZE * ds.rank, filtered, ds, sb, "v2 B-tree")
    if depth >= MAX_DEPTH or record_size > node_bytes:
        raise UnsupportedIndexError("v2 B-tree: implausible depth or record size")
    if root == sb.undefined_address or total == 0:
        return Chunks.empty(ds.rank)
    tree = _Btree2Geometry.of(node_bytes, record_size, depth, o)
    nodes, found = [(root, root_nrec)], []
    # A crafted tree must cost bounded work: every node is visited once, holds no more records
    # than fit in it, and the records found plus those the next level announces never exceed
    # the header's total (so each level's list of nodes is bounded by it too).
    seen: set[int] = set()
    counted = 0
    for level in range(depth, -1, -1):
        signature = b"BTIN" if level else b"BTLF"
        pointer = tree.pointer_size(level) if level else 0
        addresses = [a for a, _ in nodes]
        if len(set(addresses)) != len(addresses) or seen.intersection(addresses):
            raise UnsupportedIndexError("v2 B-tree: a node is reached twice")
        seen.update(addresses)
        if any(nrec > tree.node_records[level] for _, nrec in nodes):
            raise UnsupportedIndexError(f"v2 B-tree: a level-{level} node with more records than fit in it")
        counted += sum(nrec for _, nrec in nodes)
        if counted > total:
            raise UnsupportedIndexError(f"v2 B-tree: more records than the header's total of {total}")
        spans = [(a, node_size(nrec, record_size, pointer)) for a, nrec in nodes]
        blobs = await io.read(spans, "v2 B-tree node")
        verify_checksums(blobs, "v2 B-tree node")
        children = []
        for (_, nrec), blob in zip(nodes, blobs, strict=True):
            if blob[:4] != signature or blob[4] != 0 or blob[5] != tree_type:
                raise UnsupportedIndexError(f"v2 B-tree node: expected {signature.decode()} of type {tree_type}")
            found.append(record_view(blob, _NODE_PREFIX_SIZE, nrec, record_size, "v2 B-tree node"))
            if level:
                at = _NODE_PREFIX_SIZE + nrec * record_size
                children.append(record_view(blob, at, nrec + 1, pointer, "v2 B-tree node"))
        if level:
            pointers = np.concatenate(children)
            addresses = le_columns(pointers[:, :o]).tolist()
            counts = le_columns(pointers[:, o : o + tree.nrec_size]).tolist()
            nodes = list(zip(addresses, counts, strict=True))
    records = np.concatenate(found)
    if len(records) != total:
        raise UnsupportedIndexError(f"v2 B-tree: {len(records)} records found, the header counts {total}")
    return _btree_v2_chunks(records, width, ds, sb)


def _btree_v2_chunks(records: np.ndarray, width: int, ds: Dataset, sb: Superblock) -> Chunks:
    rank = ds.rank
    address = le_columns(records[:, : sb.sizeof_offsets])
    size, mask = sizes_and_masks(records, width, ds, sb)
    grid_at = records.shape[1] - _GRID_INDEX_SIZE * rank
    scaled = records[:, grid_at:].copy().view("<u8").reshape(len(records), rank)
    if np.any(scaled >= np.uint64(1 << 62)):
        raise UnsupportedIndexError("v2 B-tree: an implausible chunk index")
    written = address != np.uint64(sb.undefined_address)
    return Chunks(scaled[written].astype(np.int64), address[written], size[written], mask[written])
