"""Different options per source in one manifest: storage options keyed by URL prefix.

Two real S3 endpoints (two moto servers on 127.0.0.1): a private bucket on one, read with
credentials, and a public one on the other (its objects public-read), read unsigned. A
manifest whose sources lie in both (two h5ad files combined along obs) reads equal to
``anndata.concat`` of ``anndata.read_h5ad``, through every opener and the command line, with
``source_options={"s3://private/": {...}, "s3://public/": {...}}``; without them, it does not.
"""

from __future__ import annotations

import uuid
import warnings

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp
import xarray as xr
from anndata.tests.helpers import assert_equal

import h5lens
from cli_runner import h5lens as run_cli
from h5lens.fetch.source_options import for_sources, options_for
from h5lens.testing.emulators import SeparateS3
from h5lens.testing.s3 import CREDENTIALS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::anndata.OldFormatWarning")


# -- which options a URL is read with ---------------------------------------------------------


def test_the_longest_prefix_wins_merged_over_the_rest():
    options = {
        "key": "k", "secret": "s", "endpoint_url": "https://global", "client_kwargs": {"region_name": "r"},
        "s3://b/": {"endpoint_url": "https://b", "client_kwargs": {"verify": False}},
        "s3://b/deep/": {"anon": True},
    }  # fmt: skip
    assert options_for("s3://c/x.h5", options) == {
        "key": "k", "secret": "s", "endpoint_url": "https://global", "client_kwargs": {"region_name": "r"},
    }  # fmt: skip
    # mappings merged key by key; values replaced
    assert options_for("s3://b/x.h5", options) == {
        "key": "k", "secret": "s", "endpoint_url": "https://b", "client_kwargs": {"region_name": "r", "verify": False},
    }  # fmt: skip
    # the longest prefix alone; credentials replaced as a whole: anon is not signed with k/s
    assert options_for("s3://b/deep/x.h5", options) == {
        "endpoint_url": "https://global", "client_kwargs": {"region_name": "r"}, "anon": True,
    }  # fmt: skip


def test_source_options_of_prefixes_add_to_storage_options_others_replace_them():
    storage = {"key": "k", "secret": "s"}
    assert for_sources(storage, {"s3://b/": {"anon": True}}) == {**storage, "s3://b/": {"anon": True}}
    assert for_sources(storage, {"anon": True, "s3://b/": {"endpoint_url": "e"}}) == {
        "anon": True, "s3://b/": {"endpoint_url": "e"},
    }  # fmt: skip
    assert for_sources(storage, {"anon": True}) == {"anon": True}
    assert for_sources(storage, None) == storage


def test_options_of_a_prefix_must_be_a_mapping_and_the_refusal_shows_no_value():
    with pytest.raises(h5lens.InvalidOptionError, match="s3://b/") as info:
        h5lens.OpenOptions(source_options={"s3://b/": "h5lens-secret-c0ffee"})
    assert "c0ffee" not in str(info.value)


def test_the_command_line_form():
    from h5lens.cli.options import storage_options

    parsed = storage_options(
        ["key=k", "s3://b/:anon=true", "http://host:8080/x/:headers.Authorization=Bearer t",
         "s3://b/:endpoint_url=http://127.0.0.1:9000"],
        False, None,
    )  # fmt: skip
    assert parsed == {
        "key": "k",
        "s3://b/": {"anon": True, "endpoint_url": "http://127.0.0.1:9000"},
        "http://host:8080/x/": {"headers": {"Authorization": "Bearer t"}},
    }
    done = run_cli("inspect", "x.json", "-s", "s3://b/anon=true")
    assert done.returncode == 2 and "PREFIX:KEY=VALUE" in done.stderr


# -- two endpoints, two buckets, one manifest ------------------------------------------------


@pytest.fixture(scope="module")
def other_s3():
    """A second S3 endpoint (a process of its own: buckets of its own), whose bucket serves
    its objects to anyone (public-read)."""
    pytest.importorskip("moto")
    with SeparateS3() as server:
        server.make_bucket("public")
        yield server


def _adata(n: int, seed: int) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    adata = ad.AnnData(sp.random(n, 30, density=0.2, format="csr", dtype=np.float32, random_state=rng))
    adata.obs_names = [f"cell-{seed}-{i}" for i in range(n)]
    adata.obs["kind"] = rng.choice(["a", "b"], n)
    adata.obsm["X_pca"] = rng.standard_normal((n, 4)).astype(np.float32)
    return adata


