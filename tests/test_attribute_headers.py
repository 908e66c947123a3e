"""Attributes read from object headers (h5lens.scan.hdf5.attributes) against h5py.

For every attribute of every object of a corpus of files (every attribute type h5py writes
and a few only libhdf5's C API does, both byte orders, every dataspace, dense storage,
creation order, shared messages, user blocks, MATLAB files, the shared real files), the
header parse must either leave the attribute (or the object) to h5py, or give exactly
what h5py's ``obj.attrs[name]`` gives: the same Python and numpy types, the same dtype
(byte order and h5py's string metadata included), shape and bytes, names in h5py's order.
``read_attributes`` with the header reader must equal ``read_attributes`` without it,
errors included. And each file is checked to have been read from its headers where it
should (so that falling back everywhere cannot pass).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from tests.libhdf5 import library
from tests.shared_data import DATA, shared_names

import h5lens
from h5lens.scan import attr_headers, header_arrays
from h5lens.scan.attr_headers import AttributeHeaders
from h5lens.scan.attrs import read_attributes
from h5lens.scan.hdf5 import local_superblock, reader_for
from h5lens.scan.hdf5.attributes import NULL

# H5Opublic.h: H5O_SHMESG_*_FLAG, one bit per message type
_SHMESG_SDSPACE, _SHMESG_DTYPE, _SHMESG_ATTR = 1 << 0x0001, 1 << 0x0003, 1 << 0x000C


# --------------------------------------------------------------------------- the comparison


class Tally:
    def __init__(self) -> None:
        self.from_header = 0  # attributes whose value the header parse gave
        self.by_h5py = 0  # attributes of parsed objects left to h5py
        self.objects_left = 0  # objects left to h5py whole
        self.objects = 0


def _objects(f: h5py.File) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = [("/", f)]
    f.visititems(lambda name, obj: found.append(("/" + name, obj)))
    return found


def _same_dtype(ours: np.dtype, theirs: np.dtype, where: str) -> None:
    assert ours == theirs, where
    assert ours.str == theirs.str, where  # byte order
    assert ours.metadata == theirs.metadata, where  # h5py's string encoding


def _same_value(ours: Any, theirs: Any, where: str) -> None:
    if isinstance(theirs, h5py.Empty):
        assert ours is NULL, where
        return
    assert type(ours) is type(theirs), (where, type(ours), type(theirs))
    if isinstance(theirs, str):  # a variable-length string
        assert ours == theirs, where
        return
    if isinstance(theirs, np.ndarray):
        _same_dtype(ours.dtype, theirs.dtype, where)
        assert ours.shape == theirs.shape, where
        if theirs.dtype.kind == "O":  # variable-length values: each element, not its pointer
            for mine, h5pys in zip(ours.flat, theirs.flat, strict=True):
                _same_value(mine, h5pys, where)
            return
    else:
        assert ours.dtype.str == theirs.dtype.str, where
    assert np.asarray(ours).tobytes() == np.asarray(theirs).tobytes(), where


def _outcome(obj: Any, path: str, **kw: Any) -> tuple[Any, ...]:
    types: dict[str, str] = {}
    calls: list[int] = []

    def resolve(ref: h5py.Reference) -> str | None:
        return obj.file[ref].name

    try:
        out = read_attributes(obj, path, resolve, types=types, before_variable=lambda: calls.append(1), **kw)
    except Exception as e:  # noqa: BLE001 - compared, whatever it is
        return ("error", type(e).__name__, str(e))
    return ("ok", json.dumps(list(out.items()), allow_nan=True), list(types.items()), len(calls))


def compare_file(path: Path | str) -> Tally:
    """Every attribute of every object of ``path``: header parse vs h5py."""
    tally = Tally()
    with open(path, "rb") as raw, h5py.File(path, "r") as f:
        superblock = local_superblock(raw)
        headers = AttributeHeaders(reader_for(raw), lambda: superblock, os.path.getsize(path))
        for name, obj in _objects(f):
            tally.objects += 1
            parsed = headers.attributes(obj)
            if parsed is None:
                tally.objects_left += 1
            else:
                try:
                    expected = [n if isinstance(n, bytes) else n.encode("utf-8") for n in obj.attrs]
                except (OSError, RuntimeError):
                    expected = None  # libhdf5 refuses to list them: read_attributes must fail alike
                if expected is not None:
                    assert [a.name for a in parsed] == expected, name
                for a in parsed:
                    where = f"{path}:{name} attribute {a.name!r}"
                    if a.dtype is None:
                        tally.by_h5py += 1
                        continue
                    tally.from_header += 1
                    if expected is None:
                        continue
                    _same_dtype(a.dtype, obj.attrs.get_id(a.name).dtype, where)
                    _same_value(a.value, obj.attrs[a.name], where)
            for nan_as_string in (False, True):
                plain = _outcome(obj, name, nan_as_string=nan_as_string)
                fast = _outcome(obj, name, nan_as_string=nan_as_string, headers=headers)
                # the global heap is checked before h5py reads variable-length values; values
                # the header parse read from the heap were checked by that parse
                assert fast[:3] == plain[:3], name
                assert fast[3:] <= plain[3:], name
    return tally


# --------------------------------------------------------------------------- the corpus

_SHAPES = [(), (3,), (2, 3), (0,), (2, 0), (1, 1, 1)]


def _group(parent: h5py.Group, name: str, *, track: bool = False) -> h5py.Group:
    """A group that keeps any number of attributes compact (in version 2 headers more than
    8 go to dense storage by default, which the header parse leaves to h5py)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_attr_phase_change(1000, 900)
    if track:
        gcpl.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
    h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl)
    return parent[name]


