#!/usr/bin/env python
"""Benchmark: manifests of 10^5, 10^6 and 10^7 chunk references, JSON against compact.

For each size and form, in a fresh subprocess (imports done before the clock starts):
bytes on disk per chunk, the time and peak memory to open the manifest, and the
latency of the first chunk (open + zarr group + reading and decoding one chunk).

Each manifest describes one gzip array of that many chunks, whose lengths are drawn from a real file's
irregular gzip chunks (a small HDF5 file written here), laid out one after another as an
HDF5 writer lays them: the first chunk is that file's own, so reading it returns real
data. The compact table of as many regular (uncompressed, equal, adjacent) chunks is
measured beside it. JSON at
10^7 references is skipped unless ``--json-max`` allows it (~360 MB of JSON to parse).

Peak memory is the process's own ``VmHWM`` from ``/proc/self/status`` before and after
the step (``ru_maxrss`` of a child can report its parent's peak).

Then the per-chunk cost of opening a JSON manifest: ``Manifest.from_json`` of the manifest of
``benchmarks/read_bench.py``'s small.nc (netCDF-C, 50,000 chunk references, ~1.8 MB),
against the bare JSON parse of the same bytes (``orjson.loads``, or ``json.loads`` where
orjson is not installed), alternately in one fresh process, medians; the ratio is printed
(target: <= 3x).

``--baseline SRC`` runs every measurement a second time with another h5lens on
``PYTHONPATH`` (the ``src`` directory of a checkout, e.g. the commit before a change),
alternating the two run by run, and prints each figure beside the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

RESULT = "@@RESULT@@ "
REGULAR_TABLE_BYTES: dict[int, int] = {}  # compact table size of n regular chunks (not in the files)


def _vmhwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _source(path: str) -> tuple[np.ndarray, int, int]:
    """A small real file: lengths of its irregular gzip chunks, chunk 0's offset, the file size."""
    import h5py

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        values = rng.integers(0, 1 << 12, 64 * 4096, dtype="i4")
        f.create_dataset("x", data=values, chunks=(64,), compression="gzip")
    with h5py.File(path) as f:
        infos: list[Any] = []
        f["x"].id.chunk_iter(infos.append)
    lengths = np.array([i.size for i in infos], dtype=np.uint64)
    return lengths, int(infos[0].byte_offset), os.path.getsize(path)


def build(n: int, source: str, out_dir: str, forms: list[str]) -> dict[str, str]:
    """Write the manifests of size ``n`` in each form; return their paths."""
    import h5lens
    from h5lens.manifest.model import ChunkTableBuilder, Manifest, Source
    from h5lens.manifest.zarr_keys import DEFAULT_ENCODING

    lengths, first, size = _source(source)
    gzip = ChunkTableBuilder((n,))
    # lengths drawn from the real file's (a repeating cycle would compress unrealistically well)
    drawn = np.random.default_rng(1).choice(lengths, n)
    drawn[0] = lengths[0]
    offsets = first + np.concatenate([[0], np.cumsum(drawn)[:-1]]).astype(np.uint64)
    gzip.refer(np.arange(n), offsets, drawn)
    # The references run past the small real file: extend it (sparsely, with zeros) so that
    # the recorded size is the file's own and every reference lies inside it.
    end = int(offsets[-1] + drawn[-1])
    if end > size:
        os.truncate(source, end)
        size = end
    regular = ChunkTableBuilder((n,))
    regular.refer(np.arange(n), np.arange(n, dtype=np.uint64) * np.uint64(256) + np.uint64(first), np.uint64(256))

    def doc(codecs: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "zarr_format": 3, "node_type": "array", "shape": [n * 64], "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64]}},
            "chunk_key_encoding": DEFAULT_ENCODING.to_json(), "fill_value": 0, "codecs": codecs,
            "attributes": {"_DTYPE": "int32"},
        }

    little = {"name": "bytes", "configuration": {"endian": "little"}}
    manifest = Manifest(
        nodes={
            "": {"zarr_format": 3, "node_type": "group", "attributes": {}},
            "gzip": doc([little, {"name": "numcodecs.zlib", "configuration": {"level": 4}}]),
        },
        chunks={"gzip": gzip.build()},
        sources=[Source(os.path.abspath(source), size)],
        writer=h5lens.__version__,
    )
    from h5lens.manifest import compact

    REGULAR_TABLE_BYTES[n] = len(compact.encode_table(regular.build()))
    paths = {}
    for form in forms:
        path = os.path.join(out_dir, f"m{n}.{form}")
        manifest.save(path, format=form)
        paths[form] = path
    return paths


