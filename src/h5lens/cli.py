"""The ``h5lens`` command.

Every command exits 0 on success and 2 with one line ``h5lens: error: ...`` on bad
input (an :class:`h5lens.H5LensError`, or a storage failure the library let through,
mapped by :func:`h5lens.backend_errors.storage_error`); nothing is written unless
the command succeeds. Ctrl-C exits 130 with ``h5lens: interrupted``. ``-v`` also
shows library warnings and the traceback of a handled error.

Only typer and the standard library are imported here at module level: ``h5lens
--help`` must not pay for zarr, h5py and numpy, and an early Ctrl-C has little to
interrupt. Each command imports what it uses.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    # Nothing is written before a command runs: leaving at once is safe, and it spares
    # the user a traceback from deep inside an import.
    os.write(2, b"h5lens: interrupted\n")
    os._exit(130)


if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") in ("h5lens", "h5lens.exe"):
    # Run as the command (not imported by a program): until main() takes over.
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)

import traceback  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Annotated, Any, NoReturn  # noqa: E402

import typer  # noqa: E402
from typer.core import TyperCommand  # noqa: E402

from h5lens.scan.options import (  # noqa: E402 - the defaults, defined once (cheap: no h5py, no zarr)
    CONVENTIONS,
    DEFAULT_CONVENTION,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_READ_BLOCK_SIZE,
    DEFAULT_SLAB_BYTES,
)

if TYPE_CHECKING:
    from types import TracebackType

    from rich.progress import Progress, TaskID

    from h5lens.manifest.model import Manifest as Loaded
    from h5lens.scan.options import ScanProgress

_DEFAULT_BLOCK = f"{DEFAULT_READ_BLOCK_SIZE >> 10}KiB"  # KiB: any default of whole KiB prints exactly

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
# Exception types from these packages are storage failures, whatever their class.
_STORAGE_PACKAGES = frozenset({"botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "fsspec", "urllib3"})

# verbose: -v given; interrupted: Ctrl-C seen; target: what the running step works on
# (url, action, anon, stale hint), for an error that escapes the step's own handling.
_state: dict[str, Any] = {
    "verbose": False, "interrupted": False, "target": ("h5lens", "running", False, "index it again")
}


class _Command(TyperCommand):
    """Usage lines that name arguments as the help text does: ``SOURCE``, ``[PATH]``."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if getattr(param, "param_type_name", "") != "argument":
                continue
            name = param.metavar or param.name.upper()
            pieces.append(name if param.required else f"[{name}]")
        return pieces


app = typer.Typer(
    name="h5lens",
    help="Index HDF5 files (h5ad, h5td, NWB, any HDF5) into zarr v3 reference manifests and read them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _options(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also show the warnings of the libraries h5lens uses, and tracebacks of errors."
        ),
    ] = False,
) -> None:
    """Index HDF5 files (h5ad, h5td, NWB, any HDF5) into zarr v3 reference manifests and read them."""
    import logging
    import warnings

    _state["verbose"] = verbose
    if not verbose:
        # The CLI speaks in its own lines; zarr's UnstableSpecificationWarning, asyncio's
        # "Task was destroyed but it is pending!" after a failed read, and the like are for
        # people debugging (-v), not for every run.
        warnings.simplefilter("ignore")
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        # h5lens's own warnings say where a scan took a slower road (libhdf5 listing a chunk
        # index the walker refused): for -v, not an extra line before every error.
        logging.getLogger("h5lens").setLevel(logging.ERROR)
    else:
        logging.getLogger("h5lens").setLevel(logging.NOTSET)


# -- errors ---------------------------------------------------------------------------------


