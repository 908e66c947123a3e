#!/usr/bin/env python
"""Benchmark: h5lens over object storage against its peers, on one sparse h5ad, in one run.

Phases (each contender runs in a fresh subprocess; imports happen before the clock starts):

1. scan     ``h5lens.index(url)`` vs kerchunk 0.2.10 ``SingleHdf5ToZarr(fsspec file)`` with
            s3fs's default read-ahead cache and with a 1 MiB block cache; at the tools'
            default inlining and with inlining off.
2. full     ``h5lens.read_anndata(manifest)`` vs ``anndata.read_h5ad(fsspec file, 1 MiB
            blockcache)`` vs the plain fsspec reference route (``ReferenceFileSystem`` +
            ``zarr.storage.FsspecStore`` + ``anndata.read_zarr``) on the same manifest.
3. slice    a contiguous 1% of rows of X: ``h5lens.read_anndata(lazy=True).X[rows].compute()``
            vs anndata ``read_lazy`` over the reference route vs h5py + ``anndata.io.sparse_dataset``
            over an fsspec file (1 MiB blockcache).

Servers (all on 127.0.0.1, in one server subprocess; every request passes a counting proxy,
``h5lens.testing.s3.CountingProxy`` extended with a request log):

* ``moto``    stock moto S3 read through s3fs. moto re-reads the whole object on every GET and
              serves ~200 requests/s: its request and byte COUNTS are S3's, its times are not
              reported as throughput.
* ``http``    the same bytes served by a small aiohttp handler (a Range is one ``os.pread``) over
              plain http:// through fsspec's HTTP filesystem: wall times come from here, at
              +0 ms and at +20 ms injected per request (CountingProxy(latency_ms=20)).
              Where a contender uses "s3fs defaults", the HTTP file is opened with s3fs's
              default block size and cache type so both clients issue the same requests.

Run ``--help`` for options; ``--json OUT`` writes every number.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

RESULT_MARKER = "@@RESULT@@ "
SERVER_COMMAND = "_server"
ZYGOTE_COMMAND = "_zygote"
BUCKET = "bench"
FILE_NAME = "bench.h5ad"
MIN_X_CHUNKS = 50_000
BLOCK = 1 << 20  # the 1 MiB block cache peers and h5lens's own scan use
S3FS_DEFAULT_BLOCK = 50 << 20  # s3fs.S3FileSystem.default_block_size
S3FS_DEFAULT_CACHE = "readahead"  # s3fs's default_cache_type
LATENCY_MS = 20.0


# ---------------------------------------------------------------------------
# Test file
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSpec:
    n_obs: int = 50_000
    n_vars: int = 20_000
    density: float = 0.004
    x_chunk: int = 150  # elements per chunk of X/data, X/indices, X/indptr: ~53k chunks at the defaults
    seed: int = 0

    def name(self) -> str:
        return f"bench_{self.n_obs}x{self.n_vars}_d{self.density:g}_c{self.x_chunk}_s{self.seed}.h5ad"


def generate_file(path: str, spec: FileSpec) -> float:
    """A CSR h5ad (float32 counts, gzip, small chunks) with categorical obs/var columns."""
    import anndata as ad
    import h5py
    import pandas as pd
    import scipy.sparse as sp

    start = time.perf_counter()
    rng = np.random.default_rng(spec.seed)
    per_row = rng.poisson(spec.density * spec.n_vars, spec.n_obs).clip(1, spec.n_vars // 2)
    indptr = np.zeros(spec.n_obs + 1, dtype=np.int64)
    np.cumsum(per_row, out=indptr[1:])
    nnz = int(indptr[-1])
    row = np.repeat(np.arange(spec.n_obs), per_row)
    # strictly increasing columns per row from gaps in [1, n_vars // nnz_of_row]: sorted, unique, < n_vars
    gaps = (rng.random(nnz) * (spec.n_vars // per_row)[row]).astype(np.int64) + 1
    cumulative = np.cumsum(gaps)
    row_base = np.r_[0, cumulative[indptr[1:-1] - 1]]
    indices = (cumulative - row_base[row] - 1).astype(np.int32)
    data = rng.geometric(0.35, nnz).astype(np.float32)  # counts: mostly 1-3, a long tail
    x = sp.csr_matrix((data, indices, indptr), shape=(spec.n_obs, spec.n_vars))
    del row, gaps, cumulative

    cell_types = np.array([f"type_{i}" for i in range(24)])
    batches = np.array([f"batch{i}" for i in range(8)])
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(cell_types[rng.integers(0, 24, spec.n_obs)]),
            "batch": pd.Categorical(batches[rng.integers(0, 8, spec.n_obs)]),
            "n_counts": np.asarray(x.sum(axis=1)).ravel().astype(np.float32),
            "n_genes": per_row.astype(np.int32),
            "pct_mito": (rng.random(spec.n_obs) * 10).astype(np.float32),
        },
        index=[f"cell_{i:06d}" for i in range(spec.n_obs)],
    )
    var = pd.DataFrame(
        {
            "gene_symbol": [f"GENE{i}" for i in range(spec.n_vars)],
            "feature_type": pd.Categorical(
                np.where(rng.random(spec.n_vars) < 0.95, "Gene Expression", "Antibody Capture")
            ),
            "highly_variable": rng.random(spec.n_vars) < 0.1,
            "mean": rng.random(spec.n_vars).astype(np.float32),
        },
        index=[f"ENSG{i:011d}" for i in range(spec.n_vars)],
    )
    adata = ad.AnnData(obs=obs, var=var, uns={"title": "h5lens s3 benchmark"})
    tmp = path + ".partial"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(tmp, compression="gzip")
        # X written once, straight with small chunks (no rewrite: no freed space left in the file)
        with h5py.File(tmp, "a") as f:
            ad.io.write_elem(f, "X", x, dataset_kwargs={"chunks": (spec.x_chunk,), "compression": "gzip"})
    os.replace(tmp, path)
    return time.perf_counter() - start


@dataclass
class FileInfo:
    path: str
    size: int
    n_obs: int
    n_vars: int
    nnz: int
    x_sum: float
    data_bytes: int  # sum of every dataset's stored bytes (chunks or contiguous data)
    metadata_bytes: int  # size - data_bytes: object headers, B-trees, heaps (vlen strings too), free space
    x_bytes: int  # stored bytes of X/data + X/indices + X/indptr
    x_chunks: int  # chunks of X/data + X/indices
    all_chunks: int
    datasets: list[dict[str, Any]] = field(default_factory=list)


def describe_file(path: str) -> tuple[FileInfo, dict[str, np.ndarray]]:
    """Sizes, plus the X chunk tables ((offset, size) per chunk in order) for the 'needed bytes' of a slice."""
    import h5py

    datasets: list[dict[str, Any]] = []
    tables: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                n = obj.id.get_num_chunks() if obj.chunks else 0
                datasets.append(
                    {"path": name, "shape": obj.shape, "chunks": obj.chunks, "n_chunks": n,
                     "stored": int(obj.id.get_storage_size())}
                )
                if name in ("X/data", "X/indices", "X/indptr"):
                    rows: list[tuple[int, int]] = []
                    obj.id.chunk_iter(lambda info: rows.append((info.chunk_offset[0], info.size)))
                    rows.sort()
                    tables[name] = np.array([s for _, s in rows], dtype=np.int64)

        f.visititems(visit)
        shape = tuple(int(v) for v in f["X"].attrs["shape"])
        nnz = int(f["X/data"].shape[0])
        x_sum = float(f["X/data"][...].astype(np.float64).sum())
    size = os.path.getsize(path)
    data = sum(d["stored"] for d in datasets)
    x_paths = ("X/data", "X/indices", "X/indptr")
    info = FileInfo(
        path=path,
        size=size,
        n_obs=shape[0],
        n_vars=shape[1],
        nnz=nnz,
        x_sum=x_sum,
        data_bytes=data,
        metadata_bytes=size - data,
        x_bytes=sum(d["stored"] for d in datasets if d["path"] in x_paths),
        x_chunks=sum(d["n_chunks"] for d in datasets if d["path"] in ("X/data", "X/indices")),
        all_chunks=sum(d["n_chunks"] for d in datasets),
        datasets=datasets,
    )
    return info, tables


def slice_truth(path: str, start: int, stop: int) -> dict[str, float]:
    import h5py

    with h5py.File(path, "r") as f:
        lo, hi = (int(v) for v in f["X/indptr"][[start, stop]])
        values = f["X/data"][lo:hi]
    return {"nnz": hi - lo, "sum": float(values.astype(np.float64).sum())}


def needed_bytes(path: str, tables: dict[str, np.ndarray], start: int, stop: int, chunk: int) -> int:
    """Stored bytes of the X chunks a read of rows [start, stop) cannot avoid (indptr, data, indices)."""
    import h5py

    with h5py.File(path, "r") as f:
        lo, hi = (int(v) for v in f["X/indptr"][[start, stop]])
    total = int(tables["X/indptr"][start // chunk : stop // chunk + 1].sum())
    if hi > lo:
        for name in ("X/data", "X/indices"):
            total += int(tables[name][lo // chunk : (hi - 1) // chunk + 1].sum())
    return total


# ---------------------------------------------------------------------------
# Server process: moto, an aiohttp file server, counting proxies, a control endpoint
# ---------------------------------------------------------------------------


def _logging_proxy_class():
    from h5lens.testing.s3 import CountingProxy

    class LoggingProxy(CountingProxy):
        """CountingProxy that also logs every request: (start, end, method, path, Range, body bytes, status)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.log: list[tuple[float, float, str, str, str | None, int, int]] = []

        async def _handle(self, request):
            started = time.perf_counter()
            response = await super()._handle(request)
            body = response.body
            size = len(body) if isinstance(body, (bytes, bytearray, memoryview)) else 0
            self.log.append(
                (started, time.perf_counter(), request.method, request.path, request.headers.get("Range"),
                 size, response.status)
            )
            return response

        def reset(self) -> None:
            self.stats.reset()
            self.log = []

    return LoggingProxy


