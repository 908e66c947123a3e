"""Manifests in files: the one place that knows the file formats.

The model (:mod:`h5lens.manifest.model`) holds a manifest in memory and knows no format;
its ``save`` / ``load`` / ``to_json`` / ``from_json`` / ``to_dict`` / ``from_dict``
conveniences come here. This module sits below the model: it writes any manifest it is
given, and its readers return the manifest's parts (:class:`~h5lens.manifest.tables.ManifestParts`),
which ``Manifest.load`` and ``Manifest.from_dict`` build the manifest from. Two forms:

* ``json``: kerchunk reference JSON version 1 with zarr v3 keys
  (:mod:`h5lens.manifest.refs_json`), what any fsspec ``ReferenceFileSystem`` reads;
* ``compact``: chunk tables as compressed columns, loaded when first used
  (:mod:`h5lens.manifest.compact`), for manifests with millions of chunks. A binary
  file: its name ends in ``.h5lens``, never ``.json``.

Reading detects the form from the file's first bytes. Writing takes the form from the
name where it says one (``.json``, ``.h5lens``); a form asked for that contradicts the
name is refused.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from h5lens.errors import InvalidOptionError, ManifestFormatError, NotAManifestError
from h5lens.manifest.files import FileRanges, write_bytes_atomic
from h5lens.manifest.limits import DEFAULT_LIMITS, Limits

# The forms (refs_json, compact) are imported where they are used, the tables only for type
# checking: the command line and xarray's engine discovery read this module's names and
# suffixes without importing numpy.
if TYPE_CHECKING:
    from h5lens.manifest.tables import ManifestParts

FORMATS = ("json", "compact")
JSON_SUFFIX = ".json"
COMPACT_SUFFIX = ".h5lens"
SUFFIXES = {"json": JSON_SUFFIX, "compact": COMPACT_SUFFIX}
# Under a name that says no form, manifests with more chunk references than this are written
# compact: JSON costs ~36 bytes per reference and seconds to parse at a million.
COMPACT_ABOVE = 100_000
_FIRST_READ = 1 << 20


def named_format(path: str | os.PathLike[str] | None) -> str | None:
    """The form a file name promises: ``json`` for ``.json``, ``compact`` for ``.h5lens``."""
    if path is None:
        return None
    name = os.fspath(path).rstrip("/").lower()
    return next((form for form, suffix in SUFFIXES.items() if name.endswith(suffix)), None)


def choose_format(
    manifest: ManifestParts,
    format: str | None = None,  # noqa: A002 - the documented name
    path: str | os.PathLike[str] | None = None,
) -> str:
    """The form to write: ``format`` if given (checked against what ``path``'s name
    promises), else the form the name says, else ``compact`` above :data:`COMPACT_ABOVE`
    chunk references."""
    if format is None:
        named = named_format(path)
        if named is not None:
            return named
        return "compact" if manifest.n_chunks > COMPACT_ABOVE else "json"
    return _checked_format(format, path)


def _checked_format(format: str, path: str | os.PathLike[str] | None) -> str:  # noqa: A002
    """``format``, if it is one of :data:`FORMATS` and ``path``'s name does not promise another."""
    named = named_format(path)
    if format not in FORMATS:
        raise InvalidOptionError(f"format must be one of {FORMATS}. Got {format!r}")
    if named is not None and named != format and path is not None:
        where = os.fspath(path)
        said = f"{where}: the name promises the {named} form; name the {format} form"
        stem = where[: len(where) - len(SUFFIXES[named])]
        raise InvalidOptionError(f"{said} {stem}{SUFFIXES[format]}").at_cli(
            f"{said} {stem}{SUFFIXES[format]} (or pass --format {named})"
        )
    return format


def choose_format_for(path: str | os.PathLike[str], format: str | None) -> None:  # noqa: A002
    """Check, before any work, that ``format`` does not contradict ``path``'s name."""
    if format is not None:
        _checked_format(format, path)


def to_dict(manifest: ManifestParts) -> dict[str, Any]:
    """The kerchunk reference JSON (version 1, zarr v3 keys) as a dict."""
    from h5lens.manifest.refs_json import manifest_to_refs

    return manifest_to_refs(manifest)


def from_dict(data: dict[str, Any], *, limits: Limits = DEFAULT_LIMITS) -> ManifestParts:
    """The parts of a manifest given as kerchunk reference JSON (a parsed dict); see
    ``Manifest.from_dict``."""
    from h5lens.manifest.refs_json import parts_from_refs

    return parts_from_refs(data, limits=limits)


