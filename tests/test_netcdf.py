"""netCDF-4 files written by netCDF-C (netCDF4-python), h5netcdf and xarray, indexed by
h5lens and opened by xarray's zarr engine: the Dataset and the DataTree must be identical
to what ``xr.open_dataset(path, engine="h5netcdf")`` / ``xr.open_datatree`` give.

Two read routes, as in the feature matrix: ``h5lens.open_store(manifest)`` and plain
fsspec + zarr (the manifest written to JSON, fsspec's reference filesystem in
``zarr.storage.FsspecStore``), each with chunks referenced (``inline_threshold=0``) and
small arrays inlined (the default).

One known difference is tested as such: an ``int16`` packed with a ``float32``
``scale_factor`` decodes as float64 through xarray's zarr engine, since JSON attributes carry
no float32 (``xarray.Dataset.to_zarr`` round trips give the same); ``engine="h5lens"``,
which applies the attribute types the manifest records, gives h5netcdf's float32.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
import zarr.storage

import h5lens


def _import_netcdf4():
    """netCDF4, leaving HDF5's plugin search as it was. On import, netCDF4 points
    ``HDF5_PLUGIN_PATH`` at the filter plugins it bundles, built for its own libhdf5; h5py's
    libhdf5 then loads its blosc instead of hdf5plugin's (when hdf5plugin is imported
    later) and fails creating blosc datasets ("error during user callback"), here and in
    every subprocess a test starts. hdf5plugin first, and the variable put back."""
    import hdf5plugin  # noqa: F401 - registers its filters before netCDF4 is imported

    before = os.environ.get("HDF5_PLUGIN_PATH")
    module = pytest.importorskip("netCDF4")
    if before is None:
        os.environ.pop("HDF5_PLUGIN_PATH", None)
    else:
        os.environ["HDF5_PLUGIN_PATH"] = before
    return module


netCDF4 = _import_netcdf4()
h5netcdf = pytest.importorskip("h5netcdf")

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

# plain zarr over fsspec's reference filesystem: zarr before 3.4.1 lists a subgroup of an
# FsspecStore without its arrays (zarr-python#3922), whoever wrote the references
_PLAIN_LISTS_GROUPS = tuple(int(x) for x in zarr.__version__.split(".")[:3] if x.isdigit()) >= (3, 4, 1)
ROUTES = (
    "h5lens",
    pytest.param(
        "fsspec",
        marks=pytest.mark.skipif(not _PLAIN_LISTS_GROUPS, reason=f"zarr {zarr.__version__} lists subgroups of an FsspecStore empty (zarr-python#3922, fixed in 3.4.1)"),
    ),
)
THRESHOLDS = (0, 1000)


# -- the files -----------------------------------------------------------------------------


def write_netcdf4_python(path: Path) -> None:
    """netCDF-C through netCDF4-python: every feature the issue lists."""
    with netCDF4.Dataset(path, "w", format="NETCDF4") as f:
        f.title = "netCDF-C"
        f.version = np.int32(3)
        f.empty = ""
        f.createDimension("time", None)  # unlimited
        f.createDimension("lat", 4)
        f.createDimension("lon", 5)
        f.createDimension("nbnd", 2)  # no coordinate variable
        f.createDimension("nchar", 4)
        time = f.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01"
        time.calendar = "noleap"
        time[:] = np.arange(6) * 1.5
        lat = f.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat[:] = np.linspace(-30, 30, 4)
        lon = f.createVariable("lon", "f8", ("lon",), contiguous=True)
        lon[:] = np.arange(5) * 10.0
        bounds = f.createVariable("time_bnds", "f8", ("time", "nbnd"))
        bounds[:] = np.stack([np.arange(6), np.arange(6) + 1], axis=1)
        time.bounds = "time_bnds"
        # chunked + zlib + shuffle, a _FillValue, missing points
        temp = f.createVariable(
            "temp",
            "f4",
            ("time", "lat", "lon"),
            zlib=True,
            complevel=4,
            shuffle=True,
            chunksizes=(2, 2, 5),
            fill_value=np.float32(-999.0),
        )
        temp.units = "K"
        temp.long_name = "air temperature"
        temp.valid_range = np.array([150.0, 350.0], "f4")
        temp.flags = np.array([1, 2, 4], "i2")
        temp.names = ["a", "bb"]
        values = (np.arange(6 * 4 * 5, dtype="f4").reshape(6, 4, 5) % 50) + 200
        values[1, 2, 3] = -999.0
        temp[:] = values
        # packed: int16 with double scale_factor / add_offset and a _FillValue
        packed = f.createVariable("packed", "i2", ("lat", "lon"), fill_value=np.int16(-32767), contiguous=True)
        packed.set_auto_maskandscale(False)
        packed.scale_factor = 0.01
        packed.add_offset = 273.15
        raw = (np.arange(20, dtype="i2").reshape(4, 5) * 100) - 1000
        raw[0, 0] = -32767
        packed[:] = raw
        # shorter than its unlimited dimension: netCDF reads the rest as the fill value
        short = f.createVariable("short", "i4", ("time",), chunksizes=(4,))
        short[0:3] = [1, 2, 3]
        # 0-d, contiguous
        scalar = f.createVariable("scalar", "f8", ())
        scalar.assignValue(42.5)
        scalar.comment = "0-d"
        # strings: vlen and char arrays
        names = f.createVariable("station", str, ("lat",))
        names[:] = np.array(["alpha", "β", "", "delta delta"], dtype=object)
        chars = f.createVariable("code", "S1", ("lon", "nchar"))
        chars._Encoding = "ascii"
        chars[:] = netCDF4.stringtochar(np.array(["ab", "cdef", "g", "", "hi"], dtype="S4"))
        # a variable named like a dimension it is not the coordinate of (_nc4_non_coord_)
        nbnd = f.createVariable("nbnd", "i4", ("time", "nbnd"))
        nbnd[:] = np.ones((6, 2), "i4")
        # groups: own dimensions, parent dimensions, a coordinate in a subgroup
        obs = f.createGroup("obs")
        obs.source = "station network"
        obs.createDimension("station", 3)
        sid = obs.createVariable("station", "i4", ("station",))
        sid[:] = [10, 20, 30]
        reading = obs.createVariable("reading", "f8", ("time", "station"), zlib=True)
        reading[:] = np.arange(18.0).reshape(6, 3)
        deep = obs.createGroup("deep")
        level = deep.createVariable("level", "f4", ("lat",))
        level[:] = [1, 2, 3, 4]


def write_user_types(path: Path) -> None:
    """netCDF user types: compound, enum; and strings."""
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("x", 4)
        pair = f.createCompoundType(np.dtype([("i", "<i4"), ("f", "<f8")]), "pair_t")
        pairs = f.createVariable("pairs", pair, ("x",))
        data = np.zeros(4, dtype=[("i", "<i4"), ("f", "<f8")])
        data["i"], data["f"] = [1, 2, 3, 4], [0.5, 0.25, 0.125, 2.0]
        pairs[:] = data
        cloud = f.createEnumType(np.uint8, "cloud_t", {"clear": 0, "cumulus": 1, "missing": 255})
        clouds = f.createVariable("cloud", cloud, ("x",), fill_value=255)
        clouds[:] = np.array([0, 1, 255, 0], "u1")
        text = f.createVariable("text", str, ("x",))
        text[:] = np.array(["one", "two", "", "four"], dtype=object)


def write_h5netcdf(path: Path) -> None:
    """h5netcdf's own API: dimensions, an unlimited one, groups, compression."""
    with h5netcdf.File(path, "w") as f:
        f.attrs["conventions"] = "CF-1.8"
        f.dimensions = {"x": 3, "t": None}
        x = f.create_variable("x", ("x",), "f8")
        x[:] = [0.5, 1.5, 2.5]
        f.resize_dimension("t", 4)
        t = f.create_variable("t", ("t",), "i8")
        t[:] = np.arange(4)
        t.attrs["units"] = "seconds since 2020-01-01T00:00:00"
        v = f.create_variable("v", ("t", "x"), "f4", compression="gzip", shuffle=True, chunks=(2, 3), fillvalue=np.nan)
        v[:] = np.arange(12, dtype="f4").reshape(4, 3)
        v.attrs["units"] = "m/s"
        s = f.create_variable("s", ("x",), h5py.string_dtype())
        s[:] = ["a", "bc", "def"]
        z = f.create_variable("z", (), "i2")
        z[()] = 7
        g = f.create_group("child")
        g.dimensions = {"y": 2}
        w = g.create_variable("w", ("y", "x"), "i4")
        w[:] = [[1, 2, 3], [4, 5, 6]]
        w.attrs["note"] = "uses a parent dimension"


