#!/usr/bin/env python
"""Requests and bytes per backend, one run: index an h5ad, then open its manifest and
read_anndata, on every backend h5lens reads (moto S3, plain HTTP, an archive's token and
signed redirect, and where installed the GCS and Azure emulators), each behind a counter.

S3, GCS and Azure go through h5lens's counting proxy (``h5lens.testing.s3.CountingProxy``:
any HTTP, counted and forwarded); the HTTP servers count themselves. Prints one table:
backend, reader, then for indexing and for reading: requests and MB.

    python benchmarks/backend_requests.py [--cells 20000] [--genes 2000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import scipy.sparse as sp

import h5lens
from h5lens.testing import emulators
from h5lens.testing.http import ArchiveServer, FileServer
from h5lens.testing.s3 import CountingProxy, LocalS3


def write_h5ad(path: Path, cells: int, genes: int) -> None:
    rng = np.random.default_rng(0)
    x = sp.random(cells, genes, density=0.05, format="csr", dtype=np.float32, random_state=rng)
    adata = ad.AnnData(x)
    adata.obs["group"] = rng.choice(["a", "b", "c"], cells)
    adata.obsm["X_pca"] = rng.standard_normal((cells, 20)).astype(np.float32)
    adata.write_h5ad(path, compression="gzip")


def measure(url: str, options: dict[str, Any], counted: Any) -> dict[str, float]:
    """Requests and bytes of index, then of open + read_anndata (``counted()``: the counter's
    (requests, bytes) so far)."""
    r0, b0 = counted()
    manifest = h5lens.index(url, storage_options=options)
    r1, b1 = counted()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h5lens.read_anndata(manifest, storage_options=options)
    r2, b2 = counted()
    return {
        "index_requests": r1 - r0,
        "index_mb": (b1 - b0) / 1e6,
        "read_requests": r2 - r1,
        "read_mb": (b2 - b1) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=20000)
    parser.add_argument("--genes", type=int, default=2000)
    args = parser.parse_args()
    rows: list[tuple[str, str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "atlas.h5ad"
        write_h5ad(path, args.cells, args.genes)
        size = path.stat().st_size
        print(f"atlas.h5ad: {args.cells} x {args.genes}, {size / 1e6:.1f} MB")

        with LocalS3() as s3, CountingProxy(s3.endpoint_url) as proxy:
            s3.make_bucket("bench")
            s3.filesystem().put(str(path), "bench/atlas.h5ad")
            for client in ("obstore", "fsspec"):
                os.environ["H5LENS_CLIENT"] = client
                options = s3.storage_options(proxy.endpoint_url)
                rows.append(("s3 (moto)", client, measure("s3://bench/atlas.h5ad", options,
                                                          lambda: (proxy.stats.requests, proxy.stats.bytes))))  # fmt: skip
            os.environ.pop("H5LENS_CLIENT")

        with FileServer(tmp) as server:
            rows.append(("http", "auto", measure(server.url("atlas.h5ad"), {},
                                                 lambda: (server.stats.requests, server.stats.bytes))))  # fmt: skip
        with ArchiveServer(tmp, token="t", lifetime=600) as archive:
            options = {"headers": {"Authorization": "Bearer t"}}
            found = measure(archive.url("atlas.h5ad"), options, lambda: (archive.stats.requests, archive.stats.bytes))
            found["redirects"] = archive.archive.redirects
            rows.append(("http archive (token, 302)", "fsspec", found))

        if emulators.missing_gcs() is None:
            with emulators.LocalGCS() as gcs, CountingProxy(gcs.endpoint_url) as proxy:
                gcs.make_bucket("bench")
                gcs.filesystem().put(str(path), "bench/atlas.h5ad")
                options = {**gcs.storage_options(), "endpoint_url": proxy.endpoint_url}
                rows.append(("gcs (gcp-storage-emulator)", "fsspec", measure("gs://bench/atlas.h5ad", options,
                             lambda: (proxy.stats.requests, proxy.stats.bytes))))  # fmt: skip
        if emulators.missing_azure() is None:
            with emulators.LocalAzure() as azure, CountingProxy(f"http://127.0.0.1:{azure.port}") as proxy:
                azure.make_container("bench")
                azure.filesystem().put(str(path), "bench/atlas.h5ad")
                through = azure.connection_string.replace(f"127.0.0.1:{azure.port}", f"127.0.0.1:{proxy.port}")
                for client in ("obstore", "fsspec"):
                    os.environ["H5LENS_CLIENT"] = client
                    rows.append(("azure (Azurite)", client, measure("az://bench/atlas.h5ad",
                                 {"connection_string": through}, lambda: (proxy.stats.requests, proxy.stats.bytes))))  # fmt: skip
                os.environ.pop("H5LENS_CLIENT")

    print(f"{'backend':28} {'reader':8} {'index: req':>10} {'MB':>6} {'read: req':>10} {'MB':>6}  notes")
    for backend, reader, found in rows:
        notes = f"{found['redirects']} redirect(s)" if "redirects" in found else ""
        print(f"{backend:28} {reader:8} {found['index_requests']:>10} {found['index_mb']:>6.2f} "
              f"{found['read_requests']:>10} {found['read_mb']:>6.2f}  {notes}")  # fmt: skip


if __name__ == "__main__":
    main()
