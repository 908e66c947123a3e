"""Many files as one virtual dataset: ``h5lens.combine``.

Manifests of many files (h5ad along obs; netCDF-4 along a named dimension) combined into one
manifest, their chunks referenced where they lie: arrays whose files' chunks differ in
length lie on a rectilinear chunk grid (:mod:`h5lens.combining.stack`), what must change
is written as new small arrays (:mod:`h5lens.combining.written`), and each file's record
(size, ETag, fingerprint) is kept, so a reader refuses the file that changed, by name.

Modules: ``inputs`` (the manifests and the one source table), ``stack`` (arrays
concatenated by reference), ``written`` (new small arrays), ``anndata`` (AnnData along obs),
``netcdf`` (variables along a dimension), ``result`` (the nodes and tables made), ``summary``
(what was referenced and written). The package is ``combining``, not ``combine``: importing a
submodule would otherwise replace the function ``h5lens.combine`` with the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypedDict, Unpack

from h5lens.combining.anndata import combine_anndata
from h5lens.combining.encoding import MODES as ENCODINGS
from h5lens.combining.inputs import Indexer, Input, SourceTable, load_inputs
from h5lens.combining.netcdf import combine_netcdf
from h5lens.combining.summary import Summary
from h5lens.errors import InvalidOptionError
from h5lens.manifest.model import Manifest
from h5lens.read.options import OpenOptions

FOR = ("any", "regular")  # --for: which readers the combined object is for


class CombineKwargs(TypedDict, total=False):
    """The options of :func:`combine` and :func:`combine_with_summary` (defaults there)."""

    dim: str | None
    join: str
    label: str | None
    keys: Sequence[Any] | None
    index_unique: str | None
    merge: Any
    uns_merge: Any
    fill_value: Any
    pairwise: bool
    for_readers: str
    encoding: str
    append_to: Any
    storage_options: dict[str, Any] | None
    options: OpenOptions | None
    index: Indexer | None
    scheduler: Any
    workers: int | None


def combine(manifests: Sequence[Any], **options: Unpack[CombineKwargs]) -> Manifest:
    """Many manifests (paths, URLs or :class:`~h5lens.Manifest` objects) as one manifest:
    :func:`combine_with_summary`'s manifest (the same options)."""
    return combine_with_summary(manifests, **options)[0]


def combine_with_summary(
    manifests: Sequence[Any],
    *,
    dim: str | None = None,
    join: str = "inner",
    label: str | None = None,
    keys: Sequence[Any] | None = None,
    index_unique: str | None = None,
    merge: Any = None,
    uns_merge: Any = None,
    fill_value: Any = None,
    pairwise: bool = False,
    for_readers: str = "any",
    encoding: str = "equal",
    append_to: Any = None,
    storage_options: dict[str, Any] | None = None,
    options: OpenOptions | None = None,
    index: Indexer | None = None,
    scheduler: Any = None,
    workers: int | None = None,
) -> tuple[Manifest, Summary]:
    """The combined manifest and what it references and writes.

    AnnData along obs (TreeData: as ``treedata.concat``), with ``anndata.concat``'s options
    (``join``, ``merge``, ``uns_merge``, ``label``, ``keys``, ``index_unique``, ``fill_value``,
    ``pairwise``), when ``dim`` is None; netCDF-4 (any HDF5 with dimension names) along the
    dimension ``dim`` otherwise. ``for_readers="regular"`` refuses, naming them, the arrays
    that would need a rectilinear chunk grid. ``encoding`` (netCDF): ``"equal"`` refuses files
    whose CF encoding attributes differ, naming them; ``"per-file"`` records each file's for
    h5lens's xarray engine to apply to its rows (zarr's readers are refused those arrays:
    :mod:`h5lens.combining.encoding`). ``append_to``: a combined manifest the
    ``manifests`` are added after (its files are not read again). ``storage_options`` (or
    ``options``, :class:`~h5lens.OpenOptions`) serve the manifests and their files. HDF5
    files given in place of manifests are indexed on the way with ``index``; with
    ``scheduler`` (a ``distributed.Client`` or an address) or ``workers`` (a LocalCluster
    of that many processes, closed after), one dask task per file, as
    :func:`h5lens.index_many` runs them."""
    if for_readers not in FOR:
        raise InvalidOptionError(f"for_readers must be one of {FOR}. Got {for_readers!r}")
    if encoding not in ENCODINGS:
        raise InvalidOptionError(f"encoding must be one of {ENCODINGS}. Got {encoding!r}")
    if encoding != "equal" and dim is None:
        raise InvalidOptionError("encoding is for netCDF files combined along a dimension (dim=)")
    if append_to is not None and dim is None and (label is not None or keys is not None or index_unique is not None):
        raise InvalidOptionError(
            "label, keys and index_unique would take the combined manifest appended to for one file; "
            "combine every file again instead"
        )
    opening = options or OpenOptions(storage_options=storage_options)
    inputs = load_inputs(
        [*([append_to] if append_to is not None else []), *manifests], options=opening, index=index,
        scheduler=scheduler, workers=workers,
    )  # fmt: skip
    sources = SourceTable()
    try:
        if dim is None:
            combined = combine_anndata(
                inputs, sources, join=join, merge=merge, uns_merge=uns_merge, label=label, keys=keys,
                index_unique=index_unique, fill_value=fill_value, pairwise=pairwise,
            )  # fmt: skip
        else:
            combined = combine_netcdf(inputs, sources, dim=dim, encoding=encoding)
    finally:
        for item in inputs:
            item.close()
    rectilinear = sorted(path for path, stacked in combined.referenced.items() if stacked.rectilinear)
    if for_readers == "regular" and rectilinear:
        raise InvalidOptionError(
            f"{', '.join('/' + path for path in rectilinear)}: the files' chunks differ in length along the first "
            "axis (a rectilinear chunk grid); refused for regular readers (zarr reads such grids with "
            "array.rectilinear_chunks, h5lens's readers with nothing)"
        )
    first = inputs[0].manifest
    # the recorded types of attributes kept as the first file has them (written nodes have their own)
    attribute_types = {
        path: dict(types)
        for path, types in first.attribute_types.items()
        if path in combined.nodes
        and combined.nodes[path].get("attributes") == first.nodes.get(path, {}).get("attributes")
    }
    manifest = Manifest(
        nodes=combined.nodes,
        chunks=combined.chunks,
        sources=tuple(sources.sources),
        convention=first.convention,
        writer=first.writer,
        attribute_types=attribute_types,
    )
    manifest = replace(manifest, location=None)
    return manifest, Summary.of(inputs, combined, manifest)


__all__ = ["ENCODINGS", "FOR", "CombineKwargs", "Input", "Summary", "combine", "combine_with_summary"]
