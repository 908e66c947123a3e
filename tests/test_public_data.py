"""Public data with no setup: an ``s3://`` source read unsigned when no credentials are found.

moto's server on 127.0.0.1 plays the public bucket: an object whose ACL is public-read
answers unsigned requests; a private one refuses them (403), as S3 does. "No credentials"
is made for real: no ``AWS_*`` variable, no shared files, no instance metadata.
"""

from __future__ import annotations

import logging
import os
import uuid
import warnings

import anndata as ad
import h5py
import numpy as np
import pytest
from anndata.tests.helpers import assert_equal

import h5lens
from cli_runner import h5lens as run_cli
from h5lens.fetch.clients import CLIENT_ENV
from h5lens.cli.sample import write_sample

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::anndata.OldFormatWarning")

NOTICE = "no credentials found; reading it with unsigned requests"


def _no_credentials_environment(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_EC2_METADATA_DISABLED="true",  # never ask an instance-metadata address
    )
    return env


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """A process in which botocore's chain finds no credentials."""
    env = _no_credentials_environment(tmp_path)
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    return env


@pytest.fixture(params=["obstore", "fsspec"])
def client_kind(request, monkeypatch):
    monkeypatch.setenv(CLIENT_ENV, request.param)
    return request.param


@pytest.fixture
def bucket(s3):
    """A bucket of its own (h5lens says "unsigned" once per bucket and process), holding a
    public h5ad (ACL public-read), a public h5py file and a private copy of the h5ad."""
    import boto3

    name = f"pub-{uuid.uuid4().hex[:12]}"
    s3.make_bucket(name)
    client = boto3.client(
        "s3", endpoint_url=s3.endpoint_url, aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1",
    )  # fmt: skip
    return name, client


@pytest.fixture
def objects(bucket, tmp_path):
    name, client = bucket
    write_sample(tmp_path / "sample.h5ad")
    with h5py.File(tmp_path / "chunks.h5", "w") as f:
        f.create_dataset("x", data=np.arange(6000, dtype="f8").reshape(1000, 6), chunks=(100, 6), compression="gzip")
    for local, key, acl in (
        ("sample.h5ad", "public/sample.h5ad", "public-read"),
        ("chunks.h5", "public/chunks.h5", "public-read"),
        ("sample.h5ad", "private/sample.h5ad", "private"),
    ):
        client.upload_file(str(tmp_path / local), name, key, ExtraArgs={"ACL": acl})
    return {
        "public": f"s3://{name}/public/sample.h5ad",
        "chunks": f"s3://{name}/public/chunks.h5",
        "private": f"s3://{name}/private/sample.h5ad",
        "local": tmp_path / "sample.h5ad",
        "local_chunks": tmp_path / "chunks.h5",
    }


def _read_h5ad(path) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_h5ad(path)