def summarize_log(log: list[tuple]) -> dict[str, Any]:
    """Counts, sizes, re-fetches and concurrency of one measurement's requests."""
    import bisect

    gets = [e for e in log if e[2] == "GET"]
    sizes = sorted(e[5] for e in gets)
    # per path: disjoint sorted intervals fetched so far (starts, ends), merged as GETs arrive
    merged: dict[str, tuple[list[int], list[int]]] = {}
    refetched = 0
    for _, _, _, path, rng, size, _ in sorted(gets, key=lambda e: e[0]):
        if not size:
            continue
        start = 0
        if rng and rng.startswith("bytes="):
            first = rng[6:].split("-", 1)[0]
            start = int(first) if first else 0
        end = start + size
        starts, ends = merged.setdefault(path, ([], []))
        i = bisect.bisect_right(starts, start) - 1
        if i >= 0 and ends[i] >= end:
            refetched += 1
            continue
        lo = bisect.bisect_left(ends, start)  # first interval ending at or after our start
        hi = bisect.bisect_right(starts, end)  # intervals starting at or before our end
        if lo < hi:
            start, end = min(start, starts[lo]), max(end, ends[hi - 1])
        starts[lo:hi] = [start]
        ends[lo:hi] = [end]
    unique = sum(b - a for starts, ends in merged.values() for a, b in zip(starts, ends))
    events = sorted([(e[0], 1) for e in log] + [(e[1], -1) for e in log])
    inflight = peak = 0
    for _, step in events:
        inflight += step
        peak = max(peak, inflight)
    span = (max(e[1] for e in log) - min(e[0] for e in log)) if log else 0.0
    busy = sum(e[1] - e[0] for e in log)

    def pct(q: float) -> int:
        return sizes[min(len(sizes) - 1, int(q * len(sizes)))] if sizes else 0

    buckets = {"<4K": 0, "4K-64K": 0, "64K-1M": 0, "1M-8M": 0, ">=8M": 0}
    for s in sizes:
        key = "<4K" if s < 4096 else "4K-64K" if s < 65536 else "64K-1M" if s < BLOCK else "1M-8M" if s < 8 * BLOCK else ">=8M"
        buckets[key] += 1
    by_path: dict[str, int] = {}
    for e in gets:
        by_path[e[3]] = by_path.get(e[3], 0) + 1
    return {
        "requests": len(log),
        "gets": len(gets),
        "heads": sum(1 for e in log if e[2] == "HEAD"),
        "other": sum(1 for e in log if e[2] not in ("GET", "HEAD")),
        "errors": sum(1 for e in log if e[6] >= 400),
        "bytes": sum(sizes),
        "unique_bytes": unique,
        "refetched_gets": refetched,
        "get_size_median": pct(0.5),
        "get_size_p90": pct(0.9),
        "get_size_max": sizes[-1] if sizes else 0,
        "get_size_hist": buckets,
        "gets_by_path": by_path,
        "max_inflight": peak,
        "mean_inflight": busy / span if span else 0.0,
        "span_s": span,
    }


