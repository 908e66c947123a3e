"""HDF5 types zarr v3 has no data type for, each with the form h5lens gives it
(h5lens.format.dtypes_forms, docs/manifest-format.md), compared with what h5py reads.

* ragged arrays (``h5py.vlen_dtype(np.int32)``): awkward-array groups; navigation gives
  h5py's object arrays, zarr the values and offsets, anndata and awkward the ragged array;
* compound members that are arrays: nested records of the same bytes, referenced;
* opaque, ragged attributes; committed datatypes with attributes; region references.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr

import h5lens


def _objects(items: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def build_ragged(path: Path) -> None:
    ints = [np.arange(3, dtype=np.int32), np.zeros(0, np.int32), np.array([7], np.int32), -np.arange(5, dtype=np.int32)]
    floats = [np.linspace(0, 1, n) for n in range(6)]
    with h5py.File(path, "w") as f:
        f.create_dataset("ints", data=_objects(ints, (4,)), dtype=h5py.vlen_dtype(np.int32))
        f.create_dataset("chunked", data=_objects(ints, (4,)), dtype=h5py.vlen_dtype(np.int32), chunks=(2,),
                         compression="gzip")  # fmt: skip
        f.create_dataset("grid", data=_objects(floats, (2, 3)), dtype=h5py.vlen_dtype(np.float64))
        f.create_dataset("big_endian", data=_objects(ints, (4,)), dtype=h5py.vlen_dtype(np.dtype(">i2")))
        f.create_dataset("bools", data=_objects([np.array([True, False]), np.zeros(0, bool)], (2,)),
                         dtype=h5py.vlen_dtype(np.bool_))  # fmt: skip
        f.create_dataset("none_written", shape=(3,), dtype=h5py.vlen_dtype(np.uint16))
        f.create_dataset("nothing", shape=(0,), dtype=h5py.vlen_dtype(np.float32))
        one = np.empty((), dtype=object)
        one[()] = np.array([1.5, 2.5], np.float32)
        f.create_dataset("scalar", data=one, dtype=h5py.vlen_dtype(np.float32))
        f["ints"].attrs["units"] = "counts"
        f["ints"].attrs.create("ragged", data=_objects(floats[:3], (3,)), dtype=h5py.vlen_dtype(np.float64))
        f.attrs.create("grid", data=_objects(ints, (2, 2)), dtype=h5py.vlen_dtype(np.int32))
        f.attrs.create("uneven_empty", data=_objects([np.zeros(0, "u1"), np.zeros(0, "u1")], (2,)),
                       dtype=h5py.vlen_dtype(np.int16))  # fmt: skip


def _lists(values: np.ndarray) -> list:
    """h5py's object array of arrays as nested lists (what awkward's to_list gives)."""
    if values.ndim == 0:
        return values[()].tolist()
    return [_lists(v) if isinstance(v, np.ndarray) and v.dtype == object else v.tolist() for v in values]


def _same_objects(got: object, want: np.ndarray, where: str) -> None:
    assert isinstance(got, np.ndarray) and got.dtype == object and got.shape == want.shape, where
    for g, w in zip(got.ravel(), want.ravel(), strict=True):
        assert g.dtype == w.dtype, where
        np.testing.assert_array_equal(g, w, err_msg=where)


@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_ragged_datasets_read_as_h5py_reads_them(threshold, tmp_path):
    path = tmp_path / "ragged.h5"
    build_ragged(path)
    manifest = h5lens.index(path, inline_threshold=threshold)
    manifest.save(tmp_path / "m.json")
    for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
        with h5py.File(path) as f:
            for name, ds in list(f.items()):  # not inside h5py's iteration: it holds h5py's lock
                want = ds[()]
                got = root[name]
                assert got.shape == ds.shape and got.dtype == ds.dtype, name
                if ds.shape == ():
                    assert got[()].dtype == want.dtype, name
                    np.testing.assert_array_equal(got[()], want, err_msg=name)
                else:
                    _same_objects(got[()], want, name)
                    if ds.shape and ds.shape[0] > 1:
                        _same_objects(got[1:], ds[1:], f"{name}[1:]")
            assert dict(root["ints"].attrs).keys() == f["ints"].attrs.keys()
            _same_objects(root["ints"].attrs["ragged"], f["ints"].attrs["ragged"], "ints.attrs")
            for name in ("grid", "uneven_empty"):
                _same_objects(root.attrs[name], f.attrs[name], f"attrs {name}")


def test_ragged_datasets_are_values_and_offsets_that_zarr_and_anndata_read(tmp_path):
    """Plain zarr over h5lens's store reads the buffers as numbers; anndata's read_elem gives
    the awkward array, equal to h5py's values."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "ragged.h5"
    build_ragged(path)
    group = h5lens.open_group(h5lens.index(path))
    with h5py.File(path) as f:
        for name in ("ints", "chunked", "grid", "big_endian", "bools", "none_written", "nothing"):
            want = f[name][()]
            node = group[name]
            assert isinstance(node, zarr.Group) and node.attrs["encoding-type"] == "awkward-array", name
            offsets = next(node[k] for k in node.array_keys() if k.endswith("-offsets"))[...]
            data = next(node[k] for k in node.array_keys() if k.endswith("-data"))[...]
            flat = [data[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
            _same_objects(_objects(flat, want.shape), want, f"{name} through zarr")
            got = anndata.io.read_elem(node)
            assert got.to_list() == _lists(want), f"{name} through anndata"


@pytest.mark.parametrize("order", ["<", ">"])
def test_ragged_sequences_of_records_read_as_h5py_reads_them(order, tmp_path):
    """Sequences of compounds of numbers: an awkward ListOffsetArray of a RecordArray, one
    buffer per field; navigation gives h5py's structured arrays, anndata the awkward records."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "records.h5"
    record = np.dtype([("t", f"{order}f8"), ("n", f"{order}i4"), ("ok", "?")])
    events = [np.array([(1.5, 2, True), (2.5, 3, False)], record), np.zeros(0, record), np.array([(9.0, -1, True)], record)]
    with h5py.File(path, "w") as f:
        f.create_dataset("events", data=_objects(events, (3,)), dtype=h5py.vlen_dtype(record))
        f.create_dataset("grid", data=_objects(events + events[:1], (2, 2)), dtype=h5py.vlen_dtype(record), chunks=(1, 2))
    manifest = h5lens.index(path)
    manifest.save(tmp_path / "m.json")
    group = h5lens.open_group(tmp_path / "m.json")
    with h5py.File(path) as f:
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for name in ("events", "grid"):
                want, got = f[name][()], root[name][()]
                assert got.shape == want.shape, name
                for g, w in zip(got.ravel(), want.ravel(), strict=True):
                    assert g.dtype.names == w.dtype.names and g.shape == w.shape, name
                    for field in w.dtype.names:
                        assert g[field].dtype == w[field].dtype.newbyteorder("="), name
                        np.testing.assert_array_equal(g[field], w[field], err_msg=f"{name}.{field}")
        got = anndata.io.read_elem(group["events"]).to_list()
        assert got == [[dict(zip(record.names, r.tolist(), strict=True)) for r in e] for e in f["events"][()]]


@pytest.mark.parametrize("layout", ["sequences", "members"])
def test_byte_string_fields_of_ragged_records_read_as_h5py_reads_them(layout, tmp_path):
    """Fixed-length byte strings in records with sequences (sequences of records, or records
    with sequence members): awkward's bytestrings of that length, the field's bytes as one
    uint8 buffer; navigation gives h5py's values, anndata/awkward the padded bytes."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "records.h5"
    with h5py.File(path, "w") as f:
        if layout == "sequences":
            record = np.dtype([("a", "<i4"), ("name", "S4"), ("b", ">f8")])
            rows = [np.array([(1, b"ab", 0.5), (2, b"wxyz", 1.5)], record), np.zeros(0, record), np.array([(3, b"", 2.0)], record)]
            f.create_dataset("records", data=_objects(rows, (3,)), dtype=h5py.vlen_dtype(record))
        else:
            record = np.dtype([("name", "S5"), ("spikes", h5py.vlen_dtype(np.float32)), ("id", "<u2")])
            table = np.empty(3, record)
            table[:] = [(b"unit1", np.arange(3, dtype="f4"), 7), (b"u", np.zeros(0, "f4"), 8), (b"\x00\xffab", np.ones(2, "f4"), 9)]
            f.create_dataset("records", data=table)
    manifest = h5lens.index(path)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        want = f["records"][()]
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            got = root["records"][()]
            assert got.shape == want.shape
            for g, w in zip(np.atleast_1d(got).ravel(), np.atleast_1d(want).ravel(), strict=True):
                if layout == "sequences":
                    assert g.dtype.names == w.dtype.names and g.shape == w.shape
                    for name in w.dtype.names:
                        assert g[name].dtype == w[name].dtype.newbyteorder("="), name
                        np.testing.assert_array_equal(g[name], w[name], err_msg=name)
                else:
                    for name in w.dtype.names:
                        np.testing.assert_array_equal(np.asarray(g[name]), np.asarray(w[name]), err_msg=name)
                        assert type(g[name]) is type(w[name]), name
        got = anndata.io.read_elem(h5lens.open_group(tmp_path / "m.json")["records"]).to_list()
        if layout == "sequences":
            expected = [[{"a": int(r["a"]), "name": r["name"].ljust(4, b"\0"), "b": float(r["b"])} for r in row] for row in want]
        else:
            expected = [{"name": r["name"].ljust(5, b"\0"), "spikes": r["spikes"].tolist(), "id": int(r["id"])} for r in want]
        assert got == expected  # awkward keeps the stored bytes: padded to the field's length


def test_opaque_attributes_come_back_as_h5py_gives_them(tmp_path):
    path = tmp_path / "opaque.h5"
    with h5py.File(path, "w") as f:
        f.attrs["one"] = np.void(b"\x01\x00\xff")
        f.attrs.create("many", data=np.array([[b"ab\x00", b"\xffcd"]], dtype="V3"))
        f.create_dataset("x", data=[1])
        f["x"].attrs["tag"] = np.void(b"\x00" * 5)
    manifest = h5lens.index(path)
    manifest.save(tmp_path / "m.h5lens")
    for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.h5lens")):
        with h5py.File(path) as f:
            for node, attrs in ((root, f.attrs), (root["x"], f["x"].attrs)):
                for name, want in attrs.items():
                    got = node.attrs[name]
                    assert type(got) is type(want) and np.asarray(got).dtype == np.asarray(want).dtype, name
                    np.testing.assert_array_equal(got, want, err_msg=name)


def _same_records(got: np.ndarray, want: np.ndarray, where: str) -> None:
    """Field by field (array members by their shape), values as h5py reads them."""
    assert got.dtype.names == want.dtype.names and got.shape == want.shape, where
    for name in want.dtype.names:
        field, column = want.dtype.fields[name][0], want[name]
        if field.names is not None:
            _same_records(got[name], column, f"{where}.{name}")
            continue
        assert got.dtype.fields[name][0].shape == field.shape, f"{where}.{name}"
        if column.dtype.kind == "O":  # h5py's bytes of a vlen string field; h5lens's text (docs/index.md)
            column = np.array([v.decode("utf-8") for v in column.ravel()]).reshape(column.shape)
        assert got[name].dtype.kind == column.dtype.kind, f"{where}.{name}"
        np.testing.assert_array_equal(got[name], column, err_msg=f"{where}.{name}")


ARRAY_MEMBERS = np.dtype([("a", "<f4", (3,)), ("b", "<i8")])


def build_array_members(path: Path) -> None:
    flat = np.zeros(5, ARRAY_MEMBERS)
    flat["a"], flat["b"] = np.arange(15).reshape(5, 3) / 4, -np.arange(5)
    mixed_dtype = np.dtype([("m", ">i2", (2, 3)), ("s", "S3"), ("rec", [("x", "<f8"), ("xyz", "<u2", (2,))])])
    mixed = np.zeros(4, mixed_dtype)
    mixed["m"], mixed["s"] = np.arange(24).reshape(4, 2, 3) - 5, [b"a", b"bc", b"", b"xyz"]
    mixed["rec"]["x"], mixed["rec"]["xyz"] = np.arange(4) / 3, np.arange(8).reshape(4, 2)
    text = np.array([("α", (1, 2)), ("bb", (3, 4))], [("name", h5py.string_dtype()), ("p", "<f4", (2,))])
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=flat, chunks=(2,), compression="gzip")
        f.create_dataset("contiguous", data=flat)
        f.create_dataset("mixed", data=mixed, chunks=(3,))  # big-endian array member, nested records
        f.create_dataset("vlen_text", data=text)  # rewritten: its text has no fixed width
        fill = np.array((np.array([1, 2, 3]), 9), ARRAY_MEMBERS)
        f.create_dataset("fill", shape=(3,), dtype=ARRAY_MEMBERS, chunks=(2,), fillvalue=fill)
        f["fill"][0] = flat[1]
        f.create_dataset("scalar", data=flat[1])


@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_compound_members_that_are_arrays_read_as_h5py_reads_them(threshold, tmp_path):
    from h5lens.format.dtypes_forms import restore_array_fields

    path = tmp_path / "members.h5"
    build_array_members(path)
    manifest = h5lens.index(path, inline_threshold=threshold)
    root, group = h5lens.open(manifest), h5lens.open_group(manifest)
    with h5py.File(path) as f:
        for name, ds in list(f.items()):  # not inside h5py's iteration: it holds h5py's lock
            want = np.asarray(ds[()])
            got = root[name]
            assert got.dtype.names == ds.dtype.names, name
            _same_records(np.asarray(got[()]), want, name)
            if ds.shape:
                _same_records(np.asarray(got[1:]), want[1:], f"{name}[1:]")
            # zarr gives nested records of the same bytes; _ARRAY_FIELDS views them back
            stored = np.asarray(group[name][...])
            table = group[name].attrs["_ARRAY_FIELDS"]
            _same_records(stored.view(restore_array_fields(stored.dtype, table)), want, f"{name} through zarr")
        if threshold == 0:
            for name in ("chunked", "contiguous"):  # "mixed" is repacked: another byte order
                assert (manifest.chunks[name].source >= 0).any(), f"{name} is referenced"


def test_compounds_with_members_that_are_sequences_read_as_h5py_reads_them(tmp_path):
    """A compound with ragged members (NWB's and PyTables' tables of spike times): an awkward
    RecordArray, sequence members as ListOffsetArrays; navigation gives h5py's records."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "units.h5"
    unit = np.dtype([("id", "<i4"), ("spikes", h5py.vlen_dtype(np.float64)), ("weight", ">f4"),
                     ("channels", h5py.vlen_dtype(np.dtype(">u2")))])  # fmt: skip
    with h5py.File(path, "w") as f:
        table = f.create_dataset("units", shape=(3,), dtype=unit, chunks=(2,))
        table[0] = (1, np.array([0.1, 0.2]), 1.5, np.array([3, 4], ">u2"))
        table[1] = (2, np.zeros(0), 2.5, np.zeros(0, ">u2"))
        table[2] = (3, np.array([9.0]), -1.0, np.array([7], ">u2"))
        grid = f.create_dataset("grid", shape=(2, 2), dtype=unit)
        grid[...] = np.array([[table[0], table[1]], [table[2], table[0]]], dtype=unit)
        f.create_dataset("unwritten", shape=(2,), dtype=unit)
    manifest = h5lens.index(path)
    manifest.save(tmp_path / "m.json")
    for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
        with h5py.File(path) as f:
            for name in ("units", "grid", "unwritten"):
                want, got = f[name][()], root[name][()]
                assert got.shape == want.shape and root[name].dtype.names == f[name].dtype.names, name
                for field in unit.names:
                    for g, w in zip(got[field].ravel(), want[field].ravel(), strict=True):
                        np.testing.assert_array_equal(g, w, err_msg=f"{name}.{field}")
            np.testing.assert_array_equal(root["units"][1]["spikes"], f["units"][1]["spikes"])
    group = h5lens.open_group(manifest)
    records = anndata.io.read_elem(group["units"]).to_list()
    with h5py.File(path) as f:
        assert records == [{n: (r[n].tolist() if isinstance(r[n], np.ndarray) else r[n].item()) for n in unit.names}
                           for r in f["units"][()]]  # fmt: skip
    assert h5lens.validate(manifest) == []


@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_sequences_of_strings_read_as_h5py_reads_them(threshold, tmp_path):
    """Variable-length sequences of variable-length strings (``vlen_dtype(string_dtype())``):
    awkward lists of strings (bytestrings for the ASCII set or bytes that are not UTF-8);
    navigation gives h5py's object arrays of bytes, anndata the awkward array of text."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "strings.h5"
    text = [np.array(["a", "bé", ""], dtype=object), np.zeros(0, dtype=object), np.array(["xyz"], dtype=object)]
    with h5py.File(path, "w") as f:
        f.create_dataset("text", data=_objects(text, (3,)), dtype=h5py.vlen_dtype(h5py.string_dtype()))
        f.create_dataset("grid", data=_objects(text + [text[0]], (2, 2)), dtype=h5py.vlen_dtype(h5py.string_dtype()),
                         chunks=(1, 2), compression="gzip")  # fmt: skip
        raw = [np.array([b"a\xff", b""], dtype=object), np.array([b"q"], dtype=object)]
        f.create_dataset("ascii", data=_objects(raw, (2,)), dtype=h5py.vlen_dtype(h5py.string_dtype("ascii")))
        f.create_dataset("unwritten", shape=(2,), dtype=h5py.vlen_dtype(h5py.string_dtype()))
    root = h5lens.open(h5lens.index(path, inline_threshold=threshold))
    group = h5lens.open_group(h5lens.index(path))
    with h5py.File(path) as f:
        for name, ds in list(f.items()):  # not inside h5py's iteration: it holds h5py's lock
            want = ds[()]
            node = root[name]
            assert node.shape == ds.shape and node.dtype == ds.dtype, name
            assert node.element_dtype.metadata == h5py.check_vlen_dtype(ds.dtype).metadata, name
            _same_objects(node[()], want, name)
            _same_objects(node[1:], ds[1:], f"{name}[1:]")
            got = anndata.io.read_elem(group[name]).to_list()
            strings = group[name].attrs["form"].count('"string"')
            decode = (lambda b: b.decode("utf-8")) if strings else (lambda b: b)

            def nested(values, decode=decode):
                if values.dtype == object and values.size and isinstance(values.flat[0], np.ndarray):
                    return [nested(v) for v in values]
                return [decode(v) for v in values.tolist()]

            assert got == nested(want), name
    assert '"string"' in group["text"].attrs["form"] and '"bytestring"' in group["ascii"].attrs["form"]


def test_sequences_of_references_read_as_h5py_reads_them(tmp_path):
    """Variable-length sequences of object references: lists of their targets' paths (as
    a dataset of references holds them); navigation gives the nodes h5py's references name."""
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "refs.h5"
    with h5py.File(path, "w") as f:
        target, group = f.create_dataset("x", data=[1, 2]), f.create_group("g")
        refs = f.create_dataset("refs", shape=(3,), dtype=h5py.vlen_dtype(h5py.ref_dtype))
        refs[0] = _objects([target.ref, group.ref], (2,))
        refs[2] = _objects([h5py.Reference()], (1,))
    manifest = h5lens.index(path)
    root = h5lens.open(manifest)
    with h5py.File(path) as f:
        want = f["refs"][()]
        got = root["refs"][()]
        assert got.shape == want.shape and root["refs"].dtype == f["refs"].dtype
        for mine, theirs in zip(got, want, strict=True):
            assert [None if n is None else n.h5_path for n in mine] == [f[r].name if r else None for r in theirs]
        stored = anndata.io.read_elem(h5lens.open_group(manifest)["refs"]).to_list()
        assert stored == [[f[r].name if r else "" for r in theirs] for theirs in want]


def test_sequences_of_region_references_are_refused_before_h5py_reads_them(tmp_path):
    """Variable-length sequences of region references: h5py 3 corrupts memory reading them
    (a second read of the dataset crashes the process), so h5lens refuses them by name
    without reading them, and the process goes on."""
    path = tmp_path / "regions.h5"
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", data=np.arange(20).reshape(4, 5))
        refs = f.create_dataset("refs", shape=(2,), dtype=h5py.vlen_dtype(h5py.regionref_dtype))
        refs[0] = _objects([x.regionref[1:3, 2:4], x.regionref[0, 4]], (2,))
    with pytest.raises(h5lens.errors.UnsupportedFeatureError, match="/refs: variable-length sequences of region"):
        h5lens.index(path)
    with pytest.raises(h5lens.errors.UnsupportedFeatureError, match="/refs"):
        h5lens.index(path)  # a second scan in the same process: still nothing read