def _xarray_dataset() -> xr.Dataset:
    rng = np.random.default_rng(7)
    times = pd.date_range("2001-01-01", periods=5, freq="6h")
    noleap = xr.date_range("2001-02-27", periods=5, freq="D", calendar="noleap", use_cftime=True)
    ds = xr.Dataset(
        {
            "temperature": (("time", "y", "x"), rng.normal(280, 5, (5, 3, 4)).astype("f4"), {"units": "K"}),
            "precip": (("time", "y", "x"), rng.random((5, 3, 4)), {"units": "mm"}),
            "label": (("y",), np.array(["north", "mid", "south"], dtype=object)),
            "flag": (("x",), np.array([b"a", b"b", b"c", b"d"])),
            "model_day": (("time",), noleap),
            "event": (("time",), np.array(["2001-01-01T03", "NaT", "2001-01-02", "NaT", "2001-01-03"], "M8[ns]")),
            "count": ((), np.int64(12)),
        },
        coords={"time": times, "y": [10.0, 20.0, 30.0], "x": np.arange(4, dtype="i2"), "height": ((), 2.0)},
        attrs={"title": "xarray", "history": "made in a test"},
    )
    ds["precip"][0, 0, 0] = np.nan
    ds["precip"].encoding.update(dtype="i2", scale_factor=0.001, add_offset=0.0, _FillValue=-9999)
    ds["temperature"].encoding.update(zlib=True, shuffle=True, chunksizes=(1, 3, 4))
    return ds


