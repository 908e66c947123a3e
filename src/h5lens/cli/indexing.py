"""Commands that write manifests: ``index``, ``publish``, ``index-many``, ``convert``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from h5lens.cli.app import Command, app, fail, reporting
from h5lens.cli.options import (
    DEFAULT_BLOCK,
    DEFAULT_CONVENTION,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_SLAB_BYTES,
    Anon,
    Convention,
    EndpointUrl,
    Form,
    InlineThreshold,
    Manifest,
    MaterializeLimit,
    ReadBlockSize,
    SlabBytes,
    StorageOption,
    byte_size,
    check_convention,
    check_form,
    form_note,
    storage_options,
)
from h5lens.cli.progress import FileProgressBar, ScanProgressBar

if TYPE_CHECKING:
    from h5lens.many import IndexManyResult


def check_destination(destination: str, source: str, url: str | None, options: dict[str, Any]) -> None:
    """Refuse a destination that is the source or cannot be written, before a long scan."""
    with reporting(destination, "checking the destination", anon=bool(options.get("anon"))):
        from h5lens.destination import check_destination

        check_destination(destination, sources=[source, url], storage_options=options or None)


# -- commands -------------------------------------------------------------------------------


@app.command(cls=Command)
def index(
    source: Annotated[
        str, typer.Argument(metavar="SOURCE", help="HDF5 file: local path or fsspec URL (s3://...).")
    ],
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            "--to",
            metavar="OUT",
            help="Where to write the manifest (path or URL), or icechunk://PATH to commit it to an Icechunk repository.",
        ),
    ],
    inline_threshold: InlineThreshold = DEFAULT_INLINE_THRESHOLD,
    convention: Convention = DEFAULT_CONVENTION,
    slab_bytes: SlabBytes = DEFAULT_SLAB_BYTES,
    materialize_limit: MaterializeLimit = None,
    url: Annotated[
        str | None,
        typer.Option(metavar="URL", help="URL to record for the source (default: the absolute source path)."),
    ] = None,
    read_block_size: ReadBlockSize = DEFAULT_BLOCK,
    form: Form = None,
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index SOURCE into a manifest written to OUTPUT.

    OUTPUT is checked first (not the source; its directory or bucket exists), then SOURCE
    is scanned and the manifest written atomically. OUTPUT icechunk://PATH (a local
    directory or icechunk://s3://BUCKET/PREFIX) commits it to an Icechunk repository.
    """
    options = storage_options(storage_option, anon, endpoint_url)
    check_convention(convention)
    check_form(form)
    block_size = byte_size("--read-block-size", read_block_size)
    to_icechunk = output.startswith("icechunk://")  # a repository: h5lens.icechunk writes it
    if to_icechunk:
        if form is not None:
            fail("--format is for manifest files; an Icechunk repository holds the references itself")
        with reporting(output, "checking the destination", anon=anon):
            from h5lens.icechunk import check_destination as check_repository
            from h5lens.icechunk import quiet_logs

            quiet_logs()
            check_repository(output, sources=[source, url], storage_options=options or None)
    else:
        check_destination(output, source, url, options)
    with reporting(source, "indexing", anon=anon):
        import h5lens

        with ScanProgressBar(f"indexing {source}") as progress:
            manifest = h5lens.index(
                source,
                progress=progress,
                storage_options=options or None,
                inline_threshold=inline_threshold,
                convention=convention,
                slab_bytes=slab_bytes,
                materialize_limit=materialize_limit,
                url=url,
                read_block_size=block_size,
            )
    with reporting(output, "writing", anon=anon):
        if to_icechunk:
            from h5lens.icechunk import write_destination

            snapshot, committed = write_destination(output, manifest, storage_options=options or None)
            note = f"committed snapshot {snapshot}" if committed else f"unchanged at snapshot {snapshot}, nothing committed"
        else:
            written = manifest.save(output, format=form, storage_options=options or None)
            note = form_note(written, form, manifest)
    from h5lens.report import summarize

    summary = summarize(manifest)
    typer.echo(
        f"{output}: {summary['arrays']} arrays, {summary['groups']} groups, "
        f"{summary['referenced_chunks']} referenced chunks ({summary['referenced_bytes']} bytes), "
        f"{summary['inline_chunks']} inline chunks ({summary['inline_bytes']} bytes); {note}"
    )