def server_main(argv: list[str]) -> None:
    import asyncio
    import logging
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    from aiohttp import web

    from h5lens.testing.s3 import LocalS3, free_port

    parser = argparse.ArgumentParser(prog=f"s3_bench.py {SERVER_COMMAND}")
    parser.add_argument("--root", required=True)
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    # aiohttp file server: web.FileResponse answers Range requests by seeking (sendfile)
    file_port = free_port()
    ready = threading.Event()

    opened: dict[str, tuple[int, int, str, str]] = {}  # name -> (fd, size, ETag, Last-Modified)

    def lookup(name: str) -> tuple[int, int, str, str]:
        if name not in opened:
            full = os.path.join(root, name)
            if "/" in name or name.startswith(".") or not os.path.isfile(full):
                raise web.HTTPNotFound()
            st = os.stat(full)
            modified = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(st.st_mtime))
            opened[name] = (os.open(full, os.O_RDONLY), st.st_size, f'"{st.st_mtime_ns:x}-{st.st_size:x}"', modified)
        return opened[name]

    async def serve_file(request):
        """GET/HEAD with Range answered by one os.pread (web.FileResponse manages ~800 requests/s, this ~2x)."""
        fd, size, etag, modified = lookup(request.match_info["name"])
        headers = {"Accept-Ranges": "bytes", "ETag": etag, "Last-Modified": modified,
                   "Content-Type": "application/octet-stream"}
        if request.method == "HEAD":
            headers["Content-Length"] = str(size)
            return web.Response(status=200, headers=headers)
        rng = request.headers.get("Range")
        start, stop = 0, size
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            if first:
                start, stop = int(first), min(size, int(last) + 1 if last else size)
            else:
                start, stop = max(0, size - int(last)), size
            if start >= size:
                return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        return web.Response(status=206 if rng else 200, body=os.pread(fd, stop - start, start), headers=headers)

    def run_files() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)

        async def start() -> None:
            app = web.Application()
            app.router.add_route("GET", "/{name}", serve_file)
            app.router.add_route("HEAD", "/{name}", serve_file)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", file_port).start()

        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=run_files, name="file-server", daemon=True).start()
    if not ready.wait(10):
        raise RuntimeError("file server did not start")

    s3 = LocalS3().__enter__()
    s3.make_bucket(BUCKET)
    proxy_class = _logging_proxy_class()
    proxies = {
        "moto": proxy_class(s3.endpoint_url),
        "http0": proxy_class(f"http://127.0.0.1:{file_port}"),
        f"http{LATENCY_MS:g}": proxy_class(f"http://127.0.0.1:{file_port}", latency_ms=LATENCY_MS),
    }
    for proxy in proxies.values():
        proxy.__enter__()

    class Control(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            proxy = proxies.get(query.get("p", ""))
            if proxy is None:
                self.send_error(404)
                return
            if url.path == "/reset":
                proxy.reset()
                body: dict[str, Any] = {"ok": True}
            else:
                log = list(proxy.log)
                body = summarize_log(log)
                body["proxy_stats"] = {"gets": proxy.stats.gets, "bytes": proxy.stats.bytes}
                if query.get("reset") == "1":
                    proxy.reset()
            payload = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    control = ThreadingHTTPServer(("127.0.0.1", 0), Control)
    threading.Thread(target=control.serve_forever, name="control", daemon=True).start()
    print(
        json.dumps(
            {
                "moto": s3.endpoint_url,
                "files": f"http://127.0.0.1:{file_port}",
                "proxies": {name: p.endpoint_url for name, p in proxies.items()},
                "control": f"http://127.0.0.1:{control.server_address[1]}",
            }
        ),
        flush=True,
    )
    sys.stdin.read()  # the parent closes stdin to stop us
    control.shutdown()
    for proxy in proxies.values():
        proxy.__exit__(None, None, None)
    s3.__exit__(None, None, None)


class Server:
    """The server subprocess, seen from the parent and workers."""

    def __init__(self, root: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), SERVER_COMMAND, "--root", root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the server process did not start")
        self.info = json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def control(url: str, proxy: str, what: str = "stats", reset: bool = False) -> dict[str, Any]:
    query = f"?p={proxy}" + ("&reset=1" if reset else "")
    with urllib.request.urlopen(f"{url}/{what}{query}", timeout=60) as response:
        return json.loads(response.read())


def request_ceiling(base_url: str, size: int, n: int = 2000, concurrency: int = 10) -> float:
    """Ranged GETs/s the server side (proxy + file server) answers to one aiohttp client: the harness's own ceiling."""
    import asyncio

    import aiohttp

    async def main() -> float:
        async with aiohttp.ClientSession() as session:
            gate = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                offset = (i * 7919 * 151) % max(1, size - 400)
                async with gate, session.get(f"{base_url}/{FILE_NAME}", headers={"Range": f"bytes={offset}-{offset + 349}"}) as r:
                    await r.read()

            start = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return n / (time.perf_counter() - start)

    return asyncio.run(main())


# ---------------------------------------------------------------------------
# Endpoints (a server behind one proxy, as a client addresses it)
# ---------------------------------------------------------------------------


@dataclass
class Endpoint:
    key: str  # "moto", "http0", "http20"
    label: str
    kind: str  # "s3" or "http"
    proxy: str  # proxy name at the control endpoint
    control: str
    file_url: str
    manifests: dict[str, str]  # "refs0" (inline_threshold=0), "refs" (default inlining)
    storage_options: dict[str, Any]
    counts_only: bool

    def open_options(self, cache: str) -> dict[str, Any]:
        """fs.open kwargs: 'block' = 1 MiB blockcache, 'default' = s3fs's defaults (mirrored on HTTP)."""
        if cache == "block":
            return {"block_size": BLOCK, "cache_type": "blockcache"}
        if self.kind == "http":
            return {"block_size": S3FS_DEFAULT_BLOCK, "cache_type": S3FS_DEFAULT_CACHE}
        return {}


def make_endpoints(info: dict[str, Any], workdir: str) -> list[Endpoint]:
    from h5lens.testing.s3 import CREDENTIALS

    moto_proxy = info["proxies"]["moto"]
    s3_options = {**CREDENTIALS, "endpoint_url": moto_proxy}
    latency_key = f"http{LATENCY_MS:g}"
    endpoints = [
        Endpoint(
            "moto", "moto S3 (stock moto, s3fs) +0 ms: counts only", "s3", "moto", info["control"],
            f"s3://{BUCKET}/{FILE_NAME}",
            {"refs0": f"s3://{BUCKET}/bench.refs0.json", "refs": f"s3://{BUCKET}/bench.refs.json"},
            s3_options, True,
        )
    ]
    for key, latency in (("http0", 0), (latency_key, LATENCY_MS)):
        base = info["proxies"][key]
        endpoints.append(
            Endpoint(
                key, f"aiohttp file server (Range via os.pread), http:// via fsspec HTTP, +{latency:g} ms/request", "http", key,
                info["control"], f"{base}/{FILE_NAME}",
                {"refs0": f"{base}/bench.{key}.refs0.json", "refs": f"{base}/bench.{key}.refs.json"},
                {}, False,
            )
        )
    return endpoints


def publish(endpoints: list[Endpoint], file_path: str, root: str, moto_url: str) -> None:
    """Put the file and, per endpoint, manifests whose source URL is that endpoint's URL of the file.

    Manifests are indexed from the local file (same chunk tables as a remote scan) with the
    remote URL recorded; S3 objects are uploaded to moto directly, past the counting proxy.
    """
    import s3fs

    import h5lens
    from h5lens.testing.s3 import CREDENTIALS

    try:
        os.link(file_path, os.path.join(root, FILE_NAME))
    except OSError:
        shutil.copy(file_path, os.path.join(root, FILE_NAME))
    fs = s3fs.S3FileSystem(**CREDENTIALS, endpoint_url=moto_url, skip_instance_cache=True)
    fs.put(file_path, f"{BUCKET}/{FILE_NAME}")
    manifests = {"refs0": h5lens.index(file_path, inline_threshold=0), "refs": h5lens.index(file_path)}
    for ep in endpoints:
        for which, manifest in manifests.items():
            refs = manifest.to_dict()
            refs["templates"] = {"u": ep.file_url}
            refs["h5lens"]["sources"][0] = {"url": ep.file_url, "size": os.path.getsize(file_path)}
            text = json.dumps(refs, separators=(",", ":"))
            local = os.path.join(root, ep.manifests[which].rsplit("/", 1)[-1])
            with open(local, "w") as f:
                f.write(text)
            if ep.kind == "s3":
                fs.put(local, ep.manifests[which].removeprefix("s3://"))


# ---------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    key: str
    phase: str  # "scan", "full", "slice"
    label: str
    ref: str | None = None  # the h5lens contender this peer is compared with (None: h5lens itself)
    slow: bool = False  # fewer repeats
    skip_moto: str | None = None  # reason it is not run on moto
    only_on: tuple[str, ...] = ()  # endpoints to run on (empty: all)


ZARR_FULL = "zarr decodes ~53k chunks one by one: tens of seconds of CPU per run"
CONTENDERS = [
    Contender("h5lens-scan", "scan", "h5lens.index(url) [default: inline <=1000 B]"),
    Contender("h5lens-scan-0", "scan", "h5lens.index(url, inline_threshold=0)"),
    Contender("h5lens-scan-64k", "scan", "h5lens.index(url, inline_threshold=0, read_block_size=64 KiB)"),
    Contender("kc-default", "scan", "kerchunk, s3fs default read-ahead [default: inline <500 B]", "h5lens-scan", slow=True),
    Contender("kc-block", "scan", "kerchunk, 1 MiB blockcache [default: inline <500 B]", "h5lens-scan", slow=True),
    Contender("kc-default-0", "scan", "kerchunk, s3fs default read-ahead, inline_threshold=0", "h5lens-scan-0", slow=True),
    Contender("kc-block-0", "scan", "kerchunk, 1 MiB blockcache, inline_threshold=0", "h5lens-scan-0", slow=True),
    Contender("h5lens-read", "full", "h5lens.read_anndata(manifest, inline_threshold=0)"),
    Contender(
        "h5lens-read-inl", "full", "h5lens.read_anndata(manifest, default inlining: X in JSON)", slow=True,
        only_on=("http0",),
    ),
    Contender("h5ad-read", "full", "anndata.read_h5ad(fsspec file, 1 MiB blockcache)", "h5lens-read"),
    Contender(
        "ref-read", "full", "fsspec reference + FsspecStore + anndata.read_zarr", "h5lens-read", slow=True,
        skip_moto="one GET per chunk (~53k) at moto's ~12 ms each; counts are the same on the http server",
    ),
    Contender("h5lens-slice", "slice", "h5lens.read_anndata(lazy=True).X[rows].compute()"),
    Contender(
        "ref-slice", "slice", "anndata read_lazy over fsspec reference, X[rows].compute()", "h5lens-slice", slow=True
    ),
    Contender("h5py-slice", "slice", "h5py.File(fsspec file, 1 MiB blockcache) + sparse_dataset[rows]", "h5lens-slice"),
]
BY_KEY = {c.key: c for c in CONTENDERS}


# ---------------------------------------------------------------------------
# Worker side: one run of one contender against one endpoint
# ---------------------------------------------------------------------------


class Clock:
    """Times phases and snapshots the proxy's request log at each phase's end."""

    def __init__(self, ep: Endpoint) -> None:
        self.ep = ep
        self.phases: dict[str, dict[str, Any]] = {}
        control(ep.control, ep.proxy, "reset")
        self._start = time.perf_counter()

    def mark(self, name: str) -> None:
        seconds = time.perf_counter() - self._start
        net = control(self.ep.control, self.ep.proxy, reset=True)
        self.phases[name] = {"seconds": seconds, "net": net}
        self._start = time.perf_counter()


def _sparse_check(x: Any) -> dict[str, Any]:
    return {"nnz": int(x.nnz), "sum": float(np.asarray(x.data, dtype=np.float64).sum()), "shape": list(x.shape)}


def _reference_group(ep: Endpoint, manifest: str):
    import fsspec
    import zarr

    fs = fsspec.filesystem(
        "reference",
        fo=ep.manifests[manifest],
        target_options=ep.storage_options,
        remote_protocol=ep.kind,
        remote_options={**ep.storage_options, "asynchronous": True},  # an async ReferenceFileSystem needs an async remote
        asynchronous=True,
    )
    store = zarr.storage.FsspecStore(fs, read_only=True, path="")
    return zarr.open_group(store, mode="r", zarr_format=3)


def run_contender(key: str, ep: Endpoint, rows: tuple[int, int]) -> dict[str, Any]:
    import anndata as ad
    import fsspec

    import h5lens

    so = ep.storage_options
    clock = Clock(ep)
    check: dict[str, Any] = {}
    if key in ("h5lens-scan", "h5lens-scan-0", "h5lens-scan-64k"):
        from h5lens.manifest.model import INLINE

        kwargs = {"inline_threshold": 0} if key != "h5lens-scan" else {}
        if key.endswith("-64k"):
            kwargs["read_block_size"] = 64 << 10
        manifest = h5lens.index(ep.file_url, storage_options=so, **kwargs)
        clock.mark("scan")
        tables = manifest.chunks.values()
        check = {"referenced": int(sum((t.source >= 0).sum() for t in tables)),
                 "inline": int(sum((t.source == INLINE).sum() for t in tables))}
    elif key.startswith("kc-"):
        import kerchunk.hdf

        cache = "block" if key.startswith("kc-block") else "default"
        kwargs = {"inline_threshold": 0} if key.endswith("-0") else {}
        fs, path = fsspec.core.url_to_fs(ep.file_url, **so)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fs.open(path, "rb", **ep.open_options(cache)) as f:
                converter = kerchunk.hdf.SingleHdf5ToZarr(f, url=ep.file_url, **kwargs)
                refs = converter.translate()
                converter.close()
        clock.mark("scan")
        values = refs["refs"].values()
        check = {"referenced": sum(1 for v in values if isinstance(v, list) and len(v) == 3),
                 "keys": len(refs["refs"])}
    elif key in ("h5lens-read", "h5lens-read-inl"):
        manifest = "refs0" if key == "h5lens-read" else "refs"
        adata = h5lens.read_anndata(ep.manifests[manifest], storage_options=so)
        clock.mark("read")
        check = _sparse_check(adata.X)
    elif key == "h5ad-read":
        fs, path = fsspec.core.url_to_fs(ep.file_url, **so)
        with fs.open(path, "rb", **ep.open_options("block")) as f:
            adata = ad.read_h5ad(f)
        clock.mark("read")
        check = _sparse_check(adata.X)
    elif key == "ref-read":
        adata = ad.read_zarr(_reference_group(ep, "refs0"))
        clock.mark("read")
        check = _sparse_check(adata.X)
    elif key in ("h5lens-slice", "ref-slice"):
        if key == "h5lens-slice":
            lazy = h5lens.read_anndata(ep.manifests["refs0"], storage_options=so, lazy=True)
        else:
            lazy = ad.experimental.read_lazy(_reference_group(ep, "refs0"))
        clock.mark("open")
        x = lazy.X[rows[0] : rows[1]].compute()
        clock.mark("slice")
        check = _sparse_check(x)
    elif key == "h5py-slice":
        import h5py

        fs, path = fsspec.core.url_to_fs(ep.file_url, **so)
        with fs.open(path, "rb", **ep.open_options("block")) as f, h5py.File(f, "r") as h5:
            dataset = ad.io.sparse_dataset(h5["X"])
            clock.mark("open")
            x = dataset[rows[0] : rows[1]]
            clock.mark("slice")
        check = _sparse_check(x)
    else:
        raise ValueError(key)
    return {"phases": clock.phases, "check": check}


def preload() -> None:
    """Imports a run needs, before the clock starts."""
    import anndata  # noqa: F401
    import anndata.experimental  # noqa: F401
    import dask.array  # noqa: F401
    import fsspec.implementations.http  # noqa: F401
    import fsspec.implementations.reference  # noqa: F401
    import h5py  # noqa: F401
    import kerchunk.hdf  # noqa: F401
    import s3fs  # noqa: F401
    import zarr.storage  # noqa: F401

    import h5lens  # noqa: F401
    import h5lens.adata.readers  # noqa: F401
    import h5lens.manifest.refs_json  # noqa: F401


def zygote_main(argv: list[str]) -> None:
    """Import everything once, then fork one child per run (fresh state, no import time).

    Reads one JSON command per stdin line ({"key", "endpoint", "rows", "timeout"}) and
    answers one JSON line on stdout. Nothing has opened a file, socket, event loop or
    thread pool before the fork, so each child starts as cold as a new process would.
    """
    warnings.simplefilter("ignore")
    preload()
    gc.collect()
    for line in sys.stdin:
        cmd = json.loads(line)
        sys.stdout.write(json.dumps(fork_run(cmd)) + "\n")
        sys.stdout.flush()


def fork_run(cmd: dict[str, Any]) -> dict[str, Any]:
    import signal

    with tempfile.NamedTemporaryFile(prefix="s3bench-", suffix=".json", delete=False) as f:
        out = f.name
    err = out[:-5] + ".err"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)  # the zygote's stdout is the parent's pipe: keep it clean
            os.dup2(fd, 2)
            faulthandler.dump_traceback_later(cmd["timeout"], exit=True)  # a hang reports where it hung
            if cmd["key"].startswith("kc-"):
                gc.disable()  # kerchunk 0.2.10 on zarr 3 can deadlock in h5py's lock when the cyclic GC runs
            profiler = None
            if cmd.get("profile"):
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            try:
                result = run_contender(cmd["key"], Endpoint(**cmd["endpoint"]), tuple(cmd["rows"]))
            except Exception as e:
                result = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            if profiler is not None:
                profiler.disable()
                result["profile"] = profile_summary(profiler)
            result["gc_disabled"] = not gc.isenabled()
            with open(out, "w") as f:
                json.dump(result, f)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + cmd["timeout"] + 30  # faulthandler fires first; this is the backstop
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = None
    try:
        with open(out) as f:
            text = f.read()
        if text:
            return json.loads(text)
        with open(err, errors="replace") as f:
            lines = f.read().strip().splitlines()
        dumped = any("Timeout (" in x for x in lines)
        where = [x.strip() for x in lines if x.strip().startswith("File ")][:3]
        why = f"timeout after {cmd['timeout']:g} s; innermost frames: {where}" if dumped else " | ".join(lines[-3:])
        return {"error": f"run failed (status {status}): {why[:800]}"}
    finally:
        for path in (out, err):
            if os.path.exists(path):
                os.unlink(path)


