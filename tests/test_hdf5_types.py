"""HDF5 element types whose stored bytes are not the numpy dtype h5py reads them as.

Each case is a small file written with h5py's low-level API, the way instrument, Fortran
and IDL writers lay such types out. Every case has one outcome class, asserted here:

* ``exact``: h5lens indexes it and every route reads back what h5py reads (h5lens's
  navigation, zarr over ``h5lens.open_group``, plain zarr over fsspec's reference
  filesystem), at inline thresholds 0 (references) and the default;
* ``refused``: h5py cannot read it either (or zarr has no type for it), and h5lens says so
  with an ``UnsupportedFeatureError`` naming the dataset, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pytest
import zarr
import zarr.storage
from h5py import h5d, h5p, h5s, h5t

import h5lens


def _dataset(f: h5py.File, name: str, tid: h5t.TypeID, data: np.ndarray | None, layout: str) -> None:
    dcpl = h5p.create(h5p.DATASET_CREATE)
    shape = (8,) if data is None else data.shape
    if layout == "chunked":
        dcpl.set_chunk((3,))
        dcpl.set_deflate(4)
    elif layout == "compact":
        dcpl.set_layout(h5d.COMPACT)
    ds = h5d.create(f.id, name.encode(), tid, h5s.create_simple(shape), dcpl=dcpl)
    if data is not None:
        ds.write(h5s.ALL, h5s.ALL, data)


def _integer(base: h5t.TypeID, precision: int, offset: int) -> h5t.TypeID:
    tid = base.copy()
    tid.set_precision(precision)
    tid.set_offset(offset)
    return tid


def _spacepad(size: int) -> h5t.TypeID:
    tid = h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(h5t.STR_SPACEPAD)
    return tid


def _bfloat16() -> h5t.TypeID:
    """float32's sign, exponent and top 7 mantissa bits in 2 bytes."""
    tid = h5t.IEEE_F32LE.copy()
    tid.set_fields(15, 7, 8, 0, 7)
    tid.set_offset(0)
    tid.set_precision(16)
    tid.set_size(2)
    tid.set_ebias(127)
    return tid


SIGNED = np.array([-2000, 5, -1, 2047, -2048, 7, 0, -9], "<i2")
UNSIGNED = np.array([1, 2, 4095, 0, 3, 5, 6, 7], "<u2")
WORDS = np.array([-(2**30), 5, -1, 2**30 - 1, 12, -7, 0, 99], ">i4")
FLOATS = np.array([1.0, -2.5, 3.140625, 0.0, 1e10, -1e-3, 7.0, -0.0], "f4")
TEXT = np.array([b"ab", b"abcdef", b"x", b"", b"a b", b"  c", b"q", b"zz"], "S6")


def build_bitfields(path: Path) -> None:
    with h5py.File(path, "w") as f:
        for layout in ("chunked", "contiguous", "compact"):
            _dataset(f, f"int12_{layout}", _integer(h5t.STD_I16LE, 12, 0), SIGNED, layout)
            _dataset(f, f"uint12_at4_{layout}", _integer(h5t.STD_U16LE, 12, 4), UNSIGNED, layout)
        _dataset(f, "int20_at5_be", _integer(h5t.STD_I32BE, 20, 5), (WORDS % (1 << 19)).astype(">i4"), "chunked")
        _dataset(f, "int31_be", _integer(h5t.STD_I32BE, 31, 0), WORDS, "contiguous")
        record = h5t.create(h5t.COMPOUND, 4)
        record.insert(b"a", 0, _integer(h5t.STD_I16LE, 10, 2))
        record.insert(b"b", 2, h5t.STD_U16LE)
        values = np.array([(-300, 1), (200, 2), (0, 3)], [("a", "<i2"), ("b", "<u2")])
        _dataset(f, "compound_member", record, values, "chunked")


def build_spacepad(path: Path) -> None:
    with h5py.File(path, "w") as f:
        for layout in ("chunked", "contiguous", "compact"):
            _dataset(f, f"text_{layout}", _spacepad(6), TEXT, layout)
        record = h5t.create(h5t.COMPOUND, 10)
        record.insert(b"name", 0, _spacepad(6))
        record.insert(b"n", 6, h5t.STD_I32LE)
        values = np.array([(b"ab", 1), (b"abcdef", 2), (b"c", 3)], [("name", "S6"), ("n", "<i4")])
        _dataset(f, "compound_member", record, values, "contiguous")


