"""Secrets never persist: a recognizable secret for every backend, every command run with it,
every output and every file written searched for it.

S3 (moto on 127.0.0.1 takes any secret key: one with a mark), HTTP (an archive's bearer token
and the signed URLs it redirects to), GCS and Azure where their emulators are installed
(an access token and the account key in the storage options). The commands: index (to a
file and to a bucket), publish, index-many with a report, inspect, cat, validate,
read_anndata, and commands that fail; what is searched: stdout and stderr, every file under
the test's directory, every object written to the bucket, every log record of h5lens and
every error message.
"""

from __future__ import annotations

import logging
import uuid
import warnings

import anndata as ad
import pytest
from anndata.tests.helpers import assert_equal

import h5lens
from cli_runner import h5lens as run_cli
from h5lens.cli.sample import write_sample
from h5lens.testing.http import ArchiveServer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::anndata.OldFormatWarning")

MARK = "h5lens-secret-c0ffee"  # every secret below holds it


@pytest.fixture
def seen(caplog):
    """What the test saw said (outputs, error messages); h5lens's log records join it at the
    test's end (:func:`_everything`)."""
    caplog.set_level(logging.DEBUG, logger="h5lens")
    return []


def _everything(said: list[str], caplog) -> list[str]:
    return [*said, *(r.getMessage() for r in caplog.records)]


def _run(said: list[str], *args: object, ok: bool = True) -> None:
    done = run_cli(*args)
    said.extend([done.stdout, done.stderr])
    if ok:
        assert done.returncode == 0, (args, done.stderr)
    else:
        assert done.returncode == 2, (args, done.stdout, done.stderr)


def _files(directory) -> list[str]:
    return [p.read_bytes().decode("utf-8", "replace") for p in directory.rglob("*") if p.is_file()]


def test_s3_credentials_persist_nowhere(s3, tmp_path, seen, caplog):
    secret = f"{MARK}-s3"
    prefix = f"bucket/secrets-{uuid.uuid4().hex[:8]}"
    write_sample(tmp_path / "sample.h5ad")
    s3.filesystem().put(str(tmp_path / "sample.h5ad"), f"{prefix}/data/sample.h5ad")
    source = f"s3://{prefix}/data/sample.h5ad"
    creds = ["-s", "key=testing", "-s", f"secret={secret}", "--endpoint-url", s3.endpoint_url]
    out = tmp_path / "out"
    out.mkdir()
    _run(seen, "-v", "index", source, "-o", out / "local.json", *creds)  # -v: its log lines too
    _run(seen, "index", source, "-o", f"s3://{prefix}/manifests/sample.h5ad.json", *creds)
    _run(seen, "publish", tmp_path / "sample.h5ad", f"s3://{prefix}/published.json", "--url", source, *creds)
    _run(seen, "index-many", f"s3://{prefix}/data/", "--out-dir", out / "many", "--report", out / "report.json",
         "--workers", "1", *creds)  # fmt: skip
    _run(seen, "inspect", out / "local.json", *creds)
    _run(seen, "cat", out / "local.json", "obsm/X_pca", *creds)
    _run(seen, "validate", out / "local.json", *creds)
    _run(seen, "index", f"s3://{prefix}/no/such.h5ad", "-o", out / "missing.json", *creds, ok=False)
    _run(seen, "cat", out / "local.json", "obsm/X_pca", "-s", "key=testing", "-s", f"secret={secret}",
         "--endpoint-url", "http://127.0.0.1:1", ok=False)  # fmt: skip
    options = {"key": "testing", "secret": secret, "endpoint_url": s3.endpoint_url}
    caplog.set_level(logging.DEBUG, logger="h5lens")  # the command line set its own level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ad.read_h5ad(tmp_path / "sample.h5ad")
    assert_equal(h5lens.read_anndata(f"s3://{prefix}/manifests/sample.h5ad.json", storage_options=options), expected)
    with pytest.raises(h5lens.SourceNotFoundError) as info:
        h5lens.read_anndata(f"s3://{prefix}/nope.json", storage_options=options)
    seen.append(str(info.value))
    objects = [s3.filesystem().cat(key).decode("utf-8", "replace") for key in s3.filesystem().find(prefix)]
    written = _files(tmp_path) + objects
    assert len(written) >= 6  # the manifests, the report, the objects themselves
    for text in [*written, *_everything(seen, caplog)]:
        assert MARK not in text, text[:2000]


def test_an_archive_token_and_its_signed_urls_persist_nowhere(tmp_path, seen, caplog):
    token = f"{MARK}-token"
    write_sample(tmp_path / "sample.h5ad")
    out = tmp_path / "out"
    out.mkdir()
    with ArchiveServer(tmp_path, token=token, lifetime=60) as archive:
        header = ["-s", f"headers.Authorization=Bearer {token}"]
        url = archive.url("sample.h5ad")
        _run(seen, "-v", "index", url, "-o", out / "m.json", *header)
        _run(seen, "inspect", out / "m.json", *header)
        _run(seen, "cat", out / "m.json", "obsm/X_pca", *header)
        _run(seen, "validate", out / "m.json", *header)
        _run(seen, "index", archive.url("nope.h5ad"), "-o", out / "nope.json", *header, ok=False)
        options = {"headers": {"Authorization": f"Bearer {token}"}}
        caplog.set_level(logging.DEBUG, logger="h5lens")
        h5lens.read_anndata(out / "m.json", storage_options=options)
        signed = list(archive.signed_urls)
    assert signed  # the archive did hand out signed URLs
    signatures = [u.split("?", 1)[1] for u in signed]
    for text in [*_files(out), *_everything(seen, caplog)]:
        assert MARK not in text and not any(s in text for s in signatures), text[:2000]