def profile_summary(profiler: Any, top: int = 14) -> dict[str, Any]:
    """Own time by package, and the costliest functions (own time and, for h5lens, cumulative)."""
    import pstats

    stats = pstats.Stats(profiler)
    by_package: dict[str, float] = {}
    rows = []
    for (file, line, func), (_, calls, own, cumulative, _) in stats.stats.items():
        if "/src/h5lens/" in file or "/h5lens/" in file and "site-packages" not in file:
            package = "h5lens"
        elif "site-packages/" in file:
            package = file.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
        elif file.startswith("~") or file.startswith("<"):
            package = "builtins (C: zlib, sockets, select, ...)"
        else:
            package = "stdlib " + os.path.basename(os.path.dirname(file) if "asyncio" in file else file).removesuffix(".py")
        by_package[package] = by_package.get(package, 0.0) + own
        where = file.split("site-packages/", 1)[-1].split("/src/", 1)[-1].split("/lib/python3.12/", 1)[-1]
        rows.append((own, cumulative, calls, f"{where}:{line} {func}", package))
    rows.sort(reverse=True)
    ours = sorted((r for r in rows if r[4] == "h5lens"), key=lambda r: r[1], reverse=True)
    return {
        "total_s": stats.total_tt,
        "by_package": dict(sorted(by_package.items(), key=lambda kv: kv[1], reverse=True)),
        "top_own": [r[:4] for r in rows[:top]],
        "h5lens_cumulative": [r[:4] for r in ours[:top]],
    }


