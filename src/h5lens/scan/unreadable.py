"""The errors of a dataset the scan cannot read: a filter libhdf5 cannot load, damaged data,
a chunk index pointing past the end of the file. Each names the dataset.

With ``skip_unreadable`` such an object is left out of the manifest and listed in it
(:class:`LeftOut`) instead of refusing the whole file."""

from __future__ import annotations

from collections.abc import Callable

import h5py
import numpy as np

from h5lens.errors import H5LensError, MaterializeLimitError, NotHDF5Error, UnsupportedFeatureError, first_line
from h5lens.manifest.model import ChunkTable, Unreadable
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


class LeftOut:
    """Which refusals a scan may leave out with ``skip_unreadable``, and the record of them.

    Only an object's own refusal: a dataset or attribute h5py cannot read either (or that
    h5lens has no form for), a filter libhdf5 cannot load here, damaged data met inside one
    dataset. Never a failure of the file as a whole (not HDF5, storage), never a dataset over
    the materialize limit (h5py reads it; the limit is the user's to raise), and nothing once
    a read of the source failed underneath: libhdf5 reports a failed remote read as damage,
    and that is the storage's failure, raised as such.

    Without ``skip_unreadable`` the refusal is raised as before; the command line's wording
    of it says how to index the rest."""

    def __init__(self, enabled: bool, failure: Callable[[BaseException], BaseException], keys: dict[str, str]):
        self.enabled = enabled
        self._failure = failure  # OpenSource.failure: the storage failure under an error, if any
        self._keys = keys  # HDF5 path -> node key, for attributes
        self._nodes: dict[str, H5LensError] = {}  # node key -> why
        self._attributes: dict[tuple[str, str], Unreadable] = {}

    def _may_leave_out(self, error: H5LensError) -> bool:
        if not self.enabled or isinstance(error, MaterializeLimitError):
            return False
        return self._failure(error) is error

    def node(self, key: str, error: H5LensError) -> H5LensError | None:
        """Leave out the node ``key`` that failed with ``error`` (None), or the error to raise."""
        if not self._may_leave_out(error):
            return hinted(error)
        self._nodes[key] = error
        return None

    def attributes(self, h5_path: str, refused: dict[str, UnsupportedFeatureError]) -> None:
        """Record the attributes of the object at ``h5_path`` that were left out (those
        :func:`~h5lens.scan.attrs.read_attributes` refused, by name), or raise the first."""
        for name, error in refused.items():
            if not self._may_leave_out(error):
                raise hinted(error)
            key = self._keys.get(h5_path, h5_path.strip("/"))
            self._attributes[key, name] = Unreadable(key, first_line(error), name)

    def finish(self, refused: dict[str, UnsupportedFeatureError]) -> tuple[Unreadable, ...]:
        """Everything left out, once profiles have replaced the refused datasets they could;
        the refusals still standing that may not be left out are raised (the first)."""
        for key, error in refused.items():
            found = self.node(key, error)
            if found is not None:
                raise found
        nodes = [Unreadable(key, first_line(error)) for key, error in self._nodes.items()]
        # the attributes of a node left out whole go with it
        attributes = [entry for (key, _), entry in self._attributes.items() if key not in self._nodes]
        return tuple(sorted([*nodes, *attributes], key=Unreadable.sort_key))


def hinted(error: H5LensError) -> H5LensError:
    """A per-object refusal, in the command line's words with how to index the rest."""
    if error.cli_message is None and not isinstance(error, MaterializeLimitError):
        error.at_cli(f"{first_line(error)}; --skip-unreadable leaves it out and indexes the rest of the file")
    return error
