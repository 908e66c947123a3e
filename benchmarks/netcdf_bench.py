#!/usr/bin/env python
"""Benchmark: h5lens and VirtualiZarr's own HDF parser on one netCDF-4 file of ≥ 10^5 chunks.

Side by side, in one run, on the same file (written by netCDF-C through netCDF4-python:
an unlimited time axis, zlib + shuffle chunks, CF attributes):

* **scan**: ``h5lens.index(path)``; VirtualiZarr 2.8's ``HDFParser()(url, registry)``;
  ``H5LensParser()(url, registry)`` (h5lens's index handed to VirtualiZarr as its
  ``ManifestStore``);
* **xarray open + full load** of what the scan made: ``xr.open_dataset(store,
  engine="zarr").load()`` over ``h5lens.open_store(manifest)`` and over each
  VirtualiZarr ``ManifestStore`` (chunks read through its obstore registry); and
  ``xr.open_dataset(path, engine="h5netcdf").load()`` as the reference.

Every timed run happens in a fresh subprocess, after imports and after the same approach
ran once, untimed, on a small file of the same layout (first-call costs are not scan or
load time); the file is read once first so every run sees a warm page cache. Medians of ``--repeat`` runs.
Every load is checked against the h5netcdf reading (a digest of every variable's values).
``--json OUT`` writes the numbers (default benchmarks/results/netcdf.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

RESULT_MARKER = "@@RESULT@@ "
WORKER_COMMAND = "_worker"
MIN_CHUNKS = 100_000
DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "netcdf.json")


@dataclass(frozen=True)
class Approach:
    key: str
    label: str
    scans: bool  # False: the reference reads the file itself


APPROACHES = [
    Approach("h5lens", "h5lens.index → h5lens.open_store", True),
    Approach("virtualizarr-hdf", "VirtualiZarr HDFParser → ManifestStore", True),
    Approach("virtualizarr-h5lens", "h5lens.virtualizarr.H5LensParser → ManifestStore", True),
    Approach("h5netcdf", "xr.open_dataset(path, engine='h5netcdf') (reference)", False),
]


# -- the file -----------------------------------------------------------------------------


def generate_file(path: str, times: int, lat: int, lon: int, chunk: tuple[int, int, int]) -> dict[str, Any]:
    """A netCDF-C file: t2m(time, lat, lon) float32 in zlib + shuffle chunks of ``chunk``,
    coordinates, CF attributes; a packed int16 precipitation in bigger chunks."""
    before = os.environ.get("HDF5_PLUGIN_PATH")
    import netCDF4  # points HDF5_PLUGIN_PATH at its own plugins: put back below

    if before is None:
        os.environ.pop("HDF5_PLUGIN_PATH", None)

    rng = np.random.default_rng(0)
    start = time.perf_counter()
    with netCDF4.Dataset(path, "w", format="NETCDF4") as f:
        f.title = "h5lens netCDF benchmark"
        f.Conventions = "CF-1.8"
        f.createDimension("time", None)
        f.createDimension("lat", lat)
        f.createDimension("lon", lon)
        t = f.createVariable("time", "f8", ("time",))
        t.units = "hours since 2000-01-01"
        t.calendar = "standard"
        t[:] = np.arange(times, dtype="f8")
        la = f.createVariable("lat", "f4", ("lat",))
        la.units = "degrees_north"
        la[:] = np.linspace(-89.5, 89.5, lat)
        lo = f.createVariable("lon", "f4", ("lon",))
        lo.units = "degrees_east"
        lo[:] = np.linspace(0, 359, lon)
        t2m = f.createVariable(
            "t2m",
            "f4",
            ("time", "lat", "lon"),
            zlib=True,
            complevel=1,
            shuffle=True,
            chunksizes=chunk,
            fill_value=np.float32(-9999.0),
        )
        t2m.units = "K"
        t2m.long_name = "2 metre temperature"
        base = (280 + 10 * np.cos(np.deg2rad(np.linspace(-89.5, 89.5, lat))))[:, None].astype("f4")
        step = max(1, 2_000_000 // (lat * lon))
        for i in range(0, times, step):
            n = min(step, times - i)
            t2m[i : i + n] = base + rng.normal(0, 1, (n, lat, lon)).astype("f4")
        tp = f.createVariable(
            "tp",
            "i2",
            ("time", "lat", "lon"),
            zlib=True,
            shuffle=True,
            chunksizes=(min(times, 24), lat, lon),
            fill_value=np.int16(-32767),
        )
        tp.set_auto_maskandscale(False)
        tp.scale_factor = 0.001
        tp.add_offset = 0.0
        tp.units = "m"
        for i in range(0, times, step):
            n = min(step, times - i)
            tp[i : i + n] = rng.integers(0, 3000, (n, lat, lon), dtype="i2")
    import h5py

    with h5py.File(path, "r") as h5:
        chunks = {name: h5[name].id.get_num_chunks() for name in ("t2m", "tp", "time")}
    return {
        "seconds": time.perf_counter() - start,
        "bytes": os.path.getsize(path),
        "chunks": chunks,
        "total_chunks": sum(chunks.values()),
        "shape": [times, lat, lon],
        "t2m_chunk": list(chunk),
    }


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


# -- worker: one timed run ----------------------------------------------------------------


def _registry() -> Any:
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore

    return ObjectStoreRegistry({"file://": LocalStore()})


def _digest(ds: Any) -> str:
    h = hashlib.sha256()
    for name in sorted(ds.variables):
        values = np.asarray(ds[name].values)
        h.update(name.encode())
        h.update(
            values.astype(values.dtype.newbyteorder("<")).tobytes()
            if values.dtype.kind != "O"
            else repr(values.tolist()).encode()
        )
    return h.hexdigest()[:16]


def run(approach: str, path: str, warmup: str | None = None) -> dict[str, Any]:
    """One run of ``approach`` on ``path``; first, untimed, the same on the small file
    ``warmup`` (imports, codec registries and first-call costs are not scan or load time)."""
    import xarray as xr

    warnings.simplefilter("ignore")
    url = "file://" + os.path.abspath(path)
    # imports before the clock
    import virtualizarr.parsers

    import h5lens
    import h5lens.virtualizarr

    if warmup is not None:
        run(approach, warmup)
    out: dict[str, Any] = {}
    start = time.perf_counter()
    if approach == "h5lens":
        manifest = h5lens.index(path)
        out["scan"] = time.perf_counter() - start
        out["chunk_refs"] = manifest.n_chunks
        start = time.perf_counter()
        ds = xr.open_dataset(h5lens.open_store(manifest), engine="zarr", consolidated=False).load()
    elif approach in ("virtualizarr-hdf", "virtualizarr-h5lens"):
        registry = _registry()
        parser: Any = (
            virtualizarr.parsers.HDFParser() if approach == "virtualizarr-hdf" else h5lens.virtualizarr.H5LensParser()
        )
        store = parser(url, registry)
        out["scan"] = time.perf_counter() - start
        start = time.perf_counter()
        ds = xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=3).load()
    else:
        ds = xr.open_dataset(path, engine="h5netcdf").load()
    out["load"] = time.perf_counter() - start
    out["digest"] = _digest(ds)
    out["dtypes"] = {name: str(v.dtype) for name, v in ds.variables.items()}
    return out


def worker_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=f"netcdf_bench.py {WORKER_COMMAND}")
    parser.add_argument("approach")
    parser.add_argument("--file", required=True)
    parser.add_argument("--warmup")
    args = parser.parse_args(argv)
    try:
        result = run(args.approach, args.file, args.warmup)
    except Exception as e:  # noqa: BLE001 - reported as this approach's result
        result = {"error": f"{type(e).__name__}: {e}"}
    print(RESULT_MARKER + json.dumps(result), flush=True)


def run_worker(approach: Approach, path: str, warmup: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), WORKER_COMMAND, approach.key, "--file", path, "--warmup", warmup]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return dict(json.loads(line[len(RESULT_MARKER) :]))
    return {"error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}


# -- parent: runs, medians, report ----------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == WORKER_COMMAND:
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--times", type=int, default=1000, help="length of the time axis (default 1000)")
    parser.add_argument("--lat", type=int, default=100)
    parser.add_argument("--lon", type=int, default=100)
    parser.add_argument("--chunk", default="1,10,10", help="t2m chunk shape (default 1,10,10: 10^5 chunks)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per approach (default 3)")
    parser.add_argument("--file", help="keep the generated file here (default: a temporary directory)")
    parser.add_argument("--json", default=DEFAULT_JSON, help=f"write the numbers here (default {DEFAULT_JSON})")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--allow-small", action="store_true", help="allow fewer than 10^5 chunks (quick checks)")
    args = parser.parse_args()
    chunk = tuple(int(c) for c in args.chunk.split(","))
    if len(chunk) != 3:
        parser.error("--chunk takes three integers")

    with tempfile.TemporaryDirectory() as tmp:
        path = args.file or os.path.join(tmp, "bench.nc")
        info = generate_file(path, args.times, args.lat, args.lon, chunk)  # type: ignore[arg-type]
        print(
            f"file: {info['bytes'] / 1e6:.1f} MB, {info['total_chunks']:,} chunks {info['chunks']}, written in {info['seconds']:.1f} s"
        )
        if info["total_chunks"] < MIN_CHUNKS and not args.allow_small:
            parser.error(f"{info['total_chunks']} chunks, fewer than {MIN_CHUNKS}: raise --times or shrink --chunk")
        warmup = os.path.join(tmp, "warmup.nc")
        generate_file(warmup, 4, args.lat, args.lon, chunk)  # type: ignore[arg-type]
        warm(path)
        runs: dict[str, list[dict[str, Any]]] = {a.key: [] for a in APPROACHES}
        for number in range(args.repeat):  # interleaved, so drift in machine load hits all alike
            for approach in APPROACHES:
                result = run_worker(approach, path, warmup, args.timeout)
                runs[approach.key].append(result)
                shown = result.get("error") or ", ".join(
                    f"{k} {result[k]:.2f} s" for k in ("scan", "load") if k in result
                )
                print(f"  run {number + 1} {approach.key}: {shown}", flush=True)
        report = summarize(info, runs, args.repeat)
    print_table(report)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nwrote {args.json}")


def summarize(info: dict[str, Any], runs: dict[str, list[dict[str, Any]]], repeat: int) -> dict[str, Any]:
    import virtualizarr
    import xarray
    import zarr

    import h5lens

    reference = next((r["digest"] for r in runs["h5netcdf"] if "digest" in r), None)
    results: dict[str, Any] = {}
    for approach in APPROACHES:
        done = [r for r in runs[approach.key] if "error" not in r]
        entry: dict[str, Any] = {"label": approach.label, "runs": runs[approach.key]}
        if done:
            for phase in ("scan", "load"):
                if phase in done[0]:
                    entry[f"{phase}_median_s"] = statistics.median(r[phase] for r in done)
            entry["equal_to_h5netcdf"] = all(r["digest"] == reference for r in done)
            entry["dtypes"] = done[0]["dtypes"]
        else:
            entry["error"] = runs[approach.key][0].get("error")
        results[approach.key] = entry
    ratios: dict[str, float] = {}
    ours, theirs = results["h5lens"], results["virtualizarr-hdf"]
    for phase in ("scan", "load"):
        key = f"{phase}_median_s"
        if key in ours and key in theirs:
            ratios[f"{phase}: VirtualiZarr HDFParser / h5lens"] = theirs[key] / ours[key]
        if key in ours and key in results["virtualizarr-h5lens"]:
            ratios[f"{phase}: H5LensParser / h5lens"] = results["virtualizarr-h5lens"][key] / ours[key]
    if "load_median_s" in ours and "load_median_s" in results["h5netcdf"]:
        ratios["load: h5lens / h5netcdf"] = ours["load_median_s"] / results["h5netcdf"]["load_median_s"]
    return {
        "benchmark": "netcdf_bench",
        "file": info,
        "repeat": repeat,
        "results": results,
        "ratios": ratios,
        "versions": {
            "h5lens": h5lens.__version__,
            "virtualizarr": virtualizarr.__version__,
            "xarray": xarray.__version__,
            "zarr": zarr.__version__,
            "python": platform.python_version(),
        },
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    }


def print_table(report: dict[str, Any]) -> None:
    print(f"\n{'approach':<55} {'scan (s)':>9} {'open+load (s)':>14}  equal")
    for entry in report["results"].values():
        scan = entry.get("scan_median_s")
        load = entry.get("load_median_s")
        if "error" in entry:
            print(f"{entry['label']:<55} {'error: ' + str(entry['error'])[:60]}")
            continue
        print(
            f"{entry['label']:<55} {'' if scan is None else f'{scan:9.2f}':>9} {load:14.2f}  "
            f"{'yes' if entry['equal_to_h5netcdf'] else 'NO'}"
        )
    print()
    for name, value in report["ratios"].items():
        print(f"{name:<45} {value:6.2f}×")


if __name__ == "__main__":
    main()
