#!/usr/bin/env python
"""Benchmark: a year of daily netCDF files as one combined manifest (issue 45's netCDF targets).

``--files`` netCDF-4 files written by xarray (``to_netcdf(engine="h5netcdf")``), each of
``--steps`` time steps of a ``--lat`` x ``--lon`` grid, ``--vars`` float32 variables (a smooth
field plus noise), chunked ``(steps, --chunk-lat, --chunk-lon)``, zlib level 4 with shuffle,
times in one CF unit. Each file is indexed once into a compact manifest (outside the clock,
in ``--workdir``, kept between runs). Then, one run, side by side:

* combine: ``h5lens.combine(manifests, dim="time")`` (target <= 10 s for 365 files);
* one grid cell over the year, opened and read: ``xr.open_dataset(combined,
  engine="h5lens")[var].isel(lat=i, lon=j).values`` against ``xr.open_mfdataset(files,
  engine="h5netcdf", combine="nested", concat_dim="time")``, the same selection (target:
  <= 0.5x its time), and against ``open_mfdataset(..., parallel=True)`` (dask opens the
  files in its threads); the read alone after opening is shown too;
* the same over S3 (``--s3``): moto (in a process of its own) behind the counting proxy
  playing S3 (``--latency-ms`` a request, ``--bandwidth`` bytes/s a stream), the files
  uploaded and indexed from the bucket, the combined manifest read from it;
  ``open_mfdataset`` over s3fs file objects.

Every read is checked against open_mfdataset's values. Each contender runs once untimed
first (imports, page cache), then ``--repeat`` times interleaved; medians are printed beside
the targets, with the requests each S3 read made. ``--json OUT`` saves the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

BUCKET = "year"


def make_files(
    directory: str, n: int, steps: int, lat: int, lon: int, nvars: int, chunks: tuple[int, int]
) -> list[str]:
    import pandas as pd
    import xarray as xr

    os.makedirs(directory, exist_ok=True)
    lats, lons = np.linspace(-89.5, 89.5, lat), np.linspace(0.5, 359.5, lon)
    field = (np.cos(np.deg2rad(lats))[:, None] * 30 + 250 + 5 * np.sin(np.deg2rad(lons))[None, :]).astype("f4")
    paths = []
    for i in range(n):
        path = os.path.join(directory, f"day{i:04d}.nc")
        paths.append(path)
        if os.path.exists(path):
            continue
        rng = np.random.default_rng(i)
        times = pd.date_range("2001-01-01", periods=n * steps, freq=f"{24 // steps}h")[i * steps : (i + 1) * steps]
        data = {
            f"v{k}": (("time", "lat", "lon"), field[None] + rng.normal(0, 2, (steps, lat, lon)).astype("f4"))
            for k in range(nvars)
        }
        ds = xr.Dataset(data, coords={"time": times, "lat": lats, "lon": lons})
        encoding: dict[str, Any] = {
            name: {"zlib": True, "complevel": 4, "shuffle": True, "chunksizes": (steps, *chunks)} for name in data
        }
        encoding["time"] = {"units": "hours since 2001-01-01", "calendar": "standard"}
        ds.to_netcdf(path + ".partial", engine="h5netcdf", encoding=encoding)
        os.replace(path + ".partial", path)
    return paths


def index_files(sources: list[str], directory: str, **options: Any) -> list[str]:
    import h5lens

    os.makedirs(directory, exist_ok=True)
    out = []
    for source in sources:
        target = os.path.join(directory, os.path.basename(source) + ".h5lens")
        if not os.path.exists(target):
            h5lens.index(source, **options).save(target, format="compact")
        out.append(target)
    return out


def interleaved(contenders: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Each contender once untimed, then ``repeat`` timed rounds, one of each per round."""
    for work in contenders.values():
        work()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, work in contenders.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    return times


