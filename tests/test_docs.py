"""The documentation's code runs: every ```python block of README.md and docs/*.md, and the
``h5lens`` command lines of README.md, against files made the way their names say.

Blocks of one page run in order in one namespace (like a reader following the page), in
a directory holding the files the docs name: ``atlas.h5ad`` written by anndata,
``air.nc`` by xarray, ``lineage.h5td`` by treedata, ``session.nwb`` / ``recording.nwb`` /
``linked.nwb`` by pynwb, and ``refs/``'s sample; a page that names a real file of ``shared/data``
gets it copied in under the name it uses (:data:`SHARED_FILES`). ``s3://bucket/…`` is moto on 127.0.0.1 (through
``AWS_ENDPOINT_URL_S3``), with ``atlas.h5ad`` uploaded there. A block that cannot run
here is preceded by ``<!-- doc-test: skip REASON -->``; the reason is shown.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from shared_data import shared_file

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# page -> {name its blocks use: file of shared/data}, copied into the directory its blocks run in
SHARED_FILES = {"ml-loading.md": {"pbmc68k_reduced.h5ad": "scanpy-1.12.4_10x_pbmc68k_reduced.h5ad"}}
BLOCK = re.compile(r"(?:<!--\s*doc-test:\s*(?P<mark>.*?)\s*-->\s*\n)?```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)


def blocks(page: Path, lang: str) -> list[tuple[str | None, str]]:
    return [(m["mark"], m["code"]) for m in BLOCK.finditer(page.read_text()) if m["lang"] == lang]


def _atlas(path: Path) -> None:
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    n_obs = 2500
    rng = np.random.default_rng(0)
    # scaled values, as an analysed atlas holds them (scanpy's pbmc68k): float32, each gene's
    # values centred on 0, so a float32 sum of them is off by more than np.allclose allows
    x = sp.random(n_obs, 60, density=0.1, format="csc", random_state=0, dtype=np.float64,
                  data_rvs=lambda n: rng.standard_normal(n))
    for gene in range(x.shape[1]):
        values = x.data[x.indptr[gene] : x.indptr[gene + 1]]
        values -= values.mean()
    adata = ad.AnnData(
        X=x.tocsr().astype(np.float32),
        obs=pd.DataFrame({"cell_type": pd.Categorical(rng.choice(["T", "B", "NK"], n_obs))},
                         index=[f"cell{i}" for i in range(n_obs)]),
        var=pd.DataFrame(index=[f"gene{i}" for i in range(60)]),
    )
    adata.obsm["X_pca"] = rng.standard_normal((n_obs, 5)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path)


def _air(path: Path) -> None:
    """A netCDF-4 file as xarray writes one: a compressed, chunked variable along an
    unlimited dimension."""
    import pandas as pd
    import xarray as xr

    air = xr.Dataset(
        {"t2m": (("time", "lat"), np.random.default_rng(0).normal(280, 5, (4, 3)).astype("f4"), {"units": "K"})},
        coords={"time": pd.date_range("2024-01-01", periods=4), "lat": [-10.0, 0.0, 10.0]},
    )
    air["t2m"].encoding.update(zlib=True, shuffle=True, chunksizes=(2, 3))
    air.to_netcdf(path, engine="h5netcdf", unlimited_dims=["time"])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, s3) -> Path:
    import h5lens

    sys.path.insert(0, str(Path(__file__).parent))
    import test_nwb
    import test_treedata

    root = tmp_path_factory.mktemp("docs")
    _atlas(root / "atlas.h5ad")
    _air(root / "air.nc")
    test_treedata._write(test_treedata._generated(), root / "lineage.h5td")
    test_nwb.write_ecephys(root / "session.nwb", series_name="ElectricalSeries")  # pynwb's usual name
    shutil.copy(root / "session.nwb", root / "recording.nwb")
    test_nwb.write_linked(root / "linked.nwb", root / "session.nwb")
    h5lens.index(root / "linked.nwb").to_json(root / "linked.nwb.json")
    h5lens.index(root / "recording.nwb").to_json(root / "recording.nwb.json")
    for name in ("sample.h5ad", "sample.h5ad.json"):
        shutil.copy(ROOT / "refs" / name, root / name)
    s3.filesystem().put(str(root / "atlas.h5ad"), "bucket/atlas.h5ad")
    return root


@pytest.fixture
def s3_environment(s3, monkeypatch) -> dict[str, str]:
    values = {
        "AWS_ENDPOINT_URL_S3": s3.endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.name)
def test_python_blocks_run(page, workdir, s3_environment, monkeypatch):
    for name, shared in SHARED_FILES.get(page.name, {}).items():
        shutil.copy(shared_file(shared), workdir / name)
    monkeypatch.chdir(workdir)
    namespace: dict = {"__name__": f"doc:{page.name}"}
    for number, (mark, code) in enumerate(blocks(page, "python")):
        if mark and mark.startswith("skip"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exec(compile(code, f"{page.name} python block {number + 1}", "exec"), namespace)  # noqa: S102
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{page.name}, python block {number + 1}: {type(e).__name__}: {e}\n{code}")


def _commands(page: Path) -> list[str]:
    """The ``h5lens …`` lines of a page's shell blocks, comments cut (``make`` lines are the README's setup)."""
    lines = []
    for mark, code in blocks(page, "sh"):
        if mark and mark.startswith("skip"):
            continue
        for line in code.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["h5lens"]:
                lines.append(shlex.join(words))
    return lines


@pytest.mark.parametrize("command", _commands(ROOT / "README.md"))
def test_readme_commands_run(command, workdir, s3_environment):
    argv = shlex.split(command)
    env = {**os.environ, **s3_environment}
    result = subprocess.run(
        [sys.executable, "-m", "h5lens.cli", *argv[1:]], cwd=workdir, capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
