"""Collections: ``h5lens index-many`` / ``h5lens.index_many`` on a real dask.distributed
cluster, and ``h5lens.read_anndata([...], lazy=True)`` computed on it.

Oracles: ``anndata.read_h5ad`` (and ``anndata.concat`` of it) for what the manifests read;
h5py's own chunk index (``get_num_chunks`` / ``get_chunk_info``) for the chunks and bytes
each report line claims. One LocalCluster (2 worker processes) and one moto bucket serve
the whole module: the collection is 12 h5ad files written by anndata, one NWB file written
by pynwb, one HDF5 file written by h5py, and one truncated h5ad.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from anndata.tests.helpers import assert_equal

import h5lens
from h5lens.adata.blocks import ANNDATA_ROW_BLOCK, DEFAULT_BLOCK_BYTES, row_block_for_bytes
from h5lens.errors import InvalidOptionError

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

CLI = [sys.executable, "-m", "h5lens.cli"]
BUCKET = "collection"
N_H5AD = 12  # enough for a collection in two gene sets; each file costs an index on every run
INLINE = 1000  # the default inline threshold: what the report's chunk counts depend on


# -- the collection and the cluster ----------------------------------------------------------


def _h5ad(i: int) -> ad.AnnData:
    """Files of different sizes; the second half has a shifted gene set (for join='inner'/'outer')."""
    rng = np.random.default_rng(i)
    n_obs = 40 + 7 * i
    genes = [f"g{j}" for j in range(40)] if i < N_H5AD // 2 else [f"g{j}" for j in range(5, 45)]
    adata = ad.AnnData(
        X=sp.random(n_obs, len(genes), density=0.15, format="csr", random_state=i, dtype=np.float32),
        obs=pd.DataFrame(
            {"kind": pd.Categorical(rng.choice(["T", "B", "NK"], n_obs)), "score": rng.random(n_obs)},
            index=[f"f{i}c{j}" for j in range(n_obs)],
        ),
        var=pd.DataFrame(index=genes),
    )
    adata.obsm["pca"] = rng.standard_normal((n_obs, 3)).astype(np.float32)
    if i % 2:
        adata.layers["counts"] = adata.X.copy()
    return adata


def _write_plain(path: Path) -> None:
    rng = np.random.default_rng(99)
    with h5py.File(path, "w") as f:
        f.create_dataset("grid", data=rng.random((64, 48)), chunks=(16, 16), compression="gzip")
        f.create_dataset("series/a", data=np.arange(5000, dtype="<i4"), chunks=(1000,))
        f.create_dataset("series/b", data=rng.random(300).astype(np.float32))  # contiguous


@pytest.fixture(scope="module")
def local_files(tmp_path_factory) -> dict[str, Path]:
    """name -> local copy of every file of the collection."""
    root = tmp_path_factory.mktemp("collection")
    files: dict[str, Path] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(N_H5AD):
            path = root / f"sample{i:02d}.h5ad"
            _h5ad(i).write_h5ad(path, compression="gzip")
            files[path.name] = path
    sys.path.insert(0, str(Path(__file__).parent))
    import test_nwb

    test_nwb.write_ecephys(root / "session.nwb")
    files["session.nwb"] = root / "session.nwb"
    _write_plain(root / "plain.h5")
    files["plain.h5"] = root / "plain.h5"
    whole = files["sample00.h5ad"].read_bytes()
    (root / "broken.h5ad").write_bytes(whole[: len(whole) // 3])  # the superblock survives, the rest does not
    files["broken.h5ad"] = root / "broken.h5ad"
    return files


@pytest.fixture(scope="module")
def bucket(s3, local_files) -> str:
    s3.make_bucket(BUCKET)
    fs = s3.filesystem()
    for name, path in local_files.items():
        fs.put(str(path), f"{BUCKET}/atlas/{name}")
    fs.pipe(f"{BUCKET}/atlas/README.txt", b"not HDF5: a prefix takes HDF5 names only")
    return f"s3://{BUCKET}"


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def options(s3) -> dict:
    return s3.storage_options()


@pytest.fixture(scope="module")
def first_run(bucket, client, options, tmp_path_factory):
    report = tmp_path_factory.mktemp("report") / "summary.json"
    result = h5lens.index_many(
        f"{bucket}/atlas/", f"{bucket}/manifests/", scheduler=client, storage_options=options, report=report
    )
    return result, report


def _manifest(bucket: str, name: str) -> str:
    return f"{bucket}/manifests/{name}.json"


def _expected_chunks(path: Path, threshold: int = INLINE) -> tuple[int, int]:
    """Chunk references and their bytes, from h5py's chunk index: every dataset of fixed-size
    elements whose stored size exceeds the inline threshold is referenced, chunk by chunk
    (a small contiguous dataset: one chunk); variable-length strings and references are inline."""
    chunks = nbytes = 0

    def visit(name: str, obj: object) -> None:
        nonlocal chunks, nbytes
        if not isinstance(obj, h5py.Dataset) or obj.dtype.kind == "O" or h5py.check_ref_dtype(obj.dtype):
            return
        if obj.dtype.names or obj.dtype.kind == "V":  # compounds (NWB tables): not in our files' counts
            return
        vlen = h5py.check_string_dtype(obj.dtype)
        if vlen is not None and vlen.length is None:
            return
        size = obj.id.get_storage_size()
        if size <= threshold:
            return
        if obj.chunks:
            n = obj.id.get_num_chunks()
            chunks += n
            nbytes += sum(obj.id.get_chunk_info(i).size for i in range(n))
        else:
            assert size < 4 << 20  # one slab: the test's files are small
            chunks += 1
            nbytes += size

    with h5py.File(path) as f:
        f.visititems(visit)
    return chunks, nbytes


# -- indexing ------------------------------------------------------------------------------------


def test_every_file_is_indexed_but_the_broken_one(first_run, bucket, local_files):
    result, _ = first_run
    by_name = {r.source.rsplit("/", 1)[-1]: r for r in result.records}
    assert set(by_name) == set(local_files)  # README.txt is not HDF5 by name: not taken from the prefix
    broken = by_name.pop("broken.h5ad")
    assert broken.status == "failed"
    assert broken.error is not None and "\n" not in broken.error and "broken.h5ad" in broken.error
    assert all(r.status == "indexed" and r.error is None for r in by_name.values())
    assert (result.indexed, result.skipped, result.failed) == (len(local_files) - 1, 0, 1)
    assert not result.ok
    assert by_name["sample03.h5ad"].manifest == _manifest(bucket, "sample03.h5ad")


def test_manifests_read_as_read_h5ad(first_run, bucket, local_files, options):
    for i in (0, 5, 7, N_H5AD - 1):
        name = f"sample{i:02d}.h5ad"
        adata = h5lens.read_anndata(_manifest(bucket, name), storage_options=options)
        assert_equal(adata, ad.read_h5ad(local_files[name]))


def test_nwb_and_plain_hdf5_read_as_h5py(first_run, bucket, local_files, options):
    plain = h5lens.open_group(_manifest(bucket, "plain.h5"), storage_options=options)
    nwb = h5lens.open_group(_manifest(bucket, "session.nwb"), storage_options=options)
    with h5py.File(local_files["plain.h5"]) as f:
        for path in ("grid", "series/a", "series/b"):
            np.testing.assert_array_equal(plain[path][...], f[path][...])
    with h5py.File(local_files["session.nwb"]) as f:
        np.testing.assert_array_equal(
            nwb["acquisition/es/data"][...], f["acquisition/es/data"][...]
        )


def test_report_counts_every_chunk_h5py_counts(first_run, local_files):
    result, report = first_run
    written = json.loads(Path(report).read_text())
    assert written == json.loads(json.dumps(result.to_dict()))
    assert len(written["files"]) == len(local_files)
    assert (written["indexed"], written["skipped"], written["failed"]) == (len(local_files) - 1, 0, 1)
    for record in written["files"]:
        name = record["source"].rsplit("/", 1)[-1]
        assert set(record) >= {"source", "manifest", "status", "error", "chunks", "bytes", "seconds"}
        if name.endswith((".h5ad", ".h5")) and record["status"] == "indexed":
            assert (record["chunks"], record["bytes"]) == _expected_chunks(local_files[name]), name
    assert written["chunks"] == sum(r["chunks"] for r in written["files"]) > 0


# -- reading many as one ---------------------------------------------------------------------------


def _gene_sums(x) -> object:
    """Per-gene sums of a lazy sparse matrix: one small dense row per block, then summed."""
    assert x.numblocks[1] == 1
    rows = x.map_blocks(
        lambda block: np.asarray(block.sum(axis=0), dtype=np.float64).reshape(1, -1),
        chunks=(1, x.shape[1]),
        dtype=np.float64,
        meta=np.empty((0, 0)),
    )
    return rows.sum(axis=0)


@pytest.mark.parametrize("join", ["inner", "outer"])
def test_lazy_collection_computes_on_the_cluster(first_run, bucket, local_files, options, client, join):
    names = [f"sample{i:02d}.h5ad" for i in range(N_H5AD)]
    lazy = h5lens.read_anndata(
        [_manifest(bucket, n) for n in names], lazy=True, storage_options=options, join=join, label="file", keys=names
    )
    expected = ad.concat(
        [ad.read_h5ad(local_files[n]) for n in names], join=join, label="file", keys=names
    )
    assert lazy.shape == expected.shape and list(lazy.var_names) == list(expected.var_names)
    # small files: one block per file, not one per few rows
    assert lazy.X.numblocks[0] == N_H5AD
    sums = client.compute(_gene_sums(lazy.X)).result()
    np.testing.assert_allclose(sums, np.asarray(expected.X.sum(axis=0)).ravel(), rtol=1e-6)

    computed = client.compute(lazy.X).result()
    assert (sp.csr_matrix(computed) != expected.X).nnz == 0
    np.testing.assert_array_equal(client.compute(lazy.obsm["pca"]).result(), expected.obsm["pca"])
    assert list(lazy.obs_names) == list(expected.obs_names)
    obs = lazy.obs.to_memory() if hasattr(lazy.obs, "to_memory") else lazy.obs
    # anndata's lazy concat gives categorical columns back as text: compare the values
    pd.testing.assert_frame_equal(obs.astype(str), expected.obs.astype(str), check_index_type=False)


def test_workers_read_through_one_store_per_manifest(first_run, bucket, options, client):
    from h5lens.adata.shared import cached_stores

    client.run(lambda: __import__("h5lens.adata.shared", fromlist=["_CACHE"])._CACHE.clear())
    names = [f"sample{i:02d}.h5ad" for i in range(0, N_H5AD, 2)]
    lazy = h5lens.read_anndata([_manifest(bucket, n) for n in names], lazy=True, storage_options=options)
    client.compute(_gene_sums(lazy.X)).result()
    per_worker = client.run(cached_stores)
    # every manifest's tasks (several per manifest: blocks, sums, obsm) share a store per process
    assert 0 < sum(per_worker.values()) <= 2 * len(names)
    assert all(n <= len(names) for n in per_worker.values())


def test_manifest_objects_compute_on_the_cluster(first_run, local_files, client):
    names = ["sample01.h5ad", "sample02.h5ad"]
    manifests = [h5lens.index(local_files[n]) for n in names]  # in memory: travel whole, once
    lazy = h5lens.read_anndata(manifests, lazy=True, label="file")
    expected = ad.concat([ad.read_h5ad(local_files[n]) for n in names], label="file")
    np.testing.assert_allclose(
        client.compute(_gene_sums(lazy.X)).result(), np.asarray(expected.X.sum(axis=0)).ravel(), rtol=1e-6
    )


def test_eager_list_is_concat_of_read_h5ad(first_run, bucket, local_files, options):
    names = ["sample02.h5ad", "sample09.h5ad", "sample11.h5ad"]  # both gene sets
    got = h5lens.read_anndata(
        [_manifest(bucket, n) for n in names], storage_options=options, join="outer", label="b", keys=["x", "y", "z"]
    )
    expected = ad.concat(
        [ad.read_h5ad(local_files[n]) for n in names], join="outer", label="b", keys=["x", "y", "z"]
    )
    assert_equal(got, expected)


def test_list_arguments_are_checked(local_files):
    with pytest.raises(InvalidOptionError, match="empty"):
        h5lens.read_anndata([], lazy=True)
    with pytest.raises(InvalidOptionError, match="keys"):
        h5lens.read_anndata([h5lens.index(local_files["sample00.h5ad"])], keys=["a", "b"])


# -- lazy blocks ----------------------------------------------------------------------------------


def test_row_blocks_by_bytes_never_below_anndata_default():
    assert row_block_for_bytes(50, 10_000, 64 << 20) == ANNDATA_ROW_BLOCK  # small: one block
    assert row_block_for_bytes(10**6, 10**6 * 1000, 100 << 20) == (100 << 20) // 1000
    assert row_block_for_bytes(10**6, 10**12, 1 << 20) == ANNDATA_ROW_BLOCK  # huge rows: anndata's floor


def test_byte_sized_blocks_of_one_matrix(tmp_path):
    path = tmp_path / "big.h5ad"
    x = sp.random(20_000, 50, density=0.2, format="csr", random_state=3, dtype=np.float32)
    ad.AnnData(X=x).write_h5ad(path)
    manifest = h5lens.index(path)
    per_row = (x.data.nbytes + x.indices.nbytes) / x.shape[0]  # 80 bytes decoded; stored adds indptr
    lazy = h5lens.read_anndata(manifest, lazy=True, block_bytes=400_000)
    assert 0.9 * 400_000 / per_row <= lazy.X.chunks[0][0] <= 400_000 / per_row
    np.testing.assert_array_equal(lazy.X[4990:5010].compute().toarray(), x[4990:5010].toarray())
    assert h5lens.read_anndata(manifest, lazy=True, block_bytes=1).X.chunks[0][0] == ANNDATA_ROW_BLOCK
    # the default block holds DEFAULT_BLOCK_BYTES: this 2 MB matrix is one block, and slices read their rows only
    assert h5lens.read_anndata(manifest, lazy=True).X.chunks[0] == (x.shape[0],)
    assert DEFAULT_BLOCK_BYTES > x.data.nbytes + x.indices.nbytes


# -- re-runs: skip, change, --force, the command --------------------------------------------------


def _cli(*args: object, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *map(str, args)], check=False, capture_output=True, text=True, timeout=timeout)


def test_rerun_skips_then_reindexes_what_changed_then_force(first_run, bucket, local_files, options, client, s3,
                                                           tmp_path):
    first, _ = first_run
    fs = s3.filesystem()
    before = fs.info(f"{BUCKET}/manifests/sample05.h5ad.json")["LastModified"]

    second = h5lens.index_many(f"{bucket}/atlas/", f"{bucket}/manifests/", scheduler=client, storage_options=options)
    assert (second.indexed, second.skipped, second.failed) == (0, first.indexed, 1)
    assert [(r.chunks, r.bytes) for r in second.records] == [(r.chunks, r.bytes) for r in first.records]
    assert fs.info(f"{BUCKET}/manifests/sample05.h5ad.json")["LastModified"] == before

    changed = tmp_path / "sample05.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _h5ad(105).write_h5ad(changed, compression="gzip")
    fs.put(str(changed), f"{BUCKET}/atlas/sample05.h5ad")
    third = h5lens.index_many(f"{bucket}/atlas/", f"{bucket}/manifests/", scheduler=client, storage_options=options)
    assert [r.source.rsplit("/", 1)[-1] for r in third.records if r.status == "indexed"] == ["sample05.h5ad"]
    assert_equal(h5lens.read_anndata(_manifest(bucket, "sample05.h5ad"), storage_options=options),
                 ad.read_h5ad(changed))

    report = tmp_path / "forced.json"
    result = _cli(
        "index-many", f"{bucket}/atlas/", "--out-dir", f"{bucket}/manifests/", "--scheduler", client.scheduler.address,
        "--force", "--report", report, "--endpoint-url", options["endpoint_url"],
        "-s", f"key={options['key']}", "-s", f"secret={options['secret']}",
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"h5lens: error: 1 of {N_H5AD + 3} files failed"), result.stderr
    assert "broken.h5ad" in lines[0]
    assert "indexed" in result.stdout and "broken.h5ad" in result.stdout  # the tables
    forced = json.loads(report.read_text())
    assert (forced["indexed"], forced["skipped"], forced["failed"]) == (N_H5AD + 2, 0, 1)
    assert fs.info(f"{BUCKET}/manifests/sample00.h5ad.json")["LastModified"] >= before


def test_command_on_its_own_local_cluster(local_files, tmp_path):
    """No --scheduler: a LocalCluster for the run. A missing file is one failure; the good one is written."""
    out = tmp_path / "manifests"
    good = local_files["sample04.h5ad"]
    result = _cli("index-many", good, tmp_path / "gone.h5ad", "--out-dir", out, "--workers", "1",
                  "--inline-threshold", "0", "--format", "json")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "gone.h5ad" in lines[0] and "no such file" in lines[0], result.stderr
    written = out / "sample04.h5ad.json"
    assert json.loads(written.read_text())["version"] == 1
    assert_equal(h5lens.read_anndata(written), ad.read_h5ad(good))
    assert _expected_chunks(good, threshold=0)[0] == h5lens.Manifest.load(written).n_chunks - sum(
        len(t.inline) for t in h5lens.Manifest.load(written).chunks.values()
    )


# -- what a run takes --------------------------------------------------------------------------


def test_sources_globs_prefixes_and_names(tmp_path):
    from h5lens.many.sources import plan_jobs

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for path in (tmp_path / "a" / "x.h5ad", tmp_path / "b" / "x.h5ad", tmp_path / "a" / "y.nwb"):
        path.write_bytes(b"")
    (tmp_path / "a" / "notes.txt").write_text("")
    out = tmp_path / "out"
    prefix = plan_jobs([str(tmp_path)], str(out))  # a directory: its HDF5 names, layout kept
    assert [Path(j.manifest).relative_to(out).as_posix() for j in prefix] == [
        "a/x.h5ad.json", "a/y.nwb.json", "b/x.h5ad.json"
    ]
    globbed = plan_jobs([str(tmp_path / "a" / "*")], str(out))  # a glob takes what it names
    assert sorted(Path(j.source).name for j in globbed) == ["notes.txt", "x.h5ad", "y.nwb"]
    with pytest.raises(InvalidOptionError, match="would both be written"):
        plan_jobs([str(tmp_path / "a" / "x.h5ad"), str(tmp_path / "b" / "x.h5ad")], str(out))
    with pytest.raises(InvalidOptionError, match="matches no file"):
        plan_jobs([str(tmp_path / "*.zarr")], str(out))
    # DEST inside the prefix: its manifests are not sources
    (tmp_path / "a" / "m").mkdir()
    (tmp_path / "a" / "m" / "old.h5").write_bytes(b"")
    assert all("/m/" not in j.source for j in plan_jobs([str(tmp_path / "a")], str(tmp_path / "a" / "m")))


def test_bad_options_fail_before_any_work(tmp_path):
    with pytest.raises(InvalidOptionError, match="format"):
        h5lens.index_many([str(tmp_path)], tmp_path / "out", format="yaml")
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidOptionError, match="directory"):
        h5lens.index_many([str(tmp_path)], tmp_path / "file")
