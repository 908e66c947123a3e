"""The read engine's one decode kernel: a plan's chunks, from their stored bytes into their
places (:func:`decode`), and the one policy for the threads it runs on.

Every read plan ends here, whatever its layout (:mod:`h5lens.engine.layouts`) and codec
(:mod:`h5lens.engine.codec`). What differs between codecs is what they declare they can do,
not a loop of their own: each chunk is written into its place where the codec can (``into``)
and decoded to bytes joined once where it cannot; a byte shuffle is undone for many chunks at
once (``values``); a chunk a read needs only the first values of is inflated only that far
(``head``); chunks the store keeps decoded are used as they are, and those decoded are kept
(``cache``).

Two ways through, one loop. Small chunks are decoded a batch at a time into one block of
them all, then laid out at once: no Python work per chunk beyond its decompression. Big
chunks (``codec.streams``) and layouts that need only part of some chunks (``layout.needs``:
a loader's runs of rows) stream: each chunk is decoded into its own place in the output
where it has one, else into a buffer of its thread's own (it stays in the CPU's cache), and
placed as it comes.

A chunk that does not decode raises SourceReadError naming it, here and nowhere else.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from h5lens.engine.codec import ArrayCodec
from h5lens.engine.decoded_cache import Decoded
from h5lens.engine.layouts import Layout
from h5lens.engine.text import TextCodec
from h5lens.errors import SourceReadError

Codec = ArrayCodec | TextCodec
Payloads = dict[int, Any]  # flat index -> stored bytes, or the decoded bytes the store kept
T = TypeVar("T")

THREADS = max(1, min(4, os.cpu_count() or 1))
# The one threshold: from this many stored bytes (of one plan, or of one event-loop turn's
# plans: h5lens.engine.offload) decoding is shared out between threads; below it a hop to
# another thread (~100 µs) costs more than the decoding.
THREADS_FROM = 256 << 10
# Chunks smaller than this (decoded) are decoded on one thread however many there are: each
# decompression is too short for the GIL hand-off between threads to pay (400 B chunks on
# two threads: 6.6 µs each against 4.2 on one).
_THREADS_CHUNK = 2048
# Decoded bytes of small chunks taken at a time: joined and unshuffled in the CPU's cache.
_BATCH = 1 << 20
# A plan's chunks are shared out in this many parts per thread, so that a thread that ends
# its own work early (a loader's preload decodes `indices` and `data` at once, unequal in
# bytes) takes parts another plan has not reached yet: 10% more cells/s than one part per
# thread, on two cores.
_PARTS_PER_THREAD = 4
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0


def decodes_here(nbytes: int) -> bool:
    """Whether ``nbytes`` of stored chunks are too few for a hop to another thread to pay."""
    return nbytes < THREADS_FROM


def pool() -> ThreadPoolExecutor:
    """The engine's decode threads (one pool for every plan and every event-loop turn)."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():  # a forked worker does not own its parent's threads
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="h5lens-decode")
        _pool_pid = os.getpid()
    return _pool


def in_parallel(work: Callable[[range], T], parts: Sequence[range]) -> list[T]:
    """``work`` of each part, the first on this thread and the others on the pool; a part no
    thread of the pool has started when this thread gets to it runs here. So a pool thread
    never waits for work queued behind it: plans run inside pool threads (an event-loop
    turn's, :mod:`h5lens.engine.offload`) share their chunks out the same way without deadlock."""
    if len(parts) == 1:
        return [work(parts[0])]
    futures = [pool().submit(work, part) for part in parts[1:]]
    try:
        done: list[Any] = [work(parts[0])]
        started = []  # parts a pool thread took: waited for once this thread has run the rest
        for i, (future, part) in enumerate(zip(futures, parts[1:], strict=True), start=1):
            if future.cancel():
                done.append(work(part))
            else:
                done.append(None)
                started.append((i, future))
        for i, future in started:
            done[i] = future.result()
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return done


