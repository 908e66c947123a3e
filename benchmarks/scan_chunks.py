#!/usr/bin/env python
"""Benchmark: how fast is h5lens.index on an HDF5 file with hundreds of thousands of chunks?

It compares three things on the same file, in the same run:

* a bare h5py walk (``DatasetID.chunk_iter`` over every chunked dataset): what listing
  the chunks through libhdf5 costs (h5lens walks the chunk indexes itself, reading the
  index nodes in batches, and checks its tables against ``chunk_iter`` in the tests);
* ``h5lens.index`` (no inlining, and the default inlining), then ``Manifest.to_json``;
* kerchunk 0.2.10's ``SingleHdf5ToZarr(...).translate()``, then its JSON written with ujson.

Every timed run happens in a fresh subprocess (nothing cached in Python or libhdf5
carries over between runs); imports happen before the clock starts. The file is read
once before timing, so every run sees a warm page cache. Run ``--help`` for options;
``make bench`` runs it with the defaults.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import h5py
import numpy as np

MIN_CHUNKS = 200_000
RESULT_MARKER = "@@RESULT@@ "
WORKER_COMMAND = "_worker"
PROFILE_COMMAND = "_profile"
# Key names that hold metadata rather than chunk references, for both output formats
# (h5lens writes zarr v3 keys; kerchunk 0.2.10 writes zarr v2 keys).
METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup"})
DENSE_POOL = 1024  # distinct pre-compressed chunks the dense dataset cycles through
PROFILE_TRIGGER = 1.5  # profile h5lens when its index time exceeds this multiple of the floor


# ---------------------------------------------------------------------------
# The approaches being timed
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Approach:
    key: str
    label: str
    tool: str  # "bare", "h5lens" or "kerchunk"
    inline: int | None = None  # None: the tool's own default
    collect: bool = False  # bare walk only: keep the chunk infos in a list

    def phases(self) -> list[tuple[str, str]]:
        """(phase name as reported by the worker, row label) in run order; rows are cumulative."""
        if self.tool == "bare":
            return [("walk", self.label)]
        if self.tool == "h5lens":
            return [("index", self.label), ("write", f"{self.label} + to_json")]
        return [("translate", self.label), ("write", f"{self.label} + ujson write")]


def approaches(h5lens_inline: int) -> list[Approach]:
    # kerchunk's test is strict (size < threshold): +1 makes it inline exactly what h5lens does
    kerchunk_inline = h5lens_inline + 1
    return [
        Approach("bare-noop", "bare walk: chunk_iter(lambda info: None)", "bare"),
        Approach("bare-list", "bare walk: chunk_iter(list.append)", "bare", collect=True),
        Approach("h5lens-0", "h5lens.index(inline_threshold=0)", "h5lens", inline=0),
        Approach("h5lens-default", f"h5lens.index() [inline <= {h5lens_inline} B]", "h5lens"),
        Approach("kerchunk-0", "kerchunk translate(inline_threshold=0)", "kerchunk", inline=0),
        Approach(
            f"kerchunk-{kerchunk_inline}",
            f"kerchunk translate(inline_threshold={kerchunk_inline})",
            "kerchunk",
            inline=kerchunk_inline,
        ),
    ]


def default_inline_threshold() -> int:
    """h5lens's default threshold (imported lazily: h5lens pulls in zarr, which the generator doesn't need)."""
    from h5lens.scan.options import DEFAULT_INLINE_THRESHOLD

    return int(DEFAULT_INLINE_THRESHOLD)


# ---------------------------------------------------------------------------
# Test file
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSpec:
    rows: int = 8192  # n_obs
    dense_cols: int = 4096
    dense_chunk: tuple[int, int] = (16, 32)  # 2 KiB of float32: above the default inline threshold
    n_vars: int = 20_000
    nnz_per_row: int = 1100
    sparse_chunk: int = 128  # 512 B of float32/int32: below it, so the default run inlines these
    libver: str = "earliest"  # version-1 B-tree chunk indexes, as most files in the wild have

    def expected_chunks(self) -> int:
        dense = -(-self.rows // self.dense_chunk[0]) * -(-self.dense_cols // self.dense_chunk[1])
        nnz = self.rows * self.nnz_per_row
        return dense + 2 * -(-nnz // self.sparse_chunk) + -(-(self.rows + 1) // self.sparse_chunk)


def generate_file(path: str, spec: FileSpec, seed: int = 0) -> float:
    """Write the test file; returns seconds taken.

    No Python loop of dataset writes: sparse arrays go in big chunk-aligned slabs (libhdf5
    compresses and indexes in C, no read-modify-write) and the dense one as pre-compressed
    chunks. What is left per chunk is libhdf5's chunk-index insertion, about 20-30 µs.
    """
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    with h5py.File(path, "w", libver=spec.libver) as h5:
        h5.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
        _write_dense(h5.create_group("obsm"), spec, rng)
        _write_csr(h5.create_group("X"), spec, rng)
    return time.perf_counter() - start


def _write_dense(group: h5py.Group, spec: FileSpec, rng: np.random.Generator) -> None:
    """Gaussian float32: it barely compresses, like an embedding, so its chunks stay referenced.

    gzip over 128 MB of noise would take most of the generation time, so a pool of
    distinct chunks is compressed once and written with ``write_direct_chunk``: values
    repeat every ``DENSE_POOL`` chunks, which nothing here looks at.
    """
    group.attrs.update({"encoding-type": "dict", "encoding-version": "0.1.0"})
    dset = group.create_dataset(
        "dense",
        shape=(spec.rows, spec.dense_cols),
        dtype="f4",
        chunks=spec.dense_chunk,
        compression="gzip",  # the filter libhdf5 records; the chunks below are zlib streams it decodes
        compression_opts=1,
    )
    pool = [
        zlib.compress(rng.standard_normal(spec.dense_chunk, dtype=np.float32).tobytes(), 1) for _ in range(DENSE_POOL)
    ]
    grid = (-(-spec.rows // spec.dense_chunk[0]), -(-spec.dense_cols // spec.dense_chunk[1]))
    for k, (i, j) in enumerate(np.ndindex(grid)):
        dset.id.write_direct_chunk((i * spec.dense_chunk[0], j * spec.dense_chunk[1]), pool[k % DENSE_POOL])


def _write_csr(group: h5py.Group, spec: FileSpec, rng: np.random.Generator) -> None:
    """An anndata csr_matrix: data (counts), indices (sorted, unique per row), indptr."""
    group.attrs.update(
        {"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": [spec.rows, spec.n_vars]}
    )
    # Strictly increasing column indices per row from gaps in [1, max_gap]: unique, and
    # the largest possible index (nnz_per_row * max_gap - 1) stays inside n_vars.
    max_gap = max(1, spec.n_vars // spec.nnz_per_row)
    gaps = rng.integers(1, max_gap + 1, (spec.rows, spec.nnz_per_row), dtype=np.int32)
    indices = (np.cumsum(gaps, axis=1, dtype=np.int32) - 1).ravel()
    data = rng.integers(1, 50, indices.size, dtype=np.uint8).astype(np.float32)
    indptr = np.arange(spec.rows + 1, dtype=np.int64) * spec.nnz_per_row
    for name, values in (("data", data), ("indices", indices), ("indptr", indptr)):
        # maxshape=(None,) as anndata's appendable sparse arrays have (another chunk index type)
        dset = group.create_dataset(
            name,
            shape=values.shape,
            dtype=values.dtype,
            chunks=(spec.sparse_chunk,),
            maxshape=(None,),
            compression="gzip",
            compression_opts=1,
        )
        _write_1d_slabs(dset, values, spec.sparse_chunk * 8192)


def _write_1d_slabs(dset: h5py.Dataset, values: np.ndarray, step: int) -> None:
    # One huge H5Dwrite gets slower than linear in the number of chunks; chunk-aligned slabs don't.
    for start in range(0, values.size, step):
        dset[start : start + step] = values[start : start + step]


@dataclass
class DatasetInfo:
    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    n_chunks: int
    stored_bytes: int


def describe_file(path: str) -> list[DatasetInfo]:
    infos: list[DatasetInfo] = []
    with h5py.File(path, "r") as h5:
        for dset in chunked_datasets(h5):
            infos.append(
                DatasetInfo(dset.name, dset.shape, dset.chunks, dset.id.get_num_chunks(), dset.id.get_storage_size())
            )
    return infos


def chunked_datasets(h5: h5py.File) -> list[h5py.Dataset]:
    found: list[h5py.Dataset] = []

    def visit(_name: str, obj: h5py.HLObject) -> None:
        if isinstance(obj, h5py.Dataset) and obj.chunks is not None:
            found.append(obj)

    h5.visititems(visit)
    return found


def warm_page_cache(path: str) -> float:
    """Read the whole file once so no timed run pays for disk I/O the others don't."""
    start = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass
    return time.perf_counter() - start