def _fail(message: str, error: BaseException | None = None) -> NoReturn:
    """Print one line ``h5lens: error: message`` (after the traceback with -v) and exit 2."""
    if error is not None and _state["verbose"]:
        traceback.print_exception(error)
    lines = message.strip().splitlines()
    typer.echo(f"h5lens: error: {lines[0] if lines else 'failed'}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _from_storage_backend(error: BaseException) -> bool:
    return any(type(e).__module__.split(".", 1)[0] in _STORAGE_PACKAGES for e in _chain(error))


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _user_error(error: BaseException, url: str, action: str, anon: bool) -> BaseException | None:
    """The h5lens error a user can act on for ``error``, or None for a bug in h5lens."""
    from h5lens.errors import H5LensError

    if isinstance(error, H5LensError):
        return error
    if any(isinstance(e, ImportError) and (e.name or "").split(".")[0] == "h5lens" for e in _chain(error)):
        return None  # a part of h5lens itself that does not import: a bug, shown as one
    if isinstance(error, ModuleNotFoundError) and not _from_storage_backend(error):
        return error  # an optional dependency: said as such by _message
    if isinstance(error, (OSError, ImportError)) or _from_storage_backend(error):
        from h5lens.backend_errors import storage_error

        return storage_error(error, url, action, anon=anon)
    return None


def _message(error: BaseException, *, stale_hint: str) -> str:
    from h5lens.errors import StaleSourceError

    if isinstance(error, StaleSourceError) and error.url:
        changes = f" ({'; '.join(error.changes)})" if error.changes else ""
        return f"{error.url}: changed since the manifest was written{changes}; {stale_hint}"
    if isinstance(error, ModuleNotFoundError):
        return f"this needs the Python package {error.name!r}, which is not installed"
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    notes = [str(n).strip() for n in getattr(error, "__notes__", ()) if str(n).strip() and str(n) not in first]
    return "; ".join([first, *notes])


@contextmanager
def _reporting(url: str, action: str, *, anon: bool = False, stale_hint: str = "index it again") -> Iterator[None]:
    """Turn what a user can cause inside the block into one line and exit status 2."""
    _state["target"] = (url, action, anon, stale_hint)
    try:
        yield
    except typer.Exit:
        raise
    except Exception as e:  # noqa: BLE001 - classified below; bugs are re-raised
        found = _user_error(e, url, action, anon)
        if found is None:
            raise
        _fail(_message(found, stale_hint=stale_hint), e)


# -- options ----------------------------------------------------------------------------------


def _pairs(option: str, pairs: list[str]) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(f"{option} expects KEY=VALUE, got {pair!r}")
        out.append((key, value))
    return out


def _storage_options(pairs: list[str], anon: bool, endpoint_url: str | None) -> dict[str, Any]:
    options: dict[str, Any] = {key: _parse_value(value) for key, value in _pairs("--storage-option", pairs)}
    if anon:
        options["anon"] = True
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options


def _source_urls(pairs: list[str]) -> dict[str, str]:
    return dict(_pairs("--source-url", pairs))


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        _fail(f"--convention must be one of {', '.join(map(repr, CONVENTIONS))}, got {convention!r}")


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text


StorageOption = Annotated[
    list[str],
    typer.Option(
        "--storage-option", "-s", metavar="KEY=VALUE", help="fsspec storage option KEY=VALUE (repeatable)."
    ),
]
Anon = Annotated[bool, typer.Option("--anon", help="Anonymous access to object storage.")]
EndpointUrl = Annotated[
    str | None, typer.Option("--endpoint-url", metavar="URL", help="S3-compatible endpoint URL.")
]
SourceUrl = Annotated[
    list[str],
    typer.Option(
        "--source-url",
        metavar="OLD=NEW",
        help="Read the source recorded as OLD from NEW instead (a moved bucket, a local copy; repeatable).",
    ),
]
AllowLocal = Annotated[
    list[str],
    typer.Option(
        "--allow-local",
        metavar="PATH",
        help="Let a manifest read from a URL read local files under PATH (repeatable; refused otherwise).",
    ),
]
Verify = Annotated[
    bool, typer.Option("--verify/--no-verify", help="Refuse sources that changed since indexing.")
]
ReadBlockSize = Annotated[
    str,
    typer.Option(
        metavar="SIZE",
        help="Remote sources: read metadata in blocks of this size (e.g. 64KiB, 4MiB). "
        "Larger: fewer requests, more bytes fetched.",
    ),
]
Manifest = Annotated[str, typer.Argument(metavar="MANIFEST", help="Manifest JSON (path or URL).")]

Form = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORM",
        help="'json' (kerchunk references, any fsspec reader) or 'compact' (columns, for millions of chunks). "
        "Default: compact above 100,000 chunk references.",
    ),
]
FORMS = ("json", "compact")


def _check_form(form: str | None) -> None:
    if form is not None and form not in FORMS:
        _fail(f"--format must be 'json' or 'compact', got {form!r}")


def _form_note(written: str, asked: str | None, manifest: Any) -> str:
    """Which form was written, and why when h5lens chose it."""
    if asked is not None:
        return f"{written} form"
    side = "more" if written == "compact" else "no more"
    return f"{written} form ({manifest.n_chunks} chunk references, {side} than 100,000)"


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def _byte_size(option: str, text: str) -> int:
    """'64KiB' → 65536; a bad size exits with one line naming the option."""
    import re

    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        _fail(f"{option}: expected a size like 65536, 64KiB or 4MiB, got {text!r}")
    return int(match.group(1)) * _UNITS[unit]


