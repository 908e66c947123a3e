"""Against a real S3 endpoint (moto on 127.0.0.1): index, publish, read, freshness, faults."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import warnings
from dataclasses import replace
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest
import s3fs
from anndata.tests.helpers import assert_equal

import h5lens
from cli_runner import h5lens as run_cli
from h5lens.cli.sample import write_sample
from h5lens.testing.s3 import CountingProxy
from oracles import assert_chunk_tables_match_libhdf5

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::anndata.OldFormatWarning")


def _key(name: str) -> str:
    return f"bucket/{uuid.uuid4().hex}/{name}"


@pytest.fixture
def chunky(tmp_path):
    """An h5ad whose X has 400 chunks of one row each block (gzip), plus the sample's elements."""
    path = tmp_path / "chunky.h5ad"
    rng = np.random.default_rng(7)
    x = rng.random((800, 60)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.AnnData(X=x).write_h5ad(path)
    with h5py.File(path, "a") as f:
        del f["X"]
        ds = f.create_dataset("X", data=x, chunks=(2, 60), compression="gzip", compression_opts=1)
        ds.attrs["encoding-type"] = "array"
        ds.attrs["encoding-version"] = "0.2.0"
    return path


def _upload(s3, local, name) -> str:
    key = _key(name)
    s3.filesystem().put(str(local), key)
    return f"s3://{key}"


def test_index_from_s3_matches_libhdf5_and_anndata(s3, s3_proxy, tmp_path):
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    options = s3.storage_options(s3_proxy.endpoint_url)
    remote = h5lens.index(url, storage_options=options)
    gets = s3_proxy.stats.gets
    assert 0 < gets <= 3  # metadata through a block cache: a handful of requests for this file
    assert assert_chunk_tables_match_libhdf5(h5lens.index(url, storage_options=options, inline_threshold=0), str(local))
    assert_equal(h5lens.read_anndata(remote, storage_options=options), ad.read_h5ad(local))
    here = h5lens.index(local)
    assert remote.nodes == here.nodes
    for path, table in here.chunks.items():
        np.testing.assert_array_equal(remote.chunks[path].offset, table.offset)
        assert remote.chunks[path].inline == table.inline
    assert remote.sources[0].url == url and remote.sources[0].etag


def test_smaller_read_blocks_trade_requests_for_bytes(s3, s3_proxy, chunky):
    url = _upload(s3, chunky, "chunky.h5ad")
    options = s3.storage_options(s3_proxy.endpoint_url)
    default = h5lens.index(url, storage_options=options, inline_threshold=0)
    default_gets, default_bytes = s3_proxy.stats.gets, s3_proxy.stats.bytes
    s3_proxy.stats.reset()
    small = h5lens.index(url, storage_options=options, inline_threshold=0, read_block_size=4096)
    assert small.to_dict() == default.to_dict()
    assert s3_proxy.stats.gets > default_gets
    assert s3_proxy.stats.bytes < default_bytes
    with pytest.raises(h5lens.InvalidOptionError, match="read_block_size"):
        h5lens.index(url, storage_options=options, read_block_size=10)


def test_read_eager_and_lazy_from_s3(s3, s3_proxy, tmp_path):
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest_url = url + ".json"
    h5lens.index(url, storage_options=options).to_json(manifest_url, storage_options=options)
    expected = ad.read_h5ad(local)
    assert_equal(h5lens.read_anndata(manifest_url, storage_options=options), expected)
    lazy = h5lens.read_anndata(manifest_url, storage_options=options, lazy=True)
    np.testing.assert_array_equal(lazy.obsm["X_pca"][:7].compute(), expected.obsm["X_pca"][:7])


def test_full_read_merges_neighbouring_chunks(s3, s3_proxy, chunky):
    url = _upload(s3, chunky, "chunky.h5ad")
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
    n_chunks = manifest.chunks["X"].n_present
    group = h5lens.open_group(manifest, storage_options=options)
    s3_proxy.stats.reset()
    with h5py.File(chunky) as f:
        np.testing.assert_array_equal(group["X"][...], f["X"][...])
    assert s3_proxy.stats.gets < n_chunks / 10, (s3_proxy.stats.gets, n_chunks)


def test_slice_reads_at_most_twice_what_it_needs(s3, s3_proxy, chunky):
    url = _upload(s3, chunky, "chunky.h5ad")
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
    table = manifest.chunks["X"]
    lazy = h5lens.read_anndata(manifest, storage_options=options, lazy=True)
    s3_proxy.stats.reset()
    rows = lazy.X[100:108].compute()  # 1% of the rows: 4 chunks
    with h5py.File(chunky) as f:
        np.testing.assert_array_equal(rows, f["X"][100:108])
    needed = int(table.length[50:54].sum())
    assert s3_proxy.stats.bytes <= 2 * needed + (64 << 10), (s3_proxy.stats.bytes, needed)
    assert s3_proxy.stats.bytes <= 0.02 * int(table.length.sum())


def test_stale_source_is_refused_after_overwrite(s3, tmp_path):
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    options = s3.storage_options()
    manifest = h5lens.index(url, storage_options=options)
    with h5py.File(local, "a") as f:
        f["uns"].attrs["changed"] = True
    s3.filesystem().put(str(local), url.removeprefix("s3://"))
    with pytest.raises(h5lens.StaleSourceError, match=url):
        h5lens.open_group(manifest, storage_options=options)
    # an eager read checks while its bytes are on their way: refused all the same
    with pytest.raises(h5lens.StaleSourceError, match=url):
        h5lens.read_anndata(manifest, storage_options=options)
    h5lens.open_group(manifest, storage_options=options, verify=False)  # opt-out


def test_an_eager_read_of_a_deleted_object_names_it(s3, tmp_path):
    """The eager read's prefetch asks for the bytes of an object that is gone before its
    check has answered: the error is the check's, naming the object."""
    url = _upload(s3, write_sample(tmp_path / "gone.h5ad"), "gone.h5ad")
    options = s3.storage_options()
    manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
    s3.filesystem().rm(url.removeprefix("s3://"))
    with pytest.raises(h5lens.SourceNotFoundError, match=url) as info:
        h5lens.read_anndata(manifest, storage_options=options)
    assert "is not there" in str(info.value)


def test_faults_are_retried_without_corrupting(s3, chunky):
    url = _upload(s3, chunky, "chunky.h5ad")
    with CountingProxy(s3.endpoint_url, fault_rate=0.3, seed=3) as flaky:
        options = s3.storage_options(flaky.endpoint_url)
        manifest = h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0)
        group = h5lens.open_group(manifest, storage_options=options, verify=False)
        with h5py.File(chunky) as f:
            np.testing.assert_array_equal(group["X"][...], f["X"][...])
        assert flaky.stats.injected_faults > 0


