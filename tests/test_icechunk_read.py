"""Icechunk as a source of manifests: every h5lens opener reads ``icechunk://PATH``.

Oracles: h5py's reading of the file committed (every dataset), ``anndata.read_h5ad`` for an
h5ad, and, for a repository another writer made, Icechunk's own store read with zarr. The
repositories are written by ``h5lens.icechunk.to_icechunk`` (or by zarr into an Icechunk
session) on local disk and on moto's S3 server.
"""

from __future__ import annotations

import uuid
import warnings

import h5py
import numpy as np
import pytest

icechunk = pytest.importorskip("icechunk", reason="icechunk is not installed (pip install 'h5lens[icechunk]')")

import zarr  # noqa: E402

import h5lens  # noqa: E402
import test_icechunk as written  # noqa: E402 - the files and commits of the writing tests
from cli_runner import h5lens as run_cli  # noqa: E402
from h5lens.errors import InvalidOptionError, StaleSourceError  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    icechunk.set_logs_filter("error")


def _assert_navigates_like_h5py(root: h5lens.Group, path) -> None:
    with h5py.File(path) as f:
        names = written._datasets(f)
        expected = {name: written._values(f[name]) for name in names}
    for name, value in expected.items():
        got = np.asarray(root[name][()])
        if value.dtype.kind == "O":
            assert [v.decode() if isinstance(v, bytes) else str(v) for v in got.ravel()] == list(value.ravel()), name
        else:
            np.testing.assert_array_equal(got, value, err_msg=name)


def test_every_opener_reads_a_committed_file_like_h5py(tmp_path):
    source = written.write_features(tmp_path / "features.h5")
    manifest, _, snapshot = written.commit(source, tmp_path / "repo")
    text = f"icechunk://{tmp_path / 'repo'}"

    assert written.assert_reads_like_h5py(h5lens.open_group(text), source) == 9
    assert written.assert_reads_like_h5py(zarr.open_group(h5lens.open_store(text), mode="r"), source) == 9
    _assert_navigates_like_h5py(h5lens.open(text), source)
    assert h5lens.validate(text) == []
    assert h5lens.validate(text, deep=True) == []

    # the references are the file's, as indexed: nothing was copied on the way
    with pytest.raises(h5lens.InvalidOptionError, match="load_manifest"):
        h5lens.Manifest.load(text)  # the file reader says where a repository is read
    loaded = h5lens.load_manifest(text)
    assert loaded.location == f"{text}#snapshot={snapshot}"
    assert [s.to_dict() for s in loaded.sources] == [s.to_dict() for s in manifest.sources]
    assert set(loaded.chunks) == set(manifest.chunks)
    for path, table in manifest.chunks.items():
        got = loaded.chunks[path]
        for grid in ("source", "offset", "length"):
            np.testing.assert_array_equal(getattr(got, grid), getattr(table, grid), err_msg=f"{path}: {grid}")
        assert dict(got.inline) == dict(table.inline), path


def test_a_version_is_named_after_the_hash(tmp_path):
    source = written.write_features(tmp_path / "features.h5")
    _, repo, first = written.commit(source, tmp_path / "repo")
    repo.create_tag("v1", first)
    later = written.write_features(tmp_path / "later.h5")
    with h5py.File(later, "a") as f:
        f.create_dataset("later", data=np.arange(5))
    written.commit(later, tmp_path / "repo")
    text = f"icechunk://{tmp_path / 'repo'}"
    assert "later" in h5lens.open_group(text)
    for version in ("#tag=v1", f"#snapshot={first}"):
        group = h5lens.open_group(text + version)
        assert "later" not in group and h5lens.load_manifest(text + version).location == f"{text}#snapshot={first}"
    for bad in ("#v1", "#tag=", "#commit=abc"):
        with pytest.raises(InvalidOptionError, match="branch=NAME, tag=NAME or snapshot=ID"):
            h5lens.open_group(text + bad)


def test_h5ad_from_a_repository_equals_read_h5ad_eager_and_lazy(tmp_path):
    ad = pytest.importorskip("anndata")
    pytest.importorskip("dask")
    import dask
    import scipy.sparse as sp
    from anndata.tests.helpers import assert_equal

    rng = np.random.default_rng(3)
    adata = ad.AnnData(
        X=sp.random(300, 40, density=0.1, format="csr", random_state=3, dtype=np.float32),
        obsm={"X_pca": rng.standard_normal((300, 4)).astype(np.float32)},
    )
    adata.obs["group"] = rng.choice(["a", "b"], 300)
    path = tmp_path / "small.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")
    written.commit(path, tmp_path / "repo")
    text = f"icechunk://{tmp_path / 'repo'}"
    expected = ad.read_h5ad(path)
    assert_equal(h5lens.read_anndata(text), expected)
    lazy = h5lens.read_anndata(text, lazy=True)
    # computed in other processes: each reads the snapshot again by its location
    with dask.config.set(scheduler="processes", num_workers=2):
        got = lazy.X[10:200].compute()
    np.testing.assert_array_equal(got.toarray(), expected.X[10:200].toarray())