def write_xarray_netcdf4(path: Path) -> None:
    _xarray_dataset().to_netcdf(path, engine="netcdf4")


def write_xarray_h5netcdf(path: Path) -> None:
    _xarray_dataset().to_netcdf(path, engine="h5netcdf")


def write_datatree(path: Path) -> None:
    """A DataTree written by xarray: groups inheriting the root's coordinates."""
    root = xr.Dataset(coords={"time": pd.date_range("2020-01-01", periods=3)}, attrs={"title": "tree"})
    tree = xr.DataTree.from_dict(
        {
            "/": root,
            "/surface": xr.Dataset({"t2m": ("time", np.array([280.0, 281.5, 279.0]))}),
            "/surface/ocean": xr.Dataset(
                {"sst": (("time", "depth"), np.ones((3, 2))), "depth": ("depth", [0.5, 10.0])}
            ),
            "/upper": xr.Dataset({"wind": ("time", np.array([3, 4, 5], "i4"))}, attrs={"level": "250hPa"}),
        }
    )
    tree.to_netcdf(path, engine="h5netcdf")


def write_dimension_scales(path: Path) -> None:
    """Plain HDF5 (h5py) with dimension scales on some datasets, as NeXus and instrument
    files have them: not netCDF (no netCDF library wrote it), so h5lens keeps every attribute
    and only names the arrays' dimensions, as h5netcdf names them (``phony_dims="sort"``)."""
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(4.0)
        f["x"].make_scale("x")
        f["y"] = np.arange(3)
        f["y"].make_scale("y")
        f["data"] = np.arange(12.0).reshape(4, 3)
        f["data"].dims[0].attach_scale(f["x"])
        f["data"].dims[1].attach_scale(f["y"])
        f["data"].attrs["units"] = "m"
        f["data"].attrs["scale"] = np.array([2.0])
        f["unlabelled"] = np.zeros((3, 5, 5))
        f["other"] = np.ones((5, 7), "i2")
        f.create_group("grp")["z"] = np.ones((2, 2))
        f["grp"].attrs["title"] = np.bytes_(b"group")
        f["s0"] = 1.5
        f.attrs["history"] = "made by h5py"