# ---------------------------------------------------------------------------
# Worker side: one timed run, in its own process
# ---------------------------------------------------------------------------


def run_bare(path: str, approach: Approach) -> dict[str, float]:
    start = time.perf_counter()
    with h5py.File(path, "r") as h5:
        for dset in chunked_datasets(h5):
            if approach.collect:
                infos: list[Any] = []
                dset.id.chunk_iter(infos.append)
            else:
                dset.id.chunk_iter(lambda info: None)
    return {"walk": time.perf_counter() - start}


def run_h5lens(path: str, approach: Approach, out: str) -> dict[str, float]:
    import h5lens

    # h5lens loads its scanner (and zarr) on first use of h5lens.index: load it before the
    # clock starts, as the other approaches import theirs
    index = h5lens.index
    start = time.perf_counter()
    # the default call is spelled as users write it, so it tracks h5lens's own default
    manifest = index(path) if approach.inline is None else index(path, inline_threshold=approach.inline)
    indexed = time.perf_counter()
    manifest.to_json(out)
    written = time.perf_counter()
    return {"index": indexed - start, "write": written - indexed}


def run_kerchunk(path: str, approach: Approach, out: str) -> tuple[dict[str, float], list[str]]:
    """Returns phase times and the warnings kerchunk raised (it turns per-dataset errors into warnings)."""
    import kerchunk.hdf
    import ujson

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        converter = kerchunk.hdf.SingleHdf5ToZarr(path, inline_threshold=approach.inline)
        refs = converter.translate()
        converter.close()  # h5lens.index closes its file too: same work on both sides
        translated = time.perf_counter()
        with open(out, "w") as f:
            f.write(ujson.dumps(refs))
        written = time.perf_counter()
    messages = [" | ".join(str(w.message).strip().splitlines()[:2]) for w in caught]
    return {"translate": translated - start, "write": written - translated}, messages


