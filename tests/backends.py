"""What every object-storage backend must do, written once for test_gcs.py and test_azure.py:
index (Python and the command line), the manifest written to the backend and read back,
read_anndata equal to ``anndata.read_h5ad``, an array equal to h5py's, staleness (the
backend's version tag), a missing object and a missing bucket named, and no secret of the
storage options in anything written or said.

A backend is a :class:`Backend`: its emulator (started by the test module's fixture), the
URL of a key in a bucket made for the test, and the storage options, in Python's form and
the command line's.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anndata as ad
import h5py
import numpy as np
import pytest
from anndata.tests.helpers import assert_equal

import h5lens
import required
from cli_runner import h5lens as run_cli
from h5lens.cli.sample import write_sample
from h5lens.testing.emulators import REQUIRE_ENV


@dataclass
class Backend:
    scheme: str  # gs, az
    bucket: str
    options: dict[str, Any]  # Python's storage options
    cli: list[str]  # the command line's
    filesystem: Callable[[], Any]  # the backend's fsspec filesystem, to put objects and look at them
    version: Callable[[dict[str, Any]], str]  # an object's version tag from its fsspec info
    endpoint: str  # the emulator's own http://127.0.0.1:PORT
    through: Callable[[str], dict[str, Any]]  # the storage options for a proxy's http://127.0.0.1:PORT

    def url(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"


def emulator_or_skip(missing: str | None) -> None:
    """Skip when the emulator is missing; where CI requires it (``H5LENS_REQUIRE_EMULATORS``),
    fail instead."""
    if missing is not None:
        required.missing(missing, REQUIRE_ENV)


@dataclass
class Uploaded:
    h5ad: str
    chunks: str
    local_h5ad: Any
    local_chunks: Any
    prefix: str


def upload(backend: Backend, tmp_path) -> Uploaded:
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    write_sample(tmp_path / "sample.h5ad")
    rng = np.random.default_rng(3)
    with h5py.File(tmp_path / "chunks.h5", "w") as f:
        f.create_dataset("x", data=rng.random((2000, 5)), chunks=(100, 5), compression="gzip", shuffle=True)
        f["x"].attrs["units"] = "m"
    fs = backend.filesystem()
    for name in ("sample.h5ad", "chunks.h5"):
        fs.put(str(tmp_path / name), f"{backend.bucket}/{prefix}/{name}")
    return Uploaded(
        backend.url(f"{prefix}/sample.h5ad"), backend.url(f"{prefix}/chunks.h5"), tmp_path / "sample.h5ad",
        tmp_path / "chunks.h5", prefix,
    )  # fmt: skip


def read_h5ad(path) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_h5ad(path)


def check_index_and_read(backend: Backend, files: Uploaded) -> None:
    """index, read_anndata (eager and lazy) and an array, against anndata and h5py; the
    manifest records the URL given and the object's version tag as the backend gives it."""
    manifest = h5lens.index(files.h5ad, storage_options=backend.options)
    info = backend.filesystem().info(files.h5ad.split("://", 1)[1])
    assert manifest.sources[0].url == files.h5ad
    assert manifest.sources[0].size == info["size"] == os.path.getsize(files.local_h5ad)
    assert manifest.sources[0].etag == backend.version(info)
    expected = read_h5ad(files.local_h5ad)
    assert_equal(h5lens.read_anndata(manifest, storage_options=backend.options), expected)
    assert_equal(h5lens.read_anndata(manifest, storage_options=backend.options, lazy=True).to_memory(), expected)
    group = h5lens.open_group(h5lens.index(files.chunks, storage_options=backend.options, inline_threshold=0),
                              storage_options=backend.options)  # fmt: skip
    with h5py.File(files.local_chunks) as f:
        np.testing.assert_array_equal(group["x"][...], f["x"][...])
        np.testing.assert_array_equal(group["x"][17:421, 1:3], f["x"][17:421, 1:3])
        assert group["x"].attrs["units"] == f["x"].attrs["units"]


def check_manifest_on_the_backend(backend: Backend, files: Uploaded, tmp_path) -> None:
    """The manifest written beside its source (a relative source) by Python and by the command
    line, read back from there; publish checks it too."""
    manifest_url = files.h5ad + ".json"
    h5lens.index(files.h5ad, storage_options=backend.options).to_json(manifest_url, storage_options=backend.options)
    expected = read_h5ad(files.local_h5ad)
    assert_equal(h5lens.read_anndata(manifest_url, storage_options=backend.options), expected)
    cli_url = backend.url(f"{files.prefix}/cli.json")
    done = run_cli("index", files.h5ad, "-o", cli_url, *backend.cli)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    shown = run_cli("cat", cli_url, "obsm/X_pca", *backend.cli)
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    published = backend.url(f"{files.prefix}/published.json")
    done = run_cli("publish", files.local_h5ad, published, "--url", files.h5ad, *backend.cli)
    assert done.returncode == 0, done.stderr
    assert_equal(h5lens.read_anndata(published, storage_options=backend.options), expected)