@pytest.fixture
def two_places(s3, other_s3, tmp_path):
    """One h5ad in the private bucket of the first endpoint, one in the public bucket of the
    second; the combined manifest (written locally) and what anndata reads of the two."""
    run = uuid.uuid4().hex[:8]
    paths = []
    for i, (n, seed) in enumerate(((120, 1), (80, 2))):
        path = tmp_path / f"part{i}.h5ad"
        _adata(n, seed).write_h5ad(path, compression="gzip")
        paths.append(path)
    private_url = f"s3://bucket/{run}/part0.h5ad"
    public_url = f"s3://public/{run}/part1.h5ad"
    s3.filesystem().put(str(paths[0]), private_url.removeprefix("s3://"))
    public_fs = other_s3.filesystem()
    public_fs.put(str(paths[1]), public_url.removeprefix("s3://"))
    public_fs.chmod(public_url.removeprefix("s3://"), acl="public-read")
    per_prefix = {
        "s3://bucket/": {"endpoint_url": s3.endpoint_url},
        "s3://public/": {"anon": True, "endpoint_url": other_s3.endpoint_url},
    }
    manifests = [
        h5lens.index(private_url, storage_options={**CREDENTIALS, "endpoint_url": s3.endpoint_url}),
        h5lens.index(public_url, storage_options={"anon": True, "endpoint_url": other_s3.endpoint_url}),
    ]
    combined = h5lens.combine(manifests, options=h5lens.OpenOptions(storage_options=CREDENTIALS, source_options=per_prefix))
    assert {s.url for s in combined.sources} == {private_url, public_url}
    combined.to_json(tmp_path / "combined.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ad.concat([ad.read_h5ad(p) for p in paths])
    return tmp_path / "combined.json", per_prefix, expected, paths


def test_a_manifest_over_two_endpoints_reads_with_options_per_prefix(two_places):
    manifest, per_prefix, expected, _ = two_places
    read = h5lens.read_anndata(manifest, storage_options=CREDENTIALS, source_options=per_prefix)
    assert_equal(read, expected)
    lazy = h5lens.read_anndata(manifest, options=h5lens.OpenOptions(storage_options=CREDENTIALS, source_options=per_prefix), lazy=True)
    np.testing.assert_array_equal(lazy.obsm["X_pca"].compute(), expected.obsm["X_pca"])
    # the same options all in storage_options
    group = h5lens.open(manifest, storage_options={**CREDENTIALS, **per_prefix})
    np.testing.assert_array_equal(group["obsm/X_pca"][...], expected.obsm["X_pca"])


def test_without_the_options_of_a_prefix_its_source_is_not_found(two_places, s3):
    manifest, per_prefix, _, _ = two_places
    # the public bucket's source asked of the first endpoint, which has no such bucket
    with pytest.raises(h5lens.SourceNotFoundError, match="s3://public/"):
        h5lens.read_anndata(manifest, storage_options={**CREDENTIALS, "endpoint_url": s3.endpoint_url})
    # the private bucket read unsigned, as the public one is: refused
    only_public = {"anon": True, "endpoint_url": per_prefix["s3://public/"]["endpoint_url"]}
    with pytest.raises((h5lens.SourceNotFoundError, h5lens.AccessDeniedError), match="s3://bucket/"):
        h5lens.read_anndata(manifest, storage_options=only_public)


def test_the_xarray_engine_takes_them(other_s3, tmp_path):
    """A netCDF file on the public endpoint, opened with the global options of another place
    and the public bucket's own: equal to xarray's reading of the file."""
    local = tmp_path / "t.nc"
    xr.Dataset(
        {"t": (("time", "x"), np.random.default_rng(4).standard_normal((40, 6)))}, coords={"time": np.arange(40)}
    ).to_netcdf(local, engine="h5netcdf")
    url = f"s3://public/{uuid.uuid4().hex[:8]}/t.nc"
    other_s3.filesystem().put(str(local), url.removeprefix("s3://"))
    other_s3.filesystem().chmod(url.removeprefix("s3://"), acl="public-read")
    public = {"anon": True, "endpoint_url": other_s3.endpoint_url}
    h5lens.index(url, storage_options=public).to_json(tmp_path / "t.json")
    opened = xr.open_dataset(
        tmp_path / "t.json", engine="h5lens", storage_options=CREDENTIALS, source_options={"s3://public/": public}
    )
    xr.testing.assert_identical(opened.load(), xr.open_dataset(local, engine="h5netcdf").load())


def test_the_command_line_reads_with_options_per_prefix(two_places, tmp_path):
    manifest, per_prefix, _, _ = two_places
    prefixed = [arg for prefix, opts in per_prefix.items() for name, value in opts.items()
                for arg in ("-s", f"{prefix}:{name}={value}")]  # fmt: skip
    creds = [arg for name, value in CREDENTIALS.items() for arg in ("-s", f"{name}={value}")]
    done = run_cli("validate", manifest, *creds, *prefixed)
    assert done.returncode == 0, done.stderr
    deep = run_cli("validate", manifest, "--deep", *creds, *prefixed)  # decodes every chunk of both sources
    assert deep.returncode == 0, deep.stdout + deep.stderr
    without = run_cli("validate", manifest, *creds, "--endpoint-url", per_prefix["s3://bucket/"]["endpoint_url"])
    assert without.returncode != 0 and "s3://public/" in without.stdout + without.stderr
