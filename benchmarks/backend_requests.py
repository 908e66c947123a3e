#!/usr/bin/env python
"""Every backend h5lens reads, behind +20 ms per request, against the issue's targets; one run.

On moto S3, plain HTTP, and where installed the GCS emulator and Azurite, each behind
h5lens's counting proxy (``h5lens.testing.s3.CountingProxy``: any HTTP, counted, every
request delayed by ``--latency-ms``, every response streamed at ``--bandwidth`` bytes/s, one
S3 connection's ~100 MB/s; 0 for as fast as the proxy goes), for an h5ad written by anndata:

* **scan**: bytes a remote ``h5lens.index`` fetches over the file's metadata bytes (the
  file less every dataset's stored data, as ``benchmarks/remote_scan.py`` counts it);
  target <= 1.2.
* **read**: a full ``read_anndata`` of the manifest (in memory; its source checked once)
  over ``anndata.read_h5ad`` of the same backend's fsspec file (``fsspec.open``: s3fs,
  gcsfs, adlfs, fsspec's HTTP), both timed in this process, once; target <= 0.5.
* **round trips**: requests to open the manifest published beside the file (JSON) and
  read one small array (``obs/group/codes``), counted at the proxy from a fresh process;
  target <= 3 (the manifest, one check of the source, the data).
* **NWB over HTTP**: the time to open and read one second of an ElectricalSeries (pynwb,
  gzip chunks) through its published manifest, over h5py on ``remfile`` (the DANDI
  archive's way to stream NWB), each in a fresh process; target <= 0.5.

And without latency, as before: requests and MB of index and of read per backend, and an
archive's bearer token with its signed redirects (how many redirects a read costs).

    python benchmarks/backend_requests.py [--cells 20000] [--genes 2000] [--latency-ms 20] [--bandwidth 100e6]

``remfile`` is needed for the NWB comparison only (``pip install remfile``; not an h5lens
dependency); without it that row says so.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anndata as ad
import numpy as np
import scipy.sparse as sp

import h5lens
from h5lens.testing import emulators
from h5lens.testing.http import ArchiveServer, FileServer
from h5lens.testing.s3 import CountingProxy, LocalS3

sys.path.insert(0, str(Path(__file__).parent))
from read_bench import gen_nwb
from remote_scan import describe

TARGETS = {"scan": 1.2, "read": 0.5, "round_trips": 3, "nwb": 0.5}
SMALL_ARRAY = "obs/group/codes"
NWB_SERIES = "acquisition/ElectricalSeries/data"
NWB_ROWS, NWB_SLICE = 600_000, (300_000, 330_000)  # 20 s at 30 kHz; one second of it


def write_h5ad(path: Path, cells: int, genes: int) -> None:
    rng = np.random.default_rng(0)
    x = sp.random(cells, genes, density=0.05, format="csr", dtype=np.float32, random_state=rng)
    adata = ad.AnnData(x)
    adata.obs["group"] = rng.choice(["a", "b", "c"], cells)
    adata.obsm["X_pca"] = rng.standard_normal((cells, 20)).astype(np.float32)
    adata.write_h5ad(path, compression="gzip")


@dataclass
class Backend:
    """One backend behind its proxy: where the h5ad is, the options that reach it through
    the proxy, where its manifest is published, and how to put a local file there."""

    name: str
    reader: str  # H5LENS_CLIENT: obstore, fsspec, or auto
    url: str
    options: dict[str, Any]
    proxy: CountingProxy
    publish: Callable[[h5lens.Manifest], str]  # writes the manifest beside the file; its URL


@contextmanager
def reader(name: str) -> Iterator[None]:
    if name == "auto":
        yield
        return
    os.environ["H5LENS_CLIENT"] = name
    try:
        yield
    finally:
        os.environ.pop("H5LENS_CLIENT", None)


def _fresh_process(code: str, *args: str) -> dict[str, Any]:
    """``code`` run in a new Python (imports done before it times anything); its JSON answer."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=os.environ.copy(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"exit status {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


_OPEN_AND_READ = """
import json, sys, warnings
warnings.simplefilter("ignore")
import h5lens
url, options, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
values = h5lens.open(url, storage_options=options)[path][...]
print(json.dumps({"n": int(values.size)}))
"""


@contextmanager
def no_collection() -> Iterator[None]:
    """The garbage collector off while a read is timed (as ``timeit`` has it), collecting
    before and after. Not only fairness: h5py objects of a read over a file object, left in
    cycles, collected on fsspec's IO thread while h5py's lock waits on that thread, deadlock
    (anndata's read over fsspec's file hung for minutes, or timed out)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def latency_figures(backend: Backend, metadata_bytes: int) -> dict[str, Any]:
    """scan, read and round trips (see the module docstring) for one backend."""
    import fsspec

    stats = backend.proxy.stats
    with reader(backend.reader):
        stats.reset()
        start = time.perf_counter()
        manifest = h5lens.index(backend.url, storage_options=backend.options)
        scan = {"s": time.perf_counter() - start, "requests": stats.requests, "bytes": stats.bytes}

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stats.reset()
            with no_collection():
                start = time.perf_counter()
                mine = h5lens.read_anndata(manifest, storage_options=backend.options)
                read = {"h5lens_s": time.perf_counter() - start, "h5lens_requests": stats.requests}
            fs, path = fsspec.core.url_to_fs(backend.url, skip_instance_cache=True, **backend.options)
            stats.reset()
            with no_collection():
                start = time.perf_counter()
                with fs.open(path, "rb") as f:
                    theirs = ad.read_h5ad(f)
                read.update(anndata_s=time.perf_counter() - start, anndata_requests=stats.requests)
        assert (mine.X != theirs.X).nnz == 0 and mine.obs.equals(theirs.obs), backend.name

        published = backend.publish(manifest)
        stats.reset()
        _fresh_process(_OPEN_AND_READ, published, json.dumps(backend.options), SMALL_ARRAY)
        trips = stats.requests
    return {
        "scan": scan,
        "scan_ratio": scan["bytes"] / metadata_bytes,
        "read": read,
        "read_ratio": read["h5lens_s"] / read["anndata_s"],
        "round_trips": trips,
    }


_NWB_H5LENS = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np, h5lens
import h5lens.api, h5lens.read.navigate, h5lens.store, zarr  # imported before the clock starts, as h5py is below
url, path, start, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t = time.perf_counter()
values = h5lens.open(url)[path][start:stop]
print(json.dumps({"s": time.perf_counter() - t, "sum": int(values.astype(np.int64).sum())}))
"""

_NWB_REMFILE = """
import json, sys, time
import numpy as np, h5py, remfile
url, path, start, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t = time.perf_counter()
with h5py.File(remfile.File(url), "r") as f:
    values = f[path][start:stop]
print(json.dumps({"s": time.perf_counter() - t, "sum": int(values.astype(np.int64).sum())}))
"""


def nwb_figures(directory: Path, link: dict[str, Any], repeat: int = 5) -> dict[str, Any]:
    """One second of an ElectricalSeries over HTTP: through its published manifest, and by
    h5py over remfile, each from a fresh process, the same server and latency; the two
    alternate ``repeat`` times and each side's median is kept (one run of each moved the
    ratio by 0.1 on shared cores)."""
    try:
        import remfile  # noqa: F401
    except ImportError:
        return {"missing": "remfile is not installed (pip install remfile)"}
    path = directory / "session.nwb"
    gen_nwb(str(path), NWB_ROWS, channels=32, chunk_rows=10_000)
    with FileServer(directory) as server, CountingProxy(f"http://127.0.0.1:{server.port}", **link) as proxy:
        url = f"{proxy.endpoint_url}/session.nwb"
        h5lens.index(url).to_json(directory / "session.nwb.json")
        args = (NWB_SERIES, *map(str, NWB_SLICE))
        runs: dict[str, list[dict[str, Any]]] = {"h5lens": [], "remfile": []}
        for _ in range(repeat):
            for side, script, target in (("h5lens", _NWB_H5LENS, f"{proxy.endpoint_url}/session.nwb.json"),
                                         ("remfile", _NWB_REMFILE, url)):  # fmt: skip
                proxy.stats.reset()
                run = _fresh_process(script, target, *args)
                run["requests"] = proxy.stats.requests
                runs[side].append(run)
    mine, theirs = (sorted(runs[side], key=lambda r: r["s"])[len(runs[side]) // 2] for side in ("h5lens", "remfile"))
    assert {r["sum"] for r in runs["h5lens"] + runs["remfile"]} == {mine["sum"]}
    return {"h5lens": mine, "remfile": theirs, "ratio": mine["s"] / theirs["s"], "repeat": repeat}


def _print_nwb(nwb: dict[str, Any]) -> None:
    print(f"\nNWB over HTTP, {NWB_ROWS:,} x 32 int16 in gzip chunks of 10,000 rows; rows {NWB_SLICE[0]:,}-{NWB_SLICE[1]:,}:")
    if "missing" in nwb:
        print(f"  skipped: {nwb['missing']}")
        return
    print(f"  open + slice through the manifest {nwb['h5lens']['s']:.3f} s ({nwb['h5lens']['requests']} requests), "
          f"h5py over remfile {nwb['remfile']['s']:.3f} s ({nwb['remfile']['requests']} requests), medians of "
          f"{nwb['repeat']} alternating fresh processes: {nwb['ratio']:.2f}, {_verdict(nwb['ratio'], TARGETS['nwb'])}")  # fmt: skip


def request_counts(url: str, options: dict[str, Any], counted: Callable[[], tuple[int, int]]) -> dict[str, float]:
    """Requests and bytes of index, then of read_anndata (``counted()``: (requests, bytes) so far)."""
    r0, b0 = counted()
    manifest = h5lens.index(url, storage_options=options)
    r1, b1 = counted()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h5lens.read_anndata(manifest, storage_options=options)
    r2, b2 = counted()
    return {"index_requests": r1 - r0, "index_mb": (b1 - b0) / 1e6, "read_requests": r2 - r1, "read_mb": (b2 - b1) / 1e6}


def backends(stack: ExitStack, path: Path, directory: Path, link: dict[str, Any]) -> Iterator[Backend]:
    """Each backend, started (and stopped by ``stack``), the h5ad put there, behind a proxy
    (``link``: its latency and bandwidth)."""
    s3 = stack.enter_context(LocalS3())
    s3.make_bucket("bench")
    s3.filesystem().put(str(path), "bench/atlas.h5ad")
    proxy = stack.enter_context(CountingProxy(s3.endpoint_url, **link))
    options = s3.storage_options(proxy.endpoint_url)

    def to_s3(manifest: h5lens.Manifest, options: dict[str, Any] = options) -> str:
        manifest.to_json("s3://bench/atlas.h5ad.json", storage_options=options)
        return "s3://bench/atlas.h5ad.json"

    for client in ("obstore", "fsspec"):
        yield Backend("s3 (moto)", client, "s3://bench/atlas.h5ad", options, proxy, to_s3)

    server = stack.enter_context(FileServer(directory))
    proxy = stack.enter_context(CountingProxy(f"http://127.0.0.1:{server.port}", **link))

    def to_http(manifest: h5lens.Manifest, base: str = proxy.endpoint_url) -> str:
        manifest.to_json(directory / "atlas.h5ad.json")  # the server's directory: beside the file
        return f"{base}/atlas.h5ad.json"

    yield Backend("http", "auto", f"{proxy.endpoint_url}/atlas.h5ad", {}, proxy, to_http)

    if emulators.missing_gcs() is None:
        gcs = stack.enter_context(emulators.LocalGCS())
        gcs.make_bucket("bench")
        gcs.filesystem().put(str(path), "bench/atlas.h5ad")
        proxy = stack.enter_context(CountingProxy(gcs.endpoint_url, **link))
        options = {**gcs.storage_options(), "endpoint_url": proxy.endpoint_url}

        def to_gcs(manifest: h5lens.Manifest, options: dict[str, Any] = options) -> str:
            manifest.to_json("gs://bench/atlas.h5ad.json", storage_options=options)
            return "gs://bench/atlas.h5ad.json"

        yield Backend("gcs (gcp-storage-emulator)", "fsspec", "gs://bench/atlas.h5ad", options, proxy, to_gcs)
    else:
        print(f"gcs: skipped ({emulators.missing_gcs()})")
    if emulators.missing_azure() is None:
        azure = stack.enter_context(emulators.LocalAzure())
        azure.make_container("bench")
        azure.filesystem().put(str(path), "bench/atlas.h5ad")
        proxy = stack.enter_context(CountingProxy(f"http://127.0.0.1:{azure.port}", **link))
        through = azure.connection_string.replace(f"127.0.0.1:{azure.port}", f"127.0.0.1:{proxy.port}")
        options = {"connection_string": through}

        def to_azure(manifest: h5lens.Manifest, options: dict[str, Any] = options) -> str:
            manifest.to_json("az://bench/atlas.h5ad.json", storage_options=options)
            return "az://bench/atlas.h5ad.json"

        for client in ("obstore", "fsspec"):
            yield Backend("azure (Azurite)", client, "az://bench/atlas.h5ad", options, proxy, to_azure)
    else:
        print(f"azure: skipped ({emulators.missing_azure()})")


def _verdict(value: float, target: float) -> str:
    return f"target <= {target:g}: {'met' if value <= target else 'MISSED'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=20000)
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--bandwidth", type=float, default=100e6, help="bytes/s of each response (0: unthrottled)")
    parser.add_argument("--nwb-repeat", type=int, default=5, help="NWB runs of each side (medians)")
    parser.add_argument("--nwb-only", action="store_true", help="only the NWB comparison")
    args = parser.parse_args()
    if args.nwb_only:
        with tempfile.TemporaryDirectory() as tmp:
            _print_nwb(nwb_figures(Path(tmp), {"latency_ms": args.latency_ms, "bandwidth": args.bandwidth or None},
                                   args.nwb_repeat))  # fmt: skip
        return
    link = {"latency_ms": args.latency_ms, "bandwidth": args.bandwidth or None}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = directory / "atlas.h5ad"
        write_h5ad(path, args.cells, args.genes)
        metadata_bytes = describe(str(path))["metadata_bytes"]
        print(f"atlas.h5ad: {args.cells} x {args.genes}, {path.stat().st_size / 1e6:.1f} MB, "
              f"metadata {metadata_bytes / 1e6:.3f} MB; every request +{args.latency_ms:g} ms, "
              f"{f'{args.bandwidth / 1e6:g} MB/s a response' if args.bandwidth else 'responses unthrottled'}")  # fmt: skip

        print(f"\n{'backend':28} {'reader':8} {'scan MB/meta':>12}  {'read s h5lens/anndata':>22} {'ratio':>6}  "
              f"{'round trips':>11}")  # fmt: skip
        counts: list[tuple[str, str, dict[str, float]]] = []
        with ExitStack() as stack:
            for backend in backends(stack, path, directory, link):
                found = latency_figures(backend, metadata_bytes)
                read = found["read"]
                print(f"{backend.name:28} {backend.reader:8} {found['scan_ratio']:>12.2f}  "
                      f"{read['h5lens_s']:>9.2f} / {read['anndata_s']:<10.2f} {found['read_ratio']:>6.2f}  "
                      f"{found['round_trips']:>11}")  # fmt: skip
                print(f"{'':37} scan {_verdict(found['scan_ratio'], TARGETS['scan'])} "
                      f"({found['scan']['requests']} requests, {found['scan']['bytes'] / 1e6:.3f} MB); "
                      f"read {_verdict(found['read_ratio'], TARGETS['read'])} "
                      f"({read['h5lens_requests']} against {read['anndata_requests']} requests); "
                      f"round trips {_verdict(found['round_trips'], TARGETS['round_trips'])}")  # fmt: skip
                backend.proxy.latency_ms = 0  # the counts below: requests and bytes, without waiting
                with reader(backend.reader):
                    counts.append((backend.name, backend.reader, request_counts(
                        backend.url, backend.options, lambda p=backend.proxy: (p.stats.requests, p.stats.bytes))))  # fmt: skip
                backend.proxy.latency_ms = args.latency_ms

        _print_nwb(nwb_figures(directory, link, args.nwb_repeat))

        with ArchiveServer(tmp, token="t", lifetime=600) as archive:
            options = {"headers": {"Authorization": "Bearer t"}}
            found = request_counts(archive.url("atlas.h5ad"), options, lambda: (archive.stats.requests, archive.stats.bytes))
            found["redirects"] = archive.archive.redirects
            counts.append(("http archive (token, 302)", "fsspec", found))

    print(f"\nwithout latency:\n{'backend':28} {'reader':8} {'index: req':>10} {'MB':>6} {'read: req':>10} {'MB':>6}  notes")
    for name, client, found in counts:
        notes = f"{found['redirects']} redirect(s)" if "redirects" in found else ""
        print(f"{name:28} {client:8} {found['index_requests']:>10} {found['index_mb']:>6.2f} "
              f"{found['read_requests']:>10} {found['read_mb']:>6.2f}  {notes}")  # fmt: skip


if __name__ == "__main__":
    main()
