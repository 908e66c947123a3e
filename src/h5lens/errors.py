"""The exceptions h5lens raises.

Every error is an :class:`H5LensError`; each subclass also inherits the builtin
exception that fits, so ``except KeyError`` / ``except ValueError`` keep working.
They are grouped by what the caller can do about them::

    H5LensError
    ├── NotHDF5Error (ValueError)              the input is not a readable HDF5 file
    ├── UnsupportedFeatureError (ValueError)   the file uses what h5lens cannot represent
    │   └── MaterializeLimitError              ... within materialize_limit
    ├── ManifestFormatError (ValueError)       a manifest is malformed
    │   ├── ManifestLimitError                 ... or claims more than the limits allow
    │   └── NotAManifestError                  ... or is another kind of file altogether
    ├── InvalidKeyError (ValueError)           an escaped key no writer can have produced
    ├── InvalidOptionError (ValueError)        an argument is out of range or refused
    ├── StaleSourceError (RuntimeError)        a source changed since indexing
    └── StorageError (OSError)                 storage could not be reached or refused
        ├── SourceNotFoundError (FileNotFoundError)  a file or object does not exist
        ├── AccessDeniedError (PermissionError)      credentials missing or refused
        │   └── RefusedSourceError                   a manifest points where it may not
        └── SourceReadError                          bytes could not be read (or decoded)
"""

from __future__ import annotations

from typing import Self

__all__ = [
    "H5LensError",
    "NotHDF5Error",
    "UnsupportedFeatureError",
    "MaterializeLimitError",
    "ManifestFormatError",
    "ManifestLimitError",
    "NotAManifestError",
    "StaleSourceError",
    "InvalidKeyError",
    "SourceReadError",
    "SourceNotFoundError",
    "InvalidOptionError",
    "StorageError",
    "AccessDeniedError",
    "RefusedSourceError",
]


class H5LensError(Exception):
    """Base class of every error h5lens raises on purpose.

    A message that suggests an argument names it as Python spells it (``allow_local=[...]``);
    where the command line spells it otherwise (``--allow-local PATH``), :attr:`cli_message`
    holds the message in the command line's words, and the ``h5lens`` command prints that."""

    cli_message: str | None = None

    def at_cli(self, message: str) -> Self:
        """Give the command line's wording of this error (returns the error, to raise it)."""
        self.cli_message = message
        return self


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


class NotAManifestError(ManifestFormatError):
    """What was given as a manifest is another kind of file: ``kind`` says which
    (``"hdf5"``: an HDF5 file, which the command line indexes on the fly where it reads;
    ``"zarr v2"``: kerchunk's zarr v2 references; ``"other"``)."""

    def __init__(self, message: str, *, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind


class ManifestLimitError(ManifestFormatError):
    """A manifest claims more than :class:`h5lens.manifest.limits.Limits` allow (a grid of
    10^12 chunks, a huge document or inline payload): refused before allocating it."""


class StaleSourceError(H5LensError, RuntimeError):
    """A source file changed (size, ETag or mtime) since the manifest was written.

    ``url`` is the source, ``changes`` what differs (``"size 10 → 12"``, ...)."""

    def __init__(self, message: str, *, url: str = "", changes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.url = url
        self.changes = changes


class InvalidKeyError(H5LensError, ValueError):
    """A key that no writer of escaped keys can have produced."""


class StorageError(H5LensError, OSError):
    """A file or object store could not be reached, or refused the request (network,
    endpoint, a missing fsspec backend, a destination that cannot be written). The message
    names the URL."""


class SourceReadError(StorageError):
    """Bytes a manifest points at could not be read or decoded (short read, network, a
    chunk that does not decode); the message names the chunk key and byte range."""


class SourceNotFoundError(StorageError, FileNotFoundError):
    """A file h5lens was asked to read does not exist: the file to index, a manifest, or
    a source a manifest points at."""


class AccessDeniedError(StorageError, PermissionError):
    """Storage refused access: no credentials, wrong credentials, or not allowed."""


class InvalidOptionError(H5LensError, ValueError):
    """An argument h5lens was called with is out of range or not one of the choices."""


class RefusedSourceError(AccessDeniedError):
    """A manifest points at a source it may not reach: a URL it does not declare, or a local
    file when the manifest itself came from a remote URL (unless allowed explicitly)."""


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name if it has none): what a
    one-line report of a failure below h5lens quotes."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__

