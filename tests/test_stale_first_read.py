"""A manifest of many sources (a combined one) checks each source before its first byte is
read, not all at open: opening it and listing its obs touch no file, and a source that changed
or went missing after combining is still refused, by name, by the first read of its rows,
while the other files' rows read as anndata reads them."""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import h5lens
import h5lens.store
from h5lens.errors import SourceNotFoundError, StaleSourceError

CELLS = (40, 25, 33)
GENES = 12


def _write(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    dense = rng.random((n, GENES), dtype=np.float32)
    dense[dense < 0.6] = 0
    obs = pd.DataFrame({"score": rng.random(n)}, index=[f"f{seed}c{i}" for i in range(n)])
    ad.AnnData(sp.csr_matrix(dense), obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(GENES)])).write_h5ad(path)
    return path


@pytest.fixture
def combined(tmp_path, monkeypatch) -> tuple[list[Path], Path]:
    """Three files combined (their sources all referenced), and stores that check sources on
    first read from two sources on (as a combined manifest of many files does)."""
    paths = [_write(tmp_path / f"f{i}.h5ad", n, i) for i, n in enumerate(CELLS)]
    target = tmp_path / "combined.json"
    h5lens.combine([h5lens.index(p, inline_threshold=0) for p in paths]).to_json(target)
    monkeypatch.setattr(h5lens.store, "CHECK_AT_OPEN", 1)
    return paths, target


def test_a_changed_source_is_refused_when_first_read_after_a_lazy_open(combined):
    paths, target = combined
    first = ad.read_h5ad(paths[0])
    _write(paths[1], CELLS[1], 7)  # replaced after combining (same name, other bytes)
    group = h5lens.open_group(target)  # no source read: none checked
    assert list(group["obs"].attrs["column-order"]) == ["score"]
    lazy = h5lens.read_anndata(target, lazy=True)
    assert list(lazy.obs.columns) == ["score"] and lazy.n_obs == sum(CELLS)
    # the rows of an unchanged file read (only its source is checked) ...
    np.testing.assert_array_equal(lazy.X[: CELLS[0]].compute().toarray(), first.X.toarray())
    # ... those of the changed one are refused, naming it, by each reader
    with pytest.raises(StaleSourceError, match="f1.h5ad"):
        lazy.X.compute()
    with pytest.raises(StaleSourceError, match="f1.h5ad"):
        h5lens.read_anndata(target)
    with zarr.config.set({"array.rectilinear_chunks": True}), pytest.raises(StaleSourceError, match="f1.h5ad"):
        group["X/data"][:]
    problems = h5lens.validate(target)
    assert len(problems) == 1 and "f1.h5ad" in str(problems[0])


def test_a_missing_source_is_named_when_first_read(combined):
    paths, target = combined
    paths[2].unlink()
    lazy = h5lens.read_anndata(target, lazy=True)
    np.testing.assert_array_equal(lazy.X[: CELLS[0]].compute().toarray(), ad.read_h5ad(paths[0]).X.toarray())
    with pytest.raises(SourceNotFoundError, match="f2.h5ad"):
        lazy.X.compute()
    with pytest.raises(SourceNotFoundError, match="f2.h5ad"):
        h5lens.read_anndata(target)


def test_few_sources_are_checked_at_open(combined, monkeypatch):
    """Up to CHECK_AT_OPEN sources, opening checks them all, as before."""
    paths, target = combined
    monkeypatch.setattr(h5lens.store, "CHECK_AT_OPEN", len(paths))
    _write(paths[1], CELLS[1], 7)
    with pytest.raises(StaleSourceError, match="f1.h5ad"):
        h5lens.open_group(target)
    h5lens.open_group(target, verify=False)


def test_on_s3_a_replaced_object_is_refused_when_first_read(tmp_path, s3, monkeypatch):
    """Objects on S3 (moto), read through the event loop: the first read of a replaced
    object's rows is refused by name, the other files' rows read as anndata reads them."""
    options = s3.storage_options()
    fs = s3.filesystem()
    paths = [_write(tmp_path / f"f{i}.h5ad", n, i) for i, n in enumerate(CELLS)]
    urls = []
    for path in paths:
        fs.put(str(path), f"bucket/first-read/{path.name}")
        urls.append(f"s3://bucket/first-read/{path.name}")
    manifests = [h5lens.index(u, storage_options=options, inline_threshold=0) for u in urls]
    combined = h5lens.combine(manifests, storage_options=options)
    monkeypatch.setattr(h5lens.store, "CHECK_AT_OPEN", 1)
    fs.put(str(_write(tmp_path / "other.h5ad", CELLS[1], 7)), "bucket/first-read/f1.h5ad")  # a new ETag
    lazy = h5lens.read_anndata(combined, lazy=True, storage_options=options)
    assert list(lazy.obs.columns) == ["score"]
    np.testing.assert_array_equal(lazy.X[: CELLS[0]].compute().toarray(), ad.read_h5ad(paths[0]).X.toarray())
    with pytest.raises(StaleSourceError, match="f1.h5ad"):
        lazy.X.compute()
    group = h5lens.open_group(combined, storage_options=options)
    with zarr.config.set({"array.rectilinear_chunks": True}), pytest.raises(StaleSourceError, match="f1.h5ad"):
        group["X/data"][:]
    with pytest.raises(StaleSourceError, match="f1.h5ad"):
        h5lens.read_anndata(combined, storage_options=options)


@pytest.mark.parametrize("inline_threshold", [0, 400], ids=["all-referenced", "only-X-referenced"])
def test_combine_refuses_a_file_changed_since_indexing(tmp_path, inline_threshold):
    """combine checks every file before it references its bytes: a file changed since its
    manifest was made is refused by name, whether combine read any of its bytes (obs, var,
    indptr referenced) or none (only X/data and X/indices referenced: checked as its store
    closes), and a file gone is named too."""
    paths = [_write(tmp_path / f"f{i}.h5ad", n, i) for i, n in enumerate(CELLS)]
    manifests = [h5lens.index(p, inline_threshold=inline_threshold) for p in paths]
    assert all(m.chunks["X/data"].source.max() == 0 for m in manifests)  # referenced
    _write(paths[1], CELLS[1], 7)
    with pytest.raises(StaleSourceError, match="f1.h5ad"):
        h5lens.combine(manifests)
    paths[1].unlink()
    with pytest.raises(SourceNotFoundError, match="f1.h5ad"):
        h5lens.combine(manifests)
