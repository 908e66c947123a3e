#!/usr/bin/env python
"""Benchmark: indexing a MATLAB v7.3 file of 15,000 datasets, against h5py visiting and reading it.

MATLAB's v7.3 ``.mat`` files are HDF5 with a 512-byte user block; a cell array of structs
(trials, each with a few fields) becomes one group per struct under ``#refs#``, one
dataset per field, every node carrying MATLAB's attributes (``MATLAB_class`` …).
hdf5storage writes them the way MATLAB does. Side by side, on one generated file:

* h5py: ``File.visititems`` reading every dataset whole (``ds[()]``), the floor any reader
  of the file pays (it reads no attributes);
* h5lens: ``h5lens.index`` (every node, every attribute, every chunk located), and
  ``read back``: every dataset through the manifest, checked against h5py.

Medians of ``--repeat`` runs in this process; ``--json OUT`` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import h5py
import numpy as np


def generate(path: str, structs: int) -> None:
    import hdf5storage

    rng = np.random.default_rng(0)
    cells = np.empty((structs,), dtype=object)
    for i in range(structs):
        cells[i] = {"id": np.float64(i), "name": f"trial {i}", "spikes": rng.random(20), "pos": rng.random((3, 4)),
                    "ok": True}  # fmt: skip
    hdf5storage.savemat(path, {"trials": cells}, format="7.3", matlab_compatible=True)


def h5py_visit(path: str) -> int:
    count = 0

    def visit(_name: str, obj: object) -> None:
        nonlocal count
        if isinstance(obj, h5py.Dataset):
            obj[()]
            count += 1

    with h5py.File(path) as f:
        f.visititems(visit)
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--structs", type=int, default=3_000, help="structs in the cell array (5 datasets each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    import h5lens

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "trials.mat")
        generate(path, args.structs)
        datasets = h5py_visit(path)  # warm the page cache
        h5py_s = statistics.median(_timed(lambda: h5py_visit(path)) for _ in range(args.repeat))
        index_s = statistics.median(_timed(lambda: h5lens.index(path)) for _ in range(args.repeat))
        manifest = h5lens.index(path)
        root = h5lens.open(manifest)
        with h5py.File(path) as f:
            names: list[str] = []
            f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
            for name in names[:: max(1, len(names) // 500)]:
                assert np.array_equal(np.asarray(root[name][()]), np.asarray(f[name][()])), name
    result = {
        "benchmark": "matlab_scan",
        "datasets": datasets,
        "nodes": len(manifest.nodes),
        "h5py_visit_read_s": round(h5py_s, 3),
        "index_s": round(index_s, 3),
        "index_vs_h5py": round(index_s / h5py_s, 2),
        "target": "index within 2x h5py's visit and read",
    }
    print(
        f"{datasets:,} datasets ({result['nodes']:,} nodes): h5py visit+read {h5py_s:.2f} s, "
        f"h5lens.index {index_s:.2f} s = {result['index_vs_h5py']}x (target 2x)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def _timed(run: object) -> float:
    start = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