@app.command(cls=Command)
def publish(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="HDF5 file: local path or fsspec URL.")],
    destination: Annotated[
        str, typer.Argument(metavar="DEST", help="Where to write the manifest (path or URL).")
    ],
    url: Annotated[
        str | None,
        typer.Option(metavar="URL", help="URL to record for the source, e.g. the bucket a local copy came from."),
    ] = None,
    inline_threshold: InlineThreshold = DEFAULT_INLINE_THRESHOLD,
    convention: Convention = DEFAULT_CONVENTION,
    read_block_size: ReadBlockSize = DEFAULT_BLOCK,
    form: Form = None,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index SOURCE, check it, write DEST atomically.

    Sampled chunks are decoded through zarr before DEST is written; the manifest is
    read back from DEST. Nothing is written at DEST unless every step succeeds.
    """
    options = storage_options(storage_option, anon, endpoint_url)
    check_convention(convention)
    check_form(form)
    block_size = byte_size("--read-block-size", read_block_size)
    check_destination(destination, source, url, options)
    with reporting(source, "publishing", anon=anon):
        from h5lens.publish import publish as run_publish

        with ScanProgressBar(f"publishing {source}") as progress:
            report = run_publish(
                source,
                destination,
                progress=progress,
                url=url,
                storage_options=options or None,
                inline_threshold=inline_threshold,
                convention=convention,
                read_block_size=block_size,
                format=form,
            )
    s = report.summary
    typer.echo(
        f"{destination}: {report.manifest_bytes} bytes; {s['arrays']} arrays, {s['groups']} groups; "
        f"referenced {s['referenced_chunks']} chunks ({s['referenced_bytes']} bytes), "
        f"inline {s['inline_chunks']} chunks ({s['inline_bytes']} bytes); "
        f"{report.checked_chunks} sampled chunks decoded; {report.form} form"
    )



@app.command("index-many", cls=Command)
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
    inline_threshold: InlineThreshold = DEFAULT_INLINE_THRESHOLD,
    convention: Convention = DEFAULT_CONVENTION,
    slab_bytes: SlabBytes = DEFAULT_SLAB_BYTES,
    materialize_limit: MaterializeLimit = None,
    read_block_size: ReadBlockSize = DEFAULT_BLOCK,
    form: Form = None,
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index every file of SOURCES into DEST, one dask task per file.

    Each manifest is written atomically to DEST/<name>.json. A file whose manifest is
    current (same size and ETag/mtime) is skipped unless --force. A file that fails is
    reported and the others go on; the exit status is 2 if any failed.
    """
    options = storage_options(storage_option, anon, endpoint_url)
    check_convention(convention)
    check_form(form)
    block_size = byte_size("--read-block-size", read_block_size)
    with reporting(out_dir, "indexing into", anon=anon):
        from h5lens.many import index_many as run

        with FileProgressBar() as progress:
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
        fail(f"{result.failed} of {len(result.records)} files failed (the first: {first}){where}")


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


@app.command(cls=Command)
def convert(
    manifest: Manifest,
    output: Annotated[str, typer.Argument(metavar="OUT", help="Where to write it (path or URL).")],
    form: Annotated[
        str, typer.Option("--format", metavar="FORM", help="'json' or 'compact'.")
    ],
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Write MANIFEST in another form: the JSON references any fsspec reader opens, or the
    compact columns that open in milliseconds at millions of chunks. Exact both ways."""
    from h5lens.cli.reading import open_manifest

    check_form(form)
    options = storage_options(storage_option, anon, endpoint_url)
    loaded = open_manifest(manifest, options)
    from h5lens.destination import check_destination

    with reporting(output, "writing", anon=anon):
        check_destination(output, storage_options=options or None)  # (writing never goes over a source)
        loaded.save(output, format=form, storage_options=options or None)
    typer.echo(f"{output}: {form} form, {len(loaded.nodes)} nodes, {loaded.n_chunks} chunks")