def encode(manifest: ManifestParts, format: str) -> bytes:  # noqa: A002
    """The bytes of ``manifest`` in one of :data:`FORMATS`."""
    if choose_format(manifest, format) == "compact":
        from h5lens.manifest import compact

        return compact.encode(manifest)
    import orjson

    return orjson.dumps(to_dict(manifest))


def write(
    manifest: ManifestParts,
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    format: str | None = None,  # noqa: A002
    force: bool = False,
    relative_sources: bool = True,
) -> str:
    """Write ``manifest`` at ``path`` (local or fsspec URL) atomically, never over one of its
    sources, nor (unless ``force``) over an existing file that is not a manifest. The form:
    :func:`choose_format`. With ``relative_sources``, a source in the manifest's directory
    or above it is recorded relative to the manifest (``atlas.h5ad``, ``../atlas.h5ad``), so
    that the two can be copied together. Returns the form written."""
    from h5lens.manifest.destination import existing_head, refuse_local_sources, refuse_overwrite, refuse_sources
    from h5lens.manifest.locations import resolve

    target = os.fspath(path)
    chosen = choose_format(manifest, format, target)
    refuse_sources(target, [resolve(s.url, manifest.location or target) for s in manifest.sources])
    refuse_local_sources(target, [resolve(s.url, manifest.location) for s in manifest.sources])
    if not force:
        refuse_overwrite(target, existing_head(target, storage_options))
    if relative_sources:
        manifest = relative_to(manifest, target)
    write_bytes_atomic(target, encode(manifest, chosen), storage_options=storage_options)
    return chosen


def relative_to[M: ManifestParts](manifest: M, target: str) -> M:
    """``manifest`` with each source that lies in ``target``'s directory or above it recorded
    relative to ``target`` (absolute paths and URLs of the same store only)."""
    from dataclasses import replace

    from h5lens.manifest.locations import relative_to_manifest, resolve

    sources = []
    for source in manifest.sources:
        where = resolve(source.url, manifest.location)
        relative = None if "://" not in where and not os.path.isabs(where) else relative_to_manifest(where, target)
        sources.append(source if relative is None else replace(source, url=relative))
    return manifest if tuple(sources) == tuple(manifest.sources) else replace(manifest, sources=sources)


def read(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None, limits: Limits = DEFAULT_LIMITS
) -> ManifestParts:
    """Read a manifest file (local or fsspec URL) in either form, as the parts of a manifest
    (``Manifest.load`` builds it). Manifests are untrusted input: see
    :mod:`h5lens.manifest.limits` and docs/security.md."""
    from h5lens.manifest import compact

    location = os.fspath(path)
    if "://" not in location and os.path.isdir(location):
        raise ManifestFormatError(f"{location}: a directory, not a manifest file")
    resolved = location if "://" in location else os.path.abspath(location)
    # one client for the reads below, closed when they are done, failed or not; a compact
    # manifest keeps ``ranges`` for its chunk tables, each read later with a client of its own
    with FileRanges(location, storage_options) as ranges:
        # one request opens most manifests: the compact header, or a whole small JSON file
        head = ranges(0, _FIRST_READ)
        if compact.is_compact(head):
            # a file shorter than the first read is all there: its tables need no request of their own
            return compact.decode(ranges, location=resolved, head=head, limits=limits, whole=len(head) < _FIRST_READ)
        if _is_hdf5(head):
            raise NotAManifestError(
                f"{location}: an HDF5 file, not a manifest; index it first (h5lens.index)", kind="hdf5"
            ).at_cli(f"{location}: an HDF5 file, not a manifest; index it first (h5lens index {location} -o ...)")
        whole = head if len(head) < _FIRST_READ else ranges.whole(limits.manifest_bytes)
    from h5lens.manifest.refs_json import parse_json

    return parse_json(whole, resolved, limits=limits)


def _is_hdf5(head: bytes) -> bool:
    """The HDF5 signature at 0 or at a user block's end (512, 1024, ... bytes)."""
    signature = b"\x89HDF\r\n\x1a\n"
    offset = 0
    while offset + 8 <= len(head):
        if head[offset : offset + 8] == signature:
            return True
        offset = 512 if offset == 0 else offset * 2
    return False