def worker(path: str) -> None:
    import h5lens
    from h5lens.manifest import compact
    from h5lens.store import ManifestStore  # noqa: F401 - imported before the clock starts

    before = _vmhwm()
    start = time.perf_counter()
    manifest = h5lens.Manifest.load(path)
    opened = time.perf_counter() - start
    group = h5lens.open_group(manifest, verify=False)
    first = group["gzip"][0:64]
    latency = time.perf_counter() - start
    peak = _vmhwm() - before
    loaded = manifest.chunks.loaded if isinstance(manifest.chunks, compact.LazyTables) else len(manifest.chunks)
    print(RESULT + json.dumps({"open": opened, "first_chunk": latency, "peak": peak,
                               "tables_loaded": loaded, "first_value": int(first[0])}))


def _run(args: list[str], src: str | None) -> dict[str, Any]:
    """One fresh process (``src``: the h5lens to import, else this one); its result line."""
    env = dict(os.environ, PYTHONPATH=src) if src else None
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=3600, env=env, check=False
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith(RESULT)), None)
    if line is None:
        raise RuntimeError(f"{args}: {proc.stderr.strip().splitlines()[-3:]}")
    return json.loads(line[len(RESULT):])


def measure(path: str, repeat: int, baseline: str | None = None) -> tuple[dict[str, float], dict[str, float] | None]:
    """Medians of ``repeat`` fresh processes, and of as many with the baseline h5lens,
    alternating."""
    runs: dict[str | None, list[dict[str, Any]]] = {None: [], baseline: []}
    for _ in range(repeat):
        for src in (None, baseline) if baseline else (None,):
            runs[src].append(_run(["_worker", path], src))
    keys = ("open", "first_chunk", "peak")
    mine = {k: statistics.median(r[k] for r in runs[None]) for k in keys}
    return mine, ({k: statistics.median(r[k] for r in runs[baseline]) for k in keys} if baseline else None)


def parse_worker(path: str, repeat: int) -> None:
    """``Manifest.from_json(path)`` against the bare JSON parse of its bytes, alternately."""
    import h5lens
    from h5lens.store import ManifestStore  # noqa: F401 - imported before the clock starts

    try:
        import orjson

        parser, loads = "orjson.loads", orjson.loads
    except ImportError:
        parser, loads = "json.loads", json.loads
    with open(path, "rb") as f:
        raw = f.read()
    h5lens.Manifest.from_json(path)  # zarr's codecs and data types registered, as after any first open
    parse, load = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        loads(raw)
        parse.append(time.perf_counter() - start)
        start = time.perf_counter()
        manifest = h5lens.Manifest.from_json(path)
        load.append(time.perf_counter() - start)
    print(RESULT + json.dumps({"parser": parser, "parse": statistics.median(parse), "from_json": statistics.median(load),
                               "chunks": manifest.n_chunks, "bytes": len(raw)}))


