"""What a scan is asked to do, and what it reports: defined once, for the API and the CLI.

No heavy imports here: the command line reads these defaults without loading h5py.
"""

from __future__ import annotations

from dataclasses import dataclass

from h5lens.errors import InvalidOptionError
from h5lens.format import convention

CONVENTIONS = convention.PROFILES
DEFAULT_CONVENTION = convention.DEFAULT_PROFILE
DEFAULT_INLINE_THRESHOLD = 1000  # bytes: arrays stored in at most this many bytes are copied inline
DEFAULT_SLAB_BYTES = 4 << 20  # virtual chunk size for big contiguous datasets


class DefaultLimit(int):
    """The default materialize limit: a number of bytes that knows it was not chosen.

    A dataset no zarr codec can read as stored (a filter without a codec, compact or
    external storage) is decoded and copied into the manifest; beyond this many bytes of
    one dataset indexing stops and says so: a manifest must stay a map of the data, not a
    copy of it. Variable-length values (strings, references) can only ever be copied, and
    an atlas's cell names are what the manifest is read for: the default limit lets them
    through, a limit given explicitly does not."""


DEFAULT_MATERIALIZE_LIMIT = DefaultLimit(64 << 20)
# Remote files: libhdf5 reaches metadata through many small dependent reads; a block cache
# turns them into few requests. (Chunk indexes are read by h5lens's own walker, in batches.)
DEFAULT_READ_BLOCK_SIZE = 1 << 20
MIN_READ_BLOCK_SIZE = 4096
READ_CACHE_BYTES = 64 << 20  # the block cache holds this much (at least 32 blocks)
READ_UNIT = 4 << 10  # the block cache's unit: an object header between chunks costs a few, not a block


@dataclass(frozen=True)
class ScanProgress:
    """Where a scan is, for progress displays: called per dataset, and for remote files
    also every MiB that libhdf5 reads (a big chunk index can take a while)."""

    datasets_done: int
    datasets_total: int
    path: str  # the HDF5 path being scanned
    bytes_read: int  # from a remote source so far (0 for local files, read by libhdf5 natively)
    chunks: int  # chunks found so far


@dataclass(frozen=True)
class ScanOptions:
    """What a scan is asked to do; checked once, here (the messages name the arguments of
    :func:`h5lens.index`; the command line checks its options where it parses them)."""

    inline_threshold: int = DEFAULT_INLINE_THRESHOLD
    convention: str = DEFAULT_CONVENTION
    slab_bytes: int = DEFAULT_SLAB_BYTES
    materialize_limit: int | None = DEFAULT_MATERIALIZE_LIMIT  # bytes of one dataset; None: no limit
    profiles: bool = True  # rewrite h5ad / h5td layouts into what their zarr readers expect
    # an object the scan cannot read (a dataset or attribute h5py cannot read either, a filter
    # libhdf5 cannot load here, damaged data) is left out and listed in the manifest
    # (Manifest.unreadable) instead of refusing the whole file
    skip_unreadable: bool = False

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise InvalidOptionError(f"convention must be one of {CONVENTIONS}. Got {self.convention!r}")
        if not isinstance(self.skip_unreadable, bool):
            raise InvalidOptionError(f"skip_unreadable must be True or False. Got {self.skip_unreadable!r}")
        for name, lowest in (("inline_threshold", 0), ("slab_bytes", 1), ("materialize_limit", 0)):
            value = getattr(self, name)
            if value is None and name == "materialize_limit":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
                raise InvalidOptionError(f"{name} must be a whole number of bytes, at least {lowest}. Got {value!r}")
