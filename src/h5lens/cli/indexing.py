"""Commands that write manifests: ``index``, ``publish``, ``index-many``, ``convert``.

Each checks its destination before any work: never a source, never an existing file that
is not a manifest (unless --force), never a manifest for object storage that points at a
local path; and the form the destination's name promises (``.json``, ``.h5lens``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from h5lens.cli.app import Command, app, fail, reporting
from h5lens.cli.options import (
    DEFAULT_BLOCK,
    DEFAULT_INLINE,
    DEFAULT_LIMIT,
    DEFAULT_SLAB,
    Anon,
    Convention,
    EndpointUrl,
    Force,
    Form,
    InlineThreshold,
    Manifest,
    MaterializeLimit,
    ReadBlockSize,
    SkipUnreadable,
    SlabBytes,
    StorageOption,
    check_form,
    form_note,
    scan_settings,
    storage_options,
)
from h5lens.cli.progress import FileProgressBar, ScanProgressBar
from h5lens.scan.options import DEFAULT_CONVENTION

if TYPE_CHECKING:
    from h5lens.many import IndexManyResult


def check_destination(
    destination: str, source: str | None, url: str | None, options: dict[str, Any], *, force: bool, form: str | None
) -> None:
    """Everything about the destination that can fail, before a long scan (one line each)."""
    with reporting(destination, "checking the destination", anon=bool(options.get("anon"))):
        from h5lens.manifest.destination import check_destination as check
        from h5lens.manifest.destination import refuse_local_sources
        from h5lens.manifest.io import choose_format_for
        from h5lens.manifest.locations import absolute

        choose_format_for(destination, form)
        check(destination, sources=[source, url], storage_options=options or None, force=force)
        if source is not None:
            refuse_local_sources(destination, [url if url is not None else absolute(source)])


ForReader = Annotated[
    str | None,
    typer.Option(
        "--for",
        metavar="READER",
        help="'browser': a manifest web browsers read with zarrita.js (docs/browser.md): --url must be the "
        "absolute http(s) URL the file is served at; NaN and infinities as strings (the proposal profile); "
        "what browsers still cannot decode is listed.",
    ),
]


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
            help="Where to write the manifest (path or URL): NAME.json (JSON) or NAME.h5lens (compact); "
            "or icechunk://PATH to commit it to an Icechunk repository.",
        ),
    ],
    inline_threshold: InlineThreshold = DEFAULT_INLINE,
    convention: Convention = DEFAULT_CONVENTION,
    slab_bytes: SlabBytes = DEFAULT_SLAB,
    materialize_limit: MaterializeLimit = DEFAULT_LIMIT,
    skip_unreadable: SkipUnreadable = False,
    url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="URL to record for the source (default: its path, relative to OUT when OUT is in the "
            "source's directory or below it, else absolute).",
        ),
    ] = None,
    read_block_size: ReadBlockSize = DEFAULT_BLOCK,
    form: Form = None,
    force: Force = False,
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
    target: ForReader = None,
) -> None:
    """Index SOURCE into a manifest written to OUTPUT.

    OUTPUT is checked first (not the source, not a file that is not a manifest; its
    directory or bucket exists), then SOURCE is scanned and the manifest written
    atomically. OUTPUT icechunk://PATH (a local directory or icechunk://s3://BUCKET/PREFIX)
    commits it to an Icechunk repository. --for browser: a manifest web browsers read
    (docs/browser.md).
    """
    options = storage_options(storage_option, anon, endpoint_url)
    if target is not None:
        from h5lens.cli.browser import browser_convention

        convention = browser_convention(target, url, source, output, convention)
    settings = scan_settings(
        inline_threshold=inline_threshold,
        convention=convention,
        slab_bytes=slab_bytes,
        materialize_limit=materialize_limit,
        read_block_size=read_block_size,
        skip_unreadable=skip_unreadable,
    )
    check_form(form)
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
        check_destination(output, source, url, options, force=force, form=form)
    with reporting(source, "indexing", anon=anon):
        import h5lens

        with ScanProgressBar(f"indexing {source}") as progress:
            manifest = h5lens.index(
                source, progress=progress, storage_options=options or None, url=url, **settings.index_arguments()
            )
    with reporting(output, "writing", anon=anon):
        if to_icechunk:
            from h5lens.icechunk import write_destination

            snapshot, committed = write_destination(output, manifest, storage_options=options or None)
            note = f"committed snapshot {snapshot}" if committed else f"unchanged at snapshot {snapshot}, nothing committed"
        else:
            written = manifest.save(
                output, format=form, storage_options=options or None, force=force, relative_sources=target is None
            )
            note = form_note(written, form, manifest, output)
    from h5lens.scan.report import summarize, unreadable_lines

    summary = summarize(manifest)
    typer.echo(
        f"{output}: {summary['arrays']} arrays, {summary['groups']} groups, "
        f"{summary['referenced_chunks']} referenced chunks ({summary['referenced_bytes']} bytes), "
        f"{summary['inline_chunks']} inline chunks ({summary['inline_bytes']} bytes); {note}"
    )
    for line in unreadable_lines(manifest):
        typer.echo(line)
    if target is not None:
        from h5lens.cli.browser import report_for_browser

        report_for_browser(manifest, output)


@app.command(cls=Command)
def publish(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="HDF5 file: local path or fsspec URL.")],
    destination: Annotated[
        str, typer.Argument(metavar="DEST", help="Where to write the manifest (path or URL): NAME.json or NAME.h5lens.")
    ],
    url: Annotated[
        str | None,
        typer.Option(metavar="URL", help="URL to record for the source, e.g. the bucket a local copy came from."),
    ] = None,
    inline_threshold: InlineThreshold = DEFAULT_INLINE,
    convention: Convention = DEFAULT_CONVENTION,
    slab_bytes: SlabBytes = DEFAULT_SLAB,
    materialize_limit: MaterializeLimit = DEFAULT_LIMIT,
    skip_unreadable: SkipUnreadable = False,
    read_block_size: ReadBlockSize = DEFAULT_BLOCK,
    form: Form = None,
    force: Force = False,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index SOURCE, check it, write DEST atomically.

    Sampled chunks are decoded through zarr before DEST is written; the manifest is
    read back from DEST. Nothing is written at DEST unless every step succeeds.
    """
    options = storage_options(storage_option, anon, endpoint_url)
    settings = scan_settings(
        inline_threshold=inline_threshold,
        convention=convention,
        slab_bytes=slab_bytes,
        materialize_limit=materialize_limit,
        read_block_size=read_block_size,
        skip_unreadable=skip_unreadable,
    )
    check_form(form)
    check_destination(destination, source, url, options, force=force, form=form)
    with reporting(source, "publishing", anon=anon):
        from h5lens.scan.publish import publish as run_publish

        with ScanProgressBar(f"publishing {source}") as progress:
            report = run_publish(
                source,
                destination,
                progress=progress,
                url=url,
                storage_options=options or None,
                format=form,
                force=force,
                **settings.index_arguments(),
            )
    s = report.summary
    typer.echo(
        f"{destination}: {report.manifest_bytes} bytes; {s['arrays']} arrays, {s['groups']} groups; "
        f"referenced {s['referenced_chunks']} chunks ({s['referenced_bytes']} bytes), "
        f"inline {s['inline_chunks']} chunks ({s['inline_bytes']} bytes); "
        f"{report.checked_chunks} sampled chunks decoded; {report.form} form"
    )
    if s["unreadable"]:
        said = f"{s['unreadable']} object(s) left out as unreadable"
        typer.echo(f"{destination}: {said}; h5lens inspect {destination} lists them")


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
        bool,
        typer.Option(
            "--force",
            help="Index every file again, even where its manifest is current, and replace files at the manifests' "
            "names that are not manifests.",
        ),
    ] = False,
    report: Annotated[
        str | None, typer.Option("--report", metavar="FILE", help="Also write one JSON record per file there.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Index nothing: say which files changed since their manifests were written, which have "
            "none, which are current, and which manifests' files are gone (exit status 0: all current; "
            "1: something to index; 3: only manifests whose files are gone).",
        ),
    ] = False,
    inline_threshold: InlineThreshold = DEFAULT_INLINE,
    convention: Convention = DEFAULT_CONVENTION,
    slab_bytes: SlabBytes = DEFAULT_SLAB,
    materialize_limit: MaterializeLimit = DEFAULT_LIMIT,
    skip_unreadable: SkipUnreadable = False,
    read_block_size: ReadBlockSize = DEFAULT_BLOCK,
    form: Form = None,
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index every file of SOURCES into DEST, one dask task per file.

    Each manifest is written atomically to DEST/<name>.json (DEST/<name>.h5lens with
    --format compact). A file whose manifest is current (same size and ETag or content) is
    skipped unless --force. A file that fails is reported and the others go on; the exit
    status is 2 if any failed. --check indexes nothing and says what a run would do.
    """
    options = storage_options(storage_option, anon, endpoint_url)
    settings = scan_settings(
        inline_threshold=inline_threshold,
        convention=convention,
        slab_bytes=slab_bytes,
        materialize_limit=materialize_limit,
        read_block_size=read_block_size,
        skip_unreadable=skip_unreadable,
    )
    check_form(form)
    with reporting(out_dir, "checking" if check else "indexing into", anon=anon):
        from h5lens.many import index_many as run

        with FileProgressBar("checking" if check else "indexing") as progress:
            result = run(
                sources,
                out_dir,
                scheduler=scheduler,
                workers=workers,
                force=force,
                report=report,
                storage_options=options or None,
                format=form,
                check=check,
                progress=progress,
                **settings.index_arguments(),
            )
    if check:
        _print_check(result)
        _check_exit(result, report)
        return
    _print_summary(result)
    if not result.ok:
        first = next(r.error_cli or r.error for r in result.records if r.error)
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
            table.add_row(record.source, record.error_cli or record.error or "")
        console.print(table)
    if result.unreadable:
        table = Table("file", "left out as unreadable (not in its manifest)", title=None)
        for record in result.records:
            for line in record.unreadable:
                table.add_row(record.source, line)
        console.print(table)


# index-many --check: what a run would do, in the exit status
EXIT_TO_INDEX = 1  # some file changed or has no manifest: a run indexes it
EXIT_ORPHANED = 3  # nothing to index, but some manifest's file is gone


def _print_check(result: IndexManyResult) -> None:
    """The check as tables on stdout: the counts, then every file that is not current."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=1 << 12)  # a pipe or a file: whole lines
    totals = Table("current", "changed", "missing", "orphaned", "failed", "wall time")
    totals.add_row(
        *(str(n) for n in (result.current, result.changed, result.missing, result.orphaned, result.failed)),
        f"{result.seconds:.1f} s",
    )
    console.print(totals)
    said = {
        "changed": lambda r: "; ".join(r.changes) or "changed",
        "missing": lambda r: f"no manifest at {r.manifest}",
        "orphaned": lambda r: f"{r.manifest}: its file is gone",
        "failed": lambda r: r.error_cli or r.error or "",
    }
    rows = [(r.source or r.manifest, r.status, said[r.status](r)) for r in result.records if r.status in said]
    if rows:
        table = Table("file", "status", "what", title=None)
        for row in rows:
            table.add_row(*row)
        console.print(table)


