"""A careful user's command line and API: data is never overwritten, errors name the real
cause and the option that fixes it, manifests travel with their files, foreign files are
named as such, and nonsense numbers are refused where they are parsed.

The files are written by the software users have (anndata, h5py, kerchunk); S3 is moto
on 127.0.0.1 (the ``s3`` fixture).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
import warnings
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest

import h5lens
from cli_runner import h5lens as cli
from h5lens.testing.s3 import free_port


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def atlas(tmp_path: Path) -> Path:
    """An h5ad written by anndata."""
    rng = np.random.default_rng(0)
    adata = ad.AnnData(X=rng.random((40, 6), dtype=np.float32), obs={"kind": rng.choice(["a", "b"], 40)})
    adata.obs_names = [f"cell{i}" for i in range(40)]
    path = tmp_path / "atlas.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path)
    return path


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(1000.0), chunks=(100,), compression="gzip")
    return path


# -- 1. never overwrite data ----------------------------------------------------------------


def test_index_never_replaces_a_file_that_is_not_a_manifest(plain, atlas, tmp_path):
    before = digest(atlas)
    line = cli("index", plain, "-o", atlas).error_line()
    assert line == f"{atlas}: an existing file that is not a manifest (an HDF5 file); pass --force to replace it"
    assert digest(atlas) == before
    ad.read_h5ad(atlas)  # still the atlas anndata wrote
    # the shell expands `index -o *.h5ad` in a folder of two h5ad files to this:
    other = tmp_path / "b.h5ad"
    shutil.copy(atlas, other)
    assert "not a manifest" in cli("index", "-o", atlas, other).error_line()
    assert digest(atlas) == before
    # a text file, an empty file
    notes = tmp_path / "notes.json"
    notes.write_text("my notes, not JSON")
    assert "not a manifest" in cli("index", plain, "-o", notes).error_line()
    assert notes.read_text() == "my notes, not JSON"
    empty = tmp_path / "empty.json"
    empty.touch()
    assert cli("index", plain, "-o", empty).status == 0  # nothing to lose


def test_a_manifest_may_replace_a_manifest_and_force_replaces_anything(plain, tmp_path):
    out = tmp_path / "m.json"
    assert cli("index", plain, "-o", out).status == 0
    assert cli("index", plain, "-o", out).status == 0  # indexing again replaces the manifest
    compact = tmp_path / "m.h5lens"
    assert cli("index", plain, "-o", compact).status == 0
    assert cli("index", plain, "-o", compact).status == 0
    victim = tmp_path / "victim.dat"
    victim.write_bytes(b"\x00data\x01")
    assert cli("index", plain, "-o", victim, "--force").status == 0
    with h5py.File(plain) as f:
        np.testing.assert_array_equal(h5lens.open_group(victim)["x"][...], f["x"][...])


def test_every_writing_command_refuses_to_replace_data(plain, atlas, tmp_path):
    manifest = tmp_path / "plain.json"
    assert cli("index", plain, "-o", manifest).status == 0
    before = digest(atlas)
    assert "pass --force" in cli("publish", plain, atlas).error_line()
    assert "pass --force" in cli("convert", manifest, atlas, "--format", "json").error_line()
    assert digest(atlas) == before
    # index-many: a file where a manifest would go, that is not one, fails that file alone
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    squatter = out_dir / "plain.h5.json"
    squatter.write_text("not a manifest")
    result = cli("index-many", plain, "--out-dir", out_dir, "--workers", "1")
    assert result.status == 2 and "not a manifest" in result.stderr
    assert squatter.read_text() == "not a manifest"


def test_python_refuses_to_replace_data_too(plain, atlas):
    manifest = h5lens.index(plain)
    before = digest(atlas)
    with pytest.raises(h5lens.InvalidOptionError, match="not a manifest .*pass force=True"):
        manifest.save(atlas)
    with pytest.raises(h5lens.InvalidOptionError, match="not a manifest"):
        manifest.to_json(atlas)
    assert digest(atlas) == before
    manifest.save(atlas, force=True)
    with h5py.File(plain) as f:
        np.testing.assert_array_equal(h5lens.open_group(atlas)["x"][...], f["x"][...])


# -- 2. storage errors name the real cause --------------------------------------------------


@pytest.fixture
def no_aws_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_destination_errors_name_the_cause(s3, plain, tmp_path, no_aws_env):
    creds = ["-s", "key=testing", "-s", "secret=testing"]
    endpoint = ["--endpoint-url", s3.endpoint_url]
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/m.json"
    assert cli("index", plain, "-o", missing, "--url", "https://example.org/plain.h5", *creds, *endpoint).error_line() == (
        f"{missing}: the bucket {missing[5:].split('/')[0]!r} does not exist"
    )
    dest = f"s3://bucket/{uuid.uuid4().hex}/m.json"
    line = cli("index", plain, "-o", dest, "--url", "https://example.org/plain.h5", *endpoint).error_line()
    assert line.startswith(f"{dest}: no credentials while checking the destination") and line.endswith(
        "configure credentials, or pass --anon for public data"
    )
    down = [*creds, "--endpoint-url", f"http://127.0.0.1:{free_port()}"]
    served = "https://example.org/plain.h5"
    prefix = dest.removesuffix("/m.json")
    for command, where in (
        (["index", plain, "-o", dest, "--url", served], dest),
        (["publish", plain, dest, "--url", served], dest),
        (["index-many", "s3://bucket/x/*.h5", "--out-dir", prefix + "/"], prefix + "/"),
        (["index", plain, "-o", f"icechunk://{prefix}"], prefix),
    ):
        line = cli(*command, *down).error_line()
        assert line.startswith(f"{where}: cannot reach the storage endpoint"), (command, line)


def test_a_local_file_indexed_to_object_storage_needs_its_url(s3, plain):
    endpoint = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", s3.endpoint_url]
    dest = f"s3://bucket/{uuid.uuid4().hex}/plain.json"
    line = cli("index", plain, "-o", dest, *endpoint).error_line()
    assert line == (
        f"{dest}: the manifest would point at the local file {plain}, which readers of {dest} cannot reach; "
        "say where the file is served from with --url URL (or index the uploaded copy)"
    )
    assert not s3.filesystem().exists(dest[5:])
    uploaded = dest.replace("plain.json", "plain.h5")
    s3.filesystem().put(str(plain), uploaded[5:])
    assert cli("index", plain, "-o", dest, "--url", uploaded, *endpoint).status == 0
    group = h5lens.open_group(dest, storage_options=s3.storage_options())
    with h5py.File(plain) as f:
        np.testing.assert_array_equal(group["x"][...], f["x"][...])


# -- 3. manifests that travel ---------------------------------------------------------------


def test_a_manifest_beside_or_below_its_file_travels_with_it(atlas, tmp_path):
    beside = tmp_path / "atlas.h5ad.json"
    below = tmp_path / "manifests" / "atlas.json"
    below.parent.mkdir()
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere.json"
    for out in (beside, below, elsewhere):
        assert cli("index", atlas, "-o", out).status == 0
    recorded = {out: json.loads(out.read_text())["h5lens"]["sources"][0]["url"] for out in (beside, below, elsewhere)}
    assert recorded == {beside: "atlas.h5ad", below: "../atlas.h5ad", elsewhere: str(atlas)}
    # copied to a colleague without -p: new mtimes, the same bytes
    colleague = tmp_path.parent / f"{tmp_path.name}-colleague"
    (colleague / "manifests").mkdir(parents=True)
    shutil.copy(atlas, colleague / "atlas.h5ad")
    shutil.copy(beside, colleague / "atlas.h5ad.json")
    shutil.copy(below, colleague / "manifests" / "atlas.json")
    expected = ad.read_h5ad(colleague / "atlas.h5ad")
    for out in (colleague / "atlas.h5ad.json", colleague / "manifests" / "atlas.json"):
        adata = h5lens.read_anndata(out)
        np.testing.assert_array_equal(adata.X, expected.X)
        assert list(adata.obs_names) == list(expected.obs_names)
        assert cli("validate", out).status == 0


def test_a_moved_source_is_named_with_the_option_that_finds_it(atlas, tmp_path):
    out = tmp_path.parent / f"{tmp_path.name}-away.json"
    assert cli("index", atlas, "-o", out).status == 0
    moved = tmp_path / "moved.h5ad"
    atlas.rename(moved)
    line = cli("cat", out, "obs/_index").error_line()
    assert line.startswith(f"{atlas}: the source of this manifest is not there")
    assert line.endswith(f"if it moved, pass --source-url {atlas}=NEW")
    found = cli("cat", out, "obs/_index", "--source-url", f"{atlas}={moved}")
    assert found.status == 0 and "cell0" in found.stdout
    with pytest.raises(h5lens.SourceNotFoundError, match=r"pass source_urls=\{"):
        h5lens.open_group(out)


# -- 4. malformed and foreign manifests -----------------------------------------------------


def test_malformed_and_foreign_manifests_are_named(plain, tmp_path):
    empty_object = tmp_path / "empty.json"
    empty_object.write_text("{}")
    a_list = tmp_path / "list.json"
    a_list.write_text("[]")
    kerchunk_hdf = pytest.importorskip("kerchunk.hdf")
    v2 = tmp_path / "kerchunk.json"
    v2.write_text(json.dumps(kerchunk_hdf.SingleHdf5ToZarr(str(plain)).translate()))
    expected = {
        empty_object: f"{empty_object}: not a manifest (no root group: the key zarr.json is missing)",
        a_list: f"{a_list}: not a manifest (JSON list, not an object)",
        v2: f"{v2}: zarr v2 references (kerchunk's); h5lens reads zarr v3 manifests: index the HDF5 file with h5lens",
    }
    for path, message in expected.items():
        for command in (["inspect", path], ["ls", path], ["cat", path, "x"], ["validate", path]):
            assert cli(*command).error_line() == message, command
        with pytest.raises(h5lens.NotAManifestError):
            h5lens.open_group(path)


def test_an_hdf5_file_given_as_a_manifest(plain, atlas):
    """ls, cat and inspect index it in memory (nothing written); validate says to index it."""
    listing = cli("ls", atlas, "obs")
    assert listing.status == 0 and "kind" in listing.stdout
    values = cli("cat", plain, "x[0:3]")
    assert values.status == 0 and values.stdout.strip() == "[0. 1. 2.]"
    assert cli("inspect", plain).status == 0
    line = cli("validate", plain).error_line()
    assert line == f"{plain}: an HDF5 file, not a manifest; index it first (h5lens index {plain} -o ...)"
    assert not list(plain.parent.glob("*.json"))


def test_validate_looks_at_the_sources(plain, tmp_path):
    out = tmp_path / "plain.json"
    assert cli("index", plain, "-o", out).status == 0
    assert "sources unchanged" in cli("validate", out).stdout
    with open(plain, "ab") as f:
        f.write(b"\0" * 16)
    changed = cli("validate", out)
    assert changed.status == 1 and "changed since the manifest was written (size" in changed.stdout
    assert "pass --no-verify" in changed.stdout
    assert cli("validate", out, "--no-verify").status == 0
    problems = h5lens.validate(out)
    assert len(problems) == 1 and "verify=False" in problems[0].message


# -- 7, 8. options checked where they are parsed ----------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--slab-bytes", "0", "--slab-bytes: at least 1, got '0'"),
        ("--slab-bytes", "-1", "--slab-bytes: expected a size like 65536, 64KiB or 4MiB, got '-1'"),
        ("--inline-threshold", "-5", "--inline-threshold: expected a size like 65536, 64KiB or 4MiB, got '-5'"),
        ("--materialize-limit", "-1", "--materialize-limit: expected a size like 65536, 64KiB or 4MiB, got '-1'"),
        ("--read-block-size", "12", "--read-block-size: at least 4KiB, got '12'"),
        ("--convention", "newest", "--convention must be one of 'released', 'proposal', got 'newest'"),
    ],
)
def test_nonsense_numbers_are_refused_with_the_options_name(plain, tmp_path, option, value, said):
    out = tmp_path / "m.json"
    for command in ("index", "publish"):
        args = [command, plain, "-o", out] if command == "index" else [command, plain, out]
        assert cli(*args, option, value).error_line() == said
    assert not out.exists()


@pytest.mark.parametrize(
    ("argument", "value"),
    [("slab_bytes", 0), ("slab_bytes", -1), ("inline_threshold", -5), ("materialize_limit", -1), ("convention", "x")],
)
def test_python_refuses_the_same_numbers(plain, argument, value):
    with pytest.raises(h5lens.InvalidOptionError, match=argument):
        h5lens.index(plain, **{argument: value})


def test_sizes_take_units_and_the_limit_takes_none(plain, tmp_path):
    out = tmp_path / "m.json"
    assert cli("index", plain, "-o", out, "--slab-bytes", "64KiB", "--materialize-limit", "none").status == 0
    assert cli("index", plain, "-o", out, "--inline-threshold", "1KiB", "--read-block-size", "4KiB").status == 0


def test_the_materialize_limit_names_the_dataset_and_the_option(tmp_path):
    """A filter without a zarr codec copies the data; beyond the limit (64 MiB by default),
    indexing stops, naming the dataset, the filter and the option to raise."""
    hdf5plugin = pytest.importorskip("hdf5plugin")
    path = tmp_path / "sz3.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.linspace(0, 1, 50_000), chunks=(5000,), **hdf5plugin.SZ3(absolute=1e-3))
    line = cli("index", path, "-o", tmp_path / "m.json", "--materialize-limit", "100KiB").error_line()
    assert line.startswith("/x: filters with no zarr codec: sz3 (id 32024); its 400,000 bytes would be copied")
    assert line.endswith("more than the limit of 102,400 bytes; raise it with --materialize-limit SIZE (or none)")
    with pytest.raises(h5lens.MaterializeLimitError, match=r"materialize_limit=102,400; raise it \(None: no limit\)"):
        h5lens.index(path, materialize_limit=100 << 10)
    with h5py.File(path) as f:
        np.testing.assert_array_equal(h5lens.open_group(h5lens.index(path))["x"][...], f["x"][...])


def test_index_many_replaces_its_own_report_but_nothing_else(plain, tmp_path):
    out_dir, report = tmp_path / "out", tmp_path / "report.json"
    out_dir.mkdir()
    for _ in range(2):  # the same command twice: the second run replaces the first's report
        assert cli("index-many", plain, "--out-dir", out_dir, "--report", report, "--workers", "1").status == 0
    assert json.loads(report.read_text())["skipped"] == 1
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    line = cli("index-many", plain, "--out-dir", out_dir, "--report", notes, "--workers", "1").error_line()
    assert line.startswith(f"{notes}: an existing file that is not a report") and notes.read_text() == "mine"


def test_python_refuses_a_manifest_for_object_storage_that_points_at_a_local_file(s3, plain):
    manifest = h5lens.index(plain)
    dest = f"s3://bucket/{uuid.uuid4().hex}/plain.json"
    with pytest.raises(h5lens.InvalidOptionError, match="say where the file is served from with url="):
        manifest.save(dest, storage_options=s3.storage_options())
    served = dest.replace(".json", ".h5")
    s3.filesystem().put(str(plain), served[5:])
    h5lens.index(plain, url=served).save(dest, storage_options=s3.storage_options())
    with h5py.File(plain) as f:
        np.testing.assert_array_equal(h5lens.open_group(dest, storage_options=s3.storage_options())["x"][...], f["x"][...])


def test_a_url_elsewhere_records_only_the_size(plain):
    """What identifies the local file indexed (its mtime, its fingerprint) says nothing of
    the copy at --url: only the size is recorded (publish reads the identity at the URL)."""
    source = h5lens.index(plain, url="https://example.org/plain.h5").sources[0]
    assert (source.url, source.size, source.mtime, source.fingerprint, source.etag) == (
        "https://example.org/plain.h5", plain.stat().st_size, None, None, None
    )
    assert h5lens.index(plain, url=str(plain)).sources[0].fingerprint is not None


def test_the_default_limit_lets_strings_through_an_explicit_one_does_not(tmp_path):
    path = tmp_path / "names.h5"
    names = np.array([f"cell_{i}" for i in range(20_000)], dtype=object)
    with h5py.File(path, "w") as f:
        f.create_dataset("names", data=names, dtype=h5py.string_dtype())
    small = h5lens.scan.options.DefaultLimit(1000)  # the default's kind of limit, small
    assert list(h5lens.open_group(h5lens.index(path, materialize_limit=small))["names"][:3]) == ["cell_0", "cell_1", "cell_2"]
    with pytest.raises(h5lens.MaterializeLimitError, match="/names: string values are not stored in the dataset.s chunks"):
        h5lens.index(path, materialize_limit=1000)
    assert "names" in cli("ls", path).stdout  # the CLI's default limit too
