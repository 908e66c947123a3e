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
