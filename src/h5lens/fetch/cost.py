"""What fetching bytes costs, as h5lens's planner reckons it: one stated model per kind of source.

A batch of ``requests`` requests sent together, ``nbytes`` in all, is taken to last::

    waves × round_trip  +  requests × request_cost  +  nbytes / rate
    waves = ⌈requests / in_flight⌉
    rate  = min(total_bandwidth, min(requests, in_flight) × stream_bandwidth)

``round_trip``
    a request's wait for its first byte (S3 in-region: ~20 ms; a local pread: none);
``stream_bandwidth``
    bytes/s one response streams at (one S3 connection: ~100 MB/s; a page-cache copy: ~3 GB/s);
``total_bandwidth``
    bytes/s all responses in flight share: the machine's network, a narrow link, a server's
    limit. None: measured while reading (:class:`BandwidthMeter`), ``assumed_bandwidth``
    until a read has said; ``H5LENS_BANDWIDTH`` (bytes/s) states it for every remote source;
``in_flight``
    requests out at once (the client's concurrency);
``request_cost``
    the work of one request that sending requests in parallel does not hide: the client's
    CPU, the server's handling of it. On the simulated S3 of ``benchmarks/`` (moto behind a
    proxy on the same two cores) a loader's preloads cost 0.2-0.8 ms a request against 2-4
    ns a byte (fits of ``loader_bench.py``'s runs at 4×10⁵ and 10⁶ cells, bridging 0, 64,
    128 and 256 KiB): a request is worth 100-200 KB there. Taken as 0.3 ms for obstore
    (150 KB at the assumed 500 MB/s); s3fs spends about 1 ms of its own.

The planner (:mod:`h5lens.fetch.planner`) bridges the gap between two ranges where the
request it saves costs more than the gap's bytes. For requests that go out together, a
request saved is ``request_cost`` (and a round trip only where it saves a wave), a gap's
bytes cost ``1 / rate``: where bandwidth is short, almost nothing is bridged; where it is
not, gaps of ~150 KB are. For reads that follow one another (read-ahead), a request saved is
a round trip, counted at half: the bridged bytes are fetched for certain, the round trip is
saved only if the reader goes on.

Local files: a request is a pread (~5 µs with the bytes object it makes), a byte a copy
from the page cache (~3.2 GB/s): gaps up to 16 KB are read through, and views of a map
(:mod:`h5lens.fetch.mapped`) need no merging at all.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import overload

import numpy as np

from h5lens.errors import InvalidOptionError

BANDWIDTH_ENV = "H5LENS_BANDWIDTH"


@dataclass(frozen=True)
class CostModel:
    """The parameters of the model in the module docstring (seconds, bytes/s)."""

    round_trip: float
    stream_bandwidth: float
    total_bandwidth: float | None  # None: measured (BandwidthMeter), assumed_bandwidth until then
    in_flight: int
    request_cost: float
    assumed_bandwidth: float = 500e6  # bytes/s in all before a read has said (a cloud VM's 4 Gb/s)

    @overload
    def seconds(self, requests: int, nbytes: int, measured: float | None = None) -> float: ...
    @overload
    def seconds(self, requests: np.ndarray, nbytes: np.ndarray, measured: float | None = None) -> np.ndarray: ...
    def seconds(
        self, requests: int | np.ndarray, nbytes: int | np.ndarray, measured: float | None = None
    ) -> float | np.ndarray:
        """How long a batch of ``requests`` requests of ``nbytes`` in all takes (numbers, or
        arrays of them), at the bandwidth in all :meth:`bandwidth` says."""
        count = np.asarray(requests, dtype=np.float64)
        waves = np.ceil(count / self.in_flight)
        streams = np.maximum(1.0, np.minimum(count, self.in_flight))
        rate = np.minimum(self.bandwidth(measured), streams * self.stream_bandwidth)
        found = waves * self.round_trip + count * self.request_cost + np.asarray(nbytes, dtype=np.float64) / rate
        return float(found) if found.ndim == 0 else found

    def bandwidth(self, measured: float | None = None) -> float:
        """The bandwidth in all to reckon with: the stated one, else ``measured``, else the assumed one."""
        return self.total_bandwidth or measured or self.assumed_bandwidth

    def following_gap(self, measured: float | None = None) -> int:
        """The widest gap worth bridging between reads that follow one another: what half a
        round trip and a request's work would have streamed (see the module docstring)."""
        rate = min(self.stream_bandwidth, self.bandwidth(measured))
        return int((self.round_trip / 2 + self.request_cost) * rate)


