"""HTTP(S) sources (public archives serve NWB, h5ad and netCDF over HTTPS): a local file
server on 127.0.0.1 that answers ``Range`` as such archives do, and one that ignores it.

Index and read over HTTP compare with h5py and ``anndata.read_h5ad`` on the same file;
a server that ignores ``Range`` is refused in one line naming the URL, after at most one
response (never a download of the whole file per chunk).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import anndata as ad
import h5py
import numpy as np
import pytest
from anndata.tests.helpers import assert_equal

import h5lens
from cli_runner import h5lens as run_cli
from h5lens.cli.sample import write_sample
from h5lens.fetch.clients import CLIENT_ENV, FsspecClient, HTTPClient, ObstoreClient, open_client
from h5lens.fetch.http_client import signature_expiry
from h5lens.testing.http import ArchiveServer, FileServer
from h5lens.testing.s3 import free_port

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::anndata.OldFormatWarning")


@pytest.fixture
def files(tmp_path):
    """An anndata-written h5ad and an h5py file of many small gzip chunks, in one directory."""
    write_sample(tmp_path / "sample.h5ad")
    rng = np.random.default_rng(5)
    with h5py.File(tmp_path / "chunks.h5", "w") as f:
        f.create_dataset("x", data=rng.random((3000, 7)), chunks=(50, 7), compression="gzip", shuffle=True)
        f.create_dataset("labels", data=np.arange(1000, dtype="i4"), chunks=(64,))
        f["x"].attrs["units"] = "m"
    return tmp_path


@pytest.fixture
def server(files):
    with FileServer(files) as running:
        yield running


@pytest.fixture(params=["obstore", "fsspec"])
def client_kind(request, monkeypatch):
    """Both clients HTTP URLs go through: obstore (plain URLs) and fsspec (everything else)."""
    monkeypatch.setenv(CLIENT_ENV, request.param)
    return request.param


def _assert_like_h5py(group, path) -> None:
    with h5py.File(path) as f:
        for name in ("x", "labels"):
            np.testing.assert_array_equal(group[name][...], f[name][...])
        assert group["x"].attrs["units"] == f["x"].attrs["units"]


def test_client_choice_for_http_urls():
    """An HTTP URL gets an HTTPClient (redirects resolved once), which reads, until it knows
    better, through the reader of the URL itself: obstore for a plain URL; fsspec's HTTP
    filesystem for a query string (signed URLs), headers or other options. Nothing is sent."""
    def reader(url, options=None):
        client = open_client(url, options)
        assert isinstance(client, HTTPClient)
        return client._inner

    assert isinstance(reader("https://host/data/file.nwb"), ObstoreClient)
    assert isinstance(reader("https://host/file.nwb?X-Amz-Signature=abc"), FsspecClient)
    assert isinstance(reader("https://host/file.nwb", {"headers": {"Authorization": "x"}}), FsspecClient)


def test_index_and_read_over_http(server, files, client_kind):
    url = server.url("chunks.h5")
    manifest = h5lens.index(url, inline_threshold=0)
    assert manifest.sources[0].url == url and manifest.sources[0].size == (files / "chunks.h5").stat().st_size
    assert manifest.sources[0].etag  # the server's ETag identifies the version
    server.stats.reset()
    group = h5lens.open_group(manifest)
    _assert_like_h5py(group, files / "chunks.h5")
    assert server.stats.whole_gets == 0  # ranges only: never the whole file


def test_anndata_over_http_reads_as_read_h5ad(server, files, client_kind):
    manifest = h5lens.index(server.url("sample.h5ad"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ad.read_h5ad(files / "sample.h5ad")
    assert_equal(h5lens.read_anndata(manifest), expected)
    assert_equal(h5lens.read_anndata(manifest, lazy=True).to_memory(), expected)


def test_query_string_urls_read_through_fsspec(server, files):
    """A signed URL's query string stays on every request (the server ignores it here)."""
    url = server.url("chunks.h5") + "?X-Amz-Signature=abc&X-Amz-Expires=3600"
    manifest = h5lens.index(url, inline_threshold=0)
    assert manifest.sources[0].url == url
    _assert_like_h5py(h5lens.open_group(manifest), files / "chunks.h5")


def test_cli_index_and_cat_over_http(server, files, tmp_path):
    out = tmp_path / "chunks.json"
    done = run_cli("index", server.url("chunks.h5"), "-o", out)
    assert done.returncode == 0, done.stderr
    shown = run_cli("cat", out, "labels")
    assert shown.returncode == 0, shown.stderr
    with h5py.File(files / "chunks.h5") as f:
        assert str(int(f["labels"][0])) in shown.stdout and str(int(f["labels"][-1])) in shown.stdout


