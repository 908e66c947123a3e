"""libhdf5's filter pipeline against the codecs of every array h5lens references.

A filter left out of an array's codecs reads its chunks' stored bytes as values: garbage,
or an error only where the lengths happen to differ. So, for every chunked dataset whose
chunks a manifest references, the codecs after ``bytes`` must be libhdf5's filters, one
for one and in order (``H5Pget_filter``), except the filters that libhdf5 itself says
every referenced chunk skips: its filter mask (``chunk_iter``, or ``H5Dread``'s own
lookup where libhdf5 2.0 lists chunks wrong), or every filter for a
partial edge chunk of a dataset created with ``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``.

The codec names a filter may have are written out here, not taken from h5lens's filter
table, so that a wrong entry in that table fails too. ``tests/conftest.py`` runs the
check on every array any test indexes.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from libhdf5 import DONT_FILTER_PARTIAL_CHUNKS, chunk_opts

# HDF5 filter id -> the zarr v3 codecs that decode what it writes (docs/manifest-format.md)
CODECS_OF_FILTER: dict[int, frozenset[str]] = {
    1: frozenset({"numcodecs.zlib"}),  # deflate
    2: frozenset({"numcodecs.shuffle", "h5lens.shuffle"}),
    3: frozenset({"numcodecs.fletcher32"}),
    4: frozenset({"imagecodecs_szip"}),
    307: frozenset({"numcodecs.bz2"}),
    32000: frozenset({"h5lens.lzf"}),
    32001: frozenset({"blosc"}),
    32004: frozenset({"imagecodecs_lz4h5"}),
    32008: frozenset({"h5lens.bitshuffle"}),
    32013: frozenset({"h5lens.zfp"}),
    32015: frozenset({"zstd"}),
    32026: frozenset({"h5lens.blosc2"}),
}


def assert_codecs_follow_filters(ds: h5py.Dataset, doc: dict[str, Any], source: np.ndarray) -> None:
    """``doc``: the array's zarr.json document as h5lens made it from ``ds``; ``source``:
    its chunk table's source column (>= 0 where a chunk is referenced)."""
    if doc.get("node_type") != "array" or not (np.asarray(source) >= 0).any():
        return  # nothing referenced: every value was decoded by libhdf5 and encoded again
    dcpl = ds.id.get_create_plist()
    if dcpl.get_layout() != h5py.h5d.CHUNKED:
        return  # contiguous data has no filters; a virtual dataset's sources are checked themselves
    name = ds.name
    filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    listed = [f"{f[3].decode(errors='replace')} (id {f[0]})" for f in filters]
    codecs = list(doc["codecs"])
    names = [codec["name"] for codec in codecs]
    assert "bytes" in names, f"{name}: referenced, yet no bytes codec in {names}"
    chain = codecs[names.index("bytes") + 1 :]
    # the filters the codecs leave out (bit i: filter i), matching libhdf5's list in order
    dropped, position = 0, 0
    for i, f in enumerate(filters):
        if position < len(chain) and chain[position]["name"] in CODECS_OF_FILTER.get(f[0], ()):
            configuration = chain[position].get("configuration") or {}
            if f[0] == 2 and f[2]:  # libhdf5 shuffles by the element size in cd_values[0]
                assert configuration.get("elementsize") == f[2][0], (
                    f"{name}: shuffled by {f[2][0]}-byte elements, decoded by {configuration.get('elementsize')}"
                )
            position += 1
        else:
            dropped |= 1 << i
    assert position == len(chain), f"{name}: codecs {[c['name'] for c in chain]} are not libhdf5's filters {listed}"
    if ds.file.driver != "fileobj":  # a remote file's chunks are not listed again (local scans list them)
        _assert_chunks_skip(ds, np.asarray(source), [f[0] for f in filters], dropped, listed)


def _assert_chunks_skip(ds: h5py.Dataset, source: np.ndarray, filters: list[int], dropped: int, listed: list) -> None:
    """Every referenced chunk skips exactly the ``dropped`` filters, as libhdf5 lists them:
    its filter mask, or every filter for a partial edge chunk stored unfiltered.

    An LZF or ZFP chunk that the filter left as it was (its mask bit set) has the length of
    the chunk's data, and those codecs read a chunk of that length as stored: for such a
    chunk that bit may go either way."""
    opts = chunk_opts(ds.id.get_create_plist())
    unfiltered_edges = bool(opts and opts & DONT_FILTER_PARTIAL_CHUNKS)
    every = (1 << len(filters)) - 1
    chunks = tuple(ds.chunks)
    shape = tuple(ds.shape)
    as_stored = sum(1 << i for i, f in enumerate(filters) if f in (32000, 32013))  # LZF, ZFP
    nbytes = int(np.prod(chunks, dtype=np.int64)) * ds.dtype.itemsize
    checksum = sum(1 << i for i, f in enumerate(filters) if f == 3)  # fletcher32 adds 4 bytes
    wrong: list[tuple[tuple[int, ...], int]] = []

    def listed_chunk(info: h5py.h5d.StoreInfo) -> None:
        grid = tuple(o // c for o, c in zip(info.chunk_offset, chunks, strict=True))
        grid += (0,) * (source.ndim - len(grid))  # array element types add dimensions
        if any(g >= n for g, n in zip(grid, source.shape, strict=True)) or source[grid] < 0:
            return  # beyond the extent (a shrunk dataset), or inline: decoded and encoded again
        partial = any(o + c > s for o, c, s in zip(info.chunk_offset, chunks, shape, strict=True))
        mask = every if unfiltered_edges and partial else info.filter_mask & every
        either = as_stored if info.size == nbytes + (4 if checksum and not mask & checksum else 0) else 0
        if (mask ^ dropped) & ~either:
            wrong.append((grid, mask))

    if _unlimited_not_first(ds):
        _read_path_chunks(ds, source, listed_chunk)
    else:
        ds.id.chunk_iter(listed_chunk)
    assert not wrong, (
        f"{ds.name}: the codecs leave out filters {dropped:#x} of {listed}, yet libhdf5 lists referenced "
        f"chunks that skip {sorted({m for _, m in wrong})} (first {wrong[0][0]})"
    )


def _unlimited_not_first(ds: h5py.Dataset) -> bool:
    """libhdf5 2.0's ``chunk_iter`` lists the chunks of an extensible-array index whose
    unlimited dimension is not the first at wrong offsets (and with other chunks' masks),
    while its read path finds them right."""
    unlimited = [i for i, n in enumerate(ds.maxshape or ()) if n is None]
    return len(unlimited) == 1 and unlimited[0] != 0


def _read_path_chunks(ds: h5py.Dataset, source: np.ndarray, listed_chunk: Any) -> None:
    """Each referenced chunk's filter mask and stored length as ``H5Dread`` finds them
    (``read_direct_chunk``), given to ``listed_chunk`` as ``chunk_iter`` would."""
    chunks = tuple(ds.chunks)
    rank = len(chunks)
    for grid in np.argwhere(np.asarray(source) >= 0):
        offset = tuple(int(g) * c for g, c in zip(grid[:rank], chunks, strict=True))
        mask, stored = ds.id.read_direct_chunk(offset)
        listed_chunk(h5py.h5d.StoreInfo(offset, mask, None, len(stored)))
