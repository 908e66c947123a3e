"""Where things are: the one home of h5lens's rules about paths and URLs.

A location is a local path (``file://`` allowed) or an fsspec URL (``s3://``,
``https://`` ...). Manifests record their sources' URLs, absolute or relative to the
manifest itself (so that a manifest written beside or below its source's directory travels
with it). Nothing here does I/O except :func:`same_location` (``os.path.samefile``).
"""

from __future__ import annotations

import os
import posixpath


def is_remote(location: str) -> bool:
    """Whether ``location`` is a URL of a remote store (anything with a scheme but ``file://``).
    An Icechunk repository (``icechunk://PATH``) is where its ``PATH`` is."""
    location = location.removeprefix("icechunk://")
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> str:
    """The local path of a local location (``file://`` removed)."""
    return location.removeprefix("file://")


def scheme(location: str) -> str:
    """``s3``, ``https`` ...; ``file`` for local paths."""
    return location.split("://", 1)[0].lower() if is_remote(location) else "file"


def absolute(location: str) -> str:
    """A remote URL as it is; a local path made absolute (what a manifest records by default)."""
    return location if is_remote(location) else os.path.abspath(local_path(location))


def resolve(url: str, base: str | None) -> str:
    """A source URL as recorded in the manifest at ``base``: relative URLs resolve against
    the manifest's own location (its directory or prefix)."""
    if "://" in url or os.path.isabs(url) or base is None:
        return url
    if is_remote(base):
        protocol, rest = base.split("://", 1)
        return f"{protocol}://" + posixpath.normpath(posixpath.join(posixpath.dirname(rest), url))
    return os.path.normpath(os.path.join(os.path.dirname(local_path(base)), url))


def relative_to_manifest(source: str, manifest: str) -> str | None:
    """``source`` relative to a manifest written at ``manifest``, where the manifest lies in
    the source's directory or below it (``atlas.h5ad``, ``../atlas.h5ad``): the two then
    travel together. None where they do not (different stores, the manifest elsewhere)."""
    if is_remote(source) or is_remote(manifest):
        if not (is_remote(source) and is_remote(manifest)):
            return None
        src_scheme, src_path = source.split("://", 1)
        man_scheme, man_path = manifest.split("://", 1)
        if src_scheme.lower() != man_scheme.lower():
            return None
        src_dir, man_dir = posixpath.dirname(src_path), posixpath.dirname(man_path)
        if not (man_dir == src_dir or man_dir.startswith(src_dir.rstrip("/") + "/")):
            return None
        return posixpath.relpath(src_path, man_dir)
    src = os.path.abspath(local_path(source))
    man_dir = os.path.dirname(os.path.abspath(local_path(manifest)))
    src_dir = os.path.dirname(src)
    if not (man_dir == src_dir or man_dir.startswith(src_dir.rstrip(os.sep) + os.sep)):
        return None
    return os.path.relpath(src, man_dir)


def location_key(location: str) -> tuple[str, str]:
    """A comparable form of a location: (protocol, path) with links, ``file://``, ``.``
    and ``..`` resolved for local paths, and the protocol's own normal form for URLs."""
    if not is_remote(location):
        return ("file", os.path.realpath(local_path(location)))
    import fsspec

    protocol = scheme(location)
    try:
        cls = fsspec.get_filesystem_class(protocol)
        path = cls._strip_protocol(location)
        protocol = cls.protocol if isinstance(cls.protocol, str) else cls.protocol[0]
    except (ImportError, ValueError):
        path = location.split("://", 1)[1]
    return (protocol, str(path).rstrip("/"))


def same_location(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name the same file or object (hard links included, locally)."""
    if location_key(a) == location_key(b):
        return True
    if not is_remote(a) and not is_remote(b):
        try:
            return os.path.samefile(local_path(a), local_path(b))
        except OSError:
            return False
    return False


__all__ = [
    "absolute",
    "is_remote",
    "local_path",
    "location_key",
    "relative_to_manifest",
    "resolve",
    "same_location",
    "scheme",
]
