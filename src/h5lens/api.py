"""The public entry points: index a file (the scanner), open a manifest (re-exported from
the reader side, :mod:`h5lens.read.open`, which needs no scanner)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Unpack

from h5lens import combining as _combining
from h5lens._version import __version__
from h5lens.adata import readers as _reader
from h5lens.errors import NotHDF5Error
from h5lens.manifest.model import Manifest
from h5lens.read import datatypes as _datatypes  # noqa: F401 - committed datatypes (navigate.DATASET_KINDS)
from h5lens.read import navigate
from h5lens.read import ragged as _ragged  # noqa: F401 - navigation's ragged datasets (navigate.DATASET_KINDS)
from h5lens.read.navigate import Group
from h5lens.read.open import load_manifest, open_group, open_store
from h5lens.read.options import OpenKwargs, OpenOptions, PathOrManifest
from h5lens.scan.build import build_manifest
from h5lens.scan.options import (
    DEFAULT_CONVENTION,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_MATERIALIZE_LIMIT,
    DEFAULT_READ_BLOCK_SIZE,
    DEFAULT_SLAB_BYTES,
    ScanOptions,
    ScanProgress,
)
from h5lens.scan.other_files import recorded_sources
from h5lens.scan.source import open_source

__all__ = [
    "PathOrManifest", "combine", "index", "load_manifest", "open", "open_group", "open_store", "read_anndata", "read_treedata",
]  # fmt: skip


def index(
    source: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
    convention: str = DEFAULT_CONVENTION,
    slab_bytes: int = DEFAULT_SLAB_BYTES,
    materialize_limit: int | None = DEFAULT_MATERIALIZE_LIMIT,
    url: str | None = None,
    progress: Callable[[ScanProgress], None] | None = None,
    read_block_size: int = DEFAULT_READ_BLOCK_SIZE,
    skip_unreadable: bool = False,
) -> Manifest:
    """Scan the HDF5 file ``source`` (path or fsspec URL) into a :class:`Manifest`.

    Parameters
    ----------
    inline_threshold
        Arrays whose whole stored size is at most this many bytes are copied into the
        manifest; the chunks of bigger arrays stay references however small each is.
    convention
        ``"released"`` (what readers of the unified convention ship: 0-d scalars, bare
        NaN tokens) or ``"proposal"`` (``_SCALAR`` shape-(1,) arrays, NaN as strings).
    slab_bytes
        Target size of the virtual chunks big contiguous datasets are cut into.
    materialize_limit
        Refuse (:class:`~h5lens.errors.MaterializeLimitError`, naming the dataset and why)
        to copy more than this many bytes of one dataset into the manifest (64 MiB by
        default: data no zarr codec reads, such as a filter without a codec, is decoded
        and copied); ``None`` copies whatever must be copied.
    url
        The URL to record for the source instead of ``source`` (e.g. a path relative to
        where the manifest will live, or the bucket a local copy came from).
    progress
        Called with a :class:`~h5lens.ScanProgress` (:mod:`h5lens.scan.options`) (datasets done and total, the
        HDF5 path, bytes read from a remote source, chunks found) per dataset, and every
        MiB read from a remote source.
    read_block_size
        Remote files only: libhdf5's metadata reads are served from blocks of at most
        this many bytes (starting at 16 KiB, doubling while reads run on). Larger blocks
        take fewer requests and fetch more bytes that are not metadata; see docs/cloud.md.
    skip_unreadable
        An object the scan cannot read (a dataset or attribute h5py cannot read either, such
        as HDF5 time values; data behind a filter libhdf5 cannot load here; a damaged
        dataset) refuses the whole file by default (:class:`~h5lens.errors.UnsupportedFeatureError`
        or :class:`~h5lens.errors.NotHDF5Error`, naming it). With ``True`` it is left out,
        everything else is indexed, and :attr:`Manifest.unreadable` lists what was left out
        and why (written into the manifest); reading it through h5lens raises naming it.
        Failures of the file as a whole, and datasets over ``materialize_limit``, still raise.
    """
    location = os.fspath(source)
    # checked before any reading
    options = ScanOptions(inline_threshold, convention, slab_bytes, materialize_limit, skip_unreadable=skip_unreadable)
    opened = open_source(location, storage_options=storage_options, read_block_size=read_block_size)
    try:
        manifest = build_manifest(
            opened,
            options,
            writer=__version__,
            progress=progress,
        )
    except (NotHDF5Error, OSError, RuntimeError) as e:
        # libhdf5 reports a failed remote read as an unreadable file: say what really failed
        failure = opened.failure(e)
        if failure is e:
            raise
        raise failure from None
    finally:
        opened.close()
    return replace(manifest, sources=recorded_sources(manifest.sources, location, url))


def open(  # noqa: A001 - h5lens.open
    manifest_or_path: PathOrManifest, *, options: OpenOptions | None = None, **given: Unpack[OpenKwargs]
) -> Group:
    """The root of a manifest (object, manifest file or URL in any form, ``icechunk://PATH``,
    or an HDF5 file, indexed in memory), navigated the way h5py navigates the file it came
    from: see :mod:`h5lens.read.navigate`. Externally linked files without a manifest are
    indexed on the fly. The options are those of :func:`h5lens.open_store` (the same
    verification: a source changed since indexing is refused)."""
    return navigate.open(manifest_or_path, index=index, options=options, **given)


@functools.wraps(_reader.read_anndata, assigned=("__doc__", "__annotations__"))
def read_anndata(manifest: Any, **kwargs: Any) -> Any:
    """:func:`h5lens.adata.readers.read_anndata`; an HDF5 file (an ``.h5ad``) in place of a
    manifest is indexed in memory first, as :func:`open` does."""
    return _reader.read_anndata(manifest, index=index, **kwargs)


@functools.wraps(_reader.read_treedata, assigned=("__doc__", "__annotations__"))
def read_treedata(manifest: Any, **kwargs: Any) -> Any:
    """:func:`h5lens.adata.readers.read_treedata`; an HDF5 file (an ``.h5td``) in place of a
    manifest is indexed in memory first, as :func:`open` does."""
    return _reader.read_treedata(manifest, index=index, **kwargs)


@functools.wraps(_combining.combine, assigned=("__doc__", "__annotations__"))
def combine(manifests: Any, **options: Any) -> Manifest:
    """:func:`h5lens.combining.combine`; HDF5 files in place of manifests are indexed in
    memory first, as :func:`open` does."""
    return _combining.combine(manifests, index=index, **options)