def build_user_floats(path: Path) -> None:
    with h5py.File(path, "w") as f:
        for layout in ("chunked", "contiguous", "compact"):
            _dataset(f, f"bfloat16_{layout}", _bfloat16(), FLOATS, layout)
        biased = h5t.IEEE_F32LE.copy()
        biased.set_ebias(100)  # a float32 layout with another bias: not IEEE, decoded by libhdf5
        _dataset(f, "float32_bias100", biased, FLOATS / 1e6, "chunked")


def build_refused(path: Path) -> None:
    with h5py.File(path, "w") as f:
        i24 = h5t.STD_I32LE.copy()
        i24.set_size(3)
        i24.set_precision(24)
        _dataset(f, "int24", i24, None, "contiguous")
    with h5py.File(path.with_name("time.h5"), "w") as f:
        _dataset(f, "time", h5t.UNIX_D32LE.copy(), None, "contiguous")


def _undefined_fill(dcpl: h5p.PropDCID) -> None:
    """``H5Pset_fill_value(dcpl, type, NULL)``: no fill value at all (PyTables writes such
    columns; h5py has no call for it)."""
    import ctypes

    import libhdf5

    lib = libhdf5.library()
    if lib is None:
        pytest.skip("cannot reach the libhdf5 h5py runs on to leave a fill value undefined")
    lib.H5Pset_fill_value.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    assert lib.H5Pset_fill_value(dcpl.id, h5t.NATIVE_INT32.id, None) >= 0


def build_undefined_fill(path: Path, *, written: bool = True) -> None:
    with h5py.File(path, "w") as f:
        for layout in ("chunked", "contiguous", "compact"):
            dcpl = h5p.create(h5p.DATASET_CREATE)
            if layout == "chunked":
                dcpl.set_chunk((3,))
            elif layout == "compact":
                dcpl.set_layout(h5d.COMPACT)
            _undefined_fill(dcpl)
            ds = h5d.create(f.id, f"x_{layout}".encode(), h5t.STD_I32LE, h5s.create_simple((8,)), dcpl=dcpl)
            if written or layout != "chunked":
                ds.write(h5s.ALL, h5s.ALL, np.arange(8, dtype="<i4"))
            assert dcpl.fill_value_defined() == h5d.FILL_VALUE_UNDEFINED


TIMES = np.array(["2024-01-01T00:00:00", "2024-06-01T12:30:00", "NaT", "1970-01-01"], "M8[ns]")


def build_opaque_times(path: Path) -> None:
    """h5py.opaque_dtype(datetime64 / timedelta64): 8-byte integers tagged with numpy's type."""
    with h5py.File(path, "w") as f:
        f.create_dataset("times", data=TIMES.astype(h5py.opaque_dtype(TIMES.dtype)), chunks=(3,))
        spans = np.array([1, 2, -3, 4], "m8[s]")
        f.create_dataset("spans", data=spans.astype(h5py.opaque_dtype(spans.dtype)))


BUILDERS: dict[str, Callable[[Path], None]] = {
    "bitfields": build_bitfields,
    "spacepad": build_spacepad,
    "user_floats": build_user_floats,
    "undefined_fill": build_undefined_fill,
    "opaque_times": build_opaque_times,
}


# cases whose chunks are referenced (the others libhdf5 decodes: their values are stored)
REFERENCED = {"bitfields", "spacepad", "opaque_times"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("types")
    made = {}
    for name, build in BUILDERS.items():
        made[name] = root / f"{name}.h5"
        build(made[name])
    return made


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def _plain(manifest: h5lens.Manifest, where: Path) -> zarr.Group:
    """Plain zarr over fsspec's reference filesystem (h5lens's codecs registered with zarr)."""
    manifest.to_json(where)
    fs = fsspec.filesystem("reference", fo=str(where), asynchronous=True, remote_protocol="file",
                           remote_options={"asynchronous": True})  # fmt: skip
    return zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)


