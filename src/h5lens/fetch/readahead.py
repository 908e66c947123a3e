"""The one read-ahead of h5lens: how much to fetch beyond what a read asked for.

As an operating system reads ahead of a file read: nothing extra after a jump; once reads
carry on where the last fetch ended, a window that doubles each time, up to a bound. So a
scattered read costs what it asks for, and a sequential one a few requests per array or
metadata run, never fetching more ahead than was read in sequence before it. Two readers
use it, each in its own unit: a store's chunk reads (chunks of one array, in grid order:
:class:`h5lens.fetch.sources.SourceReads`, a :class:`ReadAhead` per array) and libhdf5's
metadata reads during a scan (blocks of the file: :class:`h5lens.scan.source.TrackedFile`,
with :class:`Streams`: libhdf5 follows several runs in turn, a global heap of strings and
the chunks of heap IDs that point into it).
"""

from __future__ import annotations

from collections import OrderedDict


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


class Streams:
    """Doubling windows for a reader that follows several runs in turn, in the caller's units.

    Each fetch is remembered by where it ended (the last ``streams`` of them). A fetch that
    starts where an earlier one ended carries that run on; it reads ahead (twice what the
    earlier fetch took, up to ``most``) once the run has shown itself: the earlier fetch or
    this read asks for several units, or the earlier fetch carried a run on itself. A read
    of one unit just past a fetch (libhdf5 reads 4 KiB from an object header's start, past
    the header's end, into whatever follows it) gets what it asks for. Any other fetch is
    a jump: ``after_jump`` units at least."""

    __slots__ = ("most", "after_jump", "streams", "_ends")

    def __init__(self, most: int, *, after_jump: int = 1, streams: int = 16) -> None:
        self.most = most
        self.after_jump = min(after_jump, most)
        self.streams = streams
        self._ends: OrderedDict[int, tuple[int, bool]] = OrderedDict()  # end -> (units fetched, run shown)

    def window(self, start: int, asked: int) -> tuple[int, bool]:
        """How many units a fetch from ``start`` takes, for a read that needs ``asked`` of
        them, and whether it carries a run on (False: a jump)."""
        before = self._ends.pop(start, None)
        if before is None:
            return max(asked, self.after_jump), False
        size, shown = before
        return (max(asked, min(self.most, 2 * size)) if shown or asked > 1 else asked), True

    def fetched(self, start: int, end: int, *, asked: int, carried: bool) -> None:
        """Units ``[start, end)`` were fetched, for a read that needed ``asked`` of them;
        ``carried``: the fetch carried a run on (:meth:`window` said so)."""
        self._ends[end] = (end - start, carried or asked > 1)
        while len(self._ends) > self.streams:
            self._ends.popitem(last=False)


__all__ = ["ReadAhead", "Streams"]
