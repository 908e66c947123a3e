"""What a check of a collection does on a worker (``index_many(..., check=True)``,
``h5lens index-many --check``): per file, whether its manifest is current, out of date, or
missing; per manifest below DEST that no file named, whether its file is gone. Nothing is
indexed or written. Like :mod:`~h5lens.many.task`, it never raises: every failure is the
record's one-line error.

The comparison is the one a run makes to skip a file (:func:`~h5lens.many.task.out_of_date`,
through :func:`h5lens.manifest.identity.compare`): a file is current exactly when a run of the same
command would skip it.
"""

from __future__ import annotations

import time
from typing import Any

from h5lens.many.sources import Job
from h5lens.many.task import (
    CHANGED,
    CURRENT,
    FAILED,
    MISSING,
    ORPHANED,
    FileRecord,
    IndexSettings,
    _referenced,
    one_line,
    out_of_date,
)

GONE = "the file is gone"


def check_one(job: Job, settings: IndexSettings) -> FileRecord:
    """The state of ``job.source`` against the manifest at ``job.manifest``."""
    from h5lens.errors import ManifestFormatError, SourceNotFoundError
    from h5lens.manifest.model import Manifest

    started = time.perf_counter()
    record = FileRecord(job.source, job.manifest, FAILED)
    options = settings.storage_options
    try:
        try:
            existing = Manifest.load(job.manifest, storage_options=options or None)
        except SourceNotFoundError:
            _stat(job.source, options)  # a file named that does not exist either: failed, as a run says
            record.status = MISSING
        except ManifestFormatError as e:  # damaged, or another file: a run replaces only a manifest
            from h5lens.manifest.destination import existing_head, refuse_overwrite

            refuse_overwrite(job.manifest, existing_head(job.manifest, options or None))
            record.status = CHANGED
            record.changes = [f"the manifest there does not load ({one_line(e, job.manifest)})"]
        else:
            record.chunks, record.bytes = _referenced(existing)
            record.unreadable = [entry.line for entry in existing.unreadable]
            try:
                changes = out_of_date(job, existing, options)
            except SourceNotFoundError:
                record.status, record.changes = ORPHANED, [GONE]
            else:
                record.status, record.changes = (CHANGED, list(changes)) if changes else (CURRENT, [])
    except Exception as e:  # noqa: BLE001 - this file's failure is its record, not the check's end
        record.status = FAILED
        record.changes = []
        _failed(record, e, job.source)
    record.seconds = time.perf_counter() - started
    return record


def check_orphan(job: Job, settings: IndexSettings) -> FileRecord | None:
    """A manifest below DEST that no file of SOURCES has (``job.manifest``; ``job.source``
    unused): a record if the file it was made from is gone (or it cannot be told), None if
    the file is there (a file the check was not asked about)."""
    from h5lens.errors import SourceNotFoundError
    from h5lens.manifest.locations import resolve
    from h5lens.manifest.model import Manifest

    started = time.perf_counter()
    options = settings.storage_options
    record = FileRecord("", job.manifest, FAILED)
    try:
        existing = Manifest.load(job.manifest, storage_options=options or None)
        if not existing.sources:
            return None
        record.source = resolve(existing.sources[0].url, existing.location)
        try:
            _stat(record.source, options)
        except SourceNotFoundError:
            record.status, record.changes = ORPHANED, [GONE]
            record.chunks, record.bytes = _referenced(existing)
        else:
            return None
    except Exception as e:  # noqa: BLE001 - this manifest's failure is its record
        _failed(record, e, job.manifest)
    record.seconds = time.perf_counter() - started
    return record


def _stat(url: str, storage_options: dict[str, Any]) -> None:
    """Raise the file's error if it is not there (SourceNotFoundError) or not reachable."""
    from h5lens.fetch.clients import open_client

    client = open_client(url, storage_options or None)
    try:
        client.stat(fingerprint=False)
    finally:
        client.close()


def _failed(record: FileRecord, error: BaseException, url: str) -> None:
    record.status = FAILED
    record.error = one_line(error, url)
    cli = one_line(error, url, cli=True)
    record.error_cli = cli if cli != record.error else None


__all__ = ["check_one", "check_orphan"]