def print_profile(key: str, ep: str, profile: dict[str, Any]) -> None:
    total = profile["total_s"]
    print(f"\n### cProfile of {key} on {ep} (total {total:.2f} s under the profiler)")
    shares = ", ".join(f"{name} {100 * own / total:.0f}%" for name, own in list(profile["by_package"].items())[:8])
    print(f"own time by package: {shares}")
    for title, rows in (("top own time", profile["top_own"]), ("h5lens by cumulative time", profile["h5lens_cumulative"])):
        print(f"-- {title}")
        print_table(["own s", "cum s", "calls", "function"], [[f"{r[0]:.2f}", f"{r[1]:.2f}", str(r[2]), r[3]] for r in rows], left=0)


class Zygote:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), ZYGOTE_COMMAND],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(
        self, key: str, ep: Endpoint, rows: tuple[int, int], timeout: float, profile: bool = False
    ) -> dict[str, Any]:
        cmd = {"key": key, "endpoint": asdict(ep), "rows": list(rows), "timeout": timeout, "profile": profile}
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the run process died")
        return json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(20)


# ---------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------


@dataclass
class Measurement:
    contender: str
    endpoint: str
    runs: list[dict[str, Any]] = field(default_factory=list)  # worker results
    error: str | None = None
    skipped: str | None = None

    def seconds(self) -> list[float]:
        return [sum(p["seconds"] for p in r["phases"].values()) for r in self.runs]

    def phase_seconds(self, phase: str) -> list[float]:
        return [r["phases"][phase]["seconds"] for r in self.runs if phase in r["phases"]]

    def net(self, phase: str | None = None) -> dict[str, Any] | None:
        """The request summary of the first run (counts repeat run to run), one phase or all summed."""
        if not self.runs:
            return None
        phases = self.runs[0]["phases"]
        if phase is not None:
            return phases[phase]["net"] if phase in phases else None
        nets = [p["net"] for p in phases.values()]
        total = {k: sum(n[k] for n in nets) for k in ("requests", "gets", "heads", "bytes", "unique_bytes")}
        return total

    def median(self) -> float | None:
        s = self.seconds()
        return statistics.median(s) if s else None


