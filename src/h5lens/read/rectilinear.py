"""zarr's ``array.rectilinear_chunks`` flag, on while h5lens's readers parse a document that
needs it.

zarr 3.4 reads an array on a rectilinear chunk grid (what ``h5lens combine`` writes where
files' chunks differ) only with ``zarr.config.set({"array.rectilinear_chunks": True})``, and
checks the flag when it parses the array's document, nowhere after. h5lens's own readers
(``read_anndata``, ``h5lens.open``) parse the documents of a manifest themselves, so they
turn the flag on for that parse alone, and only for a document that declares such a grid:
every other read leaves zarr's configuration as it is. Users of zarr's API (``anndata.read_zarr``,
``read_lazy``, ``xr.open_zarr``) set the flag themselves, as zarr's documentation says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

RECTILINEAR_FLAG = "array.rectilinear_chunks"


def is_rectilinear(doc: Mapping[str, Any]) -> bool:
    """Whether an array's document declares a rectilinear chunk grid."""
    grid = doc.get("chunk_grid")
    return isinstance(grid, Mapping) and grid.get("name") == "rectilinear"


@contextlib.contextmanager
def rectilinear_allowed(docs: Iterable[Mapping[str, Any]]) -> Iterator[None]:
    """zarr's rectilinear flag on inside the block if any of ``docs`` needs it (and it is off)."""
    import zarr

    if any(is_rectilinear(doc) for doc in docs) and not zarr.config.get(RECTILINEAR_FLAG):
        with zarr.config.set({RECTILINEAR_FLAG: True}):
            yield
    else:
        yield


def largest_chunks(array: Any) -> tuple[int, ...]:
    """A zarr array's chunk shape; on a rectilinear grid, which has none, its largest chunk
    along each axis."""
    try:
        return tuple(array.chunks)
    except NotImplementedError:  # zarr: a rectilinear grid has no one chunk shape
        return tuple(max(sizes, default=1) for sizes in array.read_chunk_sizes)


__all__ = ["RECTILINEAR_FLAG", "is_rectilinear", "largest_chunks", "rectilinear_allowed"]
