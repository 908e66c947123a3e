"""A command that succeeds says nothing on stderr (docs/cli.md), and nothing h5lens opens is
left for the garbage collector to complain about.

Every command runs as a user runs it, in a process of its own, against moto's S3 on
127.0.0.1, with warnings turned into errors: ``-W error``, and ``PYTHONWARNINGS=error`` for
the dask worker processes ``index-many`` starts (they run h5lens without the command's own
settings). Its stderr must be empty. The command line hides library warnings unless ``-v``
is given, and so would hide a session left open in its own process: each command runs again
with ``-v``, through the fsspec client (the one with HTTP sessions to close), with
ResourceWarnings turned into errors, and its stderr must hold no unclosed session, no
ResourceWarning and no exception ignored at collection or exit.

In-process, ``Manifest.load`` of a key that does not exist, or of an endpoint nobody
listens on, leaves no aiohttp session open; nor do requests sent at once by a new client.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import uuid
import warnings

import pytest

import h5lens
from h5lens.cli.sample import write_sample
from h5lens.testing.s3 import free_port

# what a session or file left open for the garbage collector (or the exit) shows on stderr
LEAK_SIGNS = ("Unclosed", "ResourceWarning", "Exception ignored", "Traceback")


@pytest.fixture(scope="module")
def files(s3, tmp_path_factory):
    """A local sample, two copies under an S3 prefix, and a manifest of one beside them."""
    here = tmp_path_factory.mktemp("quiet")
    local = write_sample(here / "sample.h5ad")
    prefix = f"s3://bucket/quiet-{uuid.uuid4().hex}"
    fs = s3.filesystem()
    for name in ("sample.h5ad", "other.h5ad"):
        fs.put(str(local), f"{prefix.removeprefix('s3://')}/src/{name}")
    manifest = f"{prefix}/sample.h5ad.json"
    h5lens.index(f"{prefix}/src/sample.h5ad", storage_options=s3.storage_options()).to_json(
        manifest, storage_options=s3.storage_options()
    )
    return {"local": local, "prefix": prefix, "manifest": manifest, "dir": here}


def _commands(files: dict, s3, out: str) -> dict[str, list[list[str]]]:
    """Each case: the commands run one after the other (a re-run sees what the first wrote).
    ``out`` is a fresh name for what a case writes."""
    creds = ["-s", "key=testing", "-s", "secret=testing", "--endpoint-url", s3.endpoint_url]
    prefix, manifest, local, here = files["prefix"], files["manifest"], files["local"], files["dir"]
    source = f"{prefix}/src/sample.h5ad"
    return {
        "index-local": [["index", str(local), "-o", str(here / f"{out}.json")]],
        "index-s3": [["index", source, "-o", f"{prefix}/{out}/sample.json", *creds]],
        "publish": [["publish", source, f"{prefix}/{out}/published.json", *creds]],
        # into an empty prefix, then again (every manifest current: skipped)
        "index-many-workers-1": [
            ["index-many", f"{prefix}/src/", "--out-dir", f"{prefix}/{out}/", "--workers", "1", *creds]
        ]
        * 2,
        "index-many-workers-2": [
            ["index-many", f"{prefix}/src/", "--out-dir", f"{prefix}/{out}/", "--workers", "2", *creds]
        ],
        "inspect": [["inspect", manifest, *creds]],
        "ls": [["ls", manifest, *creds]],
        "ls-hdf5": [["ls", source, *creds]],
        "cat": [["cat", manifest, "obs/cell_type/categories", *creds], ["cat", manifest, "X", *creds]],
        "validate": [["validate", manifest, *creds]],
        "convert": [["convert", manifest, str(here / f"{out}.h5lens"), *creds]],
        "demo": [["demo", "--dir", str(here / out)]],
    }


CASES = [
    "index-local", "index-s3", "publish", "index-many-workers-1", "index-many-workers-2",
    "inspect", "ls", "ls-hdf5", "cat", "validate", "convert", "demo",
]  # fmt: skip


def _run(args: list[str], warnings: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``h5lens ARGS`` in a process of its own, its warnings (and its workers') as ``warnings`` says."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "H5LENS_CLIENT", "H5LENS_SCAN_CLIENT")}
    command = [sys.executable, "-W", warnings, "-m", "h5lens.cli", *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**inherited, "PYTHONWARNINGS": warnings, **env}
    )


@pytest.mark.parametrize("case", CASES)
def test_a_command_that_succeeds_says_nothing_on_stderr(files, s3, case):
    for args in _commands(files, s3, f"quiet-{uuid.uuid4().hex[:8]}")[case]:
        done = _run(args, "error")
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert done.stderr == "", (args, done.stderr)


@pytest.mark.parametrize("case", CASES)
def test_a_command_leaves_nothing_open(files, s3, case):
    """With -v the command line shows what the garbage collector says: through fsspec's
    clients (aiohttp sessions), nothing may be collected unclosed, during the run or at exit."""
    for args in _commands(files, s3, f"open-{uuid.uuid4().hex[:8]}")[case]:
        done = _run(["-v", *args], "error::ResourceWarning", H5LENS_CLIENT="fsspec")
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert not [line for line in done.stderr.splitlines() if any(s in line for s in LEAK_SIGNS)], done.stderr


# -- in process ----------------------------------------------------------------------------------


def _open_sessions() -> list:
    import aiohttp

    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, aiohttp.ClientSession) and not o.closed]


@pytest.fixture
def unraisable(monkeypatch):
    """What Python could only print ("Exception ignored in ..."): a session collected
    unclosed warns from its finalizer."""
    found: list = []
    monkeypatch.setattr(sys, "unraisablehook", found.append)
    return found


@pytest.mark.parametrize("client", ["auto", "fsspec"])
def test_loading_a_missing_manifest_leaves_no_session_open(s3, client, monkeypatch, unraisable):
    from h5lens.fetch.clients import CLIENT_ENV

    monkeypatch.setenv(CLIENT_ENV, client)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ResourceWarning from a finalizer: to sys.unraisablehook
        before = len(_open_sessions())
        for i in range(4):
            with pytest.raises(h5lens.SourceNotFoundError) as info:
                h5lens.Manifest.load(f"s3://bucket/quiet-missing/{i}.json", storage_options=s3.storage_options())
            assert f"s3://bucket/quiet-missing/{i}.json" in str(info.value)
        assert len(_open_sessions()) == before
    assert not unraisable, [u.exc_value for u in unraisable]


@pytest.mark.parametrize("client", ["auto", "fsspec"])
def test_an_endpoint_nobody_listens_on_leaves_no_session_open(client, monkeypatch, unraisable):
    from h5lens.fetch.clients import CLIENT_ENV

    monkeypatch.setenv(CLIENT_ENV, client)
    options = {"key": "k", "secret": "s", "endpoint_url": f"http://127.0.0.1:{free_port()}"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = len(_open_sessions())
        for url in ("s3://bucket/x.json", f"http://127.0.0.1:{free_port()}/x.json"):
            with pytest.raises(h5lens.StorageError):
                h5lens.Manifest.load(url, storage_options=options if url.startswith("s3") else None)
        assert len(_open_sessions()) == before
    assert not unraisable, [u.exc_value for u in unraisable]


def test_requests_sent_at_once_share_one_session(s3, files, monkeypatch, unraisable):
    """A new fsspec client asked for many ranges at once makes one filesystem and one
    session (not one each, all but the last thrown away unclosed), and closes it."""
    import s3fs
    from zarr.core.sync import sync

    from h5lens.fetch.fsspec_client import FsspecClient

    made = []
    real = s3fs.S3FileSystem.set_session

    async def counted(self, *args, **kwargs):
        made.append(self)  # kept: no id is reused
        await asyncio.sleep(0.01)  # as credentials fetched from a metadata service make it wait
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "set_session", counted)  # a spy: the real call is made
    before = len(_open_sessions())
    client = FsspecClient(f"{files['prefix']}/src/sample.h5ad", s3.storage_options())

    async def at_once() -> list[bytes]:
        return list(await asyncio.gather(*(client.get(offset, 8) for offset in range(0, 160, 8))))

    try:
        parts = sync(at_once())
        assert len({id(fs) for fs in made}) == 1  # s3fs asks every call; the same filesystem each time
        assert len(_open_sessions()) == before + 1
    finally:
        client.close()
    with open(files["local"], "rb") as f:
        assert b"".join(parts) == f.read(160)
    assert len(_open_sessions()) == before
    assert not unraisable, [u.exc_value for u in unraisable]


def test_a_client_collected_unclosed_is_closed_by_the_exit(s3, files, unraisable):
    """A client nobody closed closes itself when collected, on its loop, without waiting (it
    may be collected on that loop); a program that ends right after (the command line,
    dropping its store) must still see that closing finish before zarr stops the loop: the
    exit hook waits for it. The loop is kept busy here, as a loaded machine keeps it."""
    import time

    from zarr.core.sync import _get_loop, sync

    from h5lens.fetch import fsspec_client

    before = {id(session) for session in _open_sessions()}
    client = fsspec_client.FsspecClient(f"{files['prefix']}/src/sample.h5ad", s3.storage_options())
    assert sync(client.get(0, 8)) == b"\x89HDF\r\n\x1a\n"
    _get_loop().call_soon_threadsafe(time.sleep, 0.3)  # the loop busy: the closing waits its turn
    del client  # collected: its closing is scheduled, not awaited
    fsspec_client._close_live_clients()  # what the exit runs, before zarr's own cleanup
    assert not [session for session in _open_sessions() if id(session) not in before]
    assert not unraisable, [u.exc_value for u in unraisable]