def _numbers(f: h5py.File) -> None:
    rng = np.random.default_rng(0)
    target = _group(f, "numbers")
    ds = f.create_dataset("a dataset", data=np.arange(4))
    ds.attrs["i"] = np.int32(-3)
    ds.attrs["f"] = np.array([1.5, 2.5], ">f8")
    ds.attrs["s"] = np.bytes_(b"double")
    for order in "<>":
        for kind in "iu":
            for size in (1, 2, 4, 8):
                dtype = np.dtype(f"{order}{kind}{size}")
                info = np.iinfo(dtype)
                for shape in _SHAPES:
                    values = rng.integers(info.min, info.max, size=shape, dtype=dtype.newbyteorder("="), endpoint=True)
                    target.attrs.create(f"{kind}{size}{order}{shape}", values, dtype=dtype)
                target.attrs.create(f"{kind}{size}{order}extremes", np.array([info.min, info.max], dtype))
        for size in (2, 4, 8):
            dtype = np.dtype(f"{order}f{size}")
            special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, np.finfo(dtype).tiny, np.finfo(dtype).max], dtype)
            target.attrs.create(f"f{size}{order}special", special)
            for shape in _SHAPES:
                target.attrs.create(f"f{size}{order}{shape}", rng.standard_normal(shape).astype(dtype))
    f.attrs["python int"] = 7
    f.attrs["python float"] = 0.1
    f.attrs["numpy scalar"] = np.float32(3.5)
    f.attrs["list"] = [1, 2, 3]
    target.attrs["long array"] = np.arange(600.0)  # messages past 1 KiB are parsed uncached
    target.attrs["long text"] = np.bytes_(b"x" * 3000)


