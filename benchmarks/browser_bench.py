"""An h5ad read in headless Chromium through its manifest, on a simulated S3 (issue 48).

An anndata-written AnnData of 50,000 cells x 2,000 genes (CSR ``X``, obs columns, a UMAP
embedding in ``obsm``) is written as an h5ad (``write_h5ad(compression="gzip")``, anndata
choosing the chunks) and as a zarr copy (``write_zarr``); the h5ad is indexed for browsers
(``index --for browser``, the proxy's URL). Both are served from 127.0.0.1 with ranges and
CORS behind the counting proxy of ``h5lens.testing`` (20 ms per request, 100 MB/s per
response), the page (``js/test/page.html``: zarrita.js 0.7.5 and h5lens-codecs, pinned in
``js/package-lock.json``) from another origin without either. Each figure comes from a fresh
Chromium (no cache), read once; every value read in the page is checked against anndata's.

Printed, each with its target:

- the first view (every obs column and the embedding): bytes fetched after the manifest
  over the bytes of the arrays it shows (as numpy holds them; strings as UTF-8), target
  <= 1.2, and requests after the manifest, target <= 10;
- one gene's column of X (CSR: all of ``X/indices`` and ``X/data`` are read, with
  ``X/indptr``), through the manifest against zarrita.js reading the same arrays of the
  zarr copy: time ratio, target <= 1.

Both manifest figures are given twice: with the pack's store as it comes (the ranges
zarrita asks for together fetched as few requests) and chunk by chunk (``coalesce:
false``, one request per chunk, as ``@zarrita/storage``'s ReferenceStore reads).

``python benchmarks/browser_bench.py [--cells N] [--genes N] [--json results/browser.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from h5lens.testing.chromium import Chromium, find_chromium
from h5lens.testing.s3 import CountingProxy
from test_browser_chromium import StaticServer  # the CORS file server of the browser tests, counting ranges

LATENCY_MS = 20
BANDWIDTH = 100e6
GENE = 123
OBS_COLUMNS = ("cell_type", "batch", "n_counts", "percent_mito")


def write_atlas(directory: Path, cells: int, genes: int, density: float = 0.05, seed: int = 0) -> Any:
    """The AnnData, written as ``atlas.h5ad`` and ``atlas.zarr`` by anndata; returned in memory."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    x = sp.random(cells, genes, density=density, format="csr", dtype=np.float32, random_state=seed)
    x.data[:] = rng.lognormal(0, 1, x.nnz).astype(np.float32)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice([f"type_{i}" for i in range(24)], cells)),
            "batch": pd.Categorical(rng.choice([f"batch_{i}" for i in range(6)], cells)),
            "n_counts": np.asarray(x.sum(axis=1)).ravel().astype(np.float32),
            "percent_mito": rng.random(cells).astype(np.float32),
        },
        index=[f"cell_{i:06d}" for i in range(cells)],
    )
    var = pd.DataFrame(index=[f"GENE{i:05d}" for i in range(genes)])
    adata = ad.AnnData(X=x, obs=obs, var=var, obsm={"X_umap": rng.standard_normal((cells, 2)).astype(np.float32)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(directory / "atlas.h5ad", compression="gzip")
        adata.write_zarr(directory / "atlas.zarr")
    return adata


def _first_view_arrays(manifest: Any) -> list[str]:
    """The arrays of the first view: every obs column (codes and categories of categoricals)
    and the obs index, and the embedding."""
    paths = [p for p in manifest.arrays() if p.startswith("obs/")]
    return sorted(paths) + ["obsm/X_umap"]


def _shown_bytes(adata: Any) -> int:
    """The bytes of the arrays the first view shows, as numpy holds them (text as UTF-8)."""
    total = adata.obsm["X_umap"].nbytes + sum(len(s.encode()) for s in adata.obs_names)
    for column in OBS_COLUMNS:
        values = adata.obs[column]
        if hasattr(values, "cat"):
            total += values.cat.codes.to_numpy().nbytes + sum(len(str(c).encode()) for c in values.cat.categories)
        else:
            total += values.to_numpy().nbytes
    return total


# In the page (js/test/page.html's import map): open a store, read arrays whole, time it.
READ = """(async () => {
  const zarr = await import("zarrita");
  const { ReferenceStore, encodePath, register } = await import("h5lens-codecs");
  const { default: FetchStore } = await import("@zarrita/storage/fetch");
  register(zarr.registry);
  const route = ROUTE, paths = PATHS, version = VERSION;
  const t0 = performance.now();
  let root;
  if (route === "manifest") root = zarr.root(await ReferenceStore.fromUrl(URL, COALESCE ? {} : { coalesce: false }));
  else root = zarr.root(new FetchStore(URL));
  const opened = performance.now();
  const open = version === 2 ? zarr.open.v2 : version === 3 ? zarr.open.v3 : zarr.open;
  const out = {};
  await Promise.all(paths.map(async (p) => {
    const array = await open(root.resolve(route === "manifest" ? encodePath(p) : p), { kind: "array" });
    const { data } = await zarr.get(array);
    out[p] = data;
  }));
  const done = performance.now();
  const summary = {};
  for (const [p, data] of Object.entries(out)) {
    summary[p] = {length: data.length, first: String(data[0] ?? data.get?.(0)), last: String(data[data.length - 1] ?? data.get?.(data.length - 1))};
  }
  if (GENE_COLUMN) {
    const indptr = out["X/indptr"], indices = out["X/indices"], values = out["X/data"];
    const column = new Float64Array(indptr.length - 1);
    for (let row = 0; row + 1 < indptr.length; row++)
      for (let k = Number(indptr[row]); k < Number(indptr[row + 1]); k++) if (indices[k] === GENE) column[row] = values[k];
    summary.column = Array.from(column);
  }
  return {open_s: (opened - t0) / 1000, read_s: (done - t0) / 1000, summary};
})()"""


def _read(
    chromium: str, page_url: str, url: str, route: str, paths: list[str], *, version: int | None, column: bool, coalesce: bool = True
) -> dict[str, Any]:
    expression = (
        READ.replace("COALESCE", json.dumps(coalesce)).replace("ROUTE", json.dumps(route)).replace("PATHS", json.dumps(paths)).replace("VERSION", json.dumps(version))
        .replace("URL", json.dumps(url)).replace("GENE_COLUMN", json.dumps(column)).replace("GENE", str(GENE))
    )
    with Chromium(chromium) as browser:
        page = browser.open(page_url)
        page.wait_for_title("ready")
        return page.evaluate(expression, timeout=600)


def _stored_bytes(manifest_path: Path, paths: list[str]) -> int:
    """The bytes of the arrays' chunks in the file (their references' lengths), what a read
    fetching nothing else would fetch."""
    refs = json.loads(manifest_path.read_text())["refs"]
    return sum(v[2] for k, v in refs.items() if isinstance(v, list) and any(k.startswith(f"{p}/c/") or k == f"{p}/c" for p in paths))


def _zarr_version(store: Path) -> int:
    return 3 if (store / "zarr.json").exists() else 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=50_000)
    parser.add_argument("--genes", type=int, default=2_000)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None or not (ROOT / "js" / "node_modules" / "zarrita").is_dir():
        sys.exit("needs chromium on PATH and js/node_modules (make js)")
    import h5lens

    with tempfile.TemporaryDirectory(prefix="h5lens-browser-bench-") as tmp:
        directory = Path(tmp)
        adata = write_atlas(directory, args.cells, args.genes)
        with (StaticServer(ROOT / "js", "js", cors=False) as site, StaticServer(directory, "data", cors=True) as bucket,
              CountingProxy(f"http://127.0.0.1:{bucket.port}", latency_ms=LATENCY_MS, bandwidth=BANDWIDTH) as s3):
            h5ad_url = f"{s3.endpoint_url}/data/atlas.h5ad"
            manifest = h5lens.index(directory / "atlas.h5ad", url=h5ad_url, convention="proposal")
            manifest.save(directory / "atlas.h5ad.json", relative_sources=False)
            manifest_url = f"{s3.endpoint_url}/data/atlas.h5ad.json"
            page = site.url("test/page.html")
            figures: dict[str, Any] = {
                "benchmark": "browser", "cells": args.cells, "genes": args.genes, "nnz": int(adata.X.nnz),
                "latency_ms": LATENCY_MS, "bandwidth_MBps": BANDWIDTH / 1e6, "manifest_bytes": os.path.getsize(directory / "atlas.h5ad.json"),
            }

            # the first view: obs and the embedding, through the manifest (the pack's store as
            # it comes, and asking for each chunk on its own: `coalesce: false`)
            view = _first_view_arrays(manifest)
            shown = _shown_bytes(adata)
            for key, coalesce in (("first_view", True), ("first_view_chunk_by_chunk", False)):
                s3.stats.reset()
                bucket.ranges.clear()
                first = _read(chromium, page, manifest_url, "manifest", view, version=3, column=False, coalesce=coalesce)
                manifest_gets = len(bucket.ranges.get("/data/atlas.h5ad.json", []))
                fetched = s3.stats.bytes - manifest_gets * figures["manifest_bytes"]
                assert first["summary"]["obsm/X_umap"]["length"] == adata.obsm["X_umap"].size
                figures[key] = {
                    "arrays": view, "read_s": round(first["read_s"], 3), "requests_after_manifest": s3.stats.requests - manifest_gets,
                    "bytes_after_manifest": fetched, "bytes_shown": shown, "bytes_ratio": round(fetched / shown, 3),
                    "bytes_stored": _stored_bytes(directory / "atlas.h5ad.json", view),
                    "h5ad_gets": list(bucket.ranges.get("/data/atlas.h5ad", [])),
                }

            # one gene's column of X: through the manifest, and from the zarr copy
            matrix = ["X/indptr", "X/indices", "X/data"]
            expected = np.asarray(adata.X[:, GENE].todense()).ravel()
            timings = {}
            for route, url, version, coalesce in (
                ("manifest", manifest_url, 3, True),
                ("manifest, chunk by chunk", manifest_url, 3, False),
                ("zarr copy", f"{s3.endpoint_url}/data/atlas.zarr", _zarr_version(directory / "atlas.zarr"), True),
            ):
                s3.stats.reset()
                bucket.ranges.clear()
                result = _read(chromium, page, url, "zarr" if route == "zarr copy" else "manifest", matrix, version=version,
                               column=True, coalesce=coalesce)
                np.testing.assert_array_equal(np.asarray(result["summary"]["column"], dtype=np.float32), expected)
                timings[route] = {"read_s": round(result["read_s"], 3), "requests": s3.stats.requests, "bytes": s3.stats.bytes,
                                  "gets": {path: len(ranges) for path, ranges in bucket.ranges.items()}}
                if route == "manifest":
                    timings[route]["h5ad_gets"] = list(bucket.ranges.get("/data/atlas.h5ad", []))
            figures["gene_column"] = {
                **timings, "time_ratio": round(timings["manifest"]["read_s"] / timings["zarr copy"]["read_s"], 3),
                "time_ratio_chunk_by_chunk": round(timings["manifest, chunk by chunk"]["read_s"] / timings["zarr copy"]["read_s"], 3),
                "bytes_stored_manifest": _stored_bytes(directory / "atlas.h5ad.json", matrix),
                "chunks": {p: manifest.nodes[p]["chunk_grid"]["configuration"]["chunk_shape"] for p in matrix},
            }
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


def _print(figures: dict[str, Any]) -> None:
    gene = figures["gene_column"]
    print(f"{figures['cells']:,} cells x {figures['genes']:,} genes (nnz {figures['nnz']:,}), "
          f"{figures['latency_ms']} ms a request, {figures['bandwidth_MBps']:.0f} MB/s a response; manifest {figures['manifest_bytes']:,} B")
    for key, said in (("first_view", "first view"), ("first_view_chunk_by_chunk", "first view, chunk by chunk")):
        view = figures[key]
        print(f"{said} ({len(view['arrays'])} arrays) in {view['read_s']} s: {view['bytes_after_manifest']:,} B fetched after the manifest "
              f"(the chunks hold {view['bytes_stored']:,} B) for {view['bytes_shown']:,} B shown = {view['bytes_ratio']}x (target <= 1.2); "
              f"{view['requests_after_manifest']} requests after the manifest (target <= 10)")
    print(f"gene {GENE}'s column (all of X/indices and X/data; their chunks hold {gene['bytes_stored_manifest']:,} B in the h5ad):")
    for route in ("manifest", "manifest, chunk by chunk", "zarr copy"):
        t = gene[route]
        print(f"  {route}: {t['read_s']} s, {t['requests']} requests, {t['bytes']:,} B" + (" (the manifest included)" if route != "zarr copy" else ""))
    print(f"gene column, manifest / zarr copy: {gene['time_ratio']}x (target <= 1); chunk by chunk {gene['time_ratio_chunk_by_chunk']}x")


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"({time.monotonic() - started:.0f} s in all)")
