"""Which requests fetch a set of byte ranges: the one planner of every reader.

Two knobs decide it, measured on a simulated S3 (``benchmarks/read_bench.py``):

``gap``
    ranges at most this far apart share a request (a request costs a round trip; bytes in
    between cost transfer time). Optionally only within a byte budget (``extra_ratio``:
    the gaps bridged may add at most that many bytes per byte asked for, or ``extra_floor``
    bytes in all if that is more, smallest gaps first): for files whose index nodes sit
    between the data they index (a scan), and reads of scattered chunks (a loader's blocks).
``part``
    a request longer than this is fetched as parts of this size on parallel connections
    and joined: one S3 connection streams ~100 MB/s, and they add up (as the AWS CRT and
    s5cmd split large objects).

and ``span`` bounds a merged request (a range longer than it is still fetched whole).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Planner:
    gap: int  # ranges at most this far apart share a request
    span: int  # no merged request longer than this
    part: int  # requests longer than this are fetched as parallel parts of this size
    extra_ratio: float | None = None  # bridge gaps only within this many extra bytes per byte asked
    extra_floor: int = 0  # ... or within this many bytes in all, whichever is more

    def runs(self, offsets: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
        """``[lo, hi)`` runs of offset-sorted ranges, one request each (see the module docstring).
        Overlapping and touching ranges always share a request."""
        n = len(offsets)
        if n <= 1:  # one range (a small region, a single chunk): its own request
            return [(0, n)] if n else []
        reach = np.maximum.accumulate(offsets + lengths)
        gaps = offsets[1:] - reach[:-1]
        bridge = gaps <= 0
        candidates = np.flatnonzero((gaps > 0) & (gaps <= self.gap))
        if self.extra_ratio is None:
            bridge[candidates] = True
        elif candidates.size:
            union = _union_bytes(offsets, reach, gaps)
            candidates = candidates[np.argsort(gaps[candidates], kind="stable")]
            spent = np.cumsum(gaps[candidates])
            bridge[candidates[spent <= max(self.extra_ratio * union, self.extra_floor)]] = True
        breaks = (np.flatnonzero(~bridge) + 1).tolist()
        plan: list[tuple[int, int]] = []
        for lo, hi in zip([0, *breaks], [*breaks, n], strict=True):
            while lo < hi:  # split runs longer than span
                cut = lo + int(np.searchsorted(reach[lo:hi], int(offsets[lo]) + self.span, side="right"))
                cut = max(cut, lo + 1)
                plan.append((lo, cut))
                lo = cut
        return plan

    def requests(self, offsets: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
        """``(start, end)`` of the requests that fetch every range (in any order)."""
        if not len(offsets):
            return []
        order = np.argsort(offsets, kind="stable")
        starts = np.asarray(offsets, np.int64)[order]
        sizes = np.asarray(lengths, np.int64)[order]
        reach = np.maximum.accumulate(starts + sizes)
        return [(int(starts[lo]), int(reach[hi - 1])) for lo, hi in self.runs(starts, sizes)]

    def parts(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(start, end)`` of the parallel parts of one request."""
        if end - start <= self.part:
            return [(start, end)]
        count = -(-(end - start) // self.part)
        size = -(-(end - start) // count)  # parts of equal size, none over ``part``
        return [(b, min(b + size, end)) for b in range(start, end, size)]


def union_bytes(offsets: np.ndarray, lengths: np.ndarray) -> int:
    """Bytes of the union of ranges, in any order (overlaps counted once)."""
    if not len(offsets):
        return 0
    order = np.argsort(offsets, kind="stable")
    starts = np.asarray(offsets, np.int64)[order]
    reach = np.maximum.accumulate(starts + np.asarray(lengths, np.int64)[order])
    return _union_bytes(starts, reach, starts[1:] - reach[:-1])


def _union_bytes(offsets: np.ndarray, reach: np.ndarray, gaps: np.ndarray) -> int:
    """Bytes of the union of sorted ranges (``reach``: the running maximum of their ends)."""
    breaks = np.flatnonzero(gaps > 0) + 1
    firsts = np.r_[0, breaks]
    lasts = np.r_[breaks - 1, len(offsets) - 1]
    return int((reach[lasts] - offsets[firsts]).sum())


# Store reads (a read of many chunks; read-ahead; prefetch): a request costs about as much
# as 1 MiB of transfer at S3's 20 ms and 100 MB/s per connection; the gaps bridged add at
# most as many bytes as were asked for, or 1 MiB (a minibatch loader's scattered blocks would
# otherwise fetch, and hold, most of the file per preload: 470 against 384 MiB peak, and
# 73k against 80k cells/s, on benchmarks/loader_bench.py's S3 route).
READS = Planner(gap=1 << 20, span=32 << 20, part=1 << 20, extra_ratio=1.0, extra_floor=1 << 20)
# A read of many chunks at once (SourceReads.read_many: a loader's preload, a region): its
# requests go out together, hundreds in flight, so one request more costs little time, while
# a gap bridged costs its bytes on that one request, which the whole read then waits for
# (at 100 MB/s per connection, 1 MiB is 10 ms). So only gaps of up to 128 KiB are bridged
# (1.3 ms), within the same budget: a loader's preload of 10^6 lognormal cells over the
# simulated S3 fetched 42 MB instead of 73, 53.1k against 47.7k cells/s (runs side by side);
# counts (smaller gaps) unchanged. Reads one chunk after another (read-ahead) keep READS:
# there a bridged gap saves a round trip (small.nc through zarr's pipeline: 5 GETs, 114
# with 128 KiB).
BULK = replace(READS, gap=128 << 10)
# Local files: a pread costs a few microseconds, about what copying 16 KiB does.
LOCAL = Planner(gap=16 << 10, span=32 << 20, part=1 << 62)
# A scan's reads of index nodes and small arrays: they sit between the data chunks they
# index, so gaps are bridged only where they cost few bytes.
SCAN = Planner(gap=32 << 10, span=8 << 20, part=8 << 20, extra_ratio=1.0)

__all__ = ["BULK", "LOCAL", "READS", "SCAN", "Planner", "union_bytes"]
