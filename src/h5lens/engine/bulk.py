"""Many chunks of one array at once: fetched together, decoded in bulk, written in place.

zarr's codec pipelines decode chunk by chunk, with a coroutine (or a thread hop) per chunk:
a few hundred microseconds each, which dominates reads of arrays stored in tens of
thousands of small chunks (libhdf5 pays tens of microseconds). Here a whole selection of
one array is planned from the manifest's chunk table: every chunk's bytes are asked for at
once (:meth:`h5lens.fetch.sources.SourceReads.read_many`: neighbouring ranges merged,
remote spans fetched in parallel), then decoded with the filter table's plain functions
(:mod:`h5lens.codecs.table`) and copied into the output array, on a few threads (zlib and
the other decompressors release the GIL).

Arrays whose codecs or data type this does not cover get no :class:`ArrayCodec` (None),
and their callers read them through zarr's own pipeline: what is decoded here is decoded
exactly as zarr would decode it, or not at all.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from h5lens import convention
from h5lens.codecs.table import Decoder, IntoDecoder, decoder
from h5lens.errors import SourceReadError
from h5lens.manifest.documents import ArrayDocument
from h5lens.engine.decoded_cache import Decoded, DecodedChunks
from h5lens.engine.text import TextCodec

# Runs of at least this many values on average are copied run by run (gather_runs)
_SLICED_RUN = 64
# Below this many chunks a selection is decoded on the calling thread: a pool's hand-off
# costs more than it saves.
_PARALLEL_FROM = 64
# Chunks smaller than this are decoded on the calling thread however many there are: each
# decompression is too short for the GIL hand-off between threads to pay (400 B chunks on
# two threads: 6.6 µs each against 4.2 on one).
_PARALLEL_CHUNK = 2048
# Chunks at least this big are decoded and placed one at a time, on every thread (each
# decompression releases the GIL for long enough to run in parallel): joining them first
# would cost a copy of everything for nothing.
_BIG_CHUNK = 64 << 10
_THREADS = max(1, min(4, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():  # a forked worker does not own its parent's threads
        _pool = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="h5lens-decode")
        _pool_pid = os.getpid()
    return _pool


@dataclass(frozen=True)
class ArrayCodec:
    """How one array's chunks decode: stored bytes → bytes→bytes decoders (last codec first)
    → values of ``stored`` dtype (the bytes codec's byte order) → ``dtype``.

    ``unshuffle``: when the last decoding step is a byte shuffle of whole elements (HDF5's
    usual shuffle-then-deflate), its element size: that step is left out of ``decoders``
    and done for many chunks at once (one numpy transpose instead of one per chunk)."""

    path: str
    dtype: np.dtype
    stored: np.dtype
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    decoders: tuple[Decoder, ...]
    fill: Any
    unshuffle: int = 0
    # the store's decoded chunks (h5lens.engine.decoded_cache), when it keeps them
    cache: DecodedChunks | None = field(default=None, compare=False)

    @cached_property
    def chunk_items(self) -> int:
        return math.prod(self.chunk_shape)

    @cached_property
    def chunk_nbytes(self) -> int:
        return self.chunk_items * self.stored.itemsize

    def decode_bytes(self, data: bytes | memoryview) -> bytes | memoryview:
        """One chunk's bytes through ``decoders`` (not the bulk unshuffle); a chunk the
        store kept decoded as it is."""
        if isinstance(data, Decoded):
            return data
        for step in self.decoders:
            data = step(data, self.chunk_nbytes)  # type: ignore[arg-type]  # the decoders take any buffer
        return data

    def chunk_values(self, raw: bytes | memoryview) -> np.ndarray:
        """One chunk's bytes out of ``decode_bytes`` → its values, ``chunk_shape``."""
        if len(raw) != self.chunk_nbytes:
            raise ValueError(f"decoded to {len(raw)} bytes; a chunk holds {self.chunk_nbytes}")
        if self.unshuffle:
            planes = np.frombuffer(raw, dtype=np.uint8).reshape(1, self.unshuffle, -1)
            return _unshuffle(planes, self.stored).reshape(self.chunk_shape)
        return np.frombuffer(raw, dtype=self.stored).reshape(self.chunk_shape)

    def values(self, raws: Sequence[bytes | memoryview]) -> np.ndarray:
        """Chunks' bytes out of ``decode_bytes`` → their values, ``(n, *chunk_shape)``.

        Writable (a bytearray underneath), as h5py's are: callers modify what they read.
        And never a view of a buffer of more elements (bytes seen as uint8), which scipy's
        sparse constructors would copy again."""
        joined = bytearray().join(raws)
        if len(joined) != len(raws) * self.chunk_nbytes:
            raise ValueError("a chunk did not decode to a whole chunk")
        return self.joined_values(joined)

    def joined_values(self, joined: bytearray) -> np.ndarray:
        """Whole chunks' decoded bytes, one after the other → their values, ``(n, *chunk_shape)``."""
        n = len(joined) // self.chunk_nbytes
        if self.unshuffle:
            planes = np.frombuffer(joined, dtype=np.uint8).reshape(n, self.unshuffle, -1)
            return _unshuffle(planes, self.stored).reshape(n, *self.chunk_shape)
        return np.frombuffer(joined, dtype=self.stored).reshape(n, *self.chunk_shape)


def _unshuffle(planes: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Bytes ``(chunks, k, items)`` (byte plane ``i`` of every element, in turn) -> values
    ``(chunks, items)`` of ``dtype`` (``k`` bytes each): one strided copy per plane, 3-5x
    faster than a transposed copy of it all."""
    out = np.empty((planes.shape[0], planes.shape[2]), dtype=dtype)
    as_bytes = out.view(np.uint8).reshape(planes.shape[0], planes.shape[2], planes.shape[1])
    for plane in range(planes.shape[1]):
        as_bytes[:, :, plane] = planes[:, plane, :]
    return out


def array_codec(path: str, doc: dict[str, Any]) -> ArrayCodec | None:
    """The :class:`ArrayCodec` of the array whose ``zarr.json`` is ``doc``; None if its data
    type is not plain numbers, or one of its codecs is not in the filter table."""
    view = ArrayDocument.of(doc)
    if view is None or view.attributes.get(convention.SCALAR):
        return None
    if not isinstance(view.data_type, str):
        return None
    try:
        dtype = np.dtype(view.data_type)
    except TypeError:
        return None
    if dtype.kind not in "biufc" or not view.shape:  # 0-d arrays: one chunk, nothing to gain
        return None
    codecs = view.codecs
    if not codecs or codecs[0].get("name") != "bytes":
        return None  # array→array codecs, or another array→bytes codec: zarr's own pipeline
    endian = (codecs[0].get("configuration") or {}).get("endian")
    stored = dtype.newbyteorder(">" if endian == "big" else "<") if dtype.itemsize > 1 else dtype
    bytes_codecs = codecs[1:]
    unshuffle = 0
    if bytes_codecs and bytes_codecs[0].get("name") in _SHUFFLES:
        size = (bytes_codecs[0].get("configuration") or {}).get("elementsize", dtype.itemsize)
        if isinstance(size, int) and size == dtype.itemsize and size > 1:
            unshuffle, bytes_codecs = size, bytes_codecs[1:]  # undone in bulk: ArrayCodec.values
    decoders: list[Decoder] = []
    for codec in bytes_codecs:
        found = decoder(codec, dtype.itemsize)
        if found is None:
            return None
        decoders.append(found)
    return ArrayCodec(
        path=path,
        dtype=dtype,
        stored=stored,
        shape=view.shape,
        chunk_shape=view.chunk_shape,
        decoders=tuple(decoders[::-1]),
        fill=_fill(view.fill_value, dtype),
        unshuffle=unshuffle,
    )


# Byte shuffles of whole elements: numcodecs' and HDF5's (on a whole chunk they agree).
_SHUFFLES = ("numcodecs.shuffle", "h5lens.shuffle")


def _fill(fill_value: Any, dtype: np.dtype) -> Any:
    try:
        return _fill_of(json.dumps(fill_value, allow_nan=True), dtype)
    except TypeError:  # not JSON (a document built in memory): converted as it is
        from zarr.core.dtype import get_data_type_from_native_dtype

        return get_data_type_from_native_dtype(dtype).from_json_scalar(fill_value, zarr_format=3)


@functools.lru_cache(maxsize=1024)  # zarr's dtype registry takes ~90 µs a lookup: once per (fill, dtype)
def _fill_of(fill_json: str, dtype: np.dtype) -> Any:
    from zarr.core.dtype import get_data_type_from_native_dtype

    return get_data_type_from_native_dtype(dtype).from_json_scalar(json.loads(fill_json), zarr_format=3)


@dataclass(frozen=True)
class Selection:
    """Which part of each chunk goes where in the output, as zarr's indexers say it."""

    chunk: Sequence[Any]  # per chunk: the selection within the chunk
    out: Sequence[Any]  # per chunk: where it goes in the output
    drop_axes: tuple[int, ...] = ()
    complete: Sequence[bool] | None = None  # per chunk: the whole chunk is selected


def scatter(
    codec: ArrayCodec,
    flats: np.ndarray,
    payloads: dict[int, bytes | memoryview],
    selection: Selection,
    out: np.ndarray,
    describe: Callable[[int], str],
) -> list[bool]:
    """Decode each chunk of ``flats`` and write its selected part into ``out``; a missing
    chunk's part gets the fill value. Returns, per chunk, whether it was present. A chunk
    that does not decode raises SourceReadError naming it (``describe(flat)``)."""
    flat_list = flats.tolist()
    present = [flat in payloads for flat in flat_list]
    if codec.chunk_nbytes >= _BIG_CHUNK:
        _place_each(codec, flat_list, payloads, selection, out, describe)
        return present
    # A chunk zarr lists more than once (selections that each take part of it: annbatch's
    # blocks of neighbouring rows, one indexer for a whole preload) is decoded once.
    unique = list(dict.fromkeys(flat for flat, p in zip(flat_list, present, strict=True) if p))
    row_of = {flat: row for row, flat in enumerate(unique)}
    values = _decoded(codec, unique, payloads, describe) if unique else None
    if values is not None and len(unique) == len(flat_list) and _contiguous_1d(codec, flats, selection):
        first, last = selection.chunk[0][0], selection.chunk[-1][0]
        begin = first.start
        stop = (len(flat_list) - 1) * codec.chunk_shape[0] + last.stop
        out[selection.out[0][0].start : selection.out[-1][0].stop] = values.reshape(-1)[begin:stop]
        return present
    for i, flat in enumerate(flat_list):
        where = selection.out[i]
        if not present[i]:
            out[where] = codec.fill
            continue
        assert values is not None
        part = values[row_of[flat]][selection.chunk[i]]
        if selection.drop_axes:
            part = part.squeeze(axis=selection.drop_axes)
        out[where] = part
    return present


def _place_each(
    codec: ArrayCodec,
    flats: list[int],
    payloads: dict[int, bytes | memoryview],
    selection: Selection,
    out: np.ndarray,
    describe: Callable[[int], str],
) -> None:
    """Big chunks: each decoded and written into ``out`` by itself, the chunks shared out
    between the threads (their output regions do not overlap)."""

    def work(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            flat = flats[i]
            where = selection.out[i]
            data = payloads.get(flat)
            if data is None:
                out[where] = codec.fill
                continue
            try:
                values = codec.chunk_values(codec.decode_bytes(data))
            except Exception as e:
                raise SourceReadError(f"{describe(flat)} does not decode ({type(e).__name__}: {e})") from e
            part = values[selection.chunk[i]]
            if selection.drop_axes:
                part = part.squeeze(axis=selection.drop_axes)
            out[where] = part

    n = len(flats)
    if n == 1 or _THREADS == 1:
        work(0, n)
        return
    step = -(-n // _THREADS)
    for future in [_executor().submit(work, lo, min(lo + step, n)) for lo in range(0, n, step)]:
        future.result()


def _decode_all(
    codec: ArrayCodec, datas: list[bytes | memoryview], flats: list[int], describe: Callable[[int], str]
) -> list[bytes | memoryview]:
    """Every chunk through the per-chunk decoders, on a few threads when there are many
    (the decompressors release the GIL)."""
    if not codec.decoders:
        return datas

    cache = codec.cache

    def work(lo: int, hi: int) -> list[bytes | memoryview]:
        done = []
        for i in range(lo, hi):
            try:
                decoded = codec.decode_bytes(datas[i])
            except Exception as e:  # noqa: BLE001 - any decoder's failure, named with its chunk
                raise SourceReadError(f"{describe(flats[i])} does not decode ({type(e).__name__}: {e})") from e
            if cache is not None and not isinstance(datas[i], Decoded) and len(decoded) == codec.chunk_nbytes:
                cache.put(codec.path, flats[i], decoded)
            done.append(decoded)
        return done

    n = len(datas)
    if n < _PARALLEL_FROM or _THREADS == 1 or codec.chunk_nbytes < _PARALLEL_CHUNK:
        return work(0, n)
    step = -(-n // _THREADS)
    futures = [_executor().submit(work, lo, min(lo + step, n)) for lo in range(0, n, step)]
    return [raw for future in futures for raw in future.result()]


def _decode_into(
    codec: ArrayCodec, datas: list[bytes | memoryview], flats: list[int], describe: Callable[[int], str]
) -> bytearray:
    """Every chunk decoded straight into its place in one buffer (the last decoder writes
    there: :class:`~h5lens.codecs.table.IntoDecoder`), on a few threads when there are many."""
    size = codec.chunk_nbytes
    joined = bytearray(len(datas) * size)
    view = memoryview(joined)
    last = codec.decoders[-1]
    assert isinstance(last, IntoDecoder)
    before = codec.decoders[:-1]

    cache = codec.cache

    def work(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            into = view[i * size : (i + 1) * size]
            data = datas[i]
            if isinstance(data, Decoded):  # kept decoded by the store
                into[:] = data
                continue
            try:
                for step in before:
                    data = step(data, size)  # type: ignore[arg-type]  # the decoders take any buffer
                last.into(data, into)
            except Exception as e:  # noqa: BLE001 - any decoder's failure, named with its chunk
                raise SourceReadError(f"{describe(flats[i])} does not decode ({type(e).__name__}: {e})") from e
            if cache is not None:
                cache.put(codec.path, flats[i], into)

    n = len(datas)
    if n < _PARALLEL_FROM or _THREADS == 1 or size < _PARALLEL_CHUNK:
        work(0, n)
    else:
        step = -(-n // _THREADS)
        for future in [_executor().submit(work, lo, min(lo + step, n)) for lo in range(0, n, step)]:
            future.result()
    return joined


def _decoded(
    codec: ArrayCodec | TextCodec, flats: list[int], payloads: dict[int, bytes | memoryview], describe: Callable[[int], str]
) -> np.ndarray:
    """The values of chunks ``flats`` (all in ``payloads``), ``(n, *chunk_shape)``; a chunk
    that does not decode to a whole chunk raises SourceReadError naming it."""
    if isinstance(codec, TextCodec):
        return codec.values(flats, payloads, describe)
    if codec.decoders and isinstance(codec.decoders[-1], IntoDecoder):
        return codec.joined_values(_decode_into(codec, [payloads[flat] for flat in flats], flats, describe))
    raws = _decode_all(codec, [payloads[flat] for flat in flats], flats, describe)
    for flat, raw in zip(flats, raws, strict=True):
        if len(raw) != codec.chunk_nbytes:
            raise SourceReadError(
                f"{describe(flat)} does not decode (to {len(raw)} bytes; a chunk holds {codec.chunk_nbytes})"
            )
    return codec.values(raws)


def _contiguous_1d(codec: ArrayCodec, flats: np.ndarray, selection: Selection) -> bool:
    """A 1-d run of consecutive chunks, each whole but maybe the first and the last, into
    a contiguous stretch of the output: one copy does it all."""
    if len(codec.chunk_shape) != 1 or selection.drop_axes or selection.complete is None or len(flats) < 2:
        return False
    if int(flats[-1]) - int(flats[0]) != len(flats) - 1 or np.any(np.diff(flats) != 1):
        return False
    complete = selection.complete
    if not all(complete[1:-1]):
        return False
    ends = (selection.chunk[0], selection.chunk[-1], selection.out[0], selection.out[-1])
    if not all(isinstance(e, tuple) and len(e) == 1 and isinstance(e[0], slice) and e[0].step in (None, 1) for e in ends):
        return False
    first, last = selection.chunk[0][0], selection.chunk[-1][0]
    return bool(first.stop == codec.chunk_shape[0] and last.start == 0)


def region_chunks(codec: ArrayCodec | TextCodec, grid: tuple[int, ...], bounds: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The chunks a region (``[start, stop)`` per axis, non-empty, within the shape) covers:
    their first grid position per axis and their flat indices, in C order."""
    chunk = np.asarray(codec.chunk_shape, dtype=np.int64)
    lo = np.asarray([b[0] for b in bounds], dtype=np.int64) // chunk
    hi = (np.asarray([b[1] for b in bounds], dtype=np.int64) - 1) // chunk + 1
    positions = np.indices(tuple((hi - lo).tolist())).reshape(len(bounds), -1) + lo[:, None]
    return lo, np.ravel_multi_index(tuple(positions), grid).astype(np.int64)


def assemble(
    codec: ArrayCodec | TextCodec,
    bounds: Sequence[tuple[int, int]],
    lo: np.ndarray,
    flats: np.ndarray,
    payloads: dict[int, bytes | memoryview],
    describe: Callable[[int], str],
) -> np.ndarray:
    """The values of a region from its chunks' stored bytes (missing chunks: the fill
    value): decoded together, laid side by side with one transpose, then cropped. No
    Python work per chunk beyond its decompression."""
    nd = len(bounds)
    counts = tuple(int(n) for n in (((np.asarray([b[1] for b in bounds]) - 1) // np.asarray(codec.chunk_shape)) + 1 - lo))
    flat_list = flats.tolist()
    if isinstance(codec, ArrayCodec) and codec.chunk_nbytes >= _BIG_CHUNK:  # each chunk straight into its place
        result = np.empty(tuple(stop - start for start, stop in bounds), dtype=codec.dtype)
        positions = np.asarray(np.unravel_index(np.arange(len(flat_list)), counts)).T + lo
        chunk_sel, out_sel = [], []
        for position in positions.tolist():
            within, into = [], []
            for axis, (g, c) in enumerate(zip(position, codec.chunk_shape, strict=True)):
                begin, end = max(bounds[axis][0], g * c), min(bounds[axis][1], (g + 1) * c)
                within.append(slice(begin - g * c, end - g * c))
                into.append(slice(begin - bounds[axis][0], end - bounds[axis][0]))
            chunk_sel.append(tuple(within))
            out_sel.append(tuple(into))
        _place_each(codec, flat_list, payloads, Selection(chunk_sel, out_sel), result, describe)
        return result
    held = [i for i, flat in enumerate(flat_list) if flat in payloads]
    if held:
        values = _decoded(codec, [flat_list[i] for i in held], payloads, describe)
    if held and len(held) == len(flat_list):  # every chunk there: the decoded values are the block
        block = values.astype(codec.dtype, copy=False)
    else:
        block = np.full((len(flat_list), *codec.chunk_shape), codec.fill, dtype=codec.dtype)
        if held:
            block[held] = values
    # (g0, g1, ..., c0, c1, ...) -> (g0, c0, g1, c1, ...) -> one array covering the chunks
    laid = block.reshape(*counts, *codec.chunk_shape).transpose(*(k for axis in range(nd) for k in (axis, nd + axis)))
    whole = laid.reshape(*(n * c for n, c in zip(counts, codec.chunk_shape, strict=True)))
    origin = lo * np.asarray(codec.chunk_shape)
    return whole[tuple(slice(b[0] - int(o), b[1] - int(o)) for b, o in zip(bounds, origin.tolist(), strict=True))]


__all__ = ["ArrayCodec", "Selection", "array_codec", "assemble", "region_chunks", "scatter"]


def run_chunks(chunk: int, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The sorted flat indices of the chunks (``chunk`` items each) that runs
    ``[starts[i], stops[i])`` of a 1-d array touch (empty runs touch none)."""
    keep = stops > starts
    first, last = starts[keep] // chunk, (stops[keep] - 1) // chunk
    if not first.size:
        return np.empty(0, dtype=np.int64)
    counts = last - first + 1
    steps = np.ones(int(counts.sum()), dtype=np.int64)
    heads = np.r_[0, np.cumsum(counts)[:-1]]
    steps[heads] = first - np.r_[0, last[:-1]]  # each run starts over at its first chunk
    steps[0] = first[0]
    return np.unique(np.cumsum(steps))


def _run_pieces(chunk: int, starts: np.ndarray, stops: np.ndarray) -> tuple[dict[int, list[tuple[int, int, int]]], dict[int, int]]:
    """Runs ``[starts[i], stops[i])`` of a 1-d array of chunks of ``chunk`` values, one
    after the other, cut where they cross chunks: per chunk, its pieces as (where in the
    runs' values, where in the chunk, how many values), and how far into the chunk they
    reach (the values before that are all a read needs of it). Computed for all runs at once."""
    keep = stops > starts
    starts, stops = starts[keep], stops[keep]
    first, last = starts // chunk, (stops - 1) // chunk
    counts = last - first + 1
    run = np.repeat(np.arange(len(starts)), counts)
    flat = first[run] + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    lo = np.maximum(starts[run], flat * chunk)
    take = np.minimum(stops[run], (flat + 1) * chunk) - lo
    at = np.cumsum(take) - take
    by_chunk = np.argsort(flat, kind="stable")
    flats, begins = np.unique(flat[by_chunk], return_index=True)
    inside = (lo - flat * chunk)[by_chunk]
    rows = list(zip(at[by_chunk].tolist(), inside.tolist(), take[by_chunk].tolist(), strict=True))
    ends = [*begins.tolist()[1:], len(rows)]
    flat_list = flats.tolist()
    reach = np.maximum.reduceat(inside + take[by_chunk], begins) if len(begins) else np.empty(0, dtype=np.int64)
    pieces = {f: rows[b:e] for f, b, e in zip(flat_list, begins.tolist(), ends, strict=True)}
    return pieces, dict(zip(flat_list, reach.tolist(), strict=True))


class SlicedRuns:
    """:func:`gather_runs` for long runs (a loader's blocks of rows): the runs cut into
    pieces, one per chunk they cross; then each chunk decoded into a buffer of its thread's
    own, a chunk long (it stays in the CPU's cache), and its pieces copied out of it at
    once. No buffer of every decoded chunk is written and read back (a preload of 256
    blocks decoded 50 MB that way, zeroed and faulted in first), no index per value; the
    chunks kept decoded (``Decoded``) are read where they are. :meth:`decode` runs on any
    thread, for any share of the chunks: each writes only its own pieces of :attr:`out`."""

    def __init__(
        self,
        codec: ArrayCodec,
        starts: np.ndarray,
        stops: np.ndarray,
        describe: Callable[[int], str],
        out: np.ndarray,
    ) -> None:
        self.codec = codec
        self.describe = describe
        self.out = out
        self.pieces, self.reach = _run_pieces(codec.chunk_shape[0], starts, stops)
        last = codec.decoders[-1] if codec.decoders else None
        self._into = last if isinstance(last, IntoDecoder) else None
        self._before = codec.decoders[:-1]

    def decode(self, chunks: Sequence[tuple[int, bytes | memoryview]]) -> None:
        """Decode these chunks (flat index, stored bytes) and place their pieces."""
        codec, out, pieces, into, before = self.codec, self.out, self.pieces, self._into, self._before
        cache = codec.cache
        size = codec.chunk_nbytes
        scratch = bytearray(size)
        view = memoryview(scratch)
        if into is not None and not before and not codec.unshuffle and cache is None:
            # the usual case (one deflate, say), with the least Python per chunk: while a
            # thread holds the GIL here the other decode thread cannot take it back. A
            # chunk whose pieces end early is inflated only that far where that pays (a
            # stream read whole again if the short way fails: its error is the one to give).
            values = np.frombuffer(scratch, dtype=codec.stored)  # every chunk lands here
            inflate, head, reach = into.into, into.head, self.reach
            itemsize = codec.stored.itemsize
            short = int(into.head_pays_below * codec.chunk_items)
            for flat, data in chunks:
                try:
                    needed = reach[flat]
                    if needed < short:
                        try:
                            head(data, view[: needed * itemsize])  # type: ignore[misc]  # short > 0: head is set
                        except Exception:  # noqa: BLE001 - the whole stream decides
                            inflate(data, view)
                    else:
                        inflate(data, view)
                except Exception as e:  # noqa: BLE001 - any decoder's failure, named with its chunk
                    raise SourceReadError(f"{self.describe(flat)} does not decode ({type(e).__name__}: {e})") from e
                for at, offset, take in pieces[flat]:
                    out[at : at + take] = values[offset : offset + take]
            return
        for flat, data in chunks:
            try:
                if into is not None:
                    for step in before:
                        data = step(data, size)  # type: ignore[arg-type]  # the decoders take any buffer
                    into.into(data, view)
                    raw: bytes | memoryview = view
                else:
                    raw = codec.decode_bytes(data)
                values = codec.chunk_values(raw)
            except Exception as e:  # noqa: BLE001 - any decoder's failure, named with its chunk
                raise SourceReadError(f"{self.describe(flat)} does not decode ({type(e).__name__}: {e})") from e
            if cache is not None:
                cache.put(codec.path, flat, raw)  # copied: the buffer is the next chunk's
            for at, offset, take in pieces[flat]:
                out[at : at + take] = values[offset : offset + take]

    def copy_kept(self, kept: dict[int, Decoded]) -> None:
        """Place the pieces of chunks kept decoded."""
        for flat, decoded in kept.items():
            values = self.codec.chunk_values(decoded)
            for at, offset, take in self.pieces[flat]:
                self.out[at : at + take] = values[offset : offset + take]

    def fill_absent(self, present: Callable[[int], bool]) -> None:
        """The fill value where the runs cross chunks that are not stored."""
        for flat, chunk_pieces in self.pieces.items():
            if not present(flat):
                for at, _, take in chunk_pieces:
                    self.out[at : at + take] = self.codec.fill

    def shares(self, chunks: list[tuple[int, bytes | memoryview]]) -> list[list[tuple[int, bytes | memoryview]]]:
        """``chunks`` cut into one share per decode thread if they are many and big enough
        for threads to pay, else whole."""
        if len(chunks) < _PARALLEL_FROM or _THREADS == 1 or self.codec.chunk_nbytes < _PARALLEL_CHUNK:
            return [chunks]
        step = -(-len(chunks) // _THREADS)
        return [chunks[lo : lo + step] for lo in range(0, len(chunks), step)]


def _gather_sliced(sliced: SlicedRuns, payloads: dict[int, bytes | memoryview]) -> np.ndarray:
    """All chunks' bytes at hand: decoded on a few threads; those kept decoded copied on this
    thread meanwhile (shared out too, copies only, a later epoch was 13% slower)."""
    sliced.fill_absent(payloads.__contains__)
    order = [(flat, payloads[flat]) for flat in sliced.pieces if flat in payloads and not isinstance(payloads[flat], Decoded)]
    kept = {flat: p for flat in sliced.pieces if isinstance(p := payloads.get(flat), Decoded)}
    shares = sliced.shares(order)
    if len(shares) == 1:
        sliced.decode(order)
        sliced.copy_kept(kept)
    else:
        futures = [_executor().submit(sliced.decode, share) for share in shares]
        sliced.copy_kept(kept)
        for future in futures:
            future.result()
    return sliced.out


def runs_out(codec: ArrayCodec, starts: np.ndarray, stops: np.ndarray, out: np.ndarray | None) -> np.ndarray | None:
    """``out`` if the values of runs ``[starts[i], stops[i])`` can be written straight into
    it (the caller's buffer: a loader's preload; one copy less), else None."""
    if out is None or out.dtype != codec.dtype or out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable:
        return None
    return out if out.size == int(np.maximum(stops - starts, 0).sum()) else None


def gather_runs(
    codec: ArrayCodec,
    starts: np.ndarray,
    stops: np.ndarray,
    flats: np.ndarray,
    payloads: dict[int, bytes | memoryview],
    describe: Callable[[int], str],
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The values of runs ``[starts[i], stops[i])`` of a 1-d array, one after the other,
    from the stored bytes of its chunks ``flats`` (:func:`run_chunks`; missing ones: the
    fill value): the chunks decoded together, then one gather. Written into ``out`` if given
    (:func:`runs_out`: as many values, of the array's dtype)."""
    chunk = codec.chunk_shape[0]
    lengths = np.maximum(stops - starts, 0)
    total = int(lengths.sum())
    if not total:
        return np.empty(0, dtype=codec.dtype) if out is None else out
    if total >= _SLICED_RUN * np.count_nonzero(lengths):
        target = np.empty(total, dtype=codec.dtype) if out is None else out
        return _gather_sliced(SlicedRuns(codec, starts, stops, describe, target), payloads)
    if out is not None:
        out[...] = gather_runs(codec, starts, stops, flats, payloads, describe)
        return out
    flat_list = flats.tolist()
    held = [i for i, flat in enumerate(flat_list) if flat in payloads]
    block = np.empty((len(flat_list), chunk), dtype=codec.dtype)
    if len(held) < len(flat_list):
        block[...] = codec.fill
    if held:
        block[held] = _decoded(codec, [flat_list[i] for i in held], payloads, describe)
    values = block.reshape(-1)
    keep = lengths > 0
    starts, stops, lengths = starts[keep], stops[keep], lengths[keep]
    if len(flats) == int(flats[-1]) - int(flats[0]) + 1:  # the chunks are one stretch of the array
        origin = int(flats[0]) * chunk
        if np.array_equal(starts[1:], stops[:-1]):  # and so are the runs (a CSC's columns, say)
            return values[int(starts[0]) - origin : int(stops[-1]) - origin]
        before = np.r_[0, np.cumsum(lengths)[:-1]]
        return values[np.arange(total, dtype=np.int64) + np.repeat(starts - before - origin, lengths)]
    # every wanted position, run after run, without a Python loop over runs
    before = np.r_[0, np.cumsum(lengths)[:-1]]
    positions = np.arange(total, dtype=np.int64) + np.repeat(starts - before, lengths)
    slots = np.searchsorted(flats, positions // chunk)
    return values[slots * chunk + positions % chunk]

