"""Vitessce shows an h5ad read in place through its h5lens manifest, in headless Chromium.

The page (``tests/vitessce/page.js``) is bundled with esbuild from the pinned packages of
``tests/vitessce/package-lock.json`` (Vitessce 4.0.8, React, h5lens-codecs from ``js/``)
and served from one origin; scanpy's ``pbmc68k_reduced.h5ad``, its manifest (``index --for
browser``, every chunk by reference) and the view config ``h5lens vitessce-config`` writes
are served from another (127.0.0.1, range requests and CORS, as a bucket serves them).

Vitessce 4.0.8's own ``anndata.h5ad`` + ``refSpecUrl`` route is broken for every reference
spec (docs/browser.md says where): the test of that route checks it fails as said, so that
the day it works the docs are changed. The route that works, the page giving Vitessce the
manifest's store, must draw the embedding from the h5ad's bytes: the cell count Vitessce
shows is h5py's, the chunk of ``obsm/X_umap`` was fetched by range, and the scatterplot's
pixels are not blank.

Skips, saying why, without chromium, node or ``tests/vitessce/node_modules``;
``H5LENS_REQUIRE_CHROMIUM=1`` makes that a failure.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import h5py
import pytest

import h5lens
from h5lens.browser.vitessce import vitessce_config
from h5lens.testing.chromium import Chromium, Page, find_chromium
from required import missing
from shared_data import shared_file
from test_browser_chromium import REQUIRE_CHROMIUM, StaticServer

VITESSCE = Path(__file__).resolve().parent / "vitessce"
NAME = "pbmc.h5ad"
EMBEDDING = "obsm/X_umap"
# what Vitessce's bundle fetches from the internet on its own (gene and pathway lists for
# its search box): these fail here, offline, whatever the data
OFFLINE = "TypeError: Failed to fetch"


def _tools() -> tuple[str, str]:
    chromium = find_chromium()
    if chromium is None:
        missing("chromium not found on PATH (Debian: apt-get install chromium)", REQUIRE_CHROMIUM)
    node = shutil.which("node")
    if node is None:
        missing("node not found on PATH (Debian: apt-get install nodejs npm)", REQUIRE_CHROMIUM)
    if not (VITESSCE / "node_modules" / "vitessce").is_dir():
        missing("tests/vitessce/node_modules is missing: run `npm ci` in tests/vitessce (`make vitessce`)", REQUIRE_CHROMIUM)
    return chromium, node


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    """Chromium, the bundled page's server and the bucket's, with the h5ad, its manifest and
    the view config h5lens writes for it."""
    chromium, node = _tools()
    page = tmp_path_factory.mktemp("page")
    # node_modules/.bin/esbuild: esbuild's native binary, or its node launcher where npm ran no install scripts
    esbuild = VITESSCE / "node_modules" / ".bin" / "esbuild"
    subprocess.run(
        [str(esbuild), "page.js", "--bundle", "--format=esm", "--splitting", "--minify", f"--outdir={page / 'dist'}",
         "--external:@react-three/xr", '--define:process.env.NODE_ENV="production"', "--log-level=warning"],
        cwd=VITESSCE, check=True, env={**os.environ, "PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    shutil.copy(VITESSCE / "index.html", page / "index.html")
    bucket_dir = tmp_path_factory.mktemp("bucket")
    shutil.copy(shared_file("scanpy-1.12.4_10x_pbmc68k_reduced.h5ad"), bucket_dir / NAME)
    with StaticServer(page, "site", cors=False) as pages, StaticServer(bucket_dir, "data", cors=True) as bucket:
        # as `h5lens index --for browser` writes it, with every chunk read from the file by range
        manifest = h5lens.index(bucket_dir / NAME, url=bucket.url(NAME), convention="proposal", inline_threshold=0)
        manifest.save(bucket_dir / f"{NAME}.json", relative_sources=False)
        made = vitessce_config(h5lens.load_manifest(bucket_dir / f"{NAME}.json"), bucket.url(f"{NAME}.json"), name="pbmc68k")
        (bucket_dir / "config.json").write_text(json.dumps(made.config))
        yield chromium, pages, bucket, bucket_dir


def _open(site, route: str, tmp_path: Path) -> tuple[str, list[str], bytes, dict]:
    """Vitessce shown by ``route``: the scatterplot's header, what the page logged, a
    screenshot, and how many pixels of the scatterplot differ from its background."""
    chromium, pages, bucket, _ = site
    with Chromium(chromium) as browser:
        page = browser.open(f"{pages.url('index.html')}?route={route}&config={bucket.url('config.json')}")
        page.wait_for_title("ready")
        header = _scatterplot_header(page)
        page.wait_for("new Promise(r => setTimeout(() => r(true), 1500))")  # a few frames drawn
        screenshot = page.screenshot()
        pixels = page.evaluate(_COUNT_PIXELS.replace("PNG", base64.b64encode(screenshot).decode()))
        return header, list(page.messages), screenshot, pixels


def _scatterplot_header(page: Page, seconds: float = 120) -> str:
    """The UMAP scatterplot's header ("Scatterplot (UMAP)", a new line, "N cells") once it counts the cells,
    or as it is when the page logged an error (or after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        text = page.evaluate("document.body.innerText")
        found = re.search(r"Scatterplot \(UMAP\)\n(\d+) cells", text)
        header = found[0] if found else text
        if (found and found[1] != "0") or _errors(page.messages) or time.monotonic() > deadline:
            return header
        time.sleep(0.2)


def _errors(messages: list[str]) -> list[str]:
    return [m for m in messages if m.startswith(("error", "exception")) and OFFLINE not in m]


# In the page: draw the screenshot on a 2-D canvas and count, inside the UMAP scatterplot's
# WebGL canvas, the pixels whose colour is not the plot's background (its most common colour).
_COUNT_PIXELS = """(async () => {
  const title = [...document.querySelectorAll('*')].find(e => e.childElementCount === 0 && e.textContent === 'Scatterplot (UMAP)');
  let box = title; while (box && !box.querySelector('canvas')) box = box.parentElement;
  const r = box.querySelector('canvas').getBoundingClientRect();
  const img = new Image(); img.src = 'data:image/png;base64,PNG'; await img.decode();
  const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const d = g.getImageData(Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)).data;
  const counts = new Map();
  for (let i = 0; i < d.length; i += 4) { const k = (d[i] << 16) | (d[i+1] << 8) | d[i+2]; counts.set(k, (counts.get(k) || 0) + 1); }
  const background = [...counts.entries()].sort((a, b) => b[1] - a[1])[0];
  return {area: d.length / 4, drawn: d.length / 4 - background[1], colours: counts.size};
})()"""


def _embedding_chunks(bucket_dir: Path) -> list[tuple[int, int]]:
    """The byte ranges ``[start, stop)`` of the embedding's chunks in the h5ad, as the manifest
    references them."""
    refs = json.loads((bucket_dir / f"{NAME}.json").read_text())["refs"]
    found = [(v[1], v[1] + v[2]) for k, v in refs.items() if k.startswith(f"{EMBEDDING}/c/") and isinstance(v, list)]
    assert found, "the embedding's chunks are references to the h5ad (inline_threshold=0)"
    return found


def _fetched(ranges: list[str | None], start: int, stop: int) -> bool:
    for header in ranges:
        if header is None:
            return True
        first, last = header.removeprefix("bytes=").split("-")
        if int(first) <= start and stop - 1 <= int(last):
            return True
    return False


def test_vitessce_draws_the_embedding_from_the_h5ad_through_the_manifest(site, tmp_path: Path) -> None:
    _, _, bucket, bucket_dir = site
    bucket.ranges.clear()
    header, messages, screenshot, pixels = _open(site, "stores", tmp_path)
    (tmp_path / "vitessce.png").write_bytes(screenshot)
    with h5py.File(bucket_dir / NAME, "r") as f:
        cells = f[EMBEDDING].shape[0]
    assert header == f"Scatterplot (UMAP)\n{cells} cells", (header, messages)
    fetched = bucket.ranges.get(f"/data/{NAME}", [])
    assert all(_fetched(fetched, *chunk) for chunk in _embedding_chunks(bucket_dir)), fetched
    assert all(h is not None for h in fetched), "every read of the h5ad is a range request"
    # a blank plot is one colour; the points cover a share of it in the louvain colours
    assert pixels["drawn"] > 0.005 * pixels["area"] and pixels["colours"] > 5, pixels
    assert _errors(messages) == []


def test_vitessce_4_own_h5ad_route_fails_as_the_docs_say(site, tmp_path: Path) -> None:
    """Vitessce 4.0.8's anndata.h5ad + refSpecUrl: ``zarrOpenRoot`` hands zarrita the promise
    ``ReferenceStore.fromSpec`` returns for a promised spec (``@zarrita/storage`` 0.2.0), not a
    store. When this fails, Vitessce has fixed it: docs/browser.md must say so."""
    _, _, bucket, _ = site
    bucket.requests.clear()
    header, messages, _, _ = _open(site, "refspec", tmp_path)
    assert "0 cells" in header
    assert any("store.get is not a function" in m for m in messages), messages
    assert bucket.requests.get(f"/data/{NAME}.json", 0) >= 1  # the manifest was fetched, then not used
    assert bucket.requests.get(f"/data/{NAME}", 0) == 0