def _check_destination(destination: str, source: str, url: str | None, options: dict[str, Any]) -> None:
    """Refuse a destination that is the source or cannot be written, before a long scan."""
    with _reporting(destination, "checking the destination", anon=bool(options.get("anon"))):
        from h5lens.destination import check_destination

        check_destination(destination, sources=[source, url], storage_options=options or None)


# -- commands -------------------------------------------------------------------------------


@app.command(cls=_Command)
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
    inline_threshold: Annotated[
        int, typer.Option(metavar="N", help="Copy arrays of at most this many stored bytes into the manifest.")
    ] = DEFAULT_INLINE_THRESHOLD,
    convention: Annotated[
        str, typer.Option(metavar="NAME", help="'released' (what convention readers ship) or 'proposal'.")
    ] = DEFAULT_CONVENTION,
    slab_bytes: Annotated[
        int, typer.Option(metavar="N", help="Virtual chunk size for big contiguous datasets.")
    ] = DEFAULT_SLAB_BYTES,
    materialize_limit: Annotated[
        int | None, typer.Option(metavar="N", help="Refuse to copy more than this many bytes of one dataset.")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(metavar="URL", help="URL to record for the source (default: the absolute source path)."),
    ] = None,
    read_block_size: ReadBlockSize = _DEFAULT_BLOCK,
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
    options = _storage_options(storage_option, anon, endpoint_url)
    _check_convention(convention)
    _check_form(form)
    block_size = _byte_size("--read-block-size", read_block_size)
    to_icechunk = output.startswith("icechunk://")  # a repository: h5lens.icechunk writes it
    if to_icechunk:
        if form is not None:
            _fail("--format is for manifest files; an Icechunk repository holds the references itself")
        with _reporting(output, "checking the destination", anon=anon):
            from h5lens.icechunk import check_destination as check_repository
            from h5lens.icechunk import quiet_logs

            quiet_logs()
            check_repository(output, sources=[source, url], storage_options=options or None)
    else:
        _check_destination(output, source, url, options)
    with _reporting(source, "indexing", anon=anon):
        import h5lens

        with _progress(f"indexing {source}") as progress:
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
    with _reporting(output, "writing", anon=anon):
        if to_icechunk:
            from h5lens.icechunk import write_destination

            snapshot, committed = write_destination(output, manifest, storage_options=options or None)
            note = f"committed snapshot {snapshot}" if committed else f"unchanged at snapshot {snapshot}, nothing committed"
        else:
            written = manifest.save(output, format=form, storage_options=options or None)
            note = _form_note(written, form, manifest)
    from h5lens.report import summarize

    summary = summarize(manifest)
    typer.echo(
        f"{output}: {summary['arrays']} arrays, {summary['groups']} groups, "
        f"{summary['referenced_chunks']} referenced chunks ({summary['referenced_bytes']} bytes), "
        f"{summary['inline_chunks']} inline chunks ({summary['inline_bytes']} bytes); {note}"
    )


