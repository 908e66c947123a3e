"""Local emulators of Google Cloud Storage and Azure Blob Storage for tests, on 127.0.0.1.

* :class:`LocalGCS`: ``gcp-storage-emulator`` (a Python package: the JSON API, ranged
  downloads, object generations), served from a thread of this process;
* :class:`LocalAzure`: Azurite's blob service (the npm package ``azurite``, installed under
  ``tests/emulators/`` by ``npm ci``), a process of its own, in memory;
* :class:`RequesterPays`: a proxy in front of an S3 endpoint that refuses, as S3 does, a
  request to a requester-pays bucket that does not say the requester pays (moto does not);
* :class:`SeparateS3`: a second S3 endpoint, moto's server in a process of its own (moto's
  servers in one process share their buckets: two of them there are one store reached at
  two addresses), for a manifest whose sources lie on two endpoints.

Each says what is missing when it cannot start (:func:`missing_gcs`, :func:`missing_azure`);
the tests skip with that reason, or fail where CI requires the emulators
(``H5LENS_REQUIRE_EMULATORS=1``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from h5lens.testing.s3 import CountingProxy, LocalS3, free_port

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "LocalAzure",
    "LocalGCS",
    "RequesterPays",
    "SeparateS3",
    "azurite_command",
    "missing_azure",
    "missing_gcs",
]

REQUIRE_ENV = "H5LENS_REQUIRE_EMULATORS"
# gcsfs >= 2026.10 asks Google's gRPC control API what kind of bucket it writes to (its
# "experimental zonal and hierarchical bucket support", on by default): no emulator answers
# that, and gcsfs retries it for minutes. Off for this process, before gcsfs is imported.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
# Azurite's development account: a well-known name and key, published by Microsoft.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _quiet_on_hang_up(httpd: Any) -> None:
    """This emulator's HTTP server (its thread runs in the tests' process) prints a traceback
    on stderr when a client hangs up before a response is sent, as a reader that no longer
    needs a range does; the tests check stderr is empty. Any other error is printed as before."""
    if httpd is None:
        return
    default = httpd.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            default(request, client_address)

    httpd.handle_error = handle_error


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    """Stop a server process started by a test: asked to end, killed if it has not in 10 s."""
    if process is None:
        return
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _wait_for_port(port: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


# -- Google Cloud Storage ------------------------------------------------------------------


def missing_gcs() -> str | None:
    """Why :class:`LocalGCS` cannot run here, or None."""
    for module, package in (("gcp_storage_emulator", "gcp-storage-emulator"), ("gcsfs", "gcsfs")):
        try:
            __import__(module)
        except ImportError:
            return f"{package} is not installed (pip install -e '.[test]')"
    return None


class LocalGCS:
    """gcp-storage-emulator on 127.0.0.1, in memory, started on enter and stopped on exit.
    ``storage_options()`` are gcsfs's for it (anonymous: the emulator checks no token)."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "token": "anon"}

    def __enter__(self) -> Self:
        import logging

        from gcp_storage_emulator.server import create_server

        logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)  # a line per request otherwise
        self._server = create_server("127.0.0.1", self.port, in_memory=True)
        self._server.start()
        if not _wait_for_port(self.port, 10):
            raise RuntimeError("gcp-storage-emulator did not start")
        _quiet_on_hang_up(getattr(getattr(self._server, "_api", None), "_httpd", None))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def filesystem(self) -> Any:
        import gcsfs

        return gcsfs.GCSFileSystem(**self.storage_options(), skip_instance_cache=True)

    def make_bucket(self, name: str) -> None:
        self.filesystem().mkdir(name)


# -- Azure Blob Storage --------------------------------------------------------------------

_EMULATORS = Path(__file__).resolve().parents[3] / "tests" / "emulators"


def azurite_command() -> list[str] | None:
    """Azurite's blob service: from ``tests/emulators/node_modules`` (``npm ci`` there), else
    an ``azurite-blob`` on the PATH; None if neither (or no node) is there."""
    local = _EMULATORS / "node_modules" / ".bin" / "azurite-blob"
    if local.exists() and shutil.which("node"):
        return [str(local)]
    found = shutil.which("azurite-blob")
    return [found] if found else None


def missing_azure() -> str | None:
    """Why :class:`LocalAzure` cannot run here, or None."""
    if azurite_command() is None:
        return "Azurite is not installed (npm ci --prefix tests/emulators; make setup does it)"
    try:
        import adlfs  # noqa: F401
    except ImportError:
        return "adlfs is not installed (pip install -e '.[test]')"
    return None


class LocalAzure:
    """Azurite's blob service on 127.0.0.1, in memory, a process started on enter and stopped
    on exit. ``storage_options()`` are adlfs's for it (the development account's key)."""

    def __init__(self) -> None:
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.endpoint_url};"
        )

    def storage_options(self) -> dict[str, Any]:
        return {"connection_string": self.connection_string}

    def __enter__(self) -> Self:
        command = azurite_command()
        if command is None:
            raise RuntimeError(missing_azure() or "Azurite is not installed")
        self._workdir = tempfile.TemporaryDirectory(prefix="h5lens-azurite-")
        self._process = subprocess.Popen(
            [*command, "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--inMemoryPersistence", "--silent",
             "--skipApiVersionCheck", "--loose"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self._workdir.name,
        )  # fmt: skip
        if not _wait_for_port(self.port, 30):
            self.__exit__()
            raise RuntimeError("Azurite did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        _stop(self._process)
        self._process = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def filesystem(self) -> Any:
        import adlfs

        return adlfs.AzureBlobFileSystem(**self.storage_options(), skip_instance_cache=True)

    def make_container(self, name: str) -> None:
        self.filesystem().mkdir(name)


# -- a second S3 endpoint ------------------------------------------------------------------


class SeparateS3(LocalS3):
    """moto's S3 server on 127.0.0.1 in a process of its own, started on enter and stopped on
    exit: its buckets are its own, unlike those of a second :class:`~h5lens.testing.s3.LocalS3`
    in the same process."""

    def __init__(self) -> None:
        super().__init__()
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if not _wait_for_port(self.port, 30):
            self.__exit__()
            raise RuntimeError("moto's server did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        _stop(self._process)
        self._process = None


# -- requester-pays buckets ------------------------------------------------------------------


class RequesterPays(CountingProxy):
    """A counting proxy in front of an S3 endpoint whose ``buckets`` are requester-pays: a
    request to one of them without ``x-amz-request-payer: requester`` is refused as S3 refuses
    it (403 AccessDenied; a HEAD, with no body), the others forwarded. ``paid`` counts the
    requests that said the requester pays, ``refused`` those refused."""

    def __init__(self, target: str, buckets: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self.buckets = frozenset(buckets)
        self.paid = 0
        self.refused = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        bucket = request.path.lstrip("/").split("/", 1)[0]
        if bucket in self.buckets:
            if request.headers.get("x-amz-request-payer", "").lower() != "requester":
                self.refused += 1
                body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
                return web.Response(status=403, body=None if request.method == "HEAD" else body, content_type="application/xml")
            self.paid += 1
        return await super()._handle(request)
