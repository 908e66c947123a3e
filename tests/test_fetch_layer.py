"""The one byte layer: what every ByteReader declares it can do, and the cost model its
planner decides from, counted in requests and bytes at a real S3 endpoint (moto behind
CountingProxy). Nothing here times anything: the proxy's sleeps only make a narrow link."""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import replace

import numpy as np
import pytest

from h5lens.errors import SourceReadError
from h5lens.fetch import cost, planner
from h5lens.fetch.blocks import ChunkFetcher
from h5lens.fetch.clients import CLIENT_ENV, exists, open_client, read_head
from h5lens.fetch.local import LocalClient, read_now
from h5lens.fetch.mapped import LOCAL_READS_ENV, MAP_FROM
from h5lens.fetch.obstore_client import BATCH, ObstoreClient
from h5lens.fetch.protocol import ByteReader
from h5lens.manifest.destination import existing_head
from h5lens.read.linked_files import exists as linked_file_exists
from h5lens.testing.s3 import CountingProxy

SIZE = 1 << 20


@pytest.fixture
def blob(tmp_path):
    data = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    return str(path), data


def _upload(s3, data: bytes, name: str = "blob.bin") -> str:
    key = f"bucket/{uuid.uuid4().hex}/{name}"
    s3.filesystem().pipe(key, data)
    return f"s3://{key}"


