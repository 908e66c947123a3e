"""h5lens.read.navigate: every HDF5 feature read back as h5py reads the original file."""

from __future__ import annotations

import math
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.read import navigate

CONVENTIONS = ["released", "proposal"]


def write_target(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("data/values", data=np.arange(6, dtype="<i2").reshape(2, 3))
        f["data"].attrs["kind"] = "target"
        f["data/a:b"] = np.arange(2)
    return path


def write_sample(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        group = f.create_group("group")
        target = group.create_dataset("target", data=np.linspace(0, 1, 5))
        group.attrs["nan"] = np.nan
        group.attrs["infs"] = np.array([np.inf, -np.inf, 1.0])
        group.attrs["text"] = "NaN"  # a string that happens to read "NaN"
        group.attrs["ref"] = target.ref
        group.attrs["null_ref"] = h5py.Reference()
        group.attrs["names"] = np.array([b"a", b"b"])
        group.attrs.create("latin1", data=b"caf\xe9", dtype=h5py.string_dtype("ascii"))
        group.attrs["latin1_fixed"] = np.array([b"\xe9t\xe9", b"ok"], dtype="S3")
        f["soft"] = h5py.SoftLink("/group/target")
        f["hard"] = target  # a second hard link to one object
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["loop1"] = h5py.SoftLink("/loop2")
        f["loop2"] = h5py.SoftLink("/loop1")
        f["external"] = h5py.ExternalLink("target.h5", "/data")
        f["external_escaped"] = h5py.ExternalLink("target.h5", "/data/a:b")
        f["a:b"] = np.arange(3)  # escaped as a%3Ab
        f.create_group("CON").attrs["x"] = 1  # reserved: %CON%
        f.create_dataset("scalar_float", data=2.5)
        f.create_dataset("scalar_text", data="hello", dtype=h5py.string_dtype())
        f.create_dataset("fixed_bytes", data=np.array([b"ab", b"cde"], dtype="S3"))
        f.create_dataset("strings", data=["x", "yz"], dtype=h5py.string_dtype())
        f.create_dataset("empty", data=h5py.Empty("f8"))
        f.create_dataset("enum", data=np.array([0, 1, 1], dtype="i1"), dtype=h5py.enum_dtype({"OFF": 0, "ON": 1}, basetype="i1"))
        f.create_dataset("refs", data=[target.ref, group.ref, h5py.Reference()], dtype=h5py.ref_dtype)
        f.create_dataset("scalar_ref", data=group.ref, dtype=h5py.ref_dtype)
        records = np.zeros(3, dtype=[("idx", "<i4"), ("target", h5py.ref_dtype)])
        records["idx"] = [0, 1, 2]
        records["target"] = [target.ref, group.ref, target.ref]
        f.create_dataset("records", data=records)
        f.create_dataset("scalar_record", data=records[0])
        f.create_dataset("point", data=np.array((1.0, 2.0), dtype=[("x", "<f4"), ("y", "<f4")]))
        f.create_dataset("big_endian", data=np.arange(4, dtype=">f8"))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("navigate")
    write_target(root / "target.h5")
    write_sample(root / "sample.h5")
    return root


@pytest.fixture(scope="module", params=CONVENTIONS)
def root(request, files) -> navigate.Group:
    return h5lens.open(h5lens.index(files / "sample.h5", convention=request.param))


@pytest.fixture(scope="module")
def h5(files):
    with h5py.File(files / "sample.h5", "r") as f:
        yield f


def test_members_are_hdf5_names(root, h5):
    assert sorted(root) == sorted(h5.keys())
    assert len(root) == len(h5.keys())
    assert "a:b" in root and "CON" in root and "missing" not in root
    assert root["a:b"].name == "a:b" and root["a:b"].path == "/a%3Ab" and root["a:b"].h5_path == "/a:b"
    np.testing.assert_array_equal(root["a:b"][:], h5["a:b"][:])
    assert root["CON"].attrs["x"] == 1
    assert root.name == "" and root.h5_path == "/"
    with pytest.raises(KeyError):
        root["missing"]


def test_links_followed(root, h5):
    target = root["group/target"]
    assert root["soft"] == target and root["hard"] == target
    assert root["soft"].h5_path == "/group/target"
    np.testing.assert_array_equal(root["soft"][:], h5["soft"][:])
    assert root.link("soft") == navigate.Link("soft", ".", "/group/target")
    assert root.link("group") is None
    assert root["/group/target"] == target and root["group"]["target"] == target
    assert "dangling" in root and "group/missing" not in root and "group/target" in root
    with pytest.raises(KeyError):
        root["dangling"]
    assert root.link("dangling") == navigate.Link("dangling", ".", "/nowhere")
    with pytest.raises(KeyError):  # as h5py: a cycle of soft links reaches nothing
        root["loop1"]
    with pytest.raises(RuntimeError, match="too many links"):
        h5["loop1"]


def test_external_link_indexes_the_linked_file_on_the_fly(root, h5, files):
    external = root["external"]
    assert isinstance(external, navigate.Group)
    assert external.file == os.fspath(files / "target.h5") and external.h5_path == "/data"
    assert external.attrs["kind"] == h5["external"].attrs["kind"]
    np.testing.assert_array_equal(root["external/values"][:], h5["external/values"][:])
    assert external.manifest.convention == root.manifest.convention


def test_external_link_to_a_name_zarr_escapes(root, h5):
    np.testing.assert_array_equal(root["external_escaped"][:], h5["external_escaped"][:])
    assert root["external_escaped"].h5_path == "/data/a:b"


def test_external_link_path_is_escaped_like_same_file_paths(root):
    """Link paths are zarr paths: the linked file's manifest holds /data/a%3Ab, not /data/a:b."""
    assert root.link("external_escaped").path == "/data/a%3Ab"


def test_external_link_prefers_a_manifest_beside_the_manifest(files, tmp_path):
    import shutil

    for name in ("sample.h5", "target.h5"):
        shutil.copy(files / name, tmp_path / name)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    h5lens.index(tmp_path / "sample.h5", url="../sample.h5").to_json(manifests / "sample.h5.json")
    h5lens.index(tmp_path / "target.h5", convention="proposal", url="../target.h5").to_json(
        manifests / "target.h5.json"
    )
    opened = h5lens.open(manifests / "sample.h5.json")
    assert opened["external"].manifest.location == os.fspath(manifests / "target.h5.json")
    assert opened["external"].manifest.convention == "proposal"
    np.testing.assert_array_equal(opened["external/values"][:], np.arange(6).reshape(2, 3))


def test_missing_external_file(files, tmp_path):
    import shutil

    shutil.copy(files / "sample.h5", tmp_path / "sample.h5")
    opened = h5lens.open(tmp_path / "sample.h5")  # an HDF5 path is indexed first
    with pytest.raises(h5lens.SourceNotFoundError, match="target.h5"):
        opened["external"]


def test_attributes(root, h5):
    group = root["group"]
    assert sorted(group.attrs) == sorted(h5["group"].attrs)
    assert math.isnan(group.attrs["nan"])
    assert group.attrs["infs"] == [math.inf, -math.inf, 1.0]
    assert group.attrs["ref"] == root["group/target"]
    assert group.attrs["null_ref"] is None
    assert group.attrs["names"] == ["a", "b"]
    # bytes that are not UTF-8 come back as the bytes HDF5 holds (h5py: str with surrogates / S)
    assert group.attrs["latin1"] == h5["group"].attrs["latin1"].encode("utf-8", "surrogateescape") == b"caf\xe9"
    assert group.attrs["latin1_fixed"] == h5["group"].attrs["latin1_fixed"].tolist()
    assert "_LINKS" not in root.attrs and "_LINKS" in root.convention_attrs
    assert root["group/target"].convention_attrs["_DTYPE"] == "float64"


def test_a_string_reading_nan_is_ambiguous_only_under_the_proposal(root):
    value = root["group"].attrs["text"]
    if root.manifest.convention == "proposal":
        assert isinstance(value, float) and math.isnan(value)  # the proposal cannot tell them apart
    else:
        assert value == "NaN"


def test_scalars(root, h5):
    for name in ("scalar_float", "scalar_text"):
        node = root[name]
        assert node.shape == () == h5[name].shape and node.is_scalar and node.ndim == 0
    assert root["scalar_float"][()] == h5["scalar_float"][()] and isinstance(root["scalar_float"][()], np.float64)
    assert root["scalar_text"][()] == h5["scalar_text"].asstr()[()] and isinstance(root["scalar_text"][()], str)
    assert root["scalar_float"].read() == 2.5
    assert np.asarray(root["scalar_float"][...]).shape == ()
    with pytest.raises(TypeError):
        len(root["scalar_float"])


def test_arrays(root, h5):
    data = root["group/target"]
    assert data.shape == (5,) and data.dtype == np.float64 and len(data) == 5 and data.size == 5
    np.testing.assert_array_equal(data[1:3], h5["group/target"][1:3])
    np.testing.assert_array_equal(np.asarray(data), h5["group/target"][()])
    assert root["strings"][:].tolist() == h5["strings"].asstr()[:].tolist()
    assert root["fixed_bytes"][:].tolist() == h5["fixed_bytes"][:].tolist()
    np.testing.assert_array_equal(root["big_endian"][:], h5["big_endian"][:])


def test_empty_dataset(root, h5):
    empty = root["empty"]
    assert empty.shape is None is h5["empty"].shape and empty.is_empty and empty.size == 0
    value = empty[()]
    assert isinstance(value, h5py.Empty) and value.dtype == h5["empty"][()].dtype
    assert "_EMPTY" in empty.convention_attrs and "_EMPTY" not in empty.attrs
    with pytest.raises(ValueError):
        empty[0]


def test_enum(root, h5):
    assert root["enum"].enum == h5py.check_enum_dtype(h5["enum"].dtype)
    np.testing.assert_array_equal(root["enum"][:], h5["enum"][:])


def test_object_references(root, h5):
    refs = root["refs"]
    assert refs.is_reference and refs.dtype == np.dtype(object) and refs.shape == (3,)
    assert list(refs[:]) == [root["group/target"], root["group"], None]
    assert refs.paths().tolist() == ["/group/target", "/group", ""]
    assert refs[1] == root["group"] and refs[2] is None
    assert root["group/target"][1] == h5["group/target"][1] and isinstance(root["group/target"][1], np.float64)
    assert root["strings"][1] == "yz" and root["records"][1]["target"] == root["group"]
    assert [h5[n.h5_path] if n else None for n in refs[:]] == [h5[r] if r else None for r in h5["refs"][:]]
    assert root["scalar_ref"][()] == root["group"] and root["scalar_ref"].shape == ()
    with pytest.raises(TypeError):
        root["group/target"].paths()


def test_compound_reference_fields(root, h5):
    records = root["records"]
    assert records.reference_fields == ("target",)
    values = records[:]
    assert values.dtype.names == ("idx", "target") and values.dtype["target"] == np.dtype(object)
    assert values["idx"].tolist() == h5["records"]["idx"].tolist()
    assert [h5[n.h5_path] for n in values["target"]] == [h5[r] for r in h5["records"]["target"]]
    scalar = root["scalar_record"][()]
    assert isinstance(scalar, np.void) and scalar["target"] == root["group/target"] and scalar["idx"] == 0


def test_scalar_compound(root, h5):
    point = root["point"][()]
    assert point.tolist() == h5["point"][()].tolist() and point.dtype.names == ("x", "y")


def test_walk_reaches_every_object_once(root, h5):
    expected: list[str] = []
    h5.visit(lambda name: expected.append("/" + name))
    reached = [path for path, _ in root.walk()]
    assert sorted(reached) == sorted(expected)


def test_nodes_compare_by_file_and_path(root):
    assert root["group/target"] == root["soft"] and hash(root["group/target"]) == hash(root["soft"])
    assert root["group"] != root["group/target"]
    assert root["group"] == root["group"] and hash(root["group"]) == hash(root["group"])  # two lookups, one node
    assert {root["group"], root["group"]} == {root["group"]}
    assert repr(root["group"]).startswith("<Group '/group' in ")


def test_open_accepts_manifest_json_and_hdf5_paths(files, tmp_path):
    manifest = h5lens.index(files / "sample.h5", convention="proposal")
    manifest.to_json(tmp_path / "m.json")
    opened = h5lens.open(tmp_path / "m.json")
    assert opened.manifest.convention == "proposal" and opened["scalar_float"][()] == 2.5
    assert h5lens.open(files / "sample.h5")["scalar_float"][()] == 2.5


def test_open_refuses_a_rewritten_source_as_open_group_does(tmp_path):
    """h5lens.open checks the sources once, as open_group does: a source rewritten since
    indexing is refused by both (verify=False reads it anyway)."""
    import h5py
    import numpy as np

    path = tmp_path / "changing.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(10.0)
    manifest = h5lens.index(path)
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(10.0) * 2
        f["y"] = np.zeros(3)  # another size: the change is seen without a fingerprint too
    for opener in (h5lens.open, h5lens.open_group):
        with pytest.raises(h5lens.StaleSourceError, match="changed since the manifest was written"):
            opener(manifest)
    assert h5lens.open(manifest, verify=False)["x"].shape == (10,)