@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
@pytest.mark.parametrize("case", list(BUILDERS))
def test_exact_as_h5py_reads_it(case, threshold, files, tmp_path):
    path = files[case]
    manifest = h5lens.index(path, inline_threshold=threshold)
    routes = {"navigation": h5lens.open(manifest), "zarr": h5lens.open_group(manifest)}
    with h5py.File(path) as f:
        names = sorted(f)
        for name in names:
            expected = f[name][()]
            for route, root in routes.items():
                got = np.asarray(root[name][()] if route == "navigation" else root[name][...])
                assert got.dtype == expected.dtype.newbyteorder("=") or got.dtype == expected.dtype, (route, name)
                np.testing.assert_array_equal(got, expected, err_msg=f"{case}/{name} through {route}")
            if threshold == 0 and case in REFERENCED and "compact" not in name and "compound" not in name:
                assert manifest.chunks[name].n_present and (manifest.chunks[name].source >= 0).any(), name  # referenced
    plain = _plain(manifest, tmp_path / "m.json")
    if _release(zarr.__version__) >= (3, 4, 1):  # older zarr lists an FsspecStore's members wrongly (zarr-python#3922)
        with h5py.File(path) as f:
            for name in names:
                np.testing.assert_array_equal(plain[name][...], f[name][()], err_msg=f"{case}/{name} plain zarr")


def test_chunks_never_written_with_no_fill_value_are_refused_as_h5py_refuses_them(tmp_path):
    path = tmp_path / "unwritten.h5"
    build_undefined_fill(path, written=False)
    with h5py.File(path) as f, pytest.raises(OSError, match="no data can be read"):
        f["x_chunked"][()]
    with pytest.raises(h5lens.UnsupportedFeatureError, match=r"/x_chunked: chunks never written and no fill value"):
        h5lens.index(path)


def test_bitfields_are_referenced_with_their_codec_not_copied(files):
    manifest = h5lens.index(files["bitfields"], inline_threshold=0)
    for name in ("int12_chunked", "uint12_at4_contiguous", "int20_at5_be"):
        codecs = manifest.nodes[name]["codecs"]
        assert codecs[0]["name"] == "h5lens.bitfield" and codecs[1]["name"] == "bytes", name
        assert not manifest.chunks[name].inline


@pytest.mark.parametrize(
    ("file", "name"), [("refused.h5", "/int24"), ("time.h5", "/time")], ids=["24-bit integer", "H5T_TIME"]
)
def test_refused_by_name_where_h5py_cannot_read_it(file, name, tmp_path):
    """(Long doubles, which zarr has no type for either, read back: tests/test_hdf5_types_pytables.py.)"""
    build_refused(tmp_path / "refused.h5")
    path = tmp_path / file
    with h5py.File(path) as f, pytest.raises((TypeError, ValueError, OSError)):
        f[name][()]
    with pytest.raises(h5lens.UnsupportedFeatureError, match=name):
        h5lens.index(path)


