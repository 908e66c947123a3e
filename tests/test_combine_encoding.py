"""h5lens.combine(dim=..., encoding="per-file"): netCDF files packed, filled or dated
differently, each file's rows decoded with its own encoding by h5lens's xarray engine, equal
to xr.open_mfdataset of the files with the h5netcdf engine (which decodes each file before
concatenating); zarr's readers and h5lens.open refused, never shown stored values under one
file's attributes."""

from __future__ import annotations

from pathlib import Path

import h5netcdf
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import h5lens
from h5lens.errors import InvalidOptionError, UnsupportedFeatureError


def _write(
    path: Path, start: int, n: int, *, scale: float = 0.01, offset: float = 273.15, fill: int = -9999,
    time_units: str = "days since 2000-01-01", chunk: int = 2, **attrs: object,
) -> Path:  # fmt: skip
    rng = np.random.default_rng(start)
    tas = (rng.random((n, 4, 6)) * 30 + 270).astype("f4")
    tas[0, 0, :2] = np.nan  # missing values, written as the file's _FillValue
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), tas, attrs), "pr": (("time", "lat", "lon"), rng.random((n, 4, 6)))},
        coords={"time": pd.date_range("2000-01-01", periods=60)[start : start + n], "lat": np.linspace(-10, 10, 4),
                "lon": np.linspace(0, 50, 6)},
    )  # fmt: skip
    encoding = {
        "tas": {"dtype": "int16", "scale_factor": scale, "add_offset": offset, "_FillValue": fill, "zlib": True,
                "chunksizes": (chunk, 4, 6)},
        "pr": {"zlib": True, "chunksizes": (1, 4, 6)},
        "time": {"units": time_units, "calendar": "proleptic_gregorian"},
    }  # fmt: skip
    ds.to_netcdf(path, engine="h5netcdf", encoding=encoding)
    return path


@pytest.fixture
def packed(tmp_path) -> list[Path]:
    """Three daily files of 5, 3 and 7 days: the second packed with another scale, offset and
    fill value, the third's times counted from another day."""
    return [
        _write(tmp_path / "a.nc", 0, 5),
        _write(tmp_path / "b.nc", 5, 3, scale=0.02, offset=250.0, fill=-32767),
        _write(tmp_path / "c.nc", 8, 7, time_units="hours since 2000-01-05 06:00"),
    ]


def _expected(paths: list[Path]) -> xr.Dataset:
    return xr.open_mfdataset(paths, engine="h5netcdf", combine="nested", concat_dim="time", data_vars="minimal",
                             coords="minimal", compat="override").load()  # fmt: skip


def _combined(paths: list[Path], tmp_path: Path, **options: object) -> Path:
    target = tmp_path / "combined.json"
    h5lens.combine(
        [h5lens.index(p, inline_threshold=0) for p in paths], dim="time", encoding="per-file", **options
    ).to_json(target)
    return target


def test_each_file_decoded_with_its_own_encoding(packed, tmp_path):
    target = _combined(packed, tmp_path)
    expected = _expected(packed)
    # the files do differ: read with the first file's packing, the second's values would be wrong
    assert not np.allclose(xr.open_dataset(packed[1], engine="h5netcdf", mask_and_scale=False)["tas"].values * 0.01 + 273.15,
                           expected["tas"].values[5:8], equal_nan=True)  # fmt: skip
    got = xr.open_dataset(target, engine="h5lens").load()
    xr.testing.assert_identical(got, expected)
    for name in ("tas", "time", "pr"):
        np.testing.assert_array_equal(got[name].values, expected[name].values)
    assert got["tas"].attrs == expected["tas"].attrs and got["tas"].dtype == expected["tas"].dtype
    assert np.isnan(got["tas"].values[[0, 5, 8], 0, :2]).all()  # each file's fill value masked
    # selections across the files' boundaries: a grid cell over time, rows, single rows, a list of rows
    lazy = xr.open_dataset(target, engine="h5lens")
    np.testing.assert_array_equal(lazy["tas"][:, 2, 3].values, expected["tas"][:, 2, 3].values)
    np.testing.assert_array_equal(lazy["tas"][4:9].values, expected["tas"][4:9].values)
    np.testing.assert_array_equal(lazy["tas"][6].values, expected["tas"][6].values)
    np.testing.assert_array_equal(lazy["tas"][[14, 0, 6, 7]].values, expected["tas"][[14, 0, 6, 7]].values)
    np.testing.assert_array_equal(lazy["tas"][::-3].values, expected["tas"][::-3].values)
    np.testing.assert_array_equal(lazy["time"][9:12].values, expected["time"][9:12].values)
    # through dask, a block per stored chunk
    chunked = xr.open_dataset(target, engine="h5lens", chunks={})
    np.testing.assert_array_equal(
        chunked["tas"].sel(lat=chunked.lat[1]).values, expected["tas"].sel(lat=expected.lat[1]).values
    )
    # as a DataTree too
    tree = xr.open_datatree(target, engine="h5lens")
    np.testing.assert_array_equal(tree["tas"].values, expected["tas"].values)


