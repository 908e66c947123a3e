"""Oracle-based feature matrix: h5py is the oracle, h5lens must return exactly what it reads.

One small HDF5 file per feature group is written with h5py (the ``BUILDERS``). Each
file is indexed with h5lens and read back through two routes:

* ``h5lens``: ``h5lens.open_group(manifest)``;
* ``fsspec``: the plain route any zarr reader can take, ``m.to_json(p)`` then
  fsspec's ``reference`` filesystem wrapped in ``zarr.storage.FsspecStore``.

``check_against_h5py`` walks the h5py file (collect first, compare afterwards),
derives from h5py alone what the mapping contract promises for every group,
dataset and attribute, and compares it with what zarr returns, naming the HDF5
path in every message. The expected JSON form of attributes is computed by
``attr_json`` here, independently of ``h5lens.scan.attrs``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import h5py
import hdf5plugin
import numcodecs
import numpy as np
import pytest
import zarr
import zarr.storage

import h5lens
import libhdf5
from h5lens.format.keys import escape_key

SLAB_BYTES = 4096  # small, so the "big" contiguous datasets below are cut into slabs
ROUTES = ("h5lens", "fsspec")
THRESHOLDS = (0, 1000)  # 0 forces byte-range references; 1000 is the default
CONVENTIONS = ("released", "proposal")
NAN_STRINGS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


# --------------------------------------------------------------------------------------
# Builders: one HDF5 file per feature group
# --------------------------------------------------------------------------------------

LIBVERS = {
    "earliest": h5py.h5f.LIBVER_EARLIEST,
    "v108": h5py.h5f.LIBVER_V18,
    "v110": h5py.h5f.LIBVER_V110,
    "v112": h5py.h5f.LIBVER_V112,
    "v114": h5py.h5f.LIBVER_V114,
    "latest": h5py.h5f.LIBVER_LATEST,
}


@dataclass(frozen=True)
class FileKind:
    """How a builder's file is created: the file creation properties writers other than
    h5py's defaults use. A user block (MATLAB v7.3 files have 512 bytes) shifts every HDF5
    address; 4-byte sizes change every structure's field widths; the low format bound picks
    the chunk index and layout versions (HDF5 2.0's "latest" writes layout 5, v110-v114
    layout 4, as HDF5 1.10-1.14 did)."""

    name: str = "default"
    userblock: int = 0
    sizes: tuple[int, int] | None = None  # (size of offsets, size of lengths)
    libver: tuple[str, str] | None = None  # (low, high) bounds; None: the builder's own or h5py's
    paged: bool = False  # paged aggregation: metadata and raw data in 4 KiB file pages

    def create(self, path: Path, libver: tuple[str, str] | None = None) -> h5py.File:
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        if self.userblock:
            fcpl.set_userblock(self.userblock)
        if self.sizes:
            fcpl.set_sizes(*self.sizes)
        if self.paged:
            fcpl.set_file_space_strategy(h5py.h5f.FSPACE_STRATEGY_PAGE, True, 1)
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
        low, high = self.libver or libver or ("earliest", "latest")
        fapl.set_libver_bounds(LIBVERS[low], LIBVERS[high])
        return h5py.File(h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))



RNG_SEED = 20240601
# every int/uint 8-64, float16/32/64 and complex64/128, in both byte orders
NUMERIC_TYPES = ["i1", "u1"] + [
    f"{order}{kind}{size}"
    for kind, sizes in (("i", (2, 4, 8)), ("u", (2, 4, 8)), ("f", (2, 4, 8)), ("c", (8, 16)))
    for size in sizes
    for order in "<>"
]


def _numeric_values(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        extremes = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype=dtype)
        vals = (np.arange(n) * 37 % 101).astype(dtype)
        vals[: len(extremes)] = extremes[:n]
        return vals.reshape(shape)
    if dtype.kind == "f":
        base = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.25, np.finfo(dtype).max, np.finfo(dtype).tiny])
        vals = np.resize(base, n).astype(dtype)
        if n > len(base):
            vals[len(base):] = (np.arange(n - len(base)) * 0.37).astype(dtype)
        return vals.reshape(shape)
    if dtype.kind == "c":
        re = np.resize(np.array([np.nan, 1.0, -0.0, np.inf, 3.5]), n)
        im = np.resize(np.array([0.5, np.nan, -np.inf, 2.0, -1.0]), n)
        out = np.empty(n, dtype=np.complex128)
        out.real, out.imag = re, im
        return out.astype(dtype).reshape(shape)
    raise AssertionError(dtype)


def build_numeric(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        for t in NUMERIC_TYPES:
            dt = np.dtype(t)
            name = t.replace("<", "le_").replace(">", "be_")
            f.create_dataset(f"contig/{name}", data=_numeric_values(dt, (3, 5)))
            f.create_dataset(f"chunked/{name}", data=_numeric_values(dt, (7, 5)), chunks=(3, 2))
        f.create_dataset("bool/plain", data=np.array([True, False, True, True]))
        f.create_dataset("bool/chunked", data=np.arange(23) % 3 == 0, chunks=(5,), compression="gzip")
        f.create_dataset("bool/2d", data=np.eye(3, dtype=bool))
        colors = h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 42}, basetype="i1")
        f.create_dataset("enum/i1", data=np.array([0, 42, 1, 1, 0], dtype="i1"), dtype=colors)
        levels = h5py.enum_dtype({"LOW": -7, "MID": 300, "HIGH": 65000}, basetype=">i4")
        f.create_dataset("enum/be_i4_chunked", data=np.array([-7, 300, 65000] * 5, dtype=">i4"), dtype=levels, chunks=(4,))


def build_strings(path: Path, kind: FileKind | None = None) -> None:
    utf8 = h5py.string_dtype("utf-8")
    ascii_ = h5py.string_dtype("ascii")
    with (kind or FileKind()).create(path) as f:
        f.create_dataset("fixed/s4", data=np.array([b"a", b"bcd", b"", b"efgh"], dtype="S4"))
        f.create_dataset("fixed/s3_2d", data=np.array([[b"ab", b"abc", b"x"], [b"", b"zz", b"q\x00r"]], dtype="S3"))
        fc = f.create_dataset("fixed/s5_chunked", shape=(7,), dtype="S5", chunks=(3,), compression="gzip", fillvalue=b"zz")
        fc[0:2] = [b"hello", b"w"]
        f.create_dataset("fixed/s1", data=np.array([b"x", b"y"], dtype="S1"))
        f.create_dataset("vlen/utf8", data=["", "héllo", "日本語", "a" * 300, "tab\tnew\nline"], dtype=utf8)
        f.create_dataset("vlen/ascii", data=[b"abc", b"", b"xyz~"], dtype=ascii_)
        f.create_dataset("vlen/utf8_2d", data=[["a", "bb"], ["ccc", "ü"]], dtype=utf8)
        vc = f.create_dataset("vlen/utf8_chunked", shape=(9,), dtype=utf8, chunks=(4,), compression="gzip")
        vc[0:3] = ["α", "β", "γ"]
        vb = f.create_dataset("vlen/bytes", shape=(4,), dtype=h5py.vlen_dtype(np.uint8))
        vb[0] = np.frombuffer(b"\x00\x01\x02", dtype=np.uint8)
        vb[2] = np.frombuffer(b"\xff" * 10, dtype=np.uint8)
        vb[3] = np.frombuffer(b"plain", dtype=np.uint8)


NOT_UTF8 = [b"\xff\xfe\x01", b"\x80", b"", b"plain text"]


def build_byte_strings(path: Path, kind: FileKind | None = None) -> None:
    """HDF5 strings that are not UTF-8 text: h5py reads them as bytes, and so must zarr."""
    ascii_ = h5py.string_dtype("ascii")
    with (kind or FileKind()).create(path) as f:
        f.create_dataset("vlen/1d", data=np.array(NOT_UTF8, dtype=object), dtype=ascii_)
        f.create_dataset("vlen/2d", data=np.array([NOT_UTF8[:2], NOT_UTF8[2:]], dtype=object), dtype=ascii_)
        f.create_dataset("vlen/scalar", data=b"caf\xe9", dtype=ascii_)
        f.create_dataset("vlen/utf8_charset", data=np.array(NOT_UTF8, dtype=object), dtype=h5py.string_dtype())
        chunked = f.create_dataset("vlen/chunked_gzip", shape=(9,), dtype=ascii_, chunks=(4,), compression="gzip")
        chunked[0:4] = NOT_UTF8
        f.create_dataset("vlen/text_stays_text", data=np.array([b"abc", b""], dtype=object), dtype=ascii_)
        records = np.array([(b"\xff", 1), (b"ok", 2), (b"", 3)], dtype=[("name", ascii_), ("x", "<i4")])
        f.create_dataset("compound/field", data=records)
        f.attrs.create("vlen_scalar", data=b"caf\xe9", dtype=ascii_)
        f.attrs.create("vlen_array", data=np.array([b"caf\xe9", b"x"], dtype=object), dtype=ascii_)
        f.attrs.create("vlen_utf8_charset", data=b"\xc3(", dtype=h5py.string_dtype())
        f.attrs["fixed_scalar"] = np.bytes_(b"caf\xe9")
        f.attrs["fixed_array"] = np.array([b"\x80\x81", b"ok"], dtype="S2")
        f.attrs["fixed_2d"] = np.array([[b"\xff", b"a"], [b"b", b"c"]], dtype="S1")
        f.attrs["text_stays_text"] = np.array([b"ab", b"cd"], dtype="S2")
        f["vlen/1d"].attrs["compound_attr"] = np.array((b"\xfe", 7), dtype=[("name", "S1"), ("x", "<i4")])


def build_chunk_indexes(path: Path, kind: FileKind | None = None) -> None:
    """libver="latest" chunk indexes: single chunk, fixed array, extensible array (the
    unlimited dimension first, and not first: libhdf5 2.0's chunk_iter lists the latter's
    chunks in the wrong order), version-2 B-tree; some chunks never written."""
    with (kind or FileKind()).create(path, libver=("latest", "latest")) as f:
        values = np.arange(50 * 30, dtype="i4").reshape(50, 30)
        f.create_dataset("single", data=values, chunks=(50, 30), compression="gzip")
        f.create_dataset("fixed_array", data=values, chunks=(7, 4), compression="gzip")
        f.create_dataset("extensible_first", data=values, chunks=(7, 4), maxshape=(None, 30))
        f.create_dataset("extensible_second", data=values, chunks=(7, 4), maxshape=(50, None), compression="gzip")
        square = f.create_dataset("extensible_square", shape=(50, 50), chunks=(10, 10), maxshape=(50, None), dtype="f8")
        square[...] = np.arange(2500.0).reshape(50, 50)
        sparse = f.create_dataset("extensible_3d_partial", shape=(9, 12, 6), chunks=(3, 4, 2), maxshape=(9, None, 6), dtype="u2")
        sparse[0:3, 4:8] = 7
        sparse[6:9, 8:12, 4:6] = 9
        f.create_dataset("btree_v2", data=values, chunks=(7, 4), maxshape=(None, None), compression="gzip")


def build_unfiltered_edges(path: Path, kind: FileKind | None = None) -> None:
    """Partial edge chunks stored without the filters (``H5Pset_chunk_opts``, which C and
    Fortran writers set), under every chunk index that can hold them; shuffle alone is the
    case that reads wrong without an error when the flag is missed."""
    values = (np.arange(50 * 30, dtype="<i4").reshape(50, 30) * 7919) % 100003
    filters = {"shuffle": {"shuffle": True}, "deflate": {"deflate": 4}, "shuffle_deflate": {"shuffle": True, "deflate": 1},
               "fletcher32_shuffle": {"fletcher32": True, "shuffle": True}}  # fmt: skip
    with (kind or FileKind()).create(path, libver=("v110", "latest")) as f:
        for name, options in filters.items():
            libhdf5.create_dataset(f, f"fixed_array/{name}", values, chunks=(7, 4), **options)
            libhdf5.create_dataset(f, f"extensible/{name}", values, chunks=(7, 4), maxshape=(None, 30), **options)
            libhdf5.create_dataset(f, f"btree_v2/{name}", values, chunks=(7, 4), maxshape=(None, None), **options)
        libhdf5.create_dataset(f, "single_partial", values[0, :10], chunks=(16,), maxshape=(16,), deflate=4)
        libhdf5.create_dataset(f, "one_d_float", np.linspace(0, 1, 1500, dtype="<f4"), chunks=(64,), shuffle=True)
        words = np.array([f"w{i}" * (i % 5) for i in range(31)], dtype=object)
        libhdf5.create_dataset(f, "strings", words, chunks=(16,), shuffle=True, dtype=h5py.string_dtype())
        libhdf5.create_dataset(f, "filtered_whole", values, chunks=(10, 10), shuffle=True)  # no partial chunk at all


def build_scalars_empty(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        s = f.create_group("scalar")
        s["i4"] = np.int32(-12345)
        s["be_f8"] = np.array(2.5, dtype=">f8")
        s["nan"] = np.float32(np.nan)
        s["c16"] = np.complex128(1 - 2j)
        s["u1"] = np.uint8(255)
        s["bool"] = np.bool_(True)
        s.create_dataset("enum", data=np.int8(1), dtype=h5py.enum_dtype({"NO": 0, "YES": 1}, basetype="i1"))
        s.create_dataset("fixed", data=np.bytes_(b"abc"))
        s.create_dataset("vlen_str", data="héllo wörld", dtype=h5py.string_dtype())
        s.create_dataset("vlen_ascii", data=b"ascii", dtype=h5py.string_dtype("ascii"))
        s.create_dataset("compound", data=np.array((7, 1.25), dtype=[("a", "<i4"), ("b", "<f8")]))
        s.create_dataset("ref", data=f["scalar/i4"].ref, dtype=h5py.ref_dtype)
        e = f.create_group("empty")
        e.create_dataset("null_f8", data=h5py.Empty("<f8"))
        e.create_dataset("null_i2", data=h5py.Empty(">i2"))
        e.create_dataset("null_str", data=h5py.Empty(h5py.string_dtype()))
        e.create_dataset("zero_contig", shape=(0,), dtype="f4")
        e.create_dataset("zero_chunked", shape=(0,), dtype="i8", chunks=(4,), maxshape=(None,))
        e.create_dataset("zero_by_5", shape=(0, 5), dtype="u2")
        e.create_dataset("zero_by_5_chunked", shape=(0, 5), dtype="f8", chunks=(2, 5), maxshape=(None, 5))
        e.create_dataset("zero_str", shape=(0,), dtype=h5py.string_dtype())


def _create_compact(parent: h5py.Group, name: str, data: np.ndarray) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(data.shape) if data.shape else h5py.h5s.create(h5py.h5s.SCALAR)
    tid = h5py.h5t.py_create(data.dtype)
    dsid = h5py.h5d.create(parent.id, name.encode(), tid, space, dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))


def build_layouts(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        c = f.create_group("chunked")
        c.create_dataset("edges", data=np.arange(7 * 11, dtype="<f8").reshape(7, 11), chunks=(3, 4))
        c.create_dataset("edges_3d", data=np.arange(5 * 4 * 3, dtype=">i4").reshape(5, 4, 3), chunks=(2, 3, 2))
        unl = c.create_dataset("unlimited", shape=(5, 3), maxshape=(None, 3), chunks=(4, 3), dtype="i2")
        unl[...] = np.arange(15).reshape(5, 3)
        unl.resize((11, 3))
        unl[9:11] = -1
        c.create_dataset("never_written", shape=(10, 4), chunks=(3, 3), dtype="f4")
        c.create_dataset("never_written_fill", shape=(10,), chunks=(4,), dtype="i8", fillvalue=-99)
        part = c.create_dataset("partial_fill", shape=(50,), chunks=(10,), dtype="<f8", fillvalue=-1.5)
        part[10:20] = np.arange(10)
        part[35:37] = [7.0, 8.0]  # a chunk written only in part: the rest holds the fill value
        pz = c.create_dataset("partial_fill_gzip", shape=(6, 6), chunks=(4, 4), dtype=">u2", fillvalue=777, compression="gzip")
        pz[0:2, 0:2] = 1
        c.create_dataset("nan_fill", shape=(8,), chunks=(3,), dtype="f4", fillvalue=np.nan)[0:3] = [1, 2, 3]
        g = f.create_group("contiguous")
        g.create_dataset("small", data=np.arange(12, dtype="u4").reshape(3, 4))
        g.create_dataset("big_1d", data=np.arange(1009, dtype="<f8") * 0.5)  # 8072 B, 1009 is prime
        g.create_dataset("big_2d", data=np.arange(211 * 7, dtype=">i4").reshape(211, 7))  # 5908 B, 211 prime
        g.create_dataset("big_bytes", data=(np.arange(4099) % 251).astype("u1"))  # 4099 prime
        g.create_dataset("big_be_f4", data=np.linspace(-1, 1, 1031, dtype=">f4"))  # 1031 prime
        g.create_dataset("unwritten", shape=(6,), dtype="f8", fillvalue=3.25)  # no storage allocated
        k = f.create_group("compact")
        _create_compact(k, "ints", np.arange(10, dtype="<i4"))
        _create_compact(k, "floats_2d", np.linspace(0, 1, 12, dtype=">f8").reshape(3, 4))
        _create_compact(k, "fixed_str", np.array([b"ab", b"cde"], dtype="S3"))
        _create_compact(k, "scalar", np.array(42, dtype="u2"))


def _filter_data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    rng = np.random.default_rng(RNG_SEED)
    smooth = np.arange(int(np.prod(shape))) % 97
    noise = rng.integers(0, 5, size=smooth.shape)
    return (smooth + noise).astype(dtype).reshape(shape)


FILTERS: dict[str, dict[str, Any]] = {
    "gzip1": {"compression": "gzip", "compression_opts": 1},
    "gzip9": {"compression": "gzip", "compression_opts": 9},
    "shuffle_gzip": {"compression": "gzip", "shuffle": True},
    "fletcher32": {"fletcher32": True},
    "fletcher32_shuffle_gzip": {"fletcher32": True, "shuffle": True, "compression": "gzip"},
    "lzf": {"compression": "lzf"},
    "shuffle_lzf": {"compression": "lzf", "shuffle": True},
    "scaleoffset_int": {"scaleoffset": 0},
    "blosc_lz4": dict(hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)),
    "blosc_zstd": dict(hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE)),
    "zstd": dict(hdf5plugin.Zstd()),
    "bzip2": dict(hdf5plugin.BZip2()),
    "lz4": dict(hdf5plugin.LZ4()),
}
if "szip" in h5py.filters.encode:
    FILTERS["szip"] = {"compression": "szip", "compression_opts": ("nn", 8)}


def build_filters(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        for name, opts in FILTERS.items():
            f.create_dataset(f"{name}/i4_2d", data=_filter_data((23, 17), "<i4"), chunks=(8, 8), **opts)
            f.create_dataset(f"{name}/be_u2", data=_filter_data((301,), ">u2"), chunks=(64,), **opts)
            if name != "scaleoffset_int":
                f.create_dataset(f"{name}/f8", data=_filter_data((50,), "<f8") / 7, chunks=(16,), **opts)
            part = f.create_dataset(f"{name}/partial", shape=(40,), dtype="<i4", chunks=(8,), fillvalue=5, **opts)
            part[8:19] = np.arange(11)
        # lossy but well defined: h5py's decoded values are the oracle
        f.create_dataset("scaleoffset_float/f4", data=_filter_data((60,), "<f4") / 3, chunks=(16,), scaleoffset=2)
        # incompressible chunks: LZF/deflate may give up and HDF5 then stores them as they are
        rng = np.random.default_rng(RNG_SEED + 1)
        f.create_dataset("lzf/random_u1", data=rng.integers(0, 256, 4000, dtype="u1"), chunks=(1024,), compression="lzf")
        f.create_dataset("lzf/random_f8", data=rng.random(700), chunks=(128,), compression="lzf", shuffle=True)

        # per-chunk filter masks: some chunks skip filters
        masked = f.create_dataset("mask/gzip", shape=(40,), dtype="<i4", chunks=(10,), compression="gzip")
        masked[0:10] = np.arange(10)
        masked[20:30] = np.arange(20, 30)
        masked.id.write_direct_chunk((10,), np.arange(100, 110, dtype="<i4").tobytes(), filter_mask=1)
        masked.id.write_direct_chunk((30,), np.arange(130, 140, dtype="<i4").tobytes(), filter_mask=1)
        sg = f.create_dataset("mask/shuffle_gzip", shape=(4, 6), dtype="<f8", chunks=(2, 3), compression="gzip", shuffle=True)
        sg[...] = np.arange(24.0).reshape(4, 6)
        block = np.arange(1000.0, 1006.0).reshape(2, 3)
        shuffled = numcodecs.Shuffle(elementsize=8).encode(block.tobytes())
        sg.id.write_direct_chunk((0, 3), bytes(shuffled), filter_mask=0b10)  # deflate skipped
        sg.id.write_direct_chunk((2, 0), (block + 10).tobytes(), filter_mask=0b11)  # both skipped
        b = f.create_dataset("mask/blosc", shape=(32,), dtype="<i2", chunks=(8,), **FILTERS["blosc_lz4"])
        b[...] = np.arange(32)
        b.id.write_direct_chunk((16,), np.arange(-8, 0, dtype="<i2").tobytes(), filter_mask=1)


def build_compounds(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        f.create_dataset("target", data=np.arange(3))
        f.create_group("grp")
        packed = np.dtype([("i", "<i4"), ("f", "<f8"), ("s", "S3"), ("u", "u1")])
        f.create_dataset("packed", data=np.array([(1, 1.5, b"ab", 7), (-2, np.nan, b"xyz", 255), (3, -0.0, b"", 0)], dtype=packed))
        pc = f.create_dataset("packed_chunked", shape=(10,), dtype=packed, chunks=(4,), compression="gzip")
        pc[0:3] = np.array([(5, 2.5, b"q", 1)] * 3, dtype=packed)
        be = np.dtype([("a", ">i4"), ("b", ">f8"), ("c", "<u2")])
        f.create_dataset("mixed_endian", data=np.array([(1, 2.0, 3), (-4, 5.5, 65535)], dtype=be))
        vs = np.dtype([("id", "<i4"), ("name", h5py.string_dtype())])
        f.create_dataset("vlen_str_field", data=np.array([(1, "alpha"), (2, "βeta"), (3, "")], dtype=vs))
        rf = np.dtype([("id", "<i2"), ("ref", h5py.ref_dtype)])
        data = np.array([(1, f["target"].ref), (2, f["grp"].ref), (3, h5py.Reference()), (4, f.ref)], dtype=rf)
        f.create_dataset("ref_field", data=data)
        nested = np.dtype([("p", [("x", "<f4"), ("y", "<f4")]), ("n", "<i8"), ("tag", "S2")])
        f.create_dataset("nested", data=np.array([((1.0, 2.0), 3, b"a"), ((np.inf, -1.0), -9, b"bc")], dtype=nested))
        padded = np.dtype({"names": ["a", "b", "c"], "formats": ["u1", "<f8", "<i2"], "offsets": [0, 8, 16], "itemsize": 24})
        f.create_dataset("padded", data=np.array([(1, 0.5, -3), (255, -1e300, 32767)], dtype=padded))
        pch = f.create_dataset("padded_chunked", shape=(5,), dtype=padded, chunks=(2,))
        pch[1] = (9, 9.5, 9)
        f.create_dataset("compound_2d", data=np.zeros((2, 3), dtype=packed))


def build_references(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        x = f.create_dataset("a/x", data=np.arange(4))
        deep = f.create_dataset("b/deep/y", data=[1.5])
        grp = f["a"]
        refs = f.create_dataset("refs", shape=(5,), dtype=h5py.ref_dtype)
        refs[...] = [x.ref, grp.ref, f.ref, deep.ref, h5py.Reference()]
        r2 = f.create_dataset("refs_2d", shape=(2, 2), dtype=h5py.ref_dtype)
        r2[0, 0] = x.ref
        r2[1, 1] = deep.ref
        rc = f.create_dataset("refs_chunked", shape=(7,), dtype=h5py.ref_dtype, chunks=(3,))
        rc[0] = x.ref
        rc[4] = grp.ref
        f.create_dataset("scalar_ref", data=deep.ref, dtype=h5py.ref_dtype)
        f.attrs["ref_attr"] = deep.ref


def build_array_element(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        d = f.create_dataset("i4x3", shape=(4,), dtype=np.dtype(("<i4", (3,))))
        d[...] = np.arange(12).reshape(4, 3)
        e = f.create_dataset("be_f8x2x2", shape=(3, 2), dtype=np.dtype((">f8", (2, 2))))
        e[...] = np.arange(24.0).reshape(3, 2, 2, 2) / 4
        c = f.create_dataset("u2x5_chunked", shape=(9,), dtype=np.dtype(("<u2", (5,))), chunks=(4,), compression="gzip")
        c[0:6] = np.arange(30).reshape(6, 5)
        s = f.create_dataset("s2x2", shape=(2,), dtype=np.dtype(("S2", (2,))))
        s[...] = np.array([[b"ab", b"c"], [b"", b"de"]], dtype="S2")


def build_links(path: Path, kind: FileKind | None = None) -> None:
    """Soft, external and dangling links (no object has two hard links here)."""
    ext = path.with_name(path.stem + "_ext.h5")
    with h5py.File(ext, "w") as e:
        e.create_dataset("data", data=np.arange(3))
    with (kind or FileKind()).create(path) as f:
        f.create_dataset("a/x", data=np.arange(5))
        f.create_group("a/sub").create_dataset("y", data=[1.0, 2.0])
        f["soft"] = h5py.SoftLink("/a/x")
        f["soft_group"] = h5py.SoftLink("/a/sub")
        f["dangling"] = h5py.SoftLink("/nowhere/at_all")
        f["ext"] = h5py.ExternalLink(ext.name, "/data")
        f["a/sub/up"] = h5py.SoftLink("/a")
        f["a/rel"] = h5py.SoftLink("sub/y")  # relative to /a
        f["a/sub/ext_root"] = h5py.ExternalLink(ext.name, "/")
        f.create_dataset("refs_via_soft", data=[f["soft"].ref, f["soft_group"].ref], dtype=h5py.ref_dtype)


def build_hard_links(path: Path, kind: FileKind | None = None) -> None:
    """Objects with a second hard link: the first path (HDF5's visit order) is the node."""
    with (kind or FileKind()).create(path) as f:
        f.create_dataset("a/x", data=np.arange(5))
        f.create_group("a/sub").create_dataset("y", data=[1.0, 2.0])
        f["b"] = f["a/x"]  # second hard link to a dataset
        f["a/sub/hard_y"] = f["a/sub/y"]  # ... in the same group
        f["zz_group_alias"] = f["a/sub"]  # second hard link to a group
        f["soft_to_b"] = h5py.SoftLink("/b")  # a soft link to the second name
        # references through a second hard link resolve to the object's first path (/a/x, /a/sub)
        f.create_dataset("refs", data=[f["b"].ref, f["zz_group_alias"].ref], dtype=h5py.ref_dtype)
        f.attrs["ref_via_hard_link"] = f["b"].ref


def _attr_payload(f: h5py.File) -> dict[str, Any]:
    cmp_dtype = np.dtype([("i", "<i4"), ("f", "<f8"), ("s", "S2")])
    return {
        "str": "text",
        "str_unicode": "ünïcødé ✓",
        "str_empty": "",
        "bytes_fixed": np.bytes_(b"fixed"),
        "int": 42,
        "int8_neg": np.int8(-5),
        "uint64_big": np.uint64(2**63 + 1),
        "int64_min": np.int64(-(2**63)),
        "float": 1.5,
        "float32": np.float32(0.25),
        "float16": np.float16(-3.5),
        "bool_true": True,
        "bool_false": np.bool_(False),
        "arr_int": np.arange(5, dtype="<i4"),
        "arr_be": np.arange(3, dtype=">i8"),
        "arr_size1": np.array([7]),
        "arr_size1_str": np.array(["only"], dtype=h5py.string_dtype()),
        "arr_empty": np.zeros(0),
        "arr_2d": np.arange(6, dtype="f4").reshape(2, 3),
        "arr_bool": np.array([True, False, True]),
        "arr_str": ["a", "bc", "ü"],
        "arr_fixed_str": np.array([b"ab", b"c"], dtype="S2"),
        "arr_str_2d": np.array([["a", "b"], ["c", "d"]], dtype=h5py.string_dtype()),
        "nan": np.nan,
        "inf": np.inf,
        "ninf": -np.inf,
        "arr_nonfinite": np.array([1.0, np.nan, np.inf, -np.inf]),
        "empty": h5py.Empty("f8"),
        "empty_str": h5py.Empty(h5py.string_dtype()),
        "ref_dataset": f["data/x"].ref,
        "ref_group": f["data"].ref,
        "ref_root": f.ref,
        "compound": np.array((1, 2.5, b"xy"), dtype=cmp_dtype)[()],
        "compound_nan": np.array((0, np.nan, b""), dtype=cmp_dtype)[()],
        "column-order": np.array(["gene"], dtype=h5py.string_dtype()),
    }


def build_attributes(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        f.create_dataset("data/x", data=np.arange(3))
        f.create_dataset("data/no_attrs", data=np.arange(2))
        payload = _attr_payload(f)
        for obj in (f, f["data"], f["data/x"]):
            for name, value in payload.items():
                obj.attrs[name] = value
        f["data/x"].attrs.create("explicit_be", np.array([1, 2], dtype=">u4"))
        f.create_group("only_attrs").attrs["answer"] = 42


ODD_NAMES = ("a:b", "CON", "zarr.json", "__x", "50%", "sp ace.")


def build_names(path: Path, kind: FileKind | None = None) -> None:
    with (kind or FileKind()).create(path) as f:
        for i, name in enumerate(ODD_NAMES):
            f.create_dataset(name, data=np.arange(3) + i)
            g = f.create_group(f"grp {name}" if name != "zarr.json" else "zarr.json_grp")
            g.create_dataset(name, data=[float(i)])
        nested = f.create_group("CON.d").create_group("__inner").create_group("x:y")
        nested.create_dataset("zarr.json", data=[b"deep"])
        nested.attrs["where"] = "deep"
        f["grp a:b"].attrs["50%"] = "attr names stay as they are"
        f["l:nk"] = h5py.SoftLink("/a:b")
        f["grp CON"]["hard%"] = f["50%"]
        f.create_dataset("refs", data=[f["50%"].ref, f["CON.d/__inner/x:y"].ref], dtype=h5py.ref_dtype)


def build_other_files(path: Path, kind: FileKind | None = None) -> None:
    """Data in other files and elsewhere in the file: virtual datasets over the file's own
    datasets and over a sibling written the same way, and external raw storage."""
    kind = kind or FileKind()
    sibling = path.with_name(path.stem + "-source.h5")
    with kind.create(sibling) as f:
        f.create_dataset("frames", data=np.arange(6 * 8 * 5, dtype=">u2").reshape(6, 8, 5), chunks=(2, 4, 5),
                         compression="gzip", shuffle=True)  # fmt: skip
    raw = path.with_suffix(".raw")
    with kind.create(path) as f:
        v = f.create_group("virtual")
        a = v.create_dataset("part_a", data=np.arange(40, dtype="<i4").reshape(4, 10), chunks=(2, 10))
        b = v.create_dataset("part_b", data=-np.arange(40, dtype="<i4").reshape(4, 10), chunks=(2, 10))
        layout = h5py.VirtualLayout((10, 10), "<i4")
        layout[0:4] = h5py.VirtualSource(a)
        layout[4:8] = h5py.VirtualSource(b)  # rows 8-9 map nowhere: the fill value
        v.create_virtual_dataset("stacked", layout, fillvalue=-7)
        frames = h5py.VirtualLayout((2, 6, 8, 5), ">u2")
        frames[0] = h5py.VirtualSource(str(sibling), "frames", (6, 8, 5))
        frames[1] = h5py.VirtualSource(str(sibling), "frames", (6, 8, 5))
        v.create_virtual_dataset("frames_twice", frames)
        odd = h5py.VirtualLayout((9, 10), "<i4")
        odd[1:5] = h5py.VirtualSource(a)  # across chunk boundaries: copied
        v.create_virtual_dataset("shifted", odd, fillvalue=0)
        f.create_dataset("external", data=np.arange(300, dtype=">f8").reshape(30, 10),
                         external=[(str(raw), 0, 10 * 80), (str(raw), 4096, 20 * 80)])  # fmt: skip


BUILDERS: dict[str, Callable[[Path, FileKind | None], None]] = {
    "numeric": build_numeric,
    "strings": build_strings,
    "byte_strings": build_byte_strings,
    "chunk_indexes": build_chunk_indexes,
    "unfiltered_edges": build_unfiltered_edges,
    "scalars_empty": build_scalars_empty,
    "layouts": build_layouts,
    "filters": build_filters,
    "compounds": build_compounds,
    "references": build_references,
    "array_element": build_array_element,
    "links": build_links,
    "hard_links": build_hard_links,
    "attributes": build_attributes,
    "names": build_names,
    "other_files": build_other_files,
}


@pytest.fixture(scope="module")
def feature_files(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Build each feature file once per module, on first use."""
    root = tmp_path_factory.mktemp("features")
    built: dict[str, Path] = {}

    def get(feature: str) -> Path:
        if feature not in built:
            path = root / f"{feature}.h5"
            BUILDERS[feature](path, None)
            built[feature] = path
        return built[feature]

    return get


@pytest.fixture(scope="module")
def indexed(feature_files) -> Callable[..., h5lens.Manifest]:
    cache: dict[tuple, h5lens.Manifest] = {}

    def get(feature: str, inline_threshold: int, convention: str) -> h5lens.Manifest:
        key = (feature, inline_threshold, convention)
        if key not in cache:
            cache[key] = h5lens.index(
                feature_files(feature), inline_threshold=inline_threshold, convention=convention, slab_bytes=SLAB_BYTES
            )
        return cache[key]

    return get


# --------------------------------------------------------------------------------------
# The two read routes
# --------------------------------------------------------------------------------------


def open_route(route: str, manifest: h5lens.Manifest, workdir: Path) -> zarr.Group:
    if route == "h5lens":
        return h5lens.open_group(manifest)
    p = str(workdir / "manifest.json")
    manifest.to_json(p)
    fs = fsspec.filesystem(
        "reference", fo=p, asynchronous=True, remote_protocol="file", remote_options={"asynchronous": True}
    )
    store = zarr.storage.FsspecStore(fs, read_only=True, path="")
    return zarr.open_group(store, mode="r", zarr_format=3)


# --------------------------------------------------------------------------------------
# The oracle: what h5py says, in the form the contract promises
# --------------------------------------------------------------------------------------


def zkey(h5_path: str) -> str:
    """zarr path (no leading slash) of an HDF5 path."""
    return "/".join(escape_key(p) for p in h5_path.split("/") if p)


def zpath(h5_path: str) -> str:
    """The absolute zarr path (escaped names) that references and links must point at."""
    return "/" + zkey(h5_path)


def _identity(obj: h5py.HLObject) -> tuple[int, int]:
    info = h5py.h5o.get_info(obj.id)
    return (info.fileno, info.addr)


@dataclass
class H5Snapshot:
    """Everything read from h5py before zarr is touched."""

    groups: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    canonical: dict[tuple[int, int], str] = field(default_factory=dict)  # identity -> first HDF5 path


def snapshot(f: h5py.File) -> H5Snapshot:
    snap = H5Snapshot(groups=["/"])
    snap.canonical[_identity(f)] = "/"
    found: list[tuple[str, h5py.HLObject]] = []
    f.visititems(lambda name, obj: found.append(("/" + name, obj)))  # collect only
    for name, obj in found:
        snap.canonical.setdefault(_identity(obj), name)
        if isinstance(obj, h5py.Group):
            snap.groups.append(name)
        elif isinstance(obj, h5py.Dataset):
            snap.datasets.append(name)
    return snap


class UnreadableReference(str):
    """An object reference libhdf5 itself cannot follow, in a file with 4-byte offsets: its
    reading of such a reference is not even the same from one read to the next (the address
    fills 4 of the token's 8 bytes; h5py finds the target, or fails "address of object past
    end of allocation", or sees null). No oracle: any path h5lens gives is accepted there, and
    only there; every other value of such a file is still compared."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, str)

    __hash__ = str.__hash__


def four_byte_offsets(f: h5py.File) -> bool:
    return f.id.get_create_plist().get_sizes()[0] == 4


def ref_target(f: h5py.File, snap: H5Snapshot, ref: h5py.Reference) -> str:
    if four_byte_offsets(f):
        return UnreadableReference("(a reference libhdf5 cannot follow)")
    if not ref:
        return ""
    return zpath(snap.canonical[_identity(f[ref])])


def attr_json(value: Any, f: h5py.File, snap: H5Snapshot, convention: str) -> Any:
    """The JSON value the contract promises for an attribute value as h5py returns it."""
    if _holds_non_text(value):  # the whole attribute as bytes (h5py gives str with surrogates for vlen)
        return {"_BYTES": _base64_nested(value)}

    def conv(v: Any) -> Any:
        if isinstance(v, h5py.Empty):
            return None
        if isinstance(v, h5py.Reference):
            return {"_REFERENCE": {"source": ".", "path": ref_target(f, snap, v)}}
        if isinstance(v, str):
            return v
        if isinstance(v, bytes):
            return v.decode("utf-8")
        if isinstance(v, np.void) and v.dtype.names:
            return {n: attr_json(v[n], f, snap, convention) for n in v.dtype.names}
        if isinstance(v, np.ndarray):
            return conv(v[()]) if v.ndim == 0 else [conv(x) for x in v]
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            x = float(v)
            if convention == "proposal" and not math.isfinite(x):
                return NAN_STRINGS[repr(x)]
            return x
        raise AssertionError(f"test has no JSON form for {type(v)}: {v!r}")

    return conv(value)


def _raw_bytes(v: Any) -> bytes:
    return v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v)


def _holds_non_text(value: Any) -> bool:
    """Whether an attribute value as h5py returns it holds a string that is not UTF-8."""
    if isinstance(value, np.ndarray) and value.dtype.names is None and value.dtype.kind in "OSU":
        return any(_holds_non_text(v) for v in value.ravel().tolist())
    if isinstance(value, (str, bytes, np.bytes_)):
        try:
            _raw_bytes(value).decode("utf-8")
            return isinstance(value, str) and value.encode("utf-8", "surrogateescape") != value.encode("utf-8", "replace")
        except UnicodeDecodeError:
            return True
    return False


def _base64_nested(value: Any) -> Any:
    import base64

    if isinstance(value, np.ndarray) and value.ndim:
        return [_base64_nested(v) for v in value]
    if isinstance(value, np.ndarray):
        value = value[()]
    return base64.b64encode(_raw_bytes(value)).decode("ascii")


def _text_or_bytes(items: list[Any]) -> list[Any]:
    """The contract for variable-length strings: text if every value is UTF-8, else bytes."""
    raw = [_raw_bytes(v) for v in items]
    try:
        return [b.decode("utf-8") for b in raw]
    except UnicodeDecodeError:
        return raw


def json_diff(expected: Any, actual: Any, where: str) -> list[str]:
    """Strict JSON comparison (bool is not int, int is not float, NaN equals NaN)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object {expected!r}, got {actual!r}"]
        out = []
        for k in sorted(set(expected) | set(actual)):
            if k not in actual:
                out.append(f"{where}[{k!r}]: missing (expected {expected[k]!r})")
            elif k not in expected:
                out.append(f"{where}[{k!r}]: unexpected {actual[k]!r}")
            else:
                out += json_diff(expected[k], actual[k], f"{where}[{k!r}]")
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {expected!r}, got {actual!r}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += json_diff(e, a, f"{where}[{i}]")
        return out
    if isinstance(expected, UnreadableReference) and isinstance(actual, str):
        return []
    if type(expected) is not type(actual):
        return [f"{where}: expected {expected!r} ({type(expected).__name__}), got {actual!r} ({type(actual).__name__})"]
    if isinstance(expected, float) and math.isnan(expected) and math.isnan(actual):
        return []
    if expected != actual:
        return [f"{where}: expected {expected!r}, got {actual!r}"]
    return []


def dtype_attr(dtype: np.dtype) -> str | None:
    """The _DTYPE the contract promises (None for compounds)."""
    if dtype.subdtype is not None:
        return dtype_attr(dtype.subdtype[0])
    if dtype.names is not None:
        return None
    string = h5py.check_string_dtype(dtype)
    if string is not None:
        return "str" if string.length is None else "bytes"  # non-UTF-8 vlen: see expected_dataset_attrs
    if h5py.check_ref_dtype(dtype) is h5py.Reference:
        return "object_reference"
    if h5py.check_vlen_dtype(dtype) is not None:
        return "bytes"
    if dtype.kind == "b":
        return "bool"
    return dtype.newbyteorder("=").name


def _objects(items: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    """An object array of ``items`` (numpy would split bytes/str-like items into extra axes otherwise)."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def expected_values(f: h5py.File, snap: H5Snapshot, ds: h5py.Dataset) -> np.ndarray:
    """The dataset's values as h5py reads them, strings decoded and references as paths."""
    dtype = ds.dtype
    if h5py.check_string_dtype(dtype) is not None and h5py.check_string_dtype(dtype).length is None:
        arr = np.asarray(ds[()], dtype=object)
        return _objects(_text_or_bytes(arr.ravel().tolist()), arr.shape)
    raw = ds[()]
    if h5py.check_ref_dtype(dtype) is h5py.Reference:
        arr = np.asarray(raw, dtype=object)
        return _objects([ref_target(f, snap, r) for r in arr.ravel()], arr.shape)
    if h5py.check_vlen_dtype(dtype) is not None:
        arr = np.asarray(raw, dtype=object)
        return _objects([bytes(v) for v in arr.ravel()], arr.shape)
    arr = np.asarray(raw)
    if dtype.names is not None:
        return compound_expected(f, snap, arr)
    return arr


def compound_expected(f: h5py.File, snap: H5Snapshot, arr: np.ndarray) -> dict[str, Any]:
    """A compound's fields as {name: values}, vlen strings decoded, references as paths."""
    out: dict[str, Any] = {}
    for name in arr.dtype.names:
        fdt = arr.dtype.fields[name][0]
        column = arr[name]
        if fdt.names is not None:
            out[name] = compound_expected(f, snap, column)
        elif h5py.check_ref_dtype(fdt) is h5py.Reference:
            out[name] = _objects([ref_target(f, snap, r) for r in column.ravel()], column.shape)
        elif h5py.check_string_dtype(fdt) is not None and h5py.check_string_dtype(fdt).length is None:
            out[name] = _objects(_text_or_bytes(column.ravel().tolist()), column.shape)
        else:
            out[name] = column
    return out


def value_diff(expected: Any, actual: np.ndarray, where: str) -> list[str]:
    if isinstance(expected, dict):  # compound
        if actual.dtype.names is None:
            return [f"{where}: expected a structured array with fields {list(expected)}, got dtype {actual.dtype}"]
        if list(actual.dtype.names) != list(expected):
            return [f"{where}: fields {list(actual.dtype.names)} != h5py's {list(expected)}"]
        out = []
        for name, column in expected.items():
            out += value_diff(column, actual[name], f"{where} field {name!r}")
        return out
    if expected.shape != actual.shape:
        return [f"{where}: shape {actual.shape} != h5py's {expected.shape}"]
    if expected.dtype.kind in "fc":
        if actual.dtype.kind != expected.dtype.kind:
            return [f"{where}: dtype {actual.dtype} is not of kind {expected.dtype.kind!r} like h5py's {expected.dtype}"]
        if expected.dtype.kind == "c":  # NaN may sit in either part: compare the parts
            return value_diff(expected.real, actual.real, f"{where} (real)") + value_diff(
                expected.imag, actual.imag, f"{where} (imag)"
            )
        differ = ~((expected == actual) | (np.isnan(expected) & np.isnan(actual)))
        if expected.dtype.kind == "f":
            differ |= np.signbit(expected) != np.signbit(actual)  # -0.0 must stay -0.0
        bad = np.argwhere(differ)
        if len(bad):
            first = tuple(int(i) for i in bad[0])
            return [
                f"{where}: values differ at {len(bad)} of {expected.size} positions, first {first}: "
                f"h5py {expected[first]!r} vs zarr {actual[first]!r}"
            ]
        return []
    exp_list, act_list = expected.tolist(), actual.tolist()
    if exp_list != act_list or _types(exp_list) != _types(act_list):
        flat_e, flat_a = expected.ravel().tolist(), actual.ravel().tolist()
        bad = [i for i, (e, a) in enumerate(zip(flat_e, flat_a)) if e != a or type(e) is not type(a)]
        i = bad[0] if bad else 0
        return [
            f"{where}: values differ at {len(bad)} of {len(flat_e)} flat positions, first #{i}: "
            f"h5py {flat_e[i]!r} vs zarr {flat_a[i]!r}"
        ]
    return []


def _types(value: Any) -> Any:
    if isinstance(value, list):
        return [_types(v) for v in value]
    if isinstance(value, UnreadableReference):
        return "str"
    return type(value).__name__ if not isinstance(value, (int, np.integer)) or isinstance(value, bool) else "int"


def zarr_data_type_json(arr: zarr.Array) -> Any:
    return arr.metadata.data_type.to_json(zarr_format=3)


def _are_bytes(values: Any) -> bool:
    """Variable-length string values that the contract keeps as bytes (not UTF-8 text)."""
    return isinstance(values, np.ndarray) and values.dtype == object and any(
        isinstance(v, bytes) for v in values.ravel().tolist()
    )


def dtype_diff(dtype: np.dtype, arr: zarr.Array, where: str, values: Any = None) -> list[str]:
    """The zarr data type the contract promises for a dataset of h5py dtype ``dtype``."""
    base = dtype.subdtype[0] if dtype.subdtype is not None else dtype
    actual = arr.dtype
    string = h5py.check_string_dtype(base)
    if string is not None:
        if string.length is None:
            want = "variable_length_bytes" if _are_bytes(values) else "string"
        else:
            want = {"name": "null_terminated_bytes", "configuration": {"length_bytes": base.itemsize}}
        got = zarr_data_type_json(arr)
        return [] if got == want else [f"{where}: zarr data_type {got!r}, expected {want!r}"]
    if h5py.check_ref_dtype(base) is h5py.Reference:
        got = zarr_data_type_json(arr)
        return [] if got == "string" else [f"{where}: zarr data_type {got!r} for references, expected 'string'"]
    if h5py.check_vlen_dtype(base) is not None:
        got = zarr_data_type_json(arr)
        return [] if got == "variable_length_bytes" else [f"{where}: zarr data_type {got!r}, expected 'variable_length_bytes'"]
    if base.names is not None:
        return [] if actual.names is not None else [f"{where}: zarr dtype {actual} is not structured"]
    if base.kind == "b":
        return [] if actual == np.dtype(bool) else [f"{where}: zarr dtype {actual}, expected bool"]
    want_dt = base.newbyteorder("=")
    if actual.kind != want_dt.kind or actual.itemsize != want_dt.itemsize or not actual.isnative:
        return [f"{where}: zarr dtype {actual.str} is not native {want_dt.str} (h5py {base.str})"]
    return []


def expected_dataset_attrs(f, snap, ds: h5py.Dataset, convention: str, values: Any = None) -> dict[str, Any]:
    attrs = {k: attr_json(ds.attrs[k], f, snap, convention) for k in ds.attrs}
    dt = "bytes" if _are_bytes(values) else dtype_attr(ds.dtype)
    if dt is not None:
        attrs["_DTYPE"] = dt
    if ds.shape is None:
        attrs["_EMPTY"] = True
    elif ds.shape == () and convention == "proposal":
        attrs["_SCALAR"] = True
    enum = h5py.check_enum_dtype(ds.dtype)
    if enum is not None:
        attrs["_ENUM"] = {str(k): int(v) for k, v in enum.items()}
    if ds.dtype.names is not None:
        ref_fields = [n for n in ds.dtype.names if h5py.check_ref_dtype(ds.dtype.fields[n][0]) is h5py.Reference]
        if ref_fields:
            attrs["_REFERENCE_FIELDS"] = ref_fields
    return attrs


def expected_links(f: h5py.File, snap: H5Snapshot, group_path: str) -> list[dict[str, str]]:
    group = f[group_path]
    links = []
    for name in group:
        link = group.get(name, getlink=True)
        child = group_path.rstrip("/") + "/" + name
        if isinstance(link, h5py.SoftLink):
            target = link.path if link.path.startswith("/") else group_path.rstrip("/") + "/" + link.path
            obj = f.get(target)
            path = zpath(snap.canonical[_identity(obj)]) if obj is not None else zpath(target)
            links.append({"name": escape_key(name), "source": ".", "path": path})
        elif isinstance(link, h5py.ExternalLink):
            links.append({"name": escape_key(name), "source": link.filename, "path": zpath(link.path)})
        else:
            first = snap.canonical[_identity(group[name])]
            if first != child:
                links.append({"name": escape_key(name), "source": ".", "path": zpath(first)})
    return sorted(links, key=lambda e: e["name"])


@dataclass
class DatasetExpectation:
    path: str
    shape: tuple[int, ...] | None  # None: null dataspace (h5py.Empty)
    dtype: np.dtype
    values: Any  # ndarray, {field: ...} for compounds, None for h5py.Empty
    attrs: dict[str, Any]


def read_expectations(h5_path: Path, convention: str):
    """Everything the contract promises, read from h5py alone (no zarr here)."""
    groups: list[tuple[str, dict[str, Any]]] = []
    datasets: list[DatasetExpectation] = []
    nodes: dict[str, str] = {}
    with h5py.File(h5_path, "r") as f:
        snap = snapshot(f)
        for gpath in snap.groups:
            g = f[gpath]
            attrs = {k: attr_json(g.attrs[k], f, snap, convention) for k in g.attrs}
            links = expected_links(f, snap, gpath)
            if links:
                attrs["_LINKS"] = links
            groups.append((gpath, attrs))
            if gpath != "/":
                nodes[zkey(gpath)] = "group"
        for dpath in snap.datasets:
            ds = f[dpath]
            nodes[zkey(dpath)] = "array"
            values = None if ds.shape is None else expected_values(f, snap, ds)
            datasets.append(
                DatasetExpectation(
                    dpath, ds.shape, ds.dtype, values, expected_dataset_attrs(f, snap, ds, convention, values)
                )
            )
    return groups, datasets, nodes


def check_against_h5py(h5_path: Path, root: zarr.Group, convention: str) -> None:
    """Compare every group, dataset and attribute of the HDF5 file with the zarr view."""
    groups, datasets, expected_nodes = read_expectations(h5_path, convention)
    problems: list[str] = []

    members = {name: "group" if isinstance(node, zarr.Group) else "array" for name, node in root.members(max_depth=None)}
    if members != expected_nodes:
        missing = sorted(set(expected_nodes) - set(members))
        extra = sorted(set(members) - set(expected_nodes))
        wrong = sorted(k for k in set(members) & set(expected_nodes) if members[k] != expected_nodes[k])
        problems.append(f"zarr nodes differ: missing {missing}, unexpected {extra}, wrong kind {wrong}")

    for gpath, attrs in groups:
        key = zkey(gpath)
        if key and members.get(key) != "group":
            continue  # reported above
        node = root if key == "" else root[key]
        actual = dict(node.attrs)
        if isinstance(actual.get("_LINKS"), list):  # a list, but its order is not part of the contract
            actual["_LINKS"] = sorted(actual["_LINKS"], key=lambda e: str(e.get("name")) if isinstance(e, dict) else "")
        problems += json_diff(attrs, actual, f"group {gpath} attrs")

    for exp in datasets:
        key, where = zkey(exp.path), f"dataset {exp.path}"
        if members.get(key) != "array":
            continue  # reported above
        arr = root[key]
        problems += json_diff(exp.attrs, dict(arr.attrs), f"{where} attrs")
        problems += dtype_diff(exp.dtype, arr, where, exp.values)
        try:
            problems += _dataset_values_diff(arr, exp, convention, where)
        except Exception as e:  # noqa: BLE001 - a failed read is a finding; keep checking the rest
            last = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            problems.append(f"{where}: reading through zarr failed: {type(e).__name__}: {last}")

    assert not problems, f"{h5_path.name}: {len(problems)} mismatch(es):\n" + "\n".join(problems)


def _dataset_values_diff(arr: zarr.Array, exp: DatasetExpectation, convention: str, where: str) -> list[str]:
    if exp.shape is None:  # null dataspace
        if arr.shape != (0,):
            return [f"{where}: h5py.Empty should be zarr shape (0,), got {arr.shape}"]
        data = arr[...]
        return [] if data.shape == (0,) else [f"{where}: read {data.shape} from an empty array"]
    extra = exp.dtype.subdtype[1] if exp.dtype.subdtype is not None else ()
    want_shape = tuple(exp.shape) + tuple(extra)
    if exp.shape == () and convention == "proposal":
        if arr.shape != (1,):
            return [f"{where}: proposal scalar should be shape (1,), got {arr.shape}"]
        # arr[...][0], not arr[0]: zarr 3.4 nests an object element in a second 0-d array there
        actual = np.asarray(arr[...][0])
    else:
        if arr.shape != want_shape:
            return [f"{where}: zarr shape {arr.shape} != h5py's {want_shape}"]
        actual = np.asarray(arr[()] if want_shape == () else arr[...])
    return value_diff(exp.values, actual, where)


# --------------------------------------------------------------------------------------
# The matrix
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("inline_threshold", THRESHOLDS, ids=["refs", "inline1000"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("feature", list(BUILDERS))
def test_feature_matrix(feature, route, inline_threshold, convention, feature_files, indexed, tmp_path):
    manifest = indexed(feature, inline_threshold, convention)
    root = open_route(route, manifest, tmp_path)
    check_against_h5py(feature_files(feature), root, convention)


def test_inline_threshold_zero_references_bytes(indexed):
    """With inline_threshold=0 the big contiguous slabs are byte ranges, not copies (sanity of the matrix)."""
    table = indexed("layouts", 0, "released").chunks["contiguous/big_1d"]
    assert (table.source >= 0).any(), "contiguous/big_1d: no chunk is referenced by byte range with inline_threshold=0"


def test_inlining_copies_small_arrays_never_chunks_of_big_ones(tmp_path):
    """A 48 KB array in 2,000 chunks of ~100 bytes stays references: the manifest is a map of the
    data, not a copy. A 400-byte array is inlined whole."""
    path = tmp_path / "tiny_chunks.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.create_dataset("big", data=rng.integers(0, 1000, 128_000, dtype="i4"), chunks=(64,), compression="gzip")
        f.create_dataset("small", data=np.arange(100, dtype="i4"), chunks=(10,))
    manifest = h5lens.index(path)
    big, small = manifest.chunks["big"], manifest.chunks["small"]
    assert big.n_present == 2000 and (big.source >= 0).all() and not big.inline
    assert small.n_present == 10 and (small.source == -2).all()
    out = tmp_path / "m.json"
    manifest.to_json(out)
    assert out.stat().st_size / big.n_present < 50  # bytes of manifest per chunk
    with h5py.File(path) as f:
        group = h5lens.open_group(out)
        np.testing.assert_array_equal(group["big"][...], f["big"][...])
        np.testing.assert_array_equal(group["small"][...], f["small"][...])


def test_json_round_trip_reads_the_same(feature_files, indexed, tmp_path):
    """Manifest.from_json(to_json(m)) opened through h5lens reads the same values as h5py."""
    p = tmp_path / "m.json"
    indexed("layouts", 0, "released").to_json(str(p))
    check_against_h5py(feature_files("layouts"), h5lens.open_group(h5lens.Manifest.from_json(str(p))), "released")


# --------------------------------------------------------------------------------------
# Refusals, bad input, limits, determinism
# --------------------------------------------------------------------------------------


def test_compound_with_array_member_reads_as_h5py(tmp_path):
    """Array members are nested records of the same bytes (tests/test_hdf5_types_more.py has every case)."""
    path = tmp_path / "array_member.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("ok", data=np.arange(3))
        f.create_dataset("grp/table", data=np.array([(1, (1, 2, 3)), (2, (4, 5, 6))], dtype=[("id", "<i4"), ("a", "<f4", (3,))]))
    got = h5lens.open(h5lens.index(path))["grp/table"][()]
    with h5py.File(path) as f:
        want = f["grp/table"][()]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_a_name_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin1_name.h5"
    with h5py.File(path, "w") as f:
        f.create_group("g").create_dataset(b"caf\xe9", data=[1, 2])
    with pytest.raises(h5lens.UnsupportedFeatureError, match=r"/g/b'caf\\xe9'"):
        h5lens.index(path)


def _valid_file(tmp_path: Path) -> Path:
    path = tmp_path / "valid.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(20000, dtype="f8"), chunks=(1000,), compression="gzip")
        f.create_dataset("y", data=np.arange(20000, dtype="i4"))
        f.attrs["a"] = "b"
    return path


def _zero_byte(tmp_path: Path) -> Path:
    path = tmp_path / "zero.h5"
    path.write_bytes(b"")
    return path


def _text_file(tmp_path: Path) -> Path:
    path = tmp_path / "text.h5"
    path.write_text("this is not an HDF5 file\n" * 20)
    return path


def _truncated(tmp_path: Path) -> Path:
    valid = _valid_file(tmp_path)
    data = valid.read_bytes()
    path = tmp_path / "truncated.h5"
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("make", [_zero_byte, _text_file, _truncated], ids=["zero-byte", "text", "truncated"])
def test_bad_input_raises_h5lens_error(make, tmp_path):
    with pytest.raises(h5lens.NotHDF5Error) as info:
        h5lens.index(make(tmp_path))
    assert isinstance(info.value, ValueError)


def test_missing_path_raises_source_not_found(tmp_path):
    missing = tmp_path / "does_not_exist.h5"
    with pytest.raises(h5lens.SourceNotFoundError) as info:
        h5lens.index(missing)
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, h5lens.H5LensError)


@pytest.mark.parametrize("feature", list(BUILDERS))
def test_determinism(feature, feature_files, tmp_path):
    path = feature_files(feature)
    outputs = []
    for i in range(2):
        out = tmp_path / f"m{i}.json"
        h5lens.index(path, slab_bytes=SLAB_BYTES).to_json(str(out))
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1], f"{feature}: indexing the same file twice gave different to_json output"


def test_materialize_limit(tmp_path):
    path = tmp_path / "many_strings.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("g/strings", data=[f"value number {i}" for i in range(10_000)], dtype=h5py.string_dtype())
    with pytest.raises(h5lens.MaterializeLimitError, match="/g/strings"):
        h5lens.index(path, materialize_limit=100)
    # without a limit the same file indexes and reads back
    check_against_h5py(path, h5lens.open_group(h5lens.index(path)), "released")


def test_committed_datatypes(tmp_path):
    """A committed datatype is a type definition: without attributes nothing is lost; with
    them it is a node of its own (``_DATATYPE``), its attributes and type read as h5py reads them."""
    path = tmp_path / "named.h5"
    with h5py.File(path, "w") as f:
        f["kind"] = np.dtype([("a", "<i4"), ("b", "<f8")])
        f.create_dataset("values", data=np.zeros(3, dtype=f["kind"].dtype))
    group = h5lens.open_group(h5lens.index(path))
    assert sorted(group.keys()) == ["values"]
    with h5py.File(path, "a") as f:
        f["kind"].attrs["units"] = "m"
        f["kind"].attrs["scale"] = np.float32(0.5)
        f["plain"] = np.dtype("<i2")
        f["plain"].attrs["note"] = "a named int16"
        f["values"].attrs["type"] = f["kind"].ref  # an object reference to it
    manifest = h5lens.index(path)
    assert manifest.nodes["kind"]["attributes"]["_DATATYPE"]["name"] == "structured"
    root = h5lens.open(manifest)
    with h5py.File(path) as f:
        for name in ("kind", "plain"):
            assert root[name].dtype == f[name].dtype
            assert dict(root[name].attrs) == {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f[name].attrs.items()}
            assert type(root[name].attrs.get("scale", 0)) is type(f[name].attrs.get("scale", 0))
        assert root["values"].attrs["type"].h5_path == f[f["values"].attrs["type"]].name
    assert h5lens.validate(manifest) == []


def test_a_filter_libhdf5_cannot_load_is_an_unsupported_feature_naming_it(tmp_path):
    """No zarr codec and no plugin: nobody can decode it here; say which filter, not 'not HDF5'."""
    path = tmp_path / "unknown_filter.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("x", shape=(10,), dtype="i4", chunks=(5,), compression=32099, allow_unknown_filter=True)
        ds.id.write_direct_chunk((0,), np.arange(5, dtype="i4").tobytes())
    with pytest.raises(h5lens.UnsupportedFeatureError, match=r"/x: .*filter .*32099"):
        h5lens.index(path)
