"""How libhdf5's reads of a remote file are fetched (:class:`h5lens.scan.source.TrackedFile`,
:class:`h5lens.fetch.readahead.Streams`): the bytes read are the file's, whatever the order;
and what each kind of read costs, counted at the fetch function (no server: the policy alone).
Scans of real files through a real S3 server: tests/test_remote_scan.py."""

from __future__ import annotations

import random

import numpy as np

from h5lens.fetch.readahead import Streams
from h5lens.scan.source import TrackedFile

KiB, MiB = 1 << 10, 1 << 20


class Recorder:
    """A file's bytes served by range, each fetch recorded."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.fetches: list[tuple[int, int]] = []

    def __call__(self, offset: int, length: int) -> bytes:
        self.fetches.append((offset, length))
        return self.data[offset : offset + length]

    @property
    def fetched(self) -> int:
        return sum(length for _, length in self.fetches)


def random_bytes(size: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def read(tracked: TrackedFile, offset: int, length: int) -> bytes:
    tracked.seek(offset)
    return tracked.read(length)


def test_every_read_is_the_files_bytes_in_any_order() -> None:
    data = random_bytes(3 * MiB + 123)
    rng = random.Random(1)
    for block in (4096, 64 * KiB, MiB, 4 * MiB):
        fetch = Recorder(data)
        tracked = TrackedFile(fetch, len(data), block, cache_bytes=MiB)  # a small cache: units evicted too
        offset = 0
        for _ in range(3000):
            # jumps, reads that carry on, reads a little before or after the last one
            offset = rng.choice([rng.randrange(len(data)), offset, max(0, offset - rng.randrange(8 * KiB))])
            length = rng.choice([8, 16, 512, 544, 4096, 65536, 200_000])
            assert read(tracked, offset, length) == data[offset : offset + length], (block, offset, length)
            offset += length if offset + length < len(data) else -offset
        assert tracked.bytes_read == fetch.fetched and tracked.requests == len(fetch.fetches)
        assert all(0 <= o and o + n <= len(data) and n > 0 for o, n in fetch.fetches)
    assert read(tracked, len(data) - 5, 100) == data[-5:]  # a read past the end: what there is
    assert read(tracked, len(data) + 5, 100) == b""


def test_a_header_between_chunks_costs_a_few_kib_not_a_block() -> None:
    data = random_bytes(16 * MiB)
    fetch = Recorder(data)
    tracked = TrackedFile(fetch, len(data), MiB)
    header = 9 * MiB + 1961  # an object header where one dataset's chunks end and the next one's begin
    assert read(tracked, header, 512) == data[header : header + 512]
    assert len(fetch.fetches) == 1 and fetch.fetched <= 4 * TrackedFile.JUMP_UNITS * KiB
    # what libhdf5 reads next lies just before (the group's heap) or after (the B-tree root): held
    assert read(tracked, header - 2500, 120) == data[header - 2500 : header - 2380]
    assert read(tracked, header + 3000, 1000) == data[header + 3000 : header + 4000]
    assert len(fetch.fetches) == 1
    # a 4 KiB read from the header's start, past the fetch: what it asks, no read-ahead yet
    end = fetch.fetches[0][0] + fetch.fetches[0][1]
    assert read(tracked, end - 100, 4096) == data[end - 100 : end + 3996]
    assert fetch.fetches[-1] == (end, 4 * KiB)


def test_packed_metadata_comes_in_few_requests() -> None:
    """Object headers written together (256 KiB of them), read in an order of libhdf5's: each
    request doubles what is held around them, as one read-ahead would."""
    data = random_bytes(32 * MiB)
    fetch = Recorder(data)
    tracked = TrackedFile(fetch, len(data), MiB)
    region = 25 * MiB
    offsets = [region + 2 * KiB * i + 100 for i in range(128)]
    random.Random(3).shuffle(offsets)
    for offset in offsets:
        assert read(tracked, offset, 544) == data[offset : offset + 544]
    assert len(fetch.fetches) <= 12
    assert fetch.fetched <= 256 * KiB + 2 * 4 * TrackedFile.JUMP_UNITS * KiB


def test_interleaved_runs_each_read_ahead() -> None:
    """libhdf5 reads a global heap of strings (64 KiB at a time) in turn with the chunks of
    heap IDs pointing into it (2 KiB each, elsewhere): both runs read ahead, doubling."""
    data = random_bytes(8 * MiB)
    fetch = Recorder(data)
    tracked = TrackedFile(fetch, len(data), MiB)
    heaps, chunks = 64 * KiB, 3 * MiB
    for i in range(16):
        heap = heaps + i * 64 * KiB
        assert read(tracked, heap, 16) == data[heap : heap + 16]
        assert read(tracked, heap, 64 * KiB) == data[heap : heap + 64 * KiB]
        chunk = chunks + i * 2200
        assert read(tracked, chunk, 2200) == data[chunk : chunk + 2200]
    assert len(fetch.fetches) <= 10  # 16 heaps and 16 chunks
    assert fetch.fetched <= 2 * (16 * 64 * KiB + 16 * 2200)


def test_a_file_no_larger_than_a_block_is_one_request() -> None:
    data = random_bytes(300 * KiB)
    fetch = Recorder(data)
    tracked = TrackedFile(fetch, len(data), MiB)
    assert read(tracked, len(data) - 300, 300) == data[-300:]  # libhdf5 checks the end first
    assert fetch.fetches == [(0, len(data))]
    # the first bytes held already (an HTTP check brought them): the rest, in one request
    fetch = Recorder(data)
    tracked = TrackedFile(fetch, len(data), MiB)
    tracked.hold(0, 64 * KiB)
    assert tracked.requests == 0
    assert read(tracked, 200 * KiB, 10) == data[200 * KiB : 200 * KiB + 10]
    assert fetch.fetches == [(0, 64 * KiB), (64 * KiB, len(data) - 64 * KiB)]


def test_what_is_held_is_a_run_to_carry_on() -> None:
    """Over HTTP the check brought the first 64 KiB: a heap read on from there reads ahead."""
    data = random_bytes(16 * MiB)
    fetch = Recorder(data)
    tracked = TrackedFile(fetch, len(data), MiB)
    tracked.hold(0, 64 * KiB)
    assert read(tracked, 60 * KiB, 64 * KiB) == data[60 * KiB : 124 * KiB]
    assert fetch.fetches[-1] == (64 * KiB, 128 * KiB)  # twice what was held


def test_no_fetch_goes_past_the_block_size_but_what_is_asked() -> None:
    data = random_bytes(4 * MiB)
    for block in (4096, 16 * KiB):
        fetch = Recorder(data)
        tracked = TrackedFile(fetch, len(data), block)
        rng = random.Random(block)
        for offset in [rng.randrange(len(data) - 8) for _ in range(200)] + list(range(0, 2 * MiB, 4 * KiB)):
            read(tracked, offset, 8)
        assert max(length for _, length in fetch.fetches) <= block


def test_streams_double_a_run_once_it_has_shown_itself() -> None:
    streams = Streams(64, after_jump=4)
    assert streams.window(100, asked=1) == (4, False)  # a jump
    streams.fetched(98, 102, asked=1, carried=False)
    assert streams.window(102, asked=1) == (1, True)  # one small read past it: what it asks
    streams.fetched(98, 102, asked=1, carried=False)
    assert streams.window(102, asked=3) == (8, True)  # a read of several units: a run already
    streams.fetched(102, 103, asked=1, carried=True)
    assert streams.window(103, asked=1) == (2, True)  # a run now: twice the last fetch
    streams.fetched(103, 105, asked=1, carried=True)
    assert streams.window(105, asked=3) == (4, True)
    # a read of several units shows a run at once; windows stop at ``most``
    streams.fetched(500, 540, asked=40, carried=False)
    assert streams.window(540, asked=1) == (64, True)
    # another run, in between, keeps its own
    streams.fetched(105, 109, asked=3, carried=True)
    streams.fetched(900, 901, asked=1, carried=False)
    assert streams.window(109, asked=1) == (8, True)