def cell_readers(
    combined: str, files: list[Any], var: str, cell: tuple[int, int], expected: np.ndarray | None, **options: Any
) -> dict[str, Callable[[], np.ndarray]]:
    """The contenders: open then read one grid cell over the whole time axis, each checked."""
    import xarray as xr

    where = {"lat": cell[0], "lon": cell[1]}

    def checked(found: np.ndarray) -> np.ndarray:
        if expected is not None and not np.array_equal(found, expected):
            raise AssertionError("the grid cell read differs from open_mfdataset's")
        return found

    def h5lens_cell() -> np.ndarray:
        with xr.open_dataset(combined, engine="h5lens", **options) as ds:
            return checked(ds[var].isel(where).values)

    def mfdataset_cell(parallel: bool) -> Callable[[], np.ndarray]:
        def read() -> np.ndarray:
            opened = [f() for f in files] if callable(files[0]) else files
            with xr.open_mfdataset(
                opened, engine="h5netcdf", combine="nested", concat_dim="time", data_vars="minimal",
                coords="minimal", compat="override", parallel=parallel,
            ) as ds:  # fmt: skip
                return checked(ds[var].isel(where).values)

        return read

    return {
        "h5lens: open_dataset(combined, engine='h5lens') + cell": h5lens_cell,
        "xr.open_mfdataset(files, engine='h5netcdf') + cell": mfdataset_cell(False),
        "xr.open_mfdataset(..., parallel=True) + cell": mfdataset_cell(True),
    }


def read_only(combined: str, var: str, cell: tuple[int, int], repeat: int, **options: Any) -> float:
    """The cell's first read alone, the combined dataset just opened (median of ``repeat`` opens)."""
    import xarray as xr

    times = []
    for _ in range(repeat):
        with xr.open_dataset(combined, engine="h5lens", **options) as ds:
            start = time.perf_counter()
            ds[var].isel(lat=cell[0], lon=cell[1]).values  # noqa: B018 - read, nothing kept
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(title: str, times: dict[str, list[float]], extra: dict[str, float]) -> list[tuple[str, float, str]]:
    names = list(times)
    medians = {name: statistics.median(t) for name, t in times.items()}
    ours, peer, parallel = (medians[n] for n in names)
    rows = [(f"{title}: {name} (s)", value, "") for name, value in medians.items()]
    rows += [(f"{title}: {name} (s)", value, "") for name, value in extra.items()]
    rows += [
        (f"{title}: h5lens / open_mfdataset", ours / peer, "<= 0.5"),
        (f"{title}: h5lens / open_mfdataset(parallel=True)", ours / parallel, ""),
    ]
    return rows


