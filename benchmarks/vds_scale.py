#!/usr/bin/env python
"""Benchmark: indexing a virtual dataset of 10^2 … 10^4 source files, against h5py reading it.

Detector and simulation pipelines write one HDF5 file per frame block and a virtual dataset
stacking them (h5py's ``VirtualLayout``). h5lens references each source's chunks where
they lie, so indexing costs a visit of every source file's metadata: it must stay linear
in sources. Side by side, per source count (one run each, in this process):

* h5py: open the virtual file and read the whole virtual dataset (libhdf5 opens every
  source: the floor any reader of the VDS pays);
* h5lens: ``h5lens.index`` of the virtual file (every source opened, its chunk index read),
  and the manifest's size against the data it references.

Prints seconds per source and the ratio to h5py; ``--json OUT`` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import h5py
import numpy as np


def generate(directory: str, sources: int, rows: int = 64, cols: int = 256) -> str:
    """``sources`` files of one (rows, cols) float32 dataset in 4 gzip chunks, and a VDS stacking them."""
    rng = np.random.default_rng(0)
    layout = h5py.VirtualLayout((sources, rows, cols), "f4")
    block = rng.random((rows, cols)).astype("f4")
    for i in range(sources):
        name = f"frames_{i:05d}.h5"
        with h5py.File(os.path.join(directory, name), "w") as f:
            f.create_dataset("data", data=block + i, chunks=(rows // 4, cols), compression="gzip", compression_opts=1)
        layout[i] = h5py.VirtualSource(name, "data", (rows, cols))
    path = os.path.join(directory, "stack.h5")
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("data", layout, fillvalue=np.nan)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    import h5lens

    results = []
    for count in args.sources:
        with tempfile.TemporaryDirectory() as directory:
            path = generate(directory, count)
            start = time.perf_counter()
            with h5py.File(path) as f:
                expected = f["data"][...]
            h5py_s = time.perf_counter() - start
            start = time.perf_counter()
            manifest = h5lens.index(path)
            index_s = time.perf_counter() - start
            out = os.path.join(directory, "stack.json")
            manifest.save(out)
            manifest_bytes = os.path.getsize(out)
            got = h5lens.open_group(manifest)["data"][...]
            assert np.array_equal(got, expected, equal_nan=True), "the manifest reads other values than h5py"
            row = {
                "sources": count,
                "h5py_read_s": round(h5py_s, 3),
                "index_s": round(index_s, 3),
                "index_per_source_ms": round(1e3 * index_s / count, 3),
                "vs_h5py": round(index_s / h5py_s, 2),
                "manifest_bytes": manifest_bytes,
                "data_bytes": int(expected.nbytes),
                "manifest_vs_data": round(manifest_bytes / expected.nbytes, 4),
            }
            results.append(row)
            print(
                f"{count:>6} sources: h5py read {h5py_s:7.2f} s, h5lens index {index_s:7.2f} s "
                f"({row['index_per_source_ms']} ms a source, {row['vs_h5py']}x h5py); manifest "
                f"{manifest_bytes:,} B = {100 * row['manifest_vs_data']:.2f}% of the data",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "vds_scale", "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
