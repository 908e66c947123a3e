"""The global heap check (h5lens.scan.global_heap) reads a variable-length dataset's element
descriptors before libhdf5 does, undoing its filters through the filter table's decoders:
a crafted deflate chunk that claims far more than a chunk's bytes is never inflated past
them, whatever the stream says; an honest one gives the collections libhdf5 would read."""

from __future__ import annotations

import os
import tracemalloc
import zlib

import h5py
import numpy as np
import pytest

from h5lens.scan.global_heap import HeapCheck
from h5lens.scan.hdf5.superblock import read_superblock


def _check(path: str) -> tuple[HeapCheck, h5py.File]:
    h5 = h5py.File(path, "r")
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size

    def read(offset: int, length: int) -> bytes:
        return os.pread(fd, length, offset)

    superblock = read_superblock(read(0, 4096))
    return HeapCheck(h5, read, size, lambda: superblock), h5


@pytest.mark.parametrize("shuffle", [False, True])
def test_descriptors_are_read_through_the_filter_table(tmp_path, shuffle):
    path = str(tmp_path / "strings.h5")
    with h5py.File(path, "w") as f:
        words = np.array([f"word {i}" for i in range(400)], dtype=object)
        f.create_dataset("s", data=words, dtype=h5py.string_dtype(), chunks=(50,), compression="gzip",
                         shuffle=shuffle)
    check, h5 = _check(path)
    with h5:
        descriptors = check._descriptors(h5["s"])
        check.check_dataset(h5["s"], "/s")
    assert descriptors is not None and len(descriptors) == 400  # every element, non-empty
    assert check.checked and set(descriptors.tolist()) == check.checked  # the collections h5py reads from


def test_a_chunk_claiming_more_than_its_bytes_is_not_inflated_past_them(tmp_path):
    path = str(tmp_path / "bomb.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("s", data=np.array(["a", "b"] * 50, dtype=object), dtype=h5py.string_dtype(),
                         chunks=(100,), compression="gzip")
        bomb = zlib.compress(bytes(256 << 20), 9)  # 256 MB of zeros in a chunk of 1,600 bytes
        f["s"].id.write_direct_chunk((0,), bomb)
    check, h5 = _check(path)
    tracemalloc.start()
    try:
        with h5:
            check.check_dataset(h5["s"], "/s")  # the chunk does not decode: nothing to check (h5py fails on it)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / 1e6:.0f} MB allocated to inflate one chunk of 1,600 bytes"
    assert not check.checked
