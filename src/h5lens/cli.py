"""The ``h5lens`` command.

Every command exits 0 on success and 2 with a one-line ``h5lens: error: ...``
message on bad input; nothing is written unless the command succeeds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from h5lens.errors import H5LensError

app = typer.Typer(
    name="h5lens",
    help="Index HDF5 files (h5ad, h5td, NWB, any HDF5) into zarr v3 reference manifests and read them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_BAD_INPUT = 2


@app.callback()
def _options(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the warnings of the libraries h5lens uses.")
    ] = False,
) -> None:
    """Index HDF5 files (h5ad, h5td, NWB, any HDF5) into zarr v3 reference manifests and read them."""
    import warnings

    if not verbose:
        # The CLI speaks in its own lines; zarr's UnstableSpecificationWarning and the like
        # are for people debugging (-v), not for every run.
        warnings.simplefilter("ignore")


def _fail(message: str) -> None:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    typer.echo(f"h5lens: error: {first}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _storage_options(pairs: list[str], anon: bool, endpoint_url: str | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(f"--storage-option expects KEY=VALUE, got {pair!r}")
        options[key] = _parse_value(value)
    if anon:
        options["anon"] = True
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options


def _check_convention(convention: str) -> None:
    if convention not in ("released", "proposal"):
        _fail(f"--convention must be 'released' or 'proposal', got {convention!r}")


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text


StorageOption = Annotated[
    list[str], typer.Option("--storage-option", "-s", help="fsspec storage option KEY=VALUE (repeatable).")
]
Anon = Annotated[bool, typer.Option("--anon", help="Anonymous access to object storage.")]
EndpointUrl = Annotated[str | None, typer.Option("--endpoint-url", help="S3-compatible endpoint URL.")]
ReadBlockSize = Annotated[
    str,
    typer.Option(
        help="Remote sources: read metadata in blocks of this size (e.g. 64KiB, 4MiB). "
        "Larger: fewer requests, more bytes fetched."
    ),
]

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


@app.command()
def index(
    source: Annotated[str, typer.Argument(help="HDF5 file: local path or fsspec URL (s3://...).")],
    output: Annotated[str, typer.Option("--output", "-o", help="Where to write the manifest JSON.")],
    inline_threshold: Annotated[
        int, typer.Option(help="Copy arrays of at most this many stored bytes into the manifest.")
    ] = 1000,
    convention: Annotated[
        str, typer.Option(help="'released' (what convention readers ship) or 'proposal'.")
    ] = "released",
    slab_bytes: Annotated[int, typer.Option(help="Virtual chunk size for big contiguous datasets.")] = 4 << 20,
    materialize_limit: Annotated[
        int | None, typer.Option(help="Refuse to copy more than this many bytes of one dataset.")
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="URL to record for the source (default: the absolute source path).")
    ] = None,
    read_block_size: ReadBlockSize = "1MiB",
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index SOURCE into a reference manifest written to OUTPUT."""
    import h5lens

    options = _storage_options(storage_option, anon, endpoint_url)
    _check_convention(convention)
    try:
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
                read_block_size=_byte_size("--read-block-size", read_block_size),
            )
            manifest.to_json(output, storage_options=options or None)
    except (H5LensError, FileNotFoundError, PermissionError, IsADirectoryError) as e:
        _fail(str(e))
    from h5lens.report import summarize

    summary = summarize(manifest)
    typer.echo(
        f"{output}: {summary['arrays']} arrays, {summary['groups']} groups, "
        f"{summary['referenced_chunks']} referenced chunks ({summary['referenced_bytes']} bytes), "
        f"{summary['inline_chunks']} inline chunks ({summary['inline_bytes']} bytes)"
    )