@pytest.mark.parametrize("client", ["obstore", "fsspec"])
def test_every_kind_of_fault_is_survived_exactly(s3, chunky, client, monkeypatch):
    """One request in five fails (503, 500, a body cut off halfway, a reset connection):
    indexing through the faults and reading through them give libhdf5's values."""
    from h5lens.fetch import retry
    from h5lens.fetch.clients import CLIENT_ENV
    from h5lens.testing.s3 import FAULTS

    monkeypatch.setenv(CLIENT_ENV, client)
    # every attempt the policy allows, without its waits between them (they only cost time here)
    monkeypatch.setattr(retry, "POLICY", retry.RetryPolicy(first_backoff=0.001, max_backoff=0.005))
    # botocore's and s3fs's own retries off: h5lens's policy alone gets past every fault
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    url = _upload(s3, chunky, "chunky.h5ad")
    with CountingProxy(s3.endpoint_url, fault_rate=0.2, faults=FAULTS, seed=11) as flaky:
        options = s3.storage_options(flaky.endpoint_url)
        manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
        assert_chunk_tables_match_libhdf5(manifest, chunky)
        with h5py.File(chunky) as f:
            expected = f["X"][...]
        group = h5lens.open_group(manifest, storage_options=options)
        np.testing.assert_array_equal(group["X"][...], expected)
        for start in range(0, 800, 40):  # a fresh store each time: requests of their own
            group = h5lens.open_group(manifest, storage_options=options)
            np.testing.assert_array_equal(group["X"][start : start + 9], expected[start : start + 9])
        assert flaky.stats.injected_faults >= 5, flaky.stats


