"""Virtual datasets (VDS) as references into their source datasets' chunks.

A virtual dataset maps boxes of its extent onto selections of datasets in other files (or
its own). Where every mapping is one box onto one box of a source dataset, and the boxes
fall on the sources' chunk boundaries, each chunk of the virtual dataset is one chunk of
one source: the manifest references the sources' chunks directly (their files become
sources of the manifest, checked for staleness like the scanned file), under the codecs
the sources share. What no mapping covers reads as the virtual dataset's fill value, as
libhdf5 reads it; so does a mapping whose source file or dataset is not there (libhdf5
skips those too).

An unlimited mapping is taken at the extent libhdf5 gives the virtual dataset when it is
indexed (its default view, the last available source): a printf-style mapping (source
names with ``%b``) becomes one box per block present, each block's name with its number;
a mapping onto a growing source dataset, one box as long as the extent. A source file
added later is not seen until the file is indexed again (a source rewritten or grown is:
its identity changed).

Anything else (several separate blocks per selection, point selections, sources that
differ in type, codecs or chunk shape, boxes across chunk boundaries, overlapping
mappings, a source's unwritten chunks under another fill value) is no set of whole
chunks: :func:`virtual_table` says why, and the dataset is copied under the materialize
limit as every dataset without a zarr form is.

Source file names resolve as libhdf5 resolves them: ``.`` is the file itself; an absolute
name that exists as it is; else against ``HDF5_VDS_PREFIX`` (``${ORIGIN}`` is the virtual
dataset's directory); else against the virtual dataset's own directory (or prefix).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5lens.errors import SourceNotFoundError
from h5lens.manifest.documents import chunk_shape_of, grid_shape
from h5lens.manifest.model import INLINE, MISSING, ChunkTable, ChunkTableBuilder
from h5lens.scan.other_files import OtherFiles

# (source dataset, its HDF5 path) -> its zarr.json and chunk table (source 0: its file)
IndexSource = Callable[[h5py.Dataset, str], tuple[dict[str, Any], ChunkTable]]
# url -> the file, open while the context lasts; or SourceNotFoundError
OpenFile = Callable[[str], AbstractContextManager[h5py.File]]


@dataclass(frozen=True)
class Box:
    start: tuple[int, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Mapping:
    box: Box  # in the virtual dataset
    file: str  # as recorded
    dataset: str
    source_box: Box | None  # None: all of the source dataset, whatever its extent when read

    def of(self, source_shape: tuple[int, ...]) -> Box:
        return Box((0,) * len(source_shape), source_shape) if self.source_box is None else self.source_box


def mappings(dcpl: h5py.h5p.PropDCID, shape: tuple[int, ...]) -> list[Mapping] | str:
    """The mappings, each one box onto one box, at the virtual dataset's extent as libhdf5
    gives it (an unlimited mapping expanded into the blocks that extent holds, printf-style
    names ``%b`` given their block numbers); or why they are not boxes."""
    found = []
    for i in range(dcpl.get_virtual_count()):
        file, dataset = dcpl.get_virtual_filename(i), dcpl.get_virtual_dsetname(i)
        boxes = _boxes(dcpl.get_virtual_vspace(i), shape)
        if isinstance(boxes, str):
            return boxes
        source_space = dcpl.get_virtual_srcspace(i)
        for number, box in boxes:
            if number is None and ("%" in file or "%" in dataset):
                return "a printf-style source name outside an unlimited mapping"
            source_box: Box | None = None
            if source_space.get_select_type() != h5py.h5s.SEL_ALL:
                selected = _source_box(source_space, box)
                if isinstance(selected, str):
                    return selected
                source_box = selected
            named = (file, dataset) if number is None else (_printf(file, number), _printf(dataset, number))
            found.append(Mapping(box, named[0], named[1], source_box))
    return found


def _printf(name: str, block: int) -> str:
    """A printf-style source name for one block: ``%b`` its number, ``%%`` a percent sign."""
    return re.sub(r"%%|%b", lambda m: "%" if m.group() == "%%" else str(block), name)


def _boxes(space: h5py.h5s.SpaceID, shape: tuple[int, ...]) -> list[tuple[int | None, Box]] | str:
    """The boxes a virtual selection covers: one, or an unlimited mapping's blocks (numbered)."""
    kind = space.get_select_type()
    if kind == h5py.h5s.SEL_ALL:
        return [(None, Box((0,) * len(shape), shape))]
    if kind != h5py.h5s.SEL_HYPERSLABS or not space.is_regular_hyperslab():
        return "an irregular selection (points or several hyperslabs)"
    start, stride, count, block = (tuple(int(n) for n in part) for part in space.get_regular_hyperslab())
    unlimited = h5py.h5s.UNLIMITED
    extent = []
    for d, (c, st, b) in enumerate(zip(count, stride, block, strict=True)):
        if b == unlimited:  # one block growing with the extent
            extent.append(max(0, shape[d] - start[d]))
        elif c == unlimited:
            extent.append(b)
        elif c != 1 and st != b:
            return "a selection of several separate blocks"
        else:  # one block, or blocks laid end to end (h5py writes count=extent, block=1)
            extent.append(c * b)
    repeated = [d for d, c in enumerate(count) if c == unlimited]
    if not repeated:
        return [(None, Box(start, tuple(extent)))]
    if len(repeated) > 1:
        return "an unlimited mapping repeated along several dimensions"
    d = repeated[0]
    blocks = max(0, -(-(shape[d] - start[d]) // stride[d]))
    found: list[tuple[int | None, Box]] = []
    for number in range(blocks):
        at = start[:d] + (start[d] + number * stride[d],) + start[d + 1 :]
        if at[d] + extent[d] > shape[d]:
            return "an unlimited mapping whose last block lies past the extent"
        found.append((number, Box(at, tuple(extent))))
    return found


def _source_box(space: h5py.h5s.SpaceID, box: Box) -> Box | str:
    """The source selection as a box; an unlimited block takes the virtual box's extent."""
    if space.get_select_type() != h5py.h5s.SEL_HYPERSLABS or not space.is_regular_hyperslab():
        return "an irregular source selection (points or several hyperslabs)"
    start, stride, count, block = (tuple(int(n) for n in part) for part in space.get_regular_hyperslab())
    extent = []
    for d, (c, st, b) in enumerate(zip(count, stride, block, strict=True)):
        if b == h5py.h5s.UNLIMITED:
            if len(start) != len(box.shape):
                return "an unlimited source selection of another rank"
            extent.append(box.shape[d])
        elif c == h5py.h5s.UNLIMITED:
            return "a source selection of unlimited blocks"
        elif c != 1 and st != b:
            return "a source selection of several separate blocks"
        else:
            extent.append(c * b)
    return Box(start, tuple(extent))


def resolve_source_file(name: str, files: OtherFiles) -> str:
    """Where libhdf5 looks for a source file named ``name`` (``.`` handled by the caller)."""
    if os.path.isabs(name) and (files.remote or os.path.exists(name)):
        return name
    prefix = os.environ.get("HDF5_VDS_PREFIX")
    if prefix and not files.remote:
        origin = os.path.dirname(files.beside("x"))
        candidate = os.path.normpath(os.path.join(prefix.replace("${ORIGIN}", origin), name))
        if os.path.exists(candidate):
            return candidate
    if os.path.isabs(name):
        return name
    return files.beside(name)


def virtual_table(
    path: str,
    shape: tuple[int, ...],
    vds_doc: dict[str, Any],
    dcpl: h5py.h5p.PropDCID,
    own_file: h5py.File,
    files: OtherFiles,
    open_file: OpenFile,
    index_source: IndexSource,
) -> tuple[list[dict[str, Any]], tuple[int, ...], ChunkTable] | str:
    """The codecs, chunk shape and chunk table of the virtual dataset, referencing its sources'
    chunks; or why it cannot (see the module docstring). ``vds_doc`` gives the data type and
    fill value; ``open_file`` opens a source file by URL."""
    found = mappings(dcpl, shape)
    if isinstance(found, str):
        return found
    codecs: list[dict[str, Any]] | None = None
    chunk: tuple[int, ...] | None = None
    placed: list[tuple[Mapping, tuple[int, ...], ChunkTable, int]] = []
    by_file: dict[str, list[Mapping]] = {}
    for m in found:  # one source file open at a time, however many mappings read it
        by_file.setdefault(m.file, []).append(m)
    for name, in_file in by_file.items():
        with _source_file(name, own_file, files, open_file) as where:
            if where is None:
                continue  # libhdf5 reads the fill value for a source it cannot open
            h5, number = where
            for m in in_file:
                try:
                    source_ds = h5[m.dataset]
                except KeyError:
                    continue  # likewise for a dataset not in the file
                if not isinstance(source_ds, h5py.Dataset) or source_ds.shape is None:
                    return f"source {m.file}:{m.dataset} is not a dataset with a shape"
                source_box = m.of(tuple(source_ds.shape))
                if int(np.prod(m.box.shape, dtype=np.int64)) != int(np.prod(source_box.shape, dtype=np.int64)):
                    return "a mapping between selections of different sizes"
                doc, table = index_source(source_ds, m.dataset)
                if doc.get("data_type") != vds_doc.get("data_type"):
                    return f"source {m.file}:{m.dataset} holds another data type ({doc.get('data_type')})"
                lifted = _lift(m.box, source_box, chunk_shape_of(doc), len(shape))
                if lifted is None:
                    return f"mapping onto {m.file}:{m.dataset} changes the order of dimensions"
                if codecs is None:
                    codecs, chunk = doc["codecs"], lifted
                elif doc["codecs"] != codecs or lifted != chunk:
                    return "sources with different codecs or chunk shapes"
                if (table.source == MISSING).any() and doc.get("fill_value") != vds_doc.get("fill_value"):
                    return f"source {m.file}:{m.dataset} has unwritten chunks under another fill value"
                placed.append((m, tuple(source_ds.shape), table, number))
    if codecs is None or chunk is None:
        return "no source is there to take the chunk layout from"
    composed = _compose(shape, chunk, placed)
    return composed if isinstance(composed, str) else (codecs, chunk, composed)


@contextmanager
def _source_file(
    name: str, own_file: h5py.File, files: OtherFiles, open_file: OpenFile
) -> Iterator[tuple[h5py.File, int] | None]:
    if name == ".":
        yield own_file, 0
        return
    url = resolve_source_file(name, files)
    with ExitStack() as stack:
        try:
            h5 = stack.enter_context(open_file(url))
        except SourceNotFoundError:
            yield None
            return
        yield h5, files.number(url)


def _lift(box: Box, source_box: Box, source_chunk: tuple[int, ...], rank: int) -> tuple[int, ...] | None:
    """The source's chunk shape in the virtual dataset's dimensions: trailing dimensions
    align, leading ones the source lacks hold one element (a stack of sources)."""
    extra = rank - len(source_box.shape)
    if extra < 0 or box.shape[extra:] != source_box.shape or any(n != 1 for n in box.shape[:extra]):
        return None
    return (1,) * extra + tuple(source_chunk)


def _compose(
    shape: tuple[int, ...], chunk: tuple[int, ...], placed: list[tuple[Mapping, tuple[int, ...], ChunkTable, int]]
) -> ChunkTable | str:
    table = ChunkTableBuilder(grid_shape(shape, chunk))
    covered = np.zeros(table.grid_shape, dtype=bool)
    for m, source_shape, source_table, number in placed:
        source_box = m.of(source_shape)
        extra = len(shape) - len(source_box.shape)
        v_cells, s_cells = [], []
        for j in range(len(shape)):
            c = chunk[j]
            v0, n = m.box.start[j], m.box.shape[j]
            if v0 % c:
                return f"mapping onto {m.dataset} starts inside a chunk"
            v_end = v0 + n
            if j >= extra:
                k = j - extra
                s0 = source_box.start[k]
                if s0 % c:
                    return f"mapping onto {m.dataset} selects from inside a chunk"
                whole = n % c == 0 or (s0 + n == source_shape[k] and v_end == shape[j])
                if not whole:
                    return f"mapping onto {m.dataset} ends inside a chunk"
                s_cells.append(slice(s0 // c, -(-(s0 + n) // c)))
            elif v_end != shape[j] and n % c:
                return f"mapping onto {m.dataset} ends inside a chunk"
            v_cells.append(slice(v0 // c, -(-v_end // c)))
        target = tuple(v_cells)
        if covered[target].any():
            return "mappings that overlap"
        covered[target] = True
        cells_shape = covered[target].shape
        source = source_table.source[tuple(s_cells)].reshape(cells_shape)
        offset = source_table.offset[tuple(s_cells)].reshape(cells_shape)
        length = source_table.length[tuple(s_cells)].reshape(cells_shape)
        flat_v: np.ndarray = np.asarray(_flats(table.grid_shape, v_cells)).reshape(-1)
        src = source.reshape(-1)
        referenced = src >= 0
        table.refer(flat_v[referenced], offset.reshape(-1)[referenced], length.reshape(-1)[referenced], number)
        inline = np.flatnonzero(src == INLINE)
        if inline.size:
            s_flat = _flats(source_table.grid_shape, s_cells)
            table.set_inline(flat_v[inline], [source_table.inline[int(f)] for f in s_flat[inline]])
    return table.build()


def _flats(grid: tuple[int, ...], cells: list[slice]) -> np.ndarray:
    """The flat indices, in ``grid``, of the box of cells ``cells`` selects, in C order."""
    sub = tuple(s.stop - s.start for s in cells)
    starts = np.asarray([s.start for s in cells], dtype=np.int64)[:, None]
    return np.asarray(np.ravel_multi_index(np.indices(sub).reshape(len(grid), -1) + starts, grid)).reshape(-1)