def _strings(f: h5py.File) -> None:
    g = _group(f, "strings")
    g.attrs["bytes"] = np.bytes_(b"abc")
    g.attrs["empty bytes"] = np.bytes_(b"")
    g.attrs["utf-8 fixed"] = np.array("é".encode(), dtype=h5py.string_dtype("utf-8", 4))
    g.attrs["ascii array"] = np.array([b"a", b"bb", b""], dtype="S2")
    g.attrs["2-d"] = np.array([[b"x", b"yz"], [b"", b"q"]], dtype="S3")
    g.attrs["not utf-8"] = np.bytes_(b"\xff\xfe")
    g.attrs["vlen str"] = "text"
    g.attrs["vlen array"] = ["a", "bc"]
    g.attrs.create("vlen bytes", np.array([b"a", b"bc"], dtype=object), dtype=h5py.string_dtype("ascii"))
    space = h5py.h5s.create(h5py.h5s.SCALAR)
    pads = {"nullterm": h5py.h5t.STR_NULLTERM, "nullpad": h5py.h5t.STR_NULLPAD, "spacepad": h5py.h5t.STR_SPACEPAD}
    for pad_name, pad in pads.items():
        for cset in (h5py.h5t.CSET_ASCII, h5py.h5t.CSET_UTF8):
            for number, raw in enumerate([b"ab\0cd", b"abcde", b"ab   ", b"a\0\0\0\0", b"\0bcde", b"\0\0\0\0\0"]):
                tid = h5py.h5t.C_S1.copy()
                tid.set_size(5)
                tid.set_strpad(pad)
                tid.set_cset(cset)
                attr = h5py.h5a.create(g.id, f"{pad_name} {cset} {number}".encode(), tid, space)
                attr.write(np.array(raw, dtype="S5"), mtype=tid)  # the bytes as they are
            tid = h5py.h5t.C_S1.copy()
            tid.set_size(3)
            tid.set_strpad(pad)
            tid.set_cset(cset)
            array_space = h5py.h5s.create_simple((4,))
            attr = h5py.h5a.create(g.id, f"{pad_name} {cset} array".encode(), tid, array_space)
            attr.write(np.array([b"a\0c", b"abc", b"   ", b"\0\0\0"], dtype="S3"), mtype=tid)


def _empty(f: h5py.File) -> None:
    g = _group(f, "empty")
    for dtype in ("f4", ">i2", "u8", "S5", h5py.string_dtype()):
        g.attrs[f"Empty {dtype}"] = h5py.Empty(dtype)
    g.attrs["zero length"] = np.zeros((0,), "f8")
    g.attrs["zero by three"] = np.zeros((0, 3), ">u2")
    g.attrs["zero strings"] = np.zeros((0,), "S4")


def _other_types(f: h5py.File) -> None:
    g = _group(f, "others")
    target = f.create_dataset("target", data=[1, 2])
    g.attrs["ref"] = target.ref
    g.attrs["null ref"] = h5py.Reference()
    g.attrs["refs"] = np.array([target.ref, g.ref], dtype=h5py.ref_dtype)
    g.attrs["region ref"] = target.regionref[0:1]
    g.attrs["compound"] = np.array((1, 2.5), dtype=[("a", "<i4"), ("b", "<f8")])
    g.attrs["complex"] = np.complex64(1 + 2j)
    g.attrs["bool"] = np.bool_(True)
    g.attrs["bools"] = np.array([True, False])
    g.attrs.create("enum", 1, dtype=h5py.enum_dtype({"RED": 0, "GREEN": 1}, basetype="i1"))
    g.attrs.create("array type", np.zeros(2, dtype=("<f4", (3,))), dtype=np.dtype(("<f4", (3,))))
    g.attrs["opaque"] = np.void(b"\x01\x02\x03")
    g.attrs["vlen ints"] = np.array([np.arange(3), np.arange(2)], dtype=h5py.vlen_dtype("i4"))
    g.attrs.create("vlen floats 2-d", np.array([[np.arange(2.0), np.zeros(0)], [np.ones(1), np.arange(3.0)]], dtype=object),
                   dtype=h5py.vlen_dtype("<f8"))  # fmt: skip
    scalar = np.empty((), dtype=object)
    scalar[()] = np.arange(4, dtype="u2")
    g.attrs.create("vlen scalar", scalar, dtype=h5py.vlen_dtype("u2"))
    fields = np.empty(3, dtype=object)
    fields[:] = [np.array([b"i", b"d"], "S1"), np.array([b"n", b"\0", b"m"], "S1"), np.zeros(0, "S1")]
    g.attrs.create("MATLAB fields", fields, dtype=h5py.vlen_dtype(np.dtype("S1")))
    g.attrs.create("vlen 2-d", np.array([["é", ""], ["x", "yz"]], dtype=object), dtype=h5py.string_dtype())
    g.attrs.create("vlen not utf-8", np.array([b"\xff\xfe", b"ok"], dtype=object), dtype=h5py.string_dtype("ascii"))
    g.attrs["datetime"] = np.array([1, 2], dtype="datetime64[s]").astype(h5py.opaque_dtype("M8[s]"))
    f["committed float"] = np.dtype(">f4")
    f["committed float"].attrs["on a type"] = 3
    g.attrs.create("committed", np.float32(2.0), dtype=f["committed float"])
    f["committed string"] = np.dtype("S4")
    g.attrs.create("committed s", np.bytes_(b"ab"), dtype=f["committed string"])