def test_a_total_outage_ends_in_one_line(s3, chunky, tmp_path, monkeypatch):
    """Every request fails: the obstore client gives up after the retry policy's attempts
    (and so does the fsspec client it falls back to), and the CLI says so in one line."""
    from cli_runner import h5lens as run_cli
    from h5lens.fetch import retry

    monkeypatch.setattr(retry, "POLICY", retry.RetryPolicy(attempts=3, first_backoff=0.01))
    url = _upload(s3, chunky, "chunky.h5ad")
    manifest_path = tmp_path / "m.json"
    h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0).to_json(manifest_path)
    with CountingProxy(s3.endpoint_url, fault_rate=1.0, faults=("503", "reset")) as broken:
        creds = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", broken.endpoint_url]
        done = run_cli("cat", manifest_path, "X", "--no-verify", *creds, env={**_env(), "AWS_MAX_ATTEMPTS": "1"})
        line = done.error_line()
        assert url in line
        out = tmp_path / "again.json"
        again = run_cli("index", url, "-o", out, *creds, env={**_env(), "AWS_MAX_ATTEMPTS": "1"})
        assert url in again.error_line() and not out.exists()


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_a_request_that_keeps_failing_names_key_and_range(s3, chunky, monkeypatch):
    from h5lens.fetch import retry

    # the policy's full patience (8 attempts, up to 60 s) is for real outages, not this test
    monkeypatch.setattr(retry, "POLICY", retry.RetryPolicy(attempts=3, first_backoff=0.01))
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)  # s3fs's own, a class setting
    url = _upload(s3, chunky, "chunky.h5ad")
    manifest = h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0)
    with CountingProxy(s3.endpoint_url, fault_rate=1.0) as broken:
        # botocore's and s3fs's own retries multiply every layer's: keep this test short
        options = {**s3.storage_options(broken.endpoint_url), "config_kwargs": {"retries": {"max_attempts": 1}}}
        group = h5lens.open_group(manifest, storage_options=options, verify=False)
        with pytest.raises(h5lens.SourceReadError) as info:
            group["X"][:2]
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert url in str(info.value) and "'X/c/0/0'" in notes  # the source, and the chunk key


# Backend retries off (botocore: one attempt; s3fs does not retry ServiceUnavailable, which
# fail_next_gets answers), so these test h5lens's own layer.
NO_BACKEND_RETRIES = {"config_kwargs": {"retries": {"max_attempts": 1}}}


def test_h5lens_retries_transient_failures_itself(s3, chunky):
    url = _upload(s3, chunky, "chunky.h5ad")
    manifest = h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0)
    with CountingProxy(s3.endpoint_url) as proxy:
        options = {**s3.storage_options(proxy.endpoint_url), **NO_BACKEND_RETRIES}
        group = h5lens.open_group(manifest, storage_options=options, verify=False)
        proxy.fail_next_gets(2)  # h5lens makes up to 3 attempts
        with h5py.File(chunky) as f:
            np.testing.assert_array_equal(group["X"][:2], f["X"][:2])
        assert proxy.stats.injected_faults == 2


def test_a_range_past_the_end_is_not_retried(s3, chunky):
    url = _upload(s3, chunky, "chunky.h5ad")
    manifest = h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0)
    size = manifest.sources[0].size
    offset = manifest.chunks["X"].offset.copy()
    offset[0] = size + 100  # past the end of the object
    manifest = replace(manifest, chunks={**manifest.chunks, "X": replace(manifest.chunks["X"], offset=offset)})
    with CountingProxy(s3.endpoint_url) as proxy:
        options = {**s3.storage_options(proxy.endpoint_url), **NO_BACKEND_RETRIES}
        group = h5lens.open_group(manifest, storage_options=options, verify=False)
        proxy.stats.reset()
        with pytest.raises(h5lens.SourceReadError, match="past the end") as info:
            group["X"][:2]
        assert proxy.stats.gets == 1
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "'X/c/0/0'" in notes  # the chunk key, named by the store


