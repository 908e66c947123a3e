"""Which files a collection run indexes, and where each manifest goes.

SOURCES are paths, globs or prefixes, local or on any fsspec backend. Each file found
gets the manifest ``DEST/<its path below the SOURCE it came from>.json``: a prefix keeps
its sub-directories, a glob is taken below its last plain directory, a single file is
named by its base name. Listing happens once, on the client; nothing is opened here.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any

from h5lens.errors import H5LensError, InvalidOptionError
from h5lens.fetch.backend_errors import anon_requested, probe_options, storage_error
from h5lens.fetch.credentials import reads_unsigned
from h5lens.manifest.destination import check_bucket
from h5lens.manifest.locations import is_remote, same_location

# A prefix or directory holds more than HDF5 files (READMEs, manifests, checksums):
# only these are taken from it. A glob or an explicit path takes what it names.
HDF5_SUFFIXES = (".h5ad", ".h5td", ".h5mu", ".nwb", ".h5", ".hdf5", ".hdf", ".he5", ".nc", ".nc4", ".loom")
MANIFEST_SUFFIX = ".json"
# What index-many names a manifest: the file's name and the form's suffix (``a.h5ad.json``,
# ``a.h5ad.h5lens``). Looking for manifests in a directory or prefix (``validate DIR``,
# ``index-many --check``) takes these names only: a report or any other JSON beside them
# is not one.
MANIFEST_NAMES = tuple(name + form for name in HDF5_SUFFIXES for form in (MANIFEST_SUFFIX, ".h5lens"))
_MAGIC = ("*", "?", "[")


@dataclass(frozen=True)
class Job:
    """One file to index: where it is read from and where its manifest is written."""

    source: str
    manifest: str


def plan_jobs(
    sources: list[str], out_dir: str, storage_options: dict[str, Any] | None = None, *, suffix: str = MANIFEST_SUFFIX
) -> list[Job]:
    """One :class:`Job` per file named by ``sources``, in a stable order (duplicates once);
    each manifest's name is its file's, below DEST, plus ``suffix`` (the form's).

    An explicit path that does not exist is still a job: the run records it as failed
    ("no such file") instead of refusing the whole collection. A glob or prefix that
    matches nothing is refused, since that is a mistake in the command, not in a file.
    """
    found: dict[str, str] = {}  # source URL -> name below DEST
    for spec in sources:
        for url, name in _expand(os.fspath(spec), storage_options):
            if not _inside(url, out_dir):  # a prefix that holds DEST: never index our own output
                found.setdefault(url, name)
    jobs: list[Job] = []
    by_manifest: dict[str, str] = {}
    for url, name in sorted(found.items()):
        manifest = _join(out_dir, name + suffix)
        other = by_manifest.setdefault(manifest, url)
        if other != url:
            raise InvalidOptionError(
                f"{other} and {url} would both be written to {manifest}; index them into different --out-dir"
            )
        if same_location(manifest, url):
            raise InvalidOptionError(f"{manifest}: this is the source {url}; writing there would overwrite the data")
        jobs.append(Job(url, manifest))
    return jobs


def _listing_options(url: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The storage options a listing of ``url`` uses: public S3 data with no credentials
    anywhere is listed unsigned, as its files are read (:mod:`h5lens.fetch.credentials`)."""
    found = dict(options or {})
    if reads_unsigned(url, found):
        found["anon"] = True
    return found


def _expand(spec: str, options: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not is_remote(spec):
        return _expand_local(spec.removeprefix("file://"))
    import fsspec

    options = _listing_options(spec, options)

    try:
        # A filesystem of our own: a listing fills the filesystem's cache of object info,
        # and the shared instance would then answer later size/ETag checks in this process
        # (h5lens's freshness checks) from the listing, not from the object as it is now.
        fs, path = fsspec.core.url_to_fs(spec, skip_instance_cache=True, **(options or {}))
        if any(m in path for m in _MAGIC):
            base = _plain_prefix(path)
            matched = [p for p in fs.glob(path) if fs.isfile(p)]
            if not matched:
                raise InvalidOptionError(f"{spec}: matches no file")
            return [(fs.unstrip_protocol(p), posixpath.relpath(p, base)) for p in matched]
        if spec.endswith("/") or fs.isdir(path):
            base = path.rstrip("/")
            files = [p for p in fs.find(base) if p.lower().endswith(HDF5_SUFFIXES)]
            if not files:
                raise InvalidOptionError(f"{spec}: holds no HDF5 file (names ending in {', '.join(HDF5_SUFFIXES)})")
            return [(fs.unstrip_protocol(p), posixpath.relpath(p, base)) for p in files]
    except H5LensError:
        raise
    except Exception as e:  # every backend failure, named with the URL
        raise storage_error(e, spec, "listing", anon=anon_requested(options)) from e
    return [(spec, posixpath.basename(path))]


def _expand_local(spec: str) -> list[tuple[str, str]]:
    import glob

    if any(m in spec for m in _MAGIC):
        base = _plain_prefix(spec) or "."
        matched = sorted(p for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
        if not matched:
            raise InvalidOptionError(f"{spec}: matches no file")
        return [(os.path.abspath(p), os.path.relpath(p, base)) for p in matched]
    if os.path.isdir(spec):
        files = [
            os.path.join(root, name)
            for root, _, names in os.walk(spec)
            for name in names
            if name.lower().endswith(HDF5_SUFFIXES)
        ]
        if not files:
            raise InvalidOptionError(f"{spec}: holds no HDF5 file (names ending in {', '.join(HDF5_SUFFIXES)})")
        return [(os.path.abspath(p), os.path.relpath(p, spec)) for p in sorted(files)]
    return [(os.path.abspath(spec), os.path.basename(spec))]


def _plain_prefix(path: str) -> str:
    """The directory part of a glob before its first wildcard."""
    head = path
    for magic in _MAGIC:
        head = head.split(magic, 1)[0]
    return head.rsplit("/", 1)[0] if "/" in head else ""


def _join(out_dir: str, name: str) -> str:
    if is_remote(out_dir):
        return out_dir.rstrip("/") + "/" + name.replace(os.sep, "/")
    return os.path.join(os.path.abspath(out_dir.removeprefix("file://")), name)


def _inside(url: str, out_dir: str) -> bool:
    if is_remote(url) != is_remote(out_dir):
        return False
    if is_remote(url):
        return url.startswith(out_dir.rstrip("/") + "/")
    root = os.path.realpath(out_dir.removeprefix("file://"))
    return os.path.realpath(url).startswith(root + os.sep)


def prepare_out_dir(out_dir: str, storage_options: dict[str, Any] | None = None, *, create: bool = True) -> None:
    """Make sure manifests can be written below ``out_dir`` before any file is indexed:
    a local directory is created if missing (a file there is refused); on object storage
    the bucket must exist (a prefix needs no creating). Without ``create`` (a check, which
    writes nothing) a missing local directory is left missing: it holds no manifest."""
    if not is_remote(out_dir):
        local = out_dir.removeprefix("file://")
        if os.path.exists(local) and not os.path.isdir(local):
            raise InvalidOptionError(f"{out_dir}: a file; --out-dir must be a directory")
        if not create:
            return
        try:
            os.makedirs(local, exist_ok=True)
        except OSError as e:
            raise storage_error(e, out_dir, "creating") from None
        if not os.access(local, os.W_OK | os.X_OK):
            raise storage_error(PermissionError(13, "Permission denied"), out_dir, "writing to")
        return
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(out_dir, **probe_options(out_dir, storage_options))
        check_bucket(out_dir, fs, path)
        if path.strip("/") and fs.isfile(path.rstrip("/")):
            raise InvalidOptionError(f"{out_dir}: an object (a file); --out-dir must be a prefix")
    except H5LensError:
        raise
    except Exception as e:  # every backend failure, named with the URL
        raise storage_error(e, out_dir, "checking", anon=anon_requested(storage_options)) from e


def ensure_parent(manifest: str) -> None:
    """A local manifest below a sub-directory of DEST (a prefix kept its layout): create it."""
    if not is_remote(manifest):
        os.makedirs(os.path.dirname(manifest), exist_ok=True)


# -- manifests: what ``validate`` and ``index-many --check`` look at ------------------------------


def list_manifests(prefix: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The manifests below a directory or prefix, local or URL, named as index-many names
    them (:data:`MANIFEST_NAMES`), sorted; none when it holds none or does not exist."""
    if not is_remote(prefix):
        local = prefix.removeprefix("file://")
        if not os.path.isdir(local):
            return []
        return sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(local)
            for name in names
            if name.lower().endswith(MANIFEST_NAMES)
        )
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(prefix, skip_instance_cache=True, **(storage_options or {}))
        base = path.rstrip("/")
        if not fs.exists(base):
            return []
        found = fs.find(base)
    except Exception as e:  # every backend failure, named with the URL
        raise storage_error(e, prefix, "listing", anon=anon_requested(storage_options)) from e
    return sorted(fs.unstrip_protocol(p) for p in found if p.lower().endswith(MANIFEST_NAMES))


def expand_manifests(specs: list[str], storage_options: dict[str, Any] | None = None) -> list[str]:
    """The manifests MANIFEST arguments name, in order (each once): a directory or prefix
    (a local directory, or a URL ending in ``/`` or naming one) gives those below it
    (:func:`list_manifests`; refused if none), a glob its matches (a URL's, or a local one
    the shell left alone), anything else itself (a file, a URL, ``icechunk://``)."""
    found: dict[str, None] = {}
    for spec in specs:
        for manifest in _manifests_of(os.fspath(spec), storage_options):
            found.setdefault(manifest)
    return list(found)


def _manifests_of(spec: str, options: dict[str, Any] | None) -> list[str]:
    if spec.startswith("icechunk://"):
        return [spec]
    named = spec.lower().endswith((MANIFEST_SUFFIX, ".h5lens"))  # a manifest's name: taken as it is
    if any(m in spec for m in _MAGIC):
        matched = sorted(url for url, _ in _matches(spec, options))
        if not matched:
            raise InvalidOptionError(f"{spec}: matches no file")
        return matched
    if not is_remote(spec):
        if not os.path.isdir(spec.removeprefix("file://")):
            return [spec]
    elif named and not spec.endswith("/"):
        return [spec]
    elif not spec.endswith("/") and not _is_prefix(spec, options):
        return [spec]
    manifests = list_manifests(spec, options)
    if not manifests:
        raise InvalidOptionError(
            f"{spec}: holds no manifest (names ending in an HDF5 file's name and .json or .h5lens, "
            "as h5lens index-many writes them: atlas.h5ad.json)"
        )
    return manifests


def _matches(spec: str, options: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not is_remote(spec):
        import glob

        return [(p, p) for p in glob.glob(spec.removeprefix("file://"), recursive=True) if os.path.isfile(p)]
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(spec, skip_instance_cache=True, **(options or {}))
        return [(fs.unstrip_protocol(p), p) for p in fs.glob(path) if fs.isfile(p)]
    except Exception as e:  # every backend failure, named with the URL
        raise storage_error(e, spec, "listing", anon=anon_requested(options)) from e


def _is_prefix(url: str, options: dict[str, Any] | None) -> bool:
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url, skip_instance_cache=True, **(options or {}))
        return bool(fs.isdir(path))
    except Exception as e:  # every backend failure, named with the URL
        raise storage_error(e, url, "listing", anon=anon_requested(options)) from e
