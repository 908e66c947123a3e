"""Read a whole array at once: every chunk fetched in merged requests, decoded in bulk.

zarr's codec pipeline costs a few hundred microseconds per chunk in asyncio
bookkeeping, which dominates full reads of h5ad matrices stored in tens of
thousands of small chunks. An eager read is the region read of the whole array
(:meth:`h5lens.store.ManifestStore.read_region`, :mod:`h5lens.engine.plan`): every
chunk asked for in one batch, decoded on a few threads with the filter table's
functions. Arrays h5lens does not decode return None, and the caller reads them
through zarr.
"""

from __future__ import annotations

import numpy as np

from h5lens.engine.plan import decoder, whole
from h5lens.store import ManifestStore


def read_whole(store: ManifestStore, path: str, *, text: bool = False) -> np.ndarray | None:
    """All values of the array at ``path`` (numbers; text too with ``text``: ``object``
    arrays of ``str``, as h5py gives them), or None to let zarr read it."""
    codec = decoder(store.engine, path, text=text)
    return None if codec is None else store.read_region(path, whole(codec.shape))
