"""Every error a user can cause: one line ``h5lens: error: ...`` on stderr, exit 2, nothing written.

Each case was a multi-line traceback or a misleading message once. The failures are
real: a closed port on 127.0.0.1, moto (the ``s3`` fixture) without credentials or
anonymous, a prefix instead of an object, a manifest whose byte ranges were edited.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid

import h5py
import numpy as np
import pytest

import h5lens
from cli_runner import h5lens as run_cli
from h5lens.cli.sample import write_sample
from h5lens.testing.s3 import free_port


def h5lens_cli(*args, env=None, cwd=None):
    return run_cli(*args, env=env, cwd=cwd)


def one_line_error(result) -> str:
    """The single stderr line of a command that failed on bad input."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("h5lens: error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_sample(tmp_path_factory.mktemp("sample") / "sample.h5ad")


@pytest.fixture(scope="module")
def manifest(sample, tmp_path_factory):
    """The sample indexed with every array referenced (X/data in gzip chunks)."""
    out = tmp_path_factory.mktemp("manifest") / "sample.h5ad.json"
    h5lens.index(sample, inline_threshold=0).to_json(out)
    return out


@pytest.fixture
def uploaded(s3, tmp_path):
    local = tmp_path / "x.h5"
    with h5py.File(local, "w") as f:
        f["x"] = np.arange(10)
    key = f"bucket/{uuid.uuid4().hex}/x.h5"
    s3.filesystem().put(str(local), key)
    return f"s3://{key}"


def creds(endpoint_url: str) -> list[str]:
    return ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", endpoint_url]


# -- storage -------------------------------------------------------------------------------------


def test_unreachable_endpoint(uploaded, tmp_path):
    out = tmp_path / "out.json"
    env = {**os.environ, "AWS_MAX_ATTEMPTS": "1"}  # botocore's own retries: one attempt is enough here
    result = h5lens_cli("index", uploaded, "-o", out, *creds(f"http://127.0.0.1:{free_port()}"), env=env)
    line = one_line_error(result)
    assert "cannot reach the storage endpoint" in line and uploaded in line
    assert not out.exists()


def test_no_credentials(s3, uploaded, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    out = tmp_path / "out.json"
    line = one_line_error(h5lens_cli("index", uploaded, "-o", out, "--endpoint-url", s3.endpoint_url, env=env))
    # read unsigned (no credentials anywhere), refused by the private object: it needs credentials
    assert "no credentials were found" in line and uploaded in line and "-s key=" in line
    assert not out.exists()


def test_anonymous_access_refused_says_so(s3, uploaded, tmp_path):
    out = tmp_path / "out.json"
    line = one_line_error(h5lens_cli("index", uploaded, "-o", out, "--anon", "--endpoint-url", s3.endpoint_url))
    assert "anonymous access" in line and uploaded in line
    assert not out.exists()


def test_a_prefix_is_a_directory_not_an_empty_file(s3, uploaded, tmp_path):
    prefix = uploaded.rsplit("/", 1)[0] + "/"
    line = one_line_error(h5lens_cli("index", prefix, "-o", tmp_path / "out.json", *creds(s3.endpoint_url)))
    assert "directory" in line and "empty" not in line


def test_backend_not_installed(tmp_path):
    try:  # gcsfs and adlfs are test dependencies (test_gcs.py, test_azure.py): Alibaba's OSS is not
        import ossfs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("ossfs is installed here")
    line = one_line_error(h5lens_cli("index", "oss://bucket/x.h5", "-o", tmp_path / "out.json"))
    assert "oss://bucket/x.h5" in line and "not installed" in line


def test_demo_with_an_endpoint_nobody_listens_on(tmp_path):
    result = h5lens_cli("demo", "--dir", tmp_path / "demo", "--endpoint-url", f"http://127.0.0.1:{free_port()}")
    assert "cannot reach the storage endpoint" in one_line_error(result)


# -- the destination, checked before the scan ------------------------------------------------------


def test_destination_directory_missing_fails_before_scanning(sample, tmp_path):
    out = tmp_path / "out" / "nodir" / "x.json"
    line = one_line_error(h5lens_cli("index", sample, "-o", out))
    assert str(out.parent) in line and "does not exist" in line
    # checked first: with a source that does not exist either, the destination is what is named
    line = one_line_error(h5lens_cli("index", tmp_path / "missing.h5", "-o", out))
    assert str(out.parent) in line
    assert not out.parent.exists()


@pytest.mark.parametrize("spelling", ["same", "dot", "file-url", "link"])
def test_destination_that_is_the_source_is_refused(sample, tmp_path, spelling):
    source = tmp_path / "x.h5ad"
    shutil.copyfile(sample, source)
    before = source.read_bytes()
    if spelling == "link":
        (tmp_path / "link.h5ad").symlink_to(source)
    source_arg = {"link": "link.h5ad"}.get(spelling, "x.h5ad")
    out = {"same": "x.h5ad", "dot": "./x.h5ad", "file-url": f"file://{source}", "link": "x.h5ad"}[spelling]
    line = one_line_error(h5lens_cli("index", source_arg, "-o", out, cwd=tmp_path))
    assert "overwrite" in line
    assert source.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["x.h5ad"] + (["link.h5ad"] if spelling == "link" else []))