def preload(tool: str) -> None:
    """Import what a run needs before the clock starts: import time is not scan time."""
    if tool == "h5lens":
        import h5lens  # noqa: F401
        import h5lens.manifest.refs_json  # noqa: F401  (to_json imports it lazily)
    elif tool == "kerchunk":
        import kerchunk.hdf  # noqa: F401
        import ujson  # noqa: F401


def load_refs_json(path: str) -> dict[str, Any]:
    import orjson

    with open(path, "rb") as f:
        raw = f.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # bare NaN tokens: only the stdlib reads them
        return json.loads(raw)


def refs_stats(path: str) -> dict[str, Any]:
    """Key counts and a digest of the referenced (offset, length) pairs of a reference JSON.

    The digest ignores URLs (h5lens writes a template, kerchunk the path) and key names
    (v3 ``c/i/j`` vs v2 ``i.j``), so equal digests mean the same chunk bytes are referenced.
    """
    data = load_refs_json(path)
    refs = data.get("refs", data)
    metadata = referenced = inlined = 0
    pairs: list[tuple[int, int]] = []
    for key, value in refs.items():
        if key.rsplit("/", 1)[-1] in METADATA_NAMES:
            metadata += 1
        elif isinstance(value, list) and len(value) == 3:
            referenced += 1
            pairs.append((int(value[1]), int(value[2])))
        else:
            inlined += 1
    table = np.array(pairs, dtype=np.uint64).reshape(-1, 2)
    table = table[np.lexsort((table[:, 1], table[:, 0]))]
    return {
        "json_bytes": os.path.getsize(path),
        "keys": len(refs),
        "metadata_keys": metadata,
        "chunk_keys": referenced + inlined,
        "referenced": referenced,
        "inline": inlined,
        "referenced_digest": hashlib.sha256(table.tobytes()).hexdigest()[:16],
    }


