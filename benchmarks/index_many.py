#!/usr/bin/env python
"""Benchmark: a collection of small h5ad files on S3, indexed and read as one.

Setup: N files (default 20) written by anndata (sparse X, gzip, a categorical obs column,
obsm) in stock moto on 127.0.0.1, read through ``h5lens.testing.s3.CountingProxy`` with
``--latency-ms`` (default 20) added to every request, as a remote bucket would.

1. index   ``h5lens.index_many`` on a LocalCluster of 1 and of 2 worker processes (started
           before the clock; its start-up is printed apart) against the same files indexed
           one after another in one process (``h5lens.index`` + ``save``, what a loop of
           ``h5lens index`` does minus its start-up per file). Files/s and chunks/s.
2. read    per-gene sums of X over all files: ``h5lens.read_anndata(list, lazy=True)``
           computed on the 2-worker cluster and in-process (dask threads), the same lazy
           reads of each manifest alone concatenated by ``anndata.concat``
           on the cluster, against ``anndata.concat`` of ``anndata.read_h5ad`` of each
           file (s3fs file objects).

Every contender indexes into its own prefix. The machine is shared: read the ratios.
``--json OUT`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from typing import Any

import numpy as np

BUCKET = "bench-many"


def make_files(n: int, n_obs: int, n_vars: int, directory: str) -> list[str]:
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    paths = []
    for i in range(n):
        rng = np.random.default_rng(i)
        rows = n_obs + 13 * i
        adata = ad.AnnData(
            X=sp.random(rows, n_vars, density=0.05, format="csr", random_state=i, dtype=np.float32),
            obs=pd.DataFrame({"kind": pd.Categorical(rng.choice(["T", "B", "NK"], rows))},
                             index=[f"f{i}c{j}" for j in range(rows)]),
            var=pd.DataFrame(index=[f"g{j}" for j in range(n_vars)]),
        )
        adata.obsm["pca"] = rng.standard_normal((rows, 10)).astype(np.float32)
        path = os.path.join(directory, f"sample{i:03d}.h5ad")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adata.write_h5ad(path, compression="gzip")
        paths.append(path)
    return paths


def gene_sums(x: Any) -> Any:
    return x.map_blocks(
        lambda b: np.asarray(b.sum(axis=0), dtype=np.float64).reshape(1, -1),
        chunks=(1, x.shape[1]), dtype=np.float64, meta=np.empty((0, 0)),
    ).sum(axis=0)


def timed(label: str, results: dict[str, Any], fn: Any) -> Any:
    start = time.perf_counter()
    value = fn()
    results[label] = time.perf_counter() - start
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--obs", type=int, default=1500, help="rows of the first file (each next one has 13 more)")
    parser.add_argument("--vars", type=int, default=400)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()

    warnings.simplefilter("ignore")
    import anndata as ad
    import s3fs
    from distributed import Client, LocalCluster

    import h5lens
    from h5lens.testing.s3 import CountingProxy, LocalS3

    seconds: dict[str, Any] = {}
    with LocalS3() as server, CountingProxy(server.endpoint_url, latency_ms=args.latency_ms) as proxy, \
            tempfile.TemporaryDirectory() as tmp:
        server.make_bucket(BUCKET)
        paths = make_files(args.files, args.obs, args.vars, tmp)
        direct = server.filesystem()
        for path in paths:
            direct.put(path, f"{BUCKET}/atlas/{os.path.basename(path)}")
        options = server.storage_options(proxy.endpoint_url)
        urls = [f"s3://{BUCKET}/atlas/{os.path.basename(p)}" for p in paths]

        # 1. indexing
        def serial() -> int:
            chunks = 0
            for url in urls:
                manifest = h5lens.index(url, storage_options=options)
                manifest.save(f"s3://{BUCKET}/serial/{url.rsplit('/', 1)[1]}.json", storage_options=options)
                chunks += manifest.n_chunks - sum(len(t.inline) for t in manifest.chunks.values())
            return chunks

        proxy.stats.reset()
        chunks = timed("index serial", seconds, serial)
        requests = {"index serial": proxy.stats.requests}
        for workers in (1, 2):
            start = time.perf_counter()
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                              silence_logs=50) as cluster, Client(cluster, set_as_default=False) as client:
                seconds[f"cluster start ({workers} workers)"] = time.perf_counter() - start
                client.run(lambda: __import__("h5lens.api") and __import__("h5lens.many") and None)  # imports on the workers, before the clock
                proxy.stats.reset()
                result = timed(f"index_many {workers} workers", seconds, lambda workers=workers, client=client: h5lens.index_many(
                    f"s3://{BUCKET}/atlas/", f"s3://{BUCKET}/many{workers}/", scheduler=client,
                    storage_options=options))
                requests[f"index_many {workers} workers"] = proxy.stats.requests
                assert result.ok and result.indexed == len(urls) and result.chunks == chunks, result.to_dict()
                if workers == 2:
                    again = timed("index_many rerun (all skipped)", seconds, lambda: h5lens.index_many(
                        f"s3://{BUCKET}/atlas/", f"s3://{BUCKET}/many2/", scheduler=client, storage_options=options))
                    assert again.skipped == len(urls)

                    # 2. reading many as one
                    manifests = [f"s3://{BUCKET}/many2/{u.rsplit('/', 1)[1]}.json" for u in urls]
                    lazy = h5lens.read_anndata(manifests, lazy=True, storage_options=options)
                    blocks = lazy.X.numblocks[0]
                    on_cluster = timed("lazy list, 2-worker cluster", seconds,
                                       lambda lazy=lazy: client.compute(gene_sums(lazy.X)).result())
                    in_process = timed("lazy list, in-process threads", seconds,
                                       lambda lazy=lazy: gene_sums(lazy.X).compute(scheduler="threads"))
                    fine = ad.concat([h5lens.read_anndata(m, lazy=True, storage_options=options) for m in manifests])
                    fine_blocks = fine.X.numblocks[0]
                    fine_sums = timed("concat of lazy reads, 2-worker cluster", seconds,
                                      lambda fine=fine: client.compute(gene_sums(fine.X)).result())

        fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)

        def eager() -> Any:
            parts = []
            for url in urls:
                with fs.open(url, "rb") as f:
                    parts.append(ad.read_h5ad(f))
            return np.asarray(ad.concat(parts).X.sum(axis=0)).ravel()

        expected = timed("anndata.concat(read_h5ad)", seconds, eager)
        for got in (on_cluster, in_process, fine_sums):
            np.testing.assert_allclose(got, expected, rtol=1e-5)

    n = len(urls)
    print(f"{n} files, {chunks} chunk references, +{args.latency_ms:g} ms per request (moto via a proxy)")
    print("\nindexing                          s      files/s   chunks/s   requests   vs serial")
    for label in ("index serial", "index_many 1 workers", "index_many 2 workers"):
        s = seconds[label]
        print(f"  {label:<30} {s:6.2f} {n / s:8.1f} {chunks / s:10.0f} {requests[label]:10d}"
              f"   {seconds['index serial'] / s:5.2f}x")
    print(f"  {'rerun, all skipped (2 workers)':<30} {seconds['index_many rerun (all skipped)']:6.2f}")
    print(f"  cluster start-up: {seconds['cluster start (1 workers)']:.2f} s (1 worker), "
          f"{seconds['cluster start (2 workers)']:.2f} s (2 workers), not in the times above")
    print(f"\nper-gene sum over all files       s      vs read_h5ad   ({blocks} blocks byte-sized; "
          f"{fine_blocks} in the concat of lazy reads)")
    base = seconds["anndata.concat(read_h5ad)"]
    for label in ("lazy list, 2-worker cluster", "lazy list, in-process threads", "concat of lazy reads, 2-worker cluster",
                  "anndata.concat(read_h5ad)"):
        print(f"  {label:<34} {seconds[label]:6.2f}   {base / seconds[label]:5.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": n, "chunks": chunks, "latency_ms": args.latency_ms, "seconds": seconds,
                       "requests": requests, "blocks": {"byte_sized": blocks, "n_over_500": fine_blocks}}, f, indent=1)


if __name__ == "__main__":
    main()