def test_source_options_override_for_sources(s3, s3_proxy, tmp_path):
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    manifest_path = tmp_path / "m.json"  # the manifest is local, the source on S3
    h5lens.index(url, storage_options=s3.storage_options()).to_json(manifest_path)
    group = h5lens.open_group(manifest_path, source_options=s3.storage_options(s3_proxy.endpoint_url))
    with h5py.File(local) as f:
        np.testing.assert_array_equal(group["obsm/X_pca"][...], f["obsm/X_pca"][...])
    assert s3_proxy.stats.gets > 0


def test_source_urls_remap_to_a_local_mirror(s3, tmp_path):
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    manifest = h5lens.index(url, storage_options=s3.storage_options())
    group = h5lens.open_group(manifest, source_urls={url: str(local)}, verify=False)
    with h5py.File(local) as f:
        np.testing.assert_array_equal(group["X/data"][...], f["X/data"][...])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "h5lens.cli", *map(str, args)], capture_output=True, text=True, timeout=300)


def test_cli_index_and_publish_to_s3(s3, tmp_path):
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    creds = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", s3.endpoint_url]
    out = url + ".index.json"
    result = _cli("index", url, "-o", out, *creds)
    assert result.returncode == 0, result.stderr
    # publish from the local copy, recording the bucket URL: the manifest points at S3
    dest = url + ".published.json"
    result = _cli("publish", local, dest, "--url", url, *creds)
    assert result.returncode == 0, result.stderr
    assert "sampled chunks decoded" in result.stdout
    options = s3.storage_options()
    published = json.loads(s3.filesystem().cat(dest.removeprefix("s3://")))
    # beside its source in the bucket: recorded relative to itself, it travels with the file
    assert published["templates"]["u"] == "sample.h5ad"
    assert_equal(h5lens.read_anndata(dest, storage_options=options), ad.read_h5ad(local))


def test_publish_failure_leaves_nothing_at_destination(s3, tmp_path):
    local = write_sample(tmp_path / "sample.h5ad")
    dest = "s3://" + _key("never.json")
    creds = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", s3.endpoint_url]
    # the recorded URL points at an object that does not exist: the check fails before writing
    result = _cli("publish", local, dest, "--url", "s3://bucket/missing/sample.h5ad", *creds)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert not s3.filesystem().exists(dest.removeprefix("s3://"))


def test_eager_read_asks_for_everything_at_once(s3, s3_proxy, chunky):
    url = _upload(s3, chunky, "chunky.h5ad")
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
    assert manifest.chunks["X"].n_present == 400
    s3_proxy.stats.reset()
    adata = h5lens.read_anndata(manifest, storage_options=options)
    assert_equal(adata, ad.read_h5ad(chunky))
    # every chunk of every element, merged into one request (the file is far below 32 MiB)
    assert s3_proxy.stats.gets == 1, s3_proxy.stats


def test_eager_treedata_part_fetches_each_byte_once(s3, s3_proxy, tmp_path):
    """read_anndata on a TreeData file reads through one store: what the prefetch fetched is
    what the read uses (a second store built after the prefetch fetched everything twice)."""
    import treedata

    sys.path.insert(0, str(Path(__file__).parent))
    import test_treedata

    local = test_treedata._write(test_treedata._generated(), tmp_path / "lineage.h5td")
    url = _upload(s3, local, "lineage.h5td")
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
    referenced = sum(t.referenced_bytes for t in manifest.chunks.values())
    s3_proxy.stats.reset()
    adata = h5lens.read_anndata(manifest, storage_options=options, verify=False)
    assert_equal(adata, treedata.read_h5td(local).to_adata())
    assert 0 < s3_proxy.stats.bytes <= referenced + (1 << 20), (s3_proxy.stats.bytes, referenced)
    assert s3_proxy.stats.gets == 1


