"""The HDF5 types PyTables writes that h5lens once refused, each read back as h5py reads it
(docs/manifest-format.md, "Forms for HDF5 types zarr has no data type for"):

* variable-length sequences of fixed-length byte strings (PyTables' ``VLArray`` of
  strings): awkward lists of bytestrings;
* compounds with a member that is an array of variable-length strings (PyTables'
  ``Table`` with such a column), and compounds mixing sequences, strings and arrays: an
  awkward ``RecordArray``;
* long doubles (``H5T_NATIVE_LDOUBLE``, numpy's float128): their stored bits referenced as
  zarr ``raw_bytes`` with the ``_FLOAT_LAYOUT`` attribute; ``h5lens.open`` and
  ``engine="h5lens"`` give np.longdouble, plain zarr the bytes; long double attributes as
  their exact hexadecimal text.

Every file here is written by h5py (the oracle), never copied from PyTables' test data.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t

import h5lens
from h5lens.format.long_double import native_layout

X87 = native_layout() is not None and native_layout().normalization == "none"  # x86's long double


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
                  ("d_name", ">i2", (5, 10)), ("e_name", ">f4"), ("f_name", ">f8", (10,)),
                  ("g_name", "u1")])  # fmt: skip
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


# -- long doubles ---------------------------------------------------------------------------


def _long_doubles(*, subnormal: bool = True) -> np.ndarray:
    info = np.finfo(np.longdouble)
    values = (np.arange(24, dtype=np.longdouble) - 5) / 3  # bits float64 does not have
    values[:7] = [np.inf, -np.inf, np.nan, -0.0, info.max, info.smallest_subnormal * 5 if subnormal else 7, info.tiny]
    return values


def _low_level(f: h5py.File, name: str, tid: h5t.TypeID, data: np.ndarray, *, compact: bool = False) -> None:
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if compact:
        dcpl.set_layout(h5d.COMPACT)
    ds = h5d.create(f.id, name.encode(), tid, h5s.create_simple(data.shape), dcpl=dcpl)
    ds.write(h5s.ALL, h5s.ALL, data)  # libhdf5 converts np.longdouble to the file's type


def _float_type(base: h5t.TypeID, **changes: object) -> h5t.TypeID:
    tid = base.copy()
    for setter, value in changes.items():
        getattr(tid, f"set_{setter}")(*value if isinstance(value, tuple) else (value,))
    return tid


def build_long_doubles(path: Path) -> None:
    values = _long_doubles()
    native = h5t.NATIVE_LDOUBLE
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", data=values.reshape(4, 6))
        f.create_dataset("chunked", data=values, chunks=(5,), compression="gzip", shuffle=True)
        f.create_dataset("scalar", data=values[8])
        unwritten = f.create_dataset("unwritten", shape=(10,), dtype=np.longdouble, chunks=(4,),
                                     fillvalue=np.longdouble(1) / 3)  # fmt: skip
        unwritten[:4] = values[:4]
        f.create_dataset("empty", data=h5py.Empty(np.longdouble))
        pairs = h5t.array_create(native, (2,))  # an HDF5 array element type: pairs of long doubles
        h5d.create(f.id, b"array_type", pairs, h5s.create_simple((3,))).write(
            h5s.ALL, h5s.ALL, np.ascontiguousarray(values[:6].reshape(3, 2)), mtype=pairs
        )
        _low_level(f, "compact", native, values[:8], compact=True)
        _low_level(f, "big_endian", _float_type(native, order=h5t.ORDER_BE), values)
        # Layouts no platform's long double has, which h5py reads as np.longdouble (converted
        # by libhdf5, h5lens decodes the fields). No subnormals: libhdf5 converts x87's (no
        # implied bit) wrongly between such layouts (5 * 2**-16445 is stored as 3 * 2**-16445
        # and read back as 2**-16445); h5lens gives what the stored bits are.
        normal = _long_doubles(subnormal=False)
        _low_level(f, "at_offset_16", _float_type(native, offset=16), normal)  # the x87 bits 16 bits up
        _low_level(f, "packed_10_bytes", _float_type(native, size=10), normal)  # stored narrower than numpy's
        implied = _float_type(h5t.IEEE_F128LE, fields=(127, 112, 15, 49, 63), ebias=16383)
        _low_level(f, "ieee_like_64_bits", implied, normal)


def _stored_bytes(ds: h5py.Dataset) -> np.ndarray:
    """The elements' stored bytes, as libhdf5 reads them into memory of the file's own type."""
    tid = ds.id.get_type()
    element = tid.get_super() if tid.get_class() == h5t.ARRAY else tid
    out = np.zeros(ds.shape + ds.dtype.shape, dtype=f"V{element.get_size()}")
    ds.id.read(h5s.ALL, h5s.ALL, out, mtype=tid)
    return out


def _same_long_doubles(got: object, want: object, where: str) -> None:
    assert type(got) is type(want), (where, type(got), type(want))
    got_array, want_array = np.asarray(got), np.asarray(want)
    assert got_array.dtype == np.longdouble and got_array.shape == want_array.shape, where
    np.testing.assert_array_equal(got_array, want_array, err_msg=where)  # NaN equals NaN here
    np.testing.assert_array_equal(np.signbit(got_array), np.signbit(want_array), err_msg=f"{where} signs")


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_long_doubles_read_as_h5py_reads_them(threshold, tmp_path):
    path = tmp_path / "float.h5"
    build_long_doubles(path)
    manifest = h5lens.index(path, inline_threshold=threshold)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        names = list(f)
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for name in names:
                ds, node = f[name], root[name]
                if ds.shape is None:
                    assert node.shape is None and node[()].dtype == ds.dtype == np.longdouble, name
                    continue
                assert node.dtype == np.longdouble and ds.dtype.base.kind == "f" and ds.dtype.base.itemsize == 16, name
                _same_long_doubles(node[()], ds[()], name)
                if ds.shape and ds.shape[0] > 2:
                    _same_long_doubles(node[1:3], ds[1:3], f"{name}[1:3]")
                    _same_long_doubles(node[1], ds[1], f"{name}[1]")
    if threshold == 0:  # the stored bytes are referenced, not copied (copied: compact, and wider in numpy)
        for name in ("contiguous", "chunked", "big_endian", "at_offset_16", "ieee_like_64_bits", "array_type"):
            table = manifest.chunks[name]
            assert (table.source >= 0).any() and not table.inline, name
            assert manifest.nodes[name]["data_type"]["name"] == "raw_bytes", name
    assert h5lens.validate(manifest) == []


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
def test_long_doubles_are_their_stored_bytes_through_plain_zarr(tmp_path):
    """Plain zarr (any reader without h5lens) gets the stored bytes; the attribute
    _FLOAT_LAYOUT says what they are, as libhdf5 describes the type."""
    path = tmp_path / "float.h5"
    build_long_doubles(path)
    manifest = h5lens.index(path, inline_threshold=0)
    group = h5lens.open_group(manifest)
    with h5py.File(path) as f:
        for name in ("contiguous", "chunked", "compact", "big_endian", "at_offset_16", "packed_10_bytes", "unwritten"):
            tid = f[name].id.get_type()
            layout = group[name].attrs["_FLOAT_LAYOUT"]
            assert (layout["sign"], *layout["exponent"], *layout["mantissa"]) == tid.get_fields(), name
            assert (layout["size"], layout["bias"]) == (tid.get_size(), tid.get_ebias()), name
            assert layout["order"] == ("big" if tid.get_order() == h5t.ORDER_BE else "little"), name
            raw = group[name][...]
            assert raw.dtype == np.dtype(f"V{tid.get_size()}"), name
            if name == "unwritten":  # its missing chunk is the fill value's stored bits
                raw, want = raw[4:], np.full(6, np.longdouble(1) / 3)
                assert np.array_equal(h5lens.open(manifest)[name][4:], want)
                continue
            assert raw.tobytes() == _stored_bytes(f[name]).tobytes(), name


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
def test_long_doubles_through_the_xarray_engine(tmp_path):
    xr = pytest.importorskip("xarray")
    path = tmp_path / "scales.h5"
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", data=np.arange(24.0))
        x.make_scale("x")
        v = f.create_dataset("v", data=_long_doubles(), chunks=(5,))
        v.dims[0].attach_scale(x)
        v.attrs["step"] = np.longdouble(1) / 7
    h5lens.index(path).save(tmp_path / "m.json")
    with xr.open_dataset(tmp_path / "m.json", engine="h5lens") as ds, h5py.File(path) as f:
        assert ds["v"].dtype == np.longdouble
        _same_long_doubles(ds["v"].values, f["v"][()], "v")
        _same_long_doubles(ds["v"][3:9].values, f["v"][3:9], "v[3:9]")
        _same_long_doubles(ds["v"].isel(x=[1, 5, 20]).values, f["v"][[1, 5, 20]], "v[[1, 5, 20]]")
        _same_long_doubles(ds["v"].attrs["step"], f["v"].attrs["step"], "step")
        assert "_FLOAT_LAYOUT" not in ds["v"].attrs  # the values are np.longdouble here, no longer bits


def test_complex_long_doubles_and_records_through_the_xarray_engine(tmp_path):
    xr = pytest.importorskip("xarray")
    path = tmp_path / "scales.h5"
    values = {
        "c": np.array([1 + 2j, 3 - 4j, 0.5j], np.clongdouble) / 3,
        "r": np.array([(1, 0.5), (2, 1.5), (3, -2.0)], dtype=[("a", "<i4"), ("x", np.longdouble)]),
    }
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", data=np.arange(3.0))
        x.make_scale("x")
        for name, data in values.items():
            f[name] = data
            f[name].dims[0].attach_scale(x)
    with xr.open_dataset(h5lens.index(path), engine="h5lens") as ds, h5py.File(path) as f:
        for name in values:
            assert ds[name].dtype == f[name].dtype, name
            assert ds[name].values.tobytes() == f[name][()].tobytes(), name
            assert ds[name][1:].values.tobytes() == f[name][1:].tobytes(), name


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
def test_long_double_attributes_come_back_as_h5py_gives_them(tmp_path):
    """Each value's exact hexadecimal text in the JSON (which float.fromhex reads), typed
    ``longdouble`` / ``clongdouble``: h5lens.open gives np.longdouble / np.clongdouble."""
    path = tmp_path / "attrs.h5"
    values = _long_doubles()
    with h5py.File(path, "w") as f:
        f.attrs["one"] = values[9]
        f.attrs["grid"] = values[:12].reshape(3, 4)
        f.attrs["pair"] = np.clongdouble(values[9]) + np.clongdouble(values[10]) * 1j
        f.attrs["pairs"] = values[8:12].astype(np.clongdouble) * (1 + 2j)
        f.attrs["record"] = np.array((3, values[9]), dtype=[("n", "<i4"), ("x", np.longdouble)])
    manifest = h5lens.index(path)
    manifest.save(tmp_path / "m.json")
    text = manifest.nodes[""]["attributes"]
    assert isinstance(text["one"], str) and float.fromhex(text["one"]) == float(values[9])
    assert text["record"] == {"n": 3, "x": text["one"]}  # inside a compound: the text, untyped
    with h5py.File(path) as f:
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            _same_long_doubles(root.attrs["one"], f.attrs["one"], "one")
            _same_long_doubles(root.attrs["grid"], f.attrs["grid"], "grid")
            for name in ("pair", "pairs"):
                got, want = root.attrs[name], f.attrs[name]
                assert type(got) is type(want) and np.asarray(got).dtype == np.clongdouble, name
                np.testing.assert_array_equal(got, want, err_msg=name)


def test_long_doubles_this_platform_cannot_hold_are_refused_by_name(tmp_path):
    """A manifest whose floats are wider than this platform's long double (as x87 values
    read where np.longdouble is a float64, which h5py cannot read there either): reading
    raises, naming the dataset; plain zarr still gives the bytes."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=np.arange(4.0))
    manifest = h5lens.index(path)
    doc = manifest.nodes["d"]
    doc["data_type"] = {"name": "raw_bytes", "configuration": {"length_bytes": 8}}
    doc["fill_value"] = "AAAAAAAAAAA="
    doc["codecs"] = [{"name": "bytes", "configuration": {}}]
    # 8-byte floats with a 32-bit exponent: a range no platform's long double has
    layout = {"size": 8, "order": "little", "sign": 63, "exponent": [31, 32], "mantissa": [0, 31]}
    doc["attributes"]["_FLOAT_LAYOUT"] = {**layout, "bias": 2**31 - 1, "normalization": "implied"}
    with pytest.raises(h5lens.UnsupportedFeatureError, match="/d: 8-byte floats cannot become np.longdouble exactly"):
        h5lens.open(manifest)["d"][()]
    assert h5lens.open_group(manifest)["d"][...].dtype == np.dtype("V8")