def worker_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=f"scan_chunks.py {WORKER_COMMAND}")
    parser.add_argument("approach")
    parser.add_argument("--file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--h5lens-inline", type=int, required=True)
    parser.add_argument("--stats", action="store_true")
    parser.add_argument("--gc-off", action="store_true")
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    approach = {a.key: a for a in approaches(args.h5lens_inline)}[args.approach]

    # A hung run dumps every thread's stack and exits, so a deadlock is reported with
    # where it happened instead of silently eating the parent's timeout.
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    preload(approach.tool)
    if args.gc_off or approach.tool == "kerchunk":
        # kerchunk 0.2.10 on zarr 3 can deadlock in h5py's lock when the cyclic GC runs
        # mid-translate; it stays off until this process exits.
        gc.disable()

    result: dict[str, Any] = {"gc_disabled": not gc.isenabled()}
    try:
        if approach.tool == "bare":
            result["phases"] = run_bare(args.file, approach)
        elif approach.tool == "h5lens":
            result["phases"] = run_h5lens(args.file, approach, args.out)
        else:
            result["phases"], result["warnings"] = run_kerchunk(args.file, approach, args.out)
        if args.stats and approach.tool != "bare":
            result["stats"] = refs_stats(args.out)
    except Exception as e:  # reported as this approach's result, e.g. kerchunk refusing zarr 3
        result["error"] = f"{type(e).__name__}: {e}"
    faulthandler.cancel_dump_traceback_later()
    print(RESULT_MARKER + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------
# Parent side: run workers, aggregate, report
# ---------------------------------------------------------------------------


@dataclass
class Measurement:
    approach: Approach
    runs: list[dict[str, float]] = field(default_factory=list)  # phase -> seconds, one per run
    stats: dict[str, Any] | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    gc_disabled: bool = False

    def cumulative(self) -> dict[str, list[float]]:
        """Row label -> seconds per run, each phase including the ones before it."""
        rows: dict[str, list[float]] = {label: [] for _, label in self.approach.phases()}
        for run in self.runs:
            total = 0.0
            for phase, label in self.approach.phases():
                total += run[phase]
                rows[label].append(total)
        return rows


def run_worker(
    approach: Approach, file: str, out: str, *, h5lens_inline: int, stats: bool, gc_off: bool, timeout: float
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        WORKER_COMMAND,
        approach.key,
        "--file",
        file,
        "--out",
        out,
        "--h5lens-inline",
        str(h5lens_inline),
        "--timeout",
        str(timeout),
    ]
    cmd += ["--stats"] if stats else []
    cmd += ["--gc-off"] if gc_off else []
    try:
        # the worker's own faulthandler fires first; this is the backstop
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout: no answer after {timeout + 30:g} s (killed)"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    return {"error": describe_failure(proc, timeout)}


def describe_failure(proc: subprocess.CompletedProcess[str], timeout: float) -> str:
    stderr = proc.stderr.strip()
    if "Timeout (" in stderr:  # faulthandler's dump of every thread
        frames = main_thread_frames(stderr)
        return f"timeout after {timeout:g} s (deadlock?); main thread at: " + " <- ".join(frames[:4])
    tail = " | ".join(stderr.splitlines()[-3:])
    return f"worker exited with code {proc.returncode}: {tail}"


def main_thread_frames(dump: str) -> list[str]:
    """Innermost-first frames of the thread whose stack starts in this script (zarr runs an I/O thread too)."""
    blocks = re.split(r"^(?:Current thread|Thread) 0x[0-9a-f]+.*$", dump, flags=re.MULTILINE)
    main = next((b for b in blocks if os.path.basename(__file__) in b), blocks[-1])
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', main)
    return [f"{short_path(file)}:{line} {func}" for file, line, func in frames]


def measure_all(
    chosen: list[Approach], file: str, workdir: str, *, h5lens_inline: int, repeat: int, gc_off: bool, timeout: float
) -> dict[str, Measurement]:
    """Round-robin over approaches, so slow drift of the machine hits all of them alike."""
    results = {a.key: Measurement(a) for a in chosen}
    for rep in range(repeat):
        for approach in chosen:
            measurement = results[approach.key]
            if measurement.error is not None:  # a deadlock or refusal won't fix itself: don't wait again
                continue
            out = os.path.join(workdir, f"{approach.key}.json")
            answer = run_worker(
                approach, file, out, h5lens_inline=h5lens_inline, stats=rep == 0, gc_off=gc_off, timeout=timeout
            )
            record(measurement, answer)
            print(f"  run {rep + 1}/{repeat} {approach.key:<16} {progress_text(answer)}", flush=True)
            if os.path.exists(out):
                os.unlink(out)
    return results


def record(measurement: Measurement, answer: dict[str, Any]) -> None:
    if "error" in answer:
        measurement.error = answer["error"]
        return
    measurement.runs.append(answer["phases"])
    measurement.gc_disabled = answer.get("gc_disabled", False)
    measurement.stats = answer.get("stats", measurement.stats)
    measurement.warnings = answer.get("warnings", measurement.warnings)


def progress_text(answer: dict[str, Any]) -> str:
    if "error" in answer:
        return "ERROR " + answer["error"]
    return "  ".join(f"{phase} {seconds:.3f}s" for phase, seconds in answer["phases"].items())


@dataclass
class Row:
    label: str
    key: str  # approach key
    median: float | None
    best: float | None
    n: int


def timing_rows(results: dict[str, Measurement]) -> list[Row]:
    rows: list[Row] = []
    for key, measurement in results.items():
        for label, seconds in measurement.cumulative().items():
            if seconds:
                rows.append(Row(label, key, statistics.median(seconds), min(seconds), len(seconds)))
            else:
                rows.append(Row(label, key, None, None, 0))
    return rows


def find_row(rows: list[Row], key: str, position: int) -> Row | None:
    """The ``position``-th row (0: scan only, 1: scan + JSON) of approach ``key``."""
    mine = [r for r in rows if r.key == key]
    return mine[position] if position < len(mine) else None


def ratio(numerator: Row | None, denominator: Row | None) -> float | None:
    if numerator is None or denominator is None or not numerator.median or not denominator.median:
        return None
    return numerator.median / denominator.median


def ratio_lines(rows: list[Row], kerchunk_key: str) -> list[tuple[str, float | None]]:
    """(description, median ratio) pairs: h5lens against the floor, kerchunk against h5lens."""
    floor, floor_list = find_row(rows, "bare-noop", 0), find_row(rows, "bare-list", 0)
    h0, hd = find_row(rows, "h5lens-0", 0), find_row(rows, "h5lens-default", 0)
    h0j, hdj = find_row(rows, "h5lens-0", 1), find_row(rows, "h5lens-default", 1)
    k0, kd = find_row(rows, "kerchunk-0", 0), find_row(rows, kerchunk_key, 0)
    k0j, kdj = find_row(rows, "kerchunk-0", 1), find_row(rows, kerchunk_key, 1)
    return [
        ("h5lens.index(inline=0) / bare walk (noop)", ratio(h0, floor)),
        ("h5lens.index(inline=0) / bare walk (list)", ratio(h0, floor_list)),
        ("h5lens.index() default / bare walk (noop)", ratio(hd, floor)),
        ("kerchunk translate / h5lens.index, no inlining", ratio(k0, h0)),
        ("kerchunk translate+json / h5lens index+to_json, no inlining", ratio(k0j, h0j)),
        ("kerchunk translate / h5lens.index, same inlining", ratio(kd, hd)),
        ("kerchunk translate+json / h5lens index+to_json, same inlining", ratio(kdj, hdj)),
    ]


def fmt_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def print_table(headers: list[str], body: list[list[str]], right: set[int]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for cells in body:
        print(line(cells))


def print_timings(rows: list[Row], repeat: int) -> None:
    floor = find_row(rows, "bare-noop", 0)
    body = [
        [r.label, fmt_seconds(r.median), fmt_seconds(r.best), f"{r.n}/{repeat}", fmt_ratio(ratio(r, floor))]
        for r in rows
    ]
    print_table(["approach", "median s", "min s", "runs", "median / floor"], body, right={1, 2, 3, 4})


def print_outputs(results: dict[str, Measurement], total_chunks: int) -> None:
    body = []
    for key, m in results.items():
        if m.approach.tool == "bare" or m.stats is None:
            continue
        s = m.stats
        body.append(
            [
                key,
                f"{s['json_bytes'] / 1e6:.1f} MB",
                str(s["keys"]),
                str(s["metadata_keys"]),
                str(s["chunk_keys"]),
                str(s["referenced"]),
                str(s["inline"]),
                s["referenced_digest"],
            ]
        )
    print_table(
        ["output", "JSON size", "keys", "metadata", "chunk keys", "referenced", "inline", "referenced digest"],
        body,
        right={1, 2, 3, 4, 5, 6},
    )
    for line in comparison_lines(results, total_chunks):
        print("  " + line)


def comparison_lines(results: dict[str, Measurement], total_chunks: int) -> list[str]:
    """Are the outputs interchangeable? Chunk counts against the file, then pairwise."""
    lines = []
    for key, m in results.items():
        if m.stats is not None:
            verdict = "OK" if m.stats["chunk_keys"] == total_chunks else "MISMATCH"
            lines.append(f"{key}: {m.stats['chunk_keys']} chunk keys for {total_chunks} chunks in the file: {verdict}")
    pairs = [("h5lens-0", "kerchunk-0")] + [
        ("h5lens-default", k) for k, m in results.items() if m.approach.tool == "kerchunk" and m.approach.inline
    ]
    for left, right in pairs:
        a, b = results.get(left), results.get(right)
        if a is None or b is None or a.stats is None or b.stats is None:
            continue
        same = all(a.stats[f] == b.stats[f] for f in ("referenced", "inline", "referenced_digest"))
        lines.append(
            f"{left} vs {right}: "
            + ("same referenced (offset, length) set and inline count" if same else "DIFFERENT chunk references")
        )
    return lines


def environment() -> dict[str, str]:
    import kerchunk
    import zarr

    import h5lens

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "numpy": np.__version__,
        "zarr": zarr.__version__,
        "h5lens": f"{h5lens.__version__} (source digest {source_digest(os.path.dirname(h5lens.__file__))})",
        "kerchunk": kerchunk.__version__,
    }


def source_digest(package_dir: str) -> str:
    """A short hash of the package's .py files: tells runs of different working trees apart."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(package_dir):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            with open(os.path.join(root, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:12]


# ---------------------------------------------------------------------------
# Profiling h5lens (in a worker, so the parent's imports and objects don't show up)
# ---------------------------------------------------------------------------


def profile_main(argv: list[str]) -> None:
    import cProfile
    import pstats

    import h5lens

    parser = argparse.ArgumentParser(prog=f"scan_chunks.py {PROFILE_COMMAND}")
    parser.add_argument("--file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)

    calls: list[tuple[str, Callable[[], Any]]] = [
        ("h5lens.index(path, inline_threshold=0)", lambda: h5lens.index(args.file, inline_threshold=0)),
        ("h5lens.index(path)", lambda: h5lens.index(args.file)),
    ]
    manifest = None
    for title, call in calls:
        profiler = cProfile.Profile()
        manifest = profiler.runcall(call)
        print_profile(title, pstats.Stats(profiler), args.top)
    profiler = cProfile.Profile()
    profiler.runcall(manifest.to_json, args.out)
    print_profile("Manifest.to_json (of the default index)", pstats.Stats(profiler), args.top)


def print_profile(title: str, stats: Any, top: int) -> None:
    entries = [(loc, data) for loc, data in stats.stats.items()]  # (file, line, func) -> (cc, nc, tt, ct, callers)
    total = stats.total_tt
    print(f"\n### cProfile: {title}  (total {total:.3f} s, profiler overhead included)")
    by_self = sorted(entries, key=lambda e: e[1][2], reverse=True)[:top]
    print_profile_table("top by own time (tottime)", by_self)
    ours = [e for e in entries if "h5lens" in e[0][0]]
    by_cum = sorted(ours, key=lambda e: e[1][3], reverse=True)[:top]
    print_profile_table("h5lens functions by cumulative time", by_cum)


def print_profile_table(heading: str, entries: list[tuple[tuple[str, int, str], tuple]]) -> None:
    print(f"-- {heading}")
    body = [
        [f"{data[2]:.3f}", f"{data[3]:.3f}", str(data[1]), f"{short_path(loc[0])}:{loc[1]}", loc[2]]
        for loc, data in entries
    ]
    print_table(["tottime", "cumtime", "calls", "where", "function"], body, right={0, 1, 2})


def short_path(path: str) -> str:
    """``src/h5lens/...`` for the project, ``h5py/...`` for installed packages, ``~`` for C built-ins."""
    if "/src/" in path:
        return "src/" + path.split("/src/", 1)[1]
    for marker in ("/site-packages/", "/lib/python"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def run_profile(file: str, workdir: str, timeout: float) -> str:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        PROFILE_COMMAND,
        "--file",
        file,
        "--out",
        os.path.join(workdir, "profile.json"),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"profiling timed out after {timeout:.0f} s"
    return proc.stdout if proc.returncode == 0 else f"profiling failed: {proc.stderr.strip()[-2000:]}"


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults = FileSpec()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", help="HDF5 file to use; generated there if missing (default: a temp file)")
    p.add_argument("--regenerate", action="store_true", help="overwrite --file even if it exists")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per approach (default: %(default)s)")
    p.add_argument(
        "--timeout", type=float, default=300, help="seconds before a run counts as hung (default: %(default)s)"
    )
    p.add_argument("--json", metavar="OUT", help="also write all numbers to this JSON file")
    p.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help=f"cProfile h5lens: auto = when index takes over {PROFILE_TRIGGER}x the bare walk (default: auto)",
    )
    p.add_argument("--gc-off", action="store_true", help="disable the cyclic GC in every run, not just kerchunk's")
    p.add_argument("--skip-kerchunk", action="store_true", help="time only the bare walk and h5lens")
    shape = p.add_argument_group("generated file (ignored when --file exists)")
    shape.add_argument("--rows", type=int, default=defaults.rows, help="n_obs (default: %(default)s)")
    shape.add_argument("--dense-cols", type=int, default=defaults.dense_cols, help="(default: %(default)s)")
    shape.add_argument(
        "--dense-chunk", type=int, nargs=2, default=defaults.dense_chunk, metavar=("ROWS", "COLS"),
        help="(default: %s %s)" % defaults.dense_chunk,
    )
    shape.add_argument("--n-vars", type=int, default=defaults.n_vars, help="X columns (default: %(default)s)")
    shape.add_argument("--nnz-per-row", type=int, default=defaults.nnz_per_row, help="(default: %(default)s)")
    shape.add_argument(
        "--sparse-chunk", type=int, default=defaults.sparse_chunk, help="X/* chunk length (default: %(default)s)"
    )
    shape.add_argument(
        "--libver",
        choices=("earliest", "v108", "v110", "v112", "v114", "latest"),
        default=defaults.libver,
        help="file format bounds; 'latest' gives newer chunk indexes (default: %(default)s)",
    )
    return p.parse_args(argv)


def prepare_file(args: argparse.Namespace, workdir: str) -> tuple[str, float | None]:
    """The file to benchmark and, if it was generated now, how long that took."""
    path = args.file or os.path.join(workdir, "scan_chunks.h5")
    if os.path.exists(path) and not args.regenerate:
        print(f"reusing {path}")
        return path, None
    spec = FileSpec(
        rows=args.rows,
        dense_cols=args.dense_cols,
        dense_chunk=tuple(args.dense_chunk),
        n_vars=args.n_vars,
        nnz_per_row=args.nnz_per_row,
        sparse_chunk=args.sparse_chunk,
        libver=args.libver,
    )
    print(f"generating {path} ({spec.expected_chunks():,} chunks expected) ...", flush=True)
    seconds = generate_file(path, spec)
    print(f"  written in {seconds:.1f} s")
    return path, seconds


def print_file(path: str, infos: list[DatasetInfo]) -> int:
    total = sum(i.n_chunks for i in infos)
    print(f"\nfile: {path}  size {os.path.getsize(path) / 1e6:.1f} MB  chunks {total:,}")
    body = [
        [i.path, str(i.shape), str(i.chunks), f"{i.n_chunks:,}", f"{i.stored_bytes / max(i.n_chunks, 1):.0f}"]
        for i in infos
    ]
    print_table(["dataset", "shape", "chunks", "n chunks", "mean stored B/chunk"], body, right={3, 4})
    if total < MIN_CHUNKS:
        print(f"  note: fewer than {MIN_CHUNKS:,} chunks; the numbers say less about scaling")
    return total


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="h5lens-bench-")
    try:
        return benchmark(args, workdir, started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def benchmark(args: argparse.Namespace, workdir: str, started: float) -> int:
    path, generate_seconds = prepare_file(args, workdir)
    infos = describe_file(path)
    total_chunks = print_file(path, infos)
    env = environment()
    print("\nenvironment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    warm = warm_page_cache(path)
    print(f"page cache: warm for every run (file read once in {warm:.2f} s before timing)")

    h5lens_inline = default_inline_threshold()
    chosen = [a for a in approaches(h5lens_inline) if not (args.skip_kerchunk and a.tool == "kerchunk")]
    kerchunk_key = f"kerchunk-{h5lens_inline + 1}"
    print(f"\ntiming {len(chosen)} approaches x {args.repeat} runs, each run in a fresh subprocess:", flush=True)
    results = measure_all(
        chosen, path, workdir, h5lens_inline=h5lens_inline, repeat=args.repeat, gc_off=args.gc_off, timeout=args.timeout
    )

    rows = timing_rows(results)
    ratios = ratio_lines(rows, kerchunk_key)
    print(f"\n## Times ({total_chunks:,} chunks; floor = bare walk with a no-op callback)")
    print_timings(rows, args.repeat)
    print("\n## Ratios (of medians)")
    print_table(["ratio", "value"], [[label, fmt_ratio(value)] for label, value in ratios], right={1})
    local_scan = dict(ratios).get("h5lens.index(inline=0) / bare walk (noop)")
    if local_scan is not None:
        verdict = "met" if local_scan <= 1.5 else "MISSED"
        print(f"\ntarget: local scan within 1.5x of a bare chunk_iter walk: {local_scan:.2f}x ({verdict})")
    print("\n## Outputs (reference JSON as written; from the first run of each)")
    print_outputs(results, total_chunks)
    print_notes(results, args.gc_off)

    profile_text = maybe_profile(args, rows, path, workdir)
    if args.json:
        dump_json(args.json, path, infos, env, results, rows, ratios, generate_seconds, profile_text)
        print(f"\nnumbers written to {args.json}")
    print(f"\ntotal wall time {time.perf_counter() - started:.1f} s")
    return 1 if any(m.error for m in results.values() if m.approach.tool != "kerchunk") else 0


def print_notes(results: dict[str, Measurement], gc_off: bool) -> None:
    print("\nnotes:")
    print("  - times include opening the file; imports are done before the clock starts")
    gc_line = "every run" if gc_off else "kerchunk runs only (h5lens and the bare walk keep it on, as users run them)"
    print(f"  - cyclic GC disabled in: {gc_line}")
    print("  - kerchunk reads through an fsspec file object and writes zarr v2 keys; h5lens uses libhdf5's")
    print("    own file driver for local paths and writes zarr v3 keys with a URL template")
    for key, m in results.items():
        if m.error:
            print(f"  - {key}: {m.error}")
        if m.warnings:
            print(f"  - {key}: {len(m.warnings)} warning(s), first: {m.warnings[0][:300]}")


def maybe_profile(args: argparse.Namespace, rows: list[Row], path: str, workdir: str) -> str | None:
    slowdown = ratio(find_row(rows, "h5lens-0", 0), find_row(rows, "bare-noop", 0))
    slow = slowdown is not None and slowdown > PROFILE_TRIGGER
    wanted = args.profile == "always" or (args.profile == "auto" and slow)
    if not wanted:
        return None
    why = "requested" if args.profile == "always" else f"h5lens.index is {slowdown:.2f}x the bare walk"
    print(f"\n## Profile of h5lens ({why})", flush=True)
    text = run_profile(path, workdir, args.timeout)
    print(text)
    return text


def dump_json(
    out: str,
    path: str,
    infos: list[DatasetInfo],
    env: dict[str, str],
    results: dict[str, Measurement],
    rows: list[Row],
    ratios: list[tuple[str, float | None]],
    generate_seconds: float | None,
    profile_text: str | None,
) -> None:
    payload = {
        "file": {
            "path": path,
            "bytes": os.path.getsize(path),
            "chunks": sum(i.n_chunks for i in infos),
            "generate_seconds": generate_seconds,
            "datasets": [asdict(i) for i in infos],
        },
        "environment": env,
        "page_cache": "warm",
        "timings": [asdict(r) for r in rows],
        "ratios": {label: value for label, value in ratios},
        "approaches": {
            key: {
                "label": m.approach.label,
                "inline_threshold": m.approach.inline,
                "runs": m.runs,
                "gc_disabled": m.gc_disabled,
                "stats": m.stats,
                "error": m.error,
                "warnings": m.warnings,
            }
            for key, m in results.items()
        },
        "profile": profile_text,
    }
    with open(out, "w") as f:
        json.dump(payload, f, indent=2)


# Internal sub-commands: the parent re-runs this file as a worker for each timed run.
SUBCOMMANDS: dict[str, Callable[[list[str]], None]] = {WORKER_COMMAND: worker_main, PROFILE_COMMAND: profile_main}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        SUBCOMMANDS[sys.argv[1]](sys.argv[2:])
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