def test_lazy_anndata_computes_on_a_dask_cluster(s3, tmp_path):
    """The lazy AnnData's tasks (and the ManifestStore inside them) pickle to worker
    processes of a real LocalCluster, which read their chunks from S3 themselves."""
    distributed = pytest.importorskip("distributed")
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    options = s3.storage_options()
    manifest_url = url + ".json"
    h5lens.index(url, storage_options=options, inline_threshold=0).to_json(manifest_url, storage_options=options)
    expected = ad.read_h5ad(local)
    lazy = h5lens.read_anndata(manifest_url, storage_options=options, lazy=True)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        x, pca = client.compute([lazy.X[10:90], lazy.obsm["X_pca"]], sync=True)
        workers = client.run(lambda: True)
    assert len(workers) == 2
    got = x.toarray() if hasattr(x, "toarray") else np.asarray(x)
    want = expected.X[10:90]
    np.testing.assert_array_equal(got, want.toarray() if hasattr(want, "toarray") else want)
    np.testing.assert_array_equal(pca, expected.obsm["X_pca"])


def test_publish_records_the_identity_of_the_url_it_points_at(s3, tmp_path):
    """A manifest published from a local copy must guard the object readers will read: after a
    same-size edit of that object, reading is refused (before: the local mtime was recorded)."""
    from h5lens.scan.publish import publish

    local = Path(write_sample(tmp_path / "sample.h5ad"))
    url = _upload(s3, local, "sample.h5ad")
    dest = "s3://" + _key("published.json")
    options = s3.storage_options()
    publish(str(local), dest, url=url, storage_options=options)
    source = h5lens.Manifest.from_json(dest, storage_options=options).sources[0]
    assert source.url == url and source.etag and source.mtime is None
    edited = tmp_path / "edited.h5ad"
    edited.write_bytes(local.read_bytes())
    with h5py.File(edited, "a") as f:  # same size, other values
        f["obsm/X_pca"][0, 0] += 1.0
    assert edited.stat().st_size == local.stat().st_size
    s3.filesystem().put(str(edited), url.removeprefix("s3://"))
    with pytest.raises(h5lens.StaleSourceError, match="ETag"):
        h5lens.open_group(dest, storage_options=options)


def test_publish_refuses_a_url_that_is_not_the_file(s3, tmp_path):
    from h5lens.scan.publish import publish

    local = Path(write_sample(tmp_path / "sample.h5ad"))
    other = _upload(s3, tmp_path / "sample.h5ad", "other.h5ad")
    s3.filesystem().pipe(other.removeprefix("s3://"), b"not the same file")
    dest = "s3://" + _key("never.json")
    with pytest.raises(h5lens.InvalidOptionError, match="not the same file"):
        publish(str(local), dest, url=other, storage_options=s3.storage_options())
    with pytest.raises(h5lens.SourceNotFoundError):
        publish(str(local), dest, url="s3://bucket/missing/x.h5ad", storage_options=s3.storage_options())
    assert not s3.filesystem().exists(dest.removeprefix("s3://"))
    assert not s3.filesystem().glob(dest.removeprefix("s3://") + "*")  # no staging object left


def test_publish_over_its_own_source_is_refused(s3, tmp_path):
    from h5lens.scan.publish import publish

    local = Path(write_sample(tmp_path / "sample.h5ad"))
    before = local.read_bytes()
    with pytest.raises(h5lens.InvalidOptionError, match="overwrite"):
        publish(str(local), str(local))
    url = _upload(s3, local, "sample.h5ad")
    with pytest.raises(h5lens.InvalidOptionError, match="overwrite"):
        publish(str(local), url, url=url, storage_options=s3.storage_options())
    assert local.read_bytes() == before
    assert s3.filesystem().cat(url.removeprefix("s3://")) == before


def _lazy_selection(manifest, options, kind):
    lazy = h5lens.read_anndata(manifest, storage_options=options, lazy=True)
    mask = np.asarray((lazy.obs["cell_type"] == kind).values)
    return mask, lazy[mask].to_memory()


