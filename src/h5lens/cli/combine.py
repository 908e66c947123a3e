"""The ``combine`` command: many manifests as one (h5ad along obs, netCDF along ``--dim``)."""

from __future__ import annotations

from typing import Annotated

import typer

from h5lens.cli.app import Command, app, fail, reporting
from h5lens.cli.options import Anon, EndpointUrl, Force, Form, StorageOption, check_form, form_note, storage_options

JOINS = ("inner", "outer")


@app.command(cls=Command)
def combine(
    manifests: Annotated[
        list[str],
        typer.Argument(
            metavar="MANIFEST...", help="Manifests (paths or URLs; NAME.json or NAME.h5lens) or HDF5 files."
        ),
    ],
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            "--to",
            metavar="OUT",
            help="Where to write the combined manifest: NAME.json, NAME.h5lens, or icechunk://PATH.",
        ),
    ],
    dim: Annotated[
        str | None,
        typer.Option(
            "--dim", metavar="NAME", help="netCDF: the dimension to combine along (default: AnnData along obs)."
        ),
    ] = None,
    join: Annotated[str, typer.Option(metavar="HOW", help="AnnData: 'inner' or 'outer', as anndata.concat.")] = "inner",
    label: Annotated[
        str | None, typer.Option(metavar="COLUMN", help="AnnData: an obs column naming each cell's file.")
    ] = None,
    keys: Annotated[
        str | None, typer.Option(metavar="K1,K2,...", help="AnnData: the values of --label, one per manifest.")
    ] = None,
    index_unique: Annotated[
        str | None, typer.Option(metavar="SEP", help="AnnData: make obs names unique with SEP and the file's key.")
    ] = None,
    pairwise: Annotated[bool, typer.Option("--pairwise", help="AnnData: keep obsp, block-diagonal.")] = False,
    fill_value: Annotated[
        float | None,
        typer.Option(
            "--fill-value",
            metavar="NUMBER",
            help="AnnData with --join outer: the value of a gene a file lacks (default: anndata.concat's).",
        ),
    ] = None,
    for_readers: Annotated[
        str,
        typer.Option(
            "--for",
            metavar="READERS",
            help="'any' (default) or 'regular': refuse, naming them, arrays that need a rectilinear chunk grid.",
        ),
    ] = "any",
    encoding: Annotated[
        str,
        typer.Option(
            "--encoding",
            metavar="HOW",
            help="netCDF: 'equal' (default) refuses files whose CF encoding differs; 'per-file' records each "
            "file's, which h5lens's xarray engine applies (zarr's readers are refused those arrays).",
        ),
    ] = "equal",
    append: Annotated[
        bool,
        typer.Option("--append", help="Add MANIFEST... after the combined manifest at OUT (replaced with the result)."),
    ] = False,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            metavar="ADDRESS",
            help="HDF5 files among MANIFEST...: index them on this dask scheduler (default: here, one by one).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            metavar="N",
            min=1,
            help="HDF5 files among MANIFEST...: index them on a LocalCluster of N processes.",
        ),
    ] = None,
    form: Form = None,
    force: Force = False,
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Combine many manifests into one at OUT, each file's chunks referenced where they lie.

    AnnData files along obs (files sharing var): X, layers and obsm referenced where every
    file's can be, obs and what anndata.concat computes written as new small arrays. With
    --dim, netCDF files along that dimension, their encoding attributes checked equal (with
    --encoding per-file, each file's recorded where they differ, for engine="h5lens").
    Chunks of different lengths make a rectilinear chunk grid, which zarr reads with
    array.rectilinear_chunks on (h5lens's readers need nothing).
    """
    options = storage_options(storage_option, anon, endpoint_url)
    check_form(form)
    if join not in JOINS:
        fail(f"--join must be one of {', '.join(JOINS)}")
    if for_readers not in ("any", "regular"):
        fail("--for must be 'any' or 'regular'")
    if encoding not in ("equal", "per-file"):
        fail("--encoding must be 'equal' or 'per-file'")
    to_icechunk = output.startswith("icechunk://")
    if to_icechunk and form is not None:
        fail("--format is for manifest files; an Icechunk repository holds the references itself")
    with reporting(output, "combining", anon=anon):
        from h5lens.api import index
        from h5lens.combining import combine_with_summary
        from h5lens.many.sources import expand_manifests
        from h5lens.read.options import OpenOptions

        opening = OpenOptions(storage_options=options or None)
        previous = None
        if append:
            from h5lens.read.options import load_manifest

            previous = load_manifest(output, storage_options=options or None)
        named = expand_manifests(manifests, options or None)  # prefixes and globs: the manifests there
        manifest, summary = combine_with_summary(
            named, dim=dim, join=join, label=label, keys=keys.split(",") if keys else None,
            index_unique=index_unique, pairwise=pairwise, fill_value=_number(fill_value), for_readers=for_readers,
            encoding=encoding,
            append_to=previous, options=opening, index=index, scheduler=scheduler, workers=workers,
        )  # fmt: skip
    with reporting(output, "writing", anon=anon):
        if to_icechunk:
            from h5lens.icechunk import write_destination

            snapshot, committed = write_destination(output, manifest, storage_options=options or None)
            note = f"committed snapshot {snapshot}" if committed else f"unchanged at snapshot {snapshot}"
        else:
            written = manifest.save(output, format=form, storage_options=options or None, force=force or append)
            note = form_note(written, form, manifest, output)
    for line in summary.lines():
        typer.echo(line)
    typer.echo(f"{output}: {note}")


def _number(value: float | None) -> float | int | None:
    """A whole number as an int (anndata then keeps an integer matrix integer), else as given."""
    return int(value) if value is not None and value.is_integer() else value


__all__ = ["combine"]
