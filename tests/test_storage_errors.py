"""Storage failures reach the user as the documented h5lens error naming the URL.

Real failures, made for real: a closed port on 127.0.0.1, moto without credentials or
anonymous (403), a prefix instead of an object, a missing bucket, a protocol whose fsspec
backend is not installed. The classification is by exception type and HTTP status
(botocore, aiohttp, s3fs's OSError mapping), never by searching message text.
"""

from __future__ import annotations

import uuid

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.fetch.backend_errors import http_status, is_transient, storage_error
from h5lens.manifest.destination import check_destination
from h5lens.manifest.locations import same_location
from h5lens.testing.s3 import free_port


@pytest.fixture
def uploaded(s3, tmp_path):
    local = tmp_path / "x.h5"
    with h5py.File(local, "w") as f:
        f["x"] = np.arange(10)
    key = f"bucket/{uuid.uuid4().hex}/x.h5"
    s3.filesystem().put(str(local), key)
    return f"s3://{key}"


def test_unreachable_endpoint(uploaded):
    options = {"key": "k", "secret": "s", "endpoint_url": f"http://127.0.0.1:{free_port()}",
               "config_kwargs": {"retries": {"max_attempts": 1}}}
    with pytest.raises(h5lens.StorageError, match=r"cannot reach the storage endpoint") as info:
        h5lens.index(uploaded, storage_options=options)
    assert uploaded in str(info.value) and len(str(info.value).splitlines()) == 1