def test_a_lazy_selection_fetches_in_batches_not_element_by_element(s3, s3_proxy, tmp_path, monkeypatch):
    """A lazy AnnData over S3 fetches what it reads anyway in one batch when it opens: a
    small file whole (as s3fs's read-ahead gives read_h5ad), a big one its dataframes and
    indptr; a selection then costs the round trips of an eager read, not one per element."""
    import h5lens.adata.lazy as lazy_reader
    import h5lens.adata.readers as lazy_reader_entry

    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index(url, storage_options=options, inline_threshold=0)
    expected = ad.read_h5ad(local)
    s3_proxy.stats.reset()
    h5lens.read_anndata(manifest, storage_options=options)
    eager_gets = s3_proxy.stats.gets

    counts = {}
    for case, whole_bytes, batches in (("small", lazy_reader.LAZY_WHOLE_BYTES, True), ("big", 0, True), ("none", 0, False)):
        monkeypatch.setattr(lazy_reader, "LAZY_WHOLE_BYTES", whole_bytes)
        if not batches:
            monkeypatch.setattr(lazy_reader_entry, "prefetch_for_lazy", lambda store: None)
        s3_proxy.stats.reset()
        mask, got = _lazy_selection(manifest, options, expected.obs["cell_type"].iloc[0])
        counts[case] = s3_proxy.stats.gets
        want = expected[mask]
        np.testing.assert_array_equal(got.X.toarray(), want.X.toarray())
        assert list(got.obs_names) == list(want.obs_names)
        np.testing.assert_array_equal(got.obs["n_counts"], want.obs["n_counts"])
        assert got.obs["cell_type"].astype(str).tolist() == want.obs["cell_type"].astype(str).tolist()
    assert counts["small"] <= eager_gets, counts
    assert counts["small"] < counts["big"] < counts["none"], counts


@pytest.mark.parametrize("fault", ["503", "500"])
def test_a_failing_request_makes_the_policys_attempts_and_no_more(s3, chunky, fault, monkeypatch):
    """h5lens's retry policy is the only one: through fsspec, neither s3fs (five tries of
    its own) nor botocore (five more) multiplies the attempts the policy allows."""
    from h5lens.errors import SourceReadError
    from h5lens.fetch import retry
    from h5lens.fetch.clients import CLIENT_ENV, open_client

    monkeypatch.setenv(CLIENT_ENV, "fsspec")
    monkeypatch.setattr(retry, "POLICY", retry.RetryPolicy(attempts=3, first_backoff=0.001, max_backoff=0.002))
    url = _upload(s3, chunky, "chunky.h5ad")
    with CountingProxy(s3.endpoint_url, fault_rate=1.0, faults=(fault,)) as broken:
        client = open_client(url, s3.storage_options(broken.endpoint_url))
        try:
            with pytest.raises(SourceReadError, match="after 3 attempts"):
                client.get_sync(0, 100)
            assert broken.stats.gets == 3, broken.stats
        finally:
            client.close()


# -- many scattered ranges at once (a minibatch loader's preload) -------------------------------
@pytest.fixture
def scattered(tmp_path):
    """A 1-d gzip array of 300 chunks of 100 KB (random floats: they hardly compress), and
    runs of it in every twelfth chunk: more than a megabyte apart, one request each."""
    path = tmp_path / "scattered.h5"
    values = np.random.default_rng(5).random(300 * 25_000).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, chunks=(25_000,), compression="gzip", compression_opts=1)
    starts = np.arange(0, 300, 12, dtype=np.int64) * 25_000 + 1_000
    return path, values, starts, starts + 15_000


def _runs_of(values, starts, stops):
    return np.concatenate([values[a:b] for a, b in zip(starts.tolist(), stops.tolist(), strict=True)])


