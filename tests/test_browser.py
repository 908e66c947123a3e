"""``h5lens check --for browser`` and ``h5lens index --for browser`` (h5lens.browser).

What the check says a browser reads is put to the test in Node, against h5py, by
tests/test_js_codecs.py; here: what it names and why, its exit status, and what ``index
--for browser`` refuses and writes (read back by h5lens: nothing lost).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from cli_runner import h5lens as run
from h5lens.browser import check_for_browser, readers
from h5lens.codecs.table import DECODERS
from h5lens.errors import InvalidOptionError

URL = "https://data.example.org/files/sample.h5"


def _file(path: Path, *, odd: bool = True) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip", data=np.arange(100.0), chunks=(30,), compression="gzip", shuffle=True)
        if odd:
            f.create_dataset("lzf", data=np.arange(1000, dtype="<i4") % 7, chunks=(300,), compression="lzf")
            f.create_dataset("fixed", data=np.array([b"ab", b"c"] * 10, dtype="S2"), chunks=(8,))
            f.create_dataset("my data", data=np.arange(10), chunks=(5,))
            f["gzip"].attrs["missing"] = np.nan
    return path


def _by_place(found: tuple) -> dict[tuple[str, str], object]:
    return {(f.where, f.kind): f for f in found}


def test_check_names_codecs_types_names_attributes_and_urls(tmp_path: Path) -> None:
    manifest = h5lens.index(_file(tmp_path / "f.h5"), inline_threshold=0)
    manifest.save(tmp_path / "f.json")
    found = _by_place(check_for_browser(h5lens.load_manifest(tmp_path / "f.json")).findings)
    assert found[("/lzf", "codec")].with_pack  # h5lens.lzf: the pack decodes it
    assert not found[("/fixed", "data type")].with_pack  # null_terminated_bytes: no zarrita type
    assert found[("/my data", "name")].with_pack
    assert found[("/gzip", "attribute")].with_pack and "missing" in found[("/gzip", "attribute")].reason
    assert found[("f.h5", "url")].with_pack  # relative: the pack resolves it against the manifest
    assert ("/gzip", "codec") not in found  # numcodecs.zlib and numcodecs.shuffle: zarrita's own


def test_check_exit_status_says_who_reads_it(tmp_path: Path) -> None:
    h5lens.index(_file(tmp_path / "f.h5"), inline_threshold=0).save(tmp_path / "f.json")
    done = run("check", tmp_path / "f.json", "--for", "browser")
    assert done.status == 3, done.stdout + done.stderr
    assert "/fixed: data type: zarrita.js 0.7 has no data type null_terminated_bytes (no browser reader)" in done.stdout
    assert "/lzf: codec: h5lens.lzf: not in zarrita.js 0.7 (needs h5lens-codecs)" in done.stdout

    plain = h5lens.index(_file(tmp_path / "g.h5", odd=False), inline_threshold=0, url=URL)
    plain.save(tmp_path / "g.json", relative_sources=False)
    done = run("check", tmp_path / "g.json", "--for", "browser")
    assert done.status == 0, done.stdout + done.stderr
    assert "zarrita.js 0.7 reads all 1 arrays" in done.stdout

    local = h5lens.index(tmp_path / "g.h5", inline_threshold=0)
    local.save(tmp_path / "g-local.json")  # beside its file: a relative URL, which only the pack resolves
    done = run("check", tmp_path / "g-local.json", "--for", "browser")
    assert done.status == 1, done.stdout + done.stderr
    assert "read right with h5lens-codecs" in done.stdout


def test_check_refuses_an_unknown_reader(tmp_path: Path) -> None:
    h5lens.index(_file(tmp_path / "f.h5", odd=False)).save(tmp_path / "f.json")
    assert "one of browser" in run("check", tmp_path / "f.json", "--for", "netscape").error_line()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (None, "needs the https:// URL"),
        ("files/sample.h5", "a relative URL in a manifest for browsers is resolved against the page"),
        ("s3://bucket/sample.h5", "a browser fetches http(s) URLs only"),
    ],
)
def test_index_for_browser_refuses_urls_a_browser_does_not_fetch(tmp_path: Path, url: str | None, said: str) -> None:
    source = _file(tmp_path / "f.h5")
    extra = [] if url is None else ["--url", url]
    done = run("index", source, "-o", tmp_path / "f.json", "--for", "browser", *extra)
    line = done.error_line()
    assert said in line and "--url https://HOST/PATH" in line
    assert not (tmp_path / "f.json").exists()


def test_browser_url_speaks_python_outside_the_command_line() -> None:
    from h5lens.browser import browser_url

    with pytest.raises(InvalidOptionError, match='url="https://HOST/PATH"'):
        browser_url(None, "f.h5")
    assert browser_url(URL, "f.h5") == URL


def test_index_for_browser_refuses_the_compact_form(tmp_path: Path) -> None:
    done = run("index", _file(tmp_path / "f.h5"), "-o", tmp_path / "f.h5lens", "--for", "browser", "--url", URL)
    assert "name it NAME.json" in done.error_line()


def test_index_for_browser_writes_nan_as_strings_and_reads_back_the_same(tmp_path: Path) -> None:
    source = _file(tmp_path / "f.h5")
    out = tmp_path / "f.json"
    done = run("index", source, "-o", out, "--for", "browser", "--url", URL, "--inline-threshold", "0")
    assert done.status == 0, done.stderr
    assert "/fixed: data type" in done.stdout and "no browser reader" in done.stdout
    written = json.loads(out.read_text())
    assert written["h5lens"]["convention"] == "proposal"
    assert written["templates"] == {"u": URL} or URL in json.dumps(written["refs"])
    assert json.loads(written["refs"]["gzip/zarr.json"])["attributes"]["missing"] == "NaN"  # JSON.parse reads it
    # h5lens reads the proposal's strings back as floats: nothing lost
    with h5py.File(source, "r") as f:
        assert math.isnan(f["gzip"].attrs["missing"])
    opened = h5lens.open(out, source_urls={URL: str(source)})  # the file is served nowhere here
    assert math.isnan(opened["gzip"].attrs["missing"])
    with h5py.File(source, "r") as f:
        np.testing.assert_array_equal(opened["gzip"][()], f["gzip"][()])
    found = check_for_browser(h5lens.load_manifest(out)).findings
    assert not [f for f in found if f.kind in ("attribute", "url")]


def test_every_codec_h5lens_writes_is_classified() -> None:
    """A codec the filter table writes is zarrita's, the pack's, or named as having no browser decoder."""
    written = set(DECODERS) | {"bytes", "vlen-utf8", "vlen-bytes", "h5lens.bitfield", "h5lens.spacepad"}
    known = readers.ZARRITA_CODECS | readers.PACK_CODECS | set(readers.NO_BROWSER_DECODER)
    assert written - known == set()
    assert not readers.PACK_CODECS & readers.ZARRITA_CODECS


def test_check_names_the_compact_form_and_urls_browsers_fetch_otherwise(tmp_path: Path) -> None:
    source = _file(tmp_path / "g.h5", odd=False)
    h5lens.index(source, url="s3://bucket/g.h5").save(tmp_path / "g.h5lens", relative_sources=False)
    done = run("check", tmp_path / "g.h5lens", "--for", "browser")
    assert done.status == 3, done.stdout + done.stderr
    assert "the compact form has no JavaScript reader" in done.stdout
    assert "s3://bucket/g.h5: url: fetched as https://s3.amazonaws.com/bucket/g.h5" in done.stdout


def test_check_knows_zarrita_unshuffles_by_the_data_type(tmp_path: Path) -> None:
    """zarrita.js's numcodecs.shuffle takes the element size from the data type, not from
    its configuration (libhdf5 may shuffle by a whole compound element, or what PyTables
    recorded): such an array is named, not read wrong."""
    import dataclasses

    manifest = h5lens.index(_file(tmp_path / "g.h5", odd=False), url=URL)
    doc = json.loads(json.dumps(manifest.nodes["gzip"]))
    assert {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}} in doc["codecs"]
    assert not check_for_browser(manifest).findings
    doc["codecs"] = [
        {**c, "configuration": {"elementsize": 16}} if c["name"] == "numcodecs.shuffle" else c for c in doc["codecs"]
    ]
    changed = dataclasses.replace(manifest, nodes={**manifest.nodes, "gzip": doc})
    (finding,) = check_for_browser(changed).findings
    assert (finding.where, finding.kind, finding.with_pack) == ("/gzip", "codec", False)
    assert "unshuffles by the data type's 8 bytes" in finding.reason


def _adata_file(path: Path) -> Path:
    """An h5ad written by anndata: CSR X, two embeddings, categorical obs columns (one named
    with a space, which @zarrita/storage's ReferenceStore, Vitessce's, looks up as missing)."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(rng.choice(["T", "B"], 50)), "my batch": pd.Categorical(rng.choice(["a", "b"], 50))},
        index=[f"c{i}" for i in range(50)],
    )
    adata = ad.AnnData(X=sp.random(50, 8, density=0.3, format="csr", dtype=np.float32), obs=obs,
                       obsm={"X_umap": rng.standard_normal((50, 2)), "X_pca": rng.standard_normal((50, 3))})
    adata.write_h5ad(path)
    return path