# ---------------------------------------------------------------- servers that ignore Range


@pytest.fixture
def no_range_server(files):
    with FileServer(files, ranges=False) as running:
        yield running


def test_a_server_that_ignores_range_is_refused_when_indexing(no_range_server, client_kind):
    url = no_range_server.url("chunks.h5")
    with pytest.raises(h5lens.SourceReadError, match="ignores HTTP Range") as info:
        h5lens.index(url)
    assert url in str(info.value) and "\n" not in str(info.value)
    assert no_range_server.stats.whole_gets <= 1  # one answer, not one per block


def test_a_server_that_ignores_range_is_refused_when_reading(server, no_range_server, files, client_kind):
    manifest = h5lens.index(server.url("chunks.h5"), inline_threshold=0)
    group = h5lens.open_group(manifest, source_urls={server.url("chunks.h5"): no_range_server.url("chunks.h5")}, verify=False)
    with pytest.raises(h5lens.SourceReadError, match="ignores HTTP Range"):
        group["x"][...]
    assert no_range_server.stats.whole_gets <= 1


def test_cli_refuses_a_server_that_ignores_range_in_one_line(no_range_server, tmp_path):
    done = run_cli("index", no_range_server.url("chunks.h5"), "-o", tmp_path / "m.json")
    assert "ignores HTTP Range" in done.error_line()
    assert not (tmp_path / "m.json").exists()


def test_missing_file_over_http_is_named(server):
    url = server.url("nope.h5")
    with pytest.raises(h5lens.SourceNotFoundError, match="nope.h5"):
        h5lens.index(url)


