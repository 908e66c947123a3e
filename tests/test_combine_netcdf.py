"""h5lens.combine(dim=...): netCDF-4 files along a dimension, equal to xarray's
open_mfdataset of the files with the h5netcdf engine; files packed differently refused by
name, never read with another file's encoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import h5lens
from h5lens.errors import InvalidOptionError

DAYS = (5, 3, 7)
UNITS = "days since 2000-01-01"


def _write(path: Path, start: int, n: int, *, scale: float = 0.01, units: str = UNITS, lat_shift: float = 0) -> Path:
    rng = np.random.default_rng(start)
    time = pd.date_range("2000-01-01", periods=60)[start : start + n]
    ds = xr.Dataset(
        {
            "tas": (("time", "lat", "lon"), (rng.random((n, 4, 6)) * 30 + 270).astype("f4")),
            "pr": (("time", "lat", "lon"), rng.random((n, 4, 6)).astype("f8")),
        },
        coords={"time": time, "lat": np.linspace(-10, 10, 4) + lat_shift, "lon": np.linspace(0, 50, 6)},
    )
    ds["tas"].attrs["long_name"] = "temperature"
    encoding = {
        "tas": {"dtype": "int16", "scale_factor": scale, "add_offset": 273.15, "_FillValue": -9999, "zlib": True,
                "chunksizes": (2, 4, 6)},
        "pr": {"zlib": True, "chunksizes": (1, 4, 6)},
        "time": {"units": units, "calendar": "proleptic_gregorian"},
    }  # fmt: skip
    ds.to_netcdf(path, engine="h5netcdf", encoding=encoding)
    return path


@pytest.fixture
def daily(tmp_path) -> list[Path]:
    starts = np.cumsum([0, *DAYS[:-1]])
    return [_write(tmp_path / f"d{i}.nc", int(s), n) for i, (s, n) in enumerate(zip(starts, DAYS, strict=True))]


def _expected(paths: list[Path]) -> xr.Dataset:
    return xr.open_mfdataset(
        paths, engine="h5netcdf", combine="nested", concat_dim="time", data_vars="minimal", coords="minimal",
        compat="override",
    ).load()  # fmt: skip


def test_files_along_time_equal_open_mfdataset(daily, tmp_path):
    combined = h5lens.combine([h5lens.index(p, inline_threshold=0) for p in daily], dim="time")
    target = tmp_path / "year.json"
    combined.to_json(target)
    expected = _expected(daily)
    got = xr.open_dataset(target, engine="h5lens").load()
    xr.testing.assert_allclose(got, expected)
    np.testing.assert_array_equal(got["tas"].values, expected["tas"].values)
    np.testing.assert_array_equal(got["time"].values, expected["time"].values)
    # a grid cell over the whole time axis, and zarr's own reader with the flag
    np.testing.assert_array_equal(xr.open_dataset(target, engine="h5lens")["tas"][:, 2, 3].values, expected["tas"][:, 2, 3].values)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        plain = xr.open_dataset(h5lens.open_store(combined), engine="zarr", consolidated=False).load()
    xr.testing.assert_allclose(plain, expected)


def test_files_packed_differently_are_refused_by_name(daily, tmp_path):
    odd = _write(tmp_path / "odd.nc", 30, 2, scale=0.02)
    manifests = [h5lens.index(p) for p in [*daily, odd]]
    with pytest.raises(InvalidOptionError, match="'scale_factor' differs.*odd.nc"):
        h5lens.combine(manifests, dim="time")


def test_time_units_that_differ_are_refused(daily, tmp_path):
    odd = _write(tmp_path / "late.nc", 30, 2, units="days since 2000-01-15")
    with pytest.raises(InvalidOptionError, match="'units' differs"):
        h5lens.combine([h5lens.index(p) for p in [*daily, odd]], dim="time")


def test_coordinates_that_differ_are_refused(daily, tmp_path):
    moved = _write(tmp_path / "moved.nc", 30, 2, lat_shift=1)
    with pytest.raises(InvalidOptionError, match="/lat: its values differ"):
        h5lens.combine([h5lens.index(p) for p in [*daily, moved]], dim="time")


def test_append_to_a_combined_manifest(daily, tmp_path):
    # the combined manifest's grid is rectilinear (5, 3 and 7 days in chunks of 2): a file after it
    # has its last chunk cut short, on the grid's other axes as their edges give them
    first = h5lens.combine([h5lens.index(p) for p in daily], dim="time")
    late = _write(tmp_path / "late.nc", 15, 3)
    appended = h5lens.combine([h5lens.index(late)], dim="time", append_to=first)
    target = tmp_path / "appended.json"
    appended.to_json(target)
    xr.testing.assert_identical(xr.open_dataset(target, engine="h5lens").load(), _expected([*daily, late]))


@pytest.mark.parametrize("destination", ["year.h5lens", "icechunk"])
def test_the_command_appends_to_compact_and_icechunk(daily, tmp_path, destination):
    """`combine --dim time --append`: a day added to a compact manifest and to an Icechunk
    repository (a new commit), read by h5lens's xarray engine as open_mfdataset reads the files."""
    if destination == "icechunk":
        pytest.importorskip("icechunk")
    from cli_runner import h5lens as run

    out = f"icechunk://{tmp_path / 'repo'}" if destination == "icechunk" else str(tmp_path / destination)
    assert run("combine", *daily, "--dim", "time", "-o", out).status == 0
    late = _write(tmp_path / "late.nc", 15, 3)
    result = run("combine", late, "--dim", "time", "-o", out, "--append")
    assert result.status == 0, result.stderr
    xr.testing.assert_identical(xr.open_dataset(out, engine="h5lens").load(), _expected([*daily, late]))