def measure(
    zygote: Zygote, endpoints: list[Endpoint], chosen: list[Contender], rows: tuple[int, int], repeat: int,
    slow_repeat: int, timeout: float,
) -> dict[tuple[str, str], Measurement]:
    results: dict[tuple[str, str], Measurement] = {}
    for ep in endpoints:
        print(f"\n[{ep.key}] {ep.label}", flush=True)
        reps = 1 if ep.counts_only else repeat
        todo = []
        for c in chosen:
            m = results[(c.key, ep.key)] = Measurement(c.key, ep.key)
            if ep.counts_only and c.skip_moto:
                m.skipped = c.skip_moto
                print(f"  {c.key:<16} skipped: {c.skip_moto}")
                continue
            if c.only_on and ep.key not in c.only_on:
                m.skipped = f"run on {', '.join(c.only_on)} only"
                continue
            todo.append(c)
        for rep in range(reps):  # round-robin: drift hits every contender alike
            for c in todo:
                m = results[(c.key, ep.key)]
                if m.error or (c.slow and rep >= slow_repeat):
                    continue
                answer = zygote.run(c.key, ep, rows, timeout)
                if "error" in answer:
                    m.error = answer["error"]
                    print(f"  run {rep + 1} {c.key:<16} ERROR {m.error}", flush=True)
                    continue
                m.runs.append(answer)
                total = sum(p["seconds"] for p in answer["phases"].values())
                gets = sum(p["net"]["gets"] for p in answer["phases"].values())
                mb = sum(p["net"]["bytes"] for p in answer["phases"].values()) / 1e6
                print(f"  run {rep + 1} {c.key:<16} {total:8.3f} s  {gets:6d} GETs  {mb:8.2f} MB", flush=True)
    return results


# -- reporting ---------------------------------------------------------------


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def fmt_mb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6:.2f}"


def print_table(headers: list[str], body: list[list[str]], left: int = 1) -> None:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for cells in body:
        print(line(cells))


