"""Index a collection on dask.distributed: list the files on the client, submit one task
per file, gather one record per file, write the report."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from h5lens.manifest.io import SUFFIXES
from h5lens.manifest.locations import absolute
from h5lens.many.sources import Job, list_manifests, plan_jobs, prepare_out_dir
from h5lens.many.task import (
    CHANGED,
    CURRENT,
    FAILED,
    INDEXED,
    MISSING,
    ORPHANED,
    SKIPPED,
    FileRecord,
    IndexSettings,
    index_one,
    one_line,
)
from h5lens.scan.options import (
    DEFAULT_CONVENTION,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_MATERIALIZE_LIMIT,
    DEFAULT_READ_BLOCK_SIZE,
    DEFAULT_SLAB_BYTES,
    MIN_READ_BLOCK_SIZE,
)

if TYPE_CHECKING:
    from distributed import Client

# what runs on a worker for one job: index_one, check_one, check_orphan
Task = Callable[[Job, IndexSettings], FileRecord | None]


@dataclass
class IndexManyResult:
    """One record per file, in the order of the sources, and the run's wall time. A check
    (``check``): one record per file, then one per manifest whose file is gone."""

    records: list[FileRecord]
    seconds: float
    check: bool = False

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.records)

    @property
    def indexed(self) -> int:
        return self.count(INDEXED)

    @property
    def skipped(self) -> int:
        return self.count(SKIPPED)

    @property
    def failed(self) -> int:
        return self.count(FAILED)

    @property
    def current(self) -> int:
        """A check: files whose manifest is current (a run skips them)."""
        return self.count(CURRENT)

    @property
    def changed(self) -> int:
        """A check: files that changed since their manifest was written (a run indexes them again)."""
        return self.count(CHANGED)

    @property
    def missing(self) -> int:
        """A check: files without a manifest (a run indexes them)."""
        return self.count(MISSING)

    @property
    def orphaned(self) -> int:
        """A check: manifests whose file is gone."""
        return self.count(ORPHANED)

    @property
    def ok(self) -> bool:
        """No file failed."""
        return self.failed == 0

    @property
    def up_to_date(self) -> bool:
        """A check: every file has a current manifest, and no manifest lost its file."""
        return all(r.status == CURRENT for r in self.records)

    @property
    def chunks(self) -> int:
        """Chunk references in the manifests now in DEST (indexed and skipped files)."""
        return sum(r.chunks for r in self.records)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.records)

    @property
    def unreadable(self) -> int:
        """Objects the manifests in DEST left out as unreadable (``skip_unreadable``)."""
        return sum(len(r.unreadable) for r in self.records)

    def to_dict(self) -> dict[str, Any]:
        if self.check:
            counts = {"check": True, "current": self.current, "changed": self.changed, "missing": self.missing,
                      "orphaned": self.orphaned}  # fmt: skip
        else:
            counts = {"indexed": self.indexed, "skipped": self.skipped}
        return {
            **counts,
            "failed": self.failed,
            "chunks": self.chunks,
            "bytes": self.bytes,
            "unreadable": self.unreadable,
            "seconds": self.seconds,
            "files": [r.to_dict() for r in self.records],
        }


def index_many(
    sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    scheduler: str | Client | None = None,
    workers: int | None = None,
    force: bool = False,
    report: str | os.PathLike[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
    convention: str = DEFAULT_CONVENTION,
    slab_bytes: int = DEFAULT_SLAB_BYTES,
    materialize_limit: int | None = DEFAULT_MATERIALIZE_LIMIT,
    read_block_size: int = DEFAULT_READ_BLOCK_SIZE,
    skip_unreadable: bool = False,
    format: str | None = None,
    check: bool = False,
    progress: Callable[[FileRecord, int, int], None] | None = None,
) -> IndexManyResult:
    """Index every file named by ``sources`` into ``out_dir`` on a dask.distributed cluster.

    ``sources``: paths, globs or prefixes (``s3://bucket/atlas/``, ``data/*.h5ad``), local or
    any fsspec URL; ``out_dir`` may be remote. Each file's manifest is written atomically to
    ``out_dir/<name>.json`` (``out_dir/<name>.h5lens`` with ``format="compact"``). A file
    whose manifest there records its current size and ETag (or content) is skipped unless
    ``force``; ``force`` also lets a manifest replace a file there that is not one. Local
    files indexed into object storage are refused: the manifests would point at paths its
    readers cannot reach. A file that fails is recorded with its one-line error; the
    others go on. ``scheduler``: a
    ``distributed.Client`` or a scheduler address; None starts a LocalCluster of ``workers``
    processes and closes it after. ``report``: also write the result as JSON there.
    ``progress(record, done, total)`` is called on the client as each file finishes.
    The other options are those of :func:`h5lens.index`; with ``skip_unreadable`` each record
    lists what its manifest left out (:attr:`FileRecord.unreadable`).

    ``check``: index nothing, write nothing (but ``report``); say what a run would do. Each
    file's record is ``current`` (a run skips it), ``changed`` (its manifest is out of date:
    ``changes`` says how), ``missing`` (no manifest) or ``failed`` (it could not be told);
    a manifest below ``out_dir`` whose file is gone is ``orphaned`` (named by SOURCES or not).
    ``format`` names the manifests looked for, as for a run; the scan options are unused.
    """
    from h5lens.errors import InvalidOptionError
    from h5lens.manifest.destination import refuse_local_sources
    from h5lens.manifest.io import FORMATS
    from h5lens.scan.options import ScanOptions

    # checked: InvalidOptionError
    ScanOptions(inline_threshold, convention, slab_bytes, materialize_limit, skip_unreadable=skip_unreadable)
    if format is not None and format not in FORMATS:
        raise InvalidOptionError(f"format must be one of {FORMATS}. Got {format!r}")
    if read_block_size < MIN_READ_BLOCK_SIZE:
        raise InvalidOptionError(f"read_block_size must be at least {MIN_READ_BLOCK_SIZE} bytes. Got {read_block_size}")
    if check and force:
        raise InvalidOptionError(
            "check=True indexes nothing and force=True indexes every file: give one"
        ).at_cli("--check indexes nothing and --force indexes every file: give one")
    specs = [os.fspath(sources)] if isinstance(sources, (str, os.PathLike)) else [os.fspath(s) for s in sources]
    dest = os.fspath(out_dir)
    options = dict(storage_options or {})
    started = time.perf_counter()
    if report is not None:  # a report that cannot be written fails now, not after the run
        from h5lens.manifest.destination import check_destination

        check_destination(os.fspath(report), storage_options=options or None, force=force, what="a report")
    prepare_out_dir(dest, options, create=not check)
    jobs = plan_jobs(specs, dest, options, suffix=SUFFIXES.get(format or "json", ".json"))
    refuse_local_sources(dest, [absolute(job.source) for job in jobs], many=True)
    settings = IndexSettings(
        options, inline_threshold, convention, slab_bytes, materialize_limit, read_block_size, format, force,
        skip_unreadable,
    )  # fmt: skip
    tasks: list[tuple[Task, Job]]
    if check:
        from h5lens.many.check import check_one, check_orphan

        named = {absolute(job.manifest) for job in jobs}
        others = [Job("", absolute(m)) for m in list_manifests(dest, options) if absolute(m) not in named]
        tasks = [(check_one, job) for job in jobs] + [(check_orphan, job) for job in others]
    else:
        tasks = [(index_one, job) for job in jobs]
    records = _run(tasks, settings, scheduler, workers, progress) if tasks else []
    result = IndexManyResult(records, time.perf_counter() - started, check=check)
    if report is not None:
        write_report(result, os.fspath(report), options)
    return result


def _run(
    tasks: list[tuple[Task, Job]],
    settings: IndexSettings,
    scheduler: str | Client | None,
    workers: int | None,
    progress: Callable[[FileRecord, int, int], None] | None,
) -> list[FileRecord]:
    """Each task (``function(job, settings)``) on the cluster; the records in task order
    (a task may return None: nothing to record)."""
    from distributed import as_completed

    from h5lens.many.cluster import client_for

    with client_for(scheduler, workers) as client:
        # pure=False: a re-run must index again, not reuse a result the scheduler remembers;
        # retries=0: a file that kills its worker (a crafted file crashing libhdf5) is failed
        # once, not retried on every other worker.
        futures = [client.submit(function, job, settings, pure=False, retries=0) for function, job in tasks]
        position = {f.key: i for i, f in enumerate(futures)}
        records: list[FileRecord | None] = [None] * len(tasks)
        for done, future in enumerate(as_completed(futures, loop=client.loop), start=1):
            i = position[future.key]
            record = records[i] = _record_of(future, tasks[i][1])
            future.release()
            if progress is not None and record is not None:
                progress(record, done, len(tasks))
    return [r for r in records if r is not None]


def _record_of(future: Any, job: Job) -> FileRecord | None:
    """The task's record; a task that did not return one (its worker died) is a failure."""
    name = job.source or job.manifest
    try:
        record = future.result()
    except Exception as e:  # noqa: BLE001 - KilledWorker, a lost connection: this file's failure
        return FileRecord(job.source, job.manifest, FAILED, one_line(e, name))
    if record is not None and not isinstance(record, FileRecord):  # pragma: no cover - tasks return one
        return FileRecord(job.source, job.manifest, FAILED, f"{name}: no record returned")
    return record


def write_report(result: IndexManyResult, path: str, storage_options: dict[str, Any] | None = None) -> None:
    """The result as JSON at ``path`` (local or URL), written atomically."""
    from h5lens.manifest.files import write_bytes_atomic

    payload = json.dumps(result.to_dict(), indent=1).encode() + b"\n"
    write_bytes_atomic(path, payload, storage_options=storage_options)