def _check_exit(result: IndexManyResult, report: str | None) -> None:
    where = f"; every file's record is in {report}" if report else ""
    if not result.ok:
        first = next(r.error_cli or r.error for r in result.records if r.error)
        fail(f"{result.failed} of {len(result.records)} files could not be checked (the first: {first}){where}")
    if result.changed or result.missing:
        raise typer.Exit(EXIT_TO_INDEX)
    if result.orphaned:
        raise typer.Exit(EXIT_ORPHANED)


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
    output: Annotated[str, typer.Argument(metavar="OUT", help="Where to write it (path or URL): NAME.json or NAME.h5lens.")],
    form: Form = None,
    force: Force = False,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--for",
            metavar="READER",
            help="'lindi': LINDI's reference JSON (OUT.lindi.json), which the DANDI archive's NWB viewer and "
            "lindi.LindiH5pyFile read (docs/browser.md); what LINDI has no form for is refused by name.",
        ),
    ] = None,
) -> None:
    """Write MANIFEST in another form: the JSON references any fsspec reader opens (OUT.json),
    or the compact columns that open in milliseconds at millions of chunks (OUT.h5lens).
    Exact both ways; the form is OUT's, or --format's. --for lindi: LINDI's form."""
    from h5lens.cli.manifests import open_manifest

    check_form(form)
    options = storage_options(storage_option, anon, endpoint_url)
    if target is not None:
        _convert_for(target, manifest, output, form, options, force=force, anon=anon)
        return
    check_destination(output, None, None, options, force=force, form=form)
    loaded = open_manifest(manifest, options)
    with reporting(output, "writing", anon=anon):
        written = loaded.save(output, format=form, storage_options=options or None, force=force)
    typer.echo(f"{output}: {written} form, {len(loaded.nodes)} nodes, {loaded.n_chunks} chunks")