def check_round_trips(backend: Backend, files: Uploaded) -> None:
    """Opening a manifest published beside its source and reading one small array, counted
    at a proxy: three requests (the manifest, one check of the source, the data); the same
    values as h5py's."""
    from h5lens.testing.s3 import CountingProxy

    with CountingProxy(backend.endpoint) as proxy:
        options = backend.through(proxy.endpoint_url)
        manifest_url = files.chunks + ".json"
        h5lens.index(files.chunks, storage_options=options, inline_threshold=0).to_json(manifest_url, storage_options=options)
        proxy.stats.reset()
        group = h5lens.open_group(manifest_url, storage_options=options)
        values = group["x"][:5]
        requests = proxy.stats.requests
    with h5py.File(files.local_chunks) as f:
        np.testing.assert_array_equal(values, f["x"][:5])
    assert requests <= 3, proxy.stats


def check_staleness(backend: Backend, files: Uploaded) -> None:
    """An object written again is a stale source, named."""
    manifest = h5lens.index(files.chunks, storage_options=backend.options, inline_threshold=0)
    with h5py.File(files.local_chunks, "r+") as f:
        f["x"][0, 0] = -1.0
    backend.filesystem().put(str(files.local_chunks), files.chunks.split("://", 1)[1])
    with pytest.raises(h5lens.StaleSourceError) as info:
        h5lens.open_group(manifest, storage_options=backend.options)
    assert files.chunks in str(info.value)


def check_missing(backend: Backend, files: Uploaded, tmp_path) -> None:
    """A missing object, in Python and at the command line, and a destination whose bucket
    does not exist: each named, one line."""
    missing = backend.url(f"{files.prefix}/nope.h5ad")
    with pytest.raises(h5lens.SourceNotFoundError) as info:
        h5lens.index(missing, storage_options=backend.options)
    assert str(info.value).startswith(missing) and len(str(info.value).splitlines()) == 1
    line = run_cli("index", missing, "-o", tmp_path / "nope.json", *backend.cli).error_line()
    assert line.startswith(missing), line
    nowhere = f"{backend.scheme}://no-such-bucket-{uuid.uuid4().hex[:8]}/m.json"
    line = run_cli("index", files.h5ad, "-o", nowhere, *backend.cli).error_line()
    assert line.startswith(nowhere) and "does not exist" in line, line


def check_secret_persists_nowhere(backend: Backend, files: Uploaded, secret: str, tmp_path, caplog) -> None:
    """``secret`` (in ``backend.options`` and ``backend.cli``) appears in no output, no file
    written, no object written, no log record."""
    import logging

    caplog.set_level(logging.DEBUG, logger="h5lens")
    out = tmp_path / "secret-out"
    out.mkdir()
    said: list[str] = []
    for args in (
        ["-v", "index", files.h5ad, "-o", out / "m.json"],
        ["index", files.h5ad, "-o", backend.url(f"{files.prefix}/s.json")],
        ["inspect", out / "m.json"],
        ["cat", out / "m.json", "obsm/X_pca"],
        ["validate", out / "m.json"],
        ["index", backend.url(f"{files.prefix}/nope.h5"), "-o", out / "nope.json"],
    ):
        done = run_cli(*args, *backend.cli)
        said += [done.stdout, done.stderr]
    caplog.set_level(logging.DEBUG, logger="h5lens")
    h5lens.read_anndata(out / "m.json", storage_options=backend.options)
    try:
        h5lens.index(backend.url(f"{files.prefix}/nope.h5"), storage_options=backend.options)
    except h5lens.H5LensError as e:
        said.append(str(e))
    fs = backend.filesystem()
    written = [p.read_bytes().decode("utf-8", "replace") for p in out.rglob("*") if p.is_file()]
    written += [fs.cat(key).decode("utf-8", "replace") for key in fs.find(f"{backend.bucket}/{files.prefix}")
                if key.endswith(".json")]  # fmt: skip
    assert len(written) >= 2
    for text in [*written, *said, *(r.getMessage() for r in caplog.records)]:
        assert secret not in text, text[:2000]


def check_faults(backend: Backend, files: Uploaded) -> None:
    """Behind a proxy that answers 503 and 500 and drops connections (three requests in ten,
    once the store has had its first answers): every chunk still reads exactly."""
    from h5lens.testing.s3 import CountingProxy

    with CountingProxy(backend.endpoint, faults=("503", "500", "reset"), seed=11) as proxy:
        options = backend.through(proxy.endpoint_url)
        manifest = h5lens.index(files.chunks, storage_options=options, inline_threshold=0)
        group = h5lens.open_group(manifest, storage_options=options)
        with h5py.File(files.local_chunks) as f:
            np.testing.assert_array_equal(group["x"][:10], f["x"][:10])  # answered: the retry policy's patience
            proxy.fault_rate = 0.3
            for start in range(1900, -1, -100):  # backwards: no read-ahead, a request per chunk
                np.testing.assert_array_equal(group["x"][start : start + 100], f["x"][start : start + 100])
            np.testing.assert_array_equal(group["x"][...], f["x"][...])
    assert proxy.stats.injected_faults > 0
