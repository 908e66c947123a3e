"""Headless Chromium for the browser tests and benchmarks, driven over the DevTools protocol
(aiohttp's websocket client; no playwright, no puppeteer).

``with Chromium(path) as browser: page = browser.open(url)`` starts ``chromium --headless``
with a fresh profile, and gives a :class:`Page`: :meth:`Page.wait_for_title`,
:meth:`Page.evaluate` (a promise awaited), :meth:`Page.screenshot`, and the messages the
page logged (``console.error`` and uncaught exceptions among them). WebGL is SwiftShader's,
in software, as on a machine with no GPU (Vitessce's scatterplot is WebGL).
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from collections.abc import Coroutine

CHROMIUM_NAMES = ("chromium", "chromium-browser")
FLAGS = (
    "--headless=new", "--no-sandbox", "--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage",
    # WebGL without a GPU: ANGLE on SwiftShader (Chromium refuses software WebGL without the "unsafe" opt-in)
    "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
    "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
)


def find_chromium() -> str | None:
    """The path of a Chromium on PATH (Debian's ``chromium``), or None."""
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class Chromium:
    """A headless Chromium with its own profile and its own event loop thread, for the ``with``
    block; :meth:`open` gives a page (one tab) at a URL."""

    def __init__(self, executable: str, *, width: int = 1000, height: int = 700) -> None:
        self.executable = executable
        self.size = (width, height)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="h5lens-chromium", daemon=True)
        self._profile = tempfile.TemporaryDirectory(prefix="h5lens-chromium-")
        self._process: asyncio.subprocess.Process | None = None
        self._endpoint = ""
        self._pages: list[Page] = []

    def _run[T](self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout)

    def __enter__(self) -> Self:
        self._thread.start()
        try:
            self._endpoint = self._run(self._start(), 90)
        except BaseException:
            self.__exit__()
            raise
        return self

    async def _start(self) -> str:
        width, height = self.size
        self._process = await asyncio.create_subprocess_exec(
            self.executable, *FLAGS, f"--window-size={width},{height}", f"--user-data-dir={self._profile.name}",
            "--remote-debugging-port=0", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        assert self._process.stderr is not None
        while True:
            line = (await asyncio.wait_for(self._process.stderr.readline(), 60)).decode(errors="replace")
            if not line:
                raise RuntimeError(f"{self.executable} exited before its DevTools endpoint was up")
            if "DevTools listening on ws://" in line:
                endpoint = line.split("ws://", 1)[1].split("/", 1)[0]
                # keep reading stderr so that Chromium never blocks on a full pipe
                asyncio.ensure_future(self._drain(self._process.stderr))
                return endpoint

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.readline():
            pass

    def open(self, url: str) -> Page:
        """A page (the browser's first tab) navigated to ``url``."""
        page = Page(self)
        self._pages.append(page)
        self._run(page._connect(self._endpoint, url), 60)
        return page

    def __exit__(self, *exc: object) -> None:
        for page in self._pages:
            self._run(page._close(), 30)
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            self._run(self._process.wait(), 30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._profile.cleanup()


class Page:
    """A tab of :class:`Chromium`; ``messages`` holds what the page logged, as
    ``"LEVEL: text"`` lines (``exception: ...`` for an uncaught one)."""

    def __init__(self, browser: Chromium) -> None:
        self._browser = browser
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next = 0
        self.messages: list[str] = []

    async def _connect(self, endpoint: str, url: str) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://{endpoint}/json/list") as response:
            targets = await response.json()
        target = next(t for t in targets if t["type"] == "page")
        self._ws = await self._session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.ensure_future(self._read())
        await self._call("Runtime.enable")
        await self._call("Page.enable")
        await self._call("Page.navigate", {"url": url})

    async def _close(self) -> None:
        if getattr(self, "_ws", None) is not None:
            await self._ws.close()
        if getattr(self, "_session", None) is not None:
            await self._session.close()

    async def _read(self) -> None:
        async for message in self._ws:
            data = message.json()
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                params = data["params"]
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                self.messages.append(f"{params.get('type')}: {text}")
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.messages.append(f"exception: {details.get('exception', {}).get('description', details.get('text'))}")

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[self._next] = future
        await self._ws.send_json({"id": self._next, "method": method, "params": params or {}})
        answer = await future
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 300) -> dict[str, Any]:
        """A DevTools protocol command's result."""
        return self._browser._run(self._call(method, params), timeout)

    def evaluate(self, expression: str, timeout: float = 300) -> Any:
        """The value of ``expression`` in the page (a promise awaited); an exception in the
        page is a RuntimeError."""
        done = self.call(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True, "timeout": int(timeout * 1000)},
            timeout + 10,
        )
        if "exceptionDetails" in done:
            details = done["exceptionDetails"]
            raise RuntimeError(f"the page failed: {details.get('exception', {}).get('description', details)}")
        return done["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120, every: float = 0.1) -> Any:
        """The first truthy value of ``expression``, polled; a TimeoutError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} still {value!r} after {timeout} s; the page logged: {self.messages[-20:]}")
            time.sleep(every)

    def wait_for_title(self, title: str, timeout: float = 120) -> None:
        self.wait_for(f"document.title === {title!r}", timeout)

    def screenshot(self) -> bytes:
        """A PNG of the page as it is drawn."""
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
