"""h5lens.combine: many h5ad files along obs as one manifest, compared with anndata.concat of
anndata.read_h5ad of the files (files anndata itself wrote, of different cell counts so that
their chunks are uneven), through h5lens's readers and through zarr's own."""

from __future__ import annotations

import json
from pathlib import Path

import anndata as ad
import fsspec
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata.tests.helpers import assert_equal

import h5lens
from h5lens.combining import combine_with_summary
from h5lens.errors import InvalidOptionError, StaleSourceError, UnsupportedFeatureError

RECTILINEAR = {"array.rectilinear_chunks": True}
CELLS = (150, 233, 97)
GENES = 40


def _adata(n: int, seed: int, *, fmt: str = "csr", extra_column: bool = False) -> ad.AnnData:
    rng = np.random.default_rng(seed)
    dense = rng.random((n, GENES), dtype=np.float32)
    dense[dense < 0.7] = 0
    x = sp.csr_matrix(dense) if fmt == "csr" else sp.csc_matrix(dense) if fmt == "csc" else dense
    kinds = [f"type{seed}_{i}" for i in range(3)] + ["shared"]
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(kinds, n)),
            "score": rng.random(n),
            "count": rng.integers(0, 100, n),
        },
        index=[f"c{i}" for i in range(n)],
    )
    if extra_column:
        obs["only_here"] = rng.random(n)
    var = pd.DataFrame({"gene_id": [f"id{j}" for j in range(GENES)]}, index=[f"g{j}" for j in range(GENES)])
    adata = ad.AnnData(x, obs=obs, var=var)
    adata.obsm["X_pca"] = rng.random((n, 5)).astype(np.float32)
    adata.layers["counts"] = sp.csr_matrix(dense * 3)
    adata.uns["note"] = f"file {seed}"
    return adata


def _dense_only(adata: ad.AnnData) -> ad.AnnData:
    del adata.layers["counts"]
    return adata


def _without_obsm(adata: ad.AnnData) -> ad.AnnData:
    del adata.obsm["X_pca"]
    return adata


def _write(tmp_path: Path, name: str, adata: ad.AnnData, **kwargs) -> Path:
    path = tmp_path / name
    adata.write_h5ad(path, **kwargs)
    return path


def _rechunk(path: Path, adata: ad.AnnData, chunk: int) -> None:
    """X and the layer written again by anndata in gzip chunks of ``chunk`` values (h5py's own
    guess for files this small is one chunk each)."""
    import h5py

    with h5py.File(path, "a") as f:
        for group, key, value in ((f, "X", adata.X), (f["layers"], "counts", adata.layers["counts"])):
            del group[key]
            ad.io.write_elem(group, key, value, dataset_kwargs={"compression": "gzip", "chunks": (chunk,)})


@pytest.fixture
def h5ads(tmp_path) -> list[Path]:
    """Three csr files, gzip-compressed in chunks of 64 values: each file's last chunk ends short."""
    paths = []
    for i, n in enumerate(CELLS):
        adata = _adata(n, i, extra_column=i == 1)
        path = _write(tmp_path, f"f{i}.h5ad", adata, compression="gzip")
        _rechunk(path, adata, 64)
        paths.append(path)
    return paths


def _manifests(paths: list[Path], tmp_path: Path, **index) -> list[Path]:
    out = []
    for path in paths:
        target = tmp_path / (path.name + ".json")
        h5lens.index(path, **index).to_json(target)
        out.append(target)
    return out


def _expected(paths: list[Path], **options) -> ad.AnnData:
    return ad.concat([ad.read_h5ad(p) for p in paths], **options)


def _plain_zarr(manifest_path: Path) -> zarr.storage.FsspecStore:
    fs = fsspec.filesystem(
        "reference", fo=str(manifest_path), asynchronous=True, remote_protocol="file",
        remote_options={"asynchronous": True},
    )  # fmt: skip
    return zarr.storage.FsspecStore(fs, read_only=True, path="")


OPTIONS = [
    {"join": "inner"},
    {"join": "outer", "label": "batch", "keys": ["a", "b", "c"], "index_unique": "-"},
]


@pytest.mark.parametrize("options", OPTIONS, ids=["inner", "outer-label"])
def test_csr_files_combined_equal_anndata_concat(h5ads, tmp_path, options):
    manifests = _manifests(h5ads, tmp_path, inline_threshold=0)
    combined, summary = combine_with_summary(manifests, **options)
    expected = _expected(h5ads, **options)
    assert_equal(h5lens.read_anndata(combined), expected)
    # X's data and indices, layers' and obsm are references into the files, on a rectilinear grid
    referenced = {a.path for a in summary.referenced}
    assert {"X/data", "X/indices", "layers/counts/data", "obsm/X_pca"} <= referenced
    assert "X/data" in summary.rectilinear
    assert combined.chunks["X/data"].n_present > len(h5ads)
    assert "X/indptr" in summary.written


