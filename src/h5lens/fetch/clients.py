"""Which byte reader reads a URL, and the two questions asked of a URL before reading it.

:func:`open_client` makes the :class:`~h5lens.fetch.protocol.ByteReader` that fits a URL:

* a local path: :class:`~h5lens.fetch.local.LocalClient` (``os.pread``, views of a map);
* ``s3://``, ``az://`` / ``abfs://`` (an account and its key, a SAS token or ``anon``) and
  plain ``http(s)://``, where the options say all obstore needs
  (:mod:`h5lens.fetch.obstore_options`): :class:`~h5lens.fetch.obstore_client.ObstoreClient`
  (which goes on through fsspec if its first request fails for another reason than the
  object's absence);
* anything else (gcs, azure, ssh ...; S3 options only botocore understands, HTTP with
  headers): :class:`~h5lens.fetch.fsspec_client.FsspecClient`.

An ``http(s)://`` URL is read through an :class:`~h5lens.fetch.http_client.HTTPClient`,
which asks it once where its bytes are (following redirects to a signed URL itself, and
again when that signature expires), then reads them with the reader that fits the target.

Options keyed by a URL prefix apply to the URLs under it
(:mod:`h5lens.fetch.source_options`).

An ``s3://`` source whose options configure no signing, where no credentials are found,
is read unsigned (:mod:`h5lens.fetch.credentials`: public data needs no setup).

``H5LENS_CLIENT=fsspec`` (or ``obstore``) forces a choice. Retries follow
:mod:`h5lens.fetch.retry`, one policy for all; HTTP servers that ignore ``Range`` are found
once (:mod:`h5lens.fetch.ranges`). :func:`exists` and :func:`read_head` ask a URL whether
it names a file, and for its first bytes, through the same readers (a destination's
check, the manifest an external link names).
"""

from __future__ import annotations

import logging
from typing import Any

from h5lens.errors import NotHDF5Error, SourceNotFoundError
from h5lens.fetch.credentials import reads_unsigned
from h5lens.fetch.fsspec_client import FsspecClient
from h5lens.fetch.http_client import HTTPClient
from h5lens.fetch.local import LocalClient
from h5lens.fetch.obstore_client import CLIENT_ENV, PROBE_POLICY, ObstoreClient, forced_client
from h5lens.fetch.obstore_options import obstore_config
from h5lens.fetch.protocol import ByteReader
from h5lens.fetch.source_options import options_for
from h5lens.manifest.locations import is_remote

logger = logging.getLogger("h5lens.fetch")


def open_client(url: str, storage_options: dict[str, Any] | None = None) -> ByteReader:
    """The reader of ``url`` (see the module docstring), with the options of the longest
    URL prefix in ``storage_options`` it starts with (:mod:`h5lens.fetch.source_options`).
    Nothing is sent yet."""
    if not is_remote(url):
        return LocalClient(url)
    storage_options = options_for(url, storage_options)
    unsigned = reads_unsigned(url, storage_options)
    if unsigned:  # no credentials anywhere: public data, read as the AWS CLI's --no-sign-request does
        storage_options = {**(storage_options or {}), "anon": True}
    if url.lower().startswith(("http://", "https://")):
        return HTTPClient(url, storage_options, remote_client)  # resolves redirects once, not per read
    return remote_client(url, storage_options, unsigned=unsigned)


def remote_client(url: str, storage_options: dict[str, Any] | None, *, unsigned: bool = False) -> ByteReader:
    """obstore's reader of ``url`` where the options say all it needs, else fsspec's."""
    forced = forced_client()
    config = obstore_config(url, storage_options) if forced != "fsspec" else None
    if forced == "obstore" and config is None:
        logger.info("%s: obstore cannot be configured from these storage options; using fsspec", url)
    if config is not None:
        return ObstoreClient(url, storage_options, config, unsigned=unsigned)
    return FsspecClient(url, storage_options, unsigned=unsigned)


def exists(url: str, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether ``url`` names a file (an object) there is: a stat (a HEAD), asked as a first
    request (a down endpoint is an error within seconds, not "no"). A directory is no file."""
    client = open_client(url, storage_options)
    try:
        client.stat(probe=True)
    except (SourceNotFoundError, NotHDF5Error):
        return False
    finally:
        client.close()
    return True


def read_head(url: str, length: int, storage_options: dict[str, Any] | None = None) -> bytes | None:
    """The first ``length`` bytes of the file at ``url`` (all of it if it is shorter), or None
    if there is none: a stat, then a read of what there is."""
    client = open_client(url, storage_options)
    try:
        try:
            size = client.stat(probe=True).get("size")
        except SourceNotFoundError:
            return None
        wanted = length if size is None else min(length, int(size))
        return bytes(client.get_sync(0, wanted, exact=False)) if wanted else b""
    finally:
        client.close()


Client = ByteReader  # the name the readers have used

__all__ = [
    "CLIENT_ENV",
    "PROBE_POLICY",
    "ByteReader",
    "Client",
    "FsspecClient",
    "HTTPClient",
    "LocalClient",
    "ObstoreClient",
    "exists",
    "open_client",
    "read_head",
    "remote_client",
]
