"""Filters are never dropped at indexing: files with old data layout messages (as PyTables
1.x and 2.x wrote them, libhdf5 before 1.6.3) and datasets whose partial edge chunks
h5lens cannot tell filtered or not.

A PyTables table of those years (gzip-compressed compound records, one chunk larger than
the table) was once indexed with no zlib codec: its deflate streams were referenced as
raw records. Every array any test indexes is checked against libhdf5's filter list
(``tests/pipeline_oracle.py``, run by ``tests/conftest.py``); these tests build the cases
that once lost a filter.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.scan import chunks as chunk_scan
from h5lens.scan.hdf5 import UnsupportedIndexError
from pipeline_oracle import assert_codecs_follow_filters
from shared_data import DATA, REQUIRED

# PyTables' particle table (its tutorial's and its test files' "Particle" records)
PARTICLE = np.dtype(
    [("ADCcount", "<i2"), ("TDCcount", "u1"), ("grid_i", "<i4"), ("grid_j", "<i4"), ("idnumber", "<i8"),
     ("name", "S16"), ("pressure", "<f4"), ("temperature", "<f8")]
)  # fmt: skip


def _particles(n: int) -> np.ndarray:
    rows = np.zeros(n, PARTICLE)
    rows["ADCcount"] = np.arange(n) * 256
    rows["TDCcount"] = np.arange(n) % 256
    rows["grid_i"] = np.arange(n)
    rows["grid_j"] = 10 - np.arange(n)
    rows["idnumber"] = np.arange(n, dtype=np.int64) << 32
    rows["name"] = [f"Particle: {i:6d}".encode() for i in range(n)]
    rows["pressure"] = np.arange(n) ** 2
    rows["temperature"] = np.arange(n) ** 2
    return rows


def _old_layout(path: Path, name: str, rows: np.ndarray, chunk: int, *, version: int = 1) -> None:
    """A gzip-compressed table whose data layout message is of ``version`` 1 or 2, as
    libhdf5 before 1.6.3 wrote it (PyTables 1.x). libhdf5 writes version 3 at the earliest;
    for a 1-d dataset the older message (dimensionality before the class, 5 reserved
    bytes) takes the 24 bytes the version 3 message is padded to, so it is rewritten in place."""
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset(name, data=rows, chunks=(chunk,), maxshape=(None,), compression="gzip", compression_opts=3)
    data = bytearray(path.read_bytes())
    tail = struct.pack("<II", chunk, rows.dtype.itemsize)
    # version 3, chunked, 2 dimensions (the chunk's and the element size), the B-tree's address
    at = [i for i in range(len(data) - 19) if data[i : i + 3] == b"\x03\x02\x02" and data[i + 11 : i + 19] == tail]
    assert len(at) == 1, "the version 3 layout message was not found once"
    start = at[0]
    address = bytes(data[start + 3 : start + 11])
    data[start : start + 24] = bytes([version, 2, 2]) + bytes(5) + address + tail
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(("nrows", "chunk"), [(15, 4096), (1000, 256)], ids=["one-partial-chunk", "partial-edge"])
def test_old_layout_keeps_the_filter(tmp_path, caplog, version, nrows, chunk):
    path = tmp_path / "tables1x.h5"
    _old_layout(path, "detector/table", _particles(nrows), chunk, version=version)
    with h5py.File(path) as f:
        expected = f["detector/table"][...]
        assert [f["detector/table"].id.get_create_plist().get_filter(i)[0] for i in range(1)] == [1]
    with caplog.at_level(logging.WARNING, logger="h5lens.scan"):
        manifest = h5lens.index(path)
    assert not [r for r in caplog.records if "refused" in r.getMessage()], "the walker reads old layout messages"
    codecs = [c["name"] for c in manifest.nodes["detector/table"]["codecs"]]
    assert "numcodecs.zlib" in codecs
    np.testing.assert_array_equal(h5lens.open(manifest)["detector/table"][...], expected)
    group = h5lens.open_group(manifest)
    np.testing.assert_array_equal(group["detector/table"][...], expected)


def test_edges_of_unknown_kind_never_drop_a_filter(tmp_path, monkeypatch):
    """Where the walker refuses an index and the layout's flag for unfiltered edges cannot be
    read either, the partial edge chunks are re-encoded; the other chunks keep the filters."""
    path = tmp_path / "t.h5"
    rows = _particles(1000)
    with h5py.File(path, "w") as f:
        f.create_dataset("small", data=rows[:15], chunks=(4096,), maxshape=(None,), compression="gzip")
        f.create_dataset("edge", data=rows, chunks=(256,), compression="gzip", shuffle=True)
    monkeypatch.setattr(chunk_scan.IndexWalks, "get", lambda self, dsid: UnsupportedIndexError("a test refuses it"))
    monkeypatch.setattr(chunk_scan.IndexWalks, "unfiltered_edges", lambda self, dsid: None)
    manifest = h5lens.index(path)
    with h5py.File(path) as f:
        for name in ("small", "edge"):
            document = manifest.nodes[name]
            assert_codecs_follow_filters(f[name], document, manifest.chunks[name].source)
            assert "numcodecs.zlib" in [c["name"] for c in document["codecs"]]
            np.testing.assert_array_equal(h5lens.open(manifest)[name][...], f[name][...])


@pytest.mark.parametrize("fletcher32", [False, True])
def test_shuffle_by_the_element_size_libhdf5_recorded(tmp_path, fletcher32):
    """libhdf5 shuffles an array element type (``("<f4", (3,))``) as 12-byte elements (its
    cd_values), not as the 4-byte floats h5lens reads it as."""
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("xyz", shape=(300,), dtype=np.dtype(("<f4", (3,))), chunks=(50,), shuffle=True,
                              compression="gzip", fletcher32=fletcher32)  # fmt: skip
        ds[...] = np.arange(900, dtype="<f4").reshape(300, 3) * 1.5
        expected = ds[...]
        assert ds.id.get_create_plist().get_filter(0)[2] == (12,)
    manifest = h5lens.index(path)
    np.testing.assert_array_equal(h5lens.open(manifest)["xyz"][...], expected)
    np.testing.assert_array_equal(h5lens.open_group(manifest)["xyz"][...], expected)


def test_vlen_descriptors_shuffled_as_recorded(tmp_path):
    """Variable-length sequences whose shuffle filter recorded another element size than
    the 16-byte descriptors (PyTables 1.x wrote 8): their heap is read past the shuffle as
    libhdf5 undoes it, and the values are h5py's."""
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((1024,))
        dcpl.set_filter(h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FLAG_OPTIONAL, (8,))
        dcpl.set_deflate(1)
        space = h5py.h5s.create_simple((3,), (h5py.h5s.UNLIMITED,))
        tid = h5py.h5t.vlen_create(h5py.h5t.NATIVE_INT32)
        ds = h5py.Dataset(h5py.h5d.create(f.id, b"vlarray1", tid, space, dcpl=dcpl))
        ds[...] = np.array([np.array([5, 6], "i4"), np.array([5, 6, 7], "i4"), np.array([5, 6, 9, 8], "i4")], object)
        assert ds.id.get_create_plist().get_filter(0)[2] == (8,)
        expected = ds[...]
    got = h5lens.open(h5lens.index(path))["vlarray1"][...]
    assert [list(v) for v in got] == [list(v) for v in expected]


