"""Icechunk as a destination: ``h5lens.icechunk.to_icechunk`` and ``h5lens index SRC -o icechunk://PATH``.

Oracles: what h5py reads from the file (every dataset, group attributes); for an h5ad,
``anndata.read_h5ad``; for a netCDF-4 file, ``xr.open_dataset(path, engine="h5netcdf")``
and ``xr.open_datatree``; for NWB, pynwb's ``NWBHDF5IO``. The repository is reopened with
Icechunk's own API and read with zarr, xarray, anndata and hdmf-zarr, never with h5lens.
Sources are local files and objects on moto's S3 server (the ``s3`` fixture).
"""

from __future__ import annotations

import datetime
import os
import sys
import uuid
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

icechunk = pytest.importorskip("icechunk", reason="icechunk is not installed (pip install 'h5lens[icechunk]')")

import zarr  # noqa: E402

import h5lens  # noqa: E402
from cli_runner import h5lens as run_cli  # noqa: E402
from h5lens import icechunk as hic  # noqa: E402
from h5lens.errors import (  # noqa: E402
    H5LensError,
    InvalidOptionError,
    SourceNotFoundError,
    StaleSourceError,
    StorageError,
    UnsupportedFeatureError,
)
from h5lens.manifest.model import MISSING  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    icechunk.set_logs_filter("error")  # its warnings about local repositories, not under test here


# -- files ---------------------------------------------------------------------------------------


def _compact(parent: h5py.Group, name: str, data: np.ndarray) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(data.shape)
    dsid = h5py.h5d.create(parent.id, name.encode(), h5py.h5t.py_create(data.dtype), space, dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))


def write_features(path: Path) -> Path:
    """Chunked gzip+shuffle, contiguous, compact, small (inline), vlen strings, fixed-length
    bytes, partly written chunks (absent ones read as the fill value), a scalar, nested
    groups, attributes of several types."""
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "features"
        f.attrs["version"] = np.int32(3)
        f.create_dataset(
            "gzip", data=rng.integers(0, 1000, (300, 70), dtype="<i4"), chunks=(64, 32), compression="gzip", shuffle=True
        )
        f.create_dataset("contiguous", data=rng.normal(size=(500, 12)))
        sparse = f.create_dataset("sparse", shape=(40, 40), dtype="f4", chunks=(10, 10), fillvalue=-1.5)
        sparse[0:10, 0:20] = 7.0
        sparse[30:40, 30:40] = rng.normal(size=(10, 10))
        g = f.create_group("a/b")
        g.attrs["units"] = "m/s"
        g.attrs["scale"] = np.array([0.5, 2.0])
        g.attrs["flag"] = np.bool_(True)
        _compact(g, "compact", np.arange(30, dtype=">i2"))
        g["small"] = np.arange(6, dtype="u1")
        g["names"] = np.array(["alpha", "βeta", "", "gamma delta"], dtype=h5py.string_dtype())
        g["codes"] = np.array([b"ab", b"cde", b"f"], dtype="S3")
        g["scalar"] = 2.5
        big = g.create_dataset("big_strings", data=np.array([f"s{i}" * (i % 5) for i in range(2000)], dtype=object),
                               dtype=h5py.string_dtype(), chunks=(500,))
        big.attrs["note"] = "vlen strings in chunks"
    return path


def _values(dataset: h5py.Dataset) -> np.ndarray:
    if h5py.check_string_dtype(dataset.dtype) is not None and dataset.dtype.kind == "O":
        return np.asarray(dataset.asstr()[()], dtype=object)
    return dataset[()]


