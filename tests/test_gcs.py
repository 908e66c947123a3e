"""Google Cloud Storage as a source and a destination (``gs://``): gcp-storage-emulator on
127.0.0.1, read through gcsfs. The checks every backend passes are in ``backends.py``.
Skipped where the emulator is not installed; a failure where CI requires it
(``H5LENS_REQUIRE_EMULATORS=1``)."""

from __future__ import annotations

import pytest

import h5lens
from backends import (
    Backend,
    check_faults,
    check_index_and_read,
    check_manifest_on_the_backend,
    check_missing,
    check_round_trips,
    check_staleness,
    emulator_or_skip,
    upload,
)
from h5lens.testing.emulators import LocalGCS, missing_gcs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::anndata.OldFormatWarning")


@pytest.fixture(scope="module")
def gcs():
    emulator_or_skip(missing_gcs())
    with LocalGCS() as server:
        server.make_bucket("bucket")
        yield server


def _backend(gcs, **options) -> Backend:
    cli = [arg for key, value in {**gcs.storage_options(), **options}.items() for arg in ("-s", f"{key}={value}")]
    return Backend(
        "gs", "bucket", {**gcs.storage_options(), **options}, cli, gcs.filesystem, lambda info: str(info["generation"]),
        gcs.endpoint_url, lambda proxy: {**gcs.storage_options(), **options, "endpoint_url": proxy},
    )  # fmt: skip


@pytest.fixture
def backend(gcs):
    return _backend(gcs)


@pytest.fixture
def files(backend, tmp_path):
    return upload(backend, tmp_path)


def test_index_and_read(backend, files):
    check_index_and_read(backend, files)


def test_manifest_on_gcs(backend, files, tmp_path):
    check_manifest_on_the_backend(backend, files, tmp_path)


def test_a_published_manifest_and_one_small_array_take_three_requests(backend, files):
    check_round_trips(backend, files)


def test_a_new_generation_is_a_stale_source(backend, files):
    check_staleness(backend, files)


def test_missing_object_and_bucket(backend, files, tmp_path):
    check_missing(backend, files, tmp_path)


def test_a_prefix_is_a_directory_not_a_missing_object(backend, files):
    """The check of a source gets the object alone (one request); a key that is no object
    but the prefix of others is still told apart from one that is not there."""
    with pytest.raises(h5lens.NotHDF5Error, match="a directory"):
        h5lens.index(backend.url(files.prefix), storage_options=backend.options)


def test_retries_under_injected_faults(backend, files):
    check_faults(backend, files)


def test_an_access_token_persists_nowhere(gcs, files, tmp_path, caplog):
    """An access token (the emulator takes any) in the options: in no manifest written, here
    or on the bucket, no error and no log record. (Python only: a token object has no
    command-line form; the command line's options are checked by test_azure.py's key.)"""
    import logging

    from google.oauth2.credentials import Credentials

    secret = "h5lens-secret-c0ffee-gcs"
    options = {"endpoint_url": gcs.endpoint_url, "token": Credentials(token=secret)}
    caplog.set_level(logging.DEBUG, logger="h5lens")
    manifest = h5lens.index(files.h5ad, storage_options=options)
    manifest.to_json(files.h5ad + ".json", storage_options=options)
    manifest.to_json(tmp_path / "m.json")
    h5lens.read_anndata(files.h5ad + ".json", storage_options=options)
    said = []
    with pytest.raises(h5lens.SourceNotFoundError) as info:
        h5lens.index(files.h5ad + ".nope", storage_options=options)
    said.append(str(info.value))
    written = [(tmp_path / "m.json").read_text(), gcs.filesystem().cat(files.h5ad + ".json").decode()]
    for text in [*written, *said, *(r.getMessage() for r in caplog.records)]:
        assert secret not in text, text[:2000]
