"""The errors of a dataset the scan cannot read: a filter libhdf5 cannot load, damaged data,
a chunk index pointing past the end of the file. Each names the dataset."""

from __future__ import annotations

import h5py
import numpy as np

from h5lens.errors import H5LensError, NotHDF5Error, UnsupportedFeatureError, first_line
from h5lens.manifest.model import ChunkTable
from h5lens.scan.codecs import read_pipeline


def check_inside_file(path: str, table: ChunkTable, size: int | None) -> None:
    """A chunk index pointing past the end of the file is damage (h5py fails to read such a
    chunk): refused here, naming the dataset, rather than written into a manifest that
    every reader would refuse."""
    if size is None:
        return
    source = table.source.reshape(-1)
    ends = table.offset.reshape(-1) + table.length.reshape(-1)
    past = np.flatnonzero((source == 0) & (ends > np.uint64(size)))  # the other files were checked when met
    if past.size:
        flat = int(past[0])
        index = tuple(int(i) for i in np.unravel_index(flat, table.grid_shape))
        start, end = int(table.offset.reshape(-1)[flat]), int(ends[flat])
        raise NotHDF5Error(
            f"{path}: chunk {index} at bytes {start}-{end} lies past the end of the file ({size} bytes; "
            f"{past.size} chunk(s) do): the file is truncated or damaged"
        )


def unreadable(h5: h5py.File, path: str, error: BaseException) -> H5LensError:
    """Why libhdf5 could not read a dataset h5lens had to decode: a filter it has no plugin
    for (a feature this installation cannot decode), or damaged data."""
    try:
        filters = read_pipeline(h5[path].id.get_create_plist())
    except (OSError, RuntimeError, KeyError):
        filters = []
    missing = [f for f in filters if not h5py.h5z.filter_avail(f.id)]
    if missing:
        names = ", ".join(f.label for f in missing)
        return UnsupportedFeatureError(
            f"{path}: its data needs filter {names}, which libhdf5 cannot load here (no zarr codec either, "
            "so h5py must decode it): install the filter's plugin (e.g. hdf5plugin) and index again"
        )
    return NotHDF5Error(f"{path}: cannot read dataset, the file may be damaged ({first_line(error)})")
