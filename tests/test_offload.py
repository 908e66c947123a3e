"""Many reads in one event-loop turn (a minibatch loader's preload): their decoding is
taken together, on the loop when it is little, shared out between threads when it is
more; each read gets its own values, and a chunk that fails fails only its own read."""

from __future__ import annotations

import asyncio
import threading

import h5py
import numpy as np
import pytest
from zarr.core.sync import sync

import h5lens
from h5lens.engine import offload
from h5lens.errors import SourceReadError


def _file(path):
    rng = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=rng.integers(0, 1000, 400_000).astype("i4"), chunks=(4_000,), compression="gzip")
        f.create_dataset("b", data=rng.random(300_000), chunks=(3_000,), compression="lzf")
    return path


@pytest.mark.parametrize(("count", "on_loop"), [(3, True), (400, False)])  # few bytes, many
def test_reads_of_one_turn_each_get_their_values(tmp_path, monkeypatch, count, on_loop):
    path = _file(tmp_path / "many.h5")
    store = h5lens.open_store(h5lens.index(path))
    rng = np.random.default_rng(count)
    wanted = [("a" if i % 2 else "b", int(rng.integers(0, 250_000)), int(rng.integers(1, 20_000))) for i in range(count)]
    ran: list[str] = []  # the thread each decoding job ran on
    run = offload._run

    def spied(job):  # noqa: ANN001, ANN202 - offload's own job
        ran.append(threading.current_thread().name)
        return run(job)

    monkeypatch.setattr(offload, "_run", spied)
    loop_thread: list[str] = []

    async def many():
        loop_thread.append(threading.current_thread().name)
        return await asyncio.gather(*(store.engine.read_region_async(name, [(s, s + n)]) for name, s, n in wanted))

    got = sync(many())
    assert len(ran) == count
    assert (set(ran) == set(loop_thread)) is on_loop, f"decoded on {sorted(set(ran))}, the loop is {loop_thread}"
    with h5py.File(path) as f:
        for (name, start, length), values in zip(wanted, got, strict=True):
            np.testing.assert_array_equal(values, f[name][start : start + length])


def test_a_chunk_that_fails_fails_only_its_own_read(tmp_path):
    path = _file(tmp_path / "many.h5")
    manifest = h5lens.index(path)
    table = manifest.chunks["a"]
    offset = int(table.offset.reshape(-1)[50])
    with open(path, "r+b") as f:  # chunk 50 of "a" damaged in place (size and ends unchanged)
        f.seek(offset)
        f.write(b"\xff" * 64)
    store = h5lens.open_store(manifest)

    async def many():
        reads = [store.engine.read_region_async("a", [(50 * 4_000, 51 * 4_000)])]
        reads += [store.engine.read_region_async("b", [(i * 3_000, (i + 10) * 3_000)]) for i in range(0, 90, 10)]
        return await asyncio.gather(*reads, return_exceptions=True)

    first, *rest = sync(many())
    assert isinstance(first, SourceReadError) and "a/c/50" in str(first)
    with h5py.File(path) as f:
        for i, values in zip(range(0, 90, 10), rest, strict=True):
            np.testing.assert_array_equal(values, f["b"][i * 3_000 : (i + 10) * 3_000])
