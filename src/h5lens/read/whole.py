"""Read a whole array at once: every chunk fetched in merged requests, decoded in bulk.

zarr's codec pipeline costs a few hundred microseconds per chunk in asyncio
bookkeeping, which dominates full reads of h5ad matrices stored in tens of
thousands of small chunks. An eager read is the region read of the whole array
(:meth:`h5lens.store.ManifestStore.read_region`, :mod:`h5lens.read.bulk`): every
chunk asked for in one batch, decoded on a few threads with the filter table's
functions. Arrays whose codecs or data type that does not cover return None, and
the caller reads them through zarr.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5lens.manifest.documents import ArrayDocument


def read_whole(store: Any, path: str) -> np.ndarray | None:
    """All values of the array at ``path`` of a ManifestStore, or None to let zarr read it."""
    doc = store.manifest.nodes.get(path)
    view = None if doc is None else ArrayDocument.of(doc)
    if view is None or store.array_codec(path) is None:  # numbers only: text is zarr's to type
        return None
    return store.read_region(path, [(0, n) for n in view.shape])
