#!/usr/bin/env python
"""Benchmark: listing and validating a manifest with 100,000 nodes, against h5py's visititems.

NWB files hold 10^4-10^5 objects. Walking a manifest's tree must cost what walking the
HDF5 file costs: linear in nodes. Side by side, on one generated file (groups of small
datasets, like NWB's tables and time series):

* h5py: ``File.visititems`` over every object (the floor a reader of the HDF5 file pays);
* h5lens: every group's children through ``Manifest.children``; every group listed through
  the zarr store (``list_dir``, what zarr and anndata call); ``h5lens.validate``; and a
  full ``zarr.Group.members(max_depth=None)`` walk over the store.

Medians of ``--repeat`` runs in this process, manifest loaded once. Results print as
ratios to the h5py walk; ``--json OUT`` writes them.

``--wide-group N`` also indexes one group of N soft links (default 10^6) and checks that
every member is in the manifest, as h5py lists it (the walk lists a group in one link
iteration: 17 s here for 10^6, where per-member lookups took 299 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

import h5py
import numpy as np


def generate(path: str, nodes: int) -> None:
    """``nodes`` objects: groups of 4 tiny datasets each (5 nodes per group), 100 groups per parent."""
    groups = max(1, nodes // 5)
    with h5py.File(path, "w") as f:
        for g in range(groups):
            group = f.require_group(f"session/p{g // 100}/g{g}")
            group.attrs["index"] = g
            for name in ("data", "timestamps", "unit", "flags"):
                group.create_dataset(name, data=np.arange(4, dtype="i4"))


def timed(repeat: int, func) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000, help="objects in the generated file (default: %(default)s)")
    parser.add_argument("--file", help="HDF5 file to use (generated there if missing)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--wide-group", type=int, default=1_000_000, metavar="N",
                        help="members of the one wide group indexed afterwards (0: skip; default %(default)s)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import zarr

    import h5lens
    from h5lens.store import ManifestStore

    workdir = tempfile.mkdtemp(prefix="h5lens-nodes-")
    path = args.file or os.path.join(workdir, "many_nodes.h5")
    if not os.path.exists(path):
        print(f"generating {path} ({args.nodes:,} objects) ...", flush=True)
        start = time.perf_counter()
        generate(path, args.nodes)
        print(f"  written in {time.perf_counter() - start:.1f} s")

    with h5py.File(path, "r") as f:
        counted: list[str] = []
        f.visititems(lambda name, obj: counted.append(name))
        objects = len(counted)
        h5py_walk = timed(args.repeat, lambda: f.visititems(lambda name, obj: None))

    start = time.perf_counter()
    manifest = h5lens.index(path)
    scan = time.perf_counter() - start
    out = os.path.join(workdir, "m.json")
    manifest.to_json(out)
    start = time.perf_counter()
    manifest = h5lens.Manifest.from_json(out)
    load = time.perf_counter() - start
    groups = manifest.groups()
    print(f"file: {objects:,} objects; manifest: {len(manifest.nodes):,} nodes, {len(groups):,} groups")

    def children_of_every_group() -> None:
        for group in groups:
            manifest.children(group)

    store = ManifestStore(manifest)

    async def list_every_group() -> None:
        for group in groups:
            async for _ in store.list_dir(group):
                pass

    def members() -> None:
        root = zarr.open_group(ManifestStore(manifest), mode="r", zarr_format=3)
        n = sum(1 for _ in root.members(max_depth=None))
        assert n == len(manifest.nodes) - 1, n

    problems: list = []

    def validate() -> None:
        problems[:] = h5lens.validate(manifest)

    rows = {
        "h5py visititems (floor)": h5py_walk,
        "Manifest.children, every group": timed(args.repeat, children_of_every_group),
        "store.list_dir, every group": timed(args.repeat, lambda: asyncio.run(list_every_group())),
        "h5lens.validate": timed(args.repeat, validate),
        "zarr Group.members(max_depth=None)": timed(1, members),
    }
    assert not problems, problems[:3]
    width = max(map(len, rows))
    print(f"\n{'step':<{width}}  {'median s':>9}  {'× h5py walk':>11}")
    for name, seconds in rows.items():
        print(f"{name:<{width}}  {seconds:>9.3f}  {seconds / h5py_walk:>11.2f}")
    print(f"\n(once: scan {scan:.1f} s, Manifest.from_json {load:.2f} s)")
    wide = wide_group(os.path.join(workdir, "wide.h5"), args.wide_group) if args.wide_group else None
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"objects": objects, "nodes": len(manifest.nodes), "seconds": rows, "scan": scan, "load": load,
                       "wide_group": wide}, f, indent=2)  # fmt: skip
    return 0


def wide_group(path: str, members: int) -> dict[str, float]:
    """Index one group of ``members`` soft links; every member must be in the manifest."""
    import h5lens

    with h5py.File(path, "w", libver="latest") as f:
        f["target"] = [1, 2, 3]
        group = f.create_group("wide")  # kept: the link proxy does not keep the group open
        links = group.id.links
        for i in range(members):  # the low-level call: h5py's g[name] = ... takes minutes
            links.create_soft(b"m%d" % i, b"/target")
    start = time.perf_counter()
    manifest = h5lens.index(path)
    scan = time.perf_counter() - start
    root = h5lens.open(manifest)
    with h5py.File(path) as f:
        h5py_count = len(f["wide"])
        start = time.perf_counter()
        listed = len(root["wide"])
        listing = time.perf_counter() - start
        assert listed == h5py_count == members, (listed, h5py_count, members)
        last = f"m{members - 1}"
        assert root["wide"].link(last).path == "/target"
        assert list(root[f"wide/{last}"][()]) == list(f[f"wide/{last}"][()])
    print(f"\nwide group: {members:,} soft links indexed in {scan:.1f} s, listed in {listing:.2f} s (all present)")
    return {"members": members, "scan": scan, "listing": listing}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