def _shared_hdf5() -> list:
    names = sorted(p.name for p in DATA.glob("*.h5*")) if DATA.is_dir() else []
    if names or REQUIRED:
        return names
    return [pytest.param(None, marks=pytest.mark.skip(reason=f"no HDF5 files in {DATA}"))]


@pytest.mark.parametrize("name", _shared_hdf5())
def test_shared_files_codecs_follow_filters(name):
    """The real files other software wrote: every referenced array's codecs are libhdf5's
    filters (the check runs inside the scan, tests/conftest.py)."""
    manifest = h5lens.index(DATA / name)
    with h5py.File(DATA / name) as f:
        checked = 0
        for key, table in manifest.chunks.items():
            if key in f and isinstance(f[key], h5py.Dataset):
                assert_codecs_follow_filters(f[key], manifest.nodes[key], table.source)
                checked += 1
    assert checked


def test_extensible_array_index_with_the_unlimited_dimension_last(tmp_path):
    """Found by the random trees: ``maxshape=(n, None)`` under libver latest (an extensible
    array index, its unlimited dimension swizzled first). libhdf5 2.0's ``chunk_iter``
    lists those chunks at other offsets and with other chunks' filter masks, while
    ``H5Dread`` finds them right; LZF gives up on some chunks (mask 0x2), not on others.
    h5lens reads the index itself: its values are h5py's, and the oracle, which asks
    libhdf5's read path for each referenced chunk's mask, agrees with its codecs."""
    path = tmp_path / "ea.h5"
    values = np.full((6, 6), 66050.0, dtype=">f4")
    values[[0, 0, 2, 4], [1, 5, 2, 2]] = 0
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        f.create_dataset("x", data=values, chunks=(3, 2), maxshape=(6, None), compression="lzf", shuffle=True)
    with h5py.File(path) as f:
        ds = f["x"]
        masks = {ds.id.read_direct_chunk((r, c))[0] for r in (0, 3) for c in (0, 2, 4)}
        assert masks == {0, 2}, "the case needs chunks LZF compressed and chunks it gave up on"
        expected = ds[...]
        manifest = h5lens.index(path, inline_threshold=0)
        assert (manifest.chunks["x"].source >= 0).any()
        assert_codecs_follow_filters(ds, manifest.nodes["x"], manifest.chunks["x"].source)
    np.testing.assert_array_equal(h5lens.open(manifest)["x"][...], expected)