def test_missing_bucket_is_named_at_once(s3, sample):
    for command in (["index", sample, "-o"], ["publish", sample]):
        line = one_line_error(h5lens_cli(*command, "s3://no-such-bucket/m.json", *creds(s3.endpoint_url)))
        assert "no-such-bucket" in line
    # before the scan: a source that does not exist is not what is reported
    missing = "s3://bucket/no/such/source.h5"
    line = one_line_error(h5lens_cli("index", missing, "-o", "s3://no-such-bucket/m.json", *creds(s3.endpoint_url)))
    assert "no-such-bucket" in line and missing not in line


# -- manifests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["inspect"], ["ls"], ["cat", "X/data"]])
def test_missing_manifest_is_not_found_named_once(tmp_path, command):
    path = tmp_path / "missing.json"
    line = one_line_error(h5lens_cli(command[0], path, *command[1:]))
    assert "not found" in line and line.count(str(path)) == 1


def _edited(manifest, tmp_path, change):
    """A copy of ``manifest`` whose first X/data chunk reference is changed by ``change``."""
    refs = json.loads(manifest.read_text())
    key = sorted(k for k in refs["refs"] if k.startswith("X/data/c/"))[0]
    url, offset, length = refs["refs"][key]
    refs["refs"][key] = [url, change(offset), length]
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(refs))
    return out, key, change(offset), length


def test_chunk_offset_off_by_one_names_the_chunk(manifest, tmp_path):
    edited, key, offset, length = _edited(manifest, tmp_path, lambda o: o + 1)
    line = one_line_error(h5lens_cli("cat", edited, "X/data"))
    assert repr(key) in line and f"bytes {offset}-{offset + length}" in line


def test_chunk_offset_past_the_end_of_the_file(manifest, sample, tmp_path):
    edited, key, offset, _ = _edited(manifest, tmp_path, lambda o: os.path.getsize(sample) + 1000)
    line = one_line_error(h5lens_cli("cat", edited, "X/data"))
    assert str(offset) in line and key in line


def test_stale_source_hint_is_the_cli_flag(sample, tmp_path):
    source = tmp_path / "s.h5ad"
    shutil.copyfile(sample, source)
    out = tmp_path / "s.json"
    h5lens.index(source).to_json(out)
    with open(source, "ab") as f:
        f.write(b"appended")
    line = one_line_error(h5lens_cli("cat", out, "obs/n_counts"))
    assert str(source) in line and "--no-verify" in line and "verify=False" not in line
    anyway = h5lens_cli("cat", out, "obs/n_counts", "--no-verify", "--slice", "0:3")
    assert anyway.returncode == 0, anyway.stderr
    with h5py.File(sample) as f:
        expected = f["obs/n_counts"][0:3]
    assert np.array2string(expected) in anyway.stdout


def test_verbose_shows_the_traceback_and_the_line(tmp_path):
    result = h5lens_cli("-v", "inspect", tmp_path / "missing.json")
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("h5lens: error: ")


@pytest.mark.parametrize(
    "args",
    [
        ["index"],  # a missing argument
        ["index", "x.h5", "-o", "o.json", "--no-such-option"],
        ["ls", "m.json", "-s", "novalue"],
        ["cat", "m.json", "x", "--source-url", "nonsense"],
    ],
    ids=["missing-argument", "unknown-option", "bad-storage-option", "bad-source-url"],
)
def test_usage_errors_are_one_line(tmp_path, args):
    line = one_line_error(h5lens_cli(*args, cwd=tmp_path))
    assert len(line) > len("h5lens: error: ")


def test_a_manifest_from_a_bucket_may_not_read_local_files(s3, sample, tmp_path):
    """Someone else's manifest names a local file: refused in one line, unless --allow-local."""
    manifest = tmp_path / "m.json"
    h5lens.index(sample).to_json(manifest)  # its source is this machine's absolute path
    key = f"bucket/{uuid.uuid4().hex}/m.json"
    s3.filesystem().put(str(manifest), key)
    args = ["cat", f"s3://{key}", "X", *creds(s3.endpoint_url)]
    line = one_line_error(h5lens_cli(*args))
    assert "may not read local files" in line and str(sample) in line
    allowed = h5lens_cli(*args, "--allow-local", os.path.dirname(sample))
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.strip()
