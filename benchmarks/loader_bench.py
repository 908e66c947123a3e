#!/usr/bin/env python
"""Benchmark: training minibatches from an h5ad without a copy, against the copy people make.

One anndata-written h5ad (``write_h5ad(compression="gzip")``, anndata's own chunks; the atlas of
``atlas_files.py``: ``--cells`` × ``--genes`` float32, ``--density`` non-zero; ``--values``: whole
counts, as the issue's atlas, or lognormal floats, as a normalised X), read by annbatch's ``Loader(chunk_size, preload_nchunks, batch_size, shuffle=True, return_index=True)``
(the issue's settings by default: 32, 256, 4096) through each route, side by side in one run:

* ``h5lens``        ``anndata.io.sparse_dataset(h5lens.open_group(manifest)["X"])`` under
                    ``h5lens.fast_reads()`` (h5lens's codec pipeline): no copy
* ``h5lens-zarr``   the same store read through zarr's own codec pipeline (no ``fast_reads``)
* ``virtualizarr``  VirtualiZarr 2.8's ``HDFParser`` → ``ManifestStore`` over the same file: no copy
* ``copy-zarr``     annbatch's converted collection (``DatasetCollection.add_adatas`` at its
                    defaults: a shuffled, sharded zarr copy), zarr's pipeline (``LocalStore``;
                    on S3 ``FsspecStore`` over s3fs)
* ``copy-zarrs``    the same copy through zarrs-python's Rust pipeline (``LocalStore``; on S3
                    zarr's ``ObjectStore`` over obstore: the stores zarrs accepts)
* ``h5py-backed``   anndata's backed mode (``read_h5ad(backed="r").X``): annbatch refuses it;
                    the refusal is recorded, locally only

``--dense``: X written dense by ``write_h5ad(compression="gzip")`` (h5py's guessed chunks, which
cut the columns: annbatch 0.3.1 cannot read them as stored, over any store), the same values as
the sparse atlas. The h5lens routes read ``h5lens.whole_rows(group["X"])`` (a view in chunks
of whole rows over the same bytes), the copies annbatch's dense collection (chunks of whole
rows); VirtualiZarr's store has no such view and is not run.

Where: ``local`` (the files on disk, page cache warm), ``local-busy`` (the same with one core
kept busy by a spinning process; not in the default), and ``s3``: moto on 127.0.0.1 behind
``read_bench.SimulatedS3`` (20 ms per request, each response streamed at 100 MB/s, objects
served from the proxy's cache), the h5ad and the copy uploaded there; ``s3-narrow``: the same
S3 behind a link of ``--total-mbps`` MB/s that every response shares (``CountingProxy``'s
``total_bandwidth``; default 25, what the proxy served in all on two busy cores when a
400,000-cell atlas was measured): where bytes, not requests, are what a read waits for (not in
the default; ``s3_gets`` and ``s3_bytes`` say what each route fetched).

What is timed: each route in a fresh process (``subprocess``, not fork); the clock covers only
``next()`` on the loader's iterator (the first preload included), from the first batch until
``--seconds`` have passed and a preload has ended (a preload's batches come at once, so stopping
inside one would flatter), epoch after epoch (an epoch that ends sooner is followed by the next,
as in training): cells/s = cells yielded / seconds. Opening stores
and building the loader are reported as ``setup_s``. Every batch is checked, outside the clock,
against the file as h5py reads it: per row its number of values, the sum of its values and the
sum of values × (column + 1), bit for bit, and no row twice in an epoch; a mismatch marks the route FAILED.
The copy's rows are mapped back to the file's through its obs names (read before the clock).

Peak memory: each route's process reads its own high-water mark (``VmHWM`` in
``/proc/self/status``; ``ru_maxrss`` of a child can report its parent's) after imports, after
setup and at the end; ``peak_mib`` is the end value (interpreter, libraries, the loader's
preloads, and the check's per-row arrays, 4 float64 per cell for every route alike).

What inflating alone costs (``inflation_cap``): the stored chunks a random preload touches,
read with h5py and inflated once each on one thread, whole by libdeflate and (``_heads``)
only as far as the blocks reach where that is faster (zlib-ng), as h5lens does; on this
machine's cores that caps any reader that inflates them, doing nothing else.

The copy's cost (seconds to convert, bytes on disk, peak memory) is measured once when the
copy is made (in ``--workdir``, kept between runs like the h5ad; ``--regenerate`` makes both
again). ``--json OUT`` writes every number (default benchmarks/results/loader.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from atlas_files import write_atlas  # noqa: E402  - the benchmarks' one atlas writer
from read_bench import (  # noqa: E402  - the simulated S3 and VirtualiZarr's store, as read_bench builds them
    BANDWIDTH,
    BUCKET,
    LATENCY_MS,
    SimulatedS3,
    obstore_s3,
    s3_manifest,
    virtualizarr_store,
)

DEFAULT_JSON = os.path.join(HERE, "results", "loader.json")
ROUTE_COMMAND = "_route"
COPY_COMMAND = "_copy"
ZARRS = "zarrs.ZarrsCodecPipeline"


@dataclass(frozen=True)
class Route:
    key: str
    label: str
    copy: bool  # reads annbatch's converted collection


ROUTES = [
    Route("h5lens", "h5lens store over the h5ad, fast_reads() (no copy)", False),
    Route("h5lens-cache", "the same, keeping decoded chunks (decoded_cache_bytes, --decoded-cache-mib)", False),
    Route("h5lens-zarr", "h5lens store over the h5ad, zarr's pipeline (no copy)", False),
    Route("virtualizarr", "VirtualiZarr 2.8 ManifestStore over the h5ad (no copy)", False),
    Route("copy-zarr", "annbatch's converted collection, zarr's pipeline", True),
    Route("copy-zarrs", "annbatch's converted collection, zarrs-python's pipeline", True),
    Route("h5py-backed", "anndata backed mode (h5py)", False),
]
ROUTE_BY_KEY = {r.key: r for r in ROUTES}
COPIES = ("copy-zarr", "copy-zarrs")

# (where, measured route, against, at least): the targets, as cells/s ratios
# ("copy" is the copy's best route in that place)
TARGETS = [
    ("local", "h5lens", "copy-zarrs", 1.0),
    ("local", "h5lens-cache", "copy-zarrs", 1.0),
    ("local-busy", "h5lens", "copy-zarrs", 1.0),
    ("local-busy", "h5lens-cache", "copy-zarrs", 1.0),
    ("s3", "h5lens", "copy", 30.0),
    ("s3", "h5lens-cache", "copy", 30.0),
    ("s3", "h5lens", "virtualizarr", 5.0),
    # a narrow link: a planner that bridges gaps to save requests must not fetch its way
    # below zarr's one request per chunk
    ("s3-narrow", "h5lens", "h5lens-zarr", 1.0),
]
REMOTE = ("s3", "s3-narrow")
MEMORY_LIMIT = 1.5  # peak memory over h5lens at most this × the same loader over the copy


# ---------------------------------------------------------------------------
# Child side: one route, in its own process
# ---------------------------------------------------------------------------


def vm_hwm_mib() -> float:
    """This process's own peak resident memory (VmHWM), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def row_stats(x: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of a csr matrix: values, sum of values, sum of values × (column + 1) (float64,
    summed in stored order: equal bit for bit when the rows are)."""
    counts = np.diff(x.indptr).astype(np.int64)
    row = np.repeat(np.arange(x.shape[0]), counts)
    values = x.data.astype(np.float64)
    sums = np.bincount(row, weights=values, minlength=x.shape[0])
    weighted = np.bincount(row, weights=values * (x.indices.astype(np.float64) + 1), minlength=x.shape[0])
    return counts, sums, weighted


def _collection_datasets(spec: dict[str, Any]) -> tuple[list[Any], np.ndarray]:
    """The copy's X datasets (in the collection's order) and, per row of the copy, the
    file's row it came from (from the copy's obs names ``cell_NNNNNN``)."""
    import anndata as ad
    import zarr
    from annbatch import DatasetCollection

    if spec["where"] == "s3":
        if spec["route"] == "copy-zarrs":
            store: Any = zarr.storage.ObjectStore(obstore_s3(spec["options"], prefix=spec["copy_key"]), read_only=True)
        else:
            store = zarr.storage.FsspecStore.from_url(spec["copy_url"], storage_options=spec["options"], read_only=True)
    else:
        store = zarr.storage.LocalStore(spec["copy"], read_only=True)
    collection = DatasetCollection(zarr.open_group(store, mode="r"), mode="r")
    names = collection.obs(columns=["src_path"]).index  # the column annbatch adds; the index is the names
    rows = np.fromiter((int(n.rsplit("_", 1)[1]) for n in names), dtype=np.int64, count=len(names))
    return [g["X"] if spec["dense"] else ad.io.sparse_dataset(g["X"]) for g in collection], rows


def build_datasets(spec: dict[str, Any]) -> tuple[list[Any], np.ndarray | None]:
    import anndata as ad

    route, options = spec["route"], spec["options"]
    if route in ("h5lens", "h5lens-cache", "h5lens-zarr"):
        import h5lens

        if route != "h5lens-zarr":
            h5lens.fast_reads()
        kept = spec["decoded_cache_mib"] << 20 if route == "h5lens-cache" else 0
        group = h5lens.open_group(spec["manifest"], storage_options=options, decoded_cache_bytes=kept)
        return [h5lens.whole_rows(group["X"]) if spec["dense"] else ad.io.sparse_dataset(group["X"])], None
    if route == "virtualizarr":
        import zarr

        store = virtualizarr_store(spec["path"], spec["url"], options)
        return [ad.io.sparse_dataset(zarr.open_group(store, mode="r", zarr_format=3)["X"])], None
    if route in COPIES:
        if route == "copy-zarrs":
            import zarr

            zarr.config.set({"codec_pipeline.path": ZARRS})
        return _collection_datasets(spec)
    if route == "h5py-backed":
        return [ad.read_h5ad(spec["path"], backed="r").X], None
    raise ValueError(f"unknown route {route!r}")


def route_main(spec: dict[str, Any]) -> dict[str, Any]:
    import warnings

    warnings.simplefilter("ignore")
    import annbatch
    import anndata  # noqa: F401  - imports before the first memory reading, for every route alike
    import scipy.sparse as sp
    import zarr  # noqa: F401

    out: dict[str, Any] = {"hwm_imports_mib": vm_hwm_mib()}
    start = time.perf_counter()
    datasets, to_file_rows = build_datasets(spec)
    settings = spec["loader"]
    try:
        loader = annbatch.Loader(
            **settings, shuffle=True, return_index=True, preload_to_gpu=False, rng=np.random.default_rng(0)
        ).add_datasets(datasets)
    except (TypeError, ValueError) as e:
        return {**out, "status": "REFUSED", "error": f"{type(e).__name__}: {e}"}
    out["setup_s"] = time.perf_counter() - start
    out["hwm_setup_mib"] = vm_hwm_mib()

    with np.load(spec["expected"]) as saved:  # read once: an NpzFile inflates an array at each access
        expected = {name: saved[name] for name in ("counts", "sums", "weighted")}
    n_obs = expected["counts"].size
    seen = np.zeros(n_obs, dtype=np.int32)
    per_preload = settings["chunk_size"] * settings["preload_nchunks"] // settings["batch_size"]
    iterator = iter(loader)
    timed = 0.0
    batches = cells = epochs = twice = 0
    mismatches = 0
    while True:
        t0 = time.perf_counter()
        batch = next(iterator, None)
        if batch is None and timed < spec["seconds"]:  # the epoch ended early: the next one (training runs many)
            epochs += 1
            twice += int((seen > 1).sum())
            seen[:] = 0
            iterator = iter(loader)
            batch = next(iterator, None)
        timed += time.perf_counter() - t0
        if batch is None:
            break
        index = np.asarray(batch["index"], dtype=np.int64)
        rows = index if to_file_rows is None else to_file_rows[index]
        counts, sums, weighted = row_stats(sp.csr_matrix(batch["X"]) if spec["dense"] else batch["X"])
        if not (
            np.array_equal(counts, expected["counts"][rows])
            and np.array_equal(sums, expected["sums"][rows])
            and np.array_equal(weighted, expected["weighted"][rows])
        ):
            mismatches += 1
        np.add.at(seen, rows, 1)
        batches += 1
        cells += len(rows)
        if timed >= spec["seconds"] and batches % per_preload == 0:
            break
    twice += int((seen > 1).sum())
    out.update(
        seconds=timed, batches=batches, cells=cells, cells_per_s=cells / timed if timed else None,
        epoch_fraction=cells / n_obs, epochs_begun=epochs + 1, hwm_end_mib=vm_hwm_mib(), bad_batches=mismatches, rows_twice=twice,
        status="ok" if mismatches == 0 and twice == 0 else "FAILED",
    )
    out["peak_mib"] = out["hwm_end_mib"]
    return out


def copy_main(spec: dict[str, Any]) -> dict[str, Any]:
    """annbatch's conversion at its defaults (what its docs ask users to run), timed."""
    import warnings

    warnings.simplefilter("ignore")
    from annbatch import DatasetCollection

    start = time.perf_counter()
    DatasetCollection(spec["copy"]).add_adatas([spec["path"]], rng=np.random.default_rng(0))
    return {"seconds": time.perf_counter() - start, "peak_mib": vm_hwm_mib()}


