"""``h5lens demo``: index and read a sample, locally and on S3."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from h5lens.cli.app import Command, app, fail, reporting
from h5lens.cli.options import StorageOption, storage_options


@app.command(cls=Command)
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
    options = storage_options(storage_option, False, None)
    if endpoint_url:
        _check_endpoint(endpoint_url)
    where = endpoint_url or str(directory)
    with reporting(where, "running the demo with", anon=bool(options.get("anon"))):
        from h5lens.cli.demo_run import run_demo

        run_demo(directory, endpoint_url=endpoint_url, bucket=bucket, storage_options=options)


def _check_endpoint(endpoint_url: str) -> None:
    """Fail in the first second if nothing listens at the endpoint (the demo's request
    counter in front of it would otherwise answer 502 for it)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        fail(f"--endpoint-url {endpoint_url}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=10).close()
    except OSError as e:
        fail(f"{endpoint_url}: cannot reach the storage endpoint ({e.strerror or type(e).__name__})", e)