@app.command(cls=_Command)
def publish(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="HDF5 file: local path or fsspec URL.")],
    destination: Annotated[
        str, typer.Argument(metavar="DEST", help="Where to write the manifest (path or URL).")
    ],
    url: Annotated[
        str | None,
        typer.Option(metavar="URL", help="URL to record for the source, e.g. the bucket a local copy came from."),
    ] = None,
    inline_threshold: Annotated[
        int, typer.Option(metavar="N", help="Copy arrays of at most this many stored bytes into the manifest.")
    ] = DEFAULT_INLINE_THRESHOLD,
    convention: Annotated[str, typer.Option(metavar="NAME", help="'released' or 'proposal'.")] = DEFAULT_CONVENTION,
    read_block_size: ReadBlockSize = _DEFAULT_BLOCK,
    form: Form = None,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index SOURCE, check it, write DEST atomically.

    Sampled chunks are decoded through zarr before DEST is written; the manifest is
    read back from DEST. Nothing is written at DEST unless every step succeeds.
    """
    options = _storage_options(storage_option, anon, endpoint_url)
    _check_convention(convention)
    _check_form(form)
    block_size = _byte_size("--read-block-size", read_block_size)
    _check_destination(destination, source, url, options)
    with _reporting(source, "publishing", anon=anon):
        from h5lens.publish import publish as run_publish

        with _progress(f"publishing {source}") as progress:
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


class _progress:
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


def _open(manifest: str, options: dict[str, Any]) -> Loaded:
    """The manifest, or one line saying why not (not found: said once, naming it once)."""
    from h5lens.errors import SourceNotFoundError

    with _reporting(manifest, "reading the manifest", anon=bool(options.get("anon"))):
        from h5lens.manifest.model import Manifest as Loaded

        try:
            return Loaded.from_json(manifest, storage_options=options or None)
        except SourceNotFoundError as e:
            _fail(f"{manifest}: manifest not found", e)


def _node(loaded: Loaded, manifest: str, key: str, path: str) -> dict[str, Any]:
    doc = loaded.nodes.get(key)
    if doc is None:
        from h5lens.describe import link_at, link_target

        link = link_at(loaded, key)
        if link is not None:
            _fail(f"{path}: a link to {link_target(link)} in {manifest}; give the target's path")
        _fail(f"{path}: not found in {manifest} (h5lens ls {manifest} lists its root)")
    return doc


@app.command(cls=_Command)
def inspect(
    manifest: Manifest,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Show the tree of groups and arrays.

    Encodings, shapes, data types, codecs, and per array the chunks and bytes
    referenced vs inline.
    """
    loaded = _open(manifest, _storage_options(storage_option, anon, endpoint_url))
    from h5lens.report import print_tree

    print_tree(loaded)


@app.command(cls=_Command)
def ls(
    manifest: Manifest,
    path: Annotated[str, typer.Argument(metavar="PATH", help="Group or array inside the manifest.")] = "",
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """List a group's members, or say what an array is.

    Groups end in /, links in @; anndata elements show their encoding and size.
    """
    loaded = _open(manifest, _storage_options(storage_option, anon, endpoint_url))
    key = path.strip("/")
    doc = _node(loaded, manifest, key, path)
    from h5lens.describe import describe_array, list_members

    lines = list_members(loaded, key) if doc.get("node_type") == "group" else describe_array(loaded, key)
    for line in lines:
        typer.echo(line)


@app.command(cls=_Command)
def cat(
    manifest: Manifest,
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH", help="Array or encoded group inside the manifest; PATH[0:10] or PATH[0:10, 2:4] reads a slice."
        ),
    ],
    slice_: Annotated[
        str | None,
        typer.Option("--slice", metavar="SLICE", help="What to read, like 0:10 or '0:10, 2:4' (numpy basic indexing)."),
    ] = None,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
    verify: Verify = True,
    source_url: SourceUrl = [],  # noqa: B006
    allow_local: AllowLocal = [],  # noqa: B006
) -> None:
    """Print values, reading only what is shown.

    Arrays as numpy prints them; anndata elements decoded: categorical labels,
    nullable values (<NA> where masked), dataframes as tables. A big array prints
    its first and last values, and only those are read.
    """
    options = _storage_options(storage_option, anon, endpoint_url)
    urls = _source_urls(source_url)
    loaded = _open(manifest, options)
    with _reporting(manifest, "reading", anon=anon):
        from h5lens.describe import split_selection

        key, selection = split_selection(loaded, path, slice_)
    _node(loaded, manifest, key, path)
    with _reporting(manifest, "reading", anon=anon, stale_hint="index it again, or pass --no-verify to read it anyway"):
        import numpy as np

        import h5lens
        from h5lens.describe import show

        group = h5lens.open_group(
            loaded,
            storage_options=options or None,
            source_urls=urls or None,
            verify=verify,
            allow_local=allow_local,
        )
        with np.printoptions(threshold=200, edgeitems=5):
            text = show(group, loaded, key, selection, manifest_name=manifest)
    typer.echo(text)
    if _state["verbose"]:
        from h5lens.read.open import store_of

        stats = store_of(group).stats
        typer.echo(f"h5lens: read {stats.bytes} bytes of the sources in {stats.requests} requests", err=True)