def test_no_credentials(s3, uploaded, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(h5lens.AccessDeniedError, match="no credentials") as info:
        h5lens.index(uploaded, storage_options={"endpoint_url": s3.endpoint_url, "skip_instance_cache": True})
    assert uploaded in str(info.value)
    assert isinstance(info.value, PermissionError)


def test_anonymous_access_refused_says_so(s3, uploaded):
    with pytest.raises(h5lens.AccessDeniedError, match="anonymous access") as info:
        h5lens.index(uploaded, storage_options={"endpoint_url": s3.endpoint_url, "anon": True})
    assert uploaded in str(info.value)


def test_a_prefix_is_not_a_file(s3, uploaded):
    folder = uploaded.rsplit("/", 1)[0] + "/"
    with pytest.raises(h5lens.NotHDF5Error, match="a directory"):
        h5lens.index(folder, storage_options=s3.storage_options())


def test_missing_object_and_bucket(s3):
    with pytest.raises(h5lens.SourceNotFoundError):
        h5lens.index("s3://bucket/no/such.h5", storage_options=s3.storage_options())
    with pytest.raises(h5lens.StorageError, match="no-such-bucket"):
        check_destination("s3://no-such-bucket/m.json", storage_options=s3.storage_options())


def test_backend_not_installed(tmp_path):
    try:  # gcsfs and adlfs are test dependencies (test_gcs.py, test_azure.py): Alibaba's OSS is not
        import ossfs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("ossfs is installed here")
    with pytest.raises(h5lens.StorageError, match="not installed") as info:
        h5lens.index("oss://bucket/x.h5")
    assert "oss://bucket/x.h5" in str(info.value)


def test_unknown_protocol():
    with pytest.raises(h5lens.InvalidOptionError, match="zzz"):
        h5lens.index("zzz://bucket/x.h5")


def test_transient_is_decided_by_status_and_type():
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    def client_error(status: int, code: str) -> OSError:
        cause = ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")
        error = OSError(22, "wrapped by s3fs")
        error.__cause__ = cause
        return error

    assert http_status(client_error(503, "SlowDown")) == 503
    assert is_transient(client_error(503, "SlowDown"))
    assert is_transient(client_error(500, "InternalError"))
    assert not is_transient(client_error(416, "InvalidRange"))  # a range past the end never gets better
    assert not is_transient(client_error(403, "AccessDenied"))
    assert is_transient(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert is_transient(ConnectionResetError())
    assert not is_transient(NoCredentialsError())
    assert not is_transient(ValueError("500 in the message is not a status"))
    assert isinstance(storage_error(NoCredentialsError(), "s3://b/k"), h5lens.AccessDeniedError)


def test_same_location_sees_through_links_and_spellings(tmp_path):
    target = tmp_path / "data.h5"
    target.write_bytes(b"x")
    (tmp_path / "link.h5").symlink_to(target)
    hard = tmp_path / "hard.h5"
    hard.hardlink_to(target)
    for spelling in (str(target), f"file://{target}", str(tmp_path / "." / "data.h5"), str(tmp_path / "link.h5"), str(hard)):
        assert same_location(spelling, str(target)), spelling
    assert same_location("s3://bucket/a/b.h5", "s3://bucket/a/b.h5/")
    assert not same_location("s3://bucket/a/b.h5", "s3://bucket/a/c.h5")


def test_to_json_refuses_to_overwrite_its_source(tmp_path):
    path = tmp_path / "same.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    before = path.read_bytes()
    manifest = h5lens.index(path)
    for destination in (path, f"file://{path}", tmp_path / "sub" / ".." / "same.h5"):
        with pytest.raises(h5lens.InvalidOptionError, match="overwrite"):
            manifest.to_json(destination)
    assert path.read_bytes() == before


def test_local_destination_checks(tmp_path):
    with pytest.raises(h5lens.StorageError, match="does not exist"):
        check_destination(str(tmp_path / "nodir" / "m.json"))
    with pytest.raises(h5lens.InvalidOptionError, match="directory"):
        check_destination(str(tmp_path))
    check_destination(str(tmp_path / "m.json"))  # fine


def test_missing_object_in_an_existing_bucket_is_not_a_missing_bucket(s3):
    with pytest.raises(h5lens.SourceNotFoundError) as info:
        h5lens.Manifest.from_json("s3://bucket/some/dir/nope.json", storage_options=s3.storage_options())
    assert "no such bucket" not in str(info.value)
    with pytest.raises(h5lens.SourceNotFoundError, match="no such bucket"):
        h5lens.Manifest.from_json("s3://no-such-bucket/nope.json", storage_options=s3.storage_options())


# -- an endpoint that does not answer: a StorageError within the probe's bounds -----------------


@pytest.mark.parametrize("kind", ["auto", "fsspec"])
def test_an_endpoint_nobody_listens_on_is_a_storage_error_within_the_probe(s3, uploaded, kind, monkeypatch):
    """The file to index, a manifest, a manifest's sources: each names its URL, says the
    endpoint cannot be reached, and gives up after PROBE_ATTEMPTS attempts (not the retry
    policy's 8, whose backoff took 7-9 s): a StorageError, not a SourceReadError (nothing was
    read: the endpoint is what to check)."""
    from h5lens.fetch.backend_errors import PROBE_ATTEMPTS
    from h5lens.fetch.clients import CLIENT_ENV

    monkeypatch.setenv(CLIENT_ENV, kind)
    down = {"key": "k", "secret": "s", "endpoint_url": f"http://127.0.0.1:{free_port()}"}
    manifest = h5lens.index(uploaded, storage_options=s3.storage_options(), inline_threshold=0)
    manifest_url = f"s3://bucket/{uuid.uuid4().hex}/m.json"
    attempts = {
        uploaded: lambda: h5lens.index(uploaded, storage_options=down),
        manifest_url: lambda: h5lens.Manifest.load(manifest_url, storage_options=down),
        f"{uploaded} ": lambda: h5lens.open_group(manifest, storage_options=down, verify=False)["x"][...],
    }
    for url, attempt in attempts.items():
        with pytest.raises(h5lens.StorageError) as info:
            attempt()
        said = str(info.value)
        assert type(info.value) is h5lens.StorageError, said
        assert said.startswith(f"{url.strip()}: cannot reach the storage endpoint"), said
        assert len(said.splitlines()) == 1, said
        assert said.endswith(f"after {PROBE_ATTEMPTS} attempts"), said


def test_a_first_request_is_bounded_and_later_ones_get_the_whole_policy(s3, uploaded):
    """What bounds a first request: PROBE_ATTEMPTS attempts and a 5 s connect timeout,
    through obstore (its first request to an object), fsspec (a request it cannot connect
    for) and botocore (probe_options); what a user sets wins; once the object has
    answered, obstore's requests get the retry policy's attempts."""
    from h5lens.fetch import retry
    from h5lens.fetch.backend_errors import PROBE_ATTEMPTS, PROBE_CONNECT_TIMEOUT, probe_options
    from h5lens.fetch.clients import ObstoreClient, open_client
    from h5lens.fetch.fsspec_client import fsspec_options

    client = open_client(uploaded, s3.storage_options())
    assert isinstance(client, ObstoreClient)
    try:
        first = client._store()
        assert first.retry_config["max_retries"] == PROBE_ATTEMPTS - 1
        assert first.client_options["connect_timeout"] == f"{PROBE_CONNECT_TIMEOUT}s"
        assert client.get_sync(0, 8) == b"\x89HDF\r\n\x1a\n"
        assert client._store().retry_config["max_retries"] == retry.policy().attempts - 1
    finally:
        client.close()
    assert retry.policy().unanswered_attempts == PROBE_ATTEMPTS
    assert fsspec_options("s3://b/k", None)["config_kwargs"]["connect_timeout"] == PROBE_CONNECT_TIMEOUT
    assert fsspec_options("https://h/k", None)["client_kwargs"]["timeout"].sock_connect == PROBE_CONNECT_TIMEOUT
    assert probe_options("s3://b/k", None)["config_kwargs"]["retries"]["total_max_attempts"] == PROBE_ATTEMPTS
    mine = {"config_kwargs": {"connect_timeout": 30, "retries": {"total_max_attempts": 5}}}
    assert probe_options("s3://b/k", mine)["config_kwargs"] == {**mine["config_kwargs"], "read_timeout": 20}
    assert fsspec_options("s3://b/k", mine)["config_kwargs"]["connect_timeout"] == 30


def test_reading_a_manifest_without_credentials_names_it(s3, uploaded, monkeypatch):
    """The message names the manifest and says what was being read: "… while reading bytes
    0-1048576 of it (…)", never "… of (…)" with the object missing after "of". With no
    credentials anywhere the manifest is read unsigned, and the private object refuses it:
    the data needs credentials."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    url = f"s3://bucket/{uuid.uuid4().hex}/m.json"
    h5lens.index(uploaded, storage_options=s3.storage_options()).to_json(url, storage_options=s3.storage_options())
    with pytest.raises(h5lens.AccessDeniedError) as info:
        h5lens.Manifest.load(url, storage_options={"endpoint_url": s3.endpoint_url})
    said = str(info.value)
    assert said.startswith(f"{url}: access denied to unsigned requests while reading bytes 0-"), said
    assert " of it (" in said and "no credentials were found" in said, said
    assert " of (" not in said and info.value.cli_message is not None and "-s key=" in info.value.cli_message


def test_an_action_is_said_with_its_object():
    """storage_error's phrases: the URL first, and "it" where the action needs an object."""
    from botocore.exceptions import NoCredentialsError

    hint = (
        " (Permission denied); check the credentials and what they allow, and if the bucket is requester-pays, "
        "pass storage_options={'requester_pays': True}"
    )
    said = {
        action: str(storage_error(PermissionError(13, "Permission denied"), "s3://b/k", action))
        for action in ("checking", "reading bytes 0-8 of", "checking the destination", "writing to")
    }
    assert said == {
        "checking": f"s3://b/k: access denied while checking it{hint}",
        "reading bytes 0-8 of": f"s3://b/k: access denied while reading bytes 0-8 of it{hint}",
        "checking the destination": f"s3://b/k: access denied while checking the destination{hint}",
        "writing to": f"s3://b/k: access denied while writing to it{hint}",
    }
    assert str(storage_error(NoCredentialsError(), "s3://b/k", "reading the manifest")).startswith(
        "s3://b/k: no credentials while reading the manifest (Unable to locate credentials)"
    )


def test_a_report_record_says_its_error_in_both_wordings(s3, uploaded, monkeypatch):
    """index_many's record of a failed file: ``error`` in Python's words, ``error_cli`` in the
    command line's (where they differ), both naming the file; the report's fields are the
    ones docs/collections.md shows."""
    import json
    import re
    from pathlib import Path

    from h5lens.many.sources import Job
    from h5lens.many.task import IndexSettings, index_one

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    job = Job(uploaded, f"s3://bucket/{uuid.uuid4().hex}/x.h5.json")
    record = index_one(job, IndexSettings(storage_options={"endpoint_url": s3.endpoint_url}))
    assert record.status == "failed"
    # no credentials anywhere: the file is read unsigned, and its private object refuses that
    assert record.error.startswith(f"{uploaded}: access denied to unsigned requests") and "storage_options" in record.error
    assert record.error_cli is not None and record.error_cli.startswith(f"{uploaded}: access denied to unsigned")
    assert "-s key=" in record.error_cli and "storage_options" not in record.error_cli
    page = (Path(__file__).parents[1] / "docs" / "collections.md").read_text()
    shown = json.loads(re.search(r"--report FILE.*?```json\n(.*?)```", page, re.S).group(1))
    assert all(list(shown_record) == list(record.to_dict()) for shown_record in shown["files"])
