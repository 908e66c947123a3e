"""Reads that name the chunk that fails: key, array, source URL and byte range.

zarr decodes chunks inside its codec pipeline, so a corrupted or mis-addressed chunk
surfaces as a bare ``zlib.error: incorrect header check`` naming nothing. Here a failed
read is narrowed down to the first chunk that does not decode on its own (block reads,
bisected), and raised as :class:`~h5lens.errors.SourceReadError` naming it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import zarr

from h5lens.errors import H5LensError, SourceReadError
from h5lens.manifest.documents import grid_shape
from h5lens.read.rectilinear import largest_chunks

_SLAB_BYTES = 64 << 20  # decoded bytes read at once by check_array


def read_checked(array: zarr.Array, selection: Any = ...) -> np.ndarray:
    """``array[selection]``, as zarr gives it; if a chunk fails to decode,
    :class:`SourceReadError` names it. A region of an array of an h5lens store is read by
    h5lens's read plan (:func:`read_region_of`)."""
    found = read_region_of(array, selection)
    if found is not None:
        return found
    try:
        return np.asarray(array[selection])
    except H5LensError:
        raise
    except Exception as e:  # noqa: BLE001 - a decode failure of some chunk: find which
        bad = first_bad_block(array, _blocks_of(array, selection))
        if bad is None:
            raise
        raise _decode_error(array, bad, e) from e


def read_region_of(array: zarr.Array, selection: Any) -> np.ndarray | None:
    """``np.asarray(array[selection])`` read by h5lens's read plan
    (:meth:`h5lens.store.ManifestStore.read_region`), with the dtype zarr gives, for a basic
    selection of an array of an h5lens store whose chunks h5lens decodes; None otherwise."""
    from h5lens.engine.plan import decoder, region_of
    from h5lens.store import ManifestStore

    store = array.store
    if not isinstance(store, ManifestStore):
        return None
    codec = decoder(store.engine, array.path)
    if codec is None:
        return None
    found = region_of(selection, codec.shape, codec.chunk_shape)
    if found is None:
        return None
    bounds, post = found
    values = store.read_region(array.path, bounds)
    if values is None:
        return None
    return np.asarray(values[post], dtype=array.dtype)


def check_array(array: zarr.Array) -> int:
    """Decode every chunk of ``array`` (slabs of whole chunks along the first axis, about
    64 MiB decoded at a time); return how many chunks were checked, or raise naming the
    first that does not decode."""
    grid = _grid(array)
    if not array.shape:
        read_checked(array, ...)
        return 1
    if 0 in array.shape:
        return 0
    chunk_bytes = math.prod(largest_chunks(array)) * max(array.dtype.itemsize, 1)
    per_row = math.prod(grid[1:]) * chunk_bytes
    step = max(1, _SLAB_BYTES // max(per_row, 1))
    for start in range(0, grid[0], step):
        block = (slice(start, min(start + step, grid[0])),) + tuple(slice(None) for _ in grid[1:])
        try:
            array.get_block_selection(block)
        except H5LensError:
            raise
        except Exception as e:  # noqa: BLE001
            indices = list(np.ndindex(*[min(start + step, grid[0]) - start, *grid[1:]]))
            bad = first_bad_block(array, ((start + i[0], *i[1:]) for i in indices))
            if bad is None:
                raise
            raise _decode_error(array, bad, e) from e
    return math.prod(grid)


def _grid(array: zarr.Array) -> tuple[int, ...]:
    try:
        return grid_shape(array.shape, array.chunks)
    except NotImplementedError:  # a rectilinear grid (h5lens combine's): its chunks per axis
        return tuple(len(sizes) for sizes in array.read_chunk_sizes)


def _blocks_of(array: zarr.Array, selection: Any) -> Iterator[tuple[int, ...]]:
    """The chunk indices a basic selection's region touches (:func:`~h5lens.engine.plan.region_of`,
    the one converter); every chunk for anything fancier, or an empty selection."""
    from h5lens.engine.plan import region_of

    grid = _grid(array)
    if not array.shape:
        yield ()
        return
    found = region_of(selection, tuple(array.shape))
    if found is None or any(stop <= start for start, stop in found[0]) or grid != grid_shape(array.shape, largest_chunks(array)):
        ranges = [range(n) for n in grid]  # (every chunk of a rectilinear grid)
    else:
        ranges = [range(start // size, -(-stop // size)) for (start, stop), size in zip(found[0], array.chunks, strict=True)]
    yield from itertools.product(*ranges)


def first_bad_block(array: zarr.Array, blocks: Any) -> tuple[int, ...] | None:
    for index in blocks:
        try:
            array.get_block_selection(tuple(index) if index else ())
        except H5LensError:
            raise
        except Exception:  # noqa: BLE001
            return tuple(int(i) for i in index)
    return None


def _decode_error(array: zarr.Array, index: tuple[int, ...], error: BaseException) -> SourceReadError:
    from h5lens.manifest.zarr_keys import KeyEncoding, chunk_key

    doc = array.metadata.to_dict()
    key = chunk_key(array.path, index, KeyEncoding.from_document(doc, "/" + array.path))
    describe = getattr(array.store, "describe_key", None)
    where = describe(key) if describe is not None else f"chunk {key!r}"
    detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return SourceReadError(f"{where}: does not decode ({type(error).__name__}: {detail})")


def diagnose(group: zarr.Group, error: BaseException) -> SourceReadError | None:
    """After a read of ``group`` failed with ``error`` (not an h5lens error): the first chunk
    of its arrays that does not decode, as :class:`SourceReadError` naming it, or None if
    every chunk decodes (the failure lies elsewhere). Reads everything again: for failures
    only."""
    for _, array in sorted(group.arrays(), key=lambda item: item[0]):
        try:
            check_array(array)
        except SourceReadError as bad:
            bad.__cause__ = error
            return bad
    for _, child in sorted(group.groups(), key=lambda item: item[0]):
        below = diagnose(child, error)
        if below is not None:
            return below
    return None
