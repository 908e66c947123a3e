#!/usr/bin/env python
"""Benchmark: many h5ad files as one combined manifest (issue 45's targets), locally.

``--files`` anndata-written h5ad files (``write_h5ad(compression="gzip")``: h5py's chunks, so
every file's last chunk ends short) of ``--min-cells``..``--max-cells`` cells each (uniform,
seeded), sharing ``--genes`` genes, X csr float32 of ``--density`` non-zero values, obs with
a categorical column whose categories differ per file. Each file is indexed once into a
compact manifest (outside the clock, in ``--workdir``, kept between runs). Then, one run,
side by side:

* combine: ``h5lens.combine`` of the per-file manifests (target <= 30 s for 1,000 files);
* size: the combined compact manifest against the sum of the per-file compact manifests
  plus 8 bytes per cell (target <= 1.1x);
* open: ``h5lens.read_anndata(combined, lazy=True)`` and listing its obs columns (<= 1 s);
* per-gene sum: the lazy combined X summed per gene, against ``anndata.concat`` of
  ``anndata.read_h5ad`` of the files (>= 5x faster) and ``h5lens.read_anndata(list of
  manifests, lazy=True)`` (>= 1x);

* annbatch's ``Loader`` (one shuffled epoch, csr batches) over the combined object (one
  ``add_dataset`` of ``ad.io.sparse_dataset`` over ``h5lens.open_group``, with zarr's
  ``array.rectilinear_chunks`` flag on while it reads) against the list of per-file stores
  (``add_datasets``), under ``h5lens.fast_reads()`` and with zarr's own codec pipeline
  (target: combined at least as fast);

every sum checked against the eager concatenation's (the loaders' per-gene sums of their
batches too). Each figure is printed beside its target. Imports that the first dask compute
of a process makes (dask imports ``distributed`` to choose a scheduler, ~0.25 s) are made
before the clock starts, so that they fall on no route. The full target scale (1,000 files of 200-5,000 cells) takes minutes and GBs of disk;
the defaults are small (``--files 20``) for a quick look. ``--s3`` runs the same figures
again over moto's S3 (in a process of its own) behind a proxy of ``--latency-ms`` (20) a
request and ``--bandwidth`` (100 MB/s) a stream. ``--compression none`` writes as ``write_h5ad`` does by default
(contiguous datasets), ``gzip`` in h5py's chunks.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def make_files(
    directory: str, n: int, low: int, high: int, genes: int, density: float, compression: str | None
) -> list[str]:
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(45)
    cells = rng.integers(low, high + 1, n)
    paths = []
    os.makedirs(directory, exist_ok=True)
    var = pd.DataFrame(index=[f"g{j}" for j in range(genes)])
    for i, count in enumerate(cells.tolist()):
        path = os.path.join(directory, f"f{i:04d}.h5ad")
        paths.append(path)
        if os.path.exists(path):
            continue
        x = sp.random(count, genes, density=density, format="csr", dtype=np.float32, random_state=i)
        obs = pd.DataFrame(
            {"cell_type": pd.Categorical(rng.choice([f"t{i % 7}", f"t{(i + 1) % 7}", "shared"], count)),
             "n_counts": np.asarray(x.sum(axis=1)).ravel()},
            index=[f"f{i}c{k}" for k in range(count)],
        )  # fmt: skip
        ad.AnnData(x, obs=obs, var=var).write_h5ad(path + ".partial", compression=compression)
        os.replace(path + ".partial", path)
    return paths


def index_files(paths: list[str], directory: str) -> list[str]:
    import h5lens

    out = []
    os.makedirs(directory, exist_ok=True)
    for path in paths:
        target = os.path.join(directory, os.path.basename(path) + ".h5lens")
        if not os.path.exists(target):
            h5lens.index(path).save(target, format="compact")
        out.append(target)
    return out


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    found = work()
    return time.perf_counter() - start, found


def gene_sums(x: Any) -> np.ndarray:
    """Per-gene sums of a dask array of scipy blocks (or an in-memory matrix), in float64."""
    if hasattr(x, "map_blocks"):
        per_block = x.map_blocks(
            lambda b: np.asarray(b.sum(axis=0, dtype="float64")).reshape(1, -1),
            chunks=(1, x.shape[1]), dtype="float64", meta=np.empty((0, 0)),
        )  # fmt: skip
        return per_block.sum(axis=0).compute()
    return np.asarray(x.sum(axis=0, dtype="float64")).ravel()


def open_rows(combined: str, prefix: str, **options: Any) -> list[tuple[str, float, str]]:
    """Opening the combined object and listing its obs columns three ways: as a zarr group
    (the columns are an attribute), with ``h5lens.read_anndata(lazy=True)``, and with
    ``anndata.experimental.read_lazy`` over the same store; both lazy AnnData read every
    obs name and check them unique (anndata's constructor), which is most of their time."""
    import anndata as ad
    import zarr

    import h5lens

    def group_columns() -> list[str]:
        return list(h5lens.open_group(combined, **options)["obs"].attrs["column-order"])

    def h5lens_lazy() -> list[str]:
        return list(h5lens.read_anndata(combined, lazy=True, **options).obs.columns)

    def anndata_lazy() -> list[str]:
        with zarr.config.set({"array.rectilinear_chunks": True}):
            return list(ad.experimental.read_lazy(h5lens.open_group(combined, **options)).obs.columns)

    group_s, columns = timed(group_columns)
    lazy_s, lazy_columns = timed(h5lens_lazy)
    theirs_s, their_columns = timed(anndata_lazy)
    assert sorted(columns) == sorted(lazy_columns) == sorted(their_columns), (columns, lazy_columns, their_columns)
    return [
        (f"{prefix}open + list obs columns, zarr group (s)", group_s, "<= 1 s"),
        (f"{prefix}open + list obs columns, read_anndata(lazy) (s)", lazy_s, "<= 1 s"),
        (f"{prefix}  the same, anndata.experimental.read_lazy (s)", theirs_s, ""),
        (f"{prefix}  read_anndata(lazy) / read_lazy", lazy_s / theirs_s, ""),
    ]


def loader_epoch(add: Callable[[Any], Any]) -> tuple[int, np.ndarray]:
    """One shuffled epoch of annbatch's Loader over what ``add`` adds: rows seen and the
    per-gene sums of every batch (float64)."""
    import annbatch

    loader = annbatch.Loader(
        chunk_size=256, preload_nchunks=32, batch_size=4096, shuffle=True, preload_to_gpu=False,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    add(loader)
    rows, sums = 0, np.zeros(0)
    for batch in loader:
        x = batch["X"]
        found = np.asarray(x.sum(axis=0, dtype="float64")).ravel()
        sums = found if not sums.size else sums + found
        rows += x.shape[0]
    return rows, sums


def loaders(combined_path: str, manifests: list[str], fast: bool) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Seconds of one epoch over the combined object and over the list of per-file stores,
    and their per-gene sums."""
    import anndata as ad
    import zarr

    import h5lens

    def combined(loader: Any) -> None:
        loader.add_dataset(ad.io.sparse_dataset(h5lens.open_group(combined_path)["X"]))

    def listed(loader: Any) -> None:
        loader.add_datasets([ad.io.sparse_dataset(h5lens.open_group(m)["X"]) for m in manifests])

    with h5lens.fast_reads(fast), zarr.config.set({"array.rectilinear_chunks": True}):
        one_s, (_, one_sums) = timed(lambda: loader_epoch(combined))
        many_s, (_, many_sums) = timed(lambda: loader_epoch(listed))
    return one_s, many_s, one_sums, many_sums


def s3_rows(
    paths: list[str], workdir: str, eager_sums: np.ndarray, latency_ms: float, bandwidth: float, loader: bool
) -> list[tuple[str, float, str]]:
    """The same figures over moto's S3 behind a proxy of ``latency_ms`` a request and
    ``bandwidth`` bytes/s a stream: the files and their manifests (indexed from S3 once,
    kept in ``workdir``; moto gives the same bytes the same ETag on every run) uploaded,
    then combined, opened and summed through the proxy. anndata's route downloads each file
    and reads it (``read_h5ad`` over a remote file object makes one request per HDF5 read)."""
    import tempfile

    import anndata as ad

    import h5lens
    from h5lens.testing.emulators import SeparateS3
    from h5lens.testing.s3 import CountingProxy

    bucket = "combine-bench"
    with (
        SeparateS3() as server,  # moto's Python in a process of its own, not holding this one's GIL
        CountingProxy(server.endpoint_url, latency_ms=latency_ms, bandwidth=bandwidth, cache_objects=True) as proxy,
        tempfile.TemporaryDirectory() as downloads,
    ):
        server.make_bucket(bucket)
        direct, direct_options = server.filesystem(), server.storage_options()
        cached = os.path.join(workdir, "s3-manifests")
        os.makedirs(cached, exist_ok=True)
        urls, manifests = [], []
        for path in paths:
            name = os.path.basename(path)
            url = f"s3://{bucket}/files/{name}"
            direct.put(path, url)
            local = os.path.join(cached, name + ".h5lens")
            if not os.path.exists(local):
                h5lens.index(url, storage_options=direct_options).save(local, format="compact")
            manifest = f"s3://{bucket}/manifests/{name}.h5lens"
            direct.put(local, manifest)
            urls.append(url)
            manifests.append(manifest)
        options = server.storage_options(proxy.endpoint_url)
        fs = server.filesystem(proxy.endpoint_url)
        combined_url = f"s3://{bucket}/combined.h5lens"

        proxy.stats.reset()
        combine_s, combined = timed(lambda: h5lens.combine(manifests, storage_options=options))
        combine_requests = proxy.stats.requests
        combined.save(combined_url, format="compact", storage_options=options)

        def download_concat() -> Any:
            parts = []
            for url in urls:
                local = os.path.join(downloads, os.path.basename(url))
                fs.get(url, local)
                parts.append(ad.read_h5ad(local))
                os.remove(local)
            return ad.concat(parts)

        opened = open_rows(combined_url, "S3: ", storage_options=options)
        lazy_s, lazy_sums = timed(
            lambda: gene_sums(h5lens.read_anndata(combined_url, lazy=True, storage_options=options).X)
        )
        concat_s, downloaded = timed(download_concat)
        concat_sum_s, concat_sums = timed(lambda: gene_sums(downloaded.X))
        list_s, list_sums = timed(
            lambda: gene_sums(h5lens.read_anndata(manifests, lazy=True, storage_options=options).X)
        )
        for found in (lazy_sums, concat_sums, list_sums):
            assert np.allclose(found, eager_sums), "per-gene sums over S3 differ"
        rows = [
            ("S3: combine (s)", combine_s, "<= 30 s at 1,000 files"),
            ("S3: requests to combine", combine_requests, ""),
            *opened,
            ("S3: lazy per-gene sum, combined (s)", lazy_s, ""),
            ("S3: download + anndata.concat(read_h5ad) + sum (s)", concat_s + concat_sum_s, ""),
            ("S3: read_anndata(list, lazy) + sum (s)", list_s, ""),
            ("S3: speed-up vs anndata.concat", (concat_s + concat_sum_s) / lazy_s, ">= 5x"),
            ("S3: speed-up vs list of manifests", list_s / lazy_s, ">= 1x"),
        ]
        if loader:
            import zarr

            def combined_loader(loader: Any) -> None:
                group = h5lens.open_group(combined_url, storage_options=options)
                loader.add_dataset(ad.io.sparse_dataset(group["X"]))

            def listed_loader(loader: Any) -> None:
                loader.add_datasets(
                    [ad.io.sparse_dataset(h5lens.open_group(m, storage_options=options)["X"]) for m in manifests]
                )

            with h5lens.fast_reads(), zarr.config.set({"array.rectilinear_chunks": True}):
                one_s, (_, one_sums) = timed(lambda: loader_epoch(combined_loader))
                many_s, (_, many_sums) = timed(lambda: loader_epoch(listed_loader))
            assert np.allclose(one_sums, eager_sums) and np.allclose(many_sums, eager_sums), "S3 loader sums differ"
            rows += [
                ("S3: annbatch Loader epoch, combined, fast_reads() (s)", one_s, ""),
                ("S3: annbatch Loader epoch, list of stores, fast_reads() (s)", many_s, ""),
                ("S3: Loader speed-up, combined vs list, fast_reads()", many_s / one_s, ">= 1x"),
            ]
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--min-cells", type=int, default=200)
    parser.add_argument("--max-cells", type=int, default=5000)
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument(
        "--compression", choices=("none", "gzip"), default="gzip",
        help="write_h5ad's compression: gzip (h5py chunks) or none (anndata's default: contiguous datasets)",
    )  # fmt: skip
    parser.add_argument("--workdir", default="/tmp/h5lens-combine-bench")
    parser.add_argument("--json", default=None)
    parser.add_argument("--no-loader", action="store_true", help="skip annbatch's Loader")
    parser.add_argument("--s3", action="store_true", help="also over moto's S3 behind a latency proxy")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="--s3: added to each request")
    parser.add_argument("--bandwidth", type=float, default=100e6, help="--s3: bytes/s of each response")
    args = parser.parse_args()

    import anndata as ad
    import dask.array as da

    import h5lens

    da.zeros(2, chunks=1).sum().compute()  # dask's first compute imports its schedulers: off the clock
    compression = None if args.compression == "none" else args.compression
    shape = f"{args.files}x{args.min_cells}-{args.max_cells}x{args.genes}-{args.density}-{args.compression}"
    workdir = os.path.join(args.workdir, shape)
    paths = make_files(
        os.path.join(workdir, "h5ad"), args.files, args.min_cells, args.max_cells, args.genes, args.density, compression
    )
    manifests = index_files(paths, os.path.join(workdir, "manifests"))
    combined_path = os.path.join(workdir, "combined.h5lens")

    combine_s, combined = timed(lambda: h5lens.combine(manifests))
    combined.save(combined_path, format="compact", force=True)
    n_cells = int(combined.nodes["X"]["attributes"]["shape"][0])
    per_file = sum(os.path.getsize(m) for m in manifests)
    size_ratio = os.path.getsize(combined_path) / (per_file + 8 * n_cells)

    opened = open_rows(combined_path, "")
    lazy_s, lazy_sums = timed(lambda: gene_sums(h5lens.read_anndata(combined_path, lazy=True).X))
    concat_s, eager = timed(lambda: ad.concat([ad.read_h5ad(p) for p in paths]))
    concat_sum_s, eager_sums = timed(lambda: gene_sums(eager.X))
    list_s, list_sums = timed(lambda: gene_sums(h5lens.read_anndata(manifests, lazy=True).X))
    assert np.allclose(lazy_sums, eager_sums) and np.allclose(list_sums, eager_sums), "per-gene sums differ"
    loader_rows = []
    if not args.no_loader:
        for fast, route in ((True, "fast_reads()"), (False, "zarr's pipeline")):
            one_s, many_s, one_sums, many_sums = loaders(combined_path, manifests, fast)
            assert np.allclose(one_sums, eager_sums) and np.allclose(many_sums, eager_sums), "loader sums differ"
            loader_rows += [
                (f"annbatch Loader epoch, combined, {route} (s)", one_s, ""),
                (f"annbatch Loader epoch, list of stores, {route} (s)", many_s, ""),
                (f"Loader speed-up, combined vs list, {route}", many_s / one_s, ">= 1x"),
            ]

    rows = [
        ("combine (s)", combine_s, "<= 30 s at 1,000 files"),
        ("combined compact / (sum of per-file + 8 B/cell)", size_ratio, "<= 1.1"),
        *opened,
        ("lazy per-gene sum, combined (s)", lazy_s, ""),
        ("anndata.concat(read_h5ad) + sum (s)", concat_s + concat_sum_s, ""),
        ("read_anndata(list, lazy) + sum (s)", list_s, ""),
        ("speed-up vs anndata.concat", (concat_s + concat_sum_s) / lazy_s, ">= 5x"),
        ("speed-up vs list of manifests", list_s / lazy_s, ">= 1x"),
        *loader_rows,
    ]
    if args.s3:
        rows += s3_rows(paths, workdir, eager_sums, args.latency_ms, args.bandwidth, not args.no_loader)
    print(f"{args.files} files, {n_cells} cells, {args.genes} genes (density {args.density})")
    for name, value, target in rows:
        print(f"  {name:58s} {value:10.3f}   target {target}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": args.files, "cells": n_cells, **{name: value for name, value, _ in rows}}, f, indent=1)


if __name__ == "__main__":
    main()