def test_files_encoded_alike_are_combined_as_before(tmp_path):
    paths = [_write(tmp_path / "a.nc", 0, 5), _write(tmp_path / "b.nc", 5, 3)]
    combined = h5lens.combine([h5lens.index(p) for p in paths], dim="time", encoding="per-file")
    assert not any(c["name"] == "h5lens.per_file_encoding" for c in combined.nodes["tas"]["codecs"])
    with zarr.config.set({"array.rectilinear_chunks": True}):
        plain = xr.open_zarr(h5lens.open_store(combined), consolidated=False).load()
    xr.testing.assert_allclose(plain, _expected(paths))


def test_by_default_files_encoded_differently_are_refused(packed):
    with pytest.raises(InvalidOptionError, match=r"'scale_factor' differs between .*a\.nc.*b\.nc.*encoding='per-file'"):
        h5lens.combine([h5lens.index(p) for p in packed], dim="time")


def test_zarr_and_navigation_refuse_the_values(packed, tmp_path):
    target = _combined(packed, tmp_path)
    store = h5lens.open_store(target)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        # xarray reads a dimension coordinate when it opens the dataset
        with pytest.raises(
            UnsupportedFeatureError, match=r"/time: its files were encoded differently.*engine='h5lens'"
        ):
            xr.open_zarr(store, consolidated=False)
        opened = xr.open_zarr(store, consolidated=False, drop_variables=["time"])  # metadata and attributes open
        assert opened["tas"].shape == (15, 4, 6)
        with pytest.raises(UnsupportedFeatureError, match=r"/tas: its files were encoded differently.*engine='h5lens'"):
            opened["tas"].load()
        with pytest.raises(UnsupportedFeatureError, match="/time: its files were encoded differently"):
            zarr.open_array(store, path="time", mode="r")[...]
    # the variables encoded alike read as ever
    np.testing.assert_array_equal(zarr.open_array(store, path="pr", mode="r")[...], _expected(packed)["pr"].values)
    with pytest.raises(UnsupportedFeatureError, match="/tas: its files were encoded differently"):
        h5lens.open(target)["tas"][0:2]


def test_decoding_options_that_leave_a_difference_are_refused(packed, tmp_path):
    target = _combined(packed, tmp_path)
    with pytest.raises(
        UnsupportedFeatureError,
        match=r"/tas: attribute '(scale_factor|add_offset|_FillValue)' differs between .*a\.nc and .*b\.nc",
    ):
        xr.open_dataset(target, engine="h5lens", mask_and_scale=False)
    with pytest.raises(UnsupportedFeatureError, match=r"/time: attribute 'units' differs"):
        xr.open_dataset(target, engine="h5lens", decode_times=False)
    # per variable, as xarray takes them: time left encoded where its units agree
    alike = [_write(tmp_path / "x.nc", 0, 5), _write(tmp_path / "y.nc", 5, 3, scale=0.02)]
    got = xr.open_dataset(_combined(alike, tmp_path), engine="h5lens", decode_times=False).load()
    expected = xr.open_mfdataset(
        alike, engine="h5netcdf", combine="nested", concat_dim="time", decode_times=False
    ).load()
    np.testing.assert_array_equal(got["tas"].values, expected["tas"].values)
    np.testing.assert_array_equal(got["time"].values, expected["time"].values)


def test_differences_no_decoder_applies_are_refused(tmp_path):
    paths = [_write(tmp_path / "a.nc", 0, 5, valid_max=320), _write(tmp_path / "b.nc", 5, 3, valid_max=330)]
    with pytest.raises(InvalidOptionError, match="'valid_max' differs.*per-file encoding applies"):
        h5lens.combine([h5lens.index(p) for p in paths], dim="time", encoding="per-file")
    paths = [_write(tmp_path / "c.nc", 0, 5, units="K"), _write(tmp_path / "d.nc", 5, 3, units="degC")]
    with pytest.raises(InvalidOptionError, match="'units' differs.*not 'units'"):
        h5lens.combine([h5lens.index(p) for p in paths], dim="time", encoding="per-file")