@pytest.mark.parametrize("kind", ["obstore", "fsspec"])
def test_no_unclosed_session_warnings(server, kind):
    """A process that indexes and reads over HTTP, then exits, leaves no session open."""
    script = textwrap.dedent(
        f"""
        import gc, warnings
        warnings.simplefilter("always")
        import h5lens
        m = h5lens.index({server.url("chunks.h5")!r}, inline_threshold=0)
        g = h5lens.open_group(m)
        g["x"][:10]
        del g
        gc.collect()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env={**_env(), CLIENT_ENV: kind}
    )
    assert done.returncode == 0, done.stderr
    assert "Unclosed" not in done.stderr and "unclosed" not in done.stderr, done.stderr


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


# ---------------------------------------------------------------- servers that are not there


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("kind", ["auto", "fsspec", "obstore"])
def test_a_host_that_does_not_answer_is_not_a_missing_file(server, kind, scheme, tmp_path, monkeypatch):
    """fsspec's HTTP filesystem says FileNotFoundError for a host it cannot connect to: h5lens
    says the endpoint cannot be reached (a StorageError, after the probe's attempts), and
    keeps "no such file" for a server that answers 404. obstore alone (forced) says why in
    its own words (its failures carry no type that says "no connection")."""
    from h5lens.fetch.backend_errors import PROBE_ATTEMPTS

    monkeypatch.setenv(CLIENT_ENV, kind)
    down = f"{scheme}://127.0.0.1:{free_port()}/x.h5ad"
    said = f"{down}: cannot reach the storage endpoint" if kind != "obstore" else f"{down}: "
    for attempt in (lambda: h5lens.index(down), lambda: h5lens.Manifest.load(down)):
        with pytest.raises(h5lens.StorageError) as info:
            attempt()
        assert type(info.value) is h5lens.StorageError, info.value  # not SourceNotFoundError, not SourceReadError
        assert str(info.value).startswith(said), info.value
        if kind != "obstore":  # the attempts fsspec made (obstore's first: the probe policy's, too)
            assert str(info.value).endswith(f"after {PROBE_ATTEMPTS} attempts"), info.value
    line = run_cli("index", down, "-o", tmp_path / "x.json").error_line()
    assert line.startswith(said), line
    with pytest.raises(h5lens.SourceNotFoundError, match="no such file"):
        h5lens.index(server.url("missing.h5"))


# ---------------------------------------------------------------- archives: a token, then a signed redirect

TOKEN = "h5lens-test-token-5f1c"  # recognizable: no output may hold it


@pytest.fixture
def archive(files):
    """An archive whose signed object URLs hold for a minute (longer than any test here)."""
    with ArchiveServer(files, token=TOKEN, lifetime=60) as running:
        yield running


def _with_token() -> dict:
    return {"headers": {"Authorization": f"Bearer {TOKEN}"}}


def test_an_archive_url_redirects_once_and_is_recorded_as_given(archive, files, tmp_path):
    """Index, open and read_anndata of an asset URL behind a token: one redirect in all (the
    target reused while its signature holds, by every reader of the process); every read
    goes straight to the object; the manifest records the URL given, with neither the
    token nor a signature."""
    url = archive.url("sample.h5ad")
    manifest = h5lens.index(url, storage_options=_with_token())
    assert manifest.sources[0].url == url and manifest.sources[0].size == (files / "sample.h5ad").stat().st_size
    assert_equal(h5lens.read_anndata(manifest, storage_options=_with_token()), ad.read_h5ad(files / "sample.h5ad"))
    # one request to the asset URL in all; the check, the scan's and the reads' to the object
    assert archive.archive.asset_requests == archive.archive.redirects == 1, archive.archive
    assert archive.archive.object_requests >= 3, archive.archive
    manifest.to_json(tmp_path / "m.json")
    written = (tmp_path / "m.json").read_text()
    assert url in written and TOKEN not in written and "Signature" not in written
    assert not any(signed in written for signed in archive.signed_urls)


@pytest.mark.parametrize("dated", [True, False], ids=["expiry-in-query", "expiry-unknown"])
def test_an_expired_signature_is_resolved_again(files, dated):
    """After the signature expired: a target whose expiry its query says is resolved again
    before it is used (no refusal); one whose expiry nobody can read is refused once (403),
    resolved again and the read sent once more. One redirect per signature lifetime."""
    import time

    with ArchiveServer(files, token=TOKEN, lifetime=3, dated=dated) as archive:
        url = archive.url("chunks.h5")
        manifest = h5lens.index(url, storage_options=_with_token(), inline_threshold=0)
        time.sleep(4)  # every signature handed out so far has expired
        archive.archive.reset()
        group = h5lens.open_group(manifest, storage_options=_with_token(), verify=False)
        _assert_like_h5py(group, files / "chunks.h5")
        assert archive.archive.redirects == 1, archive.archive  # however many reads were refused at once
        if dated:
            assert archive.archive.expired == 0, archive.archive
        else:  # the reads in flight on the expired target were refused, then sent to the new one
            assert archive.archive.expired >= 1, archive.archive


def test_an_archive_without_the_token_and_a_missing_asset_are_named_by_the_url_given(archive):
    url = archive.url("sample.h5ad")
    with pytest.raises(h5lens.AccessDeniedError) as denied:
        h5lens.index(url)
    assert str(denied.value).startswith(f"{url}: access denied") and "401" in str(denied.value)
    missing = archive.url("nope.h5")
    with pytest.raises(h5lens.SourceNotFoundError) as info:
        h5lens.index(missing, storage_options=_with_token())
    said = str(info.value)
    assert said.startswith(f"{missing}: no such file") and "objects/" not in said and TOKEN not in said, said


def test_cli_reads_an_archive_with_a_header_option(archive, files, tmp_path):
    """``-s headers.Authorization=…``: the command line's way to send a header."""
    out = tmp_path / "chunks.json"
    header = ["-s", f"headers.Authorization=Bearer {TOKEN}"]
    done = run_cli("index", archive.url("chunks.h5"), "-o", out, *header)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    shown = run_cli("cat", out, "labels", *header)
    assert shown.returncode == 0, shown.stderr
    with h5py.File(files / "chunks.h5") as f:
        assert str(int(f["labels"][-1])) in shown.stdout
    assert TOKEN not in out.read_text() + done.stdout + shown.stdout


def test_signature_expiry_forms():
    """The expiry of the signed URLs archives hand out, as their query says it."""
    assert signature_expiry("https://b.s3.amazonaws.com/k?X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-Signature=s") == 1767229200.0
    assert signature_expiry("https://storage.googleapis.com/b/k?X-Goog-Date=20260101T000000Z&X-Goog-Expires=60") == 1767225660.0
    assert signature_expiry("https://d.cloudfront.net/k?Expires=1767225600&Signature=s") == 1767225600.0
    assert signature_expiry("https://a.blob.core.windows.net/c/k?se=2026-01-01T00:00:00Z&sig=s") == 1767225600.0
    assert signature_expiry("https://host/k?token=abc") is None


def test_a_published_manifest_and_one_small_array_take_three_requests(server, files, client_kind):
    """Opening a JSON manifest served over HTTP and reading one small array: the manifest,
    one check of its source (whose answer brings the file's first bytes too), the data."""
    manifest = h5lens.index(server.url("chunks.h5"), inline_threshold=0)
    manifest.to_json(files / "chunks.json")  # beside its source: it records "chunks.h5"
    server.stats.reset()
    group = h5lens.open_group(server.url("chunks.json"))
    with h5py.File(files / "chunks.h5") as f:
        np.testing.assert_array_equal(group["labels"][:5], f["labels"][:5])
    assert server.stats.requests <= 3, server.stats
    assert server.stats.whole_gets == 0