def phase_table(
    phase: str, ep: Endpoint, results: dict[tuple[str, str], Measurement], info: FileInfo, extra: dict[str, Any]
) -> list[dict[str, Any]]:
    """Print one phase on one endpoint; return its rows for --json."""
    rows_out = []
    body = []
    sub = "slice" if phase == "slice" else None  # slice rows count the slice; the open is a separate column
    for c in (c for c in CONTENDERS if c.phase == phase):
        m = results.get((c.key, ep.key))
        if m is None:
            continue
        if m.skipped and m.skipped.startswith("run on "):
            continue
        if m.skipped or m.error:
            body.append([c.label, "-", "-", "-", "-", "-", "-", "-", "-", "-", ("skipped: " + m.skipped) if m.skipped else "ERROR " + m.error[:90]])
            rows_out.append({"contender": c.key, "endpoint": ep.key, "skipped": m.skipped, "error": m.error})
            continue
        net = m.net(sub) if sub else m.net()
        total = m.net()
        secs = m.phase_seconds("slice") if sub else m.seconds()
        med = statistics.median(secs) if secs else None
        ref = results.get((c.ref, ep.key)) if c.ref else None
        ref_net = (ref.net(sub) if sub else ref.net()) if ref and ref.runs else None
        ref_secs = ((ref.phase_seconds("slice") if sub else ref.seconds()) if ref and ref.runs else [])
        ref_med = statistics.median(ref_secs) if ref_secs else None
        if phase == "scan":
            note = f"{net['bytes'] / info.metadata_bytes:.2f}x meta"
        elif phase == "slice":
            open_net = m.net("open")
            open_s = statistics.median(m.phase_seconds("open"))
            note = (f"{100 * net['bytes'] / info.x_bytes:.2f}% of X; {net['bytes'] / extra['need_block']:.2f}x blk-need"
                    f"; open {open_net['gets']} GETs {fmt_mb(open_net['bytes'])} MB {fmt_s(open_s)} s")
            if ref is not None and ref.runs and not ep.counts_only:
                note += f"; open+slice h/p {fmt_ratio(ref.median(), m.median())}"
        else:
            note = f"{net['bytes'] / info.size:.2f}x file"
        ok = check_ok(phase, m, info, extra)
        if not ok:
            note += "  CHECK FAILED"
        time_cell = "(counts only)" if ep.counts_only else f"{fmt_s(med)} ({len(secs)})"
        ratios = ["-", "-", "-"]
        if ref_net is not None:
            ratios = [fmt_ratio(ref_net["gets"], net["gets"]), fmt_ratio(ref_net["bytes"], net["bytes"]),
                      "-" if ep.counts_only else fmt_ratio(ref_med, med)]
        body.append([c.label, str(net["gets"]), str(total["heads"]), fmt_mb(net["bytes"]), fmt_mb(net["unique_bytes"]),
                     time_cell, *ratios, note])
        rows_out.append({"contender": c.key, "endpoint": ep.key, "gets": net["gets"], "heads": total["heads"],
                         "bytes": net["bytes"], "unique_bytes": net["unique_bytes"], "median_s": med,
                         "runs_s": secs, "vs": c.ref, "ok": ok, "note": note,
                         "ratio_h5lens_over_peer": None if ref_net is None else {
                             "gets": ref_net["gets"] / max(net["gets"], 1), "bytes": ref_net["bytes"] / max(net["bytes"], 1),
                             "time": (ref_med / med) if (ref_med and med and not ep.counts_only) else None}})
    headers = ["contender", "GETs", "HEAD", "MB", "uniq MB", "wall s (n)", "GETs h/p", "MB h/p", "time h/p", "notes"]
    print_table(headers, body)
    return rows_out


def check_ok(phase: str, m: Measurement, info: FileInfo, extra: dict[str, Any]) -> bool:
    check = m.runs[0]["check"]
    if phase == "scan":
        return check.get("referenced", 0) + check.get("inline", 0) > 0 or check.get("keys", 0) > 0
    if phase == "full":
        return check["nnz"] == info.nnz and abs(check["sum"] - info.x_sum) < 1e-6 * info.x_sum
    truth = extra["truth"]
    return check["nnz"] == truth["nnz"] and abs(check["sum"] - truth["sum"]) <= 1e-6 * max(truth["sum"], 1)


def print_request_logs(endpoints: list[Endpoint], results: dict[tuple[str, str], Measurement]) -> None:
    body = []
    for ep in endpoints:
        for c in CONTENDERS:
            m = results.get((c.key, ep.key))
            if m is None or not m.runs:
                continue
            for phase, data in m.runs[0]["phases"].items():
                n = data["net"]
                if not n["requests"]:
                    continue
                hist = " ".join(f"{k}:{v}" for k, v in n["get_size_hist"].items() if v)
                body.append([ep.key, c.key, phase, str(n["gets"]), f"{n['get_size_median']:,}", f"{n['get_size_p90']:,}",
                             f"{n['get_size_max']:,}", str(n["refetched_gets"]), f"{n['mean_inflight']:.1f}",
                             str(n["max_inflight"]), hist])
    print_table(["server", "contender", "phase", "GETs", "median B", "p90 B", "max B", "refetch", "in-flight",
                 "max", "GET sizes"], body, left=3)


