"""Progress bars on stderr (nothing when stderr is not a terminal): per dataset while a
file is scanned, per file while a collection is indexed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType

    from rich.progress import Progress, TaskID

    from h5lens.many import FileRecord
    from h5lens.scan.options import ScanProgress


class ScanProgressBar:
    """A rich progress bar on stderr while datasets are scanned (nothing when stderr is not a terminal).

    Entering gives a ``progress(ScanProgress)`` callback for :func:`h5lens.index`.
    """

    def __init__(self, label: str) -> None:
        from rich.console import Console

        self.label = label
        self.console = Console(stderr=True)
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> Callable[[ScanProgress], None] | None:
        if not self.console.is_terminal:
            return None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=True,
        )
        self.bar = bar
        bar.__enter__()
        self.task = bar.add_task(self.label, total=None)
        return self.update

    def update(self, progress: ScanProgress) -> None:
        from rich.markup import escape

        if self.bar is None or self.task is None:  # only called between __enter__ and __exit__
            return
        mib = f" {progress.bytes_read / 2**20:.0f} MiB read," if progress.bytes_read else ""
        self.bar.update(
            self.task,
            completed=progress.datasets_done,
            total=progress.datasets_total,
            description=escape(f"{self.label}{mib} {progress.chunks} chunks {progress.path}"),
        )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.__exit__(kind, error, tb)



class FileProgressBar:
    """A rich progress bar on stderr, one step per file (nothing when stderr is not a terminal)."""

    def __init__(self, verb: str = "indexing") -> None:
        from rich.console import Console

        self.verb = verb  # what is done to each file: "indexing", "checking"
        self.console = Console(stderr=True)
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.failed = 0

    def __enter__(self) -> FileProgressBar | None:
        if not self.console.is_terminal:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=True,
        )
        self.bar.__enter__()
        self.task = self.bar.add_task(self.verb, total=None)
        return self

    def __call__(self, record: FileRecord, done: int, total: int) -> None:
        from rich.markup import escape

        if self.bar is None or self.task is None:
            return
        self.failed += record.status == "failed"
        failed = f", {self.failed} failed" if self.failed else ""
        name = record.source.rsplit("/", 1)[-1]
        self.bar.update(self.task, completed=done, total=total, description=escape(f"{self.verb}{failed}: {name}"))

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
