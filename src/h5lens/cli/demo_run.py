"""``h5lens demo``: the main job end to end on a sample file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from h5lens.cli.sample import MANIFEST_NAME, SAMPLE_NAME

if TYPE_CHECKING:
    import zarr
    from rich.console import Console


def run_demo(
    directory: Path,
    *,
    endpoint_url: str | None = None,
    bucket: str = "h5lens-demo",
    storage_options: dict[str, Any] | None = None,
) -> None:
    import h5py
    import zarr
    from rich.console import Console

    import h5lens
    from h5lens.cli.sample import write_sample
    from h5lens.scan.report import summarize

    console = Console()
    directory.mkdir(parents=True, exist_ok=True)
    sample = directory / SAMPLE_NAME
    manifest_path = directory / MANIFEST_NAME
    write_sample(sample)
    console.print(f"[bold]1.[/bold] wrote {sample} ({os.path.getsize(sample)} bytes, AnnData layout, h5py)")

    manifest = h5lens.index(sample, url=SAMPLE_NAME)  # relative: the pair can move together
    manifest.to_json(os.fspath(manifest_path))
    counts = summarize(manifest)
    console.print(
        f"[bold]2.[/bold] indexed it into {manifest_path} ({os.path.getsize(manifest_path)} bytes): "
        f"{counts['arrays']} arrays, {counts['referenced_chunks']} chunks referenced by byte range, "
        f"{counts['inline_chunks']} small chunks inline"
    )

    group = h5lens.open_group(manifest_path)
    with h5py.File(sample, "r") as f:
        checked = 0
        for key in manifest.arrays():
            original = f[key]
            value = _array(group, key)[...]
            expected = original.asstr()[...] if original.dtype.kind == "O" else original[...]
            if not np.array_equal(np.asarray(value), np.asarray(expected)):
                raise AssertionError(f"{key}: the manifest reads differently from h5py")
            checked += 1
    console.print(f"[bold]3.[/bold] read all {checked} arrays back through zarr v3: identical to h5py")

    x = group["X"]
    console.print(
        f"    X is a {x.attrs['encoding-type']} of shape {list(cast('list[int]', x.attrs['shape']))}; "
        f"first nonzeros: {np.asarray(_array(group, 'X/data')[:5]).tolist()}"
    )
    try:
        import anndata

        adata = anndata.io.read_elem(zarr.open_group(group.store, mode="r"))
        console.print(f"[bold]4.[/bold] anndata reads the manifest as {adata}".replace("\n", "\n    "))
    except ImportError:
        console.print("[bold]4.[/bold] (install anndata to read the manifest as an AnnData object)")
    _cloud(console, sample, endpoint_url=endpoint_url, bucket=bucket, storage_options=storage_options)
    console.print(f"Next: [cyan]h5lens inspect {manifest_path}[/cyan]")


def _array(group: zarr.Group, key: str) -> zarr.Array:
    """The array at ``key`` (the manifest says it is one; zarr's indexing may give a group)."""
    import zarr

    array = group[key]
    if not isinstance(array, zarr.Array):
        raise TypeError(f"{key}: an array in the manifest, a group through zarr")
    return array


def _cloud(
    console: Console,
    sample: Path,
    *,
    endpoint_url: str | None,
    bucket: str,
    storage_options: dict[str, Any] | None,
) -> None:
    """Steps 5-6 against S3: a given endpoint, or moto's server on 127.0.0.1 started here."""
    from contextlib import nullcontext

    import h5lens
    from h5lens.testing.s3 import CountingProxy, LocalS3

    if endpoint_url is None:
        try:
            import moto.server  # noqa: F401
        except ImportError:
            console.print("[bold]5.[/bold] (install moto[server] to see the S3 steps against a local endpoint)")
            return
    embedded = LocalS3() if endpoint_url is None else nullcontext(None)
    with embedded as local:
        if local is not None:
            target, options = local.endpoint_url, local.storage_options()
        else:
            assert endpoint_url is not None  # LocalS3 is left out only when an endpoint is given
            target, options = endpoint_url, dict(storage_options or {})
        with CountingProxy(target) as proxy:
            counted = {**options, "endpoint_url": proxy.endpoint_url}
            import s3fs

            fs = s3fs.S3FileSystem(**counted, skip_instance_cache=True)
            if not fs.exists(bucket):
                fs.mkdir(bucket)
            fs.put(str(sample), f"{bucket}/{SAMPLE_NAME}")
            where = "moto on 127.0.0.1 (started by the demo)" if local is not None else target
            url = f"s3://{bucket}/{SAMPLE_NAME}"
            proxy.stats.reset()
            manifest = h5lens.index(url, storage_options=counted)
            manifest.to_json(url + ".json", storage_options=counted)
            console.print(
                f"[bold]5.[/bold] indexed {url} on {where}: {proxy.stats.gets} GETs, "
                f"{proxy.stats.bytes} bytes read, manifest published beside it"
            )
            proxy.stats.reset()
            adata = h5lens.read_anndata(url + ".json", storage_options=counted)
            console.print(
                f"[bold]6.[/bold] read it back from S3 as AnnData {adata.n_obs}×{adata.n_vars}: "
                f"{proxy.stats.gets} GETs ({proxy.stats.bytes} bytes), neighbouring chunks merged"
            )