def _same_records(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert got.dtype.names == want.dtype.names, where
    for name in want.dtype.names:
        if want.dtype[name].names is not None:
            _same_records(got[name], want[name], f"{where}.{name}")
        else:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{where}.{name}")


@pytest.mark.parametrize("threshold", [0, 1000], ids=["refs", "inline1000"])
def test_nested_compounds_with_gaps_or_another_byte_order_read_as_h5py(threshold, tmp_path):
    """A record inside a record with padding between its fields, or fields of another byte
    order (zarr's structured type is packed, in one byte order): the records are repacked,
    every field as h5py reads it (they were refused, the message blaming variable-length
    members the records do not have)."""
    gaps = np.dtype({"names": ["a", "b"], "formats": ["<i2", "<f8"], "offsets": [0, 8], "itemsize": 24})
    mixed = np.dtype([("x", ">i4"), ("y", "<f4")])
    outer = np.dtype([("n", "<i4"), ("gaps", gaps), ("mixed", mixed)])
    values = np.zeros(5, outer)
    values["n"] = np.arange(5)
    values["gaps"]["a"], values["gaps"]["b"] = np.arange(5) * 3, np.arange(5) / 4
    values["mixed"]["x"], values["mixed"]["y"] = -np.arange(5), np.arange(5) * 1.5
    path = tmp_path / "nested.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=values, chunks=(2,), compression="gzip")
        f.create_dataset("contiguous", data=values)
    manifest = h5lens.index(path, inline_threshold=threshold)
    with h5py.File(path) as f:
        for name in ("chunked", "contiguous"):
            want = f[name][()]
            _same_records(h5lens.open(manifest)[name][()], want, name)
            _same_records(np.asarray(h5lens.open_group(manifest)[name][...]), want, name)


def test_attributes_zarr_json_cannot_type_come_back_as_h5py_gives_them(tmp_path):
    """Complex, datetime64 / timedelta64 (opaque-tagged) and narrow numeric attributes: the
    JSON holds [real, imaginary] pairs and int64 counts, the manifest their types, and
    navigation gives h5py's values of h5py's types."""
    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        f.attrs["z"] = np.complex64(1 + 2j)
        f.attrs["zs"] = np.array([[1 + 2j, 3 - 1j]], "c16")
        f.attrs["when"] = np.array(TIMES[0]).astype(h5py.opaque_dtype(TIMES.dtype))
        f.attrs["times"] = TIMES.astype(h5py.opaque_dtype(TIMES.dtype))
        f.attrs["small"] = np.array([1, 2], "u1")
        f.attrs["f"] = np.float32(0.1)
    manifest = h5lens.index(path)
    for form in ("json", "h5lens"):
        manifest.save(tmp_path / f"m.{form}")
        root = h5lens.open(tmp_path / f"m.{form}").attrs
        with h5py.File(path) as f:
            for name, want in f.attrs.items():
                got = root[name]
                assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want), name
                np.testing.assert_array_equal(got, want, err_msg=name)



@pytest.mark.parametrize("convention_form", ["released", "proposal"])
def test_compound_attributes_come_back_with_h5pys_types(tmp_path, convention_form):
    """Compound attributes (one record, arrays of them, sequences of them): the JSON holds
    objects of field values, whose numbers would come back as float64 and int; the manifest
    records the compound type, and navigation gives h5py's values of
    h5py's types (np.void, structured arrays, object arrays of them)."""
    record = np.dtype([("t", "<f4"), ("n", ">i2"), ("ok", "?"), ("big", "<u8")])
    rows = np.array([(0.1, -3, True, 2**63 + 1), (np.nan, 7, False, 0)], record)
    path = tmp_path / "compound.h5"
    with h5py.File(path, "w") as f:
        f.attrs["one"] = rows[0]
        f.attrs["many"] = rows
        f.attrs.create("grid", data=np.array([rows, rows[::-1]]))
        sequences = np.empty(3, object)
        sequences[:] = [rows, rows[:0], rows[1:]]
        f.attrs.create("events", data=sequences, dtype=h5py.vlen_dtype(record))
        nested = np.dtype([("inner", record), ("x", "<f8")])
        f.attrs["nested"] = np.zeros((), nested)  # nested compounds: JSON objects, no type recorded
        f.create_dataset("x", data=np.arange(3.0))
        f["x"].attrs["one"] = rows[1]
    manifest = h5lens.index(path, convention=convention_form)
    manifest.save(tmp_path / "m.json")
    with h5py.File(path) as f:
        for root in (h5lens.open(manifest), h5lens.open(tmp_path / "m.json")):
            for node, attrs in ((root, f.attrs), (root["x"], f["x"].attrs)):
                for name, want in attrs.items():
                    got = node.attrs[name]
                    if name == "nested":
                        assert got == {"inner": {"t": 0.0, "n": 0, "ok": False, "big": 0}, "x": 0.0}
                        continue
                    assert type(got) is type(want), name
                    if name == "events":
                        assert got.shape == want.shape
                        for g, w in zip(got, want, strict=True):
                            _same_fields(g, w, name)
                        continue
                    _same_fields(np.asarray(got), np.asarray(want), name)


def _same_fields(got: np.ndarray, want: np.ndarray, where: str) -> None:
    """Same shape, same fields of the same types (in native order), same values (NaN too)."""
    assert got.shape == want.shape, where
    assert got.dtype == np.dtype([(n, want.dtype.fields[n][0].newbyteorder("=")) for n in want.dtype.names]), where
    for name in want.dtype.names:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{where}.{name}")
