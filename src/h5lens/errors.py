"""The exceptions h5lens raises.

Every error is an :class:`H5LensError`; each subclass also inherits the builtin
exception that fits, so ``except KeyError`` / ``except ValueError`` keep working.
They are grouped by what the caller can do about them.
"""

from __future__ import annotations

__all__ = [
    "H5LensError",
    "NotHDF5Error",
    "UnsupportedFeatureError",
    "MaterializeLimitError",
    "ManifestFormatError",
    "StaleSourceError",
    "InvalidKeyError",
    "SourceReadError",
    "SourceNotFoundError",
    "InvalidOptionError",
]


class H5LensError(Exception):
    """Base class of every error h5lens raises on purpose."""


class NotHDF5Error(H5LensError, ValueError):
    """The input is not a readable HDF5 file (empty, truncated, corrupt or another format)."""


class UnsupportedFeatureError(H5LensError, ValueError):
    """The HDF5 file uses a feature that h5lens cannot represent without losing data.

    The message names the HDF5 path and the feature; nothing is written.
    """


class MaterializeLimitError(UnsupportedFeatureError):
    """A dataset would have to be copied into the manifest but is larger than the limit set."""


class ManifestFormatError(H5LensError, ValueError):
    """A manifest file is malformed or of a version this h5lens cannot read."""


class StaleSourceError(H5LensError, RuntimeError):
    """A source file changed (size, ETag or mtime) since the manifest was written."""


class InvalidKeyError(H5LensError, ValueError):
    """A key that no writer of escaped keys can have produced."""


class SourceReadError(H5LensError, OSError):
    """Bytes a manifest points at could not be read (missing source, short read, network)."""


class SourceNotFoundError(H5LensError, FileNotFoundError):
    """The file to index, or a source a manifest points at, does not exist."""


class InvalidOptionError(H5LensError, ValueError):
    """An argument h5lens was called with is out of range or not one of the choices."""