def _ranges(count: int, length: int, step: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(count, dtype=np.int64) * step + start, np.full(count, length, dtype=np.int64)


# --------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize("kind", ["local", "obstore", "fsspec"])
def test_every_reader_declares_what_it_can(s3, blob, monkeypatch, kind):
    """Each reader says whether it is local, how many requests it keeps in flight, what a
    request costs, whether it maps, and how many ranges it sends in one call, and does it:
    get_many keeps every range that came back and names the one that did not."""
    path, data = blob
    if kind == "local":
        url, options = path, None
    else:
        pytest.importorskip("obstore")
        monkeypatch.setenv(CLIENT_ENV, "auto" if kind == "obstore" else kind)  # obstore forced would batch at once
        url, options = _upload(s3, data), s3.storage_options()
    reader = open_client(url, options)
    try:
        assert isinstance(reader, ByteReader)
        assert reader.name == {"local": "pread", "obstore": "obstore", "fsspec": "fsspec"}[kind]
        assert reader.local is (kind == "local") and reader.maps is (kind == "local")
        assert reader.cost.in_flight == reader.concurrency >= 1
        assert (reader.cost.round_trip == 0) is (kind == "local")
        offsets, lengths = _ranges(MAP_FROM, 1000, 5000)
        views = reader.views(offsets, lengths)
        if kind == "local":
            assert views is not None and [bytes(v) for v in views] == [data[o : o + 1000] for o in offsets.tolist()]
        else:
            assert views is None
        assert reader.batches() == 0  # nothing answered yet: obstore's first requests go alone
        ranges = [(0, 10), (SIZE - 5, 10), (SIZE // 2, 100)]  # the second runs past the end
        found = asyncio.run(reader.get_many(ranges))
        assert found[0] == data[:10] and found[2] == data[SIZE // 2 : SIZE // 2 + 100]
        assert isinstance(found[1], SourceReadError) and f"{SIZE - 5}-{SIZE + 5}" in str(found[1])
        assert reader.batches() == (BATCH if kind == "obstore" else 0)
        assert bytes(reader.get_sync(SIZE - 5, 10, exact=False)) == data[-5:]
        assert reader.stat()["size"] == SIZE
    finally:
        reader.close()


def test_obstore_sends_its_batches_as_one_call_of_one_request_a_range(s3, blob):
    """get_many: one obstore call for up to BATCH ranges, never merged (one GET each)."""
    pytest.importorskip("obstore")
    _, data = blob
    url = _upload(s3, data)
    with CountingProxy(s3.endpoint_url) as proxy:
        reader = open_client(url, s3.storage_options(proxy.endpoint_url))
        assert isinstance(reader, ObstoreClient)
        reader.get_sync(0, 1)  # answered once: its batches go in one call from now on
        proxy.stats.reset()
        ranges = [(i * 1000, 10) for i in range(BATCH)]  # touching none: nothing to merge
        found = asyncio.run(reader.get_many(ranges))
        reader.close()
    assert [bytes(f) for f in found] == [data[o : o + n] for o, n in ranges]  # type: ignore[arg-type]
    assert (proxy.stats.gets, proxy.stats.bytes) == (BATCH, 10 * BATCH)


def test_many_local_ranges_are_views_of_a_map_or_merged_preads(blob, monkeypatch):
    """A local reader's many ranges: views of its map (nothing merged, one read counted);
    where reads do not map, one pread per run whose gaps are at most the local model's
    16 KB (a copy costs no more than another pread would)."""
    path, data = blob
    offsets = np.array([0, 20_000, 30_000, 60_000, 200_000], dtype=np.int64)  # gaps 19 000, 9 000, 29 000, 139 000
    lengths = np.full(5, 1000, dtype=np.int64)
    expected = [data[o : o + 1000] for o in offsets.tolist()]
    assert planner.LOCAL.gap() == 16_000
    for reads, requests in (("map", [5000]), ("pread", [1000, 11_000, 1000, 1000])):
        monkeypatch.setenv(LOCAL_READS_ENV, reads)
        reader = LocalClient(path)
        made: list[int] = []
        try:
            assert [bytes(v) for v in read_now(reader, offsets, lengths, made.append)] == expected
        finally:
            reader.close()
        assert made == requests, reads


# --------------------------------------------------------------------------- the cost model


def test_the_cost_model_says_what_a_batch_takes():
    narrow = cost.CostModel(round_trip=0.02, stream_bandwidth=100e6, total_bandwidth=25e6, in_flight=256, request_cost=2e-4)
    assert narrow.seconds(1, 0) == pytest.approx(0.0202)
    assert narrow.seconds(300, 0) == pytest.approx(2 * 0.02 + 300 * 2e-4)  # two waves
    assert narrow.seconds(10, 25_000_000) == pytest.approx(0.02 + 10 * 2e-4 + 1.0)  # the link in all binds
    wide = replace(narrow, total_bandwidth=None)  # measured; assumed 500 MB/s until then
    assert wide.seconds(2, 100_000_000) == pytest.approx(0.02 + 2 * 2e-4 + 0.5)  # two streams bind
    assert wide.seconds(2, 100_000_000, 50e6) == pytest.approx(0.02 + 2 * 2e-4 + 2.0)  # as measured
    # reads one after another bridge what half a round trip and a request's work stream
    assert cost.OBJECT_STORE.following_gap() == int(0.0103 * 100e6)
    assert cost.OBJECT_STORE.following_gap(25e6) == int(0.0103 * 25e6)
    assert cost.LOCAL.following_gap() == 16_000


def test_ranges_fetched_together_bridge_gaps_only_where_bandwidth_is_not_short():
    """Scattered chunks asked for at once: on a wide link the gaps of 30 kB cost less than
    the requests they save (0.3 ms each) and are bridged, within the byte budget; on a
    25 MB/s link they cost 1.2 ms each and nothing is bridged."""
    offsets, lengths = _ranges(40, 20_000, 50_000)
    wide = planner.bulk(replace(cost.OBJECT_STORE, total_bandwidth=1e9)).requests(offsets, lengths)
    narrow = planner.bulk(replace(cost.OBJECT_STORE, total_bandwidth=25e6)).requests(offsets, lengths)
    assert narrow == [(o, o + 20_000) for o in offsets.tolist()]
    asked = int(lengths.sum())
    assert len(wide) < 10 and sum(e - s for s, e in wide) <= asked + max(asked, 1 << 20)
    # three hundred ranges on 256 connections: bridging the smallest gaps saves a wave
    offsets, lengths = _ranges(300, 20_000, 21_000)
    assert len(planner.bulk(replace(cost.OBJECT_STORE, total_bandwidth=25e6)).runs(offsets, lengths)) <= 256


def test_a_long_request_goes_as_as_many_parts_as_the_bandwidth_in_all_carries():
    """A request longer than ``part`` is split into parts of equal size, none shorter than
    ``part``: as many streams (100 MB/s each) as the bandwidth in all fills, no more (more
    parts would add requests, not bandwidth), and one stream where the link is narrower."""
    reads = planner.reads(cost.OBJECT_STORE)  # 1 MiB parts at least; 500 MB/s assumed
    parts = reads.parts(1000, 1000 + 12_800_000)
    assert len(parts) == 5 and parts[0][0] == 1000 and parts[-1][1] == 1000 + 12_800_000
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    assert {e - s for s, e in parts[:-1]} == {2_560_000}
    assert len(reads.parts(0, 3 << 20)) == 3  # short of five streams: parts of 1 MiB
    assert reads.parts(0, 1 << 20) == [(0, 1 << 20)]
    assert len(reads.parts(0, 12_800_000, 1e9)) == 10  # a measured 1 GB/s: ten streams
    assert reads.parts(0, 12_800_000, 50e6) == [(0, 12_800_000)]  # a link narrower than a stream


def test_the_meter_takes_the_bytes_time_for_the_bandwidth_in_all():
    """Busy periods, on a clock the test turns: the round trips and the requests' work
    explain part of a period, the bytes the rest."""
    now = [0.0]
    meter = cost.BandwidthMeter(cost.OBJECT_STORE, clock=lambda: now[0])
    began = meter.started(1)
    now[0] = 0.02
    meter.finished(1, 1000, began)  # a small first request: a round trip, too few bytes to tell
    assert meter.measured is None and meter.quickest == pytest.approx(0.02)
    meter.batch()
    began = meter.started(100)
    now[0] = 1.02
    meter.finished(60, 6_000_000, began)  # still 40 in flight: one busy period
    now[0] = 1.1
    meter.finished(40, 4_000_000, began)
    # 1.08 s: a round trip, 100 x 0.3 ms of requests, the rest (1.03 s) the bytes'
    assert meter.measured == pytest.approx(10e6 / 1.03)
    meter.batch()
    began = meter.started(100)
    now[0] += 0.05
    meter.finished(100, 10_000_000, began)  # round trips and requests explain it: no narrower than assumed
    assert meter.measured == pytest.approx(max(np.sqrt(10e6 / 1.03 * 500e6), 10e6 / 0.05))
    stated = cost.BandwidthMeter(replace(cost.OBJECT_STORE, total_bandwidth=25e6))
    began = stated.started(1)
    stated.finished(1, 10_000_000, began)
    assert stated.measured is None and stated.bandwidth == 25e6


def test_a_narrow_link_is_measured_then_nothing_is_bridged(s3, monkeypatch):
    """A read of scattered chunks behind a 5 MB/s link: the first is planned with the
    assumed bandwidth (gaps bridged), its bytes' time shows the link, and the next read of
    as many chunks fetches only their bytes, one GET each."""
    pytest.importorskip("obstore")
    data = np.random.default_rng(3).integers(0, 256, 12 << 20, dtype=np.uint8).tobytes()
    url = _upload(s3, data)
    with CountingProxy(s3.endpoint_url, latency_ms=5, bandwidth=100e6, total_bandwidth=5e6, cache_objects=True) as proxy:
        reader = open_client(url, s3.storage_options(proxy.endpoint_url))
        fetcher = ChunkFetcher(reader, planner=planner.bulk(reader.cost))

        async def read(offsets: np.ndarray, lengths: np.ndarray) -> list[bytes]:
            return [bytes(v) for v in await fetcher.read_ranges(offsets, lengths)]

        try:
            assert asyncio.run(read(*_ranges(1, 100, 1))) == [data[:100]]  # a first, small request
            first = _ranges(100, 25_000, 50_000)
            proxy.stats.reset()
            assert asyncio.run(read(*first)) == [data[o : o + 25_000] for o in first[0].tolist()]
            assert proxy.stats.gets < 100 and proxy.stats.bytes > 100 * 25_000  # bridged, as assumed
            assert fetcher.meter.measured is not None and fetcher.meter.measured < 50e6
            second = _ranges(100, 25_000, 50_000, start=5 << 20)
            proxy.stats.reset()
            assert asyncio.run(read(*second)) == [data[o : o + 25_000] for o in second[0].tolist()]
            assert (proxy.stats.gets, proxy.stats.bytes) == (100, 100 * 25_000)
        finally:
            fetcher.close()
            reader.close()


def test_a_stated_bandwidth_is_planned_with_from_the_start(s3, monkeypatch):
    """``H5LENS_BANDWIDTH`` states the bandwidth in all: nothing to measure first."""
    pytest.importorskip("obstore")
    monkeypatch.setenv(cost.BANDWIDTH_ENV, "25e6")
    data = os.urandom(4 << 20)
    url = _upload(s3, data)
    with CountingProxy(s3.endpoint_url) as proxy:
        reader = open_client(url, s3.storage_options(proxy.endpoint_url))
        assert reader.cost.total_bandwidth == 25e6
        fetcher = ChunkFetcher(reader, planner=planner.bulk(reader.cost))
        offsets, lengths = _ranges(50, 20_000, 50_000)
        try:
            got = asyncio.run(fetcher.read_ranges(offsets, lengths))
        finally:
            fetcher.close()
            reader.close()
    assert [bytes(v) for v in got] == [data[o : o + 20_000] for o in offsets.tolist()]
    assert (proxy.stats.gets, proxy.stats.bytes) == (50, 50 * 20_000)
    monkeypatch.setenv(cost.BANDWIDTH_ENV, "fast")
    from h5lens.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="H5LENS_BANDWIDTH"):
        open_client(url, s3.storage_options())


# --------------------------------------------------------------------------- readers outside fetch/


def test_a_destination_and_a_linked_file_are_asked_through_the_readers(s3, tmp_path):
    """Whether a file is there and its first bytes: a HEAD, and a GET of what there is."""
    pytest.importorskip("obstore")
    url = _upload(s3, b'{"version": 1}', "m.json")
    missing = url.replace("m.json", "none.json")
    with CountingProxy(s3.endpoint_url) as proxy:
        options = s3.storage_options(proxy.endpoint_url)
        assert exists(url, options) and linked_file_exists(url, options)
        assert (proxy.stats.heads, proxy.stats.gets) == (2, 0)
        proxy.stats.reset()
        assert existing_head(url, options) == b'{"version": 1}'
        assert (proxy.stats.heads, proxy.stats.gets, proxy.stats.bytes) == (1, 1, 14)
        assert read_head(url, 4, options) == b'{"ve'
        assert not exists(missing, options) and existing_head(missing, options) is None
    local = tmp_path / "m.json"
    local.write_bytes(b"[]")
    assert exists(str(local)) and existing_head(str(local)) == b"[]"
    assert not exists(str(tmp_path)) and not exists(str(tmp_path / "none"))  # a directory is no file
    assert existing_head(str(tmp_path / "none")) is None