def test_scattered_ranges_go_ten_to_an_obstore_call(s3, scattered, monkeypatch):
    """Hundreds of separate ranges (a loader's preload) are asked of obstore ten at a time
    (``get_ranges``: one hand-over to Python per ten requests), each range its own request,
    none merged with another: the values are h5py's, the proxy counts one GET per range."""
    import obstore

    path, values, starts, stops = scattered
    url = _upload(s3, path, "scattered.h5")
    calls = []
    real = obstore.get_ranges_async

    async def counted(*args, **kwargs):
        calls.append(len(kwargs["starts"]))
        return await real(*args, **kwargs)

    monkeypatch.setattr(obstore, "get_ranges_async", counted)  # a spy: the real call is made
    manifest = h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0)
    with CountingProxy(s3.endpoint_url) as proxy:
        store = h5lens.open_store(manifest, storage_options=s3.storage_options(proxy.endpoint_url))
        proxy.stats.reset()
        np.testing.assert_array_equal(store.read_runs("x", starts, stops), _runs_of(values, starts, stops))
        assert proxy.stats.gets == len(starts)
    assert calls and max(calls) == 10 and sum(calls) >= len(starts) - 10, calls


def test_scattered_ranges_survive_every_kind_of_fault(s3, scattered, monkeypatch):
    """One request in four fails (503, 500, a body cut off, a reset): a batched call that
    fails has each of its ranges asked for alone; every value comes back exactly."""
    from h5lens.fetch import retry
    from h5lens.testing.s3 import FAULTS

    monkeypatch.setattr(retry, "POLICY", retry.RetryPolicy(first_backoff=0.001, max_backoff=0.005))
    path, values, starts, stops = scattered
    url = _upload(s3, path, "scattered.h5")
    manifest = h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0)
    expected = _runs_of(values, starts, stops)
    with CountingProxy(s3.endpoint_url, fault_rate=0.25, faults=FAULTS, seed=5) as flaky:
        for _ in range(3):  # a fresh store each time: requests of their own
            store = h5lens.open_store(manifest, storage_options=s3.storage_options(flaky.endpoint_url))
            np.testing.assert_array_equal(store.read_runs("x", starts, stops), expected)
        assert flaky.stats.injected_faults >= 10, flaky.stats


def test_a_bad_range_among_a_batch_is_the_one_named(s3, scattered):
    """One chunk's range lies past the end of the object, among two dozen read at once: the
    read fails naming that chunk (its key and bytes), not another range of its batch."""
    path, _, starts, stops = scattered
    url = _upload(s3, path, "scattered.h5")
    manifest = h5lens.index(url, storage_options=s3.storage_options(), inline_threshold=0)
    table = manifest.chunks["x"]
    offset = table.offset.copy()
    offset[108] = manifest.sources[0].size + 1_000  # chunk 108: the tenth run's
    manifest = replace(manifest, chunks={**manifest.chunks, "x": replace(table, offset=offset)})
    with CountingProxy(s3.endpoint_url) as proxy:
        store = h5lens.open_store(manifest, storage_options=s3.storage_options(proxy.endpoint_url), verify=False)
        store.read_runs("x", starts[:1], stops[:1])  # the first request goes alone
        with pytest.raises(h5lens.SourceReadError, match="past the end") as info:
            store.read_runs("x", starts, stops)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "'x/c/108'" in notes, notes


