"""``h5lens index-many``: index a collection on dask.distributed.

Registered with the ``h5lens`` app by importing this module from :mod:`h5lens.cli`. The
storage and indexing options are the ``index`` command's own (taken from its signature:
one definition, spelled and documented the same). Like the rest of the command line, this
imports only typer at module level; dask comes with the run.
"""

from __future__ import annotations

import inspect
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from h5lens.cli import Anon, EndpointUrl, Form, ReadBlockSize, StorageOption
    from h5lens.many import FileRecord, IndexManyResult

    InlineThreshold = int
    Convention = str
    SlabBytes = int
    MaterializeLimit = int | None


def _running_cli() -> ModuleType:
    """The module whose ``app`` runs: ``python -m h5lens.cli`` runs cli.py as ``__main__``,
    and importing ``h5lens.cli`` then would build (and register with) a second app."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if main is not None and spec is not None and spec.name == "h5lens.cli":
        return main
    import importlib

    return importlib.import_module("h5lens.cli")


_cli = _running_cli()
_INDEX = inspect.signature(_cli.index, eval_str=True).parameters


# index's defaults, read once (module-level values, not calls in the signature)
_DEFAULTS: dict[str, Any] = {name: p.default for name, p in _INDEX.items()}
INLINE_THRESHOLD = _DEFAULTS["inline_threshold"]
CONVENTION = _DEFAULTS["convention"]
SLAB_BYTES = _DEFAULTS["slab_bytes"]
MATERIALIZE_LIMIT = _DEFAULTS["materialize_limit"]
READ_BLOCK_SIZE = _DEFAULTS["read_block_size"]
FORM = _DEFAULTS["form"]


if not TYPE_CHECKING:  # the annotations typer reads: the index command's, as they are
    InlineThreshold = _INDEX["inline_threshold"].annotation
    Convention = _INDEX["convention"].annotation
    SlabBytes = _INDEX["slab_bytes"].annotation
    MaterializeLimit = _INDEX["materialize_limit"].annotation
    ReadBlockSize = _cli.ReadBlockSize
    Form = _cli.Form
    StorageOption = _cli.StorageOption
    Anon = _cli.Anon
    EndpointUrl = _cli.EndpointUrl


@_cli.app.command("index-many", cls=_cli._Command)
def index_many(
    sources: Annotated[
        list[str],
        typer.Argument(
            metavar="SOURCES...",
            help="HDF5 files, globs ('s3://bucket/atlas/*.h5ad') or prefixes ('s3://bucket/atlas/'), local or URLs.",
        ),
    ],
    out_dir: Annotated[
        str, typer.Option("--out-dir", metavar="DEST", help="Directory or prefix (path or URL) the manifests go to.")
    ],
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler", metavar="ADDRESS", help="dask scheduler to submit to (default: a LocalCluster for the run)."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", metavar="N", min=1, help="LocalCluster worker processes (default: one per core)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Index every file again, even where its manifest is current.")
    ] = False,
    report: Annotated[
        str | None, typer.Option("--report", metavar="FILE", help="Also write one JSON record per file there.")
    ] = None,
    inline_threshold: InlineThreshold = INLINE_THRESHOLD,
    convention: Convention = CONVENTION,
    slab_bytes: SlabBytes = SLAB_BYTES,
    materialize_limit: MaterializeLimit = MATERIALIZE_LIMIT,
    read_block_size: ReadBlockSize = READ_BLOCK_SIZE,
    form: Form = FORM,
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index every file of SOURCES into DEST, one dask task per file.

    Each manifest is written atomically to DEST/<name>.json. A file whose manifest is
    current (same size and ETag/mtime) is skipped unless --force. A file that fails is
    reported and the others go on; the exit status is 2 if any failed.
    """
    options = _cli._storage_options(storage_option, anon, endpoint_url)
    _cli._check_convention(convention)
    _cli._check_form(form)
    block_size = _cli._byte_size("--read-block-size", read_block_size)
    with _cli._reporting(out_dir, "indexing into", anon=anon):
        from h5lens.many import index_many as run

        with _FileProgress() as progress:
            result = run(
                sources,
                out_dir,
                scheduler=scheduler,
                workers=workers,
                force=force,
                report=report,
                storage_options=options or None,
                inline_threshold=inline_threshold,
                convention=convention,
                slab_bytes=slab_bytes,
                materialize_limit=materialize_limit,
                read_block_size=block_size,
                format=form,
                progress=progress,
            )
    _print_summary(result)
    if not result.ok:
        first = next(r.error for r in result.records if r.error)
        where = f"; every file's record is in {report}" if report else ""
        _cli._fail(f"{result.failed} of {len(result.records)} files failed (the first: {first}){where}")


def _print_summary(result: IndexManyResult) -> None:
    """The run as tables on stdout: the totals, then each failed file and why."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=1 << 12)  # a pipe or a file: whole lines
    totals = Table("indexed", "skipped", "failed", "chunks", "bytes", "wall time")
    totals.add_row(
        str(result.indexed),
        str(result.skipped),
        str(result.failed),
        f"{result.chunks:,}",
        _size(result.bytes),
        f"{result.seconds:.1f} s",
    )
    console.print(totals)
    failed = [r for r in result.records if r.error]
    if failed:
        table = Table("failed", "error", title=None)
        for record in failed:
            table.add_row(record.source, record.error or "")
        console.print(table)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"


class _FileProgress:
    """A rich progress bar on stderr, one step per file (nothing when stderr is not a terminal)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.failed = 0

    def __enter__(self) -> _FileProgress | None:
        if not self.console.is_terminal:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=True,
        )
        self.bar.__enter__()
        self.task = self.bar.add_task("indexing", total=None)
        return self

    def __call__(self, record: FileRecord, done: int, total: int) -> None:
        from rich.markup import escape

        if self.bar is None or self.task is None:
            return
        self.failed += record.status == "failed"
        failed = f", {self.failed} failed" if self.failed else ""
        name = record.source.rsplit("/", 1)[-1]
        self.bar.update(self.task, completed=done, total=total, description=escape(f"indexing{failed}: {name}"))

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
