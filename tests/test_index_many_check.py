"""``h5lens index-many --check`` / ``h5lens.index_many(..., check=True)``: what changed,
what has no manifest, what is current, which manifests lost their file, without indexing.

Oracle: the run itself. A file is ``current`` exactly when a run of the same command skips
it, and ``changed`` or ``missing`` exactly when the run indexes it; ``orphaned`` manifests
are those whose file the filesystem (or bucket) no longer has. Files are written by
anndata; changes are real rewrites (one of the same length, which only the content
fingerprint or ETag tells). Local directories, and moto's S3 on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

import h5lens
from cli_runner import h5lens as run_cli
from h5lens.errors import InvalidOptionError

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

BUCKET = "checked"


def write_h5ad(path: Path, value: float, n_obs: int = 6) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.AnnData(X=np.full((n_obs, 4), value, dtype=np.float32)).write_h5ad(path)
    return path


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        yield client


def statuses(result) -> dict[str, str]:
    return {Path(r.source).name: r.status for r in result.records}


def cli(*args, client):
    return run_cli(*args, "--scheduler", client.scheduler.address)


def test_check_says_what_a_run_would_do_locally(tmp_path, client):
    data, dest = tmp_path / "data", tmp_path / "manifests"
    data.mkdir()
    for i in range(4):
        write_h5ad(data / f"s{i}.h5ad", i)
    first = h5lens.index_many(str(data), dest, scheduler=client)
    assert first.indexed == 4 and first.ok

    checked = h5lens.index_many(str(data), dest, scheduler=client, check=True)
    assert statuses(checked) == dict.fromkeys(["s0.h5ad", "s1.h5ad", "s2.h5ad", "s3.h5ad"], "current")
    assert checked.up_to_date and checked.current == 4
    result = cli("index-many", data, "--out-dir", dest, "--check", client=client)
    assert result.returncode == 0 and result.stderr == "", result.stderr

    # s1 rewritten with the same length (only the content tells), s2 gone, s4 new
    size = (data / "s1.h5ad").stat().st_size
    write_h5ad(data / "s1.h5ad", 9)
    assert (data / "s1.h5ad").stat().st_size == size
    (data / "s2.h5ad").unlink()
    write_h5ad(data / "s4.h5ad", 4)
    before = {p: p.stat().st_mtime_ns for p in dest.iterdir()}
    report = tmp_path / "check.json"
    checked = h5lens.index_many(str(data), dest, scheduler=client, check=True, report=report)
    assert statuses(checked) == {
        "s0.h5ad": "current", "s1.h5ad": "changed", "s3.h5ad": "current", "s4.h5ad": "missing", "s2.h5ad": "orphaned",
    }  # fmt: skip
    by_name = {Path(r.source).name: r for r in checked.records}
    assert by_name["s1.h5ad"].changes and by_name["s1.h5ad"].changes[0].startswith("content ")
    assert by_name["s2.h5ad"].manifest == str(dest / "s2.h5ad.json") and not (data / "s2.h5ad").exists()
    assert (checked.current, checked.changed, checked.missing, checked.orphaned, checked.failed) == (2, 1, 1, 1, 0)
    assert {p: p.stat().st_mtime_ns for p in dest.iterdir()} == before  # nothing written
    assert json.loads(report.read_text()) == json.loads(json.dumps(checked.to_dict()))
    assert json.loads(report.read_text())["check"] is True

    result = cli("index-many", data, "--out-dir", dest, "--check", client=client)
    assert result.returncode == 1 and result.stderr == "", result.stderr
    table = result.stdout
    for name, status in (("s1.h5ad", "changed"), ("s4.h5ad", "missing"), ("s2.h5ad", "orphaned")):
        assert any(name in line and status in line for line in table.splitlines()), (name, table)
    assert not any("s0.h5ad" in line for line in table.splitlines())  # current files are counted, not listed

    # the oracle: a run indexes exactly what the check called changed or missing, skips what it called current
    run = h5lens.index_many(str(data), dest, scheduler=client)
    assert {Path(r.source).name for r in run.records if r.status == "indexed"} == {"s1.h5ad", "s4.h5ad"}
    assert {Path(r.source).name for r in run.records if r.status == "skipped"} == {"s0.h5ad", "s3.h5ad"}
    reindexed = next(r for r in run.records if r.source.endswith("s1.h5ad"))
    assert reindexed.changes == by_name["s1.h5ad"].changes  # why it was indexed again, in the run's report too

    # only the manifest of the file that is gone is left: status 3
    result = cli("index-many", data, "--out-dir", dest, "--check", client=client)
    assert result.returncode == 3 and result.stderr == "", result.stderr
    (dest / "s2.h5ad.json").unlink()
    assert cli("index-many", data, "--out-dir", dest, "--check", client=client).returncode == 0


def test_check_writes_nothing_and_refuses_force(tmp_path, client):
    data = tmp_path / "data"
    data.mkdir()
    write_h5ad(data / "a.h5ad", 1)
    dest = tmp_path / "not-yet"
    checked = h5lens.index_many(str(data), dest, scheduler=client, check=True)
    assert statuses(checked) == {"a.h5ad": "missing"} and not dest.exists()
    with pytest.raises(InvalidOptionError, match="force"):
        h5lens.index_many(str(data), dest, check=True, force=True)
    refused = cli("index-many", data, "--out-dir", dest, "--check", "--force", client=client)
    assert refused.error_line() == "--check indexes nothing and --force indexes every file: give one"


def test_a_file_that_cannot_be_checked_is_status_2(tmp_path, client):
    """A named file that does not exist and has no manifest, and a file at a manifest's
    name that is not a manifest: each failed (a run would fail them too)."""
    data, dest = tmp_path / "data", tmp_path / "manifests"
    data.mkdir()
    dest.mkdir()
    write_h5ad(data / "a.h5ad", 1)
    (dest / "a.h5ad.json").write_text("not a manifest\n")
    gone = data / "gone.h5ad"
    checked = h5lens.index_many([str(data / "a.h5ad"), str(gone)], dest, scheduler=client, check=True)
    assert statuses(checked) == {"a.h5ad": "failed", "gone.h5ad": "failed"}
    errors = {Path(r.source).name: r.error for r in checked.records}
    assert "not a manifest" in errors["a.h5ad"] and "gone.h5ad" in errors["gone.h5ad"]
    result = cli("index-many", data / "a.h5ad", gone, "--out-dir", dest, "--check", client=client)
    assert result.error_line().startswith("2 of 2 files could not be checked (the first: ")


@pytest.fixture(scope="module")
def bucket(s3) -> str:
    s3.make_bucket(BUCKET)
    return f"s3://{BUCKET}"


def test_check_on_object_storage(s3, bucket, client, tmp_path):
    """ETags decide on S3: a re-upload is changed, a deleted object's manifest orphaned."""
    options = s3.storage_options()
    fs = s3.filesystem()
    for i in range(3):
        fs.put(str(write_h5ad(tmp_path / f"o{i}.h5ad", i)), f"{BUCKET}/data/o{i}.h5ad")
    fs.pipe(f"{BUCKET}/data/README.txt", b"not HDF5")
    src, dest = f"{bucket}/data/", f"{bucket}/manifests/"
    assert h5lens.index_many(src, dest, scheduler=client, storage_options=options).indexed == 3
    assert h5lens.index_many(src, dest, scheduler=client, storage_options=options, check=True).up_to_date

    etag = fs.info(f"{BUCKET}/data/o0.h5ad")["ETag"]
    fs.put(str(write_h5ad(tmp_path / "o0-new.h5ad", 7)), f"{BUCKET}/data/o0.h5ad")
    assert fs.info(f"{BUCKET}/data/o0.h5ad")["ETag"] != etag
    fs.rm(f"{BUCKET}/data/o2.h5ad")
    fs.put(str(write_h5ad(tmp_path / "o3.h5ad", 3)), f"{BUCKET}/data/o3.h5ad")
    # a report beside the manifests is not one: not an orphan
    fs.pipe(f"{BUCKET}/manifests/summary.json", b"{}")

    checked = h5lens.index_many(src, dest, scheduler=client, storage_options=options, check=True)
    assert statuses(checked) == {"o0.h5ad": "changed", "o1.h5ad": "current", "o3.h5ad": "missing", "o2.h5ad": "orphaned"}
    changed = next(r for r in checked.records if r.status == "changed")
    assert changed.changes[0].startswith("ETag ")
    orphan = next(r for r in checked.records if r.status == "orphaned")
    assert orphan.source == f"{bucket}/data/o2.h5ad" and orphan.manifest == f"{dest}o2.h5ad.json"

    endpoint = ["--endpoint-url", options["endpoint_url"], "-s", f"key={options['key']}", "-s", f"secret={options['secret']}"]
    result = cli("index-many", src, "--out-dir", dest, "--check", *endpoint, client=client)
    assert result.returncode == 1 and result.stderr == "", result.stderr

    run = h5lens.index_many(src, dest, scheduler=client, storage_options=options)
    assert {Path(r.source).name for r in run.records if r.status == "indexed"} == {"o0.h5ad", "o3.h5ad"}
    assert cli("index-many", src, "--out-dir", dest, "--check", *endpoint, client=client).returncode == 3
    assert os.fspath(orphan.manifest).startswith("s3://")
