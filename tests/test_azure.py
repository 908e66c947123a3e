"""Azure Blob Storage as a source and a destination (``az://``, ``abfs://``): Azurite on
127.0.0.1 (npm, installed under tests/emulators by ``npm ci``), read through adlfs. The checks
every backend passes are in ``backends.py``. Skipped where Azurite is not installed; a failure
where CI requires it (``H5LENS_REQUIRE_EMULATORS=1``)."""

from __future__ import annotations

import pytest

from backends import (
    Backend,
    check_faults,
    check_index_and_read,
    check_manifest_on_the_backend,
    check_missing,
    check_round_trips,
    check_secret_persists_nowhere,
    check_staleness,
    emulator_or_skip,
    upload,
)
from h5lens.fetch.clients import CLIENT_ENV
from h5lens.testing.emulators import AZURITE_KEY, LocalAzure, missing_azure

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::anndata.OldFormatWarning")


@pytest.fixture(scope="module")
def azure():
    emulator_or_skip(missing_azure())
    with LocalAzure() as server:
        server.make_container("container")
        yield server


@pytest.fixture(params=[("az", "obstore"), ("az", "fsspec"), ("abfs", "auto")], ids=lambda p: "-".join(p))
def backend(azure, request, monkeypatch):
    """Both readers: obstore (the account's key in the connection string says all it needs)
    and adlfs; and both schemes."""
    scheme, client = request.param
    monkeypatch.setenv(CLIENT_ENV, client)
    options = azure.storage_options()
    own = f"http://127.0.0.1:{azure.port}"

    def through(proxy: str) -> dict:
        return {"connection_string": azure.connection_string.replace(own, proxy)}

    return Backend(
        scheme, "container", options, ["-s", f"connection_string={azure.connection_string}"], azure.filesystem,
        lambda info: str(info["etag"]).strip('"'), own, through,
    )  # fmt: skip


@pytest.fixture
def files(backend, tmp_path):
    return upload(backend, tmp_path)


def test_index_and_read(backend, files):
    check_index_and_read(backend, files)


def test_manifest_on_azure(backend, files, tmp_path):
    check_manifest_on_the_backend(backend, files, tmp_path)


def test_a_published_manifest_and_one_small_array_take_three_requests(backend, files):
    check_round_trips(backend, files)


def test_a_new_etag_is_a_stale_source(backend, files):
    check_staleness(backend, files)


def test_missing_object_and_container(backend, files, tmp_path):
    check_missing(backend, files, tmp_path)


def test_retries_under_injected_faults(backend, files):
    check_faults(backend, files)


def test_the_account_key_persists_nowhere(backend, files, tmp_path, caplog):
    check_secret_persists_nowhere(backend, files, AZURITE_KEY, tmp_path, caplog)