WRITERS: dict[str, Callable[[Path], None]] = {
    "netcdf4_python": write_netcdf4_python,
    "user_types": write_user_types,
    "h5netcdf": write_h5netcdf,
    "xarray_netcdf4": write_xarray_netcdf4,
    "xarray_h5netcdf": write_xarray_h5netcdf,
    "datatree": write_datatree,
}
# h5netcdf needs phony_dims for axes without scales; "sort" is netCDF-C's naming.
OPEN_OPTIONS = {"phony_dims": "sort"}


def file_maker(root: Path, writers: dict[str, Callable[[Path], None]]) -> Callable[[str], Path]:
    """``get(name)``: the file ``writers[name]`` writes under ``root``, written once."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            path = root / f"{name}.nc"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                writers[name](path)
            made[name] = path
        return made[name]

    return get


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Callable[[str], Path]:
    return file_maker(tmp_path_factory.mktemp("netcdf"), WRITERS)


@pytest.fixture(scope="module")
def manifests(files) -> Callable[[str, int], h5lens.Manifest]:
    made: dict[tuple[str, int], h5lens.Manifest] = {}

    def get(name: str, threshold: int) -> h5lens.Manifest:
        if (name, threshold) not in made:
            made[name, threshold] = h5lens.index(files(name), inline_threshold=threshold)
        return made[name, threshold]

    return get


def zarr_store(route: str, manifest: h5lens.Manifest, workdir: Path) -> zarr.abc.store.Store:
    if route == "h5lens":
        return h5lens.open_store(manifest)
    p = str(workdir / "manifest.json")
    manifest.to_json(p)
    fs = fsspec.filesystem(
        "reference", fo=p, asynchronous=True, remote_protocol="file", remote_options={"asynchronous": True}
    )
    return zarr.storage.FsspecStore(fs, read_only=True, path="")


def _groups(path: Path) -> list[str]:
    with h5py.File(path) as f:
        names = ["/"]
        f.visititems(lambda name, obj: names.append("/" + name) if isinstance(obj, h5py.Group) else None)
    return names


# -- identical to the h5netcdf engine -------------------------------------------------------


@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_dataset_identical_to_h5netcdf(writer, route, threshold, files, manifests, tmp_path):
    path = files(writer)
    store = zarr_store(route, manifests(writer, threshold), tmp_path)
    for group in _groups(path):
        if writer == "datatree" and group != "/":
            continue  # groups that inherit the root's coordinates: compared as a DataTree
        expected = xr.open_dataset(path, engine="h5netcdf", group=group, **OPEN_OPTIONS).load()
        got = xr.open_dataset(store, engine="zarr", group=group.strip("/") or None).load()
        xr.testing.assert_identical(got, expected)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("writer", sorted(set(WRITERS) - {"netcdf4_python"}) + ["netcdf4_python"])
def test_datatree_identical_to_h5netcdf(writer, route, files, manifests, tmp_path):
    path = files(writer)
    store = zarr_store(route, manifests(writer, 1000), tmp_path)
    expected = xr.open_datatree(path, engine="h5netcdf", **OPEN_OPTIONS).load()
    got = xr.open_datatree(store, engine="zarr").load()
    xr.testing.assert_identical(got, expected)
    assert sorted(got.groups) == sorted(expected.groups)


def test_decoding_reaches_xarray_as_written(files, manifests):
    """CF decoding happened: fill values masked, packing applied, calendars kept."""
    got = xr.open_dataset(h5lens.open_store(manifests("netcdf4_python", 1000)), engine="zarr")
    assert np.isnan(got["temp"].values[1, 2, 3])
    assert got["temp"].encoding["_FillValue"] == -999.0
    assert got["packed"].dtype == np.float64 and np.isnan(got["packed"].values[0, 0])
    np.testing.assert_allclose(got["packed"].values[0, 1], 100 * 0.01 - 10 + 273.15 - 0.0, rtol=1e-12)
    assert got["time"].encoding["calendar"] == "noleap"
    assert type(got["time"].values[0]).__name__ == "DatetimeNoLeap"
    assert got["short"].values.tolist()[:3] == [1, 2, 3] and len(got["short"]) == 6
    assert got["nbnd"].dims == ("time", "nbnd")  # stored as _nc4_non_coord_nbnd
    assert got["station"].values.tolist() == ["alpha", "β", "", "delta delta"]
    assert got["code"].values.tolist() == ["ab", "cdef", "g", "", "hi"]


def test_float32_packing_is_the_one_known_difference(tmp_path):
    """int16 packed with a float32 scale_factor: float32 through h5netcdf, float64 through
    zarr (JSON attributes carry no float32; xarray's own to_zarr does the same). Same
    dimensions, attributes and encoding values; values equal to float32 precision."""
    path = tmp_path / "f32.nc"
    ds = xr.Dataset(
        {"p": (("t",), np.array([1.0, 2.0, 3.0, np.nan], "f4"), {"long_name": "pressure"})},
        coords={"t": [0, 1, 2, 3]},
    )
    ds["p"].encoding.update(dtype="i2", scale_factor=np.float32(0.1), add_offset=np.float32(1), _FillValue=np.int16(-1))
    ds.to_netcdf(path, engine="netcdf4")
    expected = xr.open_dataset(path, engine="h5netcdf").load()
    got = xr.open_dataset(h5lens.open_store(h5lens.index(path)), engine="zarr").load()
    assert expected["p"].dtype == np.float32 and got["p"].dtype == np.float64
    xr.testing.assert_identical(got.drop_vars("p"), expected.drop_vars("p"))
    assert got["p"].dims == expected["p"].dims and got["p"].attrs == expected["p"].attrs
    for name in ("scale_factor", "add_offset", "_FillValue"):
        assert got["p"].encoding[name] == expected["p"].encoding[name]
    np.testing.assert_allclose(got["p"].values, expected["p"].values, rtol=1e-6)
    zarr_round_trip = xr.open_zarr(_to_zarr(expected, tmp_path / "rt.zarr")).load()
    assert zarr_round_trip["p"].dtype == np.float64  # xarray's own zarr writer: the same


@pytest.mark.parametrize("form", ["json", "compact", "object"])
def test_float32_packing_through_the_h5lens_engine_is_h5netcdfs(form, tmp_path):
    """The manifest records attributes' HDF5 types (float32 scale_factor / add_offset, int16
    _FillValue and valid_range, a float32 global attribute), in both forms: engine="h5lens"
    decodes the packed variable to float32 and the same numbers as h5netcdf, and
    navigation gives each attribute h5py's type."""
    import h5py
    import netCDF4

    path = tmp_path / "packed.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("t", 6)
        v = f.createVariable("temp", "i2", ("t",), fill_value=np.int16(-32767))
        v.scale_factor, v.add_offset, v.units = np.float32(0.01), np.float32(250.0), "K"
        v.valid_range = np.array([-30000, 30000], "i2")
        v.set_auto_maskandscale(False)
        v[:] = np.array([909, 1000, -32767, 0, 5, 12], "i2")
        f.version = np.float32(1.5)
    manifest = h5lens.index(path)
    opened: object = manifest
    if form != "object":
        opened = tmp_path / f"packed.{'json' if form == 'json' else 'h5lens'}"
        manifest.save(opened)
        assert h5lens.Manifest.load(opened).attribute_types == manifest.attribute_types
    expected = xr.open_dataset(path, engine="h5netcdf").load()
    got = xr.open_dataset(opened, engine="h5lens").load()
    assert expected["temp"].dtype == got["temp"].dtype == np.float32
    xr.testing.assert_identical(got, expected)
    np.testing.assert_array_equal(got["temp"].values, expected["temp"].values)  # the same numbers, exactly
    assert type(got.attrs["version"]) is type(expected.attrs["version"]) is np.float32
    node = h5lens.open(manifest)["temp"]
    with h5py.File(path) as f:
        for name in ("scale_factor", "add_offset", "_FillValue", "valid_range"):
            assert np.asarray(node.attrs[name]).dtype == f["temp"].attrs[name].dtype, name


