"""The decode kernel (h5lens.engine.kernel) over every way through it, compared with h5py.

Each case crosses a codec's capabilities (written into place, decoded to bytes, unshuffled)
with a chunk's size (small ones decoded as a block, big ones streamed into their place in the
output) and a region's shape (whole chunks, partial edges, one chunk, many)."""

from __future__ import annotations

from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5lens

FILTERS = {
    "none": {},
    "gzip": {"compression": "gzip"},
    "gzip+shuffle": {"compression": "gzip", "shuffle": True},
    "lzf": {"compression": "lzf"},
    "zstd": dict(hdf5plugin.Zstd()),
    "bzip2": dict(hdf5plugin.BZip2()),
}
# (shape, chunks): one big chunk (streamed), many big chunks with partial edges, small chunks
# (a block), small chunks over 3-D
LAYOUTS = {
    "one-big-2d": ((100, 100), (100, 100)),
    "big-edges-2d": ((250, 130), (100, 100)),
    "small-2d": ((300, 40), (7, 9)),
    "small-3d": ((20, 30, 11), (4, 5, 3)),
}
REGIONS = {
    "whole": lambda shape: tuple(slice(None) for _ in shape),
    "inner": lambda shape: tuple(slice(n // 5, n - n // 4) for n in shape),
    "corner": lambda shape: tuple(slice(n - 3, n) for n in shape),
}


@pytest.fixture(scope="module")
def kernel_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kernel") / "kernel.h5"
    rng = np.random.default_rng(7)
    with h5py.File(path, "w") as f:
        for filter_name, options in FILTERS.items():
            for layout_name, (shape, chunks) in LAYOUTS.items():
                values = rng.normal(size=shape).astype("<f8")
                f.create_dataset(f"{filter_name}/{layout_name}", data=values, chunks=chunks, **options)
    return path


@pytest.fixture(scope="module")
def kernel_group(kernel_file: Path) -> h5lens.Group:
    return h5lens.open(h5lens.index(kernel_file, inline_threshold=0))


@pytest.mark.parametrize("region", REGIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("filter_name", FILTERS)
def test_kernel_reads_equal_h5py(kernel_file: Path, kernel_group: h5lens.Group, filter_name: str, layout: str, region: str) -> None:
    path = f"{filter_name}/{layout}"
    with h5py.File(kernel_file) as f:
        selection = REGIONS[region](f[path].shape)
        expected = f[path][selection]
    np.testing.assert_array_equal(kernel_group[path][selection], expected)


def test_parts_run_once_each_in_order_while_the_pool_is_busy() -> None:
    """in_parallel gives every part's result in order, each part run once; with every pool
    thread busy (another plan's job), the calling thread runs the parts nobody started and
    does not wait on a part a pool thread took while others remain."""
    import threading

    from h5lens.engine import kernel

    release = threading.Event()
    blockers = [kernel.pool().submit(release.wait, 30) for _ in range(kernel.THREADS)]
    runs: list[tuple[int, str]] = []
    try:
        parts = [range(i, i + 1) for i in range(12)]
        found = kernel.in_parallel(lambda part: runs.append((part.start, threading.current_thread().name)) or part.start * 10, parts)
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()
    assert found == [i * 10 for i in range(12)]
    assert sorted(start for start, _ in runs) == list(range(12))
    assert {name for _, name in runs} == {threading.current_thread().name}  # the pool was busy: all ran here


def test_parts_are_shared_with_idle_pool_threads() -> None:
    import threading
    import time

    from h5lens.engine import kernel

    if kernel.THREADS < 2:
        pytest.skip("one decode thread: nothing to share")
    names: set[str] = set()

    def work(part: range) -> int:
        names.add(threading.current_thread().name)
        time.sleep(0.02)  # long enough for an idle pool thread to take a part
        return part.start

    assert kernel.in_parallel(work, [range(i, i + 1) for i in range(8)]) == list(range(8))
    assert len(names) > 1
