"""The private hooks into zarr that h5lens can install: the only module that does, and only
when the user asks (:func:`h5lens.fast_reads`).

h5lens's own entry points (``read_anndata``, ``engine="h5lens"``, navigation,
``store.read_region``) read through h5lens's read plan (:mod:`h5lens.engine.plan`) and need
nothing of this. Readers that go through zarr's API (``anndata.read_zarr``, hdmf-zarr,
xarray's zarr engine) meet zarr's public extension point, the codec pipeline
(:mod:`h5lens.pipeline`), only after zarr has done per-read work that costs more than small
reads themselves, and zarr has no public hook before it:

* ``zarr.core.array._get_selection`` (``regions``): zarr lists a selection's chunks one by
  one (20-30 µs each) before any pipeline sees them; wrapped, a region of an array of an
  h5lens store is read as one plan instead, and so is annbatch's ``MultiBasicIndexer`` of a
  preload's blocks of a 1-d array (as runs: each stored chunk read and decoded once); that
  indexer over an array whose chunks cut the columns is refused there, in one line naming
  the array and :func:`h5lens.whole_rows`;
* ``zarr.Array.get_basic_selection`` / ``get_orthogonal_selection`` (``calling thread``):
  zarr's synchronous API hands every read to its event-loop thread and waits (0.1-0.5 ms,
  more than a small local read); wrapped, a small region of inline or local chunks is read
  on the calling thread;
* ``zarr.Group.__getitem__`` / ``keys`` (``lookups``): a group with consolidated metadata
  still answers each member through the event loop; wrapped, groups of h5lens stores answer
  from it on the calling thread.

Each wrapper acts for h5lens stores only and hands everything else to zarr's own function.
:func:`install` records every original it replaces; :func:`uninstall` puts each back (the
same objects). The hooks were written for the zarr releases in :data:`WRITTEN_FOR`: under
any other, none is installed, h5lens warns once naming the version, and every read stays
correct (through h5lens's codec pipeline, or zarr's). Upstream work that would make them
unnecessary: zarr-python #3725, #3885, #4243, #4112/#4113, zarrs-python #64.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
import threading
import warnings
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import numpy as np

# zarr releases (major, minor) the hooks were written for and tested with.
WRITTEN_FOR = ((3, 4),)


class HookWarning(UserWarning):
    """A zarr release h5lens's hooks were not written for: they are not installed."""


@dataclass(frozen=True)
class _Replaced:
    owner: Any
    name: str
    original: Any
    wrapper: Any  # what install put there: uninstall puts the original back only over it


_replaced: list[_Replaced] = []
_warned: set[str] = set()
_lock = threading.RLock()  # install and uninstall, from any thread, one at a time


def zarr_release() -> tuple[int, int] | None:
    """The installed zarr's (major, minor)."""
    found = re.match(r"(\d+)\.(\d+)", version("zarr"))
    return (int(found.group(1)), int(found.group(2))) if found else None


def installed() -> bool:
    """Whether the hooks are in place now."""
    return bool(_replaced)


def install() -> bool:
    """Install every hook (once); whether they are in place. Under a zarr release they were
    not written for (or whose functions take other arguments) nothing is installed and
    h5lens warns, once per release."""
    with _lock:
        if _replaced:
            return True
        return _install()


def _install() -> bool:
    release = zarr_release()
    if release not in WRITTEN_FOR or not _signatures_fit():
        said = version("zarr")
        if said not in _warned:
            _warned.add(said)
            written = ", ".join(f"{major}.{minor}.x" for major, minor in WRITTEN_FOR)
            warnings.warn(
                f"h5lens.fast_reads: zarr {said} is not a release h5lens's zarr hooks were written for ({written}); "
                "they are not installed. h5lens's codec pipeline is on and every read is correct; small reads "
                "through zarr's API take zarr's own route.",
                HookWarning,
                stacklevel=3,
            )
        return False
    import zarr
    import zarr.core.array as zarr_array
    from zarr.core.indexing import BasicIndexer, OrthogonalIndexer

    try:  # all or nothing: a failure part way puts back what was replaced
        _replace(zarr_array, "_get_selection", _regions(zarr_array._get_selection))
        for name, indexer in (("get_basic_selection", BasicIndexer), ("get_orthogonal_selection", OrthogonalIndexer)):
            _replace(zarr.Array, name, _calling_thread(getattr(zarr.Array, name), indexer))
        _replace(zarr.Group, "__getitem__", _lookup(zarr.Group.__getitem__))
        _replace(zarr.Group, "keys", _keys(zarr.Group.keys))
    except BaseException:
        _uninstall()
        raise
    return True