# Local files: a pread per request, page-cache copies; nothing in flight but the one.
LOCAL = CostModel(round_trip=0.0, stream_bandwidth=3.2e9, total_bandwidth=3.2e9, in_flight=1, request_cost=5e-6)


# Object storage (S3 in-region: 20 ms to a first byte, 100 MB/s a connection; the bandwidth
# in all measured) read by obstore: 256 requests in flight, 0.3 ms a request (see above).
OBJECT_STORE = CostModel(round_trip=0.020, stream_bandwidth=100e6, total_bandwidth=None, in_flight=256, request_cost=0.3e-3)


def from_environment(costs: CostModel) -> CostModel:
    """``costs`` with the bandwidth in all that ``H5LENS_BANDWIDTH`` states (bytes/s), if it does."""
    said = os.environ.get(BANDWIDTH_ENV, "").strip()
    if not said:
        return costs
    try:
        total = float(said)
    except ValueError:
        total = math.nan
    if not total > 0 or math.isinf(total):
        raise InvalidOptionError(f"{BANDWIDTH_ENV} must be a positive number of bytes/s. Got {said!r}")
    return replace(costs, total_bandwidth=total)


class BandwidthMeter:
    """The bandwidth in all one source's reads have found (bytes/s), for a model that states none.

    It follows the requests in flight: from the moment one goes out with none in flight
    until none is left (a busy period, however many batches overlap in it), the bytes that
    came and the time they took. The model explains part of that time by round trips (one
    per batch begun in the period, an upper bound of its waves; each as long as the model's
    or as the quickest request yet, whichever is longer: a far endpoint's round trips are
    not taken for bytes) and by the requests' own work; the rest is what the bytes took,
    and ``bytes / rest`` a sample of the bandwidth in all, never above the model's assumed
    bandwidth (a period the round trips and requests explain whole says only that the link
    is no narrower than assumed). Periods of fewer bytes than one stream carries in a round
    trip say nothing of the link and are not sampled. The estimate moves half way to each
    sample (as a ratio), and never stays under what a period achieved (``bytes / duration``)."""

    def __init__(self, costs: CostModel, clock: Callable[[], float] = time.monotonic) -> None:
        self.costs = costs
        self.measured: float | None = None
        self.samples = 0
        self.quickest = math.inf  # the shortest request yet, in seconds: at least a round trip
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight = 0
        self._begun = 0.0
        self._batches = 0
        self._requests = 0
        self._bytes = 0
        self._failed = False

    @property
    def bandwidth(self) -> float:
        """The bandwidth in all to plan with (the model's stated one, if it states one)."""
        return self.costs.bandwidth(self.measured)

    def batch(self) -> None:
        """A batch of requests is about to go out (it counts one wave of the busy period it falls in)."""
        with self._lock:
            self._batches += 1

    def started(self, requests: int = 1) -> float:
        """``requests`` go out now; returns the time they went (for :meth:`finished`)."""
        with self._lock:
            now = self._clock()
            if self._in_flight == 0:
                self._begun = now
                self._requests = self._bytes = 0
                self._batches = max(1, self._batches)
                self._failed = False
            self._in_flight += requests
            self._requests += requests
            return now

    def finished(self, requests: int, nbytes: int, started: float, *, failed: bool = False) -> None:
        """The ``requests`` that went out at ``started`` are done, ``nbytes`` came."""
        with self._lock:
            now = self._clock()
            self._in_flight -= requests
            self._bytes += nbytes
            self.quickest = min(self.quickest, now - started)
            self._failed |= failed
            if self._in_flight > 0:
                return
            batches, self._batches = self._batches, 0
            if not self._failed:
                self._record(self._requests, batches, self._bytes, now - self._begun)

    def _record(self, requests: int, batches: int, nbytes: int, seconds: float) -> None:
        costs = self.costs
        if costs.total_bandwidth is not None or seconds <= 0 or nbytes < costs.stream_bandwidth * costs.round_trip:
            return
        waves = max(batches, math.ceil(requests / costs.in_flight))
        transfer = seconds - waves * max(costs.round_trip, self.quickest) - requests * costs.request_cost
        sample = nbytes / max(transfer, nbytes / costs.assumed_bandwidth)
        self.measured = sample if self.measured is None else math.sqrt(self.measured * sample)
        self.measured = max(self.measured, nbytes / seconds)
        self.samples += 1


__all__ = ["BANDWIDTH_ENV", "LOCAL", "OBJECT_STORE", "BandwidthMeter", "CostModel", "from_environment"]
