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

Two layouts (``--layouts``): cell arrays of structs, and cell arrays of cells.

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


def generate(path: str, structs: int, layout: str = "structs") -> None:
    """``structs``: a cell array of structs of 5 fields (a group per struct, a dataset per
    field); ``cells``: a cell array of cells of 4 elements (an array of object references
    per cell, a dataset per element), as EEGLAB's event tables hold them."""
    import hdf5storage

    rng = np.random.default_rng(0)
    cells = np.empty((structs,), dtype=object)
    for i in range(structs):
        if layout == "cells":
            cell = np.empty((4,), dtype=object)
            cell[:] = [f"type {i % 7}", np.float64(i), rng.random(4), np.int32(i)]
            cells[i] = cell
            continue
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
    parser.add_argument("--structs", type=int, default=3_000, help="structs (or cells) in the cell array")
    parser.add_argument("--layouts", default="structs,cells", help="comma-separated: structs, cells")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = [_run(layout, args.structs, args.repeat) for layout in args.layouts.split(",")]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "matlab_scan", "target": "index within 2x h5py's visit and read",
                       "layouts": results}, f, indent=1)  # fmt: skip
    return 0


def _run(layout: str, structs: int, repeat: int) -> dict[str, object]:
    import h5lens

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "trials.mat")
        generate(path, structs, layout)
        datasets = h5py_visit(path)  # warm the page cache
        h5py_s = statistics.median(_timed(lambda: h5py_visit(path)) for _ in range(repeat))
        index_s = statistics.median(_timed(lambda: h5lens.index(path)) for _ in range(repeat))
        manifest = h5lens.index(path)
        root = h5lens.open(manifest)
        with h5py.File(path) as f:
            names: list[str] = []
            f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
            for name in names[:: max(1, len(names) // 500)]:
                if f[name].dtype.kind != "O":  # a cell's references read back as the paths of their targets
                    assert np.array_equal(np.asarray(root[name][()]), np.asarray(f[name][()])), name
    result = {
        "layout": layout,
        "datasets": datasets,
        "nodes": len(manifest.nodes),
        "h5py_visit_read_s": round(h5py_s, 3),
        "index_s": round(index_s, 3),
        "index_vs_h5py": round(index_s / h5py_s, 2),
    }
    print(
        f"{layout}: {datasets:,} datasets ({result['nodes']:,} nodes): h5py visit+read {h5py_s:.2f} s, "
        f"h5lens.index {index_s:.2f} s = {result['index_vs_h5py']}x (target 2x)"
    )
    return result


def _timed(run: object) -> float:
    start = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