def test_public_data_reads_unsigned_with_no_setup(s3, objects, no_credentials, client_kind, caplog):
    """No credentials anywhere, no --anon: index and read_anndata work, and h5lens says once
    (an INFO record on h5lens.fetch) that it read unsigned."""
    options = {"endpoint_url": s3.endpoint_url}
    with caplog.at_level(logging.INFO, logger="h5lens.fetch"):
        manifest = h5lens.index(objects["public"], storage_options=options)
        assert_equal(h5lens.read_anndata(manifest, storage_options=options), _read_h5ad(objects["local"]))
        group = h5lens.open_group(h5lens.index(objects["chunks"], storage_options=options), storage_options=options)
        with h5py.File(objects["local_chunks"]) as f:
            np.testing.assert_array_equal(group["x"][...], f["x"][...])
    said = [r.getMessage() for r in caplog.records if NOTICE in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(objects["public"].rsplit("/", 2)[0]), said


def test_configured_credentials_win(s3, objects, no_credentials, client_kind, monkeypatch, caplog):
    """Credentials in the options, or in the environment, sign the requests: a private
    object reads, and nothing is said about unsigned requests."""
    with caplog.at_level(logging.INFO, logger="h5lens.fetch"):
        manifest = h5lens.index(objects["private"], storage_options=s3.storage_options())
        assert_equal(h5lens.read_anndata(manifest, storage_options=s3.storage_options()), _read_h5ad(objects["local"]))
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        options = {"endpoint_url": s3.endpoint_url}
        manifest = h5lens.index(objects["private"], storage_options=options)
        assert_equal(h5lens.read_anndata(manifest, storage_options=options), _read_h5ad(objects["local"]))
    assert not [r for r in caplog.records if NOTICE in r.getMessage()]


def test_anon_asked_for_is_not_second_guessed(s3, objects, monkeypatch):
    """anon=True with credentials in the environment: unsigned, as asked (a private object
    is refused, naming --anon)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(h5lens.AccessDeniedError, match="anonymous access was asked for"):
        h5lens.index(objects["private"], storage_options={"endpoint_url": s3.endpoint_url, "anon": True})


def test_unsigned_requests_refused_say_the_data_needs_credentials(s3, objects, no_credentials, client_kind):
    options = {"endpoint_url": s3.endpoint_url}
    with pytest.raises(h5lens.AccessDeniedError) as info:
        h5lens.index(objects["private"], storage_options=options)
    said = str(info.value)
    assert said.startswith(f"{objects['private']}: access denied to unsigned requests"), said
    assert "no credentials were found, and this data needs them" in said and "storage_options" in said, said
    assert len(said.splitlines()) == 1
    assert info.value.cli_message is not None and "-s key=" in info.value.cli_message


def test_cli_public_data_quiet_and_said_with_verbose(s3, objects, no_credentials, tmp_path):
    """The command line keeps its promise (nothing on stderr on success); -v shows the one
    line that says the data was read unsigned. A private object: one error line."""
    env = no_credentials
    quiet = run_cli("index", objects["public"], "-o", tmp_path / "q.json", "--endpoint-url", s3.endpoint_url, env=env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    shown = run_cli("cat", tmp_path / "q.json", "obsm/X_pca", "--endpoint-url", s3.endpoint_url, env=env)
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    loud = run_cli("-v", "cat", tmp_path / "q.json", "obsm/X_pca", "--endpoint-url", s3.endpoint_url, env=env)
    assert loud.returncode == 0, loud.stderr
    # said once per bucket and process: cat reads the bucket the index above already read
    line = run_cli(
        "index", objects["private"], "-o", tmp_path / "p.json", "--endpoint-url", s3.endpoint_url, env=env
    ).error_line()
    assert line.startswith(f"{objects['private']}: access denied to unsigned requests"), line
    assert "-s key=" in line and not (tmp_path / "p.json").exists()


def test_cli_verbose_says_unsigned_once(s3, objects, tmp_path):
    """In a process of its own: -v prints the line once, however many reads follow."""
    import subprocess
    import sys

    env = {**_no_credentials_environment(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-m", "h5lens.cli", "-v", "index", objects["public"], "-o", str(tmp_path / "v.json"),
         "--endpoint-url", s3.endpoint_url],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(NOTICE) == 1, done.stderr


def test_a_public_prefix_is_indexed_with_no_setup(s3, bucket, objects, no_credentials, tmp_path):
    """index-many over a public bucket's prefix, no credentials and no --anon: the listing
    goes unsigned as the reads do, and every file's manifest reads as anndata reads the file."""
    name, client = bucket
    client.put_bucket_acl(Bucket=name, ACL="public-read")  # anyone may list it, as a public bucket
    options = {"endpoint_url": s3.endpoint_url}
    result = h5lens.index_many([f"s3://{name}/public/"], tmp_path / "manifests", storage_options=options)
    assert sorted(r.status for r in result.records) == ["indexed", "indexed"], result.records
    manifest = tmp_path / "manifests" / "sample.h5ad.json"
    assert_equal(h5lens.read_anndata(manifest, storage_options=options), _read_h5ad(objects["local"]))
