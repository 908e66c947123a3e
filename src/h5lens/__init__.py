"""h5lens: index HDF5 once, read it as zarr v3 forever.

The public API is re-exported lazily (PEP 562): ``import h5lens`` costs next to
nothing, and ``h5lens.index`` imports the scanner (h5py, zarr) on first use. That
keeps the ``h5lens`` command quick to start and quick to interrupt.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from h5lens._version import __version__ as __version__

# public name -> the module that defines it
_EXPORTS = {
    "index": "h5lens.api",
    "combine": "h5lens.api",
    "index_many": "h5lens.many",
    "to_icechunk": "h5lens.icechunk",
    "IndexManyResult": "h5lens.many",
    "FileRecord": "h5lens.many",
    "open_group": "h5lens.read.open",
    "open_store": "h5lens.read.open",
    "OpenOptions": "h5lens.read.options",
    "load_manifest": "h5lens.read.options",
    "ScanProgress": "h5lens.scan.options",
    "Manifest": "h5lens.manifest.model",
    "read_anndata": "h5lens.api",
    "read_treedata": "h5lens.api",
    "Dataset": "h5lens.read.navigate",
    "Group": "h5lens.read.navigate",
    "open": "h5lens.api",
    "Problem": "h5lens.read.validation",
    "validate": "h5lens.read.validation",
    "ManifestStore": "h5lens.store",
    "Limits": "h5lens.manifest.limits",
    "fast_reads": "h5lens.fast",
    "stored_chunks": "h5lens.read.chunking",
    "StoredChunks": "h5lens.read.chunking",
    "whole_rows": "h5lens.adata.whole_rows",
    **{
        name: "h5lens.errors"
        for name in (
            "AccessDeniedError",
            "H5LensError",
            "InvalidKeyError",
            "InvalidOptionError",
            "ManifestFormatError",
            "ManifestLimitError",
            "MaterializeLimitError",
            "NotAManifestError",
            "NotHDF5Error",
            "RefusedSourceError",
            "SourceNotFoundError",
            "SourceReadError",
            "StaleSourceError",
            "StorageError",
            "UnsupportedFeatureError",
        )
    },
}

__all__ = [
    "AccessDeniedError",
    "Dataset",
    "FileRecord",
    "Group",
    "H5LensError",
    "IndexManyResult",
    "InvalidKeyError",
    "InvalidOptionError",
    "Limits",
    "Manifest",
    "ManifestFormatError",
    "ManifestLimitError",
    "ManifestStore",
    "Problem",
    "MaterializeLimitError",
    "NotAManifestError",
    "NotHDF5Error",
    "OpenOptions",
    "RefusedSourceError",
    "SourceNotFoundError",
    "SourceReadError",
    "StaleSourceError",
    "ScanProgress",
    "StorageError",
    "StoredChunks",
    "UnsupportedFeatureError",
    "combine",
    "fast_reads",
    "index",
    "index_many",
    "load_manifest",
    "open",
    "open_group",
    "open_store",
    "read_anndata",
    "read_treedata",
    "stored_chunks",
    "to_icechunk",
    "validate",
    "whole_rows",
]

if TYPE_CHECKING:  # what type checkers and IDEs see: the eager imports this replaces
    from h5lens.adata.whole_rows import whole_rows
    from h5lens.api import combine, index, open, read_anndata, read_treedata  # noqa: A004
    from h5lens.errors import (
        AccessDeniedError,
        H5LensError,
        InvalidKeyError,
        InvalidOptionError,
        ManifestFormatError,
        ManifestLimitError,
        MaterializeLimitError,
        NotAManifestError,
        NotHDF5Error,
        RefusedSourceError,
        SourceNotFoundError,
        SourceReadError,
        StaleSourceError,
        StorageError,
        UnsupportedFeatureError,
    )
    from h5lens.fast import fast_reads
    from h5lens.icechunk import to_icechunk
    from h5lens.manifest.limits import Limits
    from h5lens.manifest.model import Manifest
    from h5lens.many import FileRecord, IndexManyResult, index_many
    from h5lens.read.chunking import StoredChunks, stored_chunks
    from h5lens.read.navigate import Dataset, Group
    from h5lens.read.open import open_group, open_store
    from h5lens.read.options import OpenOptions, load_manifest
    from h5lens.read.validation import Problem, validate
    from h5lens.scan.options import ScanProgress
    from h5lens.store import ManifestStore

_codecs_registered = False


def _register_codecs() -> None:
    """Register the LZF codec with zarr before anything of h5lens opens an array (it is also
    found through the ``zarr.codecs`` entry point of an installed h5lens; this covers a
    source checkout on ``sys.path``). It imports zarr, so it runs on first use, not on import."""
    global _codecs_registered
    if not _codecs_registered:
        from h5lens.codecs import register

        register()
        _codecs_registered = True


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module != "h5lens.errors":
        _register_codecs()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__")})