def _attr(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def assert_reads_like_h5py(group: zarr.Group, path: Path) -> int:
    """Every dataset of the file read through ``group`` equals h5py's reading; group
    attributes too. Returns the number of datasets compared."""
    with h5py.File(path) as f:
        # names first, reads after: zarr reading inside h5py's visititems (which holds h5py's
        # lock) deadlocks when a zarr thread happens to free an h5py object
        names: list[str] = []
        f.visit(names.append)
        compared = 0
        for name in ["", *names]:
            obj = f[name] if name else f
            if isinstance(obj, h5py.Dataset):
                expected = _values(obj)
                got = np.asarray(group[name][()])
                if expected.dtype.kind == "O":
                    assert [str(v) for v in got.ravel()] == list(expected.ravel()), name
                else:
                    np.testing.assert_array_equal(got, expected, err_msg=name)
                    native = got.dtype.newbyteorder("=")
                    assert native == expected.dtype.newbyteorder("=") or expected.dtype.kind == "S", name
                compared += 1
            else:
                attrs = dict((group[name] if name else group).attrs)
                for key, value in obj.attrs.items():
                    assert attrs[key] == _attr(value), (name, key)
    return compared


def reopen(location: Path | str, manifest, storage=None, options=None) -> zarr.Group:
    """The repository as a reader opens it: Icechunk's own API, authorising the containers."""
    storage = storage or icechunk.local_filesystem_storage(str(location))
    repo = icechunk.Repository.open(
        storage, authorize_virtual_chunk_access=hic.virtual_chunk_credentials(manifest, options)
    )
    return zarr.open_group(repo.readonly_session("main").store, mode="r")


def commit(source: Path, repo_path: Path, **index_options):
    manifest = h5lens.index(source, **index_options)
    repo = hic.open_repository(str(repo_path), manifest=manifest)
    return manifest, repo, hic.to_icechunk(manifest, repo)


def chunk_kinds(repo, manifest) -> dict[str, set[str]]:
    """What Icechunk stores for each present chunk, by array: virtual or its own."""
    session = repo.readonly_session("main")
    kinds: dict[str, set[str]] = {}
    for path, table in manifest.chunks.items():
        for flat in np.flatnonzero(table.source.reshape(-1) != MISSING).tolist():
            index = [int(i) for i in np.unravel_index(flat, table.grid_shape)] if table.grid_shape else []
            kind = session.chunk_type("/" + path, index)
            kinds.setdefault(path, set()).add(str(kind).rsplit(".", 1)[-1])
    return kinds


# -- HDF5 features ------------------------------------------------------------------------------


def test_every_dataset_reads_back_like_h5py(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest, repo, snapshot = commit(source, tmp_path / "repo")
    group = reopen(tmp_path / "repo", manifest)
    with h5py.File(source) as f:
        n_datasets = len(_datasets(f))
    assert assert_reads_like_h5py(group, source) == n_datasets == 9

    # references are virtual, pointing at the file; inline data are Icechunk's own chunks
    kinds = chunk_kinds(repo, manifest)
    for path, table in manifest.chunks.items():
        referenced, inline = bool((table.source >= 0).any()), bool(table.inline)
        assert ("virtual" in kinds.get(path, set())) == referenced, path
        assert bool(kinds.get(path, set()) - {"virtual"}) == inline, path
    assert kinds["gzip"] == {"virtual"} and kinds["contiguous"] == {"virtual"}
    assert "virtual" not in kinds["a/b/names"]
    locations = set(repo.readonly_session("main").all_virtual_chunk_locations())
    assert locations == {source.resolve().as_uri()}
    # the absent chunks of "sparse" are absent in Icechunk too
    table = manifest.chunks["sparse"]
    assert (table.source == -1).any()
    assert repo.lookup_snapshot(snapshot).message.startswith("h5lens: references to " + source.resolve().as_uri())


def _datasets(f: h5py.File) -> list[str]:
    found: list[str] = []
    f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
    return found


def test_inline_threshold_zero_references_what_it_can(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest, repo, _ = commit(source, tmp_path / "repo", inline_threshold=0)
    assert assert_reads_like_h5py(reopen(tmp_path / "repo", manifest), source) == 9
    assert "virtual" in chunk_kinds(repo, manifest)["a/b/small"]


def test_awkward_file_names_are_percent_encoded(tmp_path):
    directory = tmp_path / "dir with space"
    directory.mkdir()
    source = write_features(directory / "a#b%20c?.h5")
    manifest, _, _ = commit(source, tmp_path / "repo")
    assert assert_reads_like_h5py(reopen(tmp_path / "repo", manifest), source) == 9


# -- AnnData, netCDF-4, NWB ------------------------------------------------------------------------


def test_h5ad_reads_back_with_anndata(tmp_path):
    ad = pytest.importorskip("anndata")
    import pandas as pd
    import scipy.sparse as sp
    from anndata.tests.helpers import assert_equal

    rng = np.random.default_rng(0)
    n_obs, n_var = 400, 30
    adata = ad.AnnData(
        X=sp.random(n_obs, n_var, density=0.2, format="csr", random_state=0, dtype=np.float32),
        obs=pd.DataFrame(
            {"cell_type": pd.Categorical(rng.choice(["T", "B", "NK"], n_obs)), "score": rng.normal(size=n_obs)},
            index=[f"cell{i}" for i in range(n_obs)],
        ),
        var=pd.DataFrame({"gene_name": [f"g{i}" for i in range(n_var)]}, index=[f"gene{i}" for i in range(n_var)]),
    )
    adata.obsm["X_pca"] = rng.standard_normal((n_obs, 5)).astype(np.float32)
    adata.layers["counts"] = rng.integers(0, 20, (n_obs, n_var)).astype(np.int32)
    adata.uns["params"] = {"method": "leiden", "resolution": 0.5, "seeds": np.arange(3)}
    path = tmp_path / "atlas.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")
    manifest, _, _ = commit(path, tmp_path / "repo")
    got = ad.read_zarr(reopen(tmp_path / "repo", manifest))
    assert_equal(got, ad.read_h5ad(path))


def _netcdf(path: Path) -> Path:
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.title = "ocean"
        nc.createDimension("time", None)
        nc.createDimension("lat", 6)
        nc.createDimension("lon", 8)
        time = nc.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01"
        time.calendar = "noleap"
        time[:] = np.arange(5)
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat[:] = np.linspace(-50, 50, 6)
        sst = nc.createVariable("sst", "f4", ("time", "lat", "lon"), zlib=True, shuffle=True, chunksizes=(2, 3, 4),
                                fill_value=np.float32(-999))
        sst.units = "K"
        sst[:] = np.random.default_rng(2).normal(290, 3, (5, 6, 8)).astype("f4")
        sst[0, 0, 0] = np.ma.masked
        flag = nc.createVariable("flag", "i1", ("lat", "lon"), contiguous=True)
        flag[:] = np.arange(48).reshape(6, 8) % 3
        name = nc.createVariable("station", str, ("lat",))
        name[:] = np.array([f"st{i}" for i in range(6)], dtype=object)
        depth = nc.createVariable("depth", "f8", ())
        depth[...] = 12.5
        obs = nc.createGroup("obs")
        obs.createDimension("n", 50)
        value = obs.createVariable("value", "f8", ("n",), zlib=True, chunksizes=(10,))
        value.long_name = "observed"
        value[:] = np.arange(50) / 7
    return path


def test_netcdf_opens_in_xarray_like_h5netcdf(tmp_path):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("netCDF4")
    pytest.importorskip("h5netcdf")
    path = _netcdf(tmp_path / "ocean.nc")
    manifest, _, _ = commit(path, tmp_path / "repo")
    store = reopen(tmp_path / "repo", manifest).store

    expected = xr.open_dataset(path, engine="h5netcdf")
    got = xr.open_zarr(store, consolidated=False)
    xr.testing.assert_identical(got.load(), expected.load())
    got = xr.open_dataset(store, engine="zarr", consolidated=False)
    xr.testing.assert_identical(got.load(), expected.load())

    tree = xr.open_datatree(store, engine="zarr", consolidated=False)
    xr.testing.assert_identical(tree.load(), xr.open_datatree(path, engine="h5netcdf").load())


def test_nwb_reads_back_with_hdmf_zarr(tmp_path):
    pynwb = pytest.importorskip("pynwb")
    hdmf_zarr = pytest.importorskip("hdmf_zarr")
    from hdmf.backends.hdf5 import H5DataIO

    nwb = pynwb.NWBFile(
        session_description="icechunk session",
        identifier="ic-1",
        session_start_time=datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.UTC),
    )
    data = np.arange(6000, dtype=np.float32).reshape(1500, 4)
    nwb.add_acquisition(
        pynwb.TimeSeries(name="ts", data=H5DataIO(data, chunks=(100, 4), compression="gzip"), unit="mV", rate=30.0)
    )
    nwb.add_trial_column("label", "trial label")
    for i in range(3):
        nwb.add_trial(start_time=float(i), stop_time=i + 0.5, label=f"t{i}")
    path = tmp_path / "session.nwb"
    with pynwb.NWBHDF5IO(path, "w") as io:
        io.write(nwb)
    manifest, _, _ = commit(path, tmp_path / "repo")
    store = reopen(tmp_path / "repo", manifest).store
    with hdmf_zarr.NWBZarrIO(store, mode="r") as zio, pynwb.NWBHDF5IO(path, "r") as hio:
        got, expected = zio.read(), hio.read()
        assert got.identifier == expected.identifier and got.session_start_time == expected.session_start_time
        np.testing.assert_array_equal(got.acquisition["ts"].data[:], expected.acquisition["ts"].data[:])
        assert (got.acquisition["ts"].rate, got.acquisition["ts"].unit) == (
            expected.acquisition["ts"].rate,
            expected.acquisition["ts"].unit,
        )
        assert got.trials.to_dataframe().equals(expected.trials.to_dataframe())


def test_nan_attributes_are_refused_unless_written_as_strings(tmp_path):
    source = tmp_path / "nan.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("x", data=np.arange(500.0), chunks=(100,))
        f["x"].attrs["resolution"] = np.nan
    manifest = h5lens.index(source)
    repo = hic.open_repository(str(tmp_path / "repo"), manifest=manifest)
    before = repo.lookup_branch("main")
    with pytest.raises(UnsupportedFeatureError, match=r"^/x: the attribute 'resolution' holds NaN"):
        hic.to_icechunk(manifest, repo)
    assert repo.lookup_branch("main") == before
    proposal = h5lens.index(source, convention="proposal")
    hic.to_icechunk(proposal, repo)
    group = reopen(tmp_path / "repo", proposal)
    assert group["x"].attrs["resolution"] == "NaN"
    with h5py.File(source) as f:
        np.testing.assert_array_equal(group["x"][:], f["x"][:])


# -- S3 sources ---------------------------------------------------------------------------------


def _upload(s3, local: Path) -> str:
    key = f"bucket/{uuid.uuid4().hex}/{local.name}"
    s3.filesystem().put(str(local), key)
    return f"s3://{key}"


def test_s3_source_and_repository_on_moto(s3, tmp_path):
    local = write_features(tmp_path / "remote file.h5")
    url = _upload(s3, local)
    options = s3.storage_options()
    manifest = h5lens.index(url, storage_options=options)
    assert manifest.sources[0].etag
    location = f"s3://bucket/{uuid.uuid4().hex}/repo"
    hic.check_location(location, sources=[url], storage_options=options)
    repo = hic.open_repository(location, manifest=manifest, storage_options=options)
    snapshot = hic.to_icechunk(manifest, repo, storage_options=options)
    assert set(repo.config.virtual_chunk_containers) == {"s3://bucket/"}

    group = reopen(None, manifest, storage=repo.storage, options=options)
    assert assert_reads_like_h5py(group, local) == 9
    # a reader of the repository on S3 with h5lens's help: the same containers authorised
    again = hic.open_repository(location, manifest=manifest, storage_options=options, create=False)
    assert again.lookup_branch("main") == snapshot

    # the object replaced (same size, new content): Icechunk refuses its chunks by ETag
    with h5py.File(local, "r+") as f:
        f["gzip"][0, 0] += 1
    s3.filesystem().put(str(local), url.removeprefix("s3://"))
    group = reopen(None, manifest, storage=repo.storage, options=options)
    with pytest.raises(icechunk.IcechunkError, match="checksum"):
        group["gzip"][0:1, 0:1]
    with pytest.raises(StaleSourceError):
        hic.to_icechunk(manifest, repo, storage_options=options)


# -- freshness, repeated commits --------------------------------------------------------------------


def _modify(source: Path) -> None:
    """Change one value in place (same size) and move the mtime on by seconds, as a later
    write does: Icechunk compares modification times by the second."""
    stat = source.stat()
    with h5py.File(source, "r+") as f:
        f["gzip"][0, 0] = f["gzip"][0, 0] + 1
        f["contiguous"][0, 0] = 1e9
    os.utime(source, (stat.st_atime, stat.st_mtime + 5))


def test_a_source_modified_after_the_commit_is_refused_not_misread(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest, repo, _ = commit(source, tmp_path / "repo")
    group = reopen(tmp_path / "repo", manifest)
    with h5py.File(source) as f:
        original = f["contiguous"][:]
    np.testing.assert_array_equal(group["contiguous"][:], original)
    _modify(source)
    group = reopen(tmp_path / "repo", manifest)
    for name in ("gzip", "contiguous"):
        with pytest.raises(icechunk.IcechunkError, match="checksum"):
            group[name][...]
    # inline data do not depend on the file
    assert list(group["a/b/small"][:]) == list(range(6))
    # the old manifest is not committed again over the changed file
    with pytest.raises(StaleSourceError):
        hic.to_icechunk(manifest, repo)


def test_an_unchanged_manifest_commits_nothing(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest, repo, first = commit(source, tmp_path / "repo")
    history = [s.id for s in repo.ancestry(branch="main")]
    assert hic.to_icechunk(manifest, repo) == first
    assert hic.to_icechunk(h5lens.index(source), repo) == first  # indexed again, same file
    assert [s.id for s in repo.ancestry(branch="main")] == history
    info = repo.lookup_snapshot(first)
    recorded = info.metadata["h5lens"]["sources"]
    # the record names each source by URI and keeps what verifies it (size, mtime, fingerprint)
    assert recorded == [{**manifest.sources[0].to_dict(), "url": source.resolve().as_uri()}]
    assert recorded[0]["size"] == source.stat().st_size and recorded[0]["mtime"] == source.stat().st_mtime

    _modify(source)
    changed = h5lens.index(source)
    second = hic.to_icechunk(changed, repo)
    assert second != first
    assert [s.id for s in repo.ancestry(branch="main")] == [second, *history]
    assert assert_reads_like_h5py(reopen(tmp_path / "repo", changed), source) == 9


def test_a_commit_replaces_what_the_branch_held(tmp_path):
    first = write_features(tmp_path / "features.h5")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("gzip", data=np.arange(1000.0).reshape(100, 10), chunks=(10, 10), compression="gzip")
        f["only_here"] = np.arange(3)
    commit(first, tmp_path / "repo")
    manifest, _, _ = commit(other, tmp_path / "repo")
    group = reopen(tmp_path / "repo", manifest)
    assert sorted(group.keys()) == ["gzip", "only_here"]
    assert assert_reads_like_h5py(group, other) == 2


def test_a_writable_session_is_committed(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest = h5lens.index(source)
    repo = hic.open_repository(str(tmp_path / "repo"), manifest=manifest)
    repo.create_branch("dev", repo.lookup_branch("main"))
    assert h5lens.to_icechunk is hic.to_icechunk  # the top-level name
    snapshot = hic.to_icechunk(manifest, repo.writable_session("dev"), message="from a session")
    assert repo.lookup_branch("dev") == snapshot and repo.lookup_snapshot(snapshot).message == "from a session"
    with pytest.raises(InvalidOptionError, match="writable"):
        hic.to_icechunk(manifest, repo.readonly_session("dev"))
    with pytest.raises(InvalidOptionError, match="no such branch"):
        hic.to_icechunk(manifest, repo, branch="nope")
    with pytest.raises(InvalidOptionError, match="Repository or a writable"):
        hic.to_icechunk(manifest, str(tmp_path / "repo"))  # type: ignore[arg-type]


# -- containers and their authorisation --------------------------------------------------------------


def test_a_repository_without_the_container_is_an_h5lens_error(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest = h5lens.index(source)
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    before = repo.lookup_branch("main")
    with pytest.raises(InvalidOptionError, match="declares no virtual chunk container") as caught:
        hic.to_icechunk(manifest, repo)
    assert str(caught.value).startswith(source.resolve().as_uri()) and "\n" not in str(caught.value)
    assert repo.lookup_branch("main") == before


def test_a_reader_must_authorise_the_container(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest, _, _ = commit(source, tmp_path / "repo")
    plain = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    group = zarr.open_group(plain.readonly_session("main").store, mode="r")
    with pytest.raises(icechunk.IcechunkError, match="authorize"):
        group["gzip"][...]
    assert list(group["a/b/small"][:]) == list(range(6))  # Icechunk's own chunks need no authorisation
    credentials = hic.virtual_chunk_credentials(manifest)
    assert list(credentials) == [source.parent.resolve().as_uri() + "/"]
    with h5py.File(source) as f:
        np.testing.assert_array_equal(reopen(tmp_path / "repo", manifest)["gzip"][...], f["gzip"][...])
    # h5lens's own opening, for reading, authorises the same container
    again = hic.open_repository(str(tmp_path / "repo"), manifest=manifest, create=False)
    with h5py.File(source) as f:
        got = zarr.open_group(again.readonly_session("main").store, mode="r")["gzip"][...]
        np.testing.assert_array_equal(got, f["gzip"][...])


# -- bad destinations ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["icechunk://", "icechunk://  ", "repo", "icechunk://gs://bucket/repo", "icechunk://s3://"])
def test_bad_destination_text(text):
    with pytest.raises(InvalidOptionError) as caught:
        hic.parse_destination(text)
    assert "\n" not in str(caught.value) and text.strip() in str(caught.value)


def test_bad_locations_are_refused_before_a_scan(tmp_path, s3):
    source = write_features(tmp_path / "features.h5")
    with pytest.raises(InvalidOptionError, match="this is the source"):
        hic.check_location(str(source), sources=[str(source)])
    with pytest.raises(InvalidOptionError, match="a file, not an Icechunk repository"):
        hic.check_location(str(source))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(InvalidOptionError, match="neither empty nor an Icechunk repository"):
        hic.check_location(str(tmp_path / "busy"))
    with pytest.raises(StorageError, match="does not exist"):
        hic.check_location(str(tmp_path / "no" / "repo"))
    with pytest.raises(StorageError, match="the bucket 'nobucket' does not exist"):
        hic.check_location("s3://nobucket/repo", storage_options=s3.storage_options())
    with pytest.raises(SourceNotFoundError, match="no Icechunk repository there"):
        hic.open_repository(str(tmp_path / "empty"), create=False)
    hic.check_location(str(tmp_path / "new"))  # a new directory: fine
    commit(source, tmp_path / "existing")
    hic.check_location(str(tmp_path / "existing"))  # an Icechunk repository: fine


def test_unreadable_repository_location_is_an_h5lens_error(tmp_path, s3):
    options = {**s3.storage_options(), "key": "wrong", "secret": "wrong"}
    with pytest.raises(H5LensError):
        hic.open_repository("s3://nobucket-at-all/repo", storage_options=options)


def test_missing_icechunk_is_an_h5lens_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "icechunk", None)
    with pytest.raises(InvalidOptionError, match=r"pip install 'h5lens\[icechunk\]'"):
        hic.open_repository("anywhere")


def test_unsupported_source_scheme_is_named(tmp_path):
    source = write_features(tmp_path / "features.h5")
    manifest = h5lens.index(source, url="gs://bucket/features.h5")
    with pytest.raises(InvalidOptionError, match=r"^gs://bucket/features.h5: h5lens writes Icechunk references"):
        hic.virtual_chunk_containers(manifest)


# -- the command line ------------------------------------------------------------------------------


def h5lens_cli(*args, env=None):
    return run_cli(*args, env=env)


def one_line_error(result) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("h5lens: error: "), result.stderr
    return lines[0]


def test_cli_index_to_icechunk(tmp_path):
    source = write_features(tmp_path / "features.h5")
    repo_path = tmp_path / "repo"
    result = h5lens_cli("index", source, "-o", f"icechunk://{repo_path}")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no Icechunk log lines
    line = result.stdout.strip()
    assert line.startswith(f"icechunk://{repo_path}: ") and "committed snapshot" in line, line
    manifest = h5lens.index(source)
    assert assert_reads_like_h5py(reopen(repo_path, manifest), source) == 9
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(repo_path)))
    snapshot = repo.lookup_branch("main")
    assert snapshot in line

    again = h5lens_cli("index", source, "--to", f"icechunk://{repo_path}")  # the same option, as spelt in docs
    assert again.returncode == 0, again.stderr
    assert "nothing committed" in again.stdout and snapshot in again.stdout
    assert repo.lookup_branch("main") == snapshot


def test_cli_s3_source_into_s3_repository(s3, tmp_path):
    local = write_features(tmp_path / "features.h5")
    url = _upload(s3, local)
    location = f"s3://bucket/{uuid.uuid4().hex}/repo"
    creds = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", s3.endpoint_url]
    result = h5lens_cli("index", url, "-o", f"icechunk://{location}", *creds)
    assert result.returncode == 0, result.stderr
    options = s3.storage_options()
    manifest = h5lens.index(url, storage_options=options)
    repo = hic.open_repository(location, manifest=manifest, storage_options=options, create=False)
    group = zarr.open_group(repo.readonly_session("main").store, mode="r")
    assert assert_reads_like_h5py(group, local) == 9


def test_cli_errors_are_one_line(tmp_path):
    source = write_features(tmp_path / "features.h5")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    cases = {
        "icechunk://": "expected icechunk://PATH",
        f"icechunk://{tmp_path}/no/such/repo": "does not exist",
        f"icechunk://{busy}": "neither empty nor an Icechunk repository",
        f"icechunk://{source}": "this is the source",
        "icechunk://gs://bucket/repo": "local directories or on s3://",
    }
    for destination, expected in cases.items():
        line = one_line_error(h5lens_cli("index", source, "-o", destination))
        assert expected in line, (destination, line)
    line = one_line_error(h5lens_cli("index", source, "-o", f"icechunk://{tmp_path}/repo", "--format", "json"))
    assert "--format" in line
    assert not (tmp_path / "repo").exists()

    nan = tmp_path / "nan.h5"
    with h5py.File(nan, "w") as f:
        f["x"] = np.arange(10.0)
        f["x"].attrs["offset"] = -np.inf
    line = one_line_error(h5lens_cli("index", nan, "-o", f"icechunk://{tmp_path}/nan-repo"))
    assert "/x: the attribute 'offset' holds NaN or Infinity" in line and "--convention proposal" in line
    assert not (tmp_path / "nan-repo").exists()
    ok = h5lens_cli("index", nan, "-o", f"icechunk://{tmp_path}/nan-repo", "--convention", "proposal")
    assert ok.returncode == 0, ok.stderr