# ---------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------


def run_child(command: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    try:
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), command, json.dumps(spec)],
            capture_output=True, text=True, timeout=timeout, env=env,
        )
    except subprocess.TimeoutExpired:
        return {"status": "ERROR", "error": f"no answer in {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"status": "ERROR", "error": " | ".join(tail)}
    return json.loads(lines[-1])


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """The h5ad, its per-row check values, its local manifest and annbatch's copy, made once
    per size in ``--workdir`` (a stamp holds what was measured making them)."""
    import h5py

    import h5lens

    tag = f"atlas-{args.cells}x{args.genes}-{args.density:g}" + ("" if args.values == "lognormal" else f"-{args.values}")
    tag += "-dense" if args.dense else ""
    path = os.path.join(args.workdir, tag + ".h5ad")
    stamp = path + ".info.json"
    if not args.regenerate and os.path.exists(stamp):
        with open(stamp) as f:
            return json.load(f)
    for leftover in (path, path + ".copy.zarr"):
        if os.path.isdir(leftover):
            shutil.rmtree(leftover)
    start = time.perf_counter()
    nnz = write_atlas(path, args.cells, args.genes, args.density, chunk=None, values=args.values)
    if args.dense:  # the same values, X dense as write_h5ad stores it (h5py guesses the chunks)
        import warnings

        import anndata as ad

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adata = ad.read_h5ad(path)
            adata.X = adata.X.toarray()
            adata.write_h5ad(path, compression="gzip")
            del adata
    info: dict[str, Any] = {"path": path, "cells": args.cells, "genes": args.genes, "nnz": nnz, "values": args.values,
                            "dense": args.dense, "bytes": os.path.getsize(path), "write_s": time.perf_counter() - start}
    with h5py.File(path) as f:
        import scipy.sparse as sp

        x = f["X"]
        if args.dense:
            info["stored_chunks"] = list(x.chunks)
            info["stored_chunk_values"] = int(np.prod(x.chunks))
            matrix = sp.csr_matrix(x[()])
        else:
            info["stored_chunk_values"] = int(x["data"].chunks[0])
            matrix = sp.csr_matrix((x["data"][()], x["indices"][()], x["indptr"][()]), shape=tuple(x.attrs["shape"]))
    counts, sums, weighted = row_stats(matrix)
    del matrix
    info["expected"] = path + ".rows.npz"
    np.savez(info["expected"], counts=counts, sums=sums, weighted=weighted)
    info["manifest"] = path + ".local.json"
    h5lens.index(path).to_json(info["manifest"], force=True)
    info["rows_per_chunk"] = max(c.rows_per_chunk for c in h5lens.stored_chunks(info["manifest"]))
    info["copy"] = path + ".copy.zarr"
    print(f"  wrote {tag}.h5ad: {info['bytes'] / 2**20:.1f} MiB in {info['write_s']:.1f} s; converting "
          "it with annbatch's DatasetCollection.add_adatas ...", flush=True)
    made = run_child(COPY_COMMAND, {"path": path, "copy": info["copy"]}, args.timeout)
    if "seconds" not in made:
        raise SystemExit(f"annbatch's conversion failed: {made.get('error')}")
    info["copy_cost"] = {"seconds": made["seconds"], "bytes": directory_bytes(info["copy"]), "peak_mib": made["peak_mib"]}
    with open(stamp, "w") as f:
        json.dump(info, f)
    return info


def inflation_cap(info: dict[str, Any], args: argparse.Namespace, preloads: int = 15) -> dict[str, Any]:
    """What inflating alone costs a preload: the stored chunks of ``X/data`` and ``X/indices``
    that ``preload_nchunks`` random blocks of ``chunk_size`` rows touch, read with h5py's
    ``read_direct_chunk`` and inflated once each by libdeflate (imagecodecs, as h5lens does)
    on one thread, median of ``preloads`` preloads. Any reader of the file that inflates its
    chunks whole is capped at ``cells_per_s_cap`` on this machine's cores, doing nothing else.
    ``..._heads``: each chunk inflated only as far as the blocks reach into it, where that is
    faster, by h5lens's own deflate decoder (``head``; libdeflate otherwise)."""
    import statistics

    import h5py
    from imagecodecs import deflate_decode

    from h5lens.codecs.table import ChunkDecoder, decoder

    if info.get("dense"):
        return {"note": "X is dense (measured for csr X only)"}
    rng = np.random.default_rng(1)
    seconds, heads_seconds = [], []
    with h5py.File(info["path"]) as f:
        x = f["X"]
        indptr = x["indptr"][()]
        n_obs = len(indptr) - 1
        arrays = [x["data"], x["indices"]]
        if any(a.compression != "gzip" or a.shuffle or a.chunks is None for a in arrays):
            return {"note": "X is not stored in plain gzip chunks"}
        for _ in range(preloads):
            starts = rng.choice(n_obs // args.chunk_size, args.preload_nchunks, replace=False) * args.chunk_size
            ends = np.minimum(starts + args.chunk_size, n_obs)
            raws = []
            for a in arrays:
                chunk = a.chunks[0]
                reach: dict[int, int] = {}  # per chunk touched, the values up to the last one a block needs
                for lo, hi in zip(indptr[starts].tolist(), indptr[ends].tolist(), strict=True):
                    for c in range(lo // chunk, (hi - 1) // chunk + 1) if hi > lo else ():
                        reach[c] = max(reach.get(c, 0), min(hi - c * chunk, chunk))
                size = chunk * a.dtype.itemsize
                raws += [(a.id.read_direct_chunk((c * chunk,))[1], size, reach[c] * a.dtype.itemsize) for c in sorted(reach)]
            t0 = time.perf_counter()
            for raw, size, _ in raws:
                deflate_decode(raw, out=size)
            seconds.append(time.perf_counter() - t0)
            inflater = decoder({"name": "numcodecs.zlib", "configuration": {"level": 4}}, 4)  # h5lens's own
            assert isinstance(inflater, ChunkDecoder) and inflater.head is not None
            scratch = memoryview(bytearray(max(size for _, size, _ in raws)))
            t0 = time.perf_counter()
            for raw, size, needed in raws:
                if needed < inflater.head_pays_below * size:
                    inflater.head(raw, scratch[:needed])
                else:
                    deflate_decode(raw, out=size)
            heads_seconds.append(time.perf_counter() - t0)
    per_preload, heads = statistics.median(seconds), statistics.median(heads_seconds)
    cores = os.cpu_count() or 1
    cells = args.chunk_size * args.preload_nchunks
    return {"inflate_ms_per_preload": per_preload * 1e3, "chunks_per_preload": len(raws), "cores": cores,
            "cells_per_s_cap": cells * cores / per_preload,
            "inflate_heads_ms_per_preload": heads * 1e3, "cells_per_s_cap_heads": cells * cores / heads}


def busy_core() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def spec_for(route: Route, where: str, info: dict[str, Any], s3: dict[str, Any] | None, args: argparse.Namespace) -> dict[str, Any]:
    remote = where in REMOTE
    assert s3 is not None or not remote
    return {
        "route": route.key,
        "where": "s3" if remote else "local",
        "path": info["path"],
        "url": s3["url"] if remote else info["path"],
        "manifest": s3["manifest"] if remote else info["manifest"],
        "copy": info["copy"],
        "copy_url": s3["copy_url"] if remote else None,
        "copy_key": os.path.basename(info["copy"]),
        "options": s3["options"] if remote else None,
        "expected": info["expected"],
        "loader": {"chunk_size": args.chunk_size, "preload_nchunks": args.preload_nchunks, "batch_size": args.batch_size},
        "seconds": args.seconds,
        "decoded_cache_mib": args.decoded_cache_mib,
        "dense": bool(info.get("dense")),
    }


def measure(args: argparse.Namespace, info: dict[str, Any], wheres: list[str], routes: list[Route]) -> list[dict[str, Any]]:
    results = []
    simulated = None
    s3: dict[str, Any] | None = None
    try:
        for where in wheres:
            if where in REMOTE and simulated is None:
                print("  starting the simulated S3 and uploading the h5ad and the copy ...", flush=True)
                simulated = SimulatedS3(LATENCY_MS, BANDWIDTH)
                etag = simulated.publish([info["path"]])[os.path.basename(info["path"])]
                url = f"s3://{BUCKET}/{os.path.basename(info['path'])}"
                manifest = info["path"] + ".s3.json"
                s3_manifest(info["path"], url, etag).to_json(manifest, force=True)
                s3 = {"url": url, "manifest": manifest, "copy_url": simulated.publish_tree(info["copy"]),
                      "options": simulated.options}
            if simulated is not None:  # the narrow link for s3-narrow only
                simulated.proxy.total_bandwidth = args.total_mbps * 1e6 if where == "s3-narrow" else None
            spinner = busy_core() if where == "local-busy" else None
            try:
                for route in routes:
                    if route.key == "h5py-backed" and where != "local":
                        continue
                    if route.key == "virtualizarr" and info.get("dense"):  # no view in whole rows: annbatch fails
                        continue
                    if simulated is not None:
                        simulated.proxy.stats.reset()
                    result = run_child(ROUTE_COMMAND, spec_for(route, where, info, s3, args), args.timeout)
                    result.update(where=where, route=route.key, label=route.label)
                    if where in REMOTE and simulated is not None:  # setup's requests included
                        result.update(s3_gets=simulated.proxy.stats.gets, s3_bytes=simulated.proxy.stats.bytes)
                    results.append(result)
                    rate = result.get("cells_per_s")
                    shown = f"{rate:,.0f} cells/s" if rate else result.get("error", "")[:120]
                    print(f"  {where:10s} {route.key:13s} {result['status']:8s} {shown}"
                          + (f"  peak {result['peak_mib']:.0f} MiB" if "peak_mib" in result else "")
                          + (f"  {per_preload(result, args)}" if "s3_gets" in result else ""), flush=True)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    finally:
        if simulated is not None:
            simulated.stop()
    return results


def per_preload(result: dict[str, Any], args: argparse.Namespace) -> str:
    """The S3 GETs and bytes a route fetched, per preload (its setup's included)."""
    preloads = result.get("cells", 0) / (args.chunk_size * args.preload_nchunks)
    if not preloads:
        return ""
    return f"{result['s3_gets'] / preloads:,.0f} GETs, {result['s3_bytes'] / preloads / 1e6:.1f} MB per preload"


def _rate(results: list[dict[str, Any]], where: str, route: str) -> float | None:
    if route == "copy":
        rates = [r for k in COPIES if (r := _rate(results, where, k)) is not None]
        return max(rates) if rates else None
    for r in results:
        if r["where"] == where and r["route"] == route and r["status"] == "ok":
            return r.get("cells_per_s")
    return None


def _peak(results: list[dict[str, Any]], where: str, route: str) -> float | None:
    for r in results:
        if r["where"] == where and r["route"] == route and r["status"] == "ok":
            return r.get("peak_mib")
    return None


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for where, route, against, limit in TARGETS:
        a, b = _rate(results, where, route), _rate(results, where, against)
        if a is None or b is None:
            continue
        ratio = a / b
        found.append({"where": where, "what": f"{route} / {against} cells/s", "target": f">= {limit:g}x",
                      "measured": ratio, "met": ratio >= limit})
    for where in ("local", "s3"):
        best = max(COPIES, key=lambda k: _rate(results, where, k) or 0.0)
        for route in ("h5lens", "h5lens-cache"):
            a, b = _peak(results, where, route), _peak(results, where, best)
            if a is not None and b is not None:
                found.append({"where": where, "what": f"{route} / {best} peak memory", "target": f"<= {MEMORY_LIMIT:g}x",
                              "measured": a / b, "met": a / b <= MEMORY_LIMIT})
    return found


def print_report(results: list[dict[str, Any]], wheres: list[str], info: dict[str, Any], found: list[dict[str, Any]]) -> None:
    if info.get("dense"):
        stored = f"X dense in chunks of {tuple(info['stored_chunks'])}, read through h5lens.whole_rows"
    else:
        stored = f"X/data in chunks of {info['stored_chunk_values']:,} values"
    print(f"\nannbatch Loader over {info['cells']:,} x {info['genes']:,} {info.get('values', 'lognormal')} "
          f"({info['bytes'] / 2**20:.0f} MiB h5ad, {stored}: {info['rows_per_chunk']:.0f} cells per chunk)")
    header = ["route"] + [f"{w} cells/s" for w in wheres] + [f"{w} peak MiB" for w in wheres]
    body = []
    for route in ROUTES:
        line = [route.key]
        for w in wheres:
            r = next((r for r in results if r["where"] == w and r["route"] == route.key), None)
            line.append("-" if r is None else (f"{r['cells_per_s']:,.0f}" if r["status"] == "ok" else r["status"]))
        for w in wheres:
            p = _peak(results, w, route.key)
            line.append("-" if p is None else f"{p:.0f}")
        body.append(line)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    for row in [header, *body]:
        print("  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    h5 = {w: _rate(results, w, "h5lens") for w in wheres}
    print("\n  h5lens's cells/s over each route's:")
    for route in ROUTES[1:]:
        ratios = []
        for w in wheres:
            other = _rate(results, w, route.key)
            ratios.append(f"{w} {h5[w] / other:.2f}x" if h5[w] and other else f"{w} -")
        print(f"    {route.key:13s} " + "  ".join(ratios))
    cost = info["copy_cost"]
    print(f"\n  the copy: {cost['seconds']:.1f} s to convert, {cost['bytes'] / 2**20:.1f} MiB, "
          f"peak {cost['peak_mib']:.0f} MiB (h5lens copies nothing: its manifest is "
          f"{os.path.getsize(info['manifest']) / 2**10:.0f} KiB)")
    print("\n  targets (the issue's):")
    for t in found:
        print(f"    {t['where']:10s} {t['what']:40s} {t['target']:8s} measured {t['measured']:.2f}x  "
              + ("met" if t["met"] else "NOT met"))
    for r in results:
        if r["status"] not in ("ok",):
            print(f"  {r['where']} {r['route']}: {r['status']}: {r.get('error', '')[:300]}")


def plot(runs: list[dict[str, Any]], path: str) -> str:
    """Cells/s per route, one panel per (atlas size, where), from saved runs (``--json`` files)."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no plot"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for run in runs:
        for where in dict.fromkeys(r["where"] for r in run["results"]):
            rows = [r for r in run["results"] if r["where"] == where and r.get("cells_per_s")]
            if rows:
                panels.append((f"{run['file']['cells']:,} cells ({run['file'].get('values', 'lognormal')}), {where}", rows))
    if not panels:
        return "no results to plot"
    import matplotlib.ticker

    order = [r.key for r in ROUTES]
    columns = min(2, len(panels))
    lines = -(-len(panels) // columns)
    fig, grid = plt.subplots(lines, columns, figsize=(5.2 * columns, 2.6 * lines + 0.6), squeeze=False)
    for ax in grid.ravel()[len(panels):]:
        ax.set_visible(False)
    for ax, (title, rows) in zip(grid.ravel(), panels, strict=False):
        rows = sorted(rows, key=lambda r: order.index(r["route"]) if r["route"] in order else len(order))
        names = [r["route"] for r in rows]
        colors = ["tab:blue" if n.startswith("h5lens") else "tab:gray" if n.startswith("copy") else "tab:orange"
                  for n in names]  # fmt: skip
        rates = [r["cells_per_s"] for r in rows]
        ax.barh(names, rates, color=colors)
        ax.set_xscale("log")
        ax.set_xlim(min(rates) / 2, max(rates) * 4)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        for y, rate in enumerate(rates):
            ax.text(rate * 1.08, y, f"{rate:,.0f}", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("cells/s (log)")
        ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.suptitle("annbatch's Loader: h5lens over the h5ad (blue, no copy), VirtualiZarr (orange), "
                 "annbatch's converted copy (gray)", fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot written to {path}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=100_000, help="rows of the atlas (default 100,000; the issue's 10^6 too)")
    p.add_argument("--genes", type=int, default=2_000)
    p.add_argument("--density", type=float, default=0.05)
    p.add_argument("--values", choices=("counts", "lognormal"), default="counts",
                   help="X's stored values: whole UMI counts as float32, as the issue's atlas (default), or "
                        "lognormal floats, as a normalised X, whose bytes barely compress")  # fmt: skip
    p.add_argument("--dense", action="store_true",
                   help="X stored dense by write_h5ad (chunks that cut the columns), "
                        "read through h5lens.whole_rows")  # fmt: skip
    p.add_argument("--chunk-size", type=int, default=32, help="annbatch's chunk_size: rows per block (default 32)")
    p.add_argument("--preload-nchunks", type=int, default=256, help="blocks per preload (default 256)")
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--decoded-cache-mib", type=int, default=256,
                   help="decoded_cache_bytes of the h5lens-cache route, in MiB (default 256)")  # fmt: skip
    p.add_argument("--seconds", type=float, default=8.0, help="time each route about this long, whole preloads (default 8)")
    p.add_argument("--where", default="local,s3",
                   help="local, local-busy (one core kept busy), s3, s3-narrow (default local,s3)")  # fmt: skip
    p.add_argument("--total-mbps", type=float, default=25.0,
                   help="s3-narrow: MB/s that every response shares (default 25)")  # fmt: skip
    p.add_argument("--routes", help=f"comma-separated, of: {', '.join(r.key for r in ROUTES)} (default all)")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "h5lens-loader-bench"))
    p.add_argument("--regenerate", action="store_true", help="write the h5ad and the copy again")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before a route counts as hung")
    p.add_argument("--json", default=DEFAULT_JSON, help=f"write the numbers here (default {DEFAULT_JSON}; '' for none)")
    p.add_argument("--plot", default="", help="draw cells/s per route into this PNG (needs matplotlib)")
    p.add_argument("--plot-from", nargs="+", metavar="JSON",
                   help="draw --plot (default docs/ml-loading.png) from these saved runs and exit, measuring nothing")  # fmt: skip
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.plot_from:
        runs = []
        for name in args.plot_from:
            with open(name) as f:
                runs.append(json.load(f))
        print(plot(runs, args.plot or os.path.join(HERE, "..", "docs", "ml-loading.png")))
        return 0
    started = time.perf_counter()
    os.makedirs(args.workdir, exist_ok=True)
    wheres = [w.strip() for w in args.where.split(",") if w.strip()]
    unknown = set(wheres) - {"local", "local-busy", *REMOTE}
    if unknown:
        raise SystemExit(f"unknown --where {sorted(unknown)}")
    routes = ROUTES if not args.routes else [ROUTE_BY_KEY[k.strip()] for k in args.routes.split(",")]
    info = prepare(args)
    cap = inflation_cap(info, args)
    results = measure(args, info, wheres, routes)
    found = targets(results)
    print_report(results, wheres, info, found)
    if "cells_per_s_cap" in cap:
        print(f"\n  inflating alone: {cap['inflate_ms_per_preload']:.1f} ms of one core per preload "
              f"({cap['chunks_per_preload']} stored chunks): at most {cap['cells_per_s_cap']:,.0f} cells/s "
              f"on {cap['cores']} cores for any reader that inflates them, doing nothing else;\n"
              f"  only as far as the blocks reach: {cap['inflate_heads_ms_per_preload']:.1f} ms, at most "
              f"{cap['cells_per_s_cap_heads']:,.0f} cells/s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        from importlib.metadata import version

        payload = {
            "benchmark": "loader_bench",
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": "python benchmarks/loader_bench.py " + " ".join(argv),
            "file": {k: v for k, v in info.items() if k not in ("expected",)},
            "loader": {"chunk_size": args.chunk_size, "preload_nchunks": args.preload_nchunks,
                       "batch_size": args.batch_size, "shuffle": True},
            "seconds_per_route": args.seconds, "latency_ms": LATENCY_MS, "bandwidth": BANDWIDTH,
            "total_bandwidth_narrow": args.total_mbps * 1e6,
            "memory": "VmHWM of each route's own process (/proc/self/status), MiB",
            "environment": {"python": platform.python_version(), "cpus": os.cpu_count(), **{
                            name: version(name) for name in ("zarr", "anndata", "annbatch", "zarrs", "virtualizarr")}},
            "targets": found,
            "inflation_cap": cap,
            "results": [{**r, "route_spec": asdict(ROUTE_BY_KEY[r["route"]])} for r in results],
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1, default=str)
        print(f"\nnumbers written to {args.json}")
        if args.plot:
            with open(args.json) as f:
                print(plot([json.load(f)], args.plot))
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 1 if any(r["status"] in ("FAILED", "ERROR") for r in results) else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in (ROUTE_COMMAND, COPY_COMMAND):
        run = route_main if sys.argv[1] == ROUTE_COMMAND else copy_main
        print(json.dumps(run(json.loads(sys.argv[2]))), flush=True)
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