def test_long_doubles_in_records_this_platform_cannot_hold_are_refused_by_name(tmp_path):
    """The same for a record's member: reading names the dataset; plain zarr gives the record."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=np.zeros(3, [("n", "<i4"), ("x", "<f8")]))
    manifest = h5lens.index(path)
    doc = manifest.nodes["d"]
    raw = {"name": "raw_bytes", "configuration": {"length_bytes": 8}}
    doc["data_type"] = {"name": "structured", "configuration": {"fields": [["n", "int32"], ["x", raw]]}}
    layout = {"size": 8, "order": "little", "sign": 63, "exponent": [31, 32], "mantissa": [0, 31]}
    doc["attributes"]["_FLOAT_LAYOUT"] = [[["x"], {**layout, "bias": 2**31 - 1, "normalization": "implied"}]]
    with pytest.raises(h5lens.UnsupportedFeatureError, match="/d: 8-byte floats cannot become np.longdouble exactly"):
        h5lens.open(manifest)["d"][()]
    assert h5lens.open_group(manifest)["d"][...].dtype == np.dtype([("n", "<i4"), ("x", "V8")])


# -- long doubles in records, complex long doubles, sequences of long doubles ---------------------


def _significant(values: np.ndarray) -> np.ndarray:
    """The 80 bits of each x87 long double (a complex one's two), in native order: the 6
    padding bytes after them say nothing (libhdf5 leaves them as they come)."""
    floats = np.asarray(values).astype(np.clongdouble if values.dtype.kind == "c" else np.longdouble)
    floats = floats.reshape(-1).view(np.longdouble)
    return floats.view(np.uint8).reshape(-1, 16)[:, :10]


def _same_bits(got: object, want: object, where: str, *, nan_payloads: bool = True) -> None:
    """h5lens's values and h5py's, records field by field, long doubles bit for bit.
    ``nan_payloads=False``: floats decoded from another layout than this platform's, where
    a NaN is only a NaN of the same sign (libhdf5 and h5lens make different payloads)."""
    assert type(got) is type(want), (where, type(got), type(want))
    got_array, want_array = np.asarray(got), np.asarray(want)
    assert got_array.shape == want_array.shape and got_array.dtype.names == want_array.dtype.names, where
    if want_array.dtype.names is not None:
        for name in want_array.dtype.names:
            _same_bits(got_array[name], want_array[name], f"{where}.{name}", nan_payloads=nan_payloads)
    elif want_array.dtype.kind == "O":  # sequences
        for i, (g, w) in enumerate(zip(got_array.ravel(), want_array.ravel(), strict=True)):
            _same_bits(g, w, f"{where}[{i}]", nan_payloads=nan_payloads)
    elif want_array.dtype.kind in "fc" and want_array.dtype.itemsize >= 16 and want_array.dtype != np.complex128:
        assert got_array.dtype == want_array.dtype.newbyteorder("="), (where, got_array.dtype, want_array.dtype)
        got_bits, want_bits = _significant(got_array), _significant(want_array)
        if not nan_payloads:
            nan = np.isnan(np.asarray(want_array).astype(got_array.dtype).reshape(-1).view(np.longdouble))
            got_bits[nan, :8] = want_bits[nan, :8] = 0  # the mantissas of NaNs
            got_bits[nan, 8] = want_bits[nan, 8] = 0xFF  # (no NaN becomes an infinity this way)
        np.testing.assert_array_equal(got_bits, want_bits, err_msg=where)
    else:
        np.testing.assert_array_equal(got_array, want_array, err_msg=where)


def _compound_type(size: int, *members: tuple[str, int, h5t.TypeID]) -> h5t.TypeID:
    tid = h5t.create(h5t.COMPOUND, size)
    for name, offset, member in members:
        tid.insert(name.encode(), offset, member)
    return tid


RECORD = np.dtype([("n", "<i4"), ("x", np.longdouble), ("pair", np.longdouble, (2,)), ("inner", [("y", np.longdouble),
                   ("b", "u1")]), ("z", np.clongdouble)])  # fmt: skip
LD_BE = _float_type(h5t.NATIVE_LDOUBLE, order=h5t.ORDER_BE)


def _records(count: int) -> np.ndarray:
    values = _long_doubles(subnormal=False)[:count]
    out = np.zeros(count, RECORD)
    out["n"] = np.arange(count)
    out["x"] = values
    out["pair"] = np.stack([values[::-1], -values], axis=1)
    out["inner"]["y"], out["inner"]["b"] = values / 7, 3
    out["z"].real, out["z"].imag = values, values[::-1]
    return out


def build_long_double_records(path: Path) -> None:
    """Records with long double members (as h5py writes them, and in other layouts libhdf5
    writes), a member of each form: a long double, an array of them, a nested record, a complex one."""
    rows = _records(12)
    simple = np.zeros(6, [("n", "<i4"), ("x", np.longdouble)])
    simple["n"], simple["x"] = np.arange(6), _long_doubles(subnormal=False)[:6]
    native, ld = h5t.NATIVE_INT32, h5t.NATIVE_LDOUBLE
    implied = _float_type(h5t.IEEE_F128LE, fields=(127, 112, 15, 49, 63), ebias=16383)
    with h5py.File(path, "w") as f:
        f.create_dataset("records", data=rows, chunks=(5,), compression="gzip")
        f.create_dataset("scalar", data=rows[3])
        f.create_dataset("empty", data=h5py.Empty(RECORD))
        third = np.longdouble(1) / 3
        fill = np.array((7, third, [2, third], (third / 7, 9), 1j * third), dtype=RECORD)
        unwritten = f.create_dataset("unwritten", shape=(10,), dtype=RECORD, chunks=(4,), fillvalue=fill)
        unwritten[:3] = rows[:3]
        _low_level(f, "compact", f["records"].id.get_type(), rows[:4], compact=True)
        _low_level(f, "member_big_endian", _compound_type(20, ("n", 0, native), ("x", 4, LD_BE)), simple)  # referenced
        _low_level(f, "member_ieee_like", _compound_type(20, ("n", 0, native), ("x", 4, implied)), simple)  # referenced
        all_big_endian = _compound_type(20, ("n", 0, h5t.STD_I32BE), ("x", 4, LD_BE))
        _low_level(f, "all_big_endian", all_big_endian, simple)  # rewritten
        _low_level(f, "padded", _compound_type(32, ("n", 0, native), ("x", 16, ld)), simple)  # rewritten
        array_of_records = h5t.array_create(_compound_type(20, ("n", 0, native), ("x", 4, ld)), (2,))
        h5d.create(f.id, b"array_type", array_of_records, h5s.create_simple((3,))).write(
            h5s.ALL, h5s.ALL, simple.reshape(3, 2), mtype=array_of_records
        )
        text = f.create_dataset("with_text", shape=(3,), dtype=[("s", h5py.string_dtype()), ("x", np.longdouble)])
        text[0], text[2] = ("one third", np.longdouble(1) / 3), ("max", np.finfo(np.longdouble).max)


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
@pytest.mark.parametrize("convention", ["released", "proposal"])
@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_records_with_long_doubles_read_as_h5py_reads_them(threshold, convention, tmp_path):
    path = tmp_path / "records.h5"
    build_long_double_records(path)
    manifest = h5lens.index(path, inline_threshold=threshold, convention=convention)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        names = list(f)
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for name in names:
                ds, node = f[name], root[name]
                assert node.dtype.names == ds.dtype.base.names, name
                if ds.shape is None:
                    assert isinstance(node[()], h5py.Empty) and node[()].dtype == ds.dtype, name
                    continue
                if name == "with_text":  # a record with strings is stored with them as text (U), not h5py's bytes
                    got, want = node[()], ds[()]
                    _same_bits(got["x"], want["x"], name)
                    assert got["s"].tolist() == [text.decode() for text in want["s"]], name
                    continue
                payloads = name != "member_ieee_like"  # decoded from its own layout
                _same_bits(node[()], ds[()], name, nan_payloads=payloads)
                if ds.shape and ds.shape[0] > 2:
                    _same_bits(node[1:3], ds[1:3], f"{name}[1:3]", nan_payloads=payloads)
                    _same_bits(node[1], ds[1], f"{name}[1]", nan_payloads=payloads)  # one record: np.void, as h5py
            assert root["records"].dtype == RECORD
    if threshold == 0:  # records stored as h5py reads them: referenced, their long doubles the stored bytes
        for name in ("records", "unwritten", "member_big_endian", "member_ieee_like", "array_type"):
            table = manifest.chunks[name]
            assert (table.source >= 0).any() and not table.inline, name
            assert manifest.nodes[name]["data_type"]["name"] == "structured", name
    assert h5lens.validate(manifest) == []


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
def test_records_with_long_doubles_are_their_stored_bytes_through_plain_zarr(tmp_path):
    """Plain zarr gives the records with each long double member as raw bytes (an array
    member as records of them); _FLOAT_LAYOUT lists each member's layout by field path."""
    path = tmp_path / "records.h5"
    build_long_double_records(path)
    manifest = h5lens.index(path, inline_threshold=0)
    group = h5lens.open_group(manifest)
    with h5py.File(path) as f:
        for name in ("records", "member_big_endian", "member_ieee_like"):
            raw = group[name][...]
            assert raw.tobytes() == _stored_bytes(f[name]).tobytes(), name
            tid = f[name].id.get_type()
            for where, layout in group[name].attrs["_FLOAT_LAYOUT"]:
                member = tid
                for part in where:
                    member = member.get_member_type(member.get_member_index(part.encode()))
                    member = member.get_super() if member.get_class() == h5t.ARRAY else member
                if layout.get("complex"):  # a pair of long doubles, r then i
                    assert member.get_member_offset(1) == layout["size"], (name, where)
                    member = member.get_member_type(0)
                assert (layout["sign"], *layout["exponent"], *layout["mantissa"]) == member.get_fields(), (name, where)
                assert layout["order"] == ("big" if member.get_order() == h5t.ORDER_BE else "little"), (name, where)
                assert raw.dtype[where[0]].base.kind == "V", (name, where)
        listed = [where for where, _ in group["records"].attrs["_FLOAT_LAYOUT"]]
        assert listed == [["x"], ["pair"], ["inner", "y"], ["z"]]


def build_complex_long_doubles(path: Path) -> None:
    values = _long_doubles()
    pairs = np.empty(values.shape, np.clongdouble)
    pairs.real, pairs.imag = values, values[::-1]
    ld = h5t.NATIVE_LDOUBLE
    with h5py.File(path, "w") as f:
        f.create_dataset("complex", data=pairs.reshape(4, 6), chunks=(3, 4), compression="gzip", shuffle=True)
        f.create_dataset("scalar", data=pairs[9])
        f.create_dataset("empty", data=h5py.Empty(np.clongdouble))
        unwritten = f.create_dataset("unwritten", shape=(10,), dtype=np.clongdouble, chunks=(4,),
                                     fillvalue=np.clongdouble(1j) / 3)  # fmt: skip
        unwritten[:4] = pairs[:4]
        _low_level(f, "compact", f["complex"].id.get_type(), pairs[:5], compact=True)
        _low_level(f, "big_endian", _compound_type(32, ("r", 0, LD_BE), ("i", 16, LD_BE)), pairs)  # referenced
        _low_level(f, "swapped", _compound_type(32, ("r", 16, ld), ("i", 0, ld)), pairs)  # h5py's values copied
        _low_level(f, "padded", _compound_type(40, ("r", 0, ld), ("i", 20, ld)), pairs)  # h5py's values copied
        pair_arrays = h5t.array_create(f["complex"].id.get_type(), (2,))
        h5d.create(f.id, b"array_type", pair_arrays, h5s.create_simple((3,))).write(
            h5s.ALL, h5s.ALL, np.ascontiguousarray(pairs[:6].reshape(3, 2)), mtype=pair_arrays
        )
        # complex128 stored elsewhere than numpy keeps its parts: h5py names complex numbers by
        # their members' names alone, so these are complex128 that libhdf5 must rearrange
        doubles = np.array([1 + 2j, -3.5 + 4j, np.inf - 1j])
        _low_level(f, "c128_swapped", _compound_type(16, ("r", 8, h5t.IEEE_F64LE), ("i", 0, h5t.IEEE_F64LE)), doubles)
        _low_level(f, "c128_padded", _compound_type(24, ("r", 0, h5t.IEEE_F64LE), ("i", 12, h5t.IEEE_F64LE)), doubles)


def _h5py_complex(ds: h5py.Dataset) -> object:
    """h5py's values of a complex dataset. A big-endian complex long double h5py reads as
    '>c32' whose bytes are little-endian ones (its memory type for 32-byte complex numbers is
    the native long double whatever the byte order), so those are read as native values."""
    if ds.dtype.byteorder == ">" and ds.dtype.itemsize == 32:
        return ds.astype(np.clongdouble)[()]
    return ds[()]


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_complex_long_doubles_read_as_h5py_reads_them(threshold, tmp_path):
    path = tmp_path / "complex.h5"
    build_complex_long_doubles(path)
    manifest = h5lens.index(path, inline_threshold=threshold)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        names = list(f)
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for name in names:
                ds, node = f[name], root[name]
                if ds.shape is None:
                    assert node.shape is None and node[()].dtype == ds.dtype == np.clongdouble, name
                    continue
                assert node.dtype == ds.dtype.base.newbyteorder("="), name
                want = _h5py_complex(ds)
                _same_bits(node[()], want, name)
                if ds.shape and ds.shape[0] > 2:
                    _same_bits(node[1:3], want[1:3], f"{name}[1:3]")
                    _same_bits(node[1], want[1], f"{name}[1]")
    if threshold == 0:
        for name in ("complex", "unwritten", "big_endian", "array_type"):  # pairs of the stored bytes, referenced
            table = manifest.chunks[name]
            assert (table.source >= 0).any() and not table.inline, name
            doc = manifest.nodes[name]
            assert doc["data_type"] == {"name": "raw_bytes", "configuration": {"length_bytes": 32}}, name
            assert doc["attributes"]["_FLOAT_LAYOUT"]["complex"] is True, name
        group = h5lens.open_group(manifest)
        with h5py.File(path) as f:
            for name in ("complex", "big_endian"):
                assert group[name][...].tobytes() == _stored_bytes(f[name]).tobytes(), name
        for name in ("swapped", "padded", "c128_swapped", "c128_padded"):  # rearranged by libhdf5: copied
            assert not (manifest.chunks[name].source >= 0).any(), name
    assert h5lens.validate(manifest) == []


def build_long_double_sequences(path: Path) -> None:
    values = _long_doubles()
    ld_record = np.dtype([("n", "<i2"), ("x", np.longdouble)])
    with h5py.File(path, "w") as f:
        sequences = f.create_dataset("sequences", shape=(4,), dtype=h5py.vlen_dtype(np.longdouble))
        sequences[0], sequences[2], sequences[3] = values[:3], values, values[7:9]
        grid = f.create_dataset("grid", shape=(2, 2), dtype=h5py.vlen_dtype(np.dtype(">f16")), chunks=(1, 2))
        grid[0, 0], grid[1, 1] = values[5:9], values[:1]
        pairs = f.create_dataset("complex", shape=(2,), dtype=h5py.vlen_dtype(np.clongdouble))
        pairs[0] = values[3:6] + 1j * values[9:12]
        records = f.create_dataset("records", shape=(2,), dtype=h5py.vlen_dtype(ld_record))
        records[1] = np.array([(1, values[4]), (2, values[10])], dtype=ld_record)
        with_sequences = [("x", np.longdouble), ("runs", h5py.vlen_dtype(np.longdouble))]
        table = f.create_dataset("table", shape=(3,), dtype=with_sequences)
        table[0], table[2] = (values[9], values[:4]), (values[4], values[10:12])
        f.create_dataset("unwritten", shape=(2,), dtype=h5py.vlen_dtype(np.longdouble))


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_sequences_of_long_doubles_read_as_h5py_reads_them(threshold, tmp_path):
    path = tmp_path / "sequences.h5"
    build_long_double_sequences(path)
    manifest = h5lens.index(path, inline_threshold=threshold)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        names = list(f)
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for name in names:
                ds, node = f[name], root[name]
                assert node.shape == ds.shape and node.dtype.names == ds.dtype.names, name
                _same_bits(node[()], ds[()], name)
                _same_bits(node[1:], ds[1:], f"{name}[1:]")
    assert h5lens.validate(manifest) == []


@pytest.mark.skipif(not X87, reason="h5py writes x87 long doubles only where np.longdouble is one")
def test_sequences_of_long_doubles_are_float128_that_anndata_and_awkward_read(tmp_path):
    """awkward's float128 / complex256: the data buffers are raw bytes in zarr (with this
    platform's _FLOAT_LAYOUT), which anndata's read_elem gives awkward, and awkward views as
    its long doubles: the values exactly."""
    anndata = pytest.importorskip("anndata")
    ak = pytest.importorskip("awkward")
    path = tmp_path / "sequences.h5"
    build_long_double_sequences(path)
    group = h5lens.open_group(h5lens.index(path))
    with h5py.File(path) as f:
        for name, primitive in (("sequences", "float128"), ("grid", "float128"), ("complex", "complex256")):
            node = group[name]
            assert f'"primitive": "{primitive}"' in node.attrs["form"], name
            data = next(node[k] for k in node.array_keys() if k.endswith("-data"))
            assert data.dtype == np.dtype(f"V{np.dtype(primitive).itemsize}") and "_FLOAT_LAYOUT" in data.attrs, name
            got = anndata.io.read_elem(node)
            want = f[name][()]
            for index in np.ndindex(want.shape):
                sequence = got[index]
                native = want[index].astype(want[index].dtype.newbyteorder("="))
                _same_bits(ak.to_numpy(sequence), native, f"{name}{index}")
        records = anndata.io.read_elem(group["records"])
        want = f["records"][1]
        _same_bits(ak.to_numpy(records[1]["x"]), want["x"], "records[1].x")
        table = anndata.io.read_elem(group["table"])
        _same_bits(ak.to_numpy(table["x"]), f["table"]["x"], "table.x")
        _same_bits(ak.to_numpy(table[2]["runs"]), f["table"][2]["runs"], "table[2].runs")


def test_committed_long_double_types_with_attributes_read_as_h5py_reads_them(tmp_path):
    """A committed datatype of long doubles (or records holding one) that carries attributes:
    its dtype and attributes as h5py gives them, and datasets of it read back."""
    path = tmp_path / "types.h5"
    with h5py.File(path, "w") as f:
        f["ld"] = np.dtype(np.longdouble)
        f["ld"].attrs["units"] = "K"
        f["rec"] = np.dtype([("a", "<i4"), ("x", np.longdouble)])
        f["rec"].attrs["n"] = 2
        f.create_dataset("values", data=np.arange(3, dtype=np.longdouble) / 3, dtype=f["ld"])
    root = h5lens.open(h5lens.index(path))
    with h5py.File(path) as f:
        for name in ("ld", "rec"):
            assert root[name].dtype == f[name].dtype
            assert dict(root[name].attrs) == dict(f[name].attrs)
        assert root["values"][...].tobytes() == f["values"][...].tobytes()