def _sparse(path: Path, start: int, fill: float, *, written: int) -> Path:
    """A netCDF file by h5netcdf whose variable has 4 chunks of 2 days, only ``written`` rows stored."""
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"time": 8, "x": 3}
        time = f.create_variable("time", ("time",), "i8")
        time[:] = np.arange(start, start + 8)
        time.attrs["units"] = "days since 2000-01-01"
        v = f.create_variable("v", ("time", "x"), "f4", chunks=(2, 3), fillvalue=fill)
        v[:written] = np.arange(written * 3, dtype="f4").reshape(written, 3) + start
        v[0, 0] = fill  # a missing value, masked by the file's own _FillValue
    return path


def test_fill_values_that_differ(tmp_path):
    whole = [_sparse(tmp_path / "a.nc", 0, -1.0, written=8), _sparse(tmp_path / "b.nc", 8, -2.0, written=8)]
    target = _combined(whole, tmp_path)
    got = xr.open_dataset(target, engine="h5lens").load()
    xr.testing.assert_identical(got, _expected(whole))
    assert np.isnan(got["v"].values[[0, 8], 0]).all()
    # a chunk never written would read as the first file's fill value: refused
    holes = [whole[0], _sparse(tmp_path / "c.nc", 8, -2.0, written=3)]
    with pytest.raises(InvalidOptionError, match=r"c\.nc has chunks never written, and its fill value differs"):
        h5lens.combine([h5lens.index(p) for p in holes], dim="time", encoding="per-file")


def test_append_keeps_each_files_encoding(packed, tmp_path):
    first = h5lens.combine([h5lens.index(p) for p in packed[:2]], dim="time", encoding="per-file")
    late = _write(tmp_path / "d.nc", 15, 4, scale=0.005, time_units="days since 2000-01-16")
    appended = h5lens.combine(
        [h5lens.index(p) for p in [packed[2], late]], dim="time", encoding="per-file", append_to=first
    )
    target = tmp_path / "appended.json"
    appended.to_json(target)
    xr.testing.assert_identical(xr.open_dataset(target, engine="h5lens").load(), _expected([*packed, late]))


def test_the_command(packed, tmp_path):
    from cli_runner import h5lens as run

    manifests = []
    for path in packed:
        h5lens.index(path).to_json(path.with_suffix(".nc.json"))
        manifests.append(path.with_suffix(".nc.json"))
    out = tmp_path / "year.h5lens"
    refused = run("combine", *manifests, "-o", out, "--dim", "time")
    assert "'scale_factor' differs" in refused.error_line() and "--encoding per-file" in refused.error_line()
    result = run("combine", *manifests, "-o", out, "--dim", "time", "--encoding", "per-file")
    assert result.status == 0, result.stderr
    xr.testing.assert_identical(xr.open_dataset(out, engine="h5lens").load(), _expected(packed))


def test_icechunk_destination(packed, tmp_path):
    icechunk = pytest.importorskip("icechunk")
    from h5lens import icechunk as hic

    combined = h5lens.combine([h5lens.index(p) for p in packed], dim="time", encoding="per-file")
    hic.to_icechunk(combined, hic.open_repository(str(tmp_path / "repo"), manifest=combined))
    repo = f"icechunk://{tmp_path / 'repo'}"
    xr.testing.assert_identical(xr.open_dataset(repo, engine="h5lens").load(), _expected(packed))
    # Icechunk's own store, read by zarr: refused
    reopened = icechunk.Repository.open(
        icechunk.local_filesystem_storage(str(tmp_path / "repo")),
        authorize_virtual_chunk_access=hic.virtual_chunk_credentials(combined, None),
    )
    with zarr.config.set({"array.rectilinear_chunks": True}):
        array = zarr.open_array(reopened.readonly_session("main").store, path="tas", mode="r")
        with pytest.raises(UnsupportedFeatureError, match="/tas: its files were encoded differently"):
            array[...]


def test_validate_deep_decodes_the_stored_values(packed, tmp_path):
    target = _combined(packed, tmp_path)
    problems = h5lens.validate(target, deep=True)
    assert not [p for p in problems if "encoded differently" in str(p)], problems