def test_plain_hdf5_with_dimension_scales_keeps_every_attribute(tmp_path):
    """A file no netCDF library wrote is no netCDF file: every attribute (the scales'
    CLASS, NAME and REFERENCE_LIST, DIMENSION_LIST, one-element arrays) and every dataset is
    as h5py reads it; its arrays get dimension_names, as h5netcdf names the dimensions, so
    xarray opens it with the values h5netcdf gives."""
    path = tmp_path / "scales.h5"
    write_dimension_scales(path)
    manifest = h5lens.index(path)
    root = h5lens.open(manifest)
    with h5py.File(path) as f:
        objects: list[str] = []
        f.visit(objects.append)
        for name in ["", *objects]:
            node = root[name] if name else root
            want = f[name] if name else f
            assert sorted(node.attrs) == sorted(want.attrs), name
            for key, value in want.attrs.items():
                got = node.attrs[key]
                if key in ("DIMENSION_LIST", "REFERENCE_LIST"):
                    continue  # references: to the nodes below, checked by their paths
                if isinstance(value, bytes | np.bytes_):
                    value = value.decode()
                np.testing.assert_array_equal(np.asarray(got), np.asarray(value), err_msg=f"{name} {key}")
        assert [n.h5_path for row in root["data"].attrs["DIMENSION_LIST"] for n in row] == ["/x", "/y"]
    expected = xr.open_dataset(path, engine="h5netcdf", phony_dims="sort").load()
    got = xr.open_dataset(manifest, engine="h5lens").load()
    assert sorted(got.variables) == sorted(expected.variables)
    for name, variable in expected.variables.items():
        assert got[name].dims == variable.dims, name
        np.testing.assert_array_equal(got[name].values, variable.values, err_msg=name)
    assert got["data"].attrs["units"] == "m" and list(got["data"].attrs["scale"]) == [2.0]