def from_json_row(work: str, repeat: int, baseline: str | None) -> dict[str, Any]:
    """The JSON row: read_bench.py's small.nc indexed, its manifest loaded against its parse."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import read_bench

    import h5lens

    source = os.path.join(work, "small.nc")
    read_bench.gen_nc(source, 50_000, 100)
    path = os.path.join(work, "small.json")
    h5lens.index(source).to_json(path)
    mine = _run(["_parse_worker", path, str(repeat)], None)
    row: dict[str, Any] = {"case": "small.nc JSON manifest: Manifest.from_json against the JSON parse", **mine,
                           "ratio": mine["from_json"] / mine["parse"]}
    print(f"\nsmall.nc ({mine['chunks']:,} chunk references, {mine['bytes'] / 1e6:.2f} MB of JSON): "
          f"Manifest.from_json {mine['from_json']:.4f} s, {mine['parser']} {mine['parse']:.4f} s: "
          f"{row['ratio']:.2f}x the parse ({'met' if row['ratio'] <= 3 else 'MISSED'}: target <= 3x)")
    if baseline:
        theirs = _run(["_parse_worker", path, str(repeat)], baseline)
        row["baseline"] = {**theirs, "ratio": theirs["from_json"] / theirs["parse"], "src": baseline}
        print(f"  baseline ({baseline}): Manifest.from_json {theirs['from_json']:.4f} s, {theirs['parser']} "
              f"{theirs['parse']:.4f} s: {row['baseline']['ratio']:.2f}x; this h5lens takes "
              f"{mine['from_json'] / theirs['from_json']:.3f}x the baseline's time")
    return row


def table_bytes(path: str, n: int) -> dict[str, float]:
    """Bytes per chunk of the whole file; for the compact form, of the gzip array's table and
    of a table of n regular chunks."""
    out = {"file_per_chunk": os.path.getsize(path) / n}
    if path.endswith("compact"):
        import h5lens
        from h5lens.manifest import compact

        manifest = h5lens.Manifest.load(path)
        out["gzip_table_per_chunk"] = len(compact.encode_table(manifest.chunks["gzip"])) / n
        out["regular_table_per_chunk"] = REGULAR_TABLE_BYTES[n] / n
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["_worker"]:
        worker(argv[1])
        return 0
    if argv[:1] == ["_parse_worker"]:
        parse_worker(argv[1], int(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6, 1e7])
    parser.add_argument("--json-max", type=float, default=1e6, help="largest size written as JSON (default 1e6)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="OUT", help="write the results here")
    parser.add_argument("--plot", metavar="PNG", help="plot open time and peak memory here (needs matplotlib)")
    parser.add_argument("--baseline", metavar="SRC", help="also run each measurement with the h5lens in SRC "
                        "(a checkout's src directory), alternating, and print both")
    parser.add_argument("--parse-repeat", type=int, default=9, help="loads of the small.nc manifest (default 9)")
    parser.add_argument("--skip-from-json", action="store_true", help="leave out the small.nc from_json row")
    args = parser.parse_args(argv)
    baseline = os.path.abspath(args.baseline) if args.baseline else None
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="h5lens-scale-") as work:
        source = os.path.join(work, "source.h5")
        for size in args.sizes:
            n = int(size)
            forms = ["compact"] + (["json"] if n <= args.json_max else [])
            paths = build(n, source, work, forms)
            for form, path in paths.items():
                mine, theirs = measure(path, args.repeat, baseline)
                row: dict[str, Any] = {"chunks": n, "form": form, **table_bytes(path, n), **mine}
                if theirs is not None:
                    row["baseline"] = theirs
                rows.append(row)
                print(
                    f"{n:>10,} {form:<8} {row['file_per_chunk']:7.2f} B/chunk  open {row['open']:8.3f} s  "
                    f"first chunk {row['first_chunk']:8.3f} s  peak +{row['peak'] / 2**20:7.1f} MiB", flush=True
                )
                if theirs is not None:
                    print(
                        f"{'baseline':>19}{'':17}open {theirs['open']:8.3f} s  first chunk {theirs['first_chunk']:8.3f} s"
                        f"  peak +{theirs['peak'] / 2**20:7.1f} MiB   (open {mine['open'] / theirs['open']:.3f}x, "
                        f"first chunk {mine['first_chunk'] / theirs['first_chunk']:.3f}x the baseline)", flush=True
                    )
                os.unlink(path)
        if not args.skip_from_json:
            rows.append(from_json_row(work, args.parse_repeat, baseline))
    scale_rows = [r for r in rows if "form" in r]
    print("\nper size, compact against JSON:")
    for n in sorted({r["chunks"] for r in scale_rows}):
        by = {r["form"]: r for r in scale_rows if r["chunks"] == n}
        if "json" in by:
            c, j = by["compact"], by["json"]
            print(f"  {n:>10,}: bytes {c['file_per_chunk'] / j['file_per_chunk']:.3f}x, open {c['open'] / j['open']:.3f}x, "
                  f"first chunk {c['first_chunk'] / j['first_chunk']:.3f}x, peak {c['peak'] / max(j['peak'], 1):.3f}x")
    compact_rows = [r for r in scale_rows if r["form"] == "compact"]
    for r in compact_rows:
        print(f"  compact {r['chunks']:,}: gzip table {r['gzip_table_per_chunk']:.2f} B/chunk, "
              f"regular table {r['regular_table_per_chunk']:.4f} B/chunk")
    print_targets(compact_rows)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    if args.plot:
        plot(scale_rows, args.plot)
    return 0


def print_targets(compact_rows: list[dict[str, Any]]) -> None:
    """The compact form's targets at 10^6 chunks, with what was measured."""
    by_n = {r["chunks"]: r for r in compact_rows}
    million = by_n.get(1_000_000)
    if million is None:
        return
    checks = [
        ("open <= 0.2 s", million["open"], 0.2, "s"),
        ("peak memory (open + first chunk) <= 100 MB", million["peak"] / 1e6, 100, "MB"),
        ("irregular gzip chunks <= 3 B/chunk", million["gzip_table_per_chunk"], 3, "B/chunk"),
        ("regular chunks <= 0.5 B/chunk", million["regular_table_per_chunk"], 0.5, "B/chunk"),
    ]
    ten = by_n.get(10_000_000)
    if ten is not None:  # "opens in about the same time": within 2x of 10^6
        checks.append(("10^7 chunks open <= 2x the 10^6 open", ten["open"] / million["open"], 2, "x"))
    print("\ntargets (compact, 10^6 chunks):")
    for label, value, limit, unit in checks:
        print(f"  {label}: {value:.4g} {unit} ({'met' if value <= limit else 'MISSED'})")


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for form, style in (("json", "o--"), ("compact", "s-")):
        mine = sorted((r for r in rows if r["form"] == form), key=lambda r: r["chunks"])
        if not mine:
            continue
        xs = [r["chunks"] for r in mine]
        axes[0].plot(xs, [r["file_per_chunk"] for r in mine], style, label=form)
        axes[1].plot(xs, [r["first_chunk"] for r in mine], style, label=form)
        axes[2].plot(xs, [r["peak"] / 2**20 for r in mine], style, label=form)
    titles = ("manifest bytes per chunk", "open + first chunk (s)", "peak memory (MiB)")
    for axis, title in zip(axes, titles, strict=True):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("chunk references")
        axis.set_title(title)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