@app.command(cls=_Command)
def validate(
    manifest: Manifest,
    deep: Annotated[
        bool, typer.Option("--deep", help="Also read and decode every chunk from the sources (slow: reads everything).")
    ] = False,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
    source_url: SourceUrl = [],  # noqa: B006
    allow_local: AllowLocal = [],  # noqa: B006
) -> None:
    """Check a manifest against the convention.

    Lists each problem and exits 1 if there is any. --deep also decodes every chunk
    from the sources.
    """
    options = _storage_options(storage_option, anon, endpoint_url)
    urls = _source_urls(source_url)
    loaded = _open(manifest, options)
    with _reporting(manifest, "validating", anon=anon):
        import h5lens

        problems = h5lens.validate(
            loaded, storage_options=options or None, deep=deep, source_urls=urls or None, allow_local=allow_local
        )
    for problem in problems:
        typer.echo(str(problem))
    if problems:
        typer.echo(f"{manifest}: {len(problems)} problem(s)", err=True)
        raise typer.Exit(1)
    checked = ", every chunk decoded" if deep else ""
    typer.echo(f"{manifest}: valid ({len(loaded.nodes)} nodes, convention {loaded.convention}{checked})")


@app.command(cls=_Command)
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
    _check_form(form)
    options = _storage_options(storage_option, anon, endpoint_url)
    loaded = _open(manifest, options)
    from h5lens.destination import check_destination

    with _reporting(output, "writing", anon=anon):
        check_destination(output, storage_options=options or None)  # (writing never goes over a source)
        loaded.save(output, format=form, storage_options=options or None)
    typer.echo(f"{output}: {form} form, {len(loaded.nodes)} nodes, {loaded.n_chunks} chunks")


@app.command(cls=_Command)
def demo(
    directory: Annotated[
        Path, typer.Option("--dir", metavar="DIR", help="Where to write the sample and its manifest.")
    ] = Path("h5lens-demo"),
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            "--endpoint-url", metavar="URL", help="S3 endpoint for the cloud steps (default: moto on 127.0.0.1)."
        ),
    ] = None,
    bucket: Annotated[str, typer.Option(metavar="NAME", help="Bucket for the cloud steps.")] = "h5lens-demo",
    storage_option: StorageOption = [],  # noqa: B006
) -> None:
    """Index and read a sample, locally and on S3.

    Writes a sample h5ad, indexes it, reads it back through zarr, then the same over
    S3 (moto on 127.0.0.1 unless --endpoint-url).
    """
    options = _storage_options(storage_option, False, None)
    if endpoint_url:
        _check_endpoint(endpoint_url)
    where = endpoint_url or str(directory)
    with _reporting(where, "running the demo with", anon=bool(options.get("anon"))):
        from h5lens.demo import run_demo

        run_demo(directory, endpoint_url=endpoint_url, bucket=bucket, storage_options=options)


def _check_endpoint(endpoint_url: str) -> None:
    """Fail in the first second if nothing listens at the endpoint (the demo's request
    counter in front of it would otherwise answer 502 for it)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        _fail(f"--endpoint-url {endpoint_url}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=10).close()
    except OSError as e:
        _fail(f"{endpoint_url}: cannot reach the storage endpoint ({e.strerror or type(e).__name__})", e)


import h5lens.cli_many  # noqa: E402, F401 - registers the index-many command


# -- entry point ---------------------------------------------------------------------------------


def _on_interrupt(signum: int, frame: object) -> None:
    _state["interrupted"] = True
    raise KeyboardInterrupt


def _run(argv: list[str] | None) -> int:
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="h5lens", standalone_mode=False)
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        return EXIT_INTERRUPTED if _state["interrupted"] else 1
    except Exception as e:
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):  # click's usage errors
            return _usage_error(e)
        url, action, anon, stale_hint = _state["target"]
        found = _user_error(e, url, action, anon)
        if found is None:
            raise  # a bug in h5lens: the traceback is what helps
        try:
            _fail(_message(found, stale_hint=stale_hint), e)
        except typer.Exit as exit_:
            return int(exit_.exit_code)
    return code if isinstance(code, int) else 0


def _usage_error(error: Any) -> int:
    if type(error).__name__ == "NoArgsIsHelpError":  # plain `h5lens`: the help
        error.show()
        return int(error.exit_code)
    ctx = getattr(error, "ctx", None)
    command_path = getattr(ctx, "command_path", "") if ctx is not None else ""
    hint = f" (see {command_path} --help)" if command_path else ""
    message = " ".join(error.format_message().split())
    typer.echo(f"h5lens: error: {message}{hint}", err=True)
    return int(error.exit_code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    import threading

    _state.update(verbose=False, interrupted=False, target=("h5lens", "running", False, "index it again"))
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, _on_interrupt)
        if previous is _interrupted_while_starting:
            previous = signal.default_int_handler
    try:
        code = _run(argv)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if _state["interrupted"] or code == EXIT_INTERRUPTED:
        typer.echo("h5lens: interrupted", err=True)
        code = EXIT_INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
