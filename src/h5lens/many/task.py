"""What one worker does for one file: skip it if its manifest is current, else index it
and write the manifest atomically; never raise, always return a :class:`FileRecord`.

This runs in a dask worker process: everything it takes and gives pickles, and every
failure of the file (missing, corrupt, unsupported, denied) becomes the record's
one-line error so that the other files go on.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from h5lens.many.sources import Job
from h5lens.scan.options import (
    DEFAULT_CONVENTION,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_MATERIALIZE_LIMIT,
    DEFAULT_READ_BLOCK_SIZE,
    DEFAULT_SLAB_BYTES,
)

INDEXED = "indexed"
SKIPPED = "skipped"
FAILED = "failed"
# a check (index_many(check=True)): what a run would do, nothing indexed
CURRENT = "current"  # its manifest is current: a run skips it
CHANGED = "changed"  # the file changed since its manifest was written: a run indexes it again
MISSING = "missing"  # no manifest: a run indexes it
ORPHANED = "orphaned"  # a manifest whose file is gone


@dataclass(frozen=True)
class IndexSettings:
    """The options of ``h5lens index`` that apply to every file of a run."""

    storage_options: dict[str, Any] = field(default_factory=dict)
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD
    convention: str = DEFAULT_CONVENTION
    slab_bytes: int = DEFAULT_SLAB_BYTES
    materialize_limit: int | None = DEFAULT_MATERIALIZE_LIMIT
    read_block_size: int = DEFAULT_READ_BLOCK_SIZE
    format: str | None = None  # None: the form the manifest's name says
    force: bool = False
    skip_unreadable: bool = False


@dataclass
class FileRecord:
    """What happened to one file: one line of the report."""

    source: str
    manifest: str
    status: str  # indexed | skipped | failed; a check: current | changed | missing | orphaned | failed
    error: str | None = None
    error_cli: str | None = None  # the error as the command line says it, where it says it otherwise
    chunks: int = 0  # chunk references (byte ranges of the source) in the manifest
    bytes: int = 0  # bytes those references cover
    seconds: float = 0.0
    form: str | None = None  # json | compact, when a manifest was written
    # what the manifest left out as unreadable (skip_unreadable), one line each: the object and why
    unreadable: list[str] = field(default_factory=list)
    # why the manifest there was not current ("size 10 → 12", "ETag a → b"): what made a run
    # index the file again, or what a check found changed; empty for a new manifest
    changes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def index_one(job: Job, settings: IndexSettings) -> FileRecord:
    """Index ``job.source`` into ``job.manifest`` unless the manifest there is current."""
    started = time.perf_counter()
    record = FileRecord(job.source, job.manifest, FAILED)
    try:
        current, changes = (None, ()) if settings.force else _current_manifest(job, settings.storage_options)
        if current is not None:
            record.status = SKIPPED
            record.chunks, record.bytes = _referenced(current)
            record.unreadable = [entry.line for entry in current.unreadable]
        else:
            record.changes = list(changes)
            _index(job, settings, record)
            record.status = INDEXED
    except Exception as e:  # noqa: BLE001 - any failure of this file is its record, not the run's end
        record.status = FAILED
        record.error = one_line(e, job.source)
        cli = one_line(e, job.source, cli=True)
        record.error_cli = cli if cli != record.error else None
    record.seconds = time.perf_counter() - started
    return record


def _index(job: Job, settings: IndexSettings, record: FileRecord) -> None:
    from h5lens.api import index
    from h5lens.many.sources import ensure_parent

    options = settings.storage_options or None
    manifest = index(
        job.source,
        storage_options=options,
        inline_threshold=settings.inline_threshold,
        convention=settings.convention,
        slab_bytes=settings.slab_bytes,
        materialize_limit=settings.materialize_limit,
        read_block_size=settings.read_block_size,
        skip_unreadable=settings.skip_unreadable,
    )
    record.chunks, record.bytes = _referenced(manifest)
    record.unreadable = [entry.line for entry in manifest.unreadable]
    try:
        ensure_parent(job.manifest)
        record.form = manifest.save(job.manifest, format=settings.format, storage_options=options, force=settings.force)
    except Exception as e:  # the file indexed; say that the write failed
        raise _Writing(one_line(e, job.manifest), one_line(e, job.manifest, cli=True)) from e


class _Writing(Exception):
    """Writing the manifest failed (the message names the manifest, not the source)."""

    def __init__(self, text: str, cli_text: str) -> None:
        super().__init__(text)
        self.cli_text = cli_text


def _referenced(manifest: Any) -> tuple[int, int]:
    from h5lens.scan.report import summarize

    summary = summarize(manifest)
    return summary["referenced_chunks"], summary["referenced_bytes"]


def _current_manifest(job: Job, storage_options: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
    """The manifest already at ``job.manifest`` if it describes the source as it is now
    (:func:`out_of_date`), else None and why not (nothing: there is no manifest).

    A manifest that does not load (damaged, from an older format) is out of date: the
    file is indexed again and the manifest replaced."""
    from h5lens.errors import H5LensError, SourceNotFoundError
    from h5lens.manifest.model import Manifest

    try:
        existing = Manifest.load(job.manifest, storage_options=storage_options or None)
    except SourceNotFoundError:
        return None, ()
    except H5LensError as e:
        return None, (f"the manifest there does not load ({one_line(e, job.manifest)})",)
    changes = out_of_date(job, existing, storage_options)
    return (None, changes) if changes else (existing, ())


def out_of_date(job: Job, existing: Any, storage_options: dict[str, Any]) -> tuple[str, ...]:
    """What makes ``existing``, the manifest at ``job.manifest``, out of date for
    ``job.source`` (nothing: it is current): another source recorded, or the file changed
    since (size, and ETag or content fingerprint or mtime: :func:`h5lens.manifest.identity.compare`),
    or nothing but the size to tell. The file's own errors raise (a vanished source:
    :class:`~h5lens.errors.SourceNotFoundError`)."""
    from h5lens.fetch.clients import open_client
    from h5lens.manifest import identity
    from h5lens.manifest.locations import absolute, resolve

    recorded_urls = [resolve(source.url, existing.location) for source in existing.sources]
    if recorded_urls != [absolute(job.source)]:
        return (f"the manifest records {', '.join(recorded_urls) or 'no source'}, not this file",)
    recorded = existing.sources[0]
    client = open_client(job.source, storage_options or None)
    try:
        found = client.stat(fingerprint=identity.wants_fingerprint(recorded))
    finally:
        client.close()
    comparison = identity.compare(recorded, found)
    if comparison.changes:
        return comparison.changes
    if recorded.size is None or found.get("size") is None:
        return ("the size is not known on both sides: nothing to compare",)
    if not comparison.identified:
        # size alone says too little: a rewrite of the same length would pass
        return ("the manifest records the size alone (no ETag, fingerprint or mtime): it cannot tell",)
    return ()


def one_line(error: BaseException, url: str, *, cli: bool = False) -> str:
    """One line for the report: what the user can act on, naming the file (``cli``: in the
    command line's words, see :attr:`h5lens.errors.H5LensError.cli_message`)."""
    from h5lens.errors import H5LensError
    from h5lens.fetch.backend_errors import from_storage_backend, storage_error

    if isinstance(error, _Writing):
        return error.cli_text if cli else str(error)
    if isinstance(error, H5LensError):
        text = (error.cli_message or str(error)) if cli else str(error)
    elif isinstance(error, (OSError, ImportError)) or from_storage_backend(error):
        text = str(storage_error(error, url, "indexing"))
    else:  # not something the file did: say what broke, so it can be reported
        first = str(error).strip().splitlines()
        text = f"{url}: {type(error).__name__}: {first[0] if first else 'failed'}"
    lines = text.strip().splitlines()
    line = lines[0] if lines else type(error).__name__
    return line if url in line else f"{url}: {line}"


