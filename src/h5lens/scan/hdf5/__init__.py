"""Our own HDF5 chunk-index walker: every chunked dataset's table, local or remote.

libhdf5 reads a chunk index one node at a time, each read waiting on the one
before it: over S3 that is one round trip per node. This walker reads the same
structures level by level instead: at each level it asks for every node it
needs in one ``read_ranges`` call, so a walk costs about the depth of the index
in round trips, whatever the number of nodes (and walks of many datasets run
together share those round trips: :meth:`h5lens.fetch.blocks.ChunkFetcher.read_together`). The table
comes back as numpy columns, never a Python object per chunk, which also makes
it the cheaper way to list a local file's chunks.

Written from the HDF5 File Format Specification (version 3; chunk indexes of
data layout messages 3, 4 and 5) and checked against libhdf5 (the tests compare
with ``DatasetID.chunk_iter``). Whatever it does not understand, or finds
inconsistent, raises :class:`UnsupportedIndexError` so that the caller falls
back to libhdf5: it never guesses.

Addresses inside an HDF5 file count from the superblock's base address (the
start of the HDF5 data, after any userblock). ``read_ranges`` receives absolute
file offsets as ``(offset, length)`` pairs and returns the bytes of each;
the table it produces holds absolute offsets too, like ``chunk_iter`` does.

One module per structure of the specification, each naming its section and the
libhdf5 source it mirrors:

- :mod:`~h5lens.scan.hdf5.model`: the table (:class:`ChunkIndex`), :class:`IndexType`,
  :class:`UnsupportedIndexError`, the ``read_ranges`` type;
- :mod:`~h5lens.scan.hdf5.fields`: little-endian fields and fixed-size records;
- :mod:`~h5lens.scan.hdf5.checksum`: the metadata checksum (lookup3; H5checksum.c);
- :mod:`~h5lens.scan.hdf5.superblock`: II.A, the superblock (H5Fsuper.c);
- :mod:`~h5lens.scan.hdf5.reads`: addresses made absolute, one call per level; local reads;
- :mod:`~h5lens.scan.hdf5.object_header`: IV.A.1, object headers and their continuation
  blocks (H5Ocache.c);
- :mod:`~h5lens.scan.hdf5.messages`: IV.A.2, the dataspace, data layout and filter
  pipeline messages (H5Osdspace.c, H5Olayout.c, H5Opline.c);
- :mod:`~h5lens.scan.hdf5.attributes`: IV.A.2.m, an object's compact attributes and the
  values of the common types, exactly as h5py reads them (H5Oattr.c, H5Odtype.c; not part
  of the chunk walk: :mod:`h5lens.scan.attr_headers` uses it for every node's attributes);
- :mod:`~h5lens.scan.hdf5.records`: what the index walkers share (chunks as found, the
  fixed and extensible arrays' entries);
- :mod:`~h5lens.scan.hdf5.btree_v1`: III.A.1, the v1 B-tree of layout 3 (H5B.c, H5Dbtree.c);
- :mod:`~h5lens.scan.hdf5.single`: VII.A and VII.B, single chunk and implicit index
  (H5Dsingle.c, H5Dnone.c);
- :mod:`~h5lens.scan.hdf5.fixed_array`: VII.C, the fixed array (H5FAcache.c, H5Dfarray.c);
- :mod:`~h5lens.scan.hdf5.extensible_array`: VII.D, the extensible array (H5EAcache.c,
  H5Dearray.c);
- :mod:`~h5lens.scan.hdf5.btree_v2`: III.A.2 and VII.E, the v2 B-tree (H5B2cache.c,
  H5Dbtree2.c);
- :mod:`~h5lens.scan.hdf5.walk`: the dispatcher by index type and the entry points.
"""

from h5lens.scan.hdf5.checksum import lookup3, lookup3_many
from h5lens.scan.hdf5.messages import LAYOUT_UNFILTERED_EDGES, unfiltered_edges
from h5lens.scan.hdf5.model import ChunkIndex, IndexType, ReadRanges, UnsupportedIndexError, partial_edge_rows
from h5lens.scan.hdf5.object_header import object_header_messages
from h5lens.scan.hdf5.reads import reader_for
from h5lens.scan.hdf5.superblock import Superblock, fetch_superblock, read_superblock, superblock_offsets
from h5lens.scan.hdf5.walk import local_superblock, walk_chunk_index, walk_chunk_index_local

__all__ = [
    "LAYOUT_UNFILTERED_EDGES",
    "ChunkIndex",
    "IndexType",
    "ReadRanges",
    "Superblock",
    "UnsupportedIndexError",
    "fetch_superblock",
    "local_superblock",
    "lookup3",
    "lookup3_many",
    "object_header_messages",
    "partial_edge_rows",
    "read_superblock",
    "reader_for",
    "superblock_offsets",
    "unfiltered_edges",
    "walk_chunk_index",
    "walk_chunk_index_local",
]
