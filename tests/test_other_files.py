"""Data in other files: external raw storage and virtual datasets are referenced where they
lie (each file a source, checked for staleness), copied only where no set of whole chunks
maps them, and read back as h5py reads them."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.errors import SourceNotFoundError, StaleSourceError


def _same_as_h5py(manifest: h5lens.Manifest, path: Path, names: list[str]) -> None:
    group = h5lens.open_group(manifest)
    with h5py.File(path) as f:
        for name in names:
            expected = f[name][...]
            got = group[name][...]
            assert got.dtype == expected.dtype.newbyteorder("=") or got.dtype == expected.dtype, name
            np.testing.assert_array_equal(got, expected, err_msg=name)


def _sources(manifest: h5lens.Manifest, name: str) -> set[int]:
    return set(manifest.chunks[name].source.reshape(-1).tolist())


# -- external raw storage ---------------------------------------------------------------


def _external_file(directory: Path) -> Path:
    rows = np.arange(200_000, dtype=">i4").reshape(20_000, 10)
    with h5py.File(directory / "ext.h5", "w") as f:
        # three raw files, 8,000 + 8,000 + 4,000 rows, the second starting 16 bytes in
        f.create_dataset("rows", data=rows, external=[("a.raw", 0, 8_000 * 40), ("b.raw", 16, 8_000 * 40),
                                                       ("c.raw", 0, 4_000 * 40)])  # fmt: skip
        # a boundary inside an element: no slab fits, the values are copied
        f.create_dataset("split", data=np.arange(1_000, dtype="<f8"), external=[("d.raw", 0, 804), ("e.raw", 0, 8_000)])
        # a raw file shorter than its segment: libhdf5 reads zeros past its end
        f.create_dataset("short", shape=(100,), dtype="<f8", external=[("s.raw", 0, 800)], fillvalue=7.0)
    (directory / "s.raw").write_bytes(np.arange(50, dtype="<f8").tobytes())
    return directory / "ext.h5"


def test_external_storage_is_referenced_in_its_raw_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # libhdf5 finds relative raw files from the working directory
    path = _external_file(tmp_path)
    manifest = h5lens.index(path)
    urls = [s.url for s in manifest.sources]
    assert urls[0] == str(path) and {os.path.basename(u) for u in urls[1:]} >= {"a.raw", "b.raw", "c.raw"}
    rows = manifest.chunks["rows"]
    assert not rows.inline and rows.referenced_bytes == 20_000 * 40  # nothing copied, nothing twice
    assert {urls[i] for i in _sources(manifest, "rows")} == {str(tmp_path / n) for n in ("a.raw", "b.raw", "c.raw")}
    assert manifest.chunks["split"].referenced_bytes == 0  # copied: no slab of whole rows fits
    _same_as_h5py(manifest, path, ["rows", "split", "short"])
    written = tmp_path / "ext.json"
    manifest.to_json(written)
    assert written.stat().st_size < 0.01 * (tmp_path / "a.raw").stat().st_size * 3 + 20_000  # a map, not a copy
    _same_as_h5py(h5lens.load_manifest(written), path, ["rows"])
    assert h5lens.validate(written, deep=True) == []

    # a raw file rewritten after indexing is refused, by name
    (tmp_path / "b.raw").write_bytes(b"\0" * 16 + np.zeros(8_000 * 10, dtype=">i4").tobytes())
    with pytest.raises(StaleSourceError, match="b.raw"):
        h5lens.open_group(written)


def test_external_raw_files_resolve_beside_the_file_from_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where h5py writes the raw files
    path = _external_file(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not where the raw files are: the file's directory is
    manifest = h5lens.index(path)
    assert str(tmp_path / "a.raw") in [s.url for s in manifest.sources]
    monkeypatch.chdir(tmp_path)  # where h5py finds them, to compare
    _same_as_h5py(manifest, path, ["rows", "short"])


def test_a_missing_raw_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _external_file(tmp_path)
    (tmp_path / "c.raw").unlink()
    with h5py.File(path) as f, pytest.raises(OSError):
        f["rows"][...]  # h5py cannot read it either
    with pytest.raises(SourceNotFoundError, match=r"/rows.*c\.raw"):
        h5lens.index(path)


def test_a_manifest_published_under_another_url_moves_its_raw_files_along(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _external_file(tmp_path)
    manifest = h5lens.index(path, url="ext.h5")  # relative: the manifest travels with the files
    assert manifest.sources[0].url == "ext.h5"
    assert {"a.raw", "b.raw", "c.raw"} <= {s.url for s in manifest.sources[1:]}
    manifest.to_json(tmp_path / "ext.json")
    _same_as_h5py(h5lens.load_manifest(tmp_path / "ext.json"), path, ["rows"])


# -- virtual datasets -------------------------------------------------------------------


def _sources_written(directory: Path, count: int = 4, rows: int = 100) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    written = []
    for i in range(count):
        values = rng.random((rows, 50)).astype("f4")
        with h5py.File(directory / f"src{i}.h5", "w") as f:
            f.create_dataset("data", data=values, chunks=(25, 50), compression="gzip", shuffle=True)
        written.append(values)
    return written


def _virtual_file(directory: Path, *, shifted: bool = True) -> Path:
    _sources_written(directory)
    with h5py.File(directory / "vds.h5", "w") as f:
        stacked = h5py.VirtualLayout((4, 100, 50), "f4")
        concat = h5py.VirtualLayout((400, 50), "f4")
        gappy = h5py.VirtualLayout((6, 100, 50), "f4")
        across = h5py.VirtualLayout((410, 50), "f4")
        for i in range(4):
            source = h5py.VirtualSource(f"src{i}.h5", "data", (100, 50))
            stacked[i] = source
            concat[i * 100 : (i + 1) * 100] = source
            gappy[i] = source
            across[10 + i * 100 : 10 + (i + 1) * 100] = source
        gappy[5] = h5py.VirtualSource("missing.h5", "data", (100, 50))  # libhdf5 reads fill values there
        f.create_virtual_dataset("stacked", stacked, fillvalue=-1)
        f.create_virtual_dataset("concat", concat, fillvalue=-1)
        f.create_virtual_dataset("gappy", gappy, fillvalue=-1)
        if shifted:
            f.create_virtual_dataset("shifted", across, fillvalue=-1)  # boxes across chunk boundaries
        f.create_dataset("own", data=np.arange(1_000, dtype="i8").reshape(10, 100), chunks=(5, 100))
        own = h5py.VirtualLayout((10, 100), "i8")
        own[:] = h5py.VirtualSource(".", "own", (10, 100))
        f.create_virtual_dataset("own_view", own)
        half = h5py.VirtualLayout((50, 50), "f4")
        half[:] = h5py.VirtualSource("src0.h5", "data", (100, 50))[50:100]
        f.create_virtual_dataset("half", half)
    return directory / "vds.h5"


VIRTUAL = ["stacked", "concat", "gappy", "shifted", "own_view", "half"]


def test_virtual_datasets_reference_their_sources_chunks(tmp_path):
    path = _virtual_file(tmp_path)
    manifest = h5lens.index(path)
    urls = [s.url for s in manifest.sources]
    assert urls == [str(path), *(str(tmp_path / f"src{i}.h5") for i in range(4))]
    for name in ("stacked", "concat", "gappy", "half"):
        table = manifest.chunks[name]
        assert not table.inline and _sources(manifest, name) - {-1} <= {1, 2, 3, 4}, name
    assert _sources(manifest, "own_view") == {0}
    assert manifest.chunks["shifted"].referenced_bytes == 0  # copied: no set of whole chunks
    _same_as_h5py(manifest, path, VIRTUAL)
    written = tmp_path / "vds.json"
    manifest.to_json(written)
    assert h5lens.validate(written, deep=True) == []
    _same_as_h5py(h5lens.load_manifest(written), path, VIRTUAL)

    # a source rewritten after indexing is refused, by name
    with h5py.File(tmp_path / "src2.h5", "w") as f:
        f.create_dataset("data", data=np.zeros((100, 50), "f4"), chunks=(25, 50), compression="gzip", shuffle=True)
    with pytest.raises(StaleSourceError, match="src2.h5"):
        h5lens.open_group(written)


def test_a_virtual_dataset_is_a_map_not_a_copy(tmp_path):
    rng = np.random.default_rng(1)
    count, rows = 40, 2_000
    layout = h5py.VirtualLayout((count * rows, 64), "f8")
    for i in range(count):
        with h5py.File(tmp_path / f"part{i}.h5", "w") as f:
            f.create_dataset("x", data=rng.random((rows, 64)), chunks=(500, 64))
        layout[i * rows : (i + 1) * rows] = h5py.VirtualSource(f"part{i}.h5", "x", (rows, 64))
    with h5py.File(tmp_path / "all.h5", "w") as f:
        f.create_virtual_dataset("x", layout)
    manifest = h5lens.index(tmp_path / "all.h5")
    manifest.to_json(tmp_path / "all.json")
    data = count * rows * 64 * 8
    assert (tmp_path / "all.json").stat().st_size < 0.01 * data
    _same_as_h5py(manifest, tmp_path / "all.h5", ["x"])


def test_navigation_and_h5lens_open_read_a_virtual_dataset(tmp_path):
    path = _virtual_file(tmp_path)
    root = h5lens.open(h5lens.index(path))
    with h5py.File(path) as f:
        np.testing.assert_array_equal(root["stacked"][1:3, 10:60], f["stacked"][1:3, 10:60])
        np.testing.assert_array_equal(root["gappy"][4:6, :5], f["gappy"][4:6, :5])


def test_virtual_sources_on_s3(s3, tmp_path):
    path = _virtual_file(tmp_path, shifted=False)
    prefix = f"bucket/{uuid.uuid4().hex}"
    fs = s3.filesystem()
    for name in ["vds.h5", *(f"src{i}.h5" for i in range(4))]:
        fs.put(str(tmp_path / name), f"{prefix}/{name}")
    options = s3.storage_options()
    manifest = h5lens.index(f"s3://{prefix}/vds.h5", storage_options=options)
    assert [s.url for s in manifest.sources][1:] == [f"s3://{prefix}/src{i}.h5" for i in range(4)]
    assert all(s.etag for s in manifest.sources)
    assert not manifest.chunks["stacked"].inline
    group = h5lens.open_group(manifest, storage_options=options)
    with h5py.File(path) as f:
        for name in ("stacked", "concat", "gappy"):
            np.testing.assert_array_equal(group[name][...], f[name][...], err_msg=name)


def test_unlimited_mappings_are_taken_at_their_extent(tmp_path, monkeypatch):
    from h5py import h5d, h5p, h5s, h5t

    monkeypatch.chdir(tmp_path)
    for block in range(3):  # printf-style sources: blk_0.h5, blk_1.h5, blk_2.h5
        with h5py.File(tmp_path / f"blk_{block}.h5", "w") as f:
            f.create_dataset("data", data=np.full((10, 50), block, "f4"), chunks=(5, 50))
    with h5py.File(tmp_path / "grow.h5", "w") as f:  # a source that grows
        f.create_dataset("data", data=np.arange(280, dtype="i4").reshape(70, 4), chunks=(10, 4), maxshape=(None, 4))
    with h5py.File(tmp_path / "unlimited.h5", "w") as f:
        space = h5s.create_simple((30, 50), (h5s.UNLIMITED, 50))
        space.select_hyperslab((0, 0), (h5s.UNLIMITED, 1), stride=(10, 1), block=(10, 50))
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_virtual(space, b"blk_%b.h5", b"data", h5s.create_simple((10, 50)))
        dcpl.set_fill_value(np.array(-1, "f4"))
        h5d.create(f.id, b"blocks", h5t.NATIVE_FLOAT, space, dcpl=dcpl)
        space = h5s.create_simple((0, 4), (h5s.UNLIMITED, 4))
        space.select_hyperslab((0, 0), (1, 1), block=(h5s.UNLIMITED, 4))
        source = h5s.create_simple((0, 4), (h5s.UNLIMITED, 4))
        source.select_hyperslab((0, 0), (1, 1), block=(h5s.UNLIMITED, 4))
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_virtual(space, b"grow.h5", b"data", source)
        h5d.create(f.id, b"growing", h5t.STD_I32LE, space, dcpl=dcpl)
    path = tmp_path / "unlimited.h5"
    manifest = h5lens.index(path)
    assert {s.url for s in manifest.sources[1:]} == {str(tmp_path / n) for n in ("blk_0.h5", "blk_1.h5", "blk_2.h5", "grow.h5")}
    assert not manifest.chunks["blocks"].inline and not manifest.chunks["growing"].inline
    _same_as_h5py(manifest, path, ["blocks", "growing"])

    with h5py.File(tmp_path / "grow.h5", "a") as f:  # the source grows: h5py reads more rows
        f["data"].resize((80, 4))
    with pytest.raises(StaleSourceError, match="grow.h5"):
        h5lens.open_group(manifest)


def test_a_remote_virtual_dataset_that_cannot_be_referenced_is_refused_by_name(s3, tmp_path):
    """Copying it would go through libhdf5, which cannot open a remote file's sources and
    would give fill values for every one of them."""
    _virtual_file(tmp_path)
    prefix = f"bucket/{uuid.uuid4().hex}"
    fs = s3.filesystem()
    for name in ["vds.h5", *(f"src{i}.h5" for i in range(4))]:
        fs.put(str(tmp_path / name), f"{prefix}/{name}")
    with pytest.raises(h5lens.UnsupportedFeatureError, match="/shifted.*remote"):
        h5lens.index(f"s3://{prefix}/vds.h5", storage_options=s3.storage_options())


def test_external_slabs_past_a_raw_files_end_are_the_zero_fill(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = np.arange(400_000, dtype="<f8").reshape(40_000, 10)
    with h5py.File(tmp_path / "sparse.h5", "w") as f:
        f.create_dataset("x", data=rows, external=[("sparse.raw", 0, rows.nbytes)])
    with open(tmp_path / "sparse.raw", "r+b") as raw:  # the second half of the file never written
        raw.truncate(rows.nbytes // 2)
    manifest = h5lens.index(tmp_path / "sparse.h5", slab_bytes=256 << 10)
    table = manifest.chunks["x"]
    assert (table.source == -1).any() and table.inline_bytes < 256 << 10  # absent, not copied as zeros
    _same_as_h5py(manifest, tmp_path / "sparse.h5", ["x"])
