"""``h5lens check --for browser``: what a web browser reading a manifest with zarrita.js
would get wrong (docs/browser.md). ``index --for browser`` lives with ``index``
(:mod:`h5lens.cli.indexing`) and uses :mod:`h5lens.browser` too.

Exit status: 0 when plain zarrita.js 0.7 reads every array as h5lens does; 1 when each
finding is read right with h5lens's codec pack (npm ``h5lens-codecs``); 3 when something is
read by no browser reader; 2 on bad input, as every command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from h5lens.cli.app import Command, app, fail, reporting
from h5lens.cli.options import Anon, EndpointUrl, Manifest, StorageOption, storage_options

if TYPE_CHECKING:
    from h5lens.browser import BrowserCheck
    from h5lens.manifest.model import Manifest as Loaded

EXIT_NEEDS_PACK = 1  # every finding is read right with h5lens-codecs
EXIT_UNREADABLE = 3  # something no browser reader decodes

TARGETS = ("browser",)


@app.command(cls=Command)
def check(
    manifest: Manifest,
    target: Annotated[
        str,
        typer.Option(
            "--for",
            metavar="READER",
            help="Who reads the manifest: 'browser' (zarrita.js 0.7, with or without h5lens-codecs).",
        ),
    ],
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Say what a reader other than h5lens would read differently in MANIFEST.

    --for browser lists every array whose codec or data type zarrita.js 0.7 cannot decode
    (and whether h5lens-codecs can), every attribute with a bare NaN or Infinity, every name
    a URL changes, and every source URL a browser resolves otherwise. Exit status 0: all
    readable by plain zarrita.js; 1: all readable with h5lens-codecs; 3: some arrays by no
    browser reader.
    """
    if target not in TARGETS:
        fail(f"--for {target!r}: one of {', '.join(TARGETS)}")
    from h5lens.cli.manifests import open_manifest

    options = storage_options(storage_option, anon, endpoint_url)
    loaded = open_manifest(manifest, options)
    with reporting(manifest, "checking", anon=anon):
        from h5lens.browser import check_for_browser
        from h5lens.manifest.io import named_format

        result = check_for_browser(loaded, form=named_format(manifest))
    _print(result, manifest)
    if result.readable:
        return
    raise typer.Exit(EXIT_NEEDS_PACK if result.readable_with_pack else EXIT_UNREADABLE)


def _print(result: BrowserCheck, name: str) -> None:
    """Each finding on a line, then what it comes to for the manifest ``name``."""
    for finding in result.findings:
        typer.echo(finding.line())
    if result.readable:
        typer.echo(f"{name}: zarrita.js 0.7 reads all {result.arrays} arrays")
    elif result.readable_with_pack:
        typer.echo(f"{name}: all {result.arrays} arrays read right with h5lens-codecs (js/ in h5lens)")
    else:
        unreadable = result.unreadable_arrays()
        others = sum(not f.with_pack for f in result.findings) - len(unreadable)
        typer.echo(
            f"{name}: {len(unreadable)} of {result.arrays} arrays read by no browser reader"
            + (f"; {others} other findings no browser reader gets right" if others else "")
        )


@app.command("vitessce-config", cls=Command)
def vitessce_config(
    manifest: Manifest,
    manifest_url: Annotated[
        str | None,
        typer.Option(
            "--manifest-url", metavar="URL",
            help="The https:// URL the browser fetches MANIFEST from (default: MANIFEST, when it is a URL).",
        ),
    ] = None,
    output: Annotated[str, typer.Option("-o", "--output", metavar="CONFIG", help="Where to write the view config (JSON).")] = "-",
    name: Annotated[str | None, typer.Option(metavar="TITLE", help="The dataset's title in Vitessce.")] = None,
    storage_option: StorageOption = [],  # noqa: B006 - typer needs a literal default
    anon: Anon = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Write a Vitessce view config showing the h5ad MANIFEST indexes, read in place.

    The config opens the h5ad as Vitessce's file type anndata.h5ad, with the manifest as its
    reference spec (refSpecUrl): a scatterplot of each obsm embedding, the categorical obs
    columns as cell sets, X as the expression matrix. Index the h5ad with --for browser
    first (absolute URLs). Vitessce 4 needs the page to give it the store (docs/browser.md).
    """
    import json

    options = storage_options(storage_option, anon, endpoint_url)
    url = manifest_url or (manifest if "://" in manifest else None)
    if url is None:
        fail(f"{manifest}: give --manifest-url, the https:// URL the browser fetches the manifest from")
    from h5lens.cli.manifests import open_manifest

    loaded = open_manifest(manifest, options)
    with reporting(manifest, "writing a Vitessce config"):
        from h5lens.browser.vitessce import vitessce_config as make_config

        made = make_config(loaded, url, name=name)
        text = json.dumps(made.config, indent=2) + "\n"
        if output == "-":
            typer.echo(text, nl=False)
        else:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
    for column, reason in made.left_out.items():
        typer.echo(f"obs/{column}: left out of the cell sets: {reason}", err=True)
    if output != "-":
        typer.echo(f"{output}: Vitessce view config of {made.config['datasets'][0]['files'][0]['url']}")


# -- index --for browser (the option is index's, in h5lens.cli.indexing) -------------------------


def browser_convention(target: str | None, url: str | None, source: str, output: str, convention: str) -> str:
    """The convention profile to index in for ``--for target``, after refusing a source URL
    a browser would not fetch (one line, exit 2, before any work)."""
    if target is None:
        return convention
    if target not in TARGETS:
        fail(f"--for {target!r}: one of {', '.join(TARGETS)}")
    from h5lens.manifest.io import named_format

    if named_format(output) != "json":
        fail(f"{output}: --for browser writes the JSON form, which zarrita.js reads: name it NAME.json")
    from h5lens.cli.options import check_convention

    check_convention(convention)
    with reporting(source, "checking the URL for browsers"):
        from h5lens.browser.publishing import BROWSER_CONVENTION, browser_url

        browser_url(url, source)
    return BROWSER_CONVENTION


def report_for_browser(loaded: Loaded, output: str) -> None:
    """After ``index --for browser`` wrote ``output``: what browsers still read otherwise."""
    from h5lens.browser import check_for_browser
    from h5lens.manifest.io import named_format

    _print(check_for_browser(loaded, form=named_format(output)), output)
