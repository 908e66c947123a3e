"""h5lens.validate (and the command) on combined manifests whose arrays only h5lens's readers
assemble: a matrix of files whose var differ (a marker whose codec refuses; its values in each
file's arrays) and netCDF variables recorded per file (their stored values behind a record).
Valid manifests validate clean, deep; a damaged chunk behind either is still found."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

import h5lens
from test_combine_encoding import _write as write_netcdf


def _differing_var(tmp_path: Path) -> list[Path]:
    paths = []
    for i, n in enumerate((90, 140)):
        x = sp.random(n, 20, density=0.3, format="csr", dtype=np.float32, random_state=i)
        adata = ad.AnnData(x, var=pd.DataFrame(index=[f"g{j + 6 * i}" for j in range(20)]))
        adata.obs_names = [f"f{i}c{k}" for k in range(n)]
        adata.write_h5ad(tmp_path / f"f{i}.h5ad", compression="gzip")
        paths.append(tmp_path / f"f{i}.h5ad")
    return paths


def _damaged(manifest: h5lens.Manifest, path: str) -> h5lens.Manifest:
    """The manifest with the first referenced chunk of ``path`` pointed one byte later."""
    table = manifest.chunks[path]
    offset = table.offset.copy()
    first = int(np.flatnonzero(table.source.ravel() >= 0)[0])
    offset.flat[first] += 1
    chunks = {**manifest.chunks, path: replace(table, offset=offset)}
    return replace(manifest, chunks=chunks)


def test_files_of_other_var(tmp_path):
    combined = h5lens.combine(_differing_var(tmp_path), join="outer")
    assert any(doc.get("codecs", [{}])[0].get("name") == "h5lens.file_columns" for doc in combined.nodes.values()
               if doc.get("node_type") == "array")  # fmt: skip
    assert h5lens.validate(combined, deep=True) == []
    combined.save(tmp_path / "c.json")
    from cli_runner import h5lens as run

    result = run("validate", tmp_path / "c.json", "--deep")
    assert result.status == 0 and "valid" in result.stdout, result.stdout + result.stderr
    # X/data is each file's own, referenced: a damaged chunk of it is found
    problems = h5lens.validate(_damaged(combined, "X/data"), deep=True)
    assert [p.path for p in problems] == ["/X/data"]


def test_netcdf_recorded_per_file(tmp_path):
    paths = [write_netcdf(tmp_path / "a.nc", 0, 5), write_netcdf(tmp_path / "b.nc", 5, 3, scale=0.02, offset=250.0)]
    combined = h5lens.combine([h5lens.index(p, inline_threshold=0) for p in paths], dim="time", encoding="per-file")
    recorded = [path for path, doc in combined.nodes.items()
                if doc.get("node_type") == "array" and doc["codecs"][0]["name"] == "h5lens.per_file_encoding"]  # fmt: skip
    assert recorded == ["tas"]
    assert h5lens.validate(combined, deep=True) == []
    problems = h5lens.validate(_damaged(combined, "tas"), deep=True)
    assert [p.path for p in problems] == ["/tas"]
