"""Reads: HDF5 addresses made absolute and bounded by the end of the file, one
``read_ranges`` call per level of a walk; and the plumbing that runs a walk on a local file
without an event loop.

libhdf5 reads each structure through its metadata cache, one at a time (H5Fio.c,
H5FDint.c); here a walk hands every structure a level needs to one call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, BinaryIO

from h5lens.fetch.local import LocalClient
from h5lens.scan.hdf5.model import ReadRanges, UnsupportedIndexError
from h5lens.scan.hdf5.superblock import Superblock

ReadAt = Callable[[int, int], bytes]  # read(offset, length), synchronous


class Io:
    """Relative HDF5 addresses → absolute ranges; one ``read_ranges`` call per level."""

    def __init__(self, read_ranges: ReadRanges, superblock: Superblock, file_size: int | None) -> None:
        self.read_ranges = read_ranges
        self.sb = superblock
        self.base = superblock.base_address
        ends = []
        if superblock.eof_address is not None:
            ends.append(self.base + superblock.eof_address)
        if file_size is not None:
            ends.append(file_size)
        self.end = min(ends) if ends else None
        self.calls = 0

    async def read(self, spans: Sequence[tuple[int, int]], what: str, *, clamp: bool = False) -> list[bytes]:
        """Read ``(address, length)`` spans; ``clamp`` lets a speculative span stop at the end of file."""
        ranges = []
        for address, length in spans:
            if address == self.sb.undefined_address:
                raise UnsupportedIndexError(f"{what}: undefined address")
            start = self.base + address
            if self.end is not None and start + length > self.end:
                if not clamp or start >= self.end:
                    raise UnsupportedIndexError(f"{what} at address {address} runs past the end of the file")
                length = self.end - start
            ranges.append((start, length))
        if not ranges:
            return []
        self.calls += 1
        blobs = await self.read_ranges(ranges)
        if len(blobs) != len(ranges):
            raise UnsupportedIndexError(f"{what}: the reader returned {len(blobs)} ranges for {len(ranges)}")
        out = []
        for (start, length), blob in zip(ranges, blobs, strict=True):
            blob = blob if isinstance(blob, bytes) else bytes(blob)
            if len(blob) > length or (len(blob) < length and not clamp):
                raise UnsupportedIndexError(f"{what}: read {len(blob)} bytes of {length} at offset {start}")
            out.append(blob)
        return out


def reader_for(f: BinaryIO) -> ReadAt:
    """``read(offset, length)`` of a binary file (fewer bytes at its end): the byte reader of
    :mod:`h5lens.fetch` on its descriptor (preads), as every read of a file is made; a file
    object without one (an in-memory buffer a caller hands over) is read as it reads."""
    try:
        fd = f.fileno()
    except (AttributeError, OSError):

        def seek_read(offset: int, length: int) -> bytes:
            f.seek(offset)
            return f.read(length)

        return seek_read
    reader = LocalClient(str(getattr(f, "name", f"descriptor {fd}")), descriptor=fd)
    return lambda offset, length: reader.get_sync(offset, length, exact=False)


def file_size(f: BinaryIO) -> int:
    """The size of a binary file, from its descriptor where it has one."""
    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError):
        return f.seek(0, os.SEEK_END)


def local_read_ranges(read_at: ReadAt) -> ReadRanges:
    """``read_ranges`` made of a synchronous ``read_at``: its awaits complete at once (see :func:`run_sync`)."""

    async def read_ranges(ranges: list[tuple[int, int]]) -> list[bytes]:
        return [read_at(offset, length) for offset, length in ranges]

    return read_ranges


def run_sync(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine whose awaits all complete at once (a local reader), without an event loop.

    That also works where a loop is already running (a notebook, an async caller).
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the reader suspended; run walk_chunk_index in an event loop instead")
