"""What ``combine`` takes besides a list of manifests: HDF5 files indexed on the way (here,
or one dask task per file on a LocalCluster, as index-many runs them), and at the command
line a directory, prefix or glob of manifests. Compared with anndata.concat of
anndata.read_h5ad of the files anndata wrote."""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from anndata.tests.helpers import assert_equal

import h5lens
from h5lens.errors import H5LensError

GENES = 30


def _write(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    dense = rng.random((n, GENES), dtype=np.float32)
    dense[dense < 0.6] = 0
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(rng.choice([f"t{seed}", "shared"], n)), "score": rng.random(n)},
        index=[f"f{seed}c{i}" for i in range(n)],
    )
    var = pd.DataFrame(index=[f"g{j}" for j in range(GENES)])
    ad.AnnData(sp.csr_matrix(dense), obs=obs, var=var).write_h5ad(path, compression="gzip")
    return path


@pytest.fixture
def h5ads(tmp_path) -> list[Path]:
    (tmp_path / "files").mkdir()
    return [_write(tmp_path / "files" / f"f{i}.h5ad", n, i) for i, n in enumerate((120, 75, 201))]


def _expected(paths: list[Path]) -> ad.AnnData:
    return ad.concat([ad.read_h5ad(p) for p in paths])


def test_files_indexed_here(h5ads):
    assert_equal(h5lens.read_anndata(h5lens.combine(h5ads)), _expected(h5ads))


def test_files_indexed_on_a_local_cluster(h5ads, tmp_path):
    """Files and manifests mixed, in the order given: the files are indexed one task each on
    a LocalCluster started for the call and closed after."""
    manifest = tmp_path / "f1.h5ad.json"
    h5lens.index(h5ads[1]).to_json(manifest)
    given = [h5ads[0], manifest, h5ads[2]]
    combined = h5lens.combine(given, workers=1)
    assert_equal(h5lens.read_anndata(combined), _expected(h5ads))
    assert {source.url for source in combined.sources} == {str(p) for p in h5ads}


def test_a_file_that_fails_on_the_cluster_is_named(h5ads, tmp_path):
    broken = tmp_path / "broken.h5ad"
    broken.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 200)  # HDF5's signature, then nothing HDF5 reads
    with pytest.raises(H5LensError, match="broken.h5ad"):
        h5lens.combine([h5ads[0], broken], workers=1)


def test_the_command_takes_a_directory_of_manifests(h5ads, tmp_path):
    from cli_runner import h5lens as run

    out_dir = tmp_path / "manifests"
    out_dir.mkdir()
    for path in h5ads:
        assert run("index", path, "-o", out_dir / (path.name + ".json")).status == 0
    out = tmp_path / "all.json"
    result = run("combine", out_dir, "-o", out)
    assert result.status == 0, result.stderr
    assert_equal(h5lens.read_anndata(out), _expected(h5ads))  # f0, f1, f2: the listing's sorted order
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = run("combine", empty, "-o", tmp_path / "none.json")
    assert refused.status == 2 and "holds no manifest" in refused.error_line()
    assert not (tmp_path / "none.json").exists()


def test_the_command_indexes_files_on_workers(h5ads, tmp_path):
    from cli_runner import h5lens as run

    out = tmp_path / "all.h5lens"
    result = run("combine", *h5ads, "-o", out, "--workers", "1")
    assert result.status == 0, result.stderr
    assert_equal(h5lens.read_anndata(out), _expected(h5ads))
