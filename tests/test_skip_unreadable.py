"""One object h5py cannot read no longer refuses a whole file (issue 43, part 3).

A dataset or attribute whose type h5py cannot read (HDF5 time values, ``H5T_TIME``, as
PyTables writes them), a dataset whose chunks lie past the end of the file, one behind a
filter libhdf5 cannot load: without ``skip_unreadable`` indexing refuses the file in one
line naming the object; with it, everything else is indexed, the manifest lists what was
left out and why, and reading a left-out object raises naming it.

Oracle: h5py. What it reads must read back equal through the manifest; what it cannot
read must be exactly what the manifest lists. h5py cannot write ``H5T_TIME`` values, so
the files are made through h5py's low-level API (the types libhdf5 predefines).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import subprocess
import sys
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pytest
import zarr
from h5py import h5a, h5d, h5s, h5t

import h5lens
from h5lens.errors import ManifestFormatError, MaterializeLimitError, UnsupportedFeatureError
from h5lens.manifest.model import Unreadable

CLI = [sys.executable, "-m", "h5lens.cli"]
TABLE_REFUSAL = "/table: field 't32col' holds HDF5 time values (H5T_TIME), which h5py cannot read either"


def h5lens_cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


# -- files ----------------------------------------------------------------------------------------


def _time_dataset(parent: h5py.Group, name: str, tid: h5t.TypeID, shape: tuple[int, ...] = (4,)) -> None:
    """A dataset of a type h5py has no numpy dtype for (never written: libhdf5 gives fill values)."""
    h5d.create(parent.id, name.encode(), tid, h5s.create_simple(shape))


def _time_attribute(obj: h5py.HLObject, name: str) -> None:
    h5a.create(obj.id, name.encode(), h5t.UNIX_D32LE, h5s.create(h5s.SCALAR))


def _table_type() -> h5t.TypeCompoundID:
    """A PyTables table row: an integer and a 32-bit time column."""
    row = h5t.create(h5t.COMPOUND, 8)
    row.insert(b"id", 0, h5t.STD_I32LE)
    row.insert(b"t32col", 4, h5t.UNIX_D32LE)
    return row


def write_table_only(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        _time_dataset(f, "table", _table_type())
    return path


def write_mixed(path: Path) -> Path:
    """Readable datasets and attributes beside unreadable ones, at the root and in a group."""
    rng = np.random.default_rng(43)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "mixed"
        _time_attribute(f, "created")
        plain = f.create_dataset("plain", data=rng.random((40, 6)), chunks=(8, 6), compression="gzip")
        plain.attrs["units"] = "m"
        _time_attribute(plain, "when")
        f.create_dataset("scalar", data=np.int16(-7))
        f.create_dataset("names", data=[f"cell{i}" for i in range(9)], dtype=h5py.string_dtype())
        _time_dataset(f, "table", _table_type())
        inner = h5t.create(h5t.COMPOUND, 16)
        inner.insert(b"a", 0, h5t.IEEE_F64LE)
        inner.insert(b"when", 8, h5t.UNIX_D64LE)
        outer = h5t.create(h5t.COMPOUND, 20)
        outer.insert(b"n", 0, h5t.STD_I32LE)
        outer.insert(b"info", 4, inner)
        _time_dataset(f, "nested", outer, (3,))
        _time_dataset(f, "a:b", h5t.UNIX_D32LE.copy())  # a name zarr holds escaped
        group = f.create_group("grp")
        group.attrs["ok"] = 1
        _time_attribute(group, "stamp")
        group.create_dataset("ints", data=np.arange(30, dtype="<i4").reshape(5, 6))
        _time_dataset(group, "times", h5t.UNIX_D64LE.copy(), (2, 3))
        _time_dataset(group, "vltimes", h5t.vlen_create(h5t.UNIX_D32LE))
    return path


def _h5py_reads(read) -> bool:  # noqa: ANN001 - a callable reading through h5py
    try:
        read()
    except (TypeError, ValueError, OSError):
        return False
    return True


def h5py_unreadable(path: Path) -> set[tuple[str, str | None]]:
    """(node path, attribute or None) of every dataset and attribute h5py cannot read."""
    found: set[tuple[str, str | None]] = set()
    with h5py.File(path) as f:
        objects: list[tuple[str, h5py.HLObject]] = [("", f)]
        f.visititems(lambda name, obj: objects.append((name, obj)))
        for name, obj in objects:
            if isinstance(obj, h5py.Dataset) and not _h5py_reads(lambda: obj[()]):
                found.add((name, None))
                continue
            for attribute in obj.attrs:
                if not _h5py_reads(lambda: obj.attrs[attribute]):
                    found.add((name, attribute))
    return found


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_mixed(tmp_path_factory.mktemp("skip") / "mixed.h5")


@pytest.fixture(scope="module")
def skipped(mixed: Path) -> h5lens.Manifest:
    return h5lens.index(mixed, skip_unreadable=True)


def _escaped(name: str) -> str:
    from h5lens.format.keys import escape_key

    return "/".join(escape_key(part) for part in name.split("/")) if name else ""


# -- without the flag: one refusal, naming the dataset and the field ---------------------------------


def test_refusal_names_the_dataset_and_the_field(tmp_path):
    path = write_table_only(tmp_path / "table.h5")
    with h5py.File(path) as f, pytest.raises(TypeError):
        f["table"][()]  # h5py cannot read it either
    with pytest.raises(UnsupportedFeatureError) as refused:
        h5lens.index(path)
    assert str(refused.value) == TABLE_REFUSAL


def test_a_nested_field_is_named_by_its_path(mixed):
    with h5py.File(mixed) as f, pytest.raises(TypeError):
        f["nested"][()]
    manifest = h5lens.index(mixed, skip_unreadable=True)
    assert manifest.unreadable_at("nested").reason == (
        "/nested: field 'info.when' holds HDF5 time values (H5T_TIME), which h5py cannot read either"
    )


def test_command_without_the_flag_exits_2_with_one_line_and_writes_nothing(tmp_path):
    path = write_table_only(tmp_path / "table.h5")
    out = tmp_path / "out.json"
    result = h5lens_cli("index", path, "-o", out)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [f"h5lens: error: {TABLE_REFUSAL}; --skip-unreadable leaves it out and indexes the rest of the file"]
    assert not out.exists()


# -- with it: everything else, and the list of what was left out ------------------------------------


def test_left_out_is_exactly_what_h5py_cannot_read(mixed, skipped):
    listed = {(entry.path, entry.attribute) for entry in skipped.unreadable}
    want = {(_escaped(name), attribute) for name, attribute in h5py_unreadable(mixed)}
    assert listed == want
    assert len(want) == 8  # the file holds that many: the test sees each
    for entry in skipped.unreadable:
        assert entry.where.split(" ")[0] in entry.line and entry.reason


def test_everything_else_reads_as_h5py(mixed, skipped, tmp_path):
    unreadable = h5py_unreadable(mixed)
    for form in ("json", "h5lens"):
        skipped.save(tmp_path / f"m.{form}")
        root = h5lens.open(tmp_path / f"m.{form}")
        with h5py.File(mixed) as f:
            objects: list[tuple[str, h5py.HLObject]] = [("", f)]
            f.visititems(lambda name, obj: objects.append((name, obj)))
            for name, obj in objects:
                if (name, None) in unreadable:
                    continue
                node = root[name] if name else root
                if isinstance(obj, h5py.Dataset):
                    want = obj.asstr()[()] if h5py.check_string_dtype(obj.dtype) else obj[()]
                    np.testing.assert_array_equal(np.asarray(node[()]), np.asarray(want), err_msg=name)
                readable = {a for a in obj.attrs if (name, a) not in unreadable}
                assert set(node.attrs) == readable, name
                for attribute in readable:
                    assert node.attrs[attribute] == obj.attrs[attribute], (name, attribute)


def test_both_forms_round_trip_the_list(skipped, tmp_path):
    for form in ("json", "h5lens"):
        skipped.save(tmp_path / f"m.{form}")
        loaded = h5lens.Manifest.load(tmp_path / f"m.{form}")
        assert loaded.unreadable == skipped.unreadable and loaded.nodes.keys() == skipped.nodes.keys()
    recorded = json.loads((tmp_path / "m.json").read_text())["h5lens"]["unreadable"]
    assert recorded == [entry.to_dict() for entry in skipped.unreadable]
    assert {"path": "table", "reason": TABLE_REFUSAL} in recorded


def test_an_icechunk_commit_keeps_the_list(skipped, tmp_path):
    pytest.importorskip("icechunk")
    from h5lens import icechunk as hic

    repo = hic.open_repository(str(tmp_path / "repo"), manifest=skipped)
    first = hic.to_icechunk(skipped, repo)
    loaded = h5lens.load_manifest(f"icechunk://{tmp_path / 'repo'}")
    assert loaded.unreadable == skipped.unreadable
    with pytest.raises(UnsupportedFeatureError, match=r"^/table: not in this manifest"):
        h5lens.open(loaded)["table"]
    # the same documents and references with another list is another commit
    fewer = dataclasses.replace(skipped, unreadable=skipped.unreadable[1:])
    assert hic.to_icechunk(fewer, repo) != first


def test_a_manifest_that_left_nothing_out_says_nothing(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    manifest = h5lens.index(path, skip_unreadable=True)
    assert manifest.unreadable == () and manifest == h5lens.index(path)
    manifest.save(tmp_path / "m.json")
    assert "unreadable" not in json.loads((tmp_path / "m.json").read_text())["h5lens"]


@pytest.mark.parametrize(
    "entry",
    [{"path": "/table", "reason": "x"}, {"path": "table"}, {"path": "t", "reason": "x", "extra": 1}, "table"],
    ids=["absolute path", "no reason", "unknown key", "not an object"],
)
def test_a_malformed_list_is_refused(skipped, tmp_path, entry):
    data = skipped.to_dict()
    data["h5lens"]["unreadable"] = [entry]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ManifestFormatError, match="unreadable"):
        h5lens.Manifest.load(tmp_path / "bad.json")


# -- reading what was left out ---------------------------------------------------------------------


def test_navigation_raises_naming_it_never_a_plain_key_error(skipped):
    root = h5lens.open(skipped)
    for ask in (
        lambda: root["table"],
        lambda: root["/table"],
        lambda: "table" in root,
        lambda: root.get("table"),
        lambda: root["grp"]["times"],
        lambda: root["grp/times"],
    ):
        with pytest.raises(UnsupportedFeatureError, match=r"not in this manifest, left out as unreadable") as e:
            ask()
        assert not isinstance(e.value, KeyError)
    with pytest.raises(UnsupportedFeatureError, match=r"^/table: not in this manifest.*field 't32col'"):
        root["table"]
    with pytest.raises(UnsupportedFeatureError, match=r"/a%3Ab"):
        root["a:b"]  # asked by its HDF5 name, recorded by its escaped key
    assert "table" not in list(root) and "times" not in list(root["grp"])  # listing: what is there
    with pytest.raises(KeyError, match="not a member"):
        root["nothing"]  # what never existed stays a KeyError


def test_attributes_left_out_raise_naming_them(skipped):
    root = h5lens.open(skipped)
    for node, name in ((root, "created"), (root["plain"], "when"), (root["grp"], "stamp")):
        with pytest.raises(UnsupportedFeatureError, match=rf"attribute '{name}': not in this manifest"):
            node.attrs[name]
        with pytest.raises(UnsupportedFeatureError):
            name in node.attrs  # noqa: B015 - asking is reading
        assert name not in list(node.attrs)
    with pytest.raises(KeyError):
        root.attrs["nothing"]


def test_open_group_raises_naming_it(skipped):
    group = h5lens.open_group(skipped)
    with pytest.raises(UnsupportedFeatureError, match=r"^/table: not in this manifest"):
        group["table"]
    with pytest.raises(UnsupportedFeatureError, match=r"^/grp/times: not in this manifest"):
        group["grp"]["times"]
    assert sorted(group["grp"].keys()) == ["ints"]


def test_plain_zarr_readers_do_not_see_it(skipped, tmp_path):
    skipped.to_json(tmp_path / "m.json")
    fs = fsspec.filesystem("reference", fo=str(tmp_path / "m.json"), asynchronous=True, remote_protocol="file",
                           remote_options={"asynchronous": True})  # fmt: skip
    group = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
    assert "table" not in group and "stamp" not in group["grp"].attrs
    with h5py.File(skipped.sources[0].url) as f:
        np.testing.assert_array_equal(group["plain"][...], f["plain"][()])


# -- the command line -------------------------------------------------------------------------------


def test_command_lists_what_it_left_out_and_every_reader_command_shows_it(mixed, skipped, tmp_path):
    out = tmp_path / "out.json"
    result = h5lens_cli("index", mixed, "-o", out, "--skip-unreadable")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == f"{len(skipped.unreadable)} objects left out as unreadable (not in the manifest; reading one raises why):"
    assert [line.strip() for line in lines[2:]] == [entry.line for entry in skipped.unreadable]
    assert h5lens.Manifest.load(out).unreadable == skipped.unreadable

    inspected = h5lens_cli("inspect", out)
    assert inspected.returncode == 0, inspected.stderr
    assert "table left out: unreadable" in inspected.stdout and TABLE_REFUSAL in inspected.stdout

    listed = h5lens_cli("ls", out, "grp")
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith("times!") and "left out" in line for line in listed.stdout.splitlines())

    validated = h5lens_cli("validate", out)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    notes = [line for line in validated.stdout.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: left out as unreadable when indexed: {entry.line}" for entry in skipped.unreadable]

    read = h5lens_cli("cat", out, "table")
    assert read.returncode == 2
    assert read.stderr.strip().splitlines() == [f"h5lens: error: {skipped.unreadable_at('table').error()}"]


def test_reading_commands_show_an_hdf5_file_with_what_they_cannot_read(mixed):
    """inspect / ls / cat index an HDF5 file in memory: what cannot be read is shown as such."""
    listed = h5lens_cli("ls", mixed)
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith("table!") for line in listed.stdout.splitlines())
    shown = h5lens_cli("cat", mixed, "grp/ints")
    assert shown.returncode == 0, shown.stderr


# -- validate --------------------------------------------------------------------------------------


def test_validate_finds_no_problem_in_what_was_left_out(skipped):
    assert h5lens.validate(skipped, verify=False) == []


def test_validate_finds_a_list_the_manifest_contradicts(skipped):
    wrong = dataclasses.replace(
        skipped,
        unreadable=(
            Unreadable("plain", "/plain: said to be left out"),
            Unreadable("grp", "/grp attribute 'ok': said to be left out", "ok"),
            Unreadable("nowhere/x", "/nowhere/x: below no group"),
        ),
    )
    found = {(p.path, p.message) for p in h5lens.validate(wrong, verify=False)}
    assert found == {
        ("/plain", "recorded as left out unreadable, but the manifest holds it"),
        ("/grp attribute 'ok'", "recorded as left out unreadable, but the manifest holds it"),
        ("/nowhere/x", "recorded as left out unreadable, but the manifest holds no group /nowhere"),
    }


# -- other refusals of one object --------------------------------------------------------------------


def _chunk_past_the_end(path: Path) -> Path:
    """A chunk index entry moved past the end of the file (damage h5py fails on, for that chunk)."""
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("damaged", data=np.arange(400, dtype="<i4").reshape(40, 10), chunks=(10, 10))
        _time_attribute(f["damaged"], "when")  # left out with the dataset, not listed apart
        f.create_dataset("fine", data=np.linspace(0, 1, 50))
        f["grp/more"] = np.arange(6, dtype="u1")
    with h5py.File(path) as f:
        offset = f["damaged"].id.get_chunk_info(2).byte_offset
    data = path.read_bytes()
    assert data.count(struct.pack("<Q", offset)) == 1
    path.write_bytes(data.replace(struct.pack("<Q", offset), struct.pack("<Q", len(data) + 4096)))
    return path


def test_damaged_dataset_is_left_out_and_the_rest_reads_as_h5py(tmp_path):
    path = _chunk_past_the_end(tmp_path / "damaged.h5")
    with h5py.File(path) as f, pytest.raises(OSError):
        f["damaged"][()]
    with pytest.raises(h5lens.H5LensError, match="^/damaged"):
        h5lens.index(path)
    manifest = h5lens.index(path, skip_unreadable=True)
    assert [(e.path, e.attribute) for e in manifest.unreadable] == [("damaged", None)]
    assert "past the end of the file" in manifest.unreadable[0].reason
    root = h5lens.open(manifest)
    with h5py.File(path) as f:
        for name in ("fine", "grp/more"):
            np.testing.assert_array_equal(root[name][()], f[name][()])


_CHILD = """
import json, sys
sys.modules["hdf5plugin"] = None  # libhdf5 here has no plugin for the filter
import h5py, h5lens
path = sys.argv[1]
with h5py.File(path) as f:
    try:
        f["sz3"][()]
        readable = True
    except OSError:
        readable = False
