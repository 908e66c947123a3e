#!/usr/bin/env python
"""Benchmark: small h5ad files read through their manifests against anndata reading the files.

Three cases, each comparison run side by side in this one process, interleaved (every
contender once per round, the order rotated each round), medians of ``--repeats`` rounds:

1. pbmc   scanpy's pbmc68k h5ad (1.9 MB, ``--pbmc``): ``anndata.read_h5ad`` of the file
          against ``h5lens.read_anndata(manifest_path)`` (nothing switched on), with
          ``verify=False`` and of a ``Manifest`` already loaded; and where the fixed cost
          of an open goes: ``Manifest.load``, the store and the verification of its source,
          the root group, the read itself.
2. local  ``--files`` small h5ad files written by anndata (sparse csr X, gzip, obs with two
          categoricals and a number column, a text var column, obsm, a string in uns) as
          one AnnData: ``anndata.concat`` of ``read_h5ad`` of each against
          ``read_anndata(list)`` eagerly, and lazily (``read_anndata(list, lazy=True)``,
          then ``to_memory()``: the same AnnData in memory; opening alone printed apart),
          with anndata's own lazy reader of the files (``read_lazy`` of h5py files) beside.
3. s3     the same files in moto's S3 on 127.0.0.1 (``h5lens.testing.s3``), read through
          a counting proxy (``--latency-ms`` per request, 0 by default): each file
          downloaded to a temporary directory and read by ``read_h5ad``, concatenated,
          against ``read_anndata`` of the manifests (in the bucket beside the files), eager
          and lazy as above; requests per read.

Values are checked against anndata's before the clock. The machine may be shared: read
the ratios (h5lens / anndata: below 1 is faster). ``--json OUT`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

PBMC = "/work/shared/data/scanpy-1.12.4_10x_pbmc68k_reduced.h5ad"
BUCKET = "bench-small"


def make_files(n: int, n_obs: int, n_vars: int, directory: str) -> list[str]:
    """``n`` h5ad files as a maintainer of small files has them (anndata writes them)."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    paths = []
    for i in range(n):
        rng = np.random.default_rng(i)
        rows = n_obs + 13 * i
        adata = ad.AnnData(
            X=sp.random(rows, n_vars, density=0.05, format="csr", random_state=i, dtype=np.float32),
            obs=pd.DataFrame(
                {
                    "kind": pd.Categorical(rng.choice(["T", "B", "NK", "mono"], rows)),
                    "batch": pd.Categorical([f"b{i % 3}"] * rows),
                    "n_counts": rng.poisson(1000, rows).astype(np.float32),
                },
                index=[f"f{i}c{j}" for j in range(rows)],
            ),
            var=pd.DataFrame({"gene_ids": [f"ENSG{j:06d}" for j in range(n_vars)]}, index=[f"g{j}" for j in range(n_vars)]),
        )
        adata.obsm["X_pca"] = rng.standard_normal((rows, 10)).astype(np.float32)
        adata.uns["sample"] = f"sample {i}"
        path = os.path.join(directory, f"sample{i:03d}.h5ad")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adata.write_h5ad(path, compression="gzip")
        paths.append(path)
    return paths