def test_credentials_given_per_source_prefix_persist_nowhere(s3, tmp_path, seen, caplog):
    """Credentials in the options of one URL prefix (``source_options``, ``-s PREFIX:KEY=VALUE``):
    read, validated, refused for a prefix whose endpoint does not answer, and a malformed one."""
    secret = f"{MARK}-prefix"
    prefix = f"bucket/secrets-{uuid.uuid4().hex[:8]}"
    write_sample(tmp_path / "sample.h5ad")
    s3.filesystem().put(str(tmp_path / "sample.h5ad"), f"{prefix}/sample.h5ad")
    source = f"s3://{prefix}/sample.h5ad"
    out = tmp_path / "out"
    out.mkdir()
    _run(seen, "index", source, "-o", out / "m.json", "-s", "key=testing", "-s", f"secret={secret}",
         "--endpoint-url", s3.endpoint_url)  # fmt: skip
    per_prefix = ["-s", f"s3://{prefix}/:key=testing", "-s", f"s3://{prefix}/:secret={secret}",
                  "-s", f"s3://{prefix}/:endpoint_url={s3.endpoint_url}"]  # fmt: skip
    _run(seen, "-v", "validate", out / "m.json", "--deep", *per_prefix)
    _run(seen, "cat", out / "m.json", "obsm/X_pca", *per_prefix)
    _run(seen, "cat", out / "m.json", "obsm/X_pca", *per_prefix, "-s", f"s3://{prefix}/:endpoint_url=http://127.0.0.1:1",
         ok=False)  # fmt: skip
    _run(seen, "cat", out / "m.json", "obsm/X_pca", "-s", f"s3://{prefix}/secret={secret}", ok=False)  # no colon
    caplog.set_level(logging.DEBUG, logger="h5lens")
    options = {f"s3://{prefix}/": {"key": "testing", "secret": secret, "endpoint_url": s3.endpoint_url}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ad.read_h5ad(tmp_path / "sample.h5ad")
    assert_equal(h5lens.read_anndata(out / "m.json", source_options=options), expected)
    for wrong in ({f"s3://{prefix}/": secret}, {f"s3://{prefix}/": {**options[f"s3://{prefix}/"], "endpoint_url": "http://127.0.0.1:1"}}):
        with pytest.raises(h5lens.H5LensError) as info:
            h5lens.read_anndata(out / "m.json", source_options=wrong)
        seen.append(str(info.value))
    for text in [*_files(tmp_path), *_everything(seen, caplog)]:
        assert MARK not in text, text[:2000]


def _unpacked(data: bytes) -> str:
    """A file's text, and if it holds a zstd frame (Icechunk's snapshots, manifests and
    config are compressed after a header of their own), the frame's content too: a secret
    written there would not show in the compressed bytes."""
    import numcodecs

    text = data.decode("utf-8", "replace")
    start = data.find(b"\x28\xb5\x2f\xfd")
    if start >= 0:
        text += bytes(numcodecs.Zstd().decode(data[start:])).decode("utf-8", "replace")
    return text


def test_s3_credentials_reach_no_icechunk_repository(s3, tmp_path, seen, caplog):
    """Sources on S3 indexed into Icechunk repositories, one local and one on the bucket, with
    a marked secret: no file or object of either holds it (compressed or not), nor anything said."""
    pytest.importorskip("icechunk")
    secret = f"{MARK}-icechunk"
    prefix = f"bucket/secrets-{uuid.uuid4().hex[:8]}"
    write_sample(tmp_path / "sample.h5ad")
    s3.filesystem().put(str(tmp_path / "sample.h5ad"), f"{prefix}/data/sample.h5ad")
    source = f"s3://{prefix}/data/sample.h5ad"
    creds = ["-s", "key=testing", "-s", f"secret={secret}", "--endpoint-url", s3.endpoint_url]
    local_repo = f"icechunk://{tmp_path / 'repo'}"
    _run(seen, "-v", "index", source, "-o", local_repo, *creds)
    _run(seen, "index", source, "-o", f"icechunk://s3://{prefix}/repo", *creds)
    _run(seen, "inspect", local_repo, *creds)
    options = {"key": "testing", "secret": secret, "endpoint_url": s3.endpoint_url}
    caplog.set_level(logging.DEBUG, logger="h5lens")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ad.read_h5ad(tmp_path / "sample.h5ad")
    assert_equal(h5lens.read_anndata(local_repo, storage_options=options), expected)
    files = [p for p in (tmp_path / "repo").rglob("*") if p.is_file()]
    objects = s3.filesystem().find(f"{prefix}/repo")
    assert len(files) >= 5 and len(objects) >= 5  # config, snapshots, manifests, transactions
    written = [_unpacked(p.read_bytes()) for p in files] + [_unpacked(s3.filesystem().cat(k)) for k in objects]
    assert any("sample.h5ad" in text for text in written)  # the unpacking reads the references
    for text in [*written, *_everything(seen, caplog)]:
        assert MARK not in text, text[:2000]
