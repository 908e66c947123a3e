"""Commands that read manifests: ``inspect``, ``ls``, ``cat``, ``validate``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from h5lens.cli.app import Command, app, fail, reporting, state
from h5lens.cli.manifests import open_manifest
from h5lens.cli.options import (
    AllowLocal,
    Anon,
    EndpointUrl,
    Manifest,
    SourceUrl,
    StorageOption,
    Verify,
    source_urls,
    storage_options,
)

if TYPE_CHECKING:
    from h5lens.manifest.model import Manifest as Loaded


def node_of(loaded: Loaded, manifest: str, key: str, path: str) -> dict[str, Any]:
    from h5lens.describe.nodes import resolve

    doc = loaded.nodes.get(resolve(loaded, key))
    if doc is None:
        from h5lens.describe import link_at, link_target

        left_out = loaded.unreadable_at(key)
        if left_out is not None:
            fail(str(left_out.error()))
        link = link_at(loaded, key)
        if link is not None:
            fail(f"{path}: a link to {link_target(link)} in {manifest}; give the target's path")
        fail(f"{path}: not found in {manifest} (h5lens ls {manifest} lists its root)")
    return doc


@app.command(cls=Command)
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
    loaded = open_manifest(manifest, storage_options(storage_option, anon, endpoint_url), index_hdf5=True)
    from h5lens.scan.report import print_tree

    print_tree(loaded)


@app.command(cls=Command)
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
    loaded = open_manifest(manifest, storage_options(storage_option, anon, endpoint_url), index_hdf5=True)
    from h5lens.describe.nodes import resolve

    key = resolve(loaded, path.strip("/"))
    if key not in loaded.nodes and _ls_attribute(loaded, key):
        return
    doc = node_of(loaded, manifest, key, path)
    from h5lens.describe import describe_array, list_members
    from h5lens.describe.cdl import header, is_netcdf

    if doc.get("node_type") != "group":
        lines = describe_array(loaded, key)
    elif is_netcdf(loaded):
        lines = header(loaded, key, _title(manifest))
    else:
        lines = list_members(loaded, key)
    for line in lines:
        typer.echo(line)


def _ls_attribute(loaded: Loaded, key: str) -> bool:
    """``ls NODE/NAME`` of an attribute: one line, what it is (nodes win, as for ``cat``)."""
    from h5lens.describe.attributes import attribute_values, find_attribute, one_line

    found = find_attribute(loaded, key)
    if found is None:
        return False
    node, name = found
    left_out = loaded.unreadable_at(node, name)
    where = f"/{node} attribute {name!r}"
    shown = f"left out: {left_out.line}" if left_out is not None else one_line(attribute_values(loaded, node)[name])
    typer.echo(f"{where}: {shown}")
    return True


def _title(manifest: str) -> str:
    """What ``ncdump`` calls a file: its name without directories and extensions
    (``air.nc.json`` → ``air``)."""
    name = manifest.rstrip("/").rsplit("/", 1)[-1].split("#", 1)[0]
    return name.split(".", 1)[0] or name


@app.command(cls=Command)
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
    options = storage_options(storage_option, anon, endpoint_url)
    urls = source_urls(source_url)
    loaded = open_manifest(manifest, options, index_hdf5=True)
    with reporting(manifest, "reading", anon=anon):
        from h5lens.describe import split_selection
        from h5lens.describe.nodes import resolve

        key, selection = split_selection(loaded, path, slice_)
        key = resolve(loaded, key)
    if key not in loaded.nodes and _cat_attribute(loaded, key, selection):
        return
    node_of(loaded, manifest, key, path)
    with reporting(manifest, "reading", anon=anon, stale_hint="index it again, or pass --no-verify to read it anyway"):
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
        from h5lens.read.rectilinear import rectilinear_allowed

        # a combined manifest's arrays on a rectilinear grid: h5lens reads them, so cat does too
        with np.printoptions(threshold=200, edgeitems=5), rectilinear_allowed(loaded.nodes.values()):
            text = show(group, loaded, key, selection, manifest_name=manifest)
    typer.echo(text)
    if state["verbose"]:
        from h5lens.read.open import store_of

        stats = store_of(group).stats
        typer.echo(f"h5lens: read {stats.bytes} bytes of the sources in {stats.requests} requests", err=True)


def _cat_attribute(loaded: Loaded, key: str, selection: Any) -> bool:
    """Print the attribute ``key`` names (``NODE/NAME``), if it names one; nothing is read
    from the sources. A node of that path is looked up first: arrays and groups win."""
    import numpy as np

    from h5lens.describe.attributes import attribute_values, find_attribute, text

    found = find_attribute(loaded, key)
    if found is None:
        return False
    node, name = found
    left_out = loaded.unreadable_at(node, name)
    if left_out is not None:
        fail(str(left_out.error()))
    value = attribute_values(loaded, node)[name]
    if selection is not None:
        where = f"/{key}: an attribute"
        if not isinstance(value, np.ndarray) or value.ndim == 0:
            fail(f"{where} with one value: it prints whole, without a selection")
        try:
            value = value[tuple(np.asarray(s) if isinstance(s, list) else s for s in selection)]
        except IndexError as e:
            fail(f"{where} of shape {value.shape}: {e}")
    with np.printoptions(threshold=200, edgeitems=5):
        typer.echo(text(value))
    return True


@app.command(cls=Command)
def validate(
    manifests: Annotated[
        list[str],
        typer.Argument(
            metavar="MANIFEST...",
            help="Manifests (paths or URLs; NAME.json or NAME.h5lens), globs, or directories and prefixes "
            "(s3://bucket/manifests/), whose manifests are those named as index-many names them.",
        ),
    ],
    deep: Annotated[
        bool, typer.Option("--deep", help="Also read and decode every chunk from the sources (slow: reads everything).")
    ] = False,
    verify: Verify = True,
    storage_option: StorageOption = [],  # noqa: B006
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
    source_url: SourceUrl = [],  # noqa: B006
    allow_local: AllowLocal = [],  # noqa: B006
) -> None:
    """Check manifests against the convention, their chunk tables and their sources.

    Lists each problem and exits 1 if there is any. Each source must be there and
    unchanged since indexing (--no-verify: not looked at); --deep also decodes every
    chunk from the sources. Objects a manifest lists as left out when indexed
    (--skip-unreadable) are shown as notes, not problems. Several manifests: one line
    each and a summary; exit status 2 if any could not be checked, else 1 if any has
    problems.
    """
    options = storage_options(storage_option, anon, endpoint_url)
    urls = source_urls(source_url)
    with reporting(manifests[0], "listing", anon=anon):
        from h5lens.many.sources import expand_manifests

        found = expand_manifests(manifests, options)
    settings = {
        "storage_options": options or None, "deep": deep, "verify": verify, "source_urls": urls or None,
        "allow_local": allow_local,
    }  # fmt: skip
    if len(manifests) == 1 and found == manifests:  # one manifest: its problems, as they are
        _validate_one(manifests[0], open_manifest(manifests[0], options), settings)
        return
    _validate_many(found, options, settings)


def _problems(loaded: Loaded, settings: dict[str, Any]) -> list[Any]:
    import h5lens

    return h5lens.validate(loaded, **settings)


def _validated(loaded: Loaded, settings: dict[str, Any]) -> str:
    unchanged = settings["verify"] and loaded.sources
    checked = ", every chunk decoded" if settings["deep"] else ", sources unchanged" if unchanged else ""
    left_out = f", {len(loaded.unreadable)} left out as unreadable: see the notes" if loaded.unreadable else ""
    return f"valid ({len(loaded.nodes)} nodes, convention {loaded.convention}{checked}{left_out})"


def _validate_one(manifest: str, loaded: Loaded, settings: dict[str, Any]) -> None:
    with reporting(manifest, "validating", anon=bool((settings["storage_options"] or {}).get("anon"))):
        problems = _problems(loaded, settings)
    for problem in problems:
        typer.echo(f"{problem.path}: {problem.cli_message or problem.message}")
    for entry in loaded.unreadable:  # not problems: the manifest says what it lacks, and why
        typer.echo(f"note: left out as unreadable when indexed: {entry.line}")
    if problems:
        typer.echo(f"{manifest}: {len(problems)} problem(s)", err=True)
        raise typer.Exit(1)
    typer.echo(f"{manifest}: {_validated(loaded, settings)}")


def _validate_many(found: list[str], options: dict[str, Any], settings: dict[str, Any]) -> None:
    """Each manifest: its problems and notes, one line each and prefixed with its name, then
    a line saying what it is; then the counts. A manifest that cannot be checked at all (not
    found, not a manifest, storage) is said in its line and the others go on."""
    from h5lens.cli.app import message, user_error

    anon = bool(options.get("anon"))
    with_problems, unchecked = 0, []
    for manifest in found:
        from h5lens.errors import SourceNotFoundError

        step = "reading the manifest"
        said: str | None
        try:
            try:
                loaded = _load(manifest, options)
            except SourceNotFoundError:
                said = "manifest not found"
            else:
                step = "validating"
                said = None
                problems = _problems(loaded, settings)
        except Exception as e:  # classified below; bugs are re-raised
            error = user_error(e, manifest, step, anon)
            if error is None:
                raise
            said = message(error, stale_hint="index it again").removeprefix(f"{manifest}: ")
        if said is not None:
            unchecked.append(f"{manifest}: {said}")
            typer.echo(f"{manifest}: error: {said}")
            continue
        for problem in problems:
            typer.echo(f"{manifest}: {problem.path}: {problem.cli_message or problem.message}")
        for entry in loaded.unreadable:
            typer.echo(f"{manifest}: note: left out as unreadable when indexed: {entry.line}")
        if problems:
            with_problems += 1
            typer.echo(f"{manifest}: {len(problems)} problem(s)")
        else:
            typer.echo(f"{manifest}: {_validated(loaded, settings)}")
    valid = len(found) - with_problems - len(unchecked)
    typer.echo(
        f"{len(found)} manifests: {valid} valid, {with_problems} with problems, {len(unchecked)} could not be checked"
    )
    if unchecked:
        fail(f"{len(unchecked)} of {len(found)} manifests could not be checked (the first: {unchecked[0]})")
    if with_problems:
        typer.echo(f"{with_problems} of {len(found)} manifests have problems", err=True)
        raise typer.Exit(1)


def _load(manifest: str, options: dict[str, Any]) -> Loaded:
    from h5lens.read.options import load_manifest

    if manifest.startswith("icechunk://"):
        from h5lens.icechunk.containers import quiet_logs

        quiet_logs()
    return load_manifest(manifest, storage_options=options or None)