def _unusual(f: h5py.File) -> None:
    """libhdf5 types h5py does not write: partial precision, an offset, padding, odd floats,
    bitfields, sizes numpy lacks (HDF5 2 writes them only under relaxed integrity checks)."""
    g = _group(f, "unusual")
    space = h5py.h5s.create(h5py.h5s.SCALAR)
    partial = h5py.h5t.STD_I32LE.copy()
    partial.set_precision(12)
    partial.set_offset(3)
    h5py.h5a.create(g.id, b"partial int", partial, space).write(np.array(-5, "<i4"), mtype=h5py.h5t.NATIVE_INT32)
    padded = h5py.h5t.STD_U16BE.copy()
    padded.set_precision(10)
    padded.set_pad(h5py.h5t.PAD_ONE, h5py.h5t.PAD_ONE)
    h5py.h5a.create(g.id, b"padded int", padded, space).write(np.array(5, "<u2"), mtype=h5py.h5t.NATIVE_UINT16)
    odd = h5py.h5t.IEEE_F32LE.copy()
    odd.set_fields(31, 23, 8, 0, 23)
    odd.set_ebias(100)
    h5py.h5a.create(g.id, b"odd float", odd, space).write(np.array(1.5, "<f4"), mtype=h5py.h5t.NATIVE_FLOAT)
    padded_float = h5py.h5t.IEEE_F64BE.copy()
    padded_float.set_pad(h5py.h5t.PAD_ONE, h5py.h5t.PAD_ONE)
    h5py.h5a.create(g.id, b"float pad", padded_float, space).write(np.array(2.5, "f8"), mtype=h5py.h5t.NATIVE_DOUBLE)
    bitfield = h5py.h5t.STD_B8LE.copy()
    h5py.h5a.create(g.id, b"bitfield", bitfield, space).write(np.array(5, "u1"), mtype=bitfield)
    wide = h5py.h5t.STD_I32LE.copy()
    wide.set_size(3)
    h5py.h5a.create(g.id, b"three bytes", wide, space).write(np.array(5, "<i4"), mtype=h5py.h5t.NATIVE_INT32)
    h5py.h5a.create(g.id, b"long double", h5py.h5t.NATIVE_LDOUBLE, space).write(
        np.array(1.25, np.longdouble), mtype=h5py.h5t.NATIVE_LDOUBLE
    )
    g.attrs["plain after them"] = np.int16(3)


def _orders(f: h5py.File) -> None:
    names = ["zeta", "Alpha", "alpha", "_x", "é", "Z", "a b", "10", "9"]
    for track in (False, True):
        g = _group(f, f"track {track}", track=track)
        d = g.create_dataset("ds", data=[1.0], track_order=track)
        for obj, some in ((g, names), (d, names[:6])):  # the dataset's stay compact (8 at most)
            for n, name in enumerate(some):
                obj.attrs[name] = n
            del obj.attrs["Alpha"]
            obj.attrs["Alpha"] = np.float64(9)  # a later creation order
            obj.attrs["zeta"] = np.int8(-1)  # rewritten in place


def _dense(f: h5py.File) -> None:
    for track in (False, True):
        g = f.create_group(f"dense {track}", track_order=track)
        for n in range(100):
            g.attrs[f"a{n:03d}"] = n
    big = f.create_group("big value")
    big.attrs["small"] = 1
    try:
        big.attrs["large"] = np.zeros(20_000, "f8")  # past 64 KiB: dense storage
    except OSError:  # the earliest format has no dense storage, and no room for it
        pass
    d = f.create_dataset("dense back", data=[1])
    for n in range(20):
        d.attrs[f"a{n}"] = n
    for n in range(16):  # below the phase change again, still dense
        del d.attrs[f"a{n}"]