def test_lazy_read_equals_anndata_concat(h5ads, tmp_path):
    combined = h5lens.combine(_manifests(h5ads, tmp_path, inline_threshold=0), index_unique="-")
    expected = _expected(h5ads, index_unique="-")
    lazy = h5lens.read_anndata(combined, lazy=True)
    got = lazy.to_memory()
    assert list(got.obs_names) == list(expected.obs_names)
    assert_equal(got.X, expected.X)
    assert_equal(got.layers["counts"], expected.layers["counts"])
    np.testing.assert_array_equal(got.obsm["X_pca"], expected.obsm["X_pca"])
    # a slice across the files' boundary reads only its rows
    rows = slice(CELLS[0] - 7, CELLS[0] + CELLS[1] + 5)
    assert_equal(lazy.X[rows].compute(), expected.X[rows])


def test_zarr_readers_need_the_rectilinear_flag(h5ads, tmp_path):
    combined = h5lens.combine(_manifests(h5ads, tmp_path, inline_threshold=0))
    target = tmp_path / "combined.json"
    combined.save(target, relative_sources=False)  # fsspec resolves relative URLs against the working directory
    expected = _expected(h5ads)
    with pytest.raises(ValueError, match="rectilinear"):
        ad.read_zarr(_plain_zarr(target))
    with zarr.config.set(RECTILINEAR):
        assert_equal(ad.read_zarr(_plain_zarr(target)), expected)
        # anndata's lazy reader asks a dense array for zarr's Array.chunks, which a rectilinear
        # grid does not have (zarr: "use read_chunk_sizes"): obsm/X_pca stops it (anndata 0.13)
        with pytest.raises(NotImplementedError, match="rectilinear"):
            ad.experimental.read_lazy(_plain_zarr(target))
    # without dense arrays along obs, read_lazy reads the combined csr matrices
    sparse_only = h5lens.combine(
        _manifests([_write(tmp_path, f"s{i}.h5ad", _without_obsm(ad.read_h5ad(p))) for i, p in enumerate(h5ads)], tmp_path)
    )
    sparse_target = tmp_path / "sparse.json"
    sparse_only.save(sparse_target, relative_sources=False)
    with zarr.config.set(RECTILINEAR):
        lazy = ad.experimental.read_lazy(_plain_zarr(sparse_target))
        assert_equal(lazy.X.compute(), expected.X)
        assert list(lazy.obs_names) == list(expected.obs_names)
    # h5lens's own readers need no flag, from the file too; the manifest validates, deep
    assert_equal(h5lens.read_anndata(target), expected)
    assert h5lens.validate(target, deep=True) == []
    navigated = h5lens.open(target)
    np.testing.assert_array_equal(navigated["X/data"][:], expected.X.data)


def test_contiguous_files_and_compact_form(tmp_path):
    """Uncompressed files (contiguous datasets, cut into slabs; the tail slab inline) in the
    compact form."""
    paths = [_write(tmp_path, f"u{i}.h5ad", _adata(n, i)) for i, n in enumerate(CELLS)]
    manifests = _manifests(paths, tmp_path, inline_threshold=0, slab_bytes=256)
    combined, summary = combine_with_summary(manifests)
    # a raw slab's first rows are its first bytes: cut short by reference, nothing written
    raw = {a.path: a for a in summary.referenced if a.path in ("X/data", "X/indices", "obsm/X_pca")}
    assert len(raw) == 3 and all(a.written_bytes == 0 and a.rectilinear for a in raw.values())
    target = tmp_path / "combined.h5lens"
    combined.save(target)
    assert_equal(h5lens.read_anndata(target), _expected(paths))
    assert_equal(h5lens.read_anndata(target, lazy=True).to_memory().X, _expected(paths).X)


@pytest.mark.parametrize(("fmt", "compression"), [("csc", "gzip"), ("dense", None), ("dense", "gzip")])
def test_csc_and_dense_files(tmp_path, fmt, compression):
    paths = [
        _write(tmp_path, f"{fmt}{i}.h5ad", _adata(n, i, fmt=fmt), compression=compression) for i, n in enumerate(CELLS)
    ]
    combined, summary = combine_with_summary(_manifests(paths, tmp_path, inline_threshold=0), join="outer")
    expected = _expected(paths, join="outer")
    assert_equal(h5lens.read_anndata(combined), expected)
    assert_equal(h5lens.read_anndata(combined, lazy=True).to_memory().X, expected.X)
    # lazy blocks sized by bytes: whole stored chunks of a rectilinear grid (its longest)
    assert_equal(h5lens.read_anndata(combined, lazy=True, block_bytes=4096).to_memory().obsm["X_pca"], expected.obsm["X_pca"])
    if fmt == "csc":  # a csc matrix concatenates into a csr in another order: written, and said so
        assert "X" in summary.written
    elif compression is None:  # contiguous: slabs of whole rows, referenced
        assert "X" in {a.path for a in summary.referenced}
    else:  # h5py guesses a gzip array's chunks from its shape: other columns per file, so written
        assert "X" in summary.written


