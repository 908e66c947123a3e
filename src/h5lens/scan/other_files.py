"""The other files a scanned file's data lives in: external raw storage and the source
files of virtual datasets, each a source of the manifest like the file itself.

Every file is described once (size and what identifies its version: a local file's
fingerprint, an object's ETag), so that a reader refuses a source rewritten after indexing
whichever file it is; references then name it by its place in the manifest's sources.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from h5lens.fetch.clients import ByteReader, open_client
from h5lens.manifest.locations import absolute, is_remote, local_path, resolve, same_location
from h5lens.manifest.tables import Source


class OtherFiles:
    """The manifest's sources as a scan finds them: the scanned file (source 0), then each
    other file its references point into, in the order first met."""

    def __init__(self, scanned: Source, storage_options: dict[str, Any] | None) -> None:
        self.scanned_url = absolute(scanned.url)
        self.storage_options = storage_options
        self.sources: list[Source] = [scanned]
        self._numbers: dict[str, int] = {self.scanned_url: 0}
        self._clients: dict[str, ByteReader] = {}

    @property
    def remote(self) -> bool:
        return is_remote(self.scanned_url)

    def beside(self, name: str) -> str:
        """``name`` (as libhdf5 records it) resolved against the scanned file's directory or
        prefix; absolute names as they are."""
        if "://" in name or os.path.isabs(name):
            return name
        if self.remote:
            scheme, rest = self.scanned_url.split("://", 1)
            return f"{scheme}://" + posixpath.normpath(posixpath.join(posixpath.dirname(rest), name))
        return os.path.normpath(os.path.join(os.path.dirname(local_path(self.scanned_url)), name))

    def number(self, url: str) -> int:
        """The source number of ``url``, described (one stat, a fingerprint) when first met."""
        url = absolute(url)
        found = self._numbers.get(url)
        if found is None:
            client = self._clients.get(url) or open_client(url, self.storage_options)
            try:
                info = client.stat(fingerprint=True)
            finally:
                if url not in self._clients:
                    client.close()  # thousands of virtual sources: no descriptor kept per file
            etag = info.get("etag")
            source = Source(url, int(info["size"]), None if etag else info.get("mtime"), etag, info.get("fingerprint"))
            found = self._numbers[url] = len(self.sources)
            self.sources.append(source)
        return found

    def client(self, url: str) -> ByteReader:
        url = absolute(url)
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = open_client(url, self.storage_options)
        return client

    def size(self, url: str) -> int:
        size = self.sources[self.number(url)].size
        assert size is not None  # every source described here has one
        return size

    def read(self, url: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of ``url``, fewer where the file ends first."""
        return bytes(self.client(url).get_sync(offset, length, exact=False))

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def recorded_sources(sources: Sequence[Source], location: str, url: str | None) -> list[Source]:
    """The sources a manifest records for a scan of ``location``: the scanned file under
    ``url`` (as given, default its absolute location), and each other file beside or below
    it at the same place relative to ``url`` (an index of a local copy published with
    ``--url s3://...`` points at the copies uploaded beside it); other files as they are.

    What identifies a local file's version says nothing of a file at another URL but its
    size: a source moved to an absolute URL elsewhere keeps only the size."""
    scanned = absolute(location)
    if url is None:
        return [replace(sources[0], url=scanned), *sources[1:]]
    moved = ("://" in url or os.path.isabs(url)) and not same_location(url, location)
    recorded = []
    for number, source in enumerate(sources):
        if number == 0:
            target: str | None = url
        else:
            below = _below(source.url, scanned)
            target = None if below is None else resolve(below, url)
        if target is None:
            recorded.append(source)
        elif moved:
            recorded.append(Source(target, source.size))
        else:
            recorded.append(replace(source, url=target))
    return recorded


def _below(target: str, scanned: str) -> str | None:
    """``target`` relative to the scanned file's directory, if it lies there or below."""
    if is_remote(target) != is_remote(scanned):
        return None
    if is_remote(target):
        t_scheme, t_path = target.split("://", 1)
        s_scheme, s_path = scanned.split("://", 1)
        base = posixpath.dirname(s_path)
        if t_scheme.lower() != s_scheme.lower() or not t_path.startswith(base.rstrip("/") + "/"):
            return None
        return posixpath.relpath(t_path, base)
    base = os.path.dirname(local_path(scanned))
    if not local_path(target).startswith(base.rstrip(os.sep) + os.sep):
        return None
    return os.path.relpath(local_path(target), base)
