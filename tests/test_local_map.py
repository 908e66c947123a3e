"""Local chunks read through a read-only map of the file (h5lens.fetch.mapped): the same
bytes as libhdf5 stores, pread when asked, a file cut short refused (never SIGBUS), and the
map's pages let go as reads go on."""

from __future__ import annotations

import mmap
import os
import sys

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.fetch import mapped


@pytest.fixture
def chunked(tmp_path):
    path = tmp_path / "chunked.h5"
    rng = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=rng.integers(0, 50, 300_000).astype("<i4"), chunks=(3_000,), compression="gzip")
    return path


def _stored(path, name):
    with h5py.File(path) as f:
        x = f[name]
        return [x.id.read_direct_chunk((i * x.chunks[0],))[1] for i in range(x.id.get_num_chunks())]


@pytest.mark.parametrize("reads", ["map", "pread"])
def test_chunks_read_as_libhdf5_stores_them(chunked, reads, monkeypatch):
    """Every stored chunk, read at once, is the bytes h5py's ``read_direct_chunk`` gives:
    views of a map of the file by default, bytes read with pread under
    ``H5LENS_LOCAL_READS=pread``; the values read as h5py reads them either way."""
    monkeypatch.setenv(mapped.LOCAL_READS_ENV, reads)
    store = h5lens.open_store(h5lens.index(chunked, inline_threshold=0))
    found = store.read_chunks("x")
    assert [bytes(found[i]) for i in range(len(found))] == _stored(chunked, "x")
    assert all(isinstance(v, memoryview) and isinstance(v.obj, mmap.mmap) == (reads == "map") for v in found.values())
    starts = np.arange(0, 290_000, 2_900)
    with h5py.File(chunked) as f:
        expected = np.concatenate([f["x"][a : a + 1_000] for a in starts.tolist()])
    np.testing.assert_array_equal(store.read_runs("x", starts, starts + 1_000), expected)


def test_a_file_cut_short_after_opening_is_refused(chunked):
    """The file shrinks after the store opened it: a read of chunks now past its end is
    refused naming the first such chunk (pread's error), not a SIGBUS from the map; one
    that grew is mapped again and reads as before."""
    store = h5lens.open_store(h5lens.index(chunked, inline_threshold=0))
    assert store.read_chunks("x", np.arange(5))  # mapped, at the old size
    with open(chunked, "ab") as f:
        f.write(b"\0" * 4096)
    assert [bytes(v) for v in store.read_chunks("x").values()] == _stored(chunked, "x")
    with h5py.File(chunked) as f:
        offset = f["x"].id.get_chunk_info_by_coord((297_000,)).byte_offset
    os.truncate(chunked, offset + 10)
    starts = np.arange(0, 300_000, 3_000)
    with pytest.raises(h5lens.SourceReadError, match="past the end") as raised:
        store.read_runs("x", starts, starts + 1_000)
    assert "'x/c/99'" in " ".join(getattr(raised.value, "__notes__", [])), raised.value


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident file pages off /proc/self/status (Linux)")
def test_pages_read_through_the_map_do_not_pile_up(tmp_path, monkeypatch):
    """Reading 40 MB of chunks through the map, a megabyte at a time, leaves about the
    last few megabytes of the file's pages resident (the map lets its pages go every
    RESIDENT_BYTES), not all 40."""
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.random.default_rng(0).random(5_000_000), chunks=(32_768,), compression="gzip", compression_opts=1)
    monkeypatch.setattr(mapped, "RESIDENT_BYTES", 1 << 20)
    store = h5lens.open_store(h5lens.index(path, inline_threshold=0))
    chunks = store.manifest.chunks["x"].length.size

    def resident_file_kib() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("RssFile:"))

    before = resident_file_kib()
    total = 0
    for first in range(0, chunks, 4):
        for view in store.read_chunks("x", np.arange(first, min(first + 4, chunks))).values():
            total += int(np.frombuffer(view, np.uint8)[::4096].sum(dtype=np.int64))  # every page touched
    grown = resident_file_kib() - before
    assert total > 0
    assert grown < 8 << 10, f"{grown} KiB of the file's pages resident after reading {os.path.getsize(path) >> 20} MiB"