@app.command()
def publish(
    source: Annotated[str, typer.Argument(help="HDF5 file: local path or fsspec URL.")],
    destination: Annotated[str, typer.Argument(help="Where to write the manifest (path or URL).")],
    url: Annotated[
        str | None, typer.Option(help="URL to record for the source, e.g. the bucket a local copy came from.")
    ] = None,
    inline_threshold: Annotated[int, typer.Option(help="Copy arrays of at most this many stored bytes into the manifest.")] = 1000,
    convention: Annotated[str, typer.Option(help="'released' or 'proposal'.")] = "released",
    read_block_size: ReadBlockSize = "1MiB",
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Index SOURCE, check that sampled chunks decode, write the manifest to DESTINATION atomically."""
    from h5lens.publish import publish as run_publish

    options = _storage_options(storage_option, anon, endpoint_url)
    _check_convention(convention)
    try:
        with _progress(f"publishing {source}") as progress:
            report = run_publish(
                source,
                destination,
                progress=progress,
                url=url,
                storage_options=options or None,
                inline_threshold=inline_threshold,
                convention=convention,
                read_block_size=_byte_size("--read-block-size", read_block_size),
            )
    except (H5LensError, FileNotFoundError, PermissionError, IsADirectoryError) as e:
        _fail(str(e))
    s = report.summary
    typer.echo(
        f"{destination}: {report.manifest_bytes} bytes; {s['arrays']} arrays, {s['groups']} groups; "
        f"referenced {s['referenced_chunks']} chunks ({s['referenced_bytes']} bytes), "
        f"inline {s['inline_chunks']} chunks ({s['inline_bytes']} bytes); "
        f"{report.checked_chunks} sampled chunks decoded"
    )


class _progress:
    """A rich progress bar on stderr while datasets are scanned (nothing when stderr is not a terminal).

    Entering gives a ``progress(done, total, path)`` callback for :func:`h5lens.index`.
    """

    def __init__(self, label: str) -> None:
        from rich.console import Console

        self.label = label
        self.console = Console(stderr=True)
        self.bar = None
        self.task = None

    def __enter__(self):
        if not self.console.is_terminal:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=True,
        )
        self.bar.__enter__()
        self.task = self.bar.add_task(self.label, total=None)
        return self.update

    def update(self, progress) -> None:
        mib = f" {progress.bytes_read / 2**20:.0f} MiB read," if progress.bytes_read else ""
        self.bar.update(
            self.task,
            completed=progress.datasets_done,
            total=progress.datasets_total,
            description=f"{self.label}{mib} {progress.chunks} chunks {progress.path}",
        )

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def _open(manifest: str, options: dict[str, Any]):
    import h5lens

    try:
        return h5lens.Manifest.from_json(manifest, storage_options=options or None)
    except (H5LensError, FileNotFoundError, IsADirectoryError, PermissionError) as e:
        _fail(f"{manifest}: {e}" if manifest not in str(e) else str(e))


@app.command()
def inspect(
    manifest: Annotated[str, typer.Argument(help="Manifest JSON (path or URL).")],
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Show the tree of a manifest: shapes, dtypes, codecs, chunks, inline vs referenced bytes."""
    from h5lens.report import print_tree

    print_tree(_open(manifest, _storage_options(storage_option, anon, endpoint_url)))


@app.command()
def ls(
    manifest: Annotated[str, typer.Argument(help="Manifest JSON (path or URL).")],
    path: Annotated[str, typer.Argument(help="Group path inside the manifest.")] = "",
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """List the members of a group."""
    loaded = _open(manifest, _storage_options(storage_option, anon, endpoint_url))
    key = path.strip("/")
    if key not in loaded.nodes:
        _fail(f"{path}: no such node in {manifest}")
    for name in loaded.children(key):
        child = f"{key}/{name}" if key else name
        kind = "/" if loaded.nodes[child]["node_type"] == "group" else ""
        typer.echo(f"{name}{kind}")


@app.command()
def cat(
    manifest: Annotated[str, typer.Argument(help="Manifest JSON (path or URL).")],
    path: Annotated[str, typer.Argument(help="Array path inside the manifest.")],
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="Refuse sources that changed since indexing.")
    ] = True,
) -> None:
    """Print the values of an array."""
    import numpy as np

    import h5lens

    options = _storage_options(storage_option, anon, endpoint_url)
    loaded = _open(manifest, options)
    key = path.strip("/")
    if loaded.nodes.get(key, {}).get("node_type") != "array":
        _fail(f"{path}: no such array in {manifest}")
    try:
        values = h5lens.open_group(loaded, storage_options=options or None, verify=verify)[key][...]
    except (H5LensError, OSError) as e:
        _fail(str(e))
    with np.printoptions(threshold=200, edgeitems=5):
        typer.echo(np.asarray(values))


@app.command()
def validate(
    manifest: Annotated[str, typer.Argument(help="Manifest JSON (path or URL).")],
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Check a manifest against the unified convention; exit 1 and list each problem if any."""
    from h5lens.validate import validate as run_validate

    options = _storage_options(storage_option, anon, endpoint_url)
    loaded = _open(manifest, options)
    problems = run_validate(loaded, storage_options=options or None)
    for problem in problems:
        typer.echo(str(problem))
    if problems:
        typer.echo(f"{manifest}: {len(problems)} problem(s)", err=True)
        raise typer.Exit(1)
    typer.echo(f"{manifest}: valid ({len(loaded.nodes)} nodes, convention {loaded.convention})")


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the sample and its manifest.")] = Path(
        "h5lens-demo"
    ),
    endpoint_url: Annotated[
        str | None,
        typer.Option("--endpoint-url", help="S3 endpoint for the cloud steps (default: moto on 127.0.0.1)."),
    ] = None,
    bucket: Annotated[str, typer.Option(help="Bucket for the cloud steps.")] = "h5lens-demo",
    storage_option: StorageOption = [],  # noqa: B006
) -> None:
    """Write a sample h5ad, index it, read it back through zarr, then the same over S3."""
    from h5lens.demo import run_demo

    try:
        run_demo(
            directory,
            endpoint_url=endpoint_url,
            bucket=bucket,
            storage_options=_storage_options(storage_option, False, None),
        )
    except H5LensError as e:
        _fail(str(e))


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        app(args=argv, prog_name="h5lens")
    except KeyboardInterrupt:
        typer.echo("h5lens: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
