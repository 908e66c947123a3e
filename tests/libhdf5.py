"""The libhdf5 h5py runs on, for the creation properties h5py does not expose.

h5py wraps most of the C API but not ``H5Pset_chunk_opts`` (partial edge chunks stored
without filters) nor ``H5Pset_istore_k`` (the chunk B-tree's K); files written with them
exist in the wild (C and Fortran writers), so the tests write them through ctypes, on the
very library h5py loaded (same process, same handles).
"""

from __future__ import annotations

import ctypes
import glob
import os

import h5py
import pytest

# H5Dpublic.h: H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS
DONT_FILTER_PARTIAL_CHUNKS = 0x0002


def library() -> ctypes.CDLL | None:
    candidates = glob.glob(os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs", "libhdf5-*.so*"))
    try:
        return ctypes.CDLL(candidates[0]) if candidates else None
    except OSError:
        return None


def _required() -> ctypes.CDLL:
    lib = library()
    if lib is None:
        pytest.skip("cannot reach the libhdf5 h5py runs on (h5py.libs) to set a creation property h5py lacks")
    return lib


def set_chunk_opts(dcpl: h5py.h5p.PropDCID, opts: int = DONT_FILTER_PARTIAL_CHUNKS) -> None:
    lib = _required()
    lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
    assert lib.H5Pset_chunk_opts(dcpl.id, opts) >= 0


def chunk_opts(dcpl: h5py.h5p.PropDCID) -> int | None:
    """``H5Pget_chunk_opts`` of a dataset's creation properties; None where the library
    cannot be reached (h5py does not wrap it)."""
    lib = library()
    if lib is None:
        return None
    lib.H5Pget_chunk_opts.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_uint)]
    opts = ctypes.c_uint(0)
    if lib.H5Pget_chunk_opts(dcpl.id, ctypes.byref(opts)) < 0:
        return None
    return int(opts.value)


def set_istore_k(fcpl: h5py.h5p.PropFCID, k: int) -> None:
    lib = _required()
    lib.H5Pset_istore_k.argtypes = [ctypes.c_int64, ctypes.c_uint]
    assert lib.H5Pset_istore_k(fcpl.id, k) >= 0


def create_dataset(
    parent: h5py.Group,
    name: str,
    data,  # noqa: ANN001 - an array-like h5py writes
    *,
    chunks: tuple[int, ...],
    maxshape: tuple[int | None, ...] | None = None,
    shuffle: bool = False,
    deflate: int | None = None,
    fletcher32: bool = False,
    unfiltered_edges: bool = True,
    dtype=None,  # noqa: ANN001 - a numpy dtype h5py maps (default: the data's)
) -> h5py.Dataset:
    """A chunked dataset whose partial edge chunks libhdf5 stores without the filters."""
    import numpy as np

    values = np.asarray(data) if dtype is None else np.asarray(data, dtype=object if h5py.check_string_dtype(dtype) else dtype)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    if shuffle:
        dcpl.set_shuffle()
    if deflate is not None:
        dcpl.set_deflate(deflate)
    if fletcher32:
        dcpl.set_fletcher32()
    if unfiltered_edges:
        set_chunk_opts(dcpl)
    dims = values.shape
    limits = tuple(h5py.h5s.UNLIMITED if m is None else m for m in (maxshape or dims))
    space = h5py.h5s.create_simple(dims, limits)
    tid = h5py.h5t.py_create(dtype if dtype is not None else values.dtype, logical=True)
    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(True)
    dsid = h5py.h5d.create(parent.id, name.encode(), tid, space, dcpl=dcpl, lcpl=lcpl)
    ds = h5py.Dataset(dsid)
    ds[...] = values
    return ds
