"""The chunks of small arrays copied into the manifest: they cost more as a request than
as JSON (``inline_threshold``). The chunks of a big array stay references however small
each one is: the manifest is a map of the data, not a copy of it."""

from __future__ import annotations

import numpy as np

from h5lens.manifest.model import ChunkTable
from h5lens.scan.source import OpenSource


def inline_small_chunks(opened: OpenSource, tables: dict[str, ChunkTable], threshold: int) -> None:
    """Copy the referenced chunks of small *arrays* (whole stored size at most ``threshold``
    bytes) into the manifest. The chunks of a big array stay references however small each
    one is: the manifest is a map of the data, not a copy of it.

    Read in one go through the file's byte reader (:meth:`OpenSource.read_ranges`): a local
    file's through its map, a remote one's as one batch of concurrent requests, neighbours
    merged where the planner finds it pays (for a remote source, one request instead of
    thousands; the chunks of small arrays are scattered between big arrays' data).
    """
    if threshold <= 0:
        return
    paths, flats, offsets, lengths = [], [], [], []
    for number, table in enumerate(tables.values()):
        referenced = table.referenced_bytes
        if referenced == 0 or referenced + table.inline_bytes > threshold:
            continue
        if (table.source > 0).any():  # chunks in other files (external, virtual): they stay references
            continue
        small = np.flatnonzero((table.source >= 0).reshape(-1))
        paths.append(np.full(small.size, number))
        flats.append(small)
        offsets.append(table.offset.reshape(-1)[small])
        lengths.append(table.length.reshape(-1)[small])
    if not flats:
        return
    which, flat = np.concatenate(paths), np.concatenate(flats)
    offset, length = np.concatenate(offsets).astype(np.int64), np.concatenate(lengths).astype(np.int64)
    order = np.argsort(offset, kind="stable")
    which, flat, offset, length = which[order], flat[order], offset[order], length[order]
    payloads = opened.read_ranges(list(zip(offset.tolist(), length.tolist(), strict=True)))
    names = list(tables)
    # each table's reads, in file order: grouped by one stable sort (a comparison of every
    # read per table costs seconds for the tens of thousands of a MATLAB file)
    by_table = np.argsort(which, kind="stable")
    for mine in np.split(by_table, np.flatnonzero(np.diff(which[by_table])) + 1):
        name = names[int(which[mine[0]])]
        tables[name] = tables[name].with_inline(flat[mine], [payloads[i] for i in mine.tolist()])


__all__ = ["inline_small_chunks"]