try:
    h5lens.index(path)
    refused = None
except h5lens.UnsupportedFeatureError as e:
    refused = str(e)
manifest = h5lens.index(path, skip_unreadable=True)
root = h5lens.open(manifest)
print(json.dumps({"readable": readable, "refused": refused,
                  "unreadable": [e.to_dict() for e in manifest.unreadable], "other": root["other"][()].tolist()}))
"""


def test_a_filter_libhdf5_cannot_load_is_left_out(tmp_path):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    path = tmp_path / "plugin.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("sz3", data=np.linspace(0, 1, 64, dtype="<f4"), chunks=(16,),
                         **hdf5plugin.SZ3(absolute=1e-3))  # fmt: skip
        f["other"] = np.arange(5)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["readable"] is False  # the child's h5py cannot read it either
    assert report["refused"].startswith("/sz3: its data needs filter")
    assert report["unreadable"] == [{"path": "sz3", "reason": report["refused"]}]
    assert report["other"] == [0, 1, 2, 3, 4]


def test_a_storage_failure_under_a_refusal_is_raised_not_left_out():
    """libhdf5 reports a failed remote read as damage (:meth:`OpenSource.failure` finds the
    storage failure under it): that is no unreadable object, and is raised, not recorded."""
    from h5lens.errors import NotHDF5Error, StorageError
    from h5lens.scan.unreadable import LeftOut

    damage = NotHDF5Error("/x: cannot read dataset, the file may be damaged (read failed)")
    failing = LeftOut(True, lambda error: StorageError("s3://bucket/f.h5: reading failed (503)"), {})
    assert failing.node("x", damage) is damage and failing.finish({}) == ()
    healthy = LeftOut(True, lambda error: error, {})
    assert healthy.node("x", damage) is None
    assert healthy.finish({}) == (Unreadable("x", str(damage)),)


def test_a_committed_time_datatype_with_attributes_is_left_out(tmp_path):
    """A named H5T_TIME type carrying attributes (a node of the manifest): refused by name
    (it was a TypeError from h5py), left out with the flag."""
    path = tmp_path / "named.h5"
    with h5py.File(path, "w") as f:
        h5t.UNIX_D32LE.copy().commit(f.id, b"stamp_type")
        f["stamp_type"].attrs["note"] = "a time type"
        f["x"] = np.arange(3)
    with h5py.File(path) as f, pytest.raises(TypeError):
        f["stamp_type"].dtype
    with pytest.raises(UnsupportedFeatureError, match="^/stamp_type: h5py cannot read this committed datatype"):
        h5lens.index(path)
    manifest = h5lens.index(path, skip_unreadable=True)
    assert [(e.path, e.attribute) for e in manifest.unreadable] == [("stamp_type", None)]
    assert h5lens.open(manifest)["x"][()].tolist() == [0, 1, 2]


def test_materialize_limit_is_not_skipped(tmp_path):
    """A dataset over the limit reads with h5py: the limit is the user's to raise, not an unreadable object."""
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("text", data=[f"value {i}" for i in range(500)], dtype=h5py.string_dtype())
    with pytest.raises(MaterializeLimitError, match="/text"):
        h5lens.index(path, skip_unreadable=True, materialize_limit=100)


def test_skip_unreadable_must_be_a_bool(tmp_path):
    with pytest.raises(h5lens.InvalidOptionError, match="skip_unreadable"):
        h5lens.index(tmp_path / "never-read.h5", skip_unreadable="yes")  # type: ignore[arg-type]


# -- many files ------------------------------------------------------------------------------------


def test_index_many_records_what_each_manifest_left_out(mixed, skipped, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0") as client:
        strict = h5lens.index_many([str(mixed)], tmp_path / "strict", scheduler=client)
        assert strict.failed == 1 and "--skip-unreadable" in strict.records[0].error_cli
        result = h5lens.index_many([str(mixed)], tmp_path / "out", scheduler=client, skip_unreadable=True,
                                   report=tmp_path / "report.json")  # fmt: skip
    assert result.ok and result.unreadable == len(skipped.unreadable)
    assert result.records[0].unreadable == [entry.line for entry in skipped.unreadable]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["unreadable"] == len(skipped.unreadable)
    assert report["files"][0]["unreadable"] == result.records[0].unreadable