def _convert_for(
    target: str, manifest: str, output: str, form: str | None, options: dict[str, Any], *, force: bool, anon: bool
) -> None:
    """``convert --for lindi``: LINDI's reference JSON of the manifest (h5lens.browser.lindi)."""
    if target != "lindi":
        fail(f"--for {target!r}: convert writes 'lindi' (index --for browser writes a manifest for browsers)")
    if form is not None:
        fail("--format names h5lens's manifest forms; --for lindi writes LINDI's")
    from h5lens.browser.lindi import check_lindi_name, write_lindi
    from h5lens.cli.manifests import open_manifest

    with reporting(output, "checking the destination", anon=anon):
        check_lindi_name(output)
    loaded = open_manifest(manifest, options)
    with reporting(output, "checking the destination", anon=anon):
        from h5lens.manifest.destination import check_destination as check
        from h5lens.manifest.locations import resolve

        sources = [resolve(s.url, loaded.location) for s in loaded.sources]
        check(output, sources=sources, storage_options=options or None, force=force, what="a LINDI file")
    with reporting(output, "writing", anon=anon):
        written = write_lindi(loaded, output, storage_options=options or None)
    chunks = sum(isinstance(v, list) for v in written["refs"].values())
    typer.echo(f"{output}: LINDI form, {len(loaded.nodes)} nodes, {chunks} chunk references")