def environment() -> dict[str, str]:
    from importlib.metadata import version

    try:
        head = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = "?"
    return {
        "git": head or "?",
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
        **{p: version(p) for p in ("h5lens", "anndata", "zarr", "kerchunk", "fsspec", "s3fs", "moto", "aiohttp", "h5py", "dask")},
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    d = FileSpec()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", help="h5ad to use; generated there if missing (default: a cached file in the temp dir)")
    p.add_argument("--regenerate", action="store_true")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per fast contender on the http server (default 3)")
    p.add_argument("--slow-repeat", type=int, default=1, help="runs of slow contenders (default 1)")
    p.add_argument("--timeout", type=float, default=420, help="seconds before a run counts as hung")
    p.add_argument("--servers", default="moto,http0,http20", help="subset of moto,http0,http20")
    p.add_argument("--phases", default="scan,full,slice")
    p.add_argument("--only", help="comma-separated contender keys")
    p.add_argument("--json", metavar="OUT")
    p.add_argument(
        "--profile", default="", metavar="KEYS",
        help="comma-separated contenders to run once more under cProfile (on http0, else the first http server)",
    )
    g = p.add_argument_group("generated file")
    g.add_argument("--n-obs", type=int, default=d.n_obs)
    g.add_argument("--n-vars", type=int, default=d.n_vars)
    g.add_argument("--density", type=float, default=d.density)
    g.add_argument("--x-chunk", type=int, default=d.x_chunk)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    spec = FileSpec(args.n_obs, args.n_vars, args.density, args.x_chunk)
    path = args.file or os.path.join(tempfile.gettempdir(), "h5lens-s3-bench", spec.name())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    generated = None
    if args.regenerate or not os.path.exists(path):
        print(f"generating {path} ...", flush=True)
        generated = generate_file(path, spec)
        print(f"  written in {generated:.1f} s")
    else:
        print(f"reusing {path}")
    info, tables = describe_file(path)
    print(f"\nfile: {info.n_obs:,} x {info.n_vars:,} CSR, nnz {info.nnz:,} ({100 * info.nnz / info.n_obs / info.n_vars:.2f}%),"
          f" {info.size / 1e6:.2f} MB; X stored {info.x_bytes / 1e6:.2f} MB in {info.x_chunks:,} chunks (data+indices);"
          f" {info.all_chunks:,} chunks in all")
    print(f"metadata estimate: file size - stored data of every dataset = {info.metadata_bytes / 1e6:.2f} MB"
          " (object headers, chunk B-trees, global heaps of vlen strings, free space)")
    if info.x_chunks < MIN_X_CHUNKS:
        print(f"  note: fewer than {MIN_X_CHUNKS:,} X chunks")
    n = info.n_obs // 100
    start = (info.n_obs // 2) // 1000 * 1000  # aligned to anndata read_lazy's 1000-row dask blocks
    rows = (start, start + n)
    extra = {
        "truth": slice_truth(path, *rows),
        "need_rows": needed_bytes(path, tables, *rows, spec.x_chunk),
        "need_block": needed_bytes(path, tables, start, min(start + 1000, info.n_obs), spec.x_chunk),
    }
    env = environment()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))

    workdir = tempfile.mkdtemp(prefix="h5lens-s3-bench-")
    ceiling = None
    profiles: dict[str, tuple[str, Any, Any]] = {}
    server = Server(workdir)
    zygote = Zygote()
    try:
        endpoints = [e for e in make_endpoints(server.info, workdir) if e.key in args.servers.split(",")]
        publish(make_endpoints(server.info, workdir), path, workdir, server.info["moto"])
        ceiling = request_ceiling(server.info["proxies"]["http0"], info.size)
        control(server.info["control"], "http0", "reset")
        print(f"harness ceiling: {ceiling:.0f} ranged GETs/s through proxy + file server at 10 concurrent (+0 ms);"
              f" at +{LATENCY_MS:g} ms, 10 concurrent cap at {10 / LATENCY_MS * 1000:.0f}/s")
        phases = args.phases.split(",")
        chosen = [c for c in CONTENDERS if c.phase in phases and (not args.only or c.key in args.only.split(","))]
        print(f"\nrunning: fast contenders x{args.repeat} on http servers, slow ones ({', '.join(c.key for c in chosen if c.slow)})"
              f" x{args.slow_repeat}; on moto one run each (counts only); every run in a fresh subprocess")
        results = measure(zygote, endpoints, chosen, rows, args.repeat, args.slow_repeat, args.timeout)
        http = [e for e in endpoints if e.kind == "http"]
        for key in filter(None, args.profile.split(",")):
            if http:
                print(f"  profiling {key} on {http[0].key} ...", flush=True)
                answer = zygote.run(key, http[0], rows, args.timeout, profile=True)
                profiles[key] = (http[0].key, answer.get("profile"), answer.get("error"))
    finally:
        zygote.stop()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print("\n" + "=" * 100)
    print("columns: GETs/MB = GET requests/body bytes the proxy saw (slice phase: the slice only, open in notes);")
    print("  uniq MB = distinct file bytes among them; wall s = median of (n) runs, imports excluded;")
    print("  h/p = h5lens / peer (below 1: h5lens does better), against the h5lens row named in the labels' phase")
    tables_out: dict[str, list[dict[str, Any]]] = {}
    titles = {
        "scan": f"Scan — metadata {info.metadata_bytes / 1e6:.2f} MB; notes = bytes fetched / metadata size",
        "full": "Full read of the AnnData — notes = bytes fetched / file size",
        "slice": (f"Slice X[{rows[0]}:{rows[1]}] ({n} rows = 1%); needed: {extra['need_rows'] / 1e3:.1f} kB for the rows,"
                  f" {extra['need_block'] / 1e3:.1f} kB for the 1000-row dask block lazy readers compute;"
                  f" X stored = {info.x_bytes / 1e6:.2f} MB"),
    }
    for phase in phases:
        for ep in endpoints:
            print(f"\n## {titles[phase]}\n   server: {ep.label}")
            tables_out[f"{phase}/{ep.key}"] = phase_table(phase, ep, results, info, extra)
    print("\n## Request logs (first run of each; 'refetch' = GETs wholly inside bytes already fetched in that run;")
    print("   in-flight = mean concurrent requests over the phase's request span)")
    print_request_logs(endpoints, results)
    for key, (ep_key, profile, error) in profiles.items():
        if profile:
            print_profile(key, ep_key, profile)
        else:
            print(f"\n### cProfile of {key}: {error}")
    print("\nnotes:")
    print("  - moto rows: stock moto re-reads the whole object per GET; use their counts, not their times")
    print("  - http rows: same bytes from an aiohttp handler (one os.pread per Range); 's3fs default read-ahead' there = fs.open(block_size="
          f"{S3FS_DEFAULT_BLOCK >> 20} MiB, cache_type='{S3FS_DEFAULT_CACHE}'), as s3fs opens by default")
    print(f"  - latency: +{LATENCY_MS:g} ms per request injected by CountingProxy (before forwarding)")
    print(f"  - slow contenders run {args.slow_repeat}x; kerchunk runs with the cyclic GC off (zarr 3 deadlock)")
    print("  - reads use the inline_threshold=0 manifest (all X bytes come from the server) unless labelled otherwise;"
          " manifests were indexed locally with the endpoint's URL recorded")
    for m in results.values():
        if m.error:
            print(f"  - {m.contender} on {m.endpoint}: {m.error}")
    if args.json:
        payload = {
            "file": asdict(info), "spec": asdict(spec), "generated_seconds": generated, "rows": rows, "slice": extra,
            "environment": env, "harness_ceiling_gets_per_s": ceiling, "tables": tables_out,
            "profiles": {k: {"endpoint": v[0], "profile": v[1], "error": v[2]} for k, v in profiles.items()},
            "measurements": [
                {"contender": m.contender, "endpoint": m.endpoint, "runs": m.runs, "error": m.error, "skipped": m.skipped}
                for m in results.values()
            ],
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1, default=str)
        print(f"\nnumbers written to {args.json}")
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 1 if any(m.error for m in results.values()) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == SERVER_COMMAND:
        server_main(sys.argv[2:])
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == ZYGOTE_COMMAND:
        zygote_main(sys.argv[2:])
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
