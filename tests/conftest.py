"""Shared fixtures: a real S3 endpoint (moto's server on 127.0.0.1), started by the tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from h5lens.testing.s3 import CountingProxy, LocalS3

# The property tests draw the same examples on every run (a seed from each test's name), so
# a CI run on a commit gives the same verdict twice. `make explore` (H5LENS_EXPLORE=1) draws
# fresh ones, many of them: that is where new cases are found, and each one found becomes
# a test of its own.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("H5LENS_EXPLORE") else "repeatable")


@pytest.fixture(autouse=True)
def _fast_reads_as_before():
    """A test that calls h5lens.fast_reads leaves the next one the state it found."""
    from h5lens.fast import preserved

    with preserved():
        yield


@pytest.fixture(autouse=True)
def _codecs_follow_filters(monkeypatch):
    """Every array any test indexes: its codecs are libhdf5's filters (tests/pipeline_oracle.py)."""
    from h5lens.scan import build
    from pipeline_oracle import assert_codecs_follow_filters

    made = build._array

    def checked(ds, *args, **kwargs):  # noqa: ANN001, ANN202 - the scanner's own signature
        doc, table = made(ds, *args, **kwargs)
        assert_codecs_follow_filters(ds, doc, table.source)
        return doc, table

    monkeypatch.setattr(build, "_array", checked)
    yield


@pytest.fixture(scope="session")
def s3():
    pytest.importorskip("moto")
    with LocalS3() as server:
        server.make_bucket("bucket")
        yield server


@pytest.fixture
def s3_proxy(s3):
    """A counting proxy in front of the endpoint: requests, GETs and bytes seen."""
    with CountingProxy(s3.endpoint_url) as proxy:
        yield proxy