def test_vitessce_config_shows_what_vitessce_reads_of_an_h5ad(tmp_path: Path) -> None:
    path = _adata_file(tmp_path / "a.h5ad")
    manifest = h5lens.index(path, url="https://data.example.org/a.h5ad", convention="proposal", inline_threshold=0)
    manifest.save(tmp_path / "a.h5ad.json", relative_sources=False)
    done = run("vitessce-config", tmp_path / "a.h5ad.json", "--manifest-url", "https://data.example.org/a.h5ad.json",
               "-o", tmp_path / "config.json")
    assert done.status == 0, done.stdout + done.stderr
    assert "obs/my batch: left out of the cell sets: /obs/my batch: name: 'my batch' changes in a URL" in done.stderr
    config = json.loads((tmp_path / "config.json").read_text())
    [file] = config["datasets"][0]["files"]
    assert (file["fileType"], file["url"]) == ("anndata.h5ad", "https://data.example.org/a.h5ad")
    assert file["options"]["refSpecUrl"] == "https://data.example.org/a.h5ad.json"
    assert [e["path"] for e in file["options"]["obsEmbedding"]] == ["obsm/X_pca", "obsm/X_umap"]
    assert file["options"]["obsSets"] == [{"name": "cell_type", "path": "obs/cell_type"}]
    assert file["options"]["obsFeatureMatrix"] == {"path": "X"}
    assert {v["component"] for v in config["layout"]} == {"scatterplot", "obsSets", "featureList"}
    assert set(config["coordinationSpace"]["embeddingType"].values()) == {"PCA", "UMAP"}


def test_vitessce_config_refuses_what_vitessce_cannot_open(tmp_path: Path) -> None:
    path = _adata_file(tmp_path / "a.h5ad")
    h5lens.index(path).save(tmp_path / "local.json")  # beside its file: a relative source URL
    done = run("vitessce-config", tmp_path / "local.json", "--manifest-url", "https://data.example.org/local.json")
    assert done.status == 2 and "a relative URL in a manifest for browsers" in done.stderr, done.stderr
    done = run("vitessce-config", tmp_path / "local.json")
    assert done.status == 2 and "give --manifest-url" in done.stderr, done.stderr
    h5lens.index(_file(tmp_path / "f.h5", odd=False), url=URL).save(tmp_path / "f.json", relative_sources=False)
    done = run("vitessce-config", tmp_path / "f.json", "--manifest-url", "https://data.example.org/f.json")
    assert done.status == 2 and "not an h5ad" in done.stderr, done.stderr