def _to_zarr(ds: xr.Dataset, path: Path) -> Path:
    encoded = ds.copy()
    for v in encoded.variables.values():
        v.encoding = {
            k: v.encoding[k] for k in ("dtype", "scale_factor", "add_offset", "_FillValue") if k in v.encoding
        }
    encoded.to_zarr(path, zarr_format=3, consolidated=False)
    return path


# -- what the profile writes ----------------------------------------------------------------


def test_documents_hold_dimension_names_and_no_bookkeeping(manifests):
    manifest = manifests("netcdf4_python", 1000)
    hidden = {"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid", "_Netcdf4Coordinates"}
    for key, doc in manifest.nodes.items():
        attributes = doc.get("attributes", {})
        assert not hidden & set(attributes), key
        if doc["node_type"] == "array":
            assert len(doc["dimension_names"]) == len(doc["shape"]), key
            assert "_DTYPE" not in attributes, key
    # dimension-only datasets are gone; the non-coordinate variable has its netCDF name
    assert "lat" in manifest.nodes and "nchar" not in manifest.nodes and "nbnd" in manifest.nodes
    assert not any("_nc4_non_coord_" in key for key in manifest.nodes)
    assert manifest.nodes["temp"]["dimension_names"] == ["time", "lat", "lon"]
    assert manifest.nodes["obs/deep/level"]["dimension_names"] == ["lat"]
    assert manifest.nodes[""]["attributes"]["_NCProperties"].startswith("version=")
    assert manifest.nodes["short"]["shape"] == [6]