def decode(codec: Codec, payloads: Payloads, layout: Layout, nbytes: int, describe: Callable[[int], str]) -> Any:
    """Decode the chunks of ``layout`` found in ``payloads`` into it (absent ones are the fill
    value) and give its result. ``nbytes``: the stored bytes read (the thread policy's measure)."""
    chunks = layout.chunks
    if len(payloads) == len(chunks) and list(payloads) == chunks:  # every chunk, in order (no lookup each)
        rows, flats, datas = list(range(len(chunks))), chunks, list(payloads.values())
    else:
        rows = [row for row, flat in enumerate(chunks) if flat in payloads]
        flats = [chunks[row] for row in rows]
        datas = [payloads[flat] for flat in flats]
    parts = [range(len(rows))]
    if THREADS > 1 and len(rows) > 1 and not decodes_here(nbytes) and codec.chunk_nbytes >= _THREADS_CHUNK:
        step = -(-len(rows) // (THREADS * _PARTS_PER_THREAD))
        parts = [range(lo, min(lo + step, len(rows))) for lo in range(0, len(rows), step)]
    if codec.streams or layout.needs is not None:  # each chunk placed as it comes
        blank = np.full((1, *codec.chunk_shape), codec.fill, dtype=codec.dtype)
        for row in sorted(set(range(len(chunks))) - set(rows)):
            layout.place(row, blank)
        in_parallel(lambda part: _decode_part(codec, layout, rows, flats, datas, part, None, describe), parts)
        return layout.result(payloads)
    values = np.empty((len(rows), *codec.chunk_shape), dtype=codec.stored)  # every chunk, placed at once
    in_parallel(lambda part: _decode_part(codec, layout, rows, flats, datas, part, values, describe), parts)
    if len(rows) < len(chunks):
        every = np.full((len(chunks), *codec.chunk_shape), codec.fill, dtype=codec.dtype)
        every[rows] = values
        values = every
    if chunks:
        layout.place(0, values)
    return layout.result(payloads)


def _decode_part(
    codec: Codec, layout: Layout, rows: list[int], flats: list[int], datas: list[Any], part: range,
    values: np.ndarray | None, describe: Callable[[int], str],
) -> None:  # fmt: skip
    """Chunks ``part`` of ``datas`` decoded a batch at a time (joined and unshuffled while in
    the CPU's cache) into their rows of ``values``; or, where chunks stream (no ``values``), one
    at a time, each into its own place in the output (``layout.target``) or placed as it comes.
    A chunk of which the layout needs only the first bytes is inflated that far where that pays."""
    size, into, head, head_below, needs = codec.decoded_len, codec.into, codec.head, codec.head_below, layout.needs
    batch = max(1, _BATCH // max(1, codec.chunk_nbytes)) if values is not None else 1
    scratch = memoryview(bytearray(min(batch, len(part)) * size)) if into is not None else None
    streamed = values is None and scratch is not None and not codec.unshuffle
    mine = codec.values(scratch, 1) if streamed else None  # type: ignore[union-attr,arg-type]  # numbers: a scratch
    for lo in range(part.start, part.stop, batch):
        hi = min(lo + batch, part.stop)
        out = values[lo:hi] if values is not None else None
        if values is None and (dest := layout.target(rows[lo])) is not None and dest.dtype == codec.stored:
            out = dest.reshape(1, -1)
        if values is None and datas[lo].__class__ is Decoded:  # kept decoded: read where it is
            found = codec.values(datas[lo], 1, out=out)  # type: ignore[union-attr]  # (numbers: text never streams)
        elif into is None:
            raws = _decoded(codec, flats, datas, lo, hi, describe)
            _keep(codec, flats, datas, range(lo, hi), lambda i: raws[i - lo])
            found = codec.values_of(raws, out=out)
        else:
            assert isinstance(codec, ArrayCodec) and scratch is not None  # text writes into no buffer
            there = out is not None and not codec.unshuffle  # decoded in place: the values' own bytes
            buffer = memoryview(out.reshape(-1).view(np.uint8)) if out is not None and there else scratch
            need = size if needs is None else needs[flats[lo]] * codec.stored.itemsize
            i = lo
            try:
                for i in range(lo, hi):
                    data, slot = datas[i], buffer[(i - lo) * size : (i - lo + 1) * size]
                    if data.__class__ is Decoded:
                        slot[:] = data
                    elif need < head_below:
                        try:
                            head(data, slot[:need])  # type: ignore[misc]  # head_below > 0: head is set
                        except Exception:  # noqa: BLE001 - the whole stream decides
                            into(data, slot)
                    else:
                        into(data, slot)
            except Exception as e:  # noqa: BLE001 - any decoder's failure, named with its chunk
                raise _named(flats[i], e, describe) from e
            if codec.cache is not None and need >= head_below:
                _keep(codec, flats, datas, range(lo, hi), lambda i: buffer[(i - lo) * size : (i - lo + 1) * size])
            found = (out if there else mine if mine is not None else codec.values(buffer, hi - lo, out=out))
        if values is None and out is None:
            layout.place(rows[lo], found)


def _decoded(codec: Codec, flats: list[int], datas: list[Any], lo: int, hi: int, describe: Callable[[int], str]) -> list[Any]:
    """Chunks ``lo:hi`` of ``datas`` decoded to bytes (strings, for text), each checked whole;
    those the store kept decoded as they are."""
    mine = datas[lo:hi]
    kept = [i for i, data in enumerate(mine) if data.__class__ is Decoded] if codec.cache is not None else []
    try:
        raws = codec.decode_many([data for data in mine if data.__class__ is not Decoded] if kept else mine)
    except Exception:  # noqa: BLE001 - found again one by one, to name the chunk
        for i in range(lo, hi):
            try:
                if datas[i].__class__ is not Decoded:
                    codec.decode(datas[i])
            except Exception as e:  # noqa: BLE001 - any decoder's failure, named with its chunk
                raise _named(flats[i], e, describe) from e
        raise
    for i in kept:
        raws.insert(i, mine[i])
    size = codec.decoded_len
    if set(map(len, raws)) - {size}:
        i = next(i for i, raw in enumerate(raws) if len(raw) != size)
        unit = "strings" if isinstance(codec, TextCodec) else "bytes"
        raise _named(flats[lo + i], ValueError(f"decoded to {len(raws[i])} {unit}; a chunk holds {size}"), describe)
    return raws


def _keep(codec: Codec, flats: list[int], datas: list[Any], done: range, decoded: Callable[[int], Any]) -> None:
    """Chunks ``done`` just decoded put in the store's cache of them, if it keeps them."""
    if codec.cache is not None:
        for i in done:
            if datas[i].__class__ is not Decoded:
                codec.cache.put(codec.path, flats[i], decoded(i))


def _named(flat: int, error: Exception, describe: Callable[[int], str]) -> SourceReadError:
    """The error for chunk ``flat`` that does not decode, naming it."""
    return SourceReadError(f"{describe(flat)} does not decode ({type(error).__name__}: {error})")


__all__ = ["THREADS", "THREADS_FROM", "decode", "decodes_here", "in_parallel", "pool"]
