#!/usr/bin/env python
"""Benchmark: reading HDF5 files through h5lens against the native readers and peers, locally
and on a simulated S3, side by side in one run.

Rows (files generated here, each by the writer people use for it; sizes for the default,
full run; ``--quick`` shrinks them):

* ``small.nc``     one float32 variable in 50,000 zlib+shuffle chunks of 100 values (netCDF4-python)
* ``big.nc``       the same in 50 chunks of 2 MB
* ``series.nc``    one 1-d float32 variable of 5,000,000 values in 50,000 chunks, netCDF4's
                   default zlib level 4 + shuffle, an unlimited time coordinate (netCDF4-python)
* ``atlas``        a 50,000 x 2,000 CSR AnnData (anndata's ``write_h5ad`` + ``write_elem``, X in
                   800-element gzip chunks, ~100 MB), read whole; ``atlas-default`` the same by one
                   ``write_h5ad(compression="gzip")`` (anndata's own chunks), ``atlas-lzf`` X in
                   4,000-element LZF chunks
* ``nwb``          an NWB ElectricalSeries of 1,000,000 x 32 int16 in 10,000 gzip chunks (pynwb),
                   read and ``data[:]``; ``nwb-1k`` in 1,000 chunks of 1,000 rows
* ``lazy-select``  a 2,000 x 500 h5ad: one cell type selected lazily, ``.to_memory()``
* ``lazy-csc``     a 20,000 x 2,000 h5ad whose X is CSC: ``X[1000:1100]`` computed lazily
* ``sweep-*``      one float32 array of ~40 MB (h5py, gzip+shuffle) in chunks of 400 B, 4 KB,
                   40 KB, 400 KB, 4 MB and 8 MB, read whole: seconds per chunk for each route

Routes are the ``ROUTES`` table below (one line each): the native reader of each row
(h5netcdf, h5py, ``anndata.read_h5ad``, ``NWBHDF5IO``, ``anndata.experimental.read_lazy``),
h5lens's own entry points with nothing switched on (``engine="h5lens"``, ``h5lens.open``,
``h5lens.read_anndata``, eager and lazy: held to targets), readers that use zarr's API over
an h5lens store (zarr and xarray's zarr engine over ``h5lens.open_store``,
``anndata.read_zarr``, ``NWBZarrIO``) under ``h5lens.fast_reads()`` (held to targets) and
without it, under zarr's default and ``FusedCodecPipeline`` (what plain zarr gives, shown
without targets), VirtualiZarr 2.8's
``HDFParser`` → ``ManifestStore`` and kerchunk 0.2.10 references (``SingleHdf5ToZarr``,
``inline_threshold=0``) → fsspec ``ReferenceFileSystem`` → ``zarr.storage.FsspecStore``; and,
locally, hidefix 0.12 (a Rust HDF5 reader: ``hidefix.Index(path).dataset(name)[()]``, its chunk
index built at open and every chunk decoded in parallel straight into the output), the
per-chunk cost h5lens's decode kernel is held to on the netCDF rows (``make bench-read``
installs it; without it its route is skipped).

``--baseline SRC`` runs every h5lens route a second time from another h5lens source tree (a
checkout's ``src/``: the commit before a change), as ``route@base`` beside it, round-robin in
the same run: a change's before and after, measured alike.

Where: ``local`` (the file on disk, page cache warm) and ``s3``: moto on 127.0.0.1 behind
``h5lens.testing.s3.CountingProxy(latency_ms=20, bandwidth=100e6, cache_objects=True)``
(20 ms per request, each response streamed at 100 MB/s as one S3 connection in-region,
objects served from the proxy's cache). Native readers over S3 read an s3fs file object
(``fs.open(path, "rb")``, s3fs's defaults) as people do.

What is timed: from the references in memory (a loaded h5lens manifest, a parsed VirtualiZarr
ManifestStore, kerchunk's reference dict: prepared before the clock, reported as "prep") to
the values in memory; native readers from opening the file. Every timed run happens in a
fresh process (forked from a process that imported everything once), after the same route
ran once, untimed, on a small file of the same kind. Runs are interleaved route by route so
drift in machine load hits all alike; medians of ``--repeat`` runs (``--peer-repeat`` for
VirtualiZarr and kerchunk). Every run's values are checked against the native reader's (a
digest of the values); a mismatch marks the route FAILED, never silently.

``--json OUT`` writes every number (default benchmarks/results/read.json); ``--plot PNG``
draws seconds per chunk against chunk size per route (default docs/read-speed.png; needs
matplotlib, imported only then).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import faulthandler
import fnmatch
import gc
import hashlib
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_JSON = os.path.join(HERE, "results", "read.json")
DEFAULT_PLOT = os.path.join(os.path.dirname(HERE), "docs", "read-speed.png")
ZYGOTE_COMMAND = "_zygote"
BUCKET = "bench"
LATENCY_MS = 20.0
BANDWIDTH = 100e6  # bytes/s per response
FUSED = "zarr.core.codec_pipeline.FusedCodecPipeline"
SWEEP_CHUNKS = (400, 4_000, 40_000, 400_000, 4_000_000, 8_000_000)  # bytes of one chunk (float32)
SMALL_CHUNK = 4_000  # targets: "small chunks" are at most this, "big" at least BIG_CHUNK
BIG_CHUNK = 400_000


# ---------------------------------------------------------------------------
# Sizes and files
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    small_nc_chunks: int  # chunks of 100 float32
    big_nc_chunks: int  # chunks of 2 MB
    atlas_obs: int  # x 2,000 genes, density 0.18
    nwb_rows: int  # x 32 channels, chunks of 100 rows
    csc_obs: int  # x 2,000 genes, density 0.05
    lazy_obs: int  # x 500 genes
    sweep_bytes: int  # float32 bytes of each sweep array


FULL = Sizes(50_000, 50, 50_000, 1_000_000, 20_000, 2_000, 40_000_000)
QUICK = Sizes(5_000, 10, 5_000, 100_000, 5_000, 2_000, 8_000_000)
WARMUP = Sizes(200, 2, 300, 2_000, 300, 300, 200_000)


def _quiet_netcdf4() -> Any:
    before = os.environ.get("HDF5_PLUGIN_PATH")
    import netCDF4  # points HDF5_PLUGIN_PATH at its own plugins: put back

    if before is None:
        os.environ.pop("HDF5_PLUGIN_PATH", None)
    return netCDF4


def gen_nc(path: str, n_chunks: int, chunk_values: int) -> dict[str, Any]:
    """netCDF-C through netCDF4-python: v(time, x) float32, zlib (level 1) + shuffle, chunks
    of (1, chunk_values), 100 chunks per time step for small chunks, one for big ones."""
    netCDF4 = _quiet_netcdf4()
    width = chunk_values * (100 if chunk_values <= 1000 else 1)
    rows = max(1, n_chunks * chunk_values // width)
    rng = np.random.default_rng(0)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as f:
        f.title = "h5lens read benchmark"
        f.createDimension("time", rows)
        f.createDimension("x", width)
        v = f.createVariable("v", "f4", ("time", "x"), zlib=True, complevel=1, shuffle=True, chunksizes=(1, chunk_values))
        v.units = "K"
        for i in range(rows):
            v[i] = (280 + rng.normal(0, 5, width)).round(2).astype("f4")
    return {"chunks": rows * (width // chunk_values), "chunk_bytes": chunk_values * 4, "shape": [rows, width]}


def gen_h5ad(path: str, n_obs: int, n_vars: int, density: float, chunk: int | None = 800, fmt: str = "csr",
             compression: str = "gzip") -> dict[str, Any]:
    """An AnnData written by anndata (:func:`atlas_files.write_atlas`, as
    benchmarks/remote_scan.py writes its 100 MB atlas), X CSR or CSC in ``compression``
    chunks of ``chunk`` elements (None: one ``write_h5ad(compression=...)``, anndata's
    chunks)."""
    import h5py
    from atlas_files import write_atlas

    nnz = write_atlas(path, n_obs, n_vars, density, chunk=chunk, fmt=fmt, compression=compression)
    with h5py.File(path, "r") as f:
        chunks = sum(f[f"X/{n}"].id.get_num_chunks() for n in ("data", "indices", "indptr"))
        stored = f["X/data"].chunks[0] if f["X/data"].chunks else f["X/data"].shape[0]
    return {"chunks": chunks, "chunk_bytes": stored * 4, "shape": [n_obs, n_vars], "nnz": nnz}


def gen_nc_1d(path: str, n_chunks: int, chunk_values: int = 100) -> dict[str, Any]:
    """netCDF4-python as climate archives write a series: v(time) float32 with netCDF4's
    default zlib level (4) + shuffle in chunks of ``chunk_values``, ``time`` unlimited with its
    coordinate variable in netCDF-C's default chunks (a plain axis, no CF time units: decoding
    5,000,000 times would be most of every route's time, and xarray's the same in each)."""
    netCDF4 = _quiet_netcdf4()
    n = n_chunks * chunk_values
    rng = np.random.default_rng(1)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as f:
        f.createDimension("time", None)
        t = f.createVariable("time", "f8", ("time",))
        t.long_name = "hours since the start"
        v = f.createVariable("v", "f4", ("time",), zlib=True, shuffle=True, chunksizes=(chunk_values,))
        v.units = "K"
        t[:] = np.arange(n, dtype="f8")
        v[:] = (280 + rng.normal(0, 5, n)).round(2).astype("f4")
    return {"chunks": n_chunks, "chunk_bytes": chunk_values * 4, "shape": [n]}


def gen_nwb(path: str, rows: int, channels: int = 32, chunk_rows: int = 100) -> dict[str, Any]:
    """pynwb: an NWBFile with 32 electrodes and an ElectricalSeries of int16 in gzip chunks of
    ``chunk_rows`` x ``channels`` (``H5DataIO``)."""
    from hdmf.backends.hdf5.h5_utils import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile
    from pynwb.ecephys import ElectricalSeries

    rng = np.random.default_rng(0)
    nwb = NWBFile(
        session_description="h5lens read benchmark",
        identifier="h5lens-read-bench",
        session_start_time=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    )
    device = nwb.create_device(name="probe")
    group = nwb.create_electrode_group(name="shank0", description="shank", location="CA1", device=device)
    for _ in range(channels):
        nwb.add_electrode(group=group, location="CA1")
    region = nwb.create_electrode_table_region(list(range(channels)), "all electrodes")
    data = rng.normal(0, 60, (rows, channels)).astype(np.int16)
    series = ElectricalSeries(
        name="ElectricalSeries",
        data=H5DataIO(data, chunks=(chunk_rows, channels), compression="gzip"),
        electrodes=region,
        rate=30_000.0,
        starting_time=0.0,
    )
    nwb.add_acquisition(series)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(path, "w") as io:
            io.write(nwb)
    return {"chunks": -(-rows // chunk_rows), "chunk_bytes": chunk_rows * channels * 2, "shape": [rows, channels]}


def sweep_name(chunk_bytes: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("KB", 1_000)):
        if chunk_bytes >= scale:
            return f"c{chunk_bytes // scale}{unit}"
    return f"c{chunk_bytes}B"


def gen_sweep(path: str, total_bytes: int) -> dict[str, Any]:
    """h5py: one dataset per chunk size of SWEEP_CHUNKS, the same float32 values (a smooth
    signal plus noise, two decimals), gzip (level 4, h5py's default) + shuffle."""
    import h5py

    n = total_bytes // 4
    rng = np.random.default_rng(0)
    values = (np.sin(np.linspace(0, 200, n)) * 10 + 280 + rng.normal(0, 1, n)).round(2).astype("f4")
    chunks: dict[str, int] = {}
    with h5py.File(path, "w") as f:
        for size in SWEEP_CHUNKS:
            name = sweep_name(size)
            f.create_dataset(name, data=values, chunks=(min(n, size // 4),), compression="gzip", shuffle=True)
            chunks[name] = f[name].id.get_num_chunks()
    return {"chunks": chunks, "shape": [n]}


@dataclass(frozen=True)
class FileSpec:
    name: str  # the file's name (and S3 key)
    make: Callable[[str, Sizes], dict[str, Any]]


FILES = [
    FileSpec("small.nc", lambda p, s: gen_nc(p, s.small_nc_chunks, 100)),
    FileSpec("big.nc", lambda p, s: gen_nc(p, s.big_nc_chunks, 500_000)),
    FileSpec("atlas.h5ad", lambda p, s: gen_h5ad(p, s.atlas_obs, 2_000, 0.18)),
    FileSpec("atlas-default.h5ad", lambda p, s: gen_h5ad(p, s.atlas_obs, 2_000, 0.18, chunk=None)),
    FileSpec("atlas-lzf.h5ad", lambda p, s: gen_h5ad(p, s.atlas_obs, 2_000, 0.18, chunk=4_000, compression="lzf")),
    FileSpec("series.nc", lambda p, s: gen_nc_1d(p, s.small_nc_chunks)),
    FileSpec("ecephys-1k.nwb", lambda p, s: gen_nwb(p, s.nwb_rows, chunk_rows=1_000)),
    FileSpec("ecephys.nwb", lambda p, s: gen_nwb(p, s.nwb_rows)),
    FileSpec("lazy.h5ad", lambda p, s: gen_h5ad(p, s.lazy_obs, 500, 0.1)),
    FileSpec("csc.h5ad", lambda p, s: gen_h5ad(p, s.csc_obs, 2_000, 0.05, fmt="csc")),
    FileSpec("sweep.h5", lambda p, s: gen_sweep(p, s.sweep_bytes)),
]


# ---------------------------------------------------------------------------
# Rows and routes (the tables: adding a route is one line)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    key: str
    file: str
    kind: str  # nc, sweep, anndata, nwb, select, rows: what is read and how it is checked
    label: str
    param: str = ""  # nc: variable; sweep: dataset; select: cell type
    chunk_bytes: int = 0  # raw bytes of one chunk (targets: small / big chunks)
    peers: bool = True  # VirtualiZarr and kerchunk run on it (not on the other layouts of a row)


ROWS = [
    Row("small.nc", "small.nc", "nc", "small.nc: 100-value chunks (netCDF4)", "v", 400),
    Row("big.nc", "big.nc", "nc", "big.nc: 2 MB chunks (netCDF4)", "v", 2_000_000),
    Row("series.nc", "series.nc", "nc", "series.nc: 1-d, 100-value chunks, unlimited time (netCDF4)", "v", 400, peers=False),
    Row("atlas", "atlas.h5ad", "anndata", "AnnData atlas, CSR, whole file"),
    Row("atlas-default", "atlas-default.h5ad", "anndata", "AnnData atlas, write_h5ad(compression='gzip') chunks"),
    Row("atlas-lzf", "atlas-lzf.h5ad", "anndata", "AnnData atlas, X in 4,000-value LZF chunks"),
    Row("nwb", "ecephys.nwb", "nwb", "NWB ElectricalSeries, data[:]"),
    Row("nwb-1k", "ecephys-1k.nwb", "nwb", "NWB ElectricalSeries in 1,000-row chunks, data[:]"),
    Row("lazy-select", "lazy.h5ad", "select", "lazy AnnData: one cell type, to_memory()", "type_3"),
    Row("lazy-csc", "csc.h5ad", "rows", "lazy CSC X: 100 rows computed"),
    *(Row(f"sweep-{sweep_name(c)[1:]}", "sweep.h5", "sweep", f"sweep: {sweep_name(c)[1:]} chunks", sweep_name(c), c)
      for c in SWEEP_CHUNKS),
]
ROW_BY_KEY = {r.key: r for r in ROWS}


@dataclass(frozen=True)
class Route:
    key: str
    kinds: tuple[str, ...]
    label: str
    run: str  # name of the route function below: fn(ctx) -> timed closure
    native: bool = False  # the row's reference: every other route's values are checked against it
    pipeline: str = "default"  # zarr codec pipeline: "default" or "fused"
    fast: bool = False  # h5lens.fast_reads() on for the run (off otherwise: nothing of zarr's changed)
    own: bool = False  # one of h5lens's own entry points (judged with fast_reads off)
    peer: bool = False  # VirtualiZarr / kerchunk: slow over S3, --peer-repeat runs
    group: str = ""  # the name targets refer to (default: key)
    not_on_s3: str = ""  # why the route cannot run on S3 (it is skipped there, with this reason)
    module: str = ""  # a module the route needs (skipped where it is not installed)
    baseline: bool = False  # run from --baseline's h5lens, beside the same route from this one

    @property
    def target_group(self) -> str:
        return self.group or self.key

    @property
    def judged(self) -> bool:
        """Held to a target: h5lens's own routes with nothing switched on, and routes
        through zarr's API (third-party readers) with ``fast_reads()``; the others are
        shown for comparison."""
        return not self.native and not self.peer and not self.baseline and (self.own != self.fast)


ARRAYS = ("nc", "sweep")
ROUTES = [
    Route("native", ("nc",), "xr.open_dataset(path, engine='h5netcdf').load()", "nc_native", native=True),
    Route("native", ("sweep",), "h5py.File(path)[name][()]", "sweep_native", native=True),
    Route("h5lens-zarr", ARRAYS, "h5lens.open_store, zarr's default pipeline (nothing switched on)", "arrays_h5lens"),
    Route("h5lens-fused", ARRAYS, "h5lens.open_store, zarr FusedCodecPipeline (nothing of h5lens's)", "arrays_h5lens", pipeline="fused"),
    Route("h5lens-fast", ARRAYS, "h5lens.open_store under h5lens.fast_reads()", "arrays_h5lens", fast=True),
    Route("h5lens-engine", ("nc",), "xr.open_dataset(manifest, engine='h5lens')", "arrays_h5lens_engine", own=True),
    Route("h5lens-open", ARRAYS, "h5lens.open(manifest)[name][()]", "arrays_h5lens_open", own=True),
    Route("virtualizarr", ARRAYS, "VirtualiZarr HDFParser -> ManifestStore", "arrays_virtualizarr", peer=True),
    Route("kerchunk", ARRAYS, "kerchunk refs -> ReferenceFileSystem -> FsspecStore (v2)", "arrays_kerchunk", peer=True),
    Route("hidefix", ARRAYS, "hidefix.Index(path).dataset(name)[()] (Rust; index built at open)", "arrays_hidefix",
          module="hidefix", not_on_s3="hidefix reads local files only"),
    Route("native", ("anndata",), "anndata.read_h5ad", "anndata_native", native=True),
    Route("read_anndata", ("anndata",), "h5lens.read_anndata(m)", "anndata_h5lens", own=True),
    Route("read_zarr", ("anndata",), "anndata.read_zarr(open_store(m)) (nothing switched on)", "anndata_read_zarr"),
    Route("read_zarr+fast", ("anndata",), "anndata.read_zarr(open_store(m)) under h5lens.fast_reads()", "anndata_read_zarr", fast=True, group="read_zarr"),
    Route("native", ("nwb",), "NWBHDF5IO(path).read() + data[:]", "nwb_native", native=True),
    Route("nwbzarr", ("nwb",), "NWBZarrIO(open_store(m)) (nothing switched on)", "nwb_h5lens"),
    Route("nwbzarr+fast", ("nwb",), "NWBZarrIO(open_store(m)).read() + data[:] under h5lens.fast_reads()", "nwb_h5lens", fast=True, group="nwbzarr"),
    Route("native", ("select", "rows"), "anndata.experimental.read_lazy(h5ad)", "lazy_native", native=True,
          not_on_s3="anndata's read_lazy reopens the h5ad by name in every dask task (lazy_methods.maybe_open_h5): "
                    "an s3fs file object fails with FileNotFoundError"),
    Route("read_h5ad", ("select", "rows"), "anndata.read_h5ad (eager), then select", "lazy_read_h5ad"),
    Route("read_anndata", ("select", "rows"), "h5lens.read_anndata(m) (eager), then select", "lazy_h5lens_eager", own=True, group="h5lens-eager"),
    Route("h5lens-lazy", ("select", "rows"), "h5lens.read_anndata(m, lazy=True)", "lazy_h5lens", own=True),
    Route("h5lens-lazy+fast", ("select", "rows"), "h5lens.read_anndata(m, lazy=True) under h5lens.fast_reads()", "lazy_h5lens", own=True, fast=True, group="h5lens-lazy"),
]

# A row's reference where its native reader cannot run (ratios and checks use this route instead).
FALLBACK_REFERENCE = {"select": "read_h5ad", "rows": "read_h5ad"}

# Targets: (route group pattern, row kinds, chunks "small"/"big"/"any", where "local"/"s3"/"*", at most, against, aim)
TARGETS: list[tuple[str, tuple[str, ...], str, str, float, str, float | None]] = [
    # h5lens's own routes (h5lens-engine, h5lens-open, read_anndata, h5lens-lazy) with nothing
    # switched on; routes through zarr's API (h5lens-fast, read_zarr+fast, nwbzarr+fast) with
    # h5lens.fast_reads(); Route.judged says which.
    ("h5lens-[feo]*", ARRAYS, "small", "local", 1.5, "native", None),
    ("h5lens-[feo]*", ARRAYS, "big", "local", 1.2, "native", None),
    ("h5lens-[feo]*", ARRAYS, "any", "s3", 0.5, "native", None),
    ("h5lens-[feo]*", ARRAYS, "any", "s3", 1.0, "virtualizarr", None),
    # the decode kernel's per-chunk cost against a native parallel reader (issue 44)
    ("h5lens-[eo]*", ("nc",), "small", "local", 1.5, "hidefix", None),
    ("h5lens-[eo]*", ("nc",), "big", "local", 1.0, "hidefix", None),
    ("read_anndata", ("anndata",), "any", "local", 1.0, "native", 0.7),
    ("read_anndata", ("anndata",), "any", "s3", 0.5, "native", None),
    ("read_zarr", ("anndata",), "any", "local", 1.5, "native", None),
    ("read_zarr", ("anndata",), "any", "s3", 1.0, "native", None),
    ("h5lens-lazy", ("select", "rows"), "any", "*", 1.0, "native", None),
    ("nwbzarr", ("nwb",), "any", "*", 1.0, "native", None),
]


def targets_for(route: Route, row: Row, where: str) -> list[dict[str, Any]]:
    if not route.judged:  # shown for comparison: plain zarr's routes, +fast variants of h5lens's own
        return []
    size = "small" if 0 < row.chunk_bytes <= SMALL_CHUNK else "big" if row.chunk_bytes >= BIG_CHUNK else "mid"
    out = []
    for pattern, kinds, chunks, at, limit, against, aim in TARGETS:
        if (fnmatch.fnmatch(route.target_group, pattern) and row.kind in kinds and chunks in ("any", size)
                and at in ("*", where)):
            out.append({"limit": limit, "against": against, "aim": aim})
    return out


# ---------------------------------------------------------------------------
# Worker side: one route on one file (in a forked child)
# ---------------------------------------------------------------------------


@dataclass
class Ctx:
    where: str  # "local" or "s3"
    row: dict[str, Any]
    path: str  # the local file
    url: str  # what the readers open: the local path, or s3://bucket/key
    manifest: str  # h5lens manifest (JSON) whose source is ``url``
    refs: str  # kerchunk references (JSON) whose chunks point at ``url``
    options: dict[str, Any] | None  # s3fs-style options of the S3 endpoint (None: local)
    n_obs: int = 0

    @property
    def param(self) -> str:
        return str(self.row["param"])

    def open_native(self) -> Any:
        """What a native reader opens: the path, or an s3fs file object (s3fs's defaults)."""
        if self.options is None:
            return self.path
        import s3fs

        return s3fs.S3FileSystem(**self.options).open(self.url, "rb")

    def manifest_obj(self) -> Any:
        import h5lens

        return h5lens.Manifest.load(self.manifest)

    def store(self, manifest: Any) -> Any:
        import h5lens

        return h5lens.open_store(manifest, storage_options=self.options)

    def rows(self) -> slice:
        start = self.n_obs // 20
        return slice(start, start + max(1, self.n_obs // 200))


def _close_after(opened: Any, read: Callable[[Any], Any]) -> Any:
    try:
        return read(opened)
    finally:
        if not isinstance(opened, str):
            opened.close()


# -- arrays: netCDF variables and sweep datasets ----------------------------------------------


def nc_native(ctx: Ctx) -> Callable[[], Any]:
    import xarray as xr

    return lambda: _close_after(ctx.open_native(), lambda f: xr.open_dataset(f, engine="h5netcdf").load()[ctx.param])


def sweep_native(ctx: Ctx) -> Callable[[], Any]:
    import h5py

    def read(f: Any) -> Any:
        with h5py.File(f, "r") as h5:
            return h5[ctx.param][()]

    return lambda: _close_after(ctx.open_native(), read)


def _read_array(ctx: Ctx, store: Any, zarr_format: int | None) -> Any:
    """The row's values through a zarr store: xarray (engine="zarr") for netCDF, zarr.open_array for the sweep."""
    if ctx.row["kind"] == "nc":
        import xarray as xr

        kwargs = {} if zarr_format is None else {"zarr_format": zarr_format}
        return xr.open_dataset(store, engine="zarr", consolidated=False, **kwargs).load()[ctx.param]
    import zarr

    return zarr.open_array(store, path=ctx.param, mode="r", zarr_format=zarr_format)[:]


def arrays_h5lens(ctx: Ctx) -> Callable[[], Any]:
    manifest = ctx.manifest_obj()
    return lambda: _read_array(ctx, ctx.store(manifest), None)  # as documented: zarr finds v3


def arrays_h5lens_engine(ctx: Ctx) -> Callable[[], Any]:
    """xarray's engine="h5lens" on the manifest object (netCDF rows): variables read in regions."""
    import xarray as xr

    manifest = ctx.manifest_obj()
    options = ctx.options

    def read() -> Any:
        return xr.open_dataset(manifest, engine="h5lens", storage_options=options).load()[ctx.param]

    return read


def arrays_h5lens_open(ctx: Ctx) -> Callable[[], Any]:
    """h5lens's navigation (h5py-like) on the manifest object: the array read as one region."""
    import h5lens

    manifest = ctx.manifest_obj()
    return lambda: h5lens.open(manifest, storage_options=ctx.options)[ctx.param][()]


def arrays_hidefix(ctx: Ctx) -> Callable[[], Any]:
    """hidefix (Rust) on the local file: its chunk index is built when the file is opened."""
    import hidefix

    return lambda: hidefix.Index(ctx.path).dataset(ctx.param)[()]


def obstore_s3(options: dict[str, Any], prefix: str | None = None) -> Any:
    """An obstore S3Store of the bench bucket at the simulated endpoint (s3fs-style ``options``)."""
    from obstore.store import S3Store

    return S3Store(
        BUCKET,
        prefix=prefix,
        endpoint=options["endpoint_url"],
        access_key_id=options["key"],
        secret_access_key=options["secret"],
        region="us-east-1",
        client_options={"allow_http": True},
    )


def virtualizarr_store(path: str, url: str, options: dict[str, Any] | None) -> Any:
    """VirtualiZarr 2.8's ManifestStore of the HDF5 file ``path``, parsed from the local copy
    (the same bytes; no S3 requests before the clock), reading from ``url`` (the path, or
    s3://BUCKET/... with ``options``) through an obstore registry."""
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr.manifests import ManifestStore
    from virtualizarr.parsers import HDFParser

    if options is None:
        return HDFParser()("file://" + os.path.abspath(path), ObjectStoreRegistry({"file://": LocalStore()}))
    bucket = f"s3://{BUCKET}"
    parsed = HDFParser()(url, ObjectStoreRegistry({bucket: LocalStore(prefix=os.path.dirname(path))}))
    return ManifestStore(parsed._group, registry=ObjectStoreRegistry({bucket: obstore_s3(options)}))


def arrays_virtualizarr(ctx: Ctx) -> Callable[[], Any]:
    store = virtualizarr_store(ctx.path, ctx.url, ctx.options)
    return lambda: _read_array(ctx, store, 3)


def arrays_kerchunk(ctx: Ctx) -> Callable[[], Any]:
    import fsspec
    import zarr.storage

    with open(ctx.refs) as f:
        refs = json.load(f)

    def read() -> Any:
        if ctx.options is None:
            fs = fsspec.filesystem("reference", fo=refs, remote_protocol="file", asynchronous=True)
        else:
            fs = fsspec.filesystem(
                "reference", fo=refs, remote_protocol="s3", remote_options={**ctx.options, "asynchronous": True},
                asynchronous=True,
            )
        return _read_array(ctx, zarr.storage.FsspecStore(fs, read_only=True, path=""), 2)

    return read


# -- AnnData ---------------------------------------------------------------------------------


def anndata_native(ctx: Ctx) -> Callable[[], Any]:
    import anndata as ad

    return lambda: _close_after(ctx.open_native(), ad.read_h5ad)


def anndata_h5lens(ctx: Ctx) -> Callable[[], Any]:
    import h5lens

    manifest = ctx.manifest_obj()
    return lambda: h5lens.read_anndata(manifest, storage_options=ctx.options)


def anndata_read_zarr(ctx: Ctx) -> Callable[[], Any]:
    import anndata as ad

    manifest = ctx.manifest_obj()
    return lambda: ad.read_zarr(ctx.store(manifest))


# -- NWB -------------------------------------------------------------------------------------


def _series(nwbfile: Any) -> Any:
    return nwbfile.acquisition["ElectricalSeries"].data[:]


def nwb_native(ctx: Ctx) -> Callable[[], Any]:
    import h5py
    from pynwb import NWBHDF5IO

    def read() -> Any:
        if ctx.options is None:
            with NWBHDF5IO(ctx.path, "r") as io:
                return _series(io.read())
        with ctx.open_native() as f, h5py.File(f, "r") as h5, NWBHDF5IO(file=h5, mode="r", load_namespaces=True) as io:
            return _series(io.read())

    return read


def nwb_h5lens(ctx: Ctx) -> Callable[[], Any]:
    from hdmf_zarr import NWBZarrIO

    manifest = ctx.manifest_obj()

    def read() -> Any:
        with NWBZarrIO(ctx.store(manifest), mode="r") as io:
            return _series(io.read())

    return read


# -- lazy AnnData: one cell type (select), 100 rows of a CSC X (rows) --------------------------


def _select(ctx: Ctx, adata: Any, lazy: bool) -> Any:
    if ctx.row["kind"] == "rows":
        x = adata.X[ctx.rows()]
        return x.compute() if lazy else x
    mask = adata.obs["cell_type"] == ctx.param
    if lazy:
        return adata[np.asarray(mask.values)].to_memory()
    return adata[np.asarray(mask)].copy()


def lazy_native(ctx: Ctx) -> Callable[[], Any]:
    import anndata as ad
    import h5py

    def read(f: Any) -> Any:
        with h5py.File(f, "r") as h5:
            return _select(ctx, ad.experimental.read_lazy(h5), lazy=True)

    return lambda: _close_after(ctx.open_native(), read)


def lazy_read_h5ad(ctx: Ctx) -> Callable[[], Any]:
    import anndata as ad

    return lambda: _close_after(ctx.open_native(), lambda f: _select(ctx, ad.read_h5ad(f), lazy=False))


def lazy_h5lens_eager(ctx: Ctx) -> Callable[[], Any]:
    import h5lens

    manifest = ctx.manifest_obj()
    return lambda: _select(ctx, h5lens.read_anndata(manifest, storage_options=ctx.options), lazy=False)


def lazy_h5lens(ctx: Ctx) -> Callable[[], Any]:
    import h5lens

    manifest = ctx.manifest_obj()
    return lambda: _select(ctx, h5lens.read_anndata(manifest, storage_options=ctx.options, lazy=True), lazy=True)


# -- checks: a digest of the values ----------------------------------------------------------


def _hash_array(h: Any, values: Any) -> None:
    values = np.ascontiguousarray(np.asarray(values))
    h.update(f"{values.dtype.str}{values.shape}".encode())
    h.update(values.tobytes() if values.dtype.kind != "O" else repr(values.tolist()).encode())


def _hash_sparse(h: Any, x: Any) -> None:
    import scipy.sparse as sp

    m = sp.csr_matrix(x)
    m.eliminate_zeros()
    m.sort_indices()
    h.update(f"{m.shape}".encode())
    _hash_array(h, m.data.astype(np.float64))
    _hash_array(h, m.indices.astype(np.int64))
    _hash_array(h, m.indptr.astype(np.int64))


def digest(kind: str, value: Any) -> tuple[str, dict[str, Any]]:
    """A digest of what a read returned (and a short description), the same for every
    route that read the same values."""
    h = hashlib.sha256()
    if kind in ("nc", "sweep", "nwb"):
        values = np.asarray(value.values if hasattr(value, "values") and not isinstance(value, np.ndarray) else value)
        _hash_array(h, values)
        info = {"shape": list(values.shape), "dtype": str(values.dtype)}
    elif kind == "rows":
        import scipy.sparse as sp

        _hash_sparse(h, value if sp.issparse(value) else np.asarray(value))
        info = {"shape": list(value.shape)}
    else:  # anndata, select: X, names, cell types
        _hash_sparse(h, value.X)
        _hash_array(h, np.asarray(value.obs_names, dtype=object))
        _hash_array(h, np.asarray(value.var_names, dtype=object))
        _hash_array(h, np.asarray(value.obs["cell_type"].astype(str), dtype=object))
        info = {"shape": list(value.shape), "nnz": int(value.X.nnz)}
    return h.hexdigest()[:16], info


# -- one run ---------------------------------------------------------------------------------


@contextlib.contextmanager
def route_settings(route: Route) -> Iterator[None]:
    """zarr's pipeline and h5lens.fast_reads as the route says, for the whole child."""
    import zarr

    import h5lens

    with contextlib.ExitStack() as stack:
        if route.pipeline == "fused":
            stack.enter_context(zarr.config.set({"codec_pipeline.path": FUSED}))
        if route.fast:
            stack.enter_context(h5lens.fast_reads())
        yield


def _control(url: str | None, what: str) -> dict[str, Any]:
    if url is None:
        return {}
    with urllib.request.urlopen(f"{url}/{what}", timeout=60) as r:
        return dict(json.loads(r.read()))


def run_route(route: Route, ctx: Ctx, warm: Ctx, control: str | None) -> dict[str, Any]:
    import zarr

    fn = globals()[route.run]
    kind = ctx.row["kind"]
    with route_settings(route):
        fn(warm)()  # untimed, on a small file of the same kind: first-call costs are not read time
        gc.collect()
        _control(control, "reset")
        start = time.perf_counter()
        read = fn(ctx)
        prep = time.perf_counter() - start
        start = time.perf_counter()
        value = read()
        seconds = time.perf_counter() - start
        pipeline = str(zarr.config.get("codec_pipeline.path"))
    net = _control(control, "stats")
    found, info = digest(kind, value)
    return {"seconds": seconds, "prep_s": prep, "digest": found, "info": info, "pipeline": pipeline, "net": net}


def preload() -> None:
    """Imports a run needs, done once in the zygote before it forks runs."""
    import anndata
    import anndata.experimental  # noqa: F401
    import dask.array  # noqa: F401
    import fsspec.implementations.reference  # noqa: F401
    import h5netcdf  # noqa: F401
    import h5py  # noqa: F401
    import hdmf_zarr  # noqa: F401
    import obspec_utils.registry  # noqa: F401
    import obstore.store  # noqa: F401
    import pynwb  # noqa: F401
    import s3fs  # noqa: F401
    import scipy.sparse  # noqa: F401
    import virtualizarr.manifests
    import virtualizarr.parsers  # noqa: F401
    import xarray  # noqa: F401
    import zarr.core.codec_pipeline
    import zarr.storage  # noqa: F401

    import h5lens
    import h5lens.adata.readers
    import h5lens.store

    h5lens._register_codecs()


def zygote_main() -> None:
    """Import everything once, then fork one child per run (fresh state, imports done).
    One JSON command per stdin line, one JSON answer per stdout line. Nothing has opened a
    file, socket, event loop or thread pool before a fork."""
    warnings.simplefilter("ignore")
    preload()
    gc.collect()
    for line in sys.stdin:
        sys.stdout.write(json.dumps(fork_run(json.loads(line))) + "\n")
        sys.stdout.flush()


def fork_run(cmd: dict[str, Any]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(prefix="readbench-", suffix=".json", delete=False) as f:
        out = f.name
    err = out[:-5] + ".err"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)  # the zygote's stdout is the parent's pipe: keep it clean
            os.dup2(fd, 2)
            faulthandler.dump_traceback_later(cmd["timeout"], exit=True)  # a hang says where it hung
            try:
                route = Route(**{**cmd["route"], "kinds": tuple(cmd["route"]["kinds"])})
                result = run_route(route, Ctx(**cmd["ctx"]), Ctx(**cmd["warm"]), cmd.get("control"))
            except Exception as e:  # noqa: BLE001 - reported as this run's result
                import traceback

                where = traceback.extract_tb(e.__traceback__)[-1]
                result = {"error": f"{type(e).__name__}: {str(e)[:400]} (at {os.path.basename(where.filename)}:{where.lineno})"}
            with open(out, "w") as f:
                json.dump(result, f, default=str)
        except BaseException:  # noqa: BLE001 - the child must reach os._exit
            code = 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + cmd["timeout"] + 30  # faulthandler fires first; this is the backstop
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    try:
        with open(out) as f:
            text = f.read()
        if text:
            return dict(json.loads(text))
        with open(err, errors="replace") as f:
            lines = f.read().strip().splitlines()
        if any("Timeout (" in x for x in lines):
            return {"error": f"TIMEOUT after {cmd['timeout']:g} s", "timeout": True}
        return {"error": f"run failed (status {status}): {' | '.join(lines[-3:])[:600]}"}
    finally:
        for path in (out, err):
            if os.path.exists(path):
                os.unlink(path)


class Zygote:
    def __init__(self, source: str | None = None) -> None:
        """``source``: the h5lens source tree its runs import (the baseline's), else this one's."""
        env = None if source is None else {**os.environ, "PYTHONPATH": os.path.abspath(source)}
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), ZYGOTE_COMMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )

    def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the run process died")
        return dict(json.loads(line))

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
            self.proc.wait(30)


# ---------------------------------------------------------------------------
# Parent side: files, manifests, references, the simulated S3
# ---------------------------------------------------------------------------


def prepare_files(workdir: str, sizes: Sizes, prefix: str, regenerate: bool) -> dict[str, dict[str, Any]]:
    """Generate each file once into ``workdir`` (kept between runs; a stamp holds its info)."""
    infos: dict[str, dict[str, Any]] = {}
    for spec in FILES:
        path = os.path.join(workdir, prefix + spec.name)
        stamp = path + ".info.json"
        wanted = asdict(sizes)
        if not regenerate and os.path.exists(path) and os.path.exists(stamp):
            with open(stamp) as f:
                saved = json.load(f)
            if saved.get("sizes") == wanted:
                infos[spec.name] = saved
                continue
        start = time.perf_counter()
        info = spec.make(path, sizes)
        info.update(sizes=wanted, bytes=os.path.getsize(path), seconds=time.perf_counter() - start, path=path)
        with open(stamp, "w") as f:
            json.dump(info, f)
        infos[spec.name] = info
        if not prefix:
            print(f"  generated {spec.name}: {info['bytes'] / 1e6:.1f} MB in {info['seconds']:.1f} s", flush=True)
    return infos


def index_files(infos: dict[str, dict[str, Any]], etags: dict[str, str] | None) -> None:
    """Per file and place: an h5lens manifest and kerchunk references (inline_threshold=0)
    whose source is the local path or the S3 URL. S3 manifests record the object's size
    and ETag (as a remote scan records them) so opening checks the source with one HEAD."""
    import h5lens

    for name, info in infos.items():
        path = info["path"]
        manifest = path + ".local.json"
        refs = path + ".refs.local.json"
        if not os.path.exists(manifest) or os.path.getmtime(manifest) < os.path.getmtime(path):
            h5lens.index(path).to_json(manifest, force=True)
        if not os.path.exists(refs) or os.path.getmtime(refs) < os.path.getmtime(path):
            with open(refs, "w") as f:
                json.dump(kerchunk_refs(path), f)
        if etags is None:
            continue
        url = f"s3://{BUCKET}/{os.path.basename(path)}"
        s3_manifest(path, url, etags[name]).to_json(path + ".s3.json", force=True)
        with open(refs) as f:
            text = f.read()
        with open(path + ".refs.s3.json", "w") as f:
            f.write(text.replace(json.dumps(os.path.abspath(path)), json.dumps(url)))


def s3_manifest(path: str, url: str, etag: str) -> Any:
    """The manifest of the local file ``path`` read from its copy at ``url``, recording the
    object's size and ETag (as a remote scan records them): opening checks it with one HEAD."""
    import h5lens

    refs_dict = h5lens.index(path, url=url).to_dict()
    refs_dict["h5lens"]["sources"][0] = {"url": url, "size": os.path.getsize(path), "etag": etag}
    return h5lens.Manifest.from_dict(refs_dict)


def kerchunk_refs(path: str) -> dict[str, Any]:
    """kerchunk 0.2.10, chunks never inlined (the reads come from the file, as h5lens's and
    VirtualiZarr's do); the cyclic GC off (kerchunk calls zarr inside h5py's visititems, and
    a collection there can deadlock on h5py's lock under zarr 3)."""
    import kerchunk.hdf

    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converter = kerchunk.hdf.SingleHdf5ToZarr(os.path.abspath(path), inline_threshold=0)
            refs = converter.translate()
            converter.close()
    finally:
        gc.enable()
    return dict(refs)


class SimulatedS3:
    """moto behind CountingProxy(latency, bandwidth, cache_objects), in this process; a
    small control endpoint lets a run reset and read the proxy's counts outside its clock."""

    def __init__(self, latency_ms: float, bandwidth: float) -> None:
        from h5lens.testing.s3 import LocalS3

        self.s3 = LocalS3().__enter__()
        self.s3.make_bucket(BUCKET)
        from h5lens.testing.s3 import CountingProxy

        self.proxy = CountingProxy(self.s3.endpoint_url, latency_ms=latency_ms, bandwidth=bandwidth, cache_objects=True)
        self.proxy.__enter__()
        self.options = self.s3.storage_options(self.proxy.endpoint_url)
        self.control = self._start_control()

    def _start_control(self) -> str:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self.proxy

        class Control(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/reset":
                    proxy.stats.reset()
                    body: dict[str, Any] = {}
                else:
                    s = proxy.stats
                    body = {"requests": s.requests, "gets": s.gets, "heads": s.heads, "bytes": s.bytes,
                            "other": s.requests - s.gets - s.heads}
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._control = ThreadingHTTPServer(("127.0.0.1", 0), Control)
        threading.Thread(target=self._control.serve_forever, name="read-bench-control", daemon=True).start()
        return f"http://127.0.0.1:{self._control.server_address[1]}"

    def publish(self, paths: list[str]) -> dict[str, str]:
        """Upload straight to moto, then read a byte of each through the proxy (its cache
        fills there, not in a timed run). Returns each object's ETag."""
        direct = self.s3.filesystem()
        through = self.s3.filesystem(self.proxy.endpoint_url)
        etags = {}
        for path in paths:
            key = f"{BUCKET}/{os.path.basename(path)}"
            direct.put(path, key)
            through.cat_file(key, start=0, end=1)
            etags[os.path.basename(path)] = str(direct.info(key)["ETag"]).strip('"')
        self.proxy.stats.reset()
        return etags

    def publish_tree(self, directory: str) -> str:
        """Upload a directory (a zarr store) under its name, then read a byte of each object
        through the proxy (to fill its cache outside any timed run). Returns its s3:// URL."""
        direct = self.s3.filesystem()
        through = self.s3.filesystem(self.proxy.endpoint_url)
        key = f"{BUCKET}/{os.path.basename(directory.rstrip(os.sep))}"
        direct.put(directory.rstrip(os.sep) + os.sep, key, recursive=True)
        for name in direct.find(key):
            if direct.info(name)["size"]:
                through.cat_file(name, start=0, end=1)
        self.proxy.stats.reset()
        return f"s3://{key}"

    def stop(self) -> None:
        self._control.shutdown()
        self.proxy.__exit__(None, None, None)
        self.s3.__exit__(None, None, None)


# ---------------------------------------------------------------------------
# Parent side: the runs
# ---------------------------------------------------------------------------


@dataclass
class Result:
    row: str
    where: str
    route: str
    label: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    def seconds(self) -> list[float]:
        return [r["seconds"] for r in self.runs]

    def median(self) -> float | None:
        return statistics.median(self.seconds()) if self.runs else None


def contexts(row: Row, where: str, infos: dict[str, Any], warm_infos: dict[str, Any], options: dict[str, Any] | None) -> tuple[Ctx, Ctx]:
    def make(info: dict[str, Any]) -> Ctx:
        path = info["path"]
        s3 = where == "s3"
        return Ctx(
            where=where, row=asdict(row), path=path,
            url=f"s3://{BUCKET}/{os.path.basename(path)}" if s3 else path,
            manifest=path + (".s3.json" if s3 else ".local.json"),
            refs=path + (".refs.s3.json" if s3 else ".refs.local.json"),
            options=options if s3 else None,
            n_obs=int(info.get("shape", [0])[0]),
        )

    return make(infos[row.file]), make(warm_infos[row.file])


def row_chunks(row: Row, infos: dict[str, Any]) -> int:
    info = infos[row.file]
    if row.kind == "sweep":
        return int(info["chunks"][row.param])
    return int(info.get("chunks", 0))


def measure(args: argparse.Namespace, rows: list[Row], routes: list[Route], wheres: list[str], infos: dict[str, Any],
            warm_infos: dict[str, Any], s3: SimulatedS3 | None, has_fast: bool) -> dict[tuple[str, str, str], Result]:
    results: dict[tuple[str, str, str], Result] = {}
    zygotes = {False: Zygote(), True: Zygote(args.baseline) if args.baseline else None}
    try:
        for where in wheres:
            for row in rows:
                mine = [r for r in routes if row.kind in r.kinds]
                print(f"\n[{where}] {row.label} ({row_chunks(row, infos):,} chunks)", flush=True)
                for route in mine:
                    res = results[(row.key, where, route.key)] = Result(row.key, where, route.key, route.label)
                    if route.fast is True and not has_fast:
                        res.skipped = "h5lens.fast_reads does not exist yet"
                    elif route.peer and not row.peers:
                        res.skipped = "another layout of a row: the peers run on the row's first layout"
                    elif where == "s3" and route.not_on_s3:
                        res.skipped = route.not_on_s3
                    elif route.module and importlib.util.find_spec(route.module) is None:
                        res.skipped = f"{route.module} is not installed (make bench-read installs it)"
                ctx, warm = contexts(row, where, infos, warm_infos, s3.options if (s3 and where == "s3") else None)
                for rep in range(args.repeat):  # round-robin: drift hits every route alike
                    for route in mine:
                        res = results[(row.key, where, route.key)]
                        if res.skipped or res.error or (route.peer and rep >= args.peer_repeat):
                            continue
                        cmd = {"route": asdict(route), "ctx": asdict(ctx), "warm": asdict(warm), "timeout": args.timeout,
                               "control": s3.control if (s3 and where == "s3") else None}
                        answer = zygotes[route.baseline].run(cmd)  # type: ignore[union-attr]  # set if asked
                        if "error" in answer:
                            res.error = answer["error"]
                            print(f"  {route.key:<18} ERROR {res.error}", flush=True)
                            continue
                        res.runs.append(answer)
                        net = answer.get("net") or {}
                        shown = f"  {net.get('gets', 0):6d} GETs {net.get('bytes', 0) / 1e6:8.2f} MB" if net else ""
                        print(f"  run {rep + 1} {route.key:<18} {answer['seconds']:8.3f} s{shown}", flush=True)
                for route in mine:
                    res = results[(row.key, where, route.key)]
                    if res.skipped:
                        print(f"  {route.key:<18} skipped: {res.skipped}")
    finally:
        for zygote in zygotes.values():
            if zygote is not None:
                zygote.stop()
    return results


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def summarize(rows: list[Row], routes: list[Route], wheres: list[str], infos: dict[str, Any],
              results: dict[tuple[str, str, str], Result]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        chunks = row_chunks(row, infos)
        # the reference values: the native reader's, locally (over S3 it must read the same)
        reference = None
        for where in wheres:
            for key in ("native", FALLBACK_REFERENCE.get(row.kind)):
                found = results.get((row.key, where, key)) if key else None
                if reference is None and found is not None and found.runs:
                    reference = found.runs[0]["digest"]
        for where in wheres:
            native = results.get((row.key, where, "native"))
            ref_key = "native"
            if (native is None or not native.runs) and FALLBACK_REFERENCE.get(row.kind):
                ref_key = FALLBACK_REFERENCE[row.kind]
                native = results.get((row.key, where, ref_key))
            vz = results.get((row.key, where, "virtualizarr"))
            for route in routes:
                res = results.get((row.key, where, route.key))
                if res is None or row.kind not in route.kinds:
                    continue
                entry: dict[str, Any] = {"row": row.key, "where": where, "route": route.key, "label": route.label,
                                         "kind": row.kind, "chunks": chunks, "chunk_bytes": row.chunk_bytes,
                                         "runs": res.runs, "error": res.error, "skipped": res.skipped,
                                         "median_s": None, "prep_s": None, "pipeline": None, "net": None,
                                         "per_chunk_s": None}
                med = res.median()
                entry["median_s"] = med
                if res.runs:
                    digests = {r["digest"] for r in res.runs}
                    entry["status"] = ("unchecked" if reference is None
                                       else "ok" if digests == {reference} else "FAILED")
                    entry["prep_s"] = statistics.median(r["prep_s"] for r in res.runs)
                    entry["pipeline"] = res.runs[0].get("pipeline")
                    entry["net"] = res.runs[0].get("net") or None
                    entry["per_chunk_s"] = med / chunks if chunks and med is not None else None
                else:
                    entry["status"] = "skipped" if res.skipped else "ERROR"
                ref_med = native.median() if native else None
                vz_med = vz.median() if vz else None
                entry["vs_native"] = med / ref_med if med and ref_med else None
                entry["reference"] = ref_key
                entry["vs_virtualizarr"] = med / vz_med if (med and vz_med and where == "s3") else None
                entry["targets"] = []
                for t in targets_for(route, row, where):
                    if t["against"] == "native":
                        t["against"] = ref_key
                    peer = results.get((row.key, where, t["against"]))
                    peer_med = peer.median() if peer is not None else None
                    ratio = (entry["vs_virtualizarr"] if t["against"] == "virtualizarr" else entry["vs_native"]
                             if t["against"] == ref_key else med / peer_med if med and peer_med else None)
                    t = dict(t, ratio=ratio, met=None if ratio is None or entry["status"] != "ok" else ratio <= t["limit"])
                    entry["targets"].append(t)
                out.append(entry)
    return out


def fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}" if v >= 10 else f"{v:.3f}"


def fmt_x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def fmt_chunk(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1e6:.0f} us" if v < 0.01 else f"{v * 1e3:.1f} ms"


def print_table(headers: list[str], body: list[list[str]], left: int = 2) -> None:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left or i == len(cells) - 1 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for cells in body:
        print(line(cells))


def target_text(entry: dict[str, Any]) -> str:
    parts = []
    for t in entry["targets"]:
        against = "VZ" if t["against"] == "virtualizarr" else t["against"]
        state = "?" if t["met"] is None else "met" if t["met"] else "MISS"
        aim = f" (aim {t['aim']:g}x)" if t.get("aim") else ""
        ratio = "" if t.get("ratio") is None or t["against"] in ("native", "virtualizarr") else f" ({t['ratio']:.2f}x)"
        parts.append(f"<={t['limit']:g}x {against}{aim}{ratio}: {state}")
    return "; ".join(parts)


def print_report(summary: list[dict[str, Any]], wheres: list[str], rows: list[Row]) -> None:
    for where in wheres:
        s3 = where == "s3"
        title = (f"simulated S3: moto + CountingProxy(+{LATENCY_MS:g} ms/request, {BANDWIDTH / 1e6:g} MB/s per response,"
                 " cached objects)") if s3 else "local file (page cache warm)"
        print(f"\n## {where}: {title}")
        headers = ["row", "route", "s", "n", "x native"] + (["x VZ", "GETs", "MB"] if s3 else []) + ["per chunk", "check",
                                                                                                     "target"]
        body = []
        for row in rows:
            first = True
            for e in (e for e in summary if e["row"] == row.key and e["where"] == where):
                if e["status"] == "skipped":
                    cells = [row.key if first else "", e["route"], "-", "-", "-"] + (["-"] * 3 if s3 else []) + [
                        "-", "skipped", e["skipped"]]
                elif e["status"] == "ERROR":
                    cells = [row.key if first else "", e["route"], "-", "-", "-"] + (["-"] * 3 if s3 else []) + [
                        "-", "ERROR", str(e["error"])[:90]]
                else:
                    net = e.get("net") or {}
                    cells = [row.key if first else "", e["route"], fmt_s(e["median_s"]), str(len(e["runs"])),
                             "(ref)" if e["route"] == e["reference"] else fmt_x(e["vs_native"])
                             + ("*" if e["reference"] != "native" else "")]
                    if s3:
                        cells += [fmt_x(e["vs_virtualizarr"]), str(net.get("gets", "-")),
                                  f"{net['bytes'] / 1e6:.1f}" if "bytes" in net else "-"]
                    cells += [fmt_chunk(e["per_chunk_s"]), e["status"], target_text(e)]
                body.append(cells)
                first = False
        print_table(headers, body)
    if any(e["reference"] != "native" for e in summary):
        print("* the native reader could not run here (see its row): ratios and checks are against "
              + ", ".join(sorted({f"{k}: {v}" for k, v in FALLBACK_REFERENCE.items()})))
    failed = [e for e in summary if e["status"] == "FAILED"]
    if failed:
        print("\nFAILED (values differ from the native reader's): "
              + ", ".join(f"{e['row']}/{e['where']}/{e['route']}" for e in failed))


def print_sweep(summary: list[dict[str, Any]], wheres: list[str]) -> None:
    sweep = [e for e in summary if e["kind"] == "sweep" and e["median_s"] is not None]
    if not sweep:
        return
    sizes = sorted({e["chunk_bytes"] for e in sweep})
    routes = list(dict.fromkeys(e["route"] for e in sweep))
    for where in wheres:
        print(f"\n## chunk-size sweep, {where}: seconds per chunk (whole array read)")
        body = []
        for route in routes:
            cells = [route]
            for size in sizes:
                e = next((e for e in sweep if e["where"] == where and e["route"] == route and e["chunk_bytes"] == size), None)
                cells.append("-" if e is None else fmt_chunk(e["per_chunk_s"]) + ("" if e["status"] == "ok" or e["route"] == "native" else " !"))
            body.append(cells)
        print_table(["route", *(sweep_name(s)[1:] for s in sizes)], body, left=1)


def plot(summary: list[dict[str, Any]], wheres: list[str], path: str) -> str | None:
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no plot"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    sweep = [e for e in summary if e["kind"] == "sweep" and e.get("per_chunk_s") is not None
             and e["status"] in ("ok", "unchecked")]
    if not sweep:
        return "no sweep results: no plot"
    fig, axes = plt.subplots(1, len(wheres), figsize=(6 * len(wheres), 4.2), squeeze=False, sharey=True)
    for ax, where in zip(axes[0], wheres):
        for route in dict.fromkeys(e["route"] for e in sweep):
            points = sorted((e["chunk_bytes"], e["per_chunk_s"]) for e in sweep if e["where"] == where and e["route"] == route)
            if points:
                style = "k-o" if route == "native" else "-o"
                ax.plot([p[0] for p in points], [p[1] * 1e3 for p in points], style, label=route, markersize=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        sizes = sorted({e["chunk_bytes"] for e in sweep})
        ax.set_xticks(sizes, [sweep_name(c)[1:] for c in sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("chunk size")
        ax.set_title("local" if where == "local" else f"simulated S3 (+{LATENCY_MS:g} ms, {BANDWIDTH / 1e6:g} MB/s)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("ms per chunk (whole array)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("h5lens read benchmark: cost per chunk against chunk size")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return None


def environment() -> dict[str, str]:
    from importlib.metadata import version

    try:
        head = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=HERE,
                              timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = "?"
    packages = ("h5lens", "zarr", "xarray", "anndata", "h5py", "h5netcdf", "netCDF4", "pynwb", "hdmf-zarr",
                "virtualizarr", "kerchunk", "fsspec", "s3fs", "obstore", "moto", "aiohttp", "numcodecs")
    found = {}
    for p in packages:
        try:
            found[p] = version(p)
        except Exception:  # noqa: BLE001
            found[p] = "?"
    return {"git": head or "?", "python": platform.python_version(), "cpus": str(os.cpu_count()),
            "platform": platform.platform(), **found}


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller files, 1 repeat: a few minutes")
    p.add_argument("--repeat", type=int, help="timed runs per route (default 3, --quick 1)")
    p.add_argument("--peer-repeat", type=int, help="timed runs of VirtualiZarr and kerchunk (default 1)")
    p.add_argument("--where", default="local,s3", help="local, s3 or both (default)")
    p.add_argument("--rows", help=f"comma-separated rows (fnmatch patterns) of: {', '.join(r.key for r in ROWS)}")
    p.add_argument("--routes", help="comma-separated route keys (fnmatch patterns); the native reader always runs")
    p.add_argument("--workdir", help="where files are generated once and kept (default: a directory in the temp dir)")
    p.add_argument("--regenerate", action="store_true", help="write the files again")
    p.add_argument("--timeout", type=float, help="seconds before a run counts as hung (default 1800, --quick 300)")
    p.add_argument("--json", default=DEFAULT_JSON, help=f"write the numbers here (default {DEFAULT_JSON}; '' for none)")
    p.add_argument("--plot", default=DEFAULT_PLOT, help=f"plot per-chunk cost here (default {DEFAULT_PLOT}; '' for none)")
    p.add_argument("--baseline", help="another h5lens source tree (a checkout's src/): every h5lens route also runs "
                   "from it, as ROUTE@base, side by side in the same run")
    args = p.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.peer_repeat = min(args.repeat, args.peer_repeat or 1)
    args.timeout = args.timeout or (300.0 if args.quick else 1800.0)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    sizes = QUICK if args.quick else FULL
    scale = "quick" if args.quick else "full"
    workdir = args.workdir or os.path.join(tempfile.gettempdir(), "h5lens-read-bench", scale)
    os.makedirs(workdir, exist_ok=True)
    wheres = [w for w in ("local", "s3") if w in args.where.split(",")]
    rows = [r for r in ROWS if not args.rows or any(fnmatch.fnmatch(r.key, p) for p in args.rows.split(","))]
    routes = [r for r in ROUTES if r.native or not args.routes or any(fnmatch.fnmatch(r.key, p) for p in args.routes.split(","))]
    if args.baseline:  # each h5lens route twice: this tree's, then the baseline's
        routes = [twin for r in routes for twin in (r, *(
            [dataclasses.replace(r, key=f"{r.key}@base", label=f"{r.label} [baseline {args.baseline}]", baseline=True,
                                 group=r.target_group)] if not (r.native or r.peer or r.module) else []))]

    import h5lens

    has_fast = hasattr(h5lens, "fast_reads")
    env = environment()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items() if k != "platform"))
    print(f"h5lens.fast_reads: {'present: routes measured with it off and on' if has_fast else 'absent: its routes are skipped'}")
    print(f"files ({scale}) in {workdir}:", flush=True)
    infos = prepare_files(workdir, sizes, "", args.regenerate)
    warm_infos = prepare_files(workdir, WARMUP, "warm-", args.regenerate)
    for name, info in infos.items():
        chunks = info["chunks"] if isinstance(info["chunks"], int) else sum(info["chunks"].values())
        print(f"  {name:<12} {info['bytes'] / 1e6:8.1f} MB  {chunks:>9,} chunks  shape {info['shape']}")
    for info in (*infos.values(), *warm_infos.values()):  # every run sees a warm page cache
        with open(info["path"], "rb") as f:
            while f.read(16 << 20):
                pass

    s3 = None
    try:
        etags = None
        if "s3" in wheres:
            s3 = SimulatedS3(LATENCY_MS, BANDWIDTH)
            etags = s3.publish([i["path"] for i in (*infos.values(), *warm_infos.values())])
        print("indexing (h5lens) and translating (kerchunk) ...", flush=True)
        index_files(infos, etags)
        index_files(warm_infos, {k: etags[f"warm-{k}"] for k in warm_infos} if etags else None)
        results = measure(args, rows, routes, wheres, infos, warm_infos, s3, has_fast)
    finally:
        if s3 is not None:
            s3.stop()

    summary = summarize(rows, routes, wheres, infos, results)
    print("\n" + "=" * 110)
    print(f"read benchmark ({scale}): median seconds of n runs, each in a fresh process after a warm-up;"
          " x native = seconds / the native reader's (below 1: faster);")
    print("x VZ = seconds / VirtualiZarr's on the same row; per chunk = seconds / chunks of the row;"
          " check = values equal to the native reader's")
    print_report(summary, wheres, rows)
    print_sweep(summary, wheres)
    notes = [
        "timed: references in memory (manifest loaded, VirtualiZarr parsed, kerchunk JSON read: 'prep_s' in the JSON) to values in memory; native readers from opening the file",
        "kerchunk: inline_threshold=0, read through ReferenceFileSystem + zarr.storage.FsspecStore as zarr v2; VirtualiZarr: HDFParser parsed the local copy, its ManifestStore reads the row's source through obstore",
        "native over S3: an s3fs file object (fs.open(url, 'rb'), s3fs defaults: 50 MiB read-ahead blocks)",
        f"simulated S3: moto behind CountingProxy(latency_ms={LATENCY_MS:g}, bandwidth={BANDWIDTH:g}, cache_objects=True) in the benchmark's process; the readers and the proxy share the machine's {os.cpu_count()} cores",
        "lazy-csc reads rows [n/20, n/20 + n/200) (X[1000:1100] at 20,000 cells); lazy-select one of 24 cell types",
    ]
    if not has_fast:
        notes.append("h5lens.fast_reads does not exist in this h5lens: the fast_reads routes were skipped")
    for e in summary:
        route = next(r for r in routes if r.key == e["route"] and e["kind"] in r.kinds)
        used = e.get("pipeline")
        if not used or route.native or route.peer:
            continue
        expected_fast = bool(route.fast)
        if ("h5lens" in used) != expected_fast or (route.pipeline == "fused" and used != FUSED):
            notes.append(f"{e['row']}/{e['where']}/{e['route']}: zarr's codec_pipeline.path during the run was {used}")
    print("\nnotes:")
    for n in notes:
        print(f"  - {n}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        payload = {
            "benchmark": "read_bench", "scale": scale, "sizes": asdict(sizes), "repeat": args.repeat,
            "peer_repeat": args.peer_repeat, "latency_ms": LATENCY_MS, "bandwidth": BANDWIDTH,
            "fast_reads": has_fast, "files": infos, "environment": env, "notes": notes,
            "targets": [dict(zip(("routes", "kinds", "chunks", "where", "limit", "against", "aim"), t)) for t in TARGETS],
            "results": summary,
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1, default=str)
        print(f"numbers written to {args.json}")
    if args.plot:
        try:
            problem = plot(summary, wheres, args.plot)
        except Exception as e:  # noqa: BLE001 - the numbers are written already
            problem = f"no plot: {type(e).__name__}: {e}"
        print(f"\n{problem}" if problem else f"\nplot written to {args.plot}")
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 1 if any(e["status"] in ("FAILED", "ERROR") for e in summary) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == ZYGOTE_COMMAND:
        zygote_main()
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