def test_enum_mapping_moves_to_the_group(manifests):
    manifest = manifests("user_types", 1000)
    assert "_ENUM" not in manifest.nodes["cloud"]["attributes"]
    assert manifest.nodes[""]["attributes"]["_nc_enums"] == {"cloud": {"clear": 0, "cumulus": 1, "missing": 255}}
    assert "_nc_enums" not in xr.open_dataset(h5lens.open_store(manifest), engine="zarr").attrs


def test_chunks_stay_references(manifests):
    """The profile rewrites documents, not data: temp's chunks are byte ranges of the file."""
    table = manifests("netcdf4_python", 0).chunks["temp"]
    assert (table.source >= 0).all() and not table.inline


def test_ragged_vlen_variable_reads_back_as_h5py_reads_it(tmp_path):
    """netCDF vlen of numbers (no zarr v3 data type; xarray's h5netcdf engine cannot decode
    one either): indexed as a ragged array, navigation gives h5py's arrays back."""
    path = tmp_path / "vlen.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("x", 2)
        ragged = f.createVLType(np.int32, "ragged_t")
        v = f.createVariable("r", ragged, ("x",))
        data = np.empty(2, object)
        data[0], data[1] = np.array([1, 2], "i4"), np.array([3], "i4")
        v[:] = data
    got = h5lens.open(h5lens.index(path))["r"][()]
    with h5py.File(path) as f:
        expected = f["r"][()]
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_plain_hdf5_is_not_touched(tmp_path):
    """No netCDF markers, no dimension scales: no profile, no dimension_names."""
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["a"] = np.arange(3)
        f["a"].attrs["CLASS_like"] = "x"
        f["b"] = np.ones((2, 2))
    manifest = h5lens.index(path)
    assert all("dimension_names" not in doc for doc in manifest.nodes.values())
    assert manifest.nodes["a"]["attributes"] == {"CLASS_like": "x", "_DTYPE": "int64"}


def test_fletcher32_before_shuffle_reads(tmp_path):
    """netCDF-C writes fletcher32 before shuffle: shuffle sees 8-byte elements plus a
    4-byte checksum, and keeps those 4 bytes as they are (h5lens.shuffle, not numcodecs')."""
    path = tmp_path / "fletcher.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("x", 100)
        v = f.createVariable("v", "f8", ("x",), fletcher32=True, zlib=True, shuffle=True, chunksizes=(10,))
        v[:] = np.arange(100.0)
    expected = xr.open_dataset(path, engine="h5netcdf").load()
    got = xr.open_dataset(h5lens.open_store(h5lens.index(path, inline_threshold=0)), engine="zarr").load()
    xr.testing.assert_identical(got, expected)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_manifests_validate(writer, manifests):
    """Sound by the validator, every chunk decoded (``deep``): references, inline chunks made
    by the profile (a padded variable's edge chunk), documents; the ``_DTYPE`` the profile
    leaves out (xarray would show it as an attribute) is no finding on its arrays."""
    for threshold in THRESHOLDS:
        problems = h5lens.validate(manifests(writer, threshold), deep=True)
        assert [str(p) for p in problems] == []


def test_fill_values_through_navigation_as_h5py_reads_them(tmp_path):
    """The netCDF profile writes a float ``_FillValue`` in xarray's zarr form (base64);
    navigation gives it back as the number h5py reads, of the variable's type."""
    import netCDF4

    path = tmp_path / "fill.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("x", 3)
        for name, kind, fill in (("f4", "f4", -999.0), ("f8", "f8", 1e30), ("i2", "i2", -1)):
            nc.createVariable(name, kind, ("x",), fill_value=fill)[:] = [1, 2, 3]
    root = h5lens.open(h5lens.index(path))
    with h5py.File(path) as f:
        for name in ("f4", "f8", "i2"):
            got, want = root[name].attrs["_FillValue"], f[name].attrs["_FillValue"]
            assert np.asarray(got).dtype == want.dtype and np.asarray(got).reshape(-1).tolist() == want.tolist(), name
