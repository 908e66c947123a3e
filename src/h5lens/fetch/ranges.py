"""HTTP(S) servers that ignore ``Range``: found on the first request, once; and a range
that runs past the end of its source.

A web server may answer a ranged GET with the whole file (200 instead of 206): every chunk
read would download the file. h5lens refuses such a source with a
:class:`RangeIgnoredError` naming it; :class:`FirstRequest` makes sure it learns that from
one request, not from every request in flight at the time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from h5lens.errors import SourceReadError

__all__ = ["FirstRequest", "PastEndError", "RangeIgnoredError", "past_end"]


class RangeIgnoredError(SourceReadError):
    """The server answers ranged requests with the whole file (a SourceReadError)."""


class PastEndError(SourceReadError):
    """Bytes asked for run past the end of their source (a SourceReadError); ``bytes_said``
    says which bytes and which end, for a caller that words it otherwise (a scan: the file
    is truncated)."""

    bytes_said = ""


def past_end(url: str, offset: int, length: int, end: str) -> PastEndError:
    """A reference whose bytes run past the end of its source (``end``: which end, and how
    it showed): no retry helps, the manifest does not fit the source."""
    said = f"bytes {offset}-{offset + length} end past the end of {end}"
    error = PastEndError(f"{url}: {said}: the manifest's reference does not fit this source")
    error.bytes_said = said
    return error


class FirstRequest:
    """For an HTTP(S) source, which may ignore ``Range`` and answer every request with the
    whole file: its first request goes alone, and requests made meanwhile wait for it. A
    server found to ignore ``Range`` then fails them all with that error, without sending
    them (a reader that asks for many chunks at once, as zarr's pipeline does, would
    otherwise download the whole file once per chunk in flight). Other sources pass."""

    def __init__(self, url: str) -> None:
        self.applies = url.startswith(("http://", "https://"))
        self.refused: RangeIgnoredError | None = None
        self._passed = not self.applies
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    @property
    def passed(self) -> bool:
        """Whether requests go without waiting (not HTTP, or its first request was answered)."""
        return self._passed

    async def run(self, request: Any) -> Any:
        """``await request()``, the first one alone (see the class docstring)."""
        if self._passed:
            return await request()
        lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if self.refused is not None:
                raise RangeIgnoredError(str(self.refused))
            if self._passed:
                pass  # another request went first and was answered: go on without the lock
            else:
                try:
                    found = await request()
                except RangeIgnoredError as e:
                    self.refused = e
                    raise
                self._passed = True
                return found
        return await request()