def test_netcdf_from_a_repository_opens_in_xarray_like_h5netcdf(tmp_path):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("netCDF4")
    pytest.importorskip("h5netcdf")
    path = written._netcdf(tmp_path / "ocean.nc")
    written.commit(path, tmp_path / "repo")
    text = f"icechunk://{tmp_path / 'repo'}"
    got = xr.open_dataset(text, engine="h5lens")
    xr.testing.assert_identical(got.load(), xr.open_dataset(path, engine="h5netcdf").load())
    tree = xr.open_datatree(text, engine="h5lens", options=h5lens.OpenOptions(verify=False))
    xr.testing.assert_identical(tree.load(), xr.open_datatree(path, engine="h5netcdf").load())


def test_a_source_rewritten_after_the_commit_is_refused_by_every_opener(tmp_path):
    source = written.write_features(tmp_path / "features.h5")
    written.commit(source, tmp_path / "repo")
    written._modify(source)
    text = f"icechunk://{tmp_path / 'repo'}"
    for opener in (h5lens.open_group, h5lens.open_store, h5lens.open):
        with pytest.raises(StaleSourceError):
            opener(text)
    problems = h5lens.validate(text)
    assert len(problems) == 1 and "changed" in problems[0].message
    with h5py.File(source) as f:  # asked not to check, it reads the file as it is now
        np.testing.assert_array_equal(h5lens.open_group(text, verify=False)["gzip"][:], f["gzip"][:])


def test_a_repository_zarr_wrote_reads_as_icechunk_reads_it(tmp_path):
    """No h5lens record: Icechunk's own chunks (every one of them) come back inline."""
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    root.attrs["title"] = "plain"
    data = np.arange(600, dtype="<f8").reshape(20, 30)
    root.create_array("x", data=data, chunks=(7, 11))
    root.create_group("g").create_array("s", data=np.array(["a", "bb", "ccc"], dtype="<U3"))
    session.commit("zarr wrote this")
    theirs = zarr.open_group(repo.readonly_session("main").store, mode="r")
    ours = h5lens.open_group(f"icechunk://{tmp_path / 'repo'}")
    assert dict(ours.attrs) == dict(theirs.attrs)
    np.testing.assert_array_equal(ours["x"][:], theirs["x"][:])
    np.testing.assert_array_equal(ours["x"][3:15, 2:29], theirs["x"][3:15, 2:29])
    assert list(ours["g/s"][:]) == list(theirs["g/s"][:])


def test_a_repository_on_s3(s3, tmp_path):
    local = written.write_features(tmp_path / "features.h5")
    url = written._upload(s3, local)
    options = s3.storage_options()
    manifest = h5lens.index(url, storage_options=options)
    location = f"s3://bucket/{uuid.uuid4().hex}/repo"
    repo = written.hic.open_repository(location, manifest=manifest, storage_options=options)
    written.hic.to_icechunk(manifest, repo, storage_options=options)
    group = h5lens.open_group(f"icechunk://{location}", storage_options=options)
    assert written.assert_reads_like_h5py(group, local) == 9
    opening = h5lens.OpenOptions(storage_options=options)
    assert written.assert_reads_like_h5py(h5lens.open_group(f"icechunk://{location}", options=opening), local) == 9


def test_the_command_line_reads_a_repository(tmp_path):
    source = written.write_features(tmp_path / "features.h5")
    written.commit(source, tmp_path / "repo")
    text = f"icechunk://{tmp_path / 'repo'}"
    listed = run_cli("ls", text)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    with h5py.File(source) as f:
        members = listed.stdout.partition("\n\n")[0]  # then the root's attributes
        assert {line.split()[0].rstrip("/") for line in members.splitlines()} == set(f)
        shown = run_cli("cat", text, "a/b/small")
        assert shown.returncode == 0 and shown.stdout.strip() == str(f["a/b/small"][()]), shown.stderr
    checked = run_cli("validate", text)
    assert checked.returncode == 0 and "valid" in checked.stdout, checked.stderr
    missing = run_cli("ls", f"icechunk://{tmp_path / 'nowhere'}")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr


def test_options_are_one_object_or_keywords(tmp_path):
    source = written.write_features(tmp_path / "features.h5")
    manifest = h5lens.index(source)
    with pytest.raises(InvalidOptionError, match="unknown option: storage_option"):
        h5lens.open_group(manifest, storage_option={})  # type: ignore[call-arg]
    with pytest.raises(InvalidOptionError, match="takes an h5lens.OpenOptions"):
        h5lens.open_group(manifest, options={"verify": False})  # type: ignore[arg-type]
    written._modify(source)
    relaxed = h5lens.OpenOptions(verify=False)
    for opener in (h5lens.open_group, h5lens.open_store, h5lens.open):
        with pytest.raises(StaleSourceError):
            opener(manifest)
        opener(manifest, options=relaxed)  # the object's verify=False
    assert len(h5lens.validate(manifest)) == 1 and h5lens.validate(manifest, options=relaxed) == []
    with pytest.raises(StaleSourceError):  # a keyword overrides the object
        h5lens.open_group(manifest, options=relaxed, verify=True)
