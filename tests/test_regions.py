"""Region references: written in the convention's reserved ``_REGION_REFERENCE`` form
(datasets and attributes), resolved by h5lens's navigation to the dataset and the values
h5py reads through them."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import zarr

import h5lens
from h5lens.read.references import Region


def _write(path):
    with h5py.File(path, "w") as f:
        data = f.create_dataset("grid/data", data=np.arange(10_000, dtype="f8").reshape(100, 100), chunks=(10, 10),
                                compression="gzip")  # fmt: skip
        line = f.create_dataset("line", data=np.arange(50, dtype="i2"))
        regions = f.create_dataset("regions", shape=(2, 3), dtype=h5py.regionref_dtype)
        regions[0, 0] = data.regionref[2:40, 3:7]  # one box
        regions[0, 1] = data.regionref[[1, 5, 70], :]  # several boxes
        space = data.id.get_space()
        space.select_elements(np.array([[0, 0], [99, 99], [3, 4], [3, 4]]))  # points, one twice
        regions[0, 2] = h5py.h5r.create(f.id, b"grid/data", h5py.h5r.DATASET_REGION, space)
        regions[1, 0] = line.regionref[...]  # all of it
        regions[1, 1] = line.regionref[10:20:3]  # strided
        # regions[1, 2] left a null reference
        line.attrs["focus"] = data.regionref[50:60, 50:60]
        f.attrs["many"] = np.array([line.regionref[1:3], line.regionref[40:]], dtype=h5py.regionref_dtype)
    return path


def test_region_references_read_as_h5py_reads_them(tmp_path):
    path = _write(tmp_path / "regions.h5")
    manifest = h5lens.index(path)
    root = h5lens.open(manifest)
    with h5py.File(path) as f:
        expected = f["regions"][...]
        got = root["regions"][...]
        assert got.shape == expected.shape
        for mine, theirs in zip(got.ravel(), expected.ravel(), strict=True):
            if not theirs:
                assert mine is None
                continue
            target = f[theirs]
            assert isinstance(mine, Region) and root[mine].h5_path == target.name
            values = root[mine][mine]
            assert values.dtype == target.dtype
            np.testing.assert_array_equal(values, target[theirs])
        focus = root["line"].attrs["focus"]
        np.testing.assert_array_equal(root["grid/data"][focus], f["grid/data"][f["line"].attrs["focus"]])
        for mine, theirs in zip(root.attrs["many"], f.attrs["many"], strict=True):
            np.testing.assert_array_equal(root["line"][mine], f["line"][theirs])
    assert h5lens.validate(manifest, deep=True) == []


def test_plain_zarr_sees_the_convention_form(tmp_path):
    path = _write(tmp_path / "regions.h5")
    group = zarr.open_group(h5lens.open_store(h5lens.index(path)), mode="r")
    texts = group["regions"][...]
    assert group["regions"].attrs["_DTYPE"] == "region_reference"
    first = json.loads(str(texts[0, 0]))
    assert first == {"source": ".", "path": "/grid/data", "region": {"start": [2, 3], "count": [38, 4], "shape": [38, 4]}}
    assert str(texts[1, 2]) == ""  # the null reference
    focus = group["line"].attrs["focus"]["_REGION_REFERENCE"]
    assert focus["path"] == "/grid/data" and focus["region"]["start"] == [50, 50]


def test_a_region_reads_only_through_its_dataset(tmp_path):
    path = _write(tmp_path / "regions.h5")
    root = h5lens.open(h5lens.index(path))
    region = root["regions"][0, 0]
    with pytest.raises(ValueError, match="/grid/data"):
        root["line"][region]


def test_compound_fields_of_region_references_are_refused_by_name(tmp_path):
    path = tmp_path / "compound.h5"
    with h5py.File(path, "w") as f:
        data = f.create_dataset("data", data=np.arange(10))
        table = f.create_dataset("table", shape=(1,), dtype=np.dtype([("r", h5py.regionref_dtype), ("x", "i4")]))
        table[0] = (data.regionref[2:5], 1)
    with pytest.raises(h5lens.UnsupportedFeatureError, match="/table"):
        h5lens.index(path)
