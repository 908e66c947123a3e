"""h5lens: index HDF5 once, read it as zarr v3 forever."""

from __future__ import annotations

__version__ = "0.1.0"

from h5lens.codecs import register as _register_codecs  # noqa: E402

_register_codecs()  # also discoverable through the "zarr.codecs" entry point

from h5lens.api import index, open_group, open_store  # noqa: E402
from h5lens.errors import (  # noqa: E402
    AccessDeniedError,
    H5LensError,
    InvalidKeyError,
    InvalidOptionError,
    ManifestFormatError,
    MaterializeLimitError,
    NotHDF5Error,
    SourceNotFoundError,
    SourceReadError,
    StaleSourceError,
    StorageError,
    UnsupportedFeatureError,
)
from h5lens.scan.build import ScanProgress  # noqa: E402
from h5lens.manifest.model import Manifest  # noqa: E402
from h5lens.read.anndata import read_anndata, read_treedata  # noqa: E402
from h5lens.read.navigate import Dataset, Group, open  # noqa: E402, A004
from h5lens.validate import Problem, validate  # noqa: E402
from h5lens.store import ManifestStore  # noqa: E402

__all__ = [
    "AccessDeniedError",
    "Dataset",
    "Group",
    "H5LensError",
    "InvalidKeyError",
    "InvalidOptionError",
    "Manifest",
    "ManifestFormatError",
    "ManifestStore",
    "Problem",
    "MaterializeLimitError",
    "NotHDF5Error",
    "SourceNotFoundError",
    "SourceReadError",
    "StaleSourceError",
    "ScanProgress",
    "StorageError",
    "UnsupportedFeatureError",
    "index",
    "open",
    "open_group",
    "open_store",
    "read_anndata",
    "read_treedata",
    "validate",
]
