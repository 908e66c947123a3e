"""``engine="h5lens"`` gives each variable the ``encoding`` xarray's h5netcdf engine gives for
the file (``zlib``, ``shuffle``, ``complevel``, ``chunksizes``, ``contiguous``, ``fletcher32``,
``compression``, ``source``, ``original_shape``, ``dtype`` and what CF decoding adds), and
each group's ``encoding["unlimited_dims"]``, so ``to_netcdf`` writes the dataset back as the
file stored it. Compared key by key (values, types, NaN, byte order, enum metadata) with
``xr.open_dataset(file, engine="h5netcdf")`` on files netCDF4-python (netCDF-C), h5netcdf and
xarray wrote, then through a ``to_netcdf`` round trip read back with h5py and netCDF4.

The files are tests/test_netcdf.py's, and two more here: every storage choice netCDF-C
offers, and the filters h5netcdf names (szip, lzf, hdf5plugin's blosc, zstd, bzip2, LZ4,
bitshuffle; scale-offset, which h5lens stores decoded).
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

import h5lens

sys.path.insert(0, str(Path(__file__).parent))
import test_netcdf

netCDF4 = test_netcdf.netCDF4  # imported as test_netcdf imports it (HDF5_PLUGIN_PATH kept)
h5netcdf = test_netcdf.h5netcdf
hdf5plugin = pytest.importorskip("hdf5plugin")

pytestmark = test_netcdf.pytestmark
OPEN_OPTIONS = test_netcdf.OPEN_OPTIONS


# -- the files -----------------------------------------------------------------------------


def write_storage(path: Path) -> None:
    """netCDF-C's storage choices: deflate levels, shuffle, fletcher32, chunk shapes,
    contiguous and compact-sized variables, unlimited dimensions (one per group), vlen
    strings, int16 packed with float32 factors, times, big-endian numbers, an enum."""
    with netCDF4.Dataset(path, "w", format="NETCDF4") as f:
        f.createDimension("time", None)
        f.createDimension("y", 6)
        f.createDimension("x", 8)
        f.createDimension("name", 3)
        time = f.createVariable("time", "f8", ("time",))
        time.units = "hours since 2020-01-01 00:00"
        time.calendar = "proleptic_gregorian"
        time[:] = np.arange(5.0)
        y = f.createVariable("y", "f4", ("y",), contiguous=True)
        y[:] = np.linspace(0, 1, 6)
        x = f.createVariable("x", "i4", ("x",), zlib=True, complevel=9, shuffle=False, chunksizes=(3,))
        x[:] = np.arange(8)
        temp = f.createVariable(
            "temp", "f4", ("time", "y", "x"), zlib=True, complevel=2, shuffle=True, fletcher32=True,
            chunksizes=(1, 3, 8), fill_value=np.float32(-1e20),
        )  # fmt: skip
        temp.units = "K"
        temp[:] = np.arange(5 * 6 * 8, dtype="f4").reshape(5, 6, 8)
        packed = f.createVariable("packed", "i2", ("time", "y"), zlib=True, fill_value=np.int16(-32767))
        packed.set_auto_maskandscale(False)
        packed.scale_factor = np.float32(0.5)
        packed.add_offset = np.float32(100.0)
        raw = np.arange(30, dtype="i2").reshape(5, 6)
        raw[0, 0] = -32767
        packed[:] = raw
        big = f.createVariable("big_endian", "f8", ("y", "x"), endian="big", contiguous=True)
        big[:] = np.arange(48.0).reshape(6, 8)
        checked = f.createVariable("checked", "u2", ("y",), fletcher32=True, chunksizes=(2,))
        checked[:] = np.arange(6)
        names = f.createVariable("label", str, ("name",))
        names[:] = np.array(["ab", "cdef", ""], dtype=object)
        cloud_t = f.createEnumType(np.uint8, "cloud_t", {"clear": 0, "cumulus": 1, "missing": 255})
        cloud = f.createVariable("cloud", cloud_t, ("time",), fill_value=255)
        cloud[:] = np.array([0, 1, 255, 0, 1], "u1")
        scalar = f.createVariable("scalar", "i8", ())
        scalar.assignValue(7)
        sub = f.createGroup("sub")
        sub.createDimension("step", None)
        step = sub.createVariable("step", "i4", ("step",))
        step[:] = np.arange(3)
        inner = sub.createVariable("inner", "f4", ("time", "step"), zlib=True, complevel=1, chunksizes=(2, 2))
        inner[:] = np.ones((5, 3), "f4")
        f.createGroup("empty")  # no variable, no dimension: unlimited_dims is still set()


def write_filters(path: Path) -> None:
    """Filters h5netcdf reports in its own terms (``szip``, ``compression="lzf"``, ``blosc``,
    ``zstd``, ``bzip2``, ``compression="unknown"``), written through h5netcdf and h5py."""
    with h5netcdf.File(path, "w", invalid_netcdf=True) as f:
        f.dimensions = {"x": 200}
        data = np.arange(200, dtype="i4") // 3
        filters: dict[str, dict[str, Any]] = {
            "szip": {"compression": "szip", "compression_opts": ("nn", 8)},
            "szip_ec": {"compression": "szip", "compression_opts": ("ec", 16)},
            "lzf": {"compression": "lzf"},
            "blosc": dict(hdf5plugin.Blosc(cname="zstd", clevel=3)),
            "zstd": dict(hdf5plugin.Zstd(clevel=5)),
            "bzip2": dict(hdf5plugin.BZip2(blocksize=7)),
            "lz4": dict(hdf5plugin.LZ4()),
            "bitshuffle": dict(hdf5plugin.Bitshuffle()),
            "scaleoffset": {"scaleoffset": 0},  # no zarr codec: h5lens stores it decoded
            "gzip_fletcher": {"compression": "gzip", "compression_opts": 3, "shuffle": True, "fletcher32": True},
        }
        for name, options in filters.items():
            v = f.create_variable(name, ("x",), "i4", chunks=(50,), **options)
            v[:] = data


WRITERS: dict[str, Callable[[Path], None]] = {**test_netcdf.WRITERS, "storage": write_storage, "filters": write_filters}
# where a manifest's array holds a contiguous dataset in several slabs
SLAB_BYTES = 64


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Callable[[str], Path]:
    return test_netcdf.file_maker(tmp_path_factory.mktemp("encoding"), WRITERS)


@pytest.fixture(scope="module")
def saved(files, tmp_path_factory) -> Callable[[str, str], Path]:
    """``get(writer, form)``: the manifest of ``writer``'s file, in ``form``, its big
    contiguous arrays cut into slabs."""
    root = tmp_path_factory.mktemp("encoding_manifests")
    made: dict[tuple[str, str], Path] = {}

    def get(writer: str, form: str) -> Path:
        if (writer, form) not in made:
            path = root / f"{writer}.nc{'.json' if form == 'json' else '.h5lens'}"
            h5lens.index(files(writer), slab_bytes=SLAB_BYTES).save(path, format=form)
            made[writer, form] = path
        return made[writer, form]

    return get


# -- comparing -------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equal as xarray's writers see them: the same type, NaN equal to NaN, dtypes equal in
    byte order, field layout and metadata (an enum's mapping and name)."""
    if isinstance(a, np.dtype) and isinstance(b, np.dtype):
        return a == b and a.str == b.str and a.metadata == b.metadata
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | np.floating) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def differences(expected: dict[str, Any], got: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {
        key: (expected.get(key, "<absent>"), got.get(key, "<absent>"))
        for key in sorted(set(expected) | set(got))
        if key not in expected or key not in got or not same(expected[key], got[key])
    }


def assert_encodings_match(expected: xr.Dataset, got: xr.Dataset, where: str) -> None:
    assert set(got.variables) == set(expected.variables), where
    for name, variable in expected.variables.items():
        if variable.dtype.names is not None:
            continue  # compounds: the one known difference (test_compound_dtype_is_packed)
        assert same(variable.dtype, got[name].dtype), (where, name, variable.dtype, got[name].dtype)
        found = differences(variable.encoding, got[name].encoding)
        assert not found, f"{where} {name}: {found}"
    assert same(got.encoding.get("unlimited_dims"), expected.encoding["unlimited_dims"]), where


def _groups(path: Path) -> Iterator[str]:
    yield from test_netcdf._groups(path)


def _h5netcdf(opener: Callable[..., Any], path: Path, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return opener(path, engine="h5netcdf", **OPEN_OPTIONS, **kwargs)


# -- encoding, key by key ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "form"), [(w, "json") for w in sorted(WRITERS)] + [(w, "compact") for w in ("storage", "filters")]
)
def test_variable_encoding_is_h5netcdfs(writer, form, files, saved):
    path, manifest = files(writer), saved(writer, form)
    for group in _groups(path):
        with _h5netcdf(xr.open_dataset, path, group=group) as expected:
            with xr.open_dataset(manifest, engine="h5lens", group=group) as got:
                assert_encodings_match(expected, got, f"{writer} {group}")
                # the dataset's source is what xarray was given: the manifest
                assert got.encoding["source"] == str(manifest)
                assert expected.encoding["source"] == str(path)


@pytest.mark.parametrize("writer", ["netcdf4_python", "storage", "datatree", "h5netcdf", "xarray_h5netcdf"])
def test_datatree_encoding_is_h5netcdfs_in_every_group(writer, files, saved):
    path = files(writer)
    with _h5netcdf(xr.open_datatree, path) as expected, xr.open_datatree(saved(writer, "json"), engine="h5lens") as got:
        assert sorted(got.groups) == sorted(expected.groups)
        for group in expected.groups:
            assert_encodings_match(
                expected[group].to_dataset(inherit=False), got[group].to_dataset(inherit=False), f"{writer} {group}"
            )
            assert got[group].encoding.get("unlimited_dims") == expected[group].encoding["unlimited_dims"]


def test_the_files_hold_the_cases_they_claim(files, saved):
    """Each case the comparison above is meant to cover is in the file, as h5netcdf reads it."""
    storage = files("storage")
    with _h5netcdf(xr.open_dataset, storage) as ds, _h5netcdf(xr.open_dataset, storage, group="sub") as sub:
        assert ds.encoding["unlimited_dims"] == {"time"} and sub.encoding["unlimited_dims"] == {"step"}
        assert ds["temp"].encoding["zlib"] and ds["temp"].encoding["fletcher32"] and ds["temp"].encoding["shuffle"]
        assert ds["y"].encoding["contiguous"] and ds["big_endian"].encoding["dtype"].byteorder == ">"
        assert ds["label"].dtype.kind == "U"
        assert ds["cloud"].encoding["dtype"].metadata["enum_name"] == "cloud_t"
        assert ds["packed"].encoding["scale_factor"].dtype == np.float32
    with _h5netcdf(xr.open_dataset, files("filters")) as ds:
        assert ds["szip"].encoding["szip"] and ds["lzf"].encoding["compression"] == "lzf"
        assert ds["blosc"].encoding["compression"] == "unknown" and ds["zstd"].encoding["zstd"]
        assert ds["bzip2"].encoding["bzip2"] and ds["lz4"].encoding["blosc"]  # h5netcdf's name for 32004
    # the manifest holds a contiguous variable in several slabs, and a filter it stores decoded
    manifest = h5lens.Manifest.load(saved("storage", "json"))
    assert manifest.nodes["big_endian"]["chunk_grid"]["configuration"]["chunk_shape"][0] < 6
    filtered = h5lens.Manifest.load(saved("filters", "json"))
    assert [c["name"] for c in filtered.nodes["scaleoffset"]["codecs"]] == ["bytes"]


def test_vlen_strings_are_h5netcdfs_fixed_width_unicode(files, saved):
    """Not numpy's StringDType (what xarray's zarr engine gives): ``<U4`` as h5netcdf."""
    with _h5netcdf(xr.open_dataset, files("storage")) as expected:
        with xr.open_dataset(saved("storage", "json"), engine="h5lens") as got:
            assert got["label"].dtype == expected["label"].dtype
            assert got["label"].values.tolist() == expected["label"].values.tolist()
        with xr.open_dataset(h5lens.open_store(saved("storage", "json")), engine="zarr", consolidated=False) as zarrs:
            assert zarrs["label"].dtype.kind == "T"
        with xr.open_dataset(saved("storage", "json"), engine="h5lens", chunks={}) as lazy:
            assert lazy["label"].load().dtype == expected["label"].dtype


def test_vlen_strings_through_zarrs_pipeline_are_the_same(files, saved):
    """With h5lens's decoding off (``fast_reads(False)``) zarr reads the text, as numpy's
    StringDType; the engine still gives h5netcdf's values, lazily and by points too."""
    with _h5netcdf(xr.open_dataset, files("storage")) as expected, h5lens.fast_reads(False):
        with xr.open_dataset(saved("storage", "json"), engine="h5lens") as got:
            assert got["label"].dtype == expected["label"].dtype
            assert got["label"].values.tolist() == expected["label"].values.tolist()
        with xr.open_dataset(saved("storage", "json"), engine="h5lens", chunks={}) as lazy:
            picked = lazy["label"].isel(name=xr.DataArray([2, 0], dims="p")).compute()
            assert picked.values.tolist() == expected["label"].values[[2, 0]].tolist()


def test_dask_chunks_follow_the_file_as_h5netcdfs(files, saved):
    """``chunks={}`` chunks as ``preferred_chunks`` says: HDF5's chunks; a contiguous variable
    (several slabs in the manifest) in one piece, as h5netcdf gives it."""
    with _h5netcdf(xr.open_dataset, files("storage"), chunks={}) as expected:
        with xr.open_dataset(saved("storage", "json"), engine="h5lens", chunks={}) as got:
            for name in expected.variables:
                assert got[name].chunks == expected[name].chunks, name


def test_compound_dtype_is_packed(files, saved):
    """The one difference: a compound's dtype has no padding (zarr's structured type), where
    h5py gives HDF5's aligned offsets; the fields and values are the same."""
    with _h5netcdf(xr.open_dataset, files("user_types")) as expected:
        with xr.open_dataset(saved("user_types", "json"), engine="h5lens") as got:
            theirs, mine = expected["pairs"].encoding["dtype"], got["pairs"].encoding["dtype"]
            assert theirs.itemsize > mine.itemsize and theirs.names == mine.names
            assert [theirs[n] for n in theirs.names] == [mine[n] for n in mine.names]
            assert differences({k: v for k, v in expected["pairs"].encoding.items() if k != "dtype"}, {
                k: v for k, v in got["pairs"].encoding.items() if k != "dtype"
            }) == {}  # fmt: skip
            assert got["pairs"].values.tolist() == expected["pairs"].values.tolist()


# -- round trip -------------------------------------------------------------------------------


def stored(path: Path) -> dict[str, Any]:
    """What HDF5 stores for each dataset (h5py: layout, chunks, filters with their settings,
    maximum shape, type) and each group's unlimited dimensions (netCDF4)."""
    out: dict[str, Any] = {}
    with h5py.File(path) as f:

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                plist = obj.id.get_create_plist()
                pipeline = [plist.get_filter(i)[:3] for i in range(plist.get_nfilters())]
                out[name] = (plist.get_layout(), obj.chunks, pipeline, obj.maxshape, obj.dtype.str)

        f.visititems(visit)
    with netCDF4.Dataset(path) as nc:

        def unlimited(group: Any, at: str) -> None:
            out[f"{at}:unlimited"] = sorted(n for n, d in group.dimensions.items() if d.isunlimited())
            for name, child in group.groups.items():
                unlimited(child, f"{at}/{name}")

        unlimited(nc, "")
    return out


ROUND_TRIPS = ["netcdf4_python", "storage", "h5netcdf", "xarray_netcdf4", "xarray_h5netcdf", "datatree"]


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
@pytest.mark.parametrize("writer", ROUND_TRIPS)
def test_to_netcdf_writes_what_h5netcdfs_dataset_writes(writer, engine, files, saved, tmp_path):
    """``ds.to_netcdf(out)`` of each group's Dataset from the manifest stores what the same
    call stores from h5netcdf's: compression filters, chunk shapes, contiguous layouts,
    unlimited dimensions, types."""
    path = files(writer)
    for number, group in enumerate(_groups(path)):
        theirs, mine = tmp_path / f"theirs{number}.nc", tmp_path / f"mine{number}.nc"
        with _h5netcdf(xr.open_dataset, path, group=group) as ds:
            ds.to_netcdf(theirs, engine=engine)
        with xr.open_dataset(saved(writer, "json"), engine="h5lens", group=group) as ds:
            ds.to_netcdf(mine, engine=engine)
        expected, got = stored(theirs), stored(mine)
        assert got.keys() == expected.keys(), group
        assert {k: v for k, v in got.items() if v != expected[k]} == {}, group


@pytest.mark.parametrize("writer", ["netcdf4_python", "storage", "datatree"])
def test_datatree_to_netcdf_writes_what_h5netcdfs_tree_writes(writer, files, saved, tmp_path):
    """The same for a DataTree (whose ``to_netcdf`` takes unlimited dimensions only from its
    ``unlimited_dims`` argument, not from the encoding: the same either way)."""
    with _h5netcdf(xr.open_datatree, files(writer)) as theirs:
        theirs.to_netcdf(tmp_path / "theirs.nc")
    with xr.open_datatree(saved(writer, "json"), engine="h5lens") as mine:
        mine.to_netcdf(tmp_path / "mine.nc")
    expected, got = stored(tmp_path / "theirs.nc"), stored(tmp_path / "mine.nc")
    assert got.keys() == expected.keys()
    assert {k: v for k, v in got.items() if v != expected[k]} == {}


def test_round_trip_keeps_the_files_storage(files, saved, tmp_path):
    """Not only what h5netcdf's round trip keeps: the storage of the file itself, group by
    group (the subgroup's own unlimited dimension included). Byte order is not kept by either
    (xarray's writers take it from an ``endian`` encoding neither engine gives)."""
    source = stored(files("storage"))
    for group, names in (("/", ("temp", "x", "y", "checked", "packed", "time")), ("/sub", ("inner", "step"))):
        with xr.open_dataset(saved("storage", "json"), engine="h5lens", group=group) as ds:
            ds.to_netcdf(tmp_path / "copy.nc")
        copy = stored(tmp_path / "copy.nc")
        for name in names:
            layout, chunks, pipeline, maxshape, _ = source[f"{group.strip('/')}/{name}".lstrip("/")]
            if group == "/sub" and name == "inner":
                maxshape = (5, None)  # alone, the subgroup holds the root's "time" as a fixed dimension
            assert copy[name][:4] == (layout, chunks, pipeline, maxshape), name
        assert copy[":unlimited"] == source[f"{group.rstrip('/')}:unlimited"]


# -- manifests without a storage record -------------------------------------------------------


def test_plain_hdf5_encoding_from_its_codecs(tmp_path):
    """An HDF5 file no netCDF library wrote keeps every attribute, so its manifest records no
    storage: filtered variables get h5netcdf's encoding from their codecs (filters need
    chunks); an unfiltered one, contiguous or chunked, gets no layout, and the dataset no
    ``unlimited_dims`` (h5lens cannot tell)."""
    path = tmp_path / "scales.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(40.0)
        f["x"].make_scale("x")
        f.create_dataset("zipped", data=np.arange(40, dtype="i4"), chunks=(10,), compression="gzip", shuffle=True)
        f.create_dataset("plain", data=np.arange(40, dtype="i2"))
        for name in ("zipped", "plain"):
            f[name].dims[0].attach_scale(f["x"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = xr.open_dataset(path, engine="h5netcdf")
    manifest = h5lens.index(path)
    assert "_nc_storage" not in manifest.nodes[""].get("attributes", {})
    with expected, xr.open_dataset(manifest, engine="h5lens") as got:
        assert differences(expected["zipped"].encoding, got["zipped"].encoding) == {}
        unknown = {"contiguous", "chunksizes", "preferred_chunks"}
        assert differences(
            {k: v for k, v in expected["plain"].encoding.items() if k not in unknown},
            {k: v for k, v in got["plain"].encoding.items() if k not in unknown},
        ) == {}  # fmt: skip
        assert "contiguous" not in got["plain"].encoding and "chunksizes" not in got["plain"].encoding
        assert "unlimited_dims" not in got.encoding


def test_codecs_give_the_filters_the_record_gives(files, saved, tmp_path):
    """Without ``_nc_storage`` (removed here), the codecs of every filter h5lens references
    give h5netcdf's encoding; what h5lens stores decoded (scale-offset, a small LZF array)
    loses its filter and layout."""
    document = json.loads(saved("filters", "json").read_text())
    root = json.loads(document["refs"]["zarr.json"])
    del root["attributes"]["_nc_storage"]
    document["refs"]["zarr.json"] = json.dumps(root)
    bare = tmp_path / "bare.nc.json"
    bare.write_text(json.dumps(document))
    decoded = {
        name
        for name, doc in h5lens.Manifest.load(saved("filters", "json")).nodes.items()
        if doc.get("node_type") == "array" and [c["name"] for c in doc["codecs"]] == ["bytes"]
    }
    assert "scaleoffset" in decoded
    with _h5netcdf(xr.open_dataset, files("filters")) as expected:
        with xr.open_dataset(bare, engine="h5lens") as got:
            for name in expected.variables:
                if name not in decoded:
                    assert differences(expected[name].encoding, got[name].encoding) == {}, name


def test_the_record_names_agree():
    """The scanner writes, and the reader reads, the same group attributes."""
    from h5lens.read import xarray_arrays
    from h5lens.scan import netcdf

    assert xarray_arrays.STORAGE == netcdf.STORAGE and xarray_arrays.ENUMS == netcdf.ENUMS