def uninstall() -> None:
    """Put back every original :func:`install` replaced, where h5lens's wrapper is still
    what is there: a function someone else replaced since (wrapping h5lens's) is left as it
    is, with a :class:`HookWarning` naming it, and h5lens's wrapper in it hands every call to
    zarr's own function from then on."""
    with _lock:
        _uninstall()


def _uninstall() -> None:
    while _replaced:
        done = _replaced.pop()
        if done.owner.__dict__.get(done.name) is done.wrapper:
            setattr(done.owner, done.name, done.original)
            continue
        warnings.warn(
            f"h5lens.fast_reads(False): {getattr(done.owner, '__name__', done.owner)}.{done.name} was replaced "
            "again after h5lens's hook; it is left as it is (h5lens's hook in it now hands every call to zarr's own)",
            HookWarning,
            stacklevel=3,
        )


def _replace(owner: Any, name: str, wrapper: Any) -> None:
    _replaced.append(_Replaced(owner, name, owner.__dict__[name], wrapper))
    setattr(owner, name, wrapper)


def _signatures_fit() -> bool:
    """Whether zarr's functions take the arguments the hooks were written for."""
    import zarr
    import zarr.core.array as zarr_array

    selection = (
        "store_path", "metadata", "codec_pipeline", "config", "chunk_grid", "indexer", "prototype", "out", "fields",
    )  # fmt: skip
    if tuple(inspect.signature(zarr_array._get_selection).parameters) != selection:
        return False
    for name in ("get_basic_selection", "get_orthogonal_selection"):
        parameters = inspect.signature(getattr(zarr.Array, name)).parameters
        positional = [n for n, p in parameters.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        keywords = {n for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
        if positional != ["self", "selection"] or keywords != {"out", "prototype", "fields"} or len(parameters) != 5:
            return False
    getitem, keys = inspect.signature(zarr.Group.__getitem__), inspect.signature(zarr.Group.keys)
    return list(getitem.parameters) == ["self", "path"] and list(keys.parameters) == ["self"]


# -- regions before zarr's per-chunk list ------------------------------------------------------
def _regions(original: Any) -> Any:
    @functools.wraps(original)
    async def _get_selection(
        store_path: Any,
        metadata: Any,
        codec_pipeline: Any,
        config: Any,
        chunk_grid: Any,
        indexer: Any,
        *,
        prototype: Any,
        out: Any = None,
        fields: Any = None,
    ) -> Any:
        if not fields and _replaced:  # zarr passes [] for none; uninstalled: zarr's own, always
            region = _region(store_path.store, store_path.path, metadata, config, chunk_grid, indexer, prototype)
            if region is not None:
                values = await store_path.store.engine.read_region_async(store_path.path, region)
                if values is not None:
                    return _as_selected(values, metadata, indexer, out)
            runs = _joint_runs(store_path.store, store_path.path, metadata, config, chunk_grid, indexer, prototype)
            if runs is not None:
                target = out.as_numpy_array() if out is not None else None  # a preload's buffer: no copy
                values = await store_path.store.engine.read_runs_async(store_path.path, *runs, out=target)
                if values is not None:
                    return _as_selected(values, metadata, indexer, out)
        return await original(
            store_path, metadata, codec_pipeline, config, chunk_grid, indexer, prototype=prototype, out=out, fields=fields
        )

    return _get_selection


def _region(store: Any, path: str, metadata: Any, config: Any, chunk_grid: Any, indexer: Any, prototype: Any) -> Any:
    """The region (``[start, stop)`` per axis) a zarr indexer selects, if h5lens reads it as
    one: slices of step 1 and integers, C order, numpy output, an array of an h5lens store
    whose chunks h5lens decodes, on its regular grid; None for anything else."""
    from zarr.core.buffer import cpu
    from zarr.core.indexing import BasicIndexer, IntDimIndexer, OrthogonalIndexer, SliceDimIndexer

    from h5lens.engine.plan import decoder, region_of
    from h5lens.store import ManifestStore

    if not isinstance(store, ManifestStore) or prototype.nd_buffer is not cpu.NDBuffer:
        return None
    if config.order != "C" or config.read_missing_chunks is False or not chunk_grid.is_regular:
        return None
    if type(indexer) not in (BasicIndexer, OrthogonalIndexer):
        return None
    codec = decoder(store.engine, path)
    if codec is None or codec.chunk_shape != tuple(chunk_grid.chunk_shape) or codec.shape != tuple(metadata.shape):
        return None
    key: list[Any] = []
    for dim in indexer.dim_indexers:  # zarr's normalised selection, as a key
        if type(dim) is SliceDimIndexer and dim.step == 1:
            key.append(slice(dim.start, max(dim.start, dim.stop)))
        elif type(dim) is IntDimIndexer:
            key.append(int(dim.dim_sel))
        else:
            return None
    found = region_of(tuple(key), codec.shape, codec.chunk_shape)
    return None if found is None or not found[0] else found[0]


def _joint_runs(
    store: Any, path: str, metadata: Any, config: Any, chunk_grid: Any, indexer: Any, prototype: Any
) -> tuple[np.ndarray, np.ndarray] | None:
    """The runs ``[start, stop)`` of a 1-d array that annbatch's ``MultiBasicIndexer`` (one
    indexer for a whole preload: its slices' values one after the other) selects, where
    h5lens reads them as runs (:meth:`~h5lens.engine.reader.ReadEngine.read_runs_async`: each
    stored chunk fetched and decoded once, each run copied whole, rather than zarr's list of
    every chunk of every slice); None for any other indexer. Refuses (naming the array) the
    indexer over an array whose chunks cut the columns, which it would place wrongly."""
    from zarr.core.buffer import cpu
    from zarr.core.indexing import BasicIndexer, SliceDimIndexer

    from h5lens.adata.whole_rows import cuts_columns, refusal
    from h5lens.engine.plan import decoder
    from h5lens.engine.segments import SegmentedCodec
    from h5lens.store import ManifestStore

    parts = getattr(indexer, "indexers", None)
    if type(indexer).__name__ != "MultiBasicIndexer" or not type(indexer).__module__.startswith("annbatch"):
        return None
    if not isinstance(store, ManifestStore) or prototype.nd_buffer is not cpu.NDBuffer or not isinstance(parts, list):
        return None
    if chunk_grid.is_regular and cuts_columns(metadata.shape, chunk_grid.chunk_shape) and _misplaces(indexer, parts):
        raise refusal(path, metadata.shape, chunk_grid.chunk_shape)
    if len(metadata.shape) != 1 or config.order != "C" or config.read_missing_chunks is False:
        return None
    codec = decoder(store.engine, path, text=False)
    if codec is None or codec.shape != tuple(metadata.shape):
        return None
    # a rectilinear grid (h5lens combine's) reads as runs of its segments, a regular one as its own
    if isinstance(codec, SegmentedCodec) == bool(chunk_grid.is_regular):
        return None
    if chunk_grid.is_regular and codec.chunk_shape != tuple(chunk_grid.chunk_shape):
        return None
    starts, stops = [], []
    for part in parts:
        if type(part) is not BasicIndexer or len(part.dim_indexers) != 1:
            return None
        dim = part.dim_indexers[0]
        if type(dim) is not SliceDimIndexer or dim.step != 1:
            return None
        starts.append(dim.start)
        stops.append(max(dim.start, dim.stop))
    found = np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64)
    if tuple(indexer.shape) != (int((found[1] - found[0]).sum()),):
        return None  # not its slices one after the other
    return found


def _misplaces(indexer: Any, parts: list[Any]) -> bool:
    """Whether annbatch's indexer places the chunks of its first slice outside that slice's
    rows of the output: annbatch 0.3.1 places the column chunks of a band of rows one below
    the other. Asked of the first slice's chunks only (a few); a release that places them
    right is let through."""
    if not parts or not getattr(parts[0], "shape", ()):
        return False
    rows = parts[0].shape[0]
    for part in itertools.islice(indexer, sum(1 for _ in parts[0])):
        where = part[2][0] if isinstance(part[2], tuple) and part[2] else None
        if isinstance(where, slice) and where.stop is not None and where.stop > rows:
            return True
    return False


def _as_selected(values: np.ndarray, metadata: Any, indexer: Any, out: Any) -> Any:
    """A region's values as zarr's ``_get_selection`` returns them for ``indexer``: in
    ``out`` if given, else an array of the array's dtype (a scalar for a 0-d selection)."""
    from zarr.core.buffer import cpu
    from zarr.core.indexing import BasicIndexer

    values = values.reshape(indexer.shape)
    if out is not None:
        if out.shape != indexer.shape:
            return None  # zarr's own message for it
        target = out.as_numpy_array()
        if not np.may_share_memory(target, values):  # read straight into it otherwise
            target[...] = values
        result = out
    else:
        dtype = metadata.dtype.to_native_dtype()
        if values.dtype != dtype or not values.flags.c_contiguous or not values.flags.writeable:
            values = np.array(values, dtype=dtype, order="C")  # a copy that keeps 0-d as 0-d
        result = cpu.NDBuffer.from_numpy_array(values)
    if isinstance(indexer, BasicIndexer) and indexer.shape == ():
        return result.as_scalar()
    return result.as_ndarray_like()


# -- small regions on the calling thread ------------------------------------------------------
def _calling_thread(original: Any, indexer_class: type) -> Any:
    @functools.wraps(original)
    def method(self: Any, selection: Any = Ellipsis, *, out: Any = None, prototype: Any = None, fields: Any = None) -> Any:
        if out is None and prototype is None and not fields and _replaced and _integers_and_slices(selection):
            values = _read_here(self, indexer_class, selection)
            if values is not None:
                return values
        return original(self, selection, out=out, prototype=prototype, fields=fields)

    return method


def _integers_and_slices(selection: Any) -> bool:
    """Whether a selection is made of integers, slices and Ellipsis only (checked before
    zarr builds an indexer for it, so that other selections cost nothing more)."""
    parts = selection if isinstance(selection, tuple) else (selection,)
    return all(
        part is Ellipsis or isinstance(part, slice) or (isinstance(part, int | np.integer) and not isinstance(part, bool))
        for part in parts
    )


def _read_here(array: Any, indexer_class: type, selection: Any) -> Any:
    """The selection's values read on this thread, or None (zarr's method reads it)."""
    from zarr.core.buffer import default_buffer_prototype

    from h5lens.store import ManifestStore

    async_array = array.async_array
    store_path = async_array.store_path
    chunk_grid = async_array._chunk_grid
    metadata = async_array.metadata
    prototype = default_buffer_prototype()
    if not isinstance(store_path.store, ManifestStore):
        return None
    indexer = indexer_class(selection, array.shape, chunk_grid)  # as zarr's method builds it
    region = _region(store_path.store, store_path.path, metadata, async_array.config, chunk_grid, indexer, prototype)
    if region is None:
        return None
    values = store_path.store.engine.read_region_now(store_path.path, region)
    return None if values is None else _as_selected(values, metadata, indexer, None)


# -- consolidated member lookups on the calling thread -----------------------------------------
def _consolidated(group: Any) -> Any:
    from h5lens.store import ManifestStore

    async_group = group._async_group
    found = async_group.metadata.consolidated_metadata
    return found if found is not None and isinstance(async_group.store_path.store, ManifestStore) else None


def _lookup(original: Any) -> Any:
    import zarr
    from zarr.core.group import AsyncGroup

    @functools.wraps(original)
    def __getitem__(self: Any, path: str) -> Any:
        found = _consolidated(self) if _replaced else None
        if found is None or path not in found.metadata:
            return original(self, path)
        group = self._async_group
        member = group._getitem_consolidated(group.store_path / path, path, prefix=group.name)
        return zarr.Group(member) if isinstance(member, AsyncGroup) else zarr.Array(member)

    return __getitem__


def _keys(original: Any) -> Any:
    @functools.wraps(original)
    def keys(self: Any) -> Any:
        found = _consolidated(self) if _replaced else None
        if found is None:
            yield from original(self)
        else:
            yield from list(found.metadata)

    return keys


__all__ = ["WRITTEN_FOR", "HookWarning", "install", "installed", "uninstall", "zarr_release"]
