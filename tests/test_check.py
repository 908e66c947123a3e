"""A chunk that does not decode is named: its key, array, source and byte range."""

from __future__ import annotations

from dataclasses import replace

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.read.check import check_array, read_checked


@pytest.fixture
def damaged(tmp_path):
    path = tmp_path / "cc.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(10000, dtype="f8"), chunks=(1000,), compression="gzip")
        f.create_dataset("y", data=np.arange(10000, dtype="f8").reshape(100, 100), chunks=(10, 10), compression="gzip")
    manifest = h5lens.index(path, inline_threshold=0)
    for name, index in (("x", 5), ("y", (3, 4))):  # a bumped offset: zlib sees no header
        offset = manifest.chunks[name].offset.copy()
        offset[index] += 1
        manifest = replace(manifest, chunks={**manifest.chunks, name: replace(manifest.chunks[name], offset=offset)})
    return path, h5lens.open_group(manifest)


def test_read_of_good_chunks_is_h5pys(damaged):
    path, group = damaged
    with h5py.File(path) as f:
        np.testing.assert_array_equal(read_checked(group["x"], slice(0, 4000)), f["x"][0:4000])


@pytest.mark.parametrize(
    ("name", "selection", "key"),
    [("x", slice(4500, 5200), "x/c/5"), ("y", (slice(30, 40), slice(0, 100)), "y/c/3/4"), ("y", ..., "y/c/3/4")],
)
def test_failing_read_names_the_chunk(damaged, name, selection, key):
    path, group = damaged
    with pytest.raises(h5lens.SourceReadError) as info:
        read_checked(group[name], selection)
    message = str(info.value)
    assert f"chunk '{key}' of /{name}" in message and str(path) in message and "does not decode" in message
    table = group.store.manifest.chunks[name]
    index = tuple(int(i) for i in key.split("/")[2:])
    start, length = int(table.offset[index]), int(table.length[index])
    assert f"bytes {start}-{start + length}" in message


def test_check_array_finds_the_bad_chunk(damaged):
    _, group = damaged
    with pytest.raises(h5lens.SourceReadError, match="'x/c/5'"):
        check_array(group["x"])
    with pytest.raises(h5lens.SourceReadError, match="'y/c/3/4'"):
        check_array(group["y"])
