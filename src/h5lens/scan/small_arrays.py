"""The chunks of small arrays copied into the manifest: they cost more as a request than
as JSON (``inline_threshold``). The chunks of a big array stay references however small
each one is: the manifest is a map of the data, not a copy of it."""

from __future__ import annotations

import numpy as np

from h5lens.fetch.planner import LOCAL
from h5lens.manifest.model import ChunkTable
from h5lens.scan.source import OpenSource


def inline_small_chunks(opened: OpenSource, tables: dict[str, ChunkTable], threshold: int) -> None:
    """Copy the referenced chunks of small *arrays* (whole stored size at most ``threshold``
    bytes) into the manifest. The chunks of a big array stay references however small each
    one is: the manifest is a map of the data, not a copy of it.

    Reads go in file order, neighbouring chunks merged into one read (for a remote
    source, one request instead of thousands).
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
    payloads = read_merged(opened, offset, length)
    names = list(tables)
    # each table's reads, in file order: grouped by one stable sort (a comparison of every
    # read per table costs seconds for the tens of thousands of a MATLAB file)
    by_table = np.argsort(which, kind="stable")
    for mine in np.split(by_table, np.flatnonzero(np.diff(which[by_table])) + 1):
        name = names[int(which[mine[0]])]
        tables[name] = tables[name].with_inline(flat[mine], [payloads[i] for i in mine.tolist()])


def read_merged(opened: OpenSource, offset: np.ndarray, length: np.ndarray) -> list[bytes]:
    """Read ranges sorted by offset. A local file: neighbours merged into one read as the
    readers merge them (:data:`h5lens.fetch.planner.LOCAL`: one planner for every reader
    of bytes). A remote one: one batch of concurrent requests, merged only where that costs
    few bytes more (the chunks of small arrays are scattered between big arrays' data)."""
    if opened.remote:
        return opened.read_ranges(list(zip(offset.tolist(), length.tolist(), strict=True)))
    out: list[bytes] = []
    ends = offset + length
    for lo, hi in LOCAL.runs(offset, length):
        base = int(offset[lo])
        block = memoryview(opened.read(base, int(ends[lo:hi].max()) - base))
        for i in range(lo, hi):
            start = int(offset[i]) - base
            out.append(bytes(block[start : start + int(length[i])]))
    return out


__all__ = ["inline_small_chunks", "read_merged"]