def _continuation(f: h5py.File) -> None:
    d = f.create_dataset("grown", data=np.arange(10), chunks=(5,), maxshape=(None,))
    d.attrs["first"] = np.bytes_(b"one")
    f.create_dataset("between", data=[1])
    for n in range(7):
        d.attrs[f"later {n}"] = np.array([n] * (n + 1), dtype=">i8")  # grows the header: continuation blocks


def _everything(f: h5py.File, relaxed: bool) -> None:
    _numbers(f)
    _strings(f)
    _empty(f)
    _other_types(f)
    if relaxed:
        _unusual(f)
    _orders(f)
    _dense(f)
    _continuation(f)


_LIBVER = {"earliest": h5py.h5f.LIBVER_EARLIEST, "v110": h5py.h5f.LIBVER_V110, "latest": h5py.h5f.LIBVER_LATEST}


def _create(path: Path, low: str = "earliest", userblock: int = 0) -> tuple[h5py.File, bool]:
    """A new file, with HDF5 2's integrity checks relaxed where ctypes reaches libhdf5 (so
    that unusual types can be written); whether they are."""
    import ctypes

    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(_LIBVER[low], h5py.h5f.LIBVER_LATEST)
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_userblock(userblock)
    lib = library()
    relaxed = lib is not None and hasattr(lib, "H5Pset_relax_file_integrity_checks")
    if relaxed:
        lib.H5Pset_relax_file_integrity_checks.argtypes = [ctypes.c_int64, ctypes.c_uint64]
        relaxed = lib.H5Pset_relax_file_integrity_checks(fapl.id, 1) >= 0  # H5F_RFIC_ALL
    return h5py.File(h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)), relaxed


def _shared_messages(path: Path, flags: int, min_size: int = 0) -> None:
    import ctypes

    lib = library()
    if lib is None:
        pytest.skip("cannot reach the libhdf5 h5py runs on (h5py.libs) to make shared messages")
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    lib.H5Pset_shared_mesg_nindexes.argtypes = [ctypes.c_int64, ctypes.c_uint]
    lib.H5Pset_shared_mesg_index.argtypes = [ctypes.c_int64, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint]
    assert lib.H5Pset_shared_mesg_nindexes(fcpl.id, 1) >= 0
    assert lib.H5Pset_shared_mesg_index(fcpl.id, 0, flags, min_size) >= 0
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
    with h5py.File(fid) as f:
        for n in range(3):
            g = f.create_group(f"g{n}")
            g.attrs["same"] = np.arange(40, dtype="<i8")  # big enough to be shared
            g.attrs["text"] = np.bytes_(b"a shared string of some length " * 3)
            g.attrs["own"] = n


