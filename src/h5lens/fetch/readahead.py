"""The one read-ahead of h5lens: how much to fetch beyond what a read asked for.

As an operating system reads ahead of a file read: nothing extra after a jump; once reads
carry on where the last fetch ended, a window that doubles each time, up to a bound. So a
scattered read costs what it asks for, and a sequential one a few requests per array or
metadata run, never fetching more ahead than was read in sequence before it. Two readers
use it, each in its own unit: a store's chunk reads (chunks of one array, in grid order:
:class:`h5lens.fetch.sources.SourceReads`) and libhdf5's metadata reads during a scan
(blocks of the file: :class:`h5lens.scan.source.TrackedFile`).
"""

from __future__ import annotations


class ReadAhead:
    """A doubling window, in the caller's units.

    ``after_jump`` is the window a jump starts again from (0: fetch only what was asked;
    1: one unit, when the window counts the unit asked for too); ``most`` bounds it."""

    __slots__ = ("most", "after_jump", "window")

    def __init__(self, most: int, *, after_jump: int = 0) -> None:
        self.most = most
        self.after_jump = after_jump
        self.window = after_jump

    def next(self, sequential: bool) -> int:
        """The window for this read: doubled if it carries on where the last one ended,
        started over if it jumped."""
        self.window = min(self.most, max(1, 2 * self.window)) if sequential else self.after_jump
        return self.window


__all__ = ["ReadAhead"]
