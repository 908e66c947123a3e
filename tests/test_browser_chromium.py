"""h5lens-codecs in a real browser: headless Chromium reads every array of the test files.

The page (``js/test/page.html``) loads the pinned packages of ``js/package-lock.json`` as
they are, through an import map (no bundler), from one origin; the HDF5 files and their
manifests are served from another (127.0.0.1, another port) with range requests and CORS,
as a bucket serves them. Chromium is Debian's ``chromium`` (``apt-get install chromium``),
driven over the DevTools protocol (aiohttp's websocket client). Every array is read in the
page with zarrita.js + h5lens-codecs and compared with h5py, bit for bit; an array ``h5lens
check --for browser`` says no browser reads must fail there (float16 aside: Chromium 135 and
later have ``Float16Array``, and read it right).

Skips, saying why, without chromium or ``js/node_modules``; ``H5LENS_REQUIRE_CHROMIUM=1``
makes that a failure.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.browser import check_for_browser
from h5lens.browser.check import data_type_name
from h5lens.manifest.documents import ArrayDocument
from h5lens.testing.s3 import LoopServer
from required import js_packages_missing, missing
from shared_data import shared_file
from test_js_codecs import JS, assert_same, h5py_value, write_filters_file, write_netcdf_file

if TYPE_CHECKING:
    from aiohttp import web

REQUIRE_CHROMIUM = "H5LENS_REQUIRE_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser")
FILES = ("filters.h5", "packed.nc", "pbmc.h5ad")


def chromium_or_skip() -> str:
    found = next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)
    if found is None:
        missing("chromium not found on PATH (Debian: apt-get install chromium)", REQUIRE_CHROMIUM)
    if (reason := js_packages_missing()) is not None:
        missing(reason, REQUIRE_CHROMIUM)
    return found


class StaticServer(LoopServer):
    """A directory at ``/<prefix>/`` (aiohttp's static files: ranges answered), optionally
    with CORS as a bucket configured for a web site answers; it counts requests by path and
    keeps the ``Range`` header of each GET (``ranges``: path -> headers, None for a whole GET)."""

    thread_name = "h5lens-static-server"

    def __init__(self, directory: Path, prefix: str, *, cors: bool) -> None:
        self.directory, self.prefix, self.cors = directory, prefix, cors
        self.requests: dict[str, int] = {}
        self.ranges: dict[str, list[str | None]] = {}
        super().__init__()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{self.prefix}/{name}"

    def _app(self) -> web.Application:
        from aiohttp import web

        cors = {
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Allow-Headers": "Range",
            "Access-Control-Allow-Methods": "GET, HEAD",
            "Access-Control-Expose-Headers": "Content-Range, Content-Length, ETag",
        }

        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            self.requests[request.path] = self.requests.get(request.path, 0) + 1
            if request.method == "GET":
                self.ranges.setdefault(request.path, []).append(request.headers.get("Range"))
            if self.cors and request.method == "OPTIONS":
                return web.Response(status=204, headers=cors)
            response = await handler(request)
            if self.cors:
                response.headers.update(cors)
            return response

        app = web.Application(middlewares=[count])
        app.router.add_static(f"/{self.prefix}/", self.directory, follow_symlinks=False)
        return app


async def _call(ws: Any, counter: list[int], method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    counter[0] += 1
    ident = counter[0]
    await ws.send_json({"id": ident, "method": method, "params": params or {}})
    while True:
        message = await ws.receive_json()
        if message.get("id") == ident:
            if "error" in message:
                raise AssertionError(f"{method}: {message['error']}")
            return message["result"]


async def _in_chromium(chromium: str, page_url: str, expression: str, profile: Path) -> Any:
    """Open ``page_url`` in headless Chromium, wait for it to say it is ready, and return the
    value of ``expression`` (a promise awaited)."""
    import aiohttp

    process = await asyncio.create_subprocess_exec(
        chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--no-default-browser-check", f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        endpoint = None
        while endpoint is None:
            line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode(errors="replace")
            if not line:
                raise AssertionError("chromium exited before its DevTools endpoint was up")
            if "DevTools listening on ws://" in line:
                endpoint = line.split("ws://", 1)[1].split("/", 1)[0]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://{endpoint}/json/list") as response:
                targets = await response.json()
            page = next(t for t in targets if t["type"] == "page")
            async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                counter = [0]
                await _call(ws, counter, "Page.navigate", {"url": page_url})
                for _ in range(600):
                    title = await _call(ws, counter, "Runtime.evaluate", {"expression": "document.title", "returnByValue": True})
                    if title["result"].get("value") == "ready":
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(f"{page_url} did not load its modules (title {title['result'].get('value')!r})")
                done = await _call(
                    ws, counter, "Runtime.evaluate",
                    {"expression": expression, "awaitPromise": True, "returnByValue": True, "timeout": 300_000},
                )
                if "exceptionDetails" in done:
                    raise AssertionError(f"the page failed: {done['exceptionDetails']}")
                return done["result"]["value"]
    finally:
        process.terminate()
        await process.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    chromium = chromium_or_skip()
    directory = tmp_path_factory.mktemp("bucket")
    write_filters_file(directory / "filters.h5")
    write_netcdf_file(directory / "packed.nc")
    shutil.copy(shared_file("scanpy-1.12.4_10x_pbmc68k_reduced.h5ad"), directory / "pbmc.h5ad")
    for name in FILES:
        # beside its file: relative URLs, resolved by the pack against the manifest's own URL
        h5lens.index(directory / name, inline_threshold=0).save(directory / f"{name}.json")
    with StaticServer(JS, "js", cors=False) as site, StaticServer(directory, "data", cors=True) as bucket:
        yield chromium, directory, site, bucket


@pytest.mark.parametrize("name", FILES)
def test_chromium_reads_every_array_as_h5py(served, tmp_path: Path, name: str) -> None:
    chromium, directory, site, bucket = served
    manifest = h5lens.load_manifest(directory / f"{name}.json")
    unreadable = {p.lstrip("/") for p in check_for_browser(manifest).unreadable_arrays()}
    paths = sorted(manifest.arrays())
    expression = f"window.readArrays('pack', {json.dumps(bucket.url(name + '.json'))}, {json.dumps(paths)})"
    before = bucket.requests.get(f"/data/{name}", 0)
    results = {r["path"]: r for r in asyncio.run(_in_chromium(chromium, site.url("test/page.html"), expression, tmp_path))}
    assert bucket.requests.get(f"/data/{name}", 0) > before  # the values came from the file's bytes, by range
    with h5py.File(directory / name, "r") as f:
        for path in paths:
            result = results[path]
            if "base64" in result:
                result["bytes"] = base64.b64decode(result["base64"])
            float16 = data_type_name(ArrayDocument.of(manifest.nodes[path]).data_type) == "float16"  # type: ignore[union-attr]
            if path in unreadable and not float16:
                assert not result["ok"], f"{path}: the check says no browser reads it, Chromium did"
            else:
                assert_same(result, h5py_value(f, path), f"{name}:{path} in Chromium")
    assert np.all([results[p]["ok"] for p in paths if p not in unreadable])