def test_regular_grid_where_chunks_allow(tmp_path):
    """Files whose every array holds whole chunks combine on regular grids: zarr reads them
    without the flag; --for regular refuses only where a grid would be rectilinear."""
    paths = [_write(tmp_path, f"r{i}.h5ad", _dense_only(_adata(128, i, fmt="dense"))) for i in range(3)]
    manifests = _manifests(paths, tmp_path, inline_threshold=0, slab_bytes=32 * GENES * 4)
    combined, summary = combine_with_summary(manifests, for_readers="regular")
    assert summary.rectilinear == []
    assert combined.nodes["X"]["chunk_grid"]["name"] == "regular"
    target = tmp_path / "regular.json"
    combined.save(target, relative_sources=False)
    assert_equal(ad.read_zarr(_plain_zarr(target)), _expected(paths))
    uneven = [_write(tmp_path, f"s{i}.h5ad", _dense_only(_adata(n, i, fmt="dense"))) for i, n in enumerate(CELLS)]
    with pytest.raises(InvalidOptionError, match="/X.*rectilinear"):
        h5lens.combine(_manifests(uneven, tmp_path, inline_threshold=0, slab_bytes=32 * GENES * 4), for_readers="regular")


def test_a_file_changed_after_combining_is_refused_by_name(h5ads, tmp_path):
    combined = h5lens.combine(_manifests(h5ads, tmp_path, inline_threshold=0))
    target = tmp_path / "combined.json"
    combined.to_json(target)
    _write(tmp_path, h5ads[1].name, _adata(CELLS[1] + 1, 7), compression="gzip")  # replaced
    with pytest.raises(StaleSourceError, match="f1.h5ad"):
        h5lens.read_anndata(target)


def test_sources_keep_each_files_record(h5ads, tmp_path):
    manifests = _manifests(h5ads, tmp_path, inline_threshold=0)
    combined = h5lens.combine(manifests)
    recorded = {s.url: s for m in manifests for s in h5lens.Manifest.load(m).sources}
    assert {Path(s.url).name for s in combined.sources} == {p.name for p in h5ads}
    for source in combined.sources:
        mine = next(r for url, r in recorded.items() if Path(url).name == Path(source.url).name)
        assert (source.size, source.fingerprint) == (mine.size, mine.fingerprint)


def test_the_command(h5ads, tmp_path):
    from cli_runner import h5lens as run

    manifests = _manifests(h5ads, tmp_path, inline_threshold=0)
    out = tmp_path / "all.json"
    result = run("combine", *manifests, "-o", out, "--label", "batch", "--keys", "a,b,c")
    assert result.status == 0, result.stderr
    assert "referenced /X/data" in result.stdout and "rectilinear" in result.stdout
    assert_equal(h5lens.read_anndata(out), _expected(h5ads, label="batch", keys=["a", "b", "c"]))
    document = json.loads(json.loads(out.read_text())["refs"]["X/data/zarr.json"])
    assert document["chunk_grid"]["name"] == "rectilinear"
    growing = tmp_path / "growing.h5lens"
    assert run("combine", *manifests[:2], "-o", growing).status == 0
    assert run("combine", manifests[2], "-o", growing, "--append").status == 0
    assert_equal(h5lens.read_anndata(growing), _expected(h5ads))
    refused = run("combine", *manifests, "-o", tmp_path / "r.json", "--for", "regular")
    assert "X/data" in refused.error_line() and "rectilinear" in refused.error_line()


def test_append_adds_files_after_a_combined_manifest(h5ads, tmp_path):
    manifests = _manifests(h5ads, tmp_path, inline_threshold=0)
    first = h5lens.combine(manifests[:2])
    target = tmp_path / "growing.json"
    first.to_json(target)
    grown = h5lens.combine(manifests[2:], append_to=h5lens.Manifest.load(target))
    assert_equal(h5lens.read_anndata(grown), _expected(h5ads))
    assert_equal(h5lens.read_anndata(target), _expected(h5ads[:2]))  # what was there still reads
    with pytest.raises(InvalidOptionError, match="combine every file again"):
        h5lens.combine(manifests[2:], append_to=first, label="batch")


