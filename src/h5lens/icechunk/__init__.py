"""Icechunk as a destination: a manifest committed to an Icechunk repository.

:func:`to_icechunk` writes, in one commit, what a manifest holds:

* every ``zarr.json`` document (groups and arrays, attributes included) as it is, except
  an array's ``chunk_key_encoding``, which becomes zarr's default (``c/0/1``), the one
  Icechunk stores (keys change, values do not);
* chunk references as Icechunk *virtual* references ``[url, offset, length]``, one
  columnar call per array and source, each with the source's identity as the checksum
  Icechunk checks before serving the bytes: the ETag, or else (local files) the
  modification time rounded up to the second; a source modified afterwards is refused,
  not misread;
* inline chunks (small arrays, materialised data) as Icechunk's own chunks;
* absent chunks as nothing (they read as the fill value).

The commit message names the sources; its metadata (``"h5lens"``) records them with a
digest of the manifest, so writing the same manifest of unchanged sources again commits
nothing.

Icechunk reads virtual chunks only through *virtual chunk containers* declared in the
repository's configuration, and only those the reader authorises.
:func:`open_repository` creates or opens a repository declaring and authorising the
containers a manifest needs (``file:///dir/`` for local files, ``s3://bucket/``,
``https://host/``); :func:`virtual_chunk_credentials` gives a reader what to authorise.

Modules: :mod:`~h5lens.icechunk.containers`, :mod:`~h5lens.icechunk.repository`,
:mod:`~h5lens.icechunk.commit`. Icechunk is imported only when used (``pip install 'h5lens[icechunk]'``).
"""

from __future__ import annotations

from h5lens.icechunk.commit import check_destination, to_icechunk, write_destination
from h5lens.icechunk.containers import quiet_logs, source_uris, virtual_chunk_containers, virtual_chunk_credentials
from h5lens.icechunk.repository import SCHEME, check_location, open_repository, parse_destination

__all__ = [
    "SCHEME",
    "check_destination",
    "check_location",
    "open_repository",
    "parse_destination",
    "quiet_logs",
    "source_uris",
    "to_icechunk",
    "virtual_chunk_containers",
    "virtual_chunk_credentials",
    "write_destination",
]
