"""The realistic S3 the benchmarks use: CountingProxy with a bandwidth per response and
objects answered from its own cache (moto behind it), read by s3fs and obstore."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import numpy as np
import pytest

from h5lens.testing.s3 import CREDENTIALS, CountingProxy, parse_range

SIZE = 2 << 20
BANDWIDTH = 20e6  # bytes/s: a whole GET of SIZE takes >= 0.105 s
RANGES = [(0, 1), (0, 1024), (1000, 70_000), (SIZE - 5, SIZE), (123_456, SIZE), (0, SIZE)]
# any credential passes moto; a request without one is refused (403), as S3 refuses it
SIGNED = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"}


@pytest.fixture
def obj(s3) -> tuple[str, bytes]:
    data = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    key = f"bucket/{uuid.uuid4().hex}/object.bin"
    s3.filesystem().pipe(key, data)
    return key, data


@pytest.fixture
def sim(s3):
    with CountingProxy(s3.endpoint_url, latency_ms=1, bandwidth=BANDWIDTH, cache_objects=True) as proxy:
        yield proxy


def _raw_get(url: str, rng: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = dict(SIGNED, **({"Range": rng} if rng else {}))
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_ranged_gets_return_the_objects_bytes(s3, sim, obj) -> None:
    import obstore
    from obstore.store import S3Store

    key, data = obj
    fs = s3.filesystem(sim.endpoint_url)
    for start, end in RANGES:
        assert fs.cat_file(key, start=start, end=end) == data[start:end], (start, end)
    bucket, path = key.split("/", 1)
    store = S3Store(
        bucket,
        endpoint=sim.endpoint_url,
        access_key_id=CREDENTIALS["key"],
        secret_access_key=CREDENTIALS["secret"],
        region="us-east-1",
        client_options={"allow_http": True},
    )
    for start, end in RANGES:
        assert bytes(obstore.get_range(store, path, start=start, end=end)) == data[start:end], (start, end)
    parts = obstore.get_ranges(store, path, starts=[s for s, _ in RANGES], ends=[e for _, e in RANGES])
    assert [bytes(p) for p in parts] == [data[s:e] for s, e in RANGES]
    assert bytes(obstore.get(store, path).bytes()) == data
    assert sim.stats.cache_fills == 1  # moto read the object once


def test_answers_carry_s3s_headers(s3, sim, obj) -> None:
    key, data = obj
    url = f"{sim.endpoint_url}/{key}"
    etag = s3.filesystem().info(key)["ETag"]
    status, headers, body = _raw_get(url, "bytes=10-19")
    assert (status, body) == (206, data[10:20])
    assert headers["Content-Range"] == f"bytes 10-19/{SIZE}"
    assert headers["Content-Length"] == "10"
    assert headers["ETag"] == etag
    assert headers["Accept-Ranges"] == "bytes"
    assert "Last-Modified" in headers
    status, headers, body = _raw_get(url, "bytes=-7")
    assert (status, body, headers["Content-Range"]) == (206, data[-7:], f"bytes {SIZE - 7}-{SIZE - 1}/{SIZE}")
    status, headers, _ = _raw_get(url, f"bytes={SIZE}-")
    assert status == 416
    assert headers["Content-Range"] == f"bytes */{SIZE}"
    status, headers, body = _raw_get(url)
    assert (status, body == data, headers["Content-Length"]) == (200, True, str(SIZE))
    status, _, _ = _raw_get(f"{sim.endpoint_url}/bucket/{uuid.uuid4().hex}")
    assert status == 404  # a missing key: the target's answer, nothing cached


def test_a_response_streams_no_faster_than_the_bandwidth(s3, sim, obj) -> None:
    key, data = obj
    fs = s3.filesystem(sim.endpoint_url)
    fs.cat_file(key, start=0, end=1)  # fills the cache: the timed GETs are answered by the proxy alone
    start = time.perf_counter()
    assert fs.cat_file(key) == data
    whole = time.perf_counter() - start
    assert whole >= SIZE / BANDWIDTH  # a lower bound of the proxy's own sleeps, not a timing guess
    start = time.perf_counter()
    fs.cat_file(key, start=0, end=SIZE // 8)
    assert time.perf_counter() - start >= SIZE / 8 / BANDWIDTH


def test_responses_in_flight_share_the_total_bandwidth(s3, obj) -> None:
    """Four GETs sent together behind a link of ``total_bandwidth``: they end no sooner than
    the link could have sent their bytes, one after another (each alone streams 10x faster)."""
    from concurrent.futures import ThreadPoolExecutor

    key, data = obj
    total = 10e6
    with CountingProxy(s3.endpoint_url, bandwidth=100e6, total_bandwidth=total, cache_objects=True) as link:
        fs = s3.filesystem(link.endpoint_url)
        fs.cat_file(key, start=0, end=1)  # fills the cache
        quarter = SIZE // 4
        start = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            parts = list(pool.map(lambda i: s3.filesystem(link.endpoint_url).cat_file(key, start=i * quarter, end=(i + 1) * quarter), range(4)))
        assert time.perf_counter() - start >= SIZE / total  # a lower bound of the proxy's own sleeps
    assert b"".join(parts) == data


def test_a_put_after_a_cached_get_is_seen(s3, sim, obj) -> None:
    key, data = obj
    fs = s3.filesystem(sim.endpoint_url)
    assert fs.cat_file(key, start=0, end=100) == data[:100]
    fs.pipe(key, b"new contents")  # through the proxy: drops the cached copy
    assert fs.cat_file(key, start=0, end=3) == b"new"
    assert fs.cat_file(key) == b"new contents"
    fs.rm(key)
    with pytest.raises(FileNotFoundError):
        fs.cat_file(key, start=0, end=3)
    assert sim.stats.cache_fills == 2


def test_parse_range_reads_ranges_as_s3_does() -> None:
    assert parse_range(None, 10) is None
    assert parse_range("bytes=2-4", 10) == (2, 5)
    assert parse_range("bytes=2-", 10) == (2, 10)
    assert parse_range("bytes=8-100", 10) == (8, 10)
    assert parse_range("bytes=-3", 10) == (7, 10)
    assert parse_range("bytes=-30", 10) == (0, 10)
    assert parse_range("bytes=10-", 10) is False
    assert parse_range("bytes=-0", 10) is False
    assert parse_range("bytes=5-2", 10) is None  # invalid: the whole object
    assert parse_range("bytes=0-1,4-5", 10) is None  # several ranges: S3 sends the whole object
    assert parse_range("items=0-1", 10) is None