_VARIANTS = {
    "default": ("earliest", 0),
    "latest": ("latest", 0),
    "v110": ("v110", 0),
    "userblock": ("earliest", 512),
    "userblock latest": ("latest", 4096),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("attribute_headers")
    files: dict[str, Path] = {}
    for label, (low, userblock) in _VARIANTS.items():
        path = root / f"{label}.h5"
        f, relaxed = _create(path, low, userblock)
        with f:
            _everything(f, relaxed)
        files[label] = path
    return files


@pytest.mark.parametrize("label", list(_VARIANTS))
def test_every_attribute_as_h5py_reads_it(corpus: dict[str, Path], label: str) -> None:
    tally = compare_file(corpus[label])
    # most attributes are numbers and strings the parse reads; dense storage is left to h5py
    assert tally.from_header > 200
    assert tally.by_h5py > 20
    assert tally.objects_left >= 1


def test_numbers_and_strings_all_from_headers(tmp_path: Path) -> None:
    """A file of only handled types: every attribute of every object comes from the header."""
    path = tmp_path / "handled.h5"
    with h5py.File(path, "w") as f:
        _numbers(f)
        for name in ("numbers", "/"):
            f[name].attrs["text"] = np.bytes_(b"MATLAB")
    tally = compare_file(path)
    assert tally.objects_left == 0 and tally.by_h5py == 0 and tally.from_header > 150


def test_dense_storage_is_left_to_h5py(corpus: dict[str, Path]) -> None:
    with open(corpus["latest"], "rb") as raw, h5py.File(corpus["latest"]) as f:
        superblock = local_superblock(raw)
        headers = AttributeHeaders(reader_for(raw), lambda: superblock, None)
        for name in ("dense False", "dense True", "big value"):
            assert headers.attributes(f[name]) is None, name
        assert headers.attributes(f["track True"]) is not None


@pytest.mark.parametrize(
    "flags", [_SHMESG_ATTR, _SHMESG_DTYPE | _SHMESG_SDSPACE, _SHMESG_ATTR | _SHMESG_DTYPE | _SHMESG_SDSPACE]
)
def test_shared_messages(tmp_path: Path, flags: int) -> None:
    path = tmp_path / "shared.h5"
    _shared_messages(path, flags)
    tally = compare_file(path)
    assert tally.objects == 4
    if flags & _SHMESG_ATTR:  # shared attribute messages: their objects are left to h5py whole
        assert tally.objects_left == 3
    else:  # shared datatypes and dataspaces inside attribute messages: those attributes are
        assert tally.objects_left == 0 and tally.by_h5py == 9


def test_matlab_file(tmp_path: Path) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    path = tmp_path / "trials.mat"
    cells = np.empty((20,), dtype=object)
    for i in range(20):
        cells[i] = {"id": np.float64(i), "name": f"trial {i}", "pos": np.ones((3, 4)), "ok": True, "n": np.int16(i)}
    hdf5storage.savemat(str(path), {"trials": cells, "x": np.arange(5.0), "s": "text"}, format="7.3")
    tally = compare_file(path)
    # MATLAB_class, H5PATH, ... and the variable-length MATLAB_fields: all from the headers
    assert tally.objects_left == 0 and tally.from_header > 300 and tally.by_h5py == 0


@pytest.mark.parametrize("name", shared_names("*.h5*"))
def test_shared_files(name: str | None) -> None:
    tally = compare_file(DATA / name)
    assert tally.objects > 0


@pytest.mark.parametrize("label", ["default", "userblock latest"])
def test_index_is_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str) -> None:
    """Whole manifests (documents, attribute types) with and without the header path."""
    path = tmp_path / "indexed.h5"
    f, _ = _create(path, *_VARIANTS[label])
    with f:  # what h5lens indexes (it refuses some of the other types, and says so either way)
        for part in (_numbers, _strings, _empty, _orders, _dense, _continuation):
            part(f)
    fast = h5lens.index(str(path))
    with monkeypatch.context() as m:
        m.setattr(attr_headers.AttributeHeaders, "attributes", lambda self, obj: None)
        m.setattr(header_arrays, "ENABLED", False)  # the documents made from headers read them too
        plain = h5lens.index(str(path))
    assert fast == plain
    assert fast.attribute_types == plain.attribute_types
    assert fast.attribute_types  # the float32s and int8s are recorded


def test_remote_headers_only_from_the_read_cache(tmp_path: Path) -> None:
    """A remote file's headers are read only from what libhdf5 already fetched: none of it
    cached, the object goes to h5py; all of it, the same attributes as a local read."""
    from h5lens.scan.source import TrackedFile

    path = tmp_path / "remote.h5"
    with h5py.File(path, "w") as f:
        _numbers(f)
    data = path.read_bytes()
    fetch = lambda offset, length: data[offset : offset + length]  # noqa: E731
    tracked = TrackedFile(fetch, len(data), 1 << 20, cache_bytes=1 << 26)
    with open(path, "rb") as raw, h5py.File(path) as f:
        superblock = local_superblock(raw)
        local = AttributeHeaders(reader_for(raw), lambda: superblock, len(data))
        remote = AttributeHeaders(attr_headers.cached_reader(tracked), lambda: superblock, len(data))
        assert remote.attributes(f["numbers"]) is None  # nothing fetched yet
        tracked.seek(0)
        tracked.read()  # as if libhdf5 had read it all
        expected = local.attributes(f["numbers"])
        found = remote.attributes(f["numbers"])
        assert expected is not None and found is not None
        assert [(a.name, a.dtype) for a in found] == [(a.name, a.dtype) for a in expected]
