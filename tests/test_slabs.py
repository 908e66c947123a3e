"""Contiguous datasets are cut into virtual chunks ("slabs") of whole rows, about
``slab_bytes`` each: few enough to keep the manifest small, small enough that reading one
value fetches one slab, not the dataset. Any slab plan reads back right, so these tests
state the rule itself (docs/index.md: "virtual chunks of whole rows, about 4 MiB each"):
the dataset whole if it fits; else the most rows that fit, or down to half as many (at most
4096 fewer) if that leaves a smaller partial last slab, the most rows among the best.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import h5lens
from h5lens.scan.chunks import plan_slabs


def reference_plan(shape: tuple[int, ...], itemsize: int, target: int) -> tuple[int, ...]:
    full = tuple(max(1, s) for s in shape)
    row_bytes = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    if not shape or row_bytes * shape[0] <= target or shape[0] <= 1 or row_bytes == 0:
        return full
    most = max(1, target // row_bytes)
    if most >= shape[0]:
        return full
    candidates = range(max(1, most // 2, most - 4096), most + 1)
    rows = max(candidates, key=lambda r: (-(shape[0] % r), r))  # smallest tail, then most rows
    return (rows, *full[1:])


@settings(max_examples=400, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5000), min_size=1, max_size=3).map(tuple),
    itemsize=st.sampled_from([1, 2, 4, 8, 16]),
    target=st.integers(1, 1 << 16),
)
def test_slab_plan_follows_the_rule(shape, itemsize, target):
    plan = plan_slabs(shape, itemsize, target)
    assert plan == reference_plan(shape, itemsize, target)
    row_bytes = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    if plan[0] < max(1, shape[0]) and plan[0] > 1:  # cut: each slab fits the target
        assert plan[0] * row_bytes <= target


@pytest.mark.parametrize(
    ("shape", "expected_rows"),
    [
        ((1000, 10), 100),  # rows of 40 bytes: 100 of them make 4000 bytes, and divide 1000
        ((1001, 10), 91),  # 100 rows leave 1; 91 rows divide 1001 (7 * 11 * 13)
        ((50, 10), 50),  # the whole dataset fits
    ],
)
def test_the_scanner_cuts_a_contiguous_dataset_as_planned(tmp_path, shape, expected_rows):
    path = tmp_path / "contiguous.h5"
    values = np.arange(int(np.prod(shape)), dtype="<i4").reshape(shape)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values)  # contiguous
    manifest = h5lens.index(path, slab_bytes=4000, inline_threshold=0)
    chunk_shape = manifest.nodes["x"]["chunk_grid"]["configuration"]["chunk_shape"]
    assert chunk_shape == [expected_rows, shape[1]]
    assert tuple(chunk_shape) == reference_plan(shape, 4, 4000)
    np.testing.assert_array_equal(h5lens.open_group(manifest)["x"][...], values)
