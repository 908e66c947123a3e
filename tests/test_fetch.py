"""ChunkFetcher: merged requests, blocks fetched ahead and claimed, failures not cached.

The fetcher runs over a real file through LocalClient (its async get is the same
interface the remote clients have); requests are counted by the fetcher's hook.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from h5lens.errors import SourceNotFoundError
from h5lens.fetch import READS, ChunkFetcher, LocalClient
from h5lens.fetch import blocks as fetch

MAX_GAP, MAX_SPAN = READS.gap(), READS.span


def merge_plan(offsets: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
    return READS.runs(offsets, lengths)


@pytest.fixture
def blob(tmp_path):
    path = tmp_path / "blob.bin"
    data = np.random.default_rng(3).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return str(path), data


def _fetcher(path: str) -> tuple[ChunkFetcher, list[int]]:
    requests: list[int] = []
    return ChunkFetcher(LocalClient(path), on_request=requests.append), requests


def _ranges(step: int, length: int, count: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.arange(count, dtype=np.int64) * step + start
    return offsets, np.full(count, length, dtype=np.int64)


def test_merge_plan_splits_at_gaps_and_spans():
    offsets = np.array([0, 100, MAX_GAP + 300, MAX_GAP + 400], dtype=np.int64)
    lengths = np.array([50, 50, 50, 50], dtype=np.int64)
    assert merge_plan(offsets, lengths) == [(0, 2), (2, 4)]
    # adjacent ranges that together exceed MAX_SPAN become several requests, none longer
    offsets, lengths = _ranges(1 << 20, 1 << 20, 70)
    plan = merge_plan(offsets, lengths)
    assert [hi - lo for lo, hi in plan] == [32, 32, 6]
    assert all(int(offsets[hi - 1] + lengths[hi - 1] - offsets[lo]) <= MAX_SPAN for lo, hi in plan)
    assert merge_plan(offsets[:0], lengths[:0]) == []


def test_scattered_ranges_are_bridged_within_a_budget():
    """A loader's scattered blocks: gaps under MAX_GAP are bridged only while they add no
    more bytes than were asked for (smallest first), or 1 MiB in all; a small file's few
    ranges still share one request."""
    rng = np.random.default_rng(1)
    offsets = np.sort(rng.choice(4000, 300, replace=False)).astype(np.int64) * 40_000  # 40 kB chunks, a third of them
    lengths = np.full(300, 40_000, dtype=np.int64)
    plan = merge_plan(offsets, lengths)
    fetched = sum(int(offsets[hi - 1] + lengths[hi - 1] - offsets[lo]) for lo, hi in plan)
    assert int(lengths.sum()) < fetched <= 2 * int(lengths.sum())
    assert len(plan) > 1
    small = np.array([0, 5_000, 60_000, 400_000], dtype=np.int64)
    assert merge_plan(small, np.full(4, 30, dtype=np.int64)) == [(0, 4)]


def test_many_chunks_at_once_bridge_only_small_gaps():
    """A read of many chunks at once (BULK: their requests go out together) bridges small
    gaps only, not the read-ahead's 1 MiB: a bridged gap costs its bytes at the bandwidth in
    all, where a request more costs only its own work (0.3 ms: 150 kB at the 500 MB/s the
    model assumes until it has measured)."""
    from h5lens.fetch.planner import BULK

    lengths = np.full(50, 40_000, dtype=np.int64)
    close = np.arange(50, dtype=np.int64) * 70_000  # 30 kB gaps: within the budget too
    far = np.arange(50, dtype=np.int64) * 300_000  # 260 kB gaps
    # bridged into requests of ~1 MiB parts (one more than the fewest: five streams beat four)
    assert len(BULK.runs(close, lengths)) <= 2
    assert BULK.runs(far, lengths) == [(i, i + 1) for i in range(50)]
    assert READS.runs(far, lengths) != BULK.runs(far, lengths)  # the read-ahead's bridges them


def test_read_ranges_merges_and_matches_file_bytes(blob):
    path, data = blob
    fetcher, requests = _fetcher(path)
    offsets, lengths = _ranges(1000, 700, 2000)
    order = np.random.default_rng(0).permutation(2000)  # asked for out of order
    got = asyncio.run(fetcher.read_ranges(offsets[order], lengths[order]))
    assert [bytes(g) for g in got] == [data[o : o + n] for o, n in zip(offsets[order], lengths[order], strict=True)]
    assert requests == [1999 * 1000 + 700]  # one request for all


def test_prefetched_blocks_serve_reads_then_are_released(blob):
    path, data = blob
    fetcher, requests = _fetcher(path)
    offsets, lengths = _ranges(4096, 4000, 500)

    async def run() -> list[bytes]:
        fetcher.prefetch(offsets, lengths)
        first = await fetcher.read_ranges(offsets[:200], lengths[:200])
        single = await fetcher.read(int(offsets[300]), int(lengths[300]))
        rest = await fetcher.read_ranges(np.delete(offsets[200:], 100), np.delete(lengths[200:], 100))
        return [bytes(b) for b in first] + [single] + [bytes(b) for b in rest]

    got = asyncio.run(run())
    expected = [data[o : o + n] for o, n in zip(offsets, lengths, strict=True)]
    assert sorted(got) == sorted(expected)
    assert len(requests) == 1
    assert fetcher.unclaimed_bytes == 0  # every prefetched byte claimed
    assert fetcher._cached_bytes <= fetch.SPENT_CACHE_BYTES


def test_read_ahead_is_claimed_by_later_reads(blob):
    path, data = blob
    fetcher, requests = _fetcher(path)
    offsets, lengths = _ranges(1000, 1000, 64)

    async def run() -> list[bytes]:
        ahead = list(zip(offsets[1:].tolist(), lengths[1:].tolist(), strict=True))
        out = [await fetcher.read(0, 1000, ahead)]
        for offset, length in ahead:
            out.append(await fetcher.read(offset, length))
        return out

    assert asyncio.run(run()) == [data[o : o + n] for o, n in zip(offsets, lengths, strict=True)]
    assert requests == [64_000]
    assert fetcher.unclaimed_bytes == 0


def test_reads_of_the_same_bytes_share_one_request(blob):
    path, data = blob
    fetcher, requests = _fetcher(path)

    async def run() -> list[bytes]:
        together = await asyncio.gather(fetcher.read(100, 50), fetcher.read(120, 10))  # in flight
        after = await fetcher.read(100, 50)  # read already, kept a little while
        return [*together, after]

    assert asyncio.run(run()) == [data[100:150], data[120:130], data[100:150]]
    assert requests == [50]


def test_cache_is_bounded(blob, monkeypatch):
    path, _ = blob
    monkeypatch.setattr(fetch, "READAHEAD_CACHE_BYTES", 1 << 20)
    fetcher, _ = _fetcher(path)
    offsets, lengths = _ranges(MAX_GAP + 400_000, 300_000, 3)  # three separate requests of 300 kB

    async def run() -> None:
        fetcher.prefetch(offsets, lengths)
        assert len(fetcher._blocks) == 3
        fetcher.prefetch(*_ranges(1, 600_000, 1, start=3_500_000))  # a fourth evicts the oldest
        assert fetcher._cached_bytes <= 1 << 20
        assert int(offsets[0]) not in fetcher._starts
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_failed_request_is_not_cached(tmp_path):
    path = tmp_path / "later.bin"
    fetcher, requests = _fetcher(str(path))
    offsets, lengths = _ranges(100, 100, 10)

    async def attempt() -> list[bytes]:
        fetcher.prefetch(offsets, lengths)
        return [bytes(b) for b in await fetcher.read_ranges(offsets, lengths)]

    with pytest.raises(SourceNotFoundError):
        asyncio.run(attempt())
    assert not fetcher._blocks  # nothing failed is kept
    path.write_bytes(os.urandom(1000))
    assert b"".join(asyncio.run(attempt())) == path.read_bytes()
    assert len(requests) == 2


def test_s3_clients_of_one_event_loop_share_one_aiobotocore_session(s3):
    """A new aiobotocore session loads botocore's service models again (~130 ms a client):
    the s3 clients made on one event loop share one; another loop gets its own; a session
    the user passes is the one used."""
    from aiobotocore.session import AioSession

    from h5lens.fetch.clients import FsspecClient

    url = "s3://bucket/any.h5"
    options = s3.storage_options()

    async def sessions(extra: dict) -> list:
        clients = [FsspecClient(url, {**options, **extra}) for _ in range(2)]
        try:
            return [(await client._filesystem())[0].session for client in clients]
        finally:
            for client in clients:
                client.close(wait=False)

    first, second = asyncio.run(sessions({}))
    assert first is second and isinstance(first, AioSession)
    (other, _) = asyncio.run(sessions({}))
    assert other is not first
    mine = AioSession()
    assert asyncio.run(sessions({"session": mine})) == [mine, mine]