def test_icechunk_destination(h5ads, tmp_path):
    icechunk = pytest.importorskip("icechunk")
    from h5lens import icechunk as hic

    combined = h5lens.combine(_manifests(h5ads, tmp_path, inline_threshold=0))
    repo = hic.open_repository(str(tmp_path / "repo"), manifest=combined)
    hic.to_icechunk(combined, repo)
    reopened = icechunk.Repository.open(
        icechunk.local_filesystem_storage(str(tmp_path / "repo")),
        authorize_virtual_chunk_access=hic.virtual_chunk_credentials(combined, None),
    )
    with zarr.config.set(RECTILINEAR):
        group = zarr.open_group(reopened.readonly_session("main").store, mode="r")
        assert_equal(ad.read_zarr(group.store), _expected(h5ads))
    assert_equal(h5lens.read_anndata(f"icechunk://{tmp_path / 'repo'}"), _expected(h5ads))


def test_append_to_an_icechunk_repository_is_a_new_commit(h5ads, tmp_path):
    from cli_runner import h5lens as run

    manifests = _manifests(h5ads, tmp_path, inline_threshold=0)
    repo = f"icechunk://{tmp_path / 'repo'}"
    assert run("combine", *manifests[:2], "-o", repo).status == 0
    before = h5lens.load_manifest(repo).location  # names the snapshot read
    appended = run("combine", manifests[2], "-o", repo, "--append")
    assert appended.status == 0, appended.stderr
    assert_equal(h5lens.read_anndata(repo), _expected(h5ads))
    assert_equal(h5lens.read_anndata(before), _expected(h5ads[:2]))  # the snapshot before still reads


def test_files_on_s3(h5ads, s3, tmp_path):
    """Files on object storage (moto): indexed there, combined, read through the event loop."""
    options = s3.storage_options()
    fs = s3.filesystem()
    urls = []
    for path in h5ads:
        fs.put(str(path), f"bucket/combine/{path.name}")
        urls.append(f"s3://bucket/combine/{path.name}")
    manifests = [h5lens.index(url, storage_options=options, inline_threshold=0) for url in urls]
    combined = h5lens.combine(manifests, storage_options=options)
    assert {s.url for s in combined.sources} == set(urls)
    expected = _expected(h5ads)
    assert_equal(h5lens.read_anndata(combined, storage_options=options), expected)
    lazy = h5lens.read_anndata(combined, lazy=True, storage_options=options)
    assert_equal(lazy.X[CELLS[0] - 3 : CELLS[0] + 4].compute(), expected.X[CELLS[0] - 3 : CELLS[0] + 4])


def test_pairwise_keeps_obsp_block_diagonal_and_uns_merge(tmp_path):
    paths = []
    for i, n in enumerate(CELLS):
        adata = _adata(n, i)
        adata.obsp["distances"] = sp.random(n, n, density=0.05, format="csr", random_state=i, dtype=np.float32)
        adata.uns["shared"] = {"method": "leiden"}
        paths.append(_write(tmp_path, f"p{i}.h5ad", adata, compression="gzip"))
    options = {"pairwise": True, "uns_merge": "same", "index_unique": "-"}
    combined = h5lens.combine(_manifests(paths, tmp_path, inline_threshold=0), **options)
    got = h5lens.read_anndata(combined)
    expected = _expected(paths, **options)
    assert_equal(got, expected)
    assert got.obsp["distances"].shape == (sum(CELLS), sum(CELLS)) and dict(got.uns) == {"shared": {"method": "leiden"}}


def test_treedata_files(tmp_path):
    """TreeData files along obs: their AnnData part combined as anndata.concat makes it (trees:
    tests/test_combine_treedata.py)."""
    treedata = pytest.importorskip("treedata")

    paths = []
    for i, n in enumerate(CELLS):
        adata = _adata(n, i)
        adata.obs_names = [f"t{i}_{name}" for name in adata.obs_names]  # treedata.concat wants them unique
        path = tmp_path / f"t{i}.h5td"
        treedata.TreeData(adata).write_h5td(path)
        paths.append(path)
    manifests = _manifests(paths, tmp_path, inline_threshold=0)
    combined = h5lens.combine(manifests)
    expected = ad.concat([treedata.read_h5td(p).to_adata() for p in paths])
    assert_equal(h5lens.read_anndata(combined), expected)
    # obs names the files share: treedata.concat refuses them (anndata.concat would take them)
    twin = tmp_path / "twin.h5td"
    treedata.read_h5td(paths[0]).write_h5td(twin)
    with pytest.raises(InvalidOptionError, match="treedata.concat refuses.*obs_names must be unique"):
        h5lens.combine([manifests[0], *_manifests([twin], tmp_path)])
