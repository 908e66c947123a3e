"""External raw storage (``H5Pset_external``) as references into its raw files.

A dataset stored externally keeps its elements, unfiltered and in the file's byte order,
as one byte stream laid end to end over a list of segments ``(file, offset, size)``. The
array is cut into slabs of whole rows (as contiguous datasets are) whose row count
divides every segment boundary, so that each slab lies inside one segment: one reference
into one raw file. libhdf5 reads zeros where a raw file ends before its segment does; a
slab reaching past a file's end is stored inline, zero-padded as libhdf5 reads it.

Where a segment boundary splits a row, no slab of whole rows fits: the dataset is copied
(under the materialize limit) as every dataset without a zarr form is.

Relative file names resolve as libhdf5 resolves them: against ``HDF5_EXTFILE_PREFIX``
when set (``${ORIGIN}`` is the HDF5 file's directory), else the working directory, else
(where the file is not there) the HDF5 file's directory; a remote file's names against its
own prefix.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import h5py
import numpy as np

from h5lens.errors import SourceNotFoundError
from h5lens.manifest.model import ChunkTableBuilder
from h5lens.scan.chunks import grid_shape, plan_slabs
from h5lens.scan.other_files import OtherFiles

_SMALLEST_EXACT_SLAB = 64 << 10  # bytes: slabs smaller than this cost more requests than a tail inline


@dataclass(frozen=True)
class Segment:
    url: str  # resolved
    offset: int  # where the segment starts in its file
    size: int  # bytes of the stream it holds
    start: int  # where it starts in the dataset's byte stream


def segments(dcpl: h5py.h5p.PropDCID, files: OtherFiles) -> list[Segment]:
    found, start = [], 0
    for i in range(dcpl.get_external_count()):
        name, offset, size = dcpl.get_external(i)
        found.append(Segment(_resolve(os.fsdecode(name), files), int(offset), int(size), start))
        start += int(size)
    return found


def _resolve(name: str, files: OtherFiles) -> str:
    if os.path.isabs(name) or files.remote:
        return files.beside(name)
    prefix = os.environ.get("HDF5_EXTFILE_PREFIX")
    if prefix:
        origin = os.path.dirname(files.beside("x"))
        return os.path.normpath(os.path.join(prefix.replace("${ORIGIN}", origin), name))
    here = os.path.abspath(name)
    return here if os.path.exists(here) else files.beside(name)


def row_bytes_fit(stream: list[Segment], row_bytes: int, total: int) -> int | None:
    """The largest row count every segment boundary inside the data is a multiple of (0:
    no boundary inside); None where a boundary splits a row."""
    rows = 0
    for segment in stream[1:]:
        if segment.start >= total:
            break
        if segment.start % row_bytes:
            return None
        rows = math.gcd(rows, segment.start // row_bytes)
    return rows


def _largest_divisor_at_most(n: int, limit: int) -> int:
    best = 1
    d = 1
    while d * d <= n:
        if n % d == 0:
            for candidate in (d, n // d):
                if best < candidate <= limit:
                    best = candidate
        d += 1
    return best


def external_table(
    path: str,
    shape: tuple[int, ...],
    itemsize: int,
    stream: list[Segment],
    files: OtherFiles,
    slab_bytes: int,
    *,
    zero_fill: bool,
) -> tuple[tuple[int, ...], ChunkTableBuilder] | None:
    """The slab shape and the table of references into the raw files; None where no slab
    of whole rows lies inside one segment (a boundary splits a row). A slab wholly past
    its file's end is absent where the fill value is zeros (what libhdf5 reads there),
    else stored inline as zeros (the caller bounds what is inline)."""
    if not shape or 0 in shape:
        return None
    row_bytes = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    total = row_bytes * shape[0]
    fit = row_bytes_fit(stream, row_bytes, total)
    if fit is None:
        return None
    slab = plan_slabs(shape, itemsize, slab_bytes)
    # Slabs that also divide the rows leave no partial tail slab, whose bytes run past the
    # data and so past the last file's end (stored inline): taken unless they get too small.
    exact = _largest_divisor_at_most(math.gcd(fit, shape[0]), slab[0])
    rows = slab[0] if fit == 0 else _largest_divisor_at_most(fit, slab[0])
    if exact * row_bytes >= min(total, _SMALLEST_EXACT_SLAB):
        rows = exact
    chunk_shape = (rows, *slab[1:])
    table = ChunkTableBuilder(grid_shape(shape, chunk_shape))
    per_row = int(np.prod(table.grid_shape[1:], dtype=np.int64))  # grid cells per slab: 1 (whole rows)
    length = rows * row_bytes
    starts = [s.start for s in stream]
    for i in range(table.grid_shape[0]):
        begin = i * length
        segment = stream[int(np.searchsorted(starts, begin, side="right")) - 1]
        where = segment.offset + (begin - segment.start)
        try:
            size = files.size(segment.url)
        except SourceNotFoundError:
            raise SourceNotFoundError(
                f"{path}: its external raw file {segment.url} is not there (h5py cannot read the dataset either)"
            ) from None
        if where + length <= size:
            table.refer(np.asarray([i * per_row]), where, length, files.number(segment.url))
        elif where >= size and zero_fill:
            continue  # nothing of it in the file: zeros, the fill value
        else:  # the file ends first: libhdf5 reads zeros there
            found = files.read(segment.url, where, length) if where < size else b""
            table.set_inline(np.asarray([i * per_row]), [found + bytes(length - len(found))])
    return chunk_shape, table


def read_stream(path: str, stream: list[Segment], files: OtherFiles, total: int) -> bytes:
    """The dataset's first ``total`` bytes, read from its raw files as libhdf5 reads them
    (zeros past a file's end): for a dataset copied rather than referenced."""
    out = bytearray(total)
    for segment in stream:
        if segment.start >= total:
            break
        wanted = min(segment.size, total - segment.start)
        try:
            found = files.read(segment.url, segment.offset, wanted) if files.size(segment.url) > segment.offset else b""
        except SourceNotFoundError:
            raise SourceNotFoundError(
                f"{path}: its external raw file {segment.url} is not there (h5py cannot read the dataset either)"
            ) from None
        out[segment.start : segment.start + len(found)] = found
    return bytes(out)