def local(
    args: argparse.Namespace, paths: list[str], manifests: list[str], workdir: str
) -> list[tuple[str, float, str]]:
    import xarray as xr

    import h5lens

    start = time.perf_counter()
    combined = h5lens.combine(manifests, dim="time")
    combine_s = time.perf_counter() - start
    target = os.path.join(workdir, "combined.h5lens")
    combined.save(target, format="compact", force=True)
    cell = (args.lat // 3, args.lon // 5)
    with xr.open_mfdataset(paths, engine="h5netcdf", combine="nested", concat_dim="time") as ds:
        expected = ds["v0"].isel(lat=cell[0], lon=cell[1]).values
    times = interleaved(cell_readers(target, paths, "v0", cell, expected), args.repeat)
    extra = {"first read of the cell alone, combined just opened": read_only(target, "v0", cell, args.repeat)}
    return [("combine (s)", combine_s, "<= 10 s at 365 files"), *compare("local", times, extra)]


def s3(args: argparse.Namespace, paths: list[str], workdir: str) -> tuple[list[tuple[str, float, str]], dict[str, int]]:
    import xarray as xr

    import h5lens
    from h5lens.testing.emulators import SeparateS3
    from h5lens.testing.s3 import CountingProxy

    with SeparateS3() as server, CountingProxy(
        server.endpoint_url, latency_ms=args.latency_ms, bandwidth=args.bandwidth, cache_objects=True
    ) as proxy:  # fmt: skip
        server.make_bucket(BUCKET)
        direct = server.filesystem()
        urls = [f"s3://{BUCKET}/{os.path.basename(p)}" for p in paths]
        direct.put(paths, urls)
        # indexed from the bucket (no latency: not timed), so that the manifests record its URLs
        manifests = index_files(urls, os.path.join(workdir, "s3-manifests", str(os.getpid())),
                                storage_options=server.storage_options())  # fmt: skip
        options = server.storage_options(proxy.endpoint_url)
        start = time.perf_counter()
        combined = h5lens.combine(manifests, dim="time", storage_options=options)
        combine_s = time.perf_counter() - start
        target = f"s3://{BUCKET}/combined.h5lens"
        combined.save(target, format="compact", storage_options=options)
        fs = server.filesystem(proxy.endpoint_url)
        cell = (args.lat // 3, args.lon // 5)
        with xr.open_mfdataset(paths, engine="h5netcdf", combine="nested", concat_dim="time") as ds:
            expected = ds["v0"].isel(lat=cell[0], lon=cell[1]).values
        openers = [lambda url=url: fs.open(url) for url in urls]
        readers = cell_readers(target, openers, "v0", cell, expected, storage_options=options)
        requests = {}
        for name, read in readers.items():
            proxy.stats.reset()
            read()
            requests[name] = proxy.stats.requests
        times = interleaved(readers, args.s3_repeat)
        extra = {
            "first read of the cell alone, combined just opened": read_only(
                target, "v0", cell, args.repeat, storage_options=options
            )
        }
    title = f"S3 (+{args.latency_ms:g} ms, {args.bandwidth / 1e6:g} MB/s)"
    return [(f"{title}: combine from manifests (s)", combine_s, ""), *compare(title, times, extra)], requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=365)
    parser.add_argument("--steps", type=int, default=1, help="time steps per file (24: hourly)")
    parser.add_argument("--lat", type=int, default=180)
    parser.add_argument("--lon", type=int, default=360)
    parser.add_argument("--chunk-lat", type=int, default=90)
    parser.add_argument("--chunk-lon", type=int, default=180)
    parser.add_argument("--vars", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--s3", action="store_true", help="also over moto behind the latency proxy")
    parser.add_argument("--s3-repeat", type=int, default=1, help="timed rounds over S3 (open_mfdataset takes minutes)")
    parser.add_argument("--no-local", action="store_true", help="only over S3")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--bandwidth", type=float, default=100e6, help="bytes/s of each response")
    parser.add_argument("--workdir", default="/tmp/h5lens-combine-nc-bench")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    shape = f"{args.files}x{args.steps}x{args.lat}x{args.lon}x{args.vars}-c{args.chunk_lat}x{args.chunk_lon}"
    workdir = os.path.join(args.workdir, shape)
    paths = make_files(os.path.join(workdir, "nc"), args.files, args.steps, args.lat, args.lon, args.vars,
                       (args.chunk_lat, args.chunk_lon))  # fmt: skip
    manifests = index_files(paths, os.path.join(workdir, "manifests"))
    rows = [] if args.no_local else local(args, paths, manifests, workdir)
    requests: dict[str, int] = {}
    if args.s3:
        found, requests = s3(args, paths, workdir)
        rows += found
    print(
        f"{args.files} files of {args.steps} step(s) x {args.lat} x {args.lon}, {args.vars} variables, "
        f"chunks ({args.steps}, {args.chunk_lat}, {args.chunk_lon}), zlib 4 + shuffle; medians of {args.repeat} "
        f"(over S3: {args.s3_repeat})"
    )
    for name, value, target in rows:
        print(f"  {name:88s} {value:9.3f}   {'target ' + target if target else ''}")
    if requests:
        print("  requests per read over S3: " + ", ".join(f"{name}: {count}" for name, count in requests.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "rows": [[n, v, t] for n, v, t in rows], "requests": requests}, f, indent=1)


if __name__ == "__main__":
    main()