def interleaved(contenders: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds (this process's, all its threads) of each contender per round:
    each once per round, the order rotated. CPU time is less moved by other processes on a
    shared machine; wall time is what a user waits."""
    names = list(contenders)
    for name in names:  # warm: imports, first-use caches of zarr and numcodecs
        contenders[name]()
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in names}
    for round_ in range(repeats):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            start, cpu = time.perf_counter(), time.process_time()
            contenders[name]()
            times[name]["cpu"].append(time.process_time() - cpu)
            times[name]["wall"].append(time.perf_counter() - start)
    return times


def report(title: str, times: dict[str, dict[str, list[float]]], base: str, *, cpu: bool = True) -> dict[str, Any]:
    """Print and return medians and ratios to ``base`` (CPU too, unless ``cpu`` is False:
    in-process servers count there)."""
    wall = {name: statistics.median(t["wall"]) for name, t in times.items()}
    used = {name: statistics.median(t["cpu"]) for name, t in times.items()}
    head = "   CPU ms   ratio" if cpu else ""
    print(f"\n{title}{'':<{max(1, 58 - len(title))}}  wall ms   ratio{head}   (ratio: to {base})")
    for name in times:
        line = f"  {name:<56} {wall[name] * 1e3:8.1f}  {wall[name] / wall[base]:5.2f}x"
        if cpu:
            line += f" {used[name] * 1e3:8.1f}  {used[name] / used[base]:5.2f}x"
        print(line)
    out: dict[str, Any] = {"wall_median_s": wall, "wall_ratio": {n: v / wall[base] for n, v in wall.items()}, "runs_s": times}
    if cpu:
        out["cpu_median_s"] = used
        out["cpu_ratio"] = {n: v / used[base] for n, v in used.items()}
    return out


def pbmc_case(path: str, workdir: str, repeats: int) -> dict[str, Any]:
    import anndata as ad
    from anndata.tests.helpers import assert_equal

    import h5lens
    from h5lens.manifest.model import Manifest

    local = os.path.join(workdir, "pbmc.h5ad")
    with open(path, "rb") as src, open(local, "wb") as dst:
        dst.write(src.read())
    manifest_path = os.path.join(workdir, "pbmc.json")
    h5lens.index(local).save(manifest_path)
    loaded = Manifest.load(manifest_path)
    assert_equal(h5lens.read_anndata(manifest_path), ad.read_h5ad(local))

    times = interleaved(
        {
            "anndata.read_h5ad(file)": lambda: ad.read_h5ad(local),
            "h5lens.read_anndata(manifest path)": lambda: h5lens.read_anndata(manifest_path),
            "h5lens.read_anndata(path, verify=False)": lambda: h5lens.read_anndata(manifest_path, verify=False),
            "h5lens.read_anndata(Manifest loaded)": lambda: h5lens.read_anndata(loaded),
            "Manifest.load(path)": lambda: Manifest.load(manifest_path),
        },
        repeats,
    )
    out = report("pbmc68k, eager, local", times, "anndata.read_h5ad(file)")

    out["stages_median_s"] = stages(manifest_path, repeats)
    return out


def stages(manifest_path: str, repeats: int) -> dict[str, dict[str, float]]:
    """Where the fixed cost of one eager ``read_anndata(manifest_path)`` goes, stage by
    stage: medians of wall and CPU milliseconds."""
    from h5lens.adata.readers import _read_eager
    from h5lens.manifest.model import Manifest
    from h5lens.store import ManifestStore

    try:
        from h5lens.read.open import root_group
    except ImportError:  # h5lens before the eager walk (a run of the same benchmark on main)
        import zarr

        def root_group(store: Any) -> Any:
            return zarr.open_group(store, mode="r", zarr_format=3)

    names = ("Manifest.load", "store + verify source", "root group", "read (walk and decode)")
    found: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in names}
    for _ in range(repeats + 1):
        marks = [(time.perf_counter(), time.process_time())]
        manifest = Manifest.load(manifest_path)
        marks.append((time.perf_counter(), time.process_time()))
        store = ManifestStore(manifest)
        store.verify_sources()
        marks.append((time.perf_counter(), time.process_time()))
        group = root_group(store)
        marks.append((time.perf_counter(), time.process_time()))
        _read_eager(group)
        marks.append((time.perf_counter(), time.process_time()))
        for name, before, after in zip(names, marks, marks[1:], strict=False):
            found[name]["wall"].append(after[0] - before[0])
            found[name]["cpu"].append(after[1] - before[1])
    medians = {
        name: {kind: statistics.median(values[1:]) for kind, values in times.items()} for name, times in found.items()
    }
    print(f"  stages of read_anndata({os.path.basename(manifest_path)}), median ms wall / CPU: "
          + ", ".join(f"{name} {m['wall'] * 1e3:.2f} / {m['cpu'] * 1e3:.2f}" for name, m in medians.items()))
    return medians


def collection_local(paths: list[str], manifests: list[str], repeats: int) -> dict[str, Any]:
    import anndata as ad
    import h5py
    from anndata.tests.helpers import assert_equal

    import h5lens

    def anndata_concat() -> Any:
        return ad.concat([ad.read_h5ad(p) for p in paths])

    expected = anndata_concat()
    assert_equal(h5lens.read_anndata(manifests), expected)
    assert_equal(h5lens.read_anndata(manifests, lazy=True).to_memory().X, expected.X)

    def anndata_lazy(to_memory: bool) -> Any:
        files = [h5py.File(p) for p in paths]
        try:
            found = ad.concat([ad.experimental.read_lazy(f) for f in files])
            return found.to_memory() if to_memory else found
        finally:
            for f in files:
                f.close()

    times = interleaved(
        {
            "anndata.concat(read_h5ad(file) each)": anndata_concat,
            "h5lens.read_anndata(list)": lambda: h5lens.read_anndata(manifests),
            "h5lens.read_anndata(list, lazy=True).to_memory()": lambda: h5lens.read_anndata(
                manifests, lazy=True
            ).to_memory(),
            "h5lens.read_anndata(list, lazy=True) (open only)": lambda: h5lens.read_anndata(manifests, lazy=True),
            "anndata.concat(read_lazy(h5py.File) each).to_memory()": lambda: anndata_lazy(True),
            "anndata.concat(read_lazy(h5py.File) each) (open only)": lambda: anndata_lazy(False),
        },
        repeats,
    )
    out = report(f"{len(paths)} files as one AnnData, local", times, "anndata.concat(read_h5ad(file) each)")
    out["stages_median_s"] = stages(manifests[0], repeats)
    return out


def collection_s3(paths: list[str], repeats: int, latency_ms: float) -> dict[str, Any]:
    import anndata as ad
    from anndata.tests.helpers import assert_equal

    import h5lens
    from h5lens.testing.s3 import CountingProxy, LocalS3

    with LocalS3() as server, CountingProxy(server.endpoint_url, latency_ms=latency_ms) as proxy, \
            tempfile.TemporaryDirectory() as downloads:
        server.make_bucket(BUCKET)
        direct = server.filesystem()
        urls = []
        for path in paths:
            url = f"s3://{BUCKET}/files/{os.path.basename(path)}"
            direct.put(path, url)
            urls.append(url)
        options = server.storage_options(proxy.endpoint_url)
        manifests = []
        for url in urls:
            manifest_url = url + ".json"
            h5lens.index(url, storage_options=options).save(manifest_url, storage_options=options)
            manifests.append(manifest_url)
        fs = server.filesystem(proxy.endpoint_url)

        def download_then_read() -> Any:
            parts = []
            for url in urls:
                local = os.path.join(downloads, os.path.basename(url))
                fs.get(url, local)
                parts.append(ad.read_h5ad(local))
                os.remove(local)
            return ad.concat(parts)

        expected = download_then_read()
        assert_equal(h5lens.read_anndata(manifests, storage_options=options), expected)
        assert_equal(h5lens.read_anndata(manifests, lazy=True, storage_options=options).to_memory().X, expected.X)

        contenders = {
            "download, anndata.concat(read_h5ad(file) each)": download_then_read,
            "h5lens.read_anndata(list)": lambda: h5lens.read_anndata(manifests, storage_options=options),
            "h5lens.read_anndata(list, lazy=True).to_memory()": lambda: h5lens.read_anndata(
                manifests, lazy=True, storage_options=options
            ).to_memory(),
            "h5lens.read_anndata(list, lazy=True) (open only)": lambda: h5lens.read_anndata(
                manifests, lazy=True, storage_options=options
            ),
        }
        requests = {}
        for name, read in contenders.items():
            proxy.stats.reset()
            read()
            requests[name] = proxy.stats.requests
        times = interleaved(contenders, repeats)
        out = report(
            f"{len(paths)} files as one AnnData, S3 (moto, +{latency_ms:g} ms/request)",
            times,
            "download, anndata.concat(read_h5ad(file) each)",
            cpu=False,  # moto and the proxy run in this process
        )
        print("  requests per read: " + ", ".join(f"{name}: {count}" for name, count in requests.items()))
        out["requests"] = requests
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pbmc", default=PBMC, help="scanpy's pbmc68k h5ad")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--obs", type=int, default=2500, help="rows of the first file (each next one has 13 more)")
    parser.add_argument("--vars", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--skip", choices=["pbmc", "local", "s3"], action="append", default=[])
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()

    warnings.simplefilter("ignore")
    import anndata  # noqa: F401 - imported before any clock

    import h5lens

    results: dict[str, Any] = {"files": args.files, "obs": args.obs, "vars": args.vars, "repeats": args.repeats,
                               "cpus": os.cpu_count(), "load_average": os.getloadavg()}
    with tempfile.TemporaryDirectory() as workdir:
        if "pbmc" not in args.skip:
            results["pbmc"] = pbmc_case(args.pbmc, workdir, args.repeats)
        paths = make_files(args.files, args.obs, args.vars, workdir)
        if "local" not in args.skip:
            manifests = []
            for path in paths:
                h5lens.index(path).save(path + ".json")
                manifests.append(path + ".json")
            results["local"] = collection_local(paths, manifests, args.repeats)
        if "s3" not in args.skip:
            results["s3"] = collection_s3(paths, args.repeats, args.latency_ms)
    results["load_average_after"] = os.getloadavg()
    print(f"\nload average before / after: {results['load_average']} / {results['load_average_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
