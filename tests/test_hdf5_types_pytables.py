"""The HDF5 types PyTables writes that h5lens once refused, each read back as h5py reads it
(docs/manifest-format.md, "Forms for HDF5 types zarr has no data type for"):

* variable-length sequences of fixed-length byte strings (PyTables' ``VLArray`` of
  strings): awkward lists of bytestrings;
* compounds with a member that is an array of variable-length strings (PyTables'
  ``Table`` with such a column), and compounds mixing sequences, strings and arrays: an
  awkward ``RecordArray``;

Every file here is written by h5py (the oracle), never copied from PyTables' test data.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens


def _objects(items: list, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def _same(got: object, want: object, where: str) -> None:
    """h5py's value and h5lens's: the same type, dtype and values (object arrays element by element)."""
    if isinstance(want, np.ndarray) and want.dtype == object:
        assert isinstance(got, np.ndarray) and got.dtype == object and got.shape == want.shape, where
        for g, w in zip(got.ravel(), want.ravel(), strict=True):
            _same(g, w, where)
        return
    assert type(got) is type(want), (where, type(got), type(want))
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype.newbyteorder("=") or got.dtype == want.dtype, (where, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        assert got == want, where


# -- sequences of fixed-length byte strings -------------------------------------------------


def build_byte_string_sequences(path: Path) -> None:
    s2 = h5py.vlen_dtype(np.dtype("S2"))
    rows = [np.array([b"5", b"66"], "S2"), np.zeros(0, "S2"), np.array([b"\x00b", b"", b"xy"], "S2")]
    with h5py.File(path, "w") as f:
        f.create_dataset("vlarray", data=_objects(rows, (3,)), dtype=s2)
        f.create_dataset("grid", data=_objects(rows + rows[:1], (2, 2)), dtype=s2, chunks=(1, 2), compression="gzip")
        one = np.empty((), dtype=object)
        one[()] = np.array([b"ab", b"c"], "S2")
        f.create_dataset("scalar", data=one, dtype=s2)
        f.create_dataset("unwritten", shape=(2,), dtype=s2)
        f.create_dataset("wide", data=_objects([np.array([b"hello", b"x"], "S5")], (1,)), dtype=h5py.vlen_dtype("S5"))


@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_sequences_of_byte_strings_read_as_h5py_reads_them(threshold, tmp_path):
    path = tmp_path / "vlarrays.h5"
    build_byte_string_sequences(path)
    manifest = h5lens.index(path, inline_threshold=threshold)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        names = list(f)
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for name in names:
                ds, node = f[name], root[name]
                assert node.shape == ds.shape and node.dtype == ds.dtype, name
                assert node.element_dtype == h5py.check_vlen_dtype(ds.dtype), name
                _same(node[()], ds[()], name)
                if ds.shape and ds.shape[0] > 1:
                    _same(node[1:], ds[1:], f"{name}[1:]")
    assert h5lens.validate(manifest) == []


def test_sequences_of_byte_strings_are_bytes_that_zarr_anndata_and_awkward_read(tmp_path):
    """Plain zarr reads the offsets and the bytes; anndata's read_elem (awkward) gives lists
    of the stored bytes, padded with NUL to the strings' length."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "vlarrays.h5"
    build_byte_string_sequences(path)
    group = h5lens.open_group(h5lens.index(path))
    with h5py.File(path) as f:
        for name in ("vlarray", "grid", "unwritten", "wide"):
            want = f[name][()]
            width = h5py.check_vlen_dtype(f[name].dtype).itemsize
            node = group[name]
            assert node.attrs["encoding-type"] == "awkward-array", name
            offsets = next(node[k] for k in node.array_keys() if k.endswith("-offsets"))[...]
            raw = next(node[k] for k in node.array_keys() if k.endswith("-data"))[...]
            assert raw.dtype == np.uint8, name
            strings = raw.view(f"S{width}")
            flat = [strings[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
            _same(_objects(flat, want.shape), want, f"{name} through zarr")

            def padded(values: np.ndarray, width: int = width) -> list:
                if values.dtype == object:
                    return [padded(v) for v in values]
                return [bytes(v).ljust(width, b"\0") for v in values]

            assert anndata.io.read_elem(node).to_list() == padded(want), f"{name} through anndata"


# -- compounds with members of variable length -----------------------------------------------

# As PyTables writes a table with a column of 4 variable-length strings (big-endian numbers)
TABLE = np.dtype([("a_name", ">i4"), ("b_name", h5py.string_dtype("ascii"), (4,)), ("c_name", "S6"),
                  ("d_name", ">i2", (5, 10)), ("e_name", ">f4"), ("f_name", ">f8", (10,)), ("g_name", "u1")])  # fmt: skip
# Members of each kind together: UTF-8 strings in a 2-d array, sequences in an array, a
# sequence of strings, a sequence and a string
MIXED = np.dtype([("id", "<u2"), ("names", h5py.string_dtype(), (2, 2)), ("runs", h5py.vlen_dtype(np.int32), (2,)),
                  ("tags", h5py.vlen_dtype(h5py.string_dtype())), ("spikes", h5py.vlen_dtype(np.dtype(">f8"))),
                  ("label", h5py.string_dtype())])  # fmt: skip


def _table_rows(count: int) -> np.ndarray:
    rows = np.zeros(count, dtype=TABLE)
    for i in range(count):
        rows[i]["a_name"] = i
        rows[i]["b_name"] = [b"A fight is a contract", b"", f"row {i}".encode(), b"\xff raw"]
        rows[i]["c_name"] = b"Hello!"[: i + 1]
        rows[i]["d_name"] = np.arange(50).reshape(5, 10) + i
        rows[i]["e_name"] = i / 3
        rows[i]["f_name"] = np.linspace(0, i, 10)
        rows[i]["g_name"] = 100 + i
    return rows


def build_compounds(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("table", data=_table_rows(6), chunks=(4,), compression="gzip")
        f.create_dataset("unwritten", shape=(3,), dtype=TABLE, chunks=(2,))
        f.create_dataset("grid", data=_table_rows(4).reshape(2, 2))
        mixed = f.create_dataset("mixed", shape=(3,), dtype=MIXED)
        mixed[0] = (1, [["é", "b"], ["", "d"]], [np.arange(3, dtype="i4"), np.zeros(0, "i4")],
                    np.array(["x", "yé"], dtype=object), np.array([0.5, 1.5]), "unit one")  # fmt: skip
        mixed[2] = (3, [["q", "r"], ["s", "t"]], [np.array([7], "i4"), np.array([8, 9], "i4")],
                    np.zeros(0, dtype=object), np.zeros(0), "")  # fmt: skip


def _same_records(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert got.shape == want.shape and got.dtype.names == want.dtype.names, where
    for name in want.dtype.names:
        g_type, w_type = got.dtype[name], want.dtype[name]
        assert g_type.shape == w_type.shape and g_type.base.kind == w_type.base.kind, (where, name)
        if w_type.base.kind == "O":  # h5py's string or sequence type, the same one
            w_vlen, g_vlen = h5py.check_vlen_dtype(w_type.base), h5py.check_vlen_dtype(g_type.base)
            assert g_vlen == (w_vlen.newbyteorder("=") if isinstance(w_vlen, np.dtype) else w_vlen), (where, name)
            _same(np.asarray(got[name]), np.asarray(want[name]), f"{where}.{name}")
        else:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{where}.{name}")


@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_compounds_with_variable_length_members_read_as_h5py_reads_them(threshold, tmp_path):
    path = tmp_path / "tables.h5"
    build_compounds(path)
    manifest = h5lens.index(path, inline_threshold=threshold)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        names = list(f)
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for name in names:
                want = f[name][()]
                _same_records(root[name][()], want, name)
                assert root[name].dtype.names == f[name].dtype.names, name
                if want.shape and want.shape[0] > 1:
                    _same_records(root[name][1:], f[name][1:], f"{name}[1:]")
            one = root["table"][2]  # one record, as h5py gives it
            assert isinstance(one, np.void) and one.dtype.names == TABLE.names
            _same(np.asarray(one["b_name"]), np.asarray(f["table"][2]["b_name"]), "table[2].b_name")
    assert h5lens.validate(manifest) == []


def test_compounds_with_variable_length_members_are_records_anndata_and_awkward_read(tmp_path):
    """anndata's read_elem (awkward) gives each record: strings as text (UTF-8) or bytes
    (the ASCII set), fixed-length bytes padded, array members as nested lists."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "tables.h5"
    build_compounds(path)
    group = h5lens.open_group(h5lens.index(path))
    with h5py.File(path) as f:
        table = anndata.io.read_elem(group["table"]).to_list()
        want = f["table"][()]
        assert [r["b_name"] for r in table] == [list(r["b_name"]) for r in want]  # bytes: the ASCII set
        assert [r["c_name"] for r in table] == [bytes(r["c_name"]).ljust(6, b"\0") for r in want]
        assert [r["d_name"] for r in table] == [r["d_name"].tolist() for r in want]
        assert [(r["a_name"], r["e_name"], r["f_name"], r["g_name"]) for r in table] == [
            (int(r["a_name"]), float(r["e_name"]), r["f_name"].tolist(), int(r["g_name"])) for r in want
        ]
        mixed = anndata.io.read_elem(group["mixed"]).to_list()
        want = f["mixed"][()]
        assert [r["names"] for r in mixed] == [[[b.decode() for b in row] for row in r["names"]] for r in want]
        assert [r["runs"] for r in mixed] == [[run.tolist() for run in r["runs"]] for r in want]
        assert [r["tags"] for r in mixed] == [[b.decode() for b in r["tags"]] for r in want]
        assert [(r["spikes"], r["label"]) for r in mixed] == [(r["spikes"].tolist(), r["label"].decode()) for r in want]
    assert '"RegularArray"' in group["table"].attrs["form"]
