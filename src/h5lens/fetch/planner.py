"""Which requests fetch a set of byte ranges: the one planner of every reader.

A planner decides from a stated cost model (:mod:`h5lens.fetch.cost`: round trip,
bandwidth per stream and in all, requests in flight, a request's own work) whether the gap
between two ranges is fetched with them, saving a request, or not:

requests that go out together (``together``: a read of many chunks, a scan's level)
    the smallest gaps first, as many as make the batch's time in the model least: a
    request saved saves its work (and a round trip where it saves a wave), a gap costs its
    bytes at the bandwidth in all. Where requests go out in parallel and bandwidth is what
    is short, almost nothing is bridged;
reads that follow one another (read-ahead; a turn's chunk reads; local preads)
    gaps up to :meth:`~h5lens.fetch.cost.CostModel.following_gap`: what half a round trip
    and a request's work would have streamed.

Either way within a byte budget, if one is set (``extra_ratio``: the gaps bridged add at
most that many bytes per byte asked for, or ``extra_floor`` bytes in all if that is more,
smallest gaps first): for files whose index nodes sit between the data they index (a
scan), and reads of scattered chunks (a loader's blocks), which must not fetch most of
the file. ``span`` bounds a merged request (a range longer than it is still fetched whole),
and a request longer than ``part`` is fetched as parallel parts, none shorter than ``part``,
and joined (one S3 connection streams ~100 MB/s, and they add up, as the AWS CRT and s5cmd
split large objects): as many parts as the cost model finds quickest, which is as many
streams as the bandwidth in all can carry (at the assumed 500 MB/s, five of 100 MB/s).
More would only add requests: a 12.8 MB read of an h5ad over moto at +20 ms took 0.21 s
in 13 parts of 1 MiB and 0.15-0.18 s in 5 (benchmarks/backend_requests.py's S3, one run
each, with and without 100 MB/s a stream).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from h5lens.fetch import cost as costs_
from h5lens.fetch.cost import CostModel


@dataclass(frozen=True)
class Planner:
    costs: CostModel  # what requests and bytes cost (see the module docstring)
    together: bool  # the ranges' requests go out together (else: one after another)
    span: int  # no merged request longer than this
    part: int  # requests longer than this are fetched as parallel parts, none shorter than this
    extra_ratio: float | None = None  # bridge gaps only within this many extra bytes per byte asked
    extra_floor: int = 0  # ... or within this many bytes in all, whichever is more

    def gap(self, measured: float | None = None) -> int:
        """The widest gap bridged between reads that follow one another (at the bandwidth
        in all ``measured``, where the model states none)."""
        return self.costs.following_gap(measured)

    def runs(self, offsets: np.ndarray, lengths: np.ndarray, measured: float | None = None) -> list[tuple[int, int]]:
        """``[lo, hi)`` runs of offset-sorted ranges, one request each (see the module
        docstring), at the bandwidth in all ``measured`` where the model states none.
        Overlapping and touching ranges always share a request."""
        n = len(offsets)
        if n <= 1:  # one range (a small region, a single chunk): its own request
            return [(0, n)] if n else []
        reach = np.maximum.accumulate(offsets + lengths)
        gaps = offsets[1:] - reach[:-1]
        bridge = gaps <= 0
        positive = np.flatnonzero(~bridge)
        candidates = positive[np.argsort(gaps[positive], kind="stable")]  # smallest first
        if not self.together:
            candidates = candidates[gaps[candidates] <= self.gap(measured)]
        spent = np.cumsum(gaps[candidates])
        asked = _union_bytes(offsets, reach, gaps) if self.extra_ratio is not None or self.together else 0
        if self.extra_ratio is not None:
            allowed = int(np.searchsorted(spent, max(self.extra_ratio * asked, self.extra_floor), side="right"))
            candidates, spent = candidates[:allowed], spent[:allowed]
        if self.together and candidates.size:
            nbytes = asked + np.r_[0, spent]
            # a request longer than ``part`` goes as parallel parts: a request more per ``part`` bytes
            sent = positive.size + 1 - np.arange(candidates.size + 1) + nbytes // self.part
            seconds = self.costs.seconds(sent, nbytes, measured)
            candidates = candidates[: int(np.argmin(seconds))]  # the first least: fewest bytes on a tie
        bridge[candidates] = True
        breaks = (np.flatnonzero(~bridge) + 1).tolist()
        plan: list[tuple[int, int]] = []
        for lo, hi in zip([0, *breaks], [*breaks, n], strict=True):
            while lo < hi:  # split runs longer than span
                cut = lo + int(np.searchsorted(reach[lo:hi], int(offsets[lo]) + self.span, side="right"))
                cut = max(cut, lo + 1)
                plan.append((lo, cut))
                lo = cut
        return plan

    def requests(self, offsets: np.ndarray, lengths: np.ndarray, measured: float | None = None) -> list[tuple[int, int]]:
        """``(start, end)`` of the requests that fetch every range (in any order)."""
        if not len(offsets):
            return []
        order = np.argsort(offsets, kind="stable")
        starts = np.asarray(offsets, np.int64)[order]
        sizes = np.asarray(lengths, np.int64)[order]
        reach = np.maximum.accumulate(starts + sizes)
        return [(int(starts[lo]), int(reach[hi - 1])) for lo, hi in self.runs(starts, sizes, measured)]

    def parts(self, start: int, end: int, measured: float | None = None) -> list[tuple[int, int]]:
        """``(start, end)`` of the parallel parts of one request: of equal size, none shorter
        than ``part``, as many as the cost model says fetch it soonest (at the bandwidth in
        all ``measured``, where the model states none; see the module docstring)."""
        nbytes = end - start
        if nbytes <= self.part:
            return [(start, end)]
        counts = np.arange(1, nbytes // self.part + 1)
        count = int(counts[np.argmin(self.costs.seconds(counts, np.full(counts.size, nbytes), measured))])
        size = -(-nbytes // count)
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


def reads(costs: CostModel) -> Planner:
    """A store's chunk reads one after another, their read-ahead and prefetch: within the
    budget of as many bytes again as asked for, or 1 MiB (a minibatch loader's scattered
    blocks would otherwise fetch, and hold, most of the file per preload: 470 against 384
    MiB peak, and 73k against 80k cells/s, on benchmarks/loader_bench.py's S3 route)."""
    return Planner(costs, together=False, span=32 << 20, part=1 << 20, extra_ratio=1.0, extra_floor=1 << 20)


def bulk(costs: CostModel) -> Planner:
    """A read of many chunks at once (``SourceReads.read_many``: a loader's preload, a
    region): its requests go out together, so a request more costs little time, while a
    bridged gap costs its bytes. Over the simulated S3 (loader_bench.py, 400,000 cells, one
    run): bridging up to 128 KiB drew 81k cells/s where bridging nothing drew 68k; behind a
    25 MB/s link, 8.9k where bridging nothing drew 13.7k (and zarr's per-chunk route 9.7k).
    The cost model tells the two apart (the link's bandwidth, measured)."""
    return Planner(costs, together=True, span=32 << 20, part=1 << 20, extra_ratio=1.0, extra_floor=1 << 20)


def scan(costs: CostModel) -> Planner:
    """A scan's reads of index nodes and small arrays: they sit between the data chunks
    they index, which the scan is not for, so the gaps bridged add at most a tenth of the
    nodes' bytes (benchmarks/remote_scan.py's 100 MB h5ad at +20 ms: 3.95 MB in 812 GETs,
    0.73 s; with as many bytes again as the nodes allowed, 5.4 MB in 793 GETs, 0.80 s)."""
    return Planner(costs, together=True, span=8 << 20, part=8 << 20, extra_ratio=0.1)


# The planners of object storage read through obstore (each client's own: planner.reads(client.cost) ...).
READS = reads(costs_.OBJECT_STORE)
BULK = bulk(costs_.OBJECT_STORE)
SCAN = scan(costs_.OBJECT_STORE)
# Local files: preads one after another, each bridging gaps of up to 16 KB (a copy costs no
# more than another pread would); many ranges at once are views of a map, unmerged.
LOCAL = Planner(costs_.LOCAL, together=False, span=32 << 20, part=1 << 62)

__all__ = ["BULK", "LOCAL", "READS", "SCAN", "Planner", "bulk", "reads", "scan", "union_bytes"]