def test_a_missing_object_is_said_by_obstore_itself(s3, s3_proxy):
    """obstore (>= 0.12) raises the builtin FileNotFoundError for a missing object: that is
    the object's absence, said at once, not an obstore failure to go on through fsspec (whose
    session each of index-many's workers left open, looking for a manifest not written yet).
    One listing tells a missing bucket from a missing object (obstore's error does not)."""
    from h5lens.fetch.clients import ObstoreClient, open_client

    options = s3.storage_options(s3_proxy.endpoint_url)
    for url, said in (
        (f"s3://{_key('missing.json')}", "no such file or object"),
        (f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/missing.json", "no such bucket"),
    ):
        client = open_client(url, options)
        assert isinstance(client, ObstoreClient)
        s3_proxy.stats.reset()
        try:
            with pytest.raises(h5lens.SourceNotFoundError, match=said) as info:
                client.get_sync(0, 100, exact=False)
            assert client.name == "obstore" and str(info.value).startswith(url)
            assert s3_proxy.stats.gets == 2, s3_proxy.stats  # the GET, and the listing
        finally:
            client.close()


@pytest.mark.parametrize("client", ["obstore", "fsspec"])
def test_requester_pays_buckets(s3, tmp_path, client, monkeypatch):
    """A bucket whose requests must say the requester pays (moto does not enforce it: a proxy
    in front of it does, as S3 does): refused without the option in one line that names it;
    with s3fs's ``requester_pays`` or obstore's ``request_payer``, indexed and read equal to
    anndata, every request carrying the header."""
    from h5lens.fetch.clients import CLIENT_ENV
    from h5lens.testing.emulators import RequesterPays

    monkeypatch.setenv(CLIENT_ENV, client)
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    with RequesterPays(s3.endpoint_url, buckets=("bucket",)) as proxy:
        options = s3.storage_options(proxy.endpoint_url)
        with pytest.raises(h5lens.AccessDeniedError, match="requester-pays.*requester_pays") as info:
            h5lens.index(url, storage_options=options)
        assert "\n" not in str(info.value) and proxy.refused > 0
        for name in ("requester_pays", "request_payer"):
            proxy.refused = proxy.paid = 0
            paying = {**options, name: True}
            manifest = h5lens.index(url, storage_options=paying)
            assert_equal(h5lens.read_anndata(manifest, storage_options=paying), ad.read_h5ad(local))
            assert proxy.paid > 0 and proxy.refused == 0, (name, proxy.paid, proxy.refused)
        endpoint = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", proxy.endpoint_url]
        refused = run_cli("index", url, "-o", tmp_path / "m.json", *endpoint)
        assert "-s requester_pays=true" in refused.error_line()
        done = run_cli("index", url, "-o", tmp_path / "m.json", *endpoint, "-s", "requester_pays=true")
        assert done.returncode == 0, done.stderr


class _SeenProxy(CountingProxy):
    """A counting proxy that also keeps, per request, the Host it was sent to, the first
    segment of its path and the region its signature was made for."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.seen: list[tuple[str, str, str | None]] = []

    async def _handle(self, request):  # the proxy's own handler
        import re

        scope = re.search(r"Credential=[^/]+/\d+/([^/]+)/s3/", request.headers.get("Authorization", ""))
        self.seen.append((request.host, request.path.lstrip("/").split("/", 1)[0], scope.group(1) if scope else None))
        return await super()._handle(request)


@pytest.mark.parametrize("client", ["obstore", "fsspec"])
@pytest.mark.parametrize(
    "region", [{"client_kwargs": {"region_name": "garage-1"}}, {"region": "garage-1"}, {"region_name": "garage-1"}],
    ids=["client_kwargs", "region", "region_name"],
)
def test_a_path_style_endpoint_with_a_region_of_its_own(s3, tmp_path, client, region, monkeypatch):
    """A MinIO/Ceph-like endpoint: a host name (not an IP, which forces path style), a
    region no AWS has. Every request, indexing and reading, is path-style to that host and
    signed for that region, with either reader and each way of naming the region."""
    from h5lens.fetch.clients import CLIENT_ENV

    monkeypatch.setenv(CLIENT_ENV, client)
    local = write_sample(tmp_path / "sample.h5ad")
    url = _upload(s3, local, "sample.h5ad")
    with _SeenProxy(s3.endpoint_url) as proxy:
        host = f"localhost:{proxy.port}"
        options = {**s3.storage_options(f"http://{host}"), **region}
        manifest = h5lens.index(url, storage_options=options)
        assert_equal(h5lens.read_anndata(manifest, storage_options=options), ad.read_h5ad(local))
        assert proxy.seen and set(proxy.seen) == {(host, "bucket", "garage-1")}, set(proxy.seen)
        if "client_kwargs" in region:
            proxy.seen.clear()
            creds = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", f"http://{host}",
                     "-s", "client_kwargs.region_name=garage-1"]  # fmt: skip
            done = run_cli("index", url, "-o", tmp_path / "m.json", *creds)
            assert done.returncode == 0, done.stderr
            done = run_cli("validate", tmp_path / "m.json", "--deep", *creds)
            assert done.returncode == 0, done.stdout + done.stderr
            assert proxy.seen and set(proxy.seen) == {(host, "bucket", "garage-1")}, set(proxy.seen)
