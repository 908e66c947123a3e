"""A dense array seen in chunks of whole rows, over the same stored bytes: for annbatch.

annbatch 0.3.1's ``Loader`` reads a dense ``zarr.Array`` through its ``MultiBasicIndexer``
(one indexer for a preload's blocks of rows), which places each chunk by its rows only: an
array whose chunks also cut the columns (h5py's guessed chunks, which anndata's
``write_h5ad`` takes for a dense ``X``: 44 × 96 for scanpy's pbmc68k) has its column chunks
written over each other, past the end of the output, over any zarr store.

:func:`whole_rows` gives the array a chunk grid of whole rows without copying it: zarr v3's
``sharding_indexed`` codec, whose shards are bands of rows and whose inner chunks are the
stored chunks. A small read-only store (:class:`WholeRowsStore`) serves the view's
``zarr.json`` and each shard as a virtual object: the stored chunks of one band of rows one
after the other, then the shard index (offset and length of each, from the manifest's chunk
table; an absent chunk is the sharding spec's empty entry; no ``crc32c`` index codec, which
zarr does not require and which would only check what is computed here). Its byte ranges are
the underlying store's chunks, read through it (merged requests, the manifest's checks).

zarr 3.4 asks a shard for (``zarr/codecs/sharding.py``): the index, as the suffix of the
index's size (``SuffixByteRequest``: computed here, nothing read); the inner chunks it needs,
as one range each through ``Store.get_ranges`` (served here range by range, every chunk of
the call read at once); the whole shard (no range) when every inner chunk is needed. Any
other range is served too, from the same layout.

Under :func:`h5lens.fast_reads` h5lens's codec pipeline reads the view's shards as the stored
chunks they are made of (:func:`stored_parts`, one read plan): no index, no
zarr work per inner chunk.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.store import ByteRequest, Store

from h5lens.errors import InvalidOptionError
from h5lens.manifest.documents import ArrayDocument
from h5lens.manifest.tables import MISSING
from h5lens.manifest.zarr_keys import METADATA, chunk_key, metadata_key
from h5lens.store import byte_bounds

if TYPE_CHECKING:
    import zarr
    from zarr.core.buffer import Buffer, BufferPrototype

    from h5lens.engine.layouts import Selection
    from h5lens.store import ManifestStore

EMPTY = np.uint64(2**64 - 1)  # the sharding spec's offset and length of an absent inner chunk
INDEX_ENTRY = 16  # bytes per inner chunk in a shard index: offset and length, uint64 little-endian
_SHARD_HEAD = "c/"  # the view's chunk keys: the default encoding at the root, "c/<band>/0/..."


def cuts_columns(shape: Sequence[int], chunk_shape: Sequence[int]) -> bool:
    """Whether chunks of ``chunk_shape`` cut an array of ``shape`` along an axis other than
    the first (a chunk holds part of a row)."""
    return any(c < s for s, c in zip(shape[1:], chunk_shape[1:], strict=True))


def refusal(path: str, shape: Sequence[int], chunk_shape: Sequence[int]) -> InvalidOptionError:
    """The one-line refusal of annbatch's indexer over an array whose chunks cut the columns:
    which array, why, what to do."""
    return InvalidOptionError(
        f"/{path}: annbatch's Loader cannot read this array as stored: its chunks {tuple(chunk_shape)} cut the "
        f"columns of its shape {tuple(shape)}, and annbatch's MultiBasicIndexer needs chunks of whole rows; "
        "pass h5lens.whole_rows(array) instead (the same bytes in chunks of whole rows, nothing copied)"
    )


def whole_rows(array: zarr.Array) -> zarr.Array:
    """A read-only view of ``array`` (a dense array of an h5lens store) whose chunks hold whole
    rows: its shards are the stored chunks of one band of rows (``chunks[0]`` rows, every
    column), read in place; nothing is copied or written.

    For annbatch's ``Loader``, which needs chunks of whole rows: ``loader.add_dataset(
    h5lens.whole_rows(group["X"]))``. Plain zarr reads the view (its codec is zarr v3's
    ``sharding_indexed``); under :func:`h5lens.fast_reads` h5lens's pipeline reads it as the
    stored chunks. An array whose chunks already hold whole rows (and any 1-d array) is
    returned as it is. Raises :class:`~h5lens.errors.InvalidOptionError` for an array of
    another store, a 0-d array, or variable-length values."""
    from h5lens.store import ManifestStore

    store = array.store
    if not isinstance(store, ManifestStore):
        raise InvalidOptionError(
            "whole_rows takes an array of an h5lens store (h5lens.open_group); "
            f"this one's store is a {type(store).__name__}"
        )
    path = array.path
    doc = ArrayDocument.of(store.manifest.nodes.get(path, {}))
    if doc is None or path not in store.manifest.chunks:
        raise InvalidOptionError(f"/{path}: not an array with a chunk table in this manifest")
    if not doc.shape:
        raise InvalidOptionError(f"/{path}: a 0-d array has no rows")
    if not cuts_columns(doc.shape, doc.chunk_shape):
        return array
    if array.dtype.kind in "OT":
        raise InvalidOptionError(f"/{path}: values of variable length ({array.dtype}) have no view in whole rows")
    import zarr

    return zarr.open_array(WholeRowsStore(store, path), mode="r", zarr_format=3)


class WholeRowsStore(Store):
    """The read-only store of one view :func:`whole_rows` makes: ``zarr.json`` (the array's
    document with a grid of bands of rows and the sharding codec) and one shard per band of
    rows that holds a stored chunk (a band with none is absent: the fill value)."""

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(self, base: ManifestStore, path: str) -> None:
        super().__init__(read_only=True)
        self.base = base
        self.path = path
        doc = ArrayDocument.of(base.manifest.nodes[path])
        assert doc is not None  # whole_rows checked it
        self.shape = doc.shape
        self.chunk_shape = doc.chunk_shape
        table = base.manifest.chunks[path]
        grid = table.grid_shape
        self.bands = grid[0]
        self.inner_grid = grid[1:]
        per_band = math.prod(self.inner_grid)
        self.lengths = table.length.reshape(self.bands, per_band).astype(np.int64)
        present = table.source.reshape(self.bands, per_band) != MISSING
        # each band's stored chunks one after the other (an absent one takes no bytes), then the index
        self.starts = np.cumsum(self.lengths, axis=1) - self.lengths
        self.data_bytes = self.lengths.sum(axis=1)
        index = np.stack([self.starts.astype(np.uint64), self.lengths.astype(np.uint64)], axis=-1)
        index[~present] = EMPTY
        self.index = index.astype("<u8")
        self.present = present
        self.band_present = present.any(axis=1)
        self.index_bytes = per_band * INDEX_ENTRY
        self.encoding = base.grammar.arrays[path][0]
        self.document = self._document(json.loads(base.metadata[metadata_key(path)]))

    def _document(self, original: dict[str, Any]) -> bytes:
        """The view's ``zarr.json``: the array's, with bands of whole rows as its chunk grid
        and the stored chunks as the shards' inner chunks (their codecs unchanged)."""
        shard = (self.chunk_shape[0], *(g * c for g, c in zip(self.inner_grid, self.chunk_shape[1:], strict=True)))
        view = dict(original)
        view["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": list(shard)}}
        view["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": "/"}}
        view["codecs"] = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(self.chunk_shape),
                    "codecs": original["codecs"],
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "index_location": "end",
                },
            }
        ]
        return json.dumps(view).encode()

    # -- identity and pickling (the base store pickles as a handle) --------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, WholeRowsStore) and other.path == self.path and other.base == self.base

    def __hash__(self) -> int:
        return hash((self.path, hash(self.base)))

    def __repr__(self) -> str:
        return f"WholeRowsStore(/{self.path} of {self.base!r})"

    # -- keys -------------------------------------------------------------------------
    def band(self, key: str) -> int | None:
        """The band of rows a shard key names (``c/<band>/0/...``), whether or not it holds a
        stored chunk; None for any other key."""
        if not key.startswith(_SHARD_HEAD):
            return None
        parts = key[len(_SHARD_HEAD) :].split("/")
        if len(parts) != len(self.shape) or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        band = int(parts[0])
        return band if band < self.bands and all(p == "0" for p in parts[1:]) else None

    def _stored_band(self, key: str) -> int | None:
        """:meth:`band`, for a band that holds a stored chunk (a shard that exists)."""
        band = self.band(key)
        return band if band is not None and self.band_present[band] else None

    def shard_size(self, band: int) -> int:
        return int(self.data_bytes[band]) + self.index_bytes

    # -- reads ------------------------------------------------------------------------
    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        if key == METADATA:
            start, stop = byte_bounds(len(self.document), byte_range)
            return prototype.buffer.from_bytes(self.document[start:stop])
        band = self._stored_band(key)
        if band is None:
            return None
        start, stop = byte_bounds(self.shard_size(band), byte_range)
        payloads = await self._read(self._overlapping([(band, start, stop)]))
        return prototype.buffer.from_bytes(self._serve(band, start, stop, payloads))

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        max_concurrency: int = 10,
        max_gap_bytes: int = 1 << 20,
        max_coalesced_bytes: int = 16 << 20,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        """Each range exactly, every stored chunk they need read at once (the base store
        merges neighbouring ones): nothing to coalesce here."""
        band = self._stored_band(key)
        if band is None:
            raise BaseExceptionGroup("chunk read failed", [FileNotFoundError(key)])
        size = self.shard_size(band)
        bounds = [byte_bounds(size, r) for r in byte_ranges]
        payloads = await self._read(self._overlapping([(band, a, b) for a, b in bounds]))
        yield [(i, prototype.buffer.from_bytes(self._serve(band, a, b, payloads))) for i, (a, b) in enumerate(bounds)]

    def _overlapping(self, ranges: Iterable[tuple[int, int, int]]) -> np.ndarray:
        """Flat indices (into the base array's chunk grid) of the present stored chunks that
        the byte ranges ``(band, start, stop)`` of shards overlap."""
        flats: set[int] = set()
        per_band = self.lengths.shape[1]
        for band, start, stop in ranges:
            ends = self.starts[band] + self.lengths[band]
            hit = self.present[band] & (self.starts[band] < stop) & (ends > start)
            flats.update((band * per_band + np.flatnonzero(hit)).tolist())
        return np.asarray(sorted(flats), dtype=np.int64)

    async def _read(self, flats: np.ndarray) -> dict[int, bytes | memoryview]:
        return await self.base.engine.read_many_async(self.path, flats) if flats.size else {}

    def _serve(self, band: int, start: int, stop: int, payloads: dict[int, bytes | memoryview]) -> bytes | memoryview:
        """Bytes ``[start, stop)`` of a band's shard: parts of its stored chunks, then of its index."""
        per_band = self.lengths.shape[1]
        starts, lengths = self.starts[band], self.lengths[band]
        hit = np.flatnonzero(self.present[band] & (starts < stop) & (starts + lengths > start))
        data_end = int(self.data_bytes[band])
        if hit.size == 1 and stop <= data_end:
            j = int(hit[0])
            lo = int(starts[j])
            if start == lo and stop == lo + int(lengths[j]):
                return bytes(payloads[band * per_band + j])  # one inner chunk, exactly: zarr's usual request
                # (a copy: a local chunk may be a view of the file's map, which zarr's buffer would hold)
        parts: list[bytes | memoryview] = []
        for j in hit.tolist():
            lo = int(starts[j])
            data = memoryview(payloads[band * per_band + j])
            parts.append(data[max(start - lo, 0) : min(stop - lo, len(data))])
        if stop > data_end:
            parts.append(self.index[band].tobytes()[max(start - data_end, 0) : stop - data_end])
        return b"".join(parts)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return key == METADATA or self._stored_band(key) is not None

    async def getsize(self, key: str) -> int:
        if key == METADATA:
            return len(self.document)
        band = self._stored_band(key)
        if band is None:
            raise FileNotFoundError(key)
        return self.shard_size(band)

    # -- listing ------------------------------------------------------------------------
    def _keys(self) -> tuple[str, ...]:
        zeros = "/0" * (len(self.shape) - 1)
        return (METADATA, *(f"{_SHARD_HEAD}{band}{zeros}" for band in np.flatnonzero(self.band_present).tolist()))

    async def list(self) -> AsyncIterator[str]:
        for key in self._keys():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in self._keys():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        base = prefix.rstrip("/") + "/" if prefix.rstrip("/") else ""
        seen: set[str] = set()
        for key in self._keys():
            if key.startswith(base):
                head = key[len(base) :].split("/", 1)[0]
                if head not in seen:
                    seen.add(head)
                    yield head

    # -- writes: refused ----------------------------------------------------------------
    async def set(self, key: str, value: Buffer) -> None:
        raise ValueError(f"{self!r} is a read-only view")

    async def delete(self, key: str) -> None:
        raise ValueError(f"{self!r} is a read-only view")


def stored_parts(
    view: WholeRowsStore, batch: Sequence[tuple[Any, Any, Any, Any, bool]], drop_axes: tuple[int, ...]
) -> tuple[list[str], Selection, list[tuple[int, ...]]] | None:
    """What h5lens's codec pipeline reads for zarr's list of (shard of ``view``, selection
    within it, where in the output): the stored chunks (their keys in the base store), the
    part of each that goes where in the output, and per part which items of the list it
    serves. None where a selection is not slices of step 1 and integers (zarr's sharding
    codec reads those).

    The items of one band of rows that take the same columns (annbatch's neighbouring blocks
    of one preload, each an item) become one part per stored chunk, whose rows are an index
    array: each chunk is decoded once, not once per block, and the columns are cut at the
    stored chunks' edges once per band."""
    from h5lens.engine.layouts import Selection

    if drop_axes:
        return None
    bands: dict[Any, list[tuple[Any, Any, int]]] = {}
    for item, (getter, _spec, chunk_selection, out_selection, _complete) in enumerate(batch):
        band = view.band(getter.path)
        if band is None or len(chunk_selection) != len(view.shape) or not isinstance(out_selection, tuple):
            return None
        rows = chunk_selection[0]
        if isinstance(rows, slice) and rows.step in (None, 1) and out_selection and isinstance(out_selection[0], slice):
            inner = (tuple(chunk_selection[1:]), tuple(out_selection[1:]))
            group: Any = (band, *inner)  # slices hash (Python >= 3.12)
            bands.setdefault(group, []).append((rows, out_selection[0], item))
        else:  # a row by an integer, or another selection of rows: a part of its own
            bands[("item", band, item)] = [(rows, out_selection, item)]
    keys: list[str] = []
    chunk_parts: list[tuple[Any, ...]] = []
    out_parts: list[tuple[Any, ...]] = []
    owners: list[tuple[int, ...]] = []
    for group, members in bands.items():
        if group[0] == "item":
            rows, out_selection, item = members[0]
            band = group[1]
            inner_selection = tuple(batch[item][2][1:])
            is_int = isinstance(rows, int | np.integer)
            row_out, inner_out = (None, out_selection) if is_int else (out_selection[0], out_selection[1:])
        else:
            band, inner_selection, inner_out = group[0], group[1], group[2]
            if len(members) == 1:
                rows, row_out, _ = members[0]
            else:
                rows = np.concatenate([np.arange(r.start, r.stop) for r, _, _ in members])
                row_out = np.concatenate([np.arange(o.start, o.stop) for _, o, _ in members])
        pieces = _inner_pieces(inner_selection, inner_out, view.chunk_shape[1:])
        if pieces is None:
            return None
        items = tuple(item for _, _, item in members)
        for combination in itertools.product(*pieces):
            keys.append(chunk_key(view.path, (band, *(j for j, _, _ in combination)), view.encoding))
            chunk_parts.append((rows, *(sel for _, sel, _ in combination)))
            outs = tuple(out for _, _, out in combination if out is not None)
            out_parts.append(outs if row_out is None else (row_out, *outs))
            owners.append(items)
    return keys, Selection(chunk_parts, out_parts), owners


def _inner_pieces(
    selection: tuple[Any, ...], out_selection: tuple[Any, ...], inner: Sequence[int]
) -> list[list[tuple[int, Any, slice | None]]] | None:
    """Per axis after the first, the pieces a shard's selection falls into: (stored chunk
    along the axis, the selection within it, where it goes in the output, None for an axis
    an integer drops), cut at the stored chunks' edges; None for a selection other than
    slices of step 1 and integers."""
    outs = iter(out_selection)
    found: list[list[tuple[int, Any, slice | None]]] = []
    for sel, size in zip(selection, inner, strict=True):
        if isinstance(sel, int | np.integer) and not isinstance(sel, bool):
            found.append([(int(sel) // size, int(sel) % size, None)])
            continue
        out = next(outs, None)
        if not isinstance(sel, slice) or not isinstance(out, slice) or out.step not in (None, 1):
            return None
        if sel.step not in (None, 1) or sel.start is None or sel.stop is None or out.start is None:
            return None
        shift = out.start - sel.start
        pieces: list[tuple[int, Any, slice | None]] = []
        for j in range(sel.start // size, -(-sel.stop // size)):
            lo, hi = max(sel.start, j * size), min(sel.stop, (j + 1) * size)
            if lo < hi:
                pieces.append((j, slice(lo - j * size, hi - j * size), slice(lo + shift, hi + shift)))
        found.append(pieces)
    if next(outs, None) is not None:
        return None
    return found


__all__ = ["WholeRowsStore", "cuts_columns", "refusal", "stored_parts", "whole_rows"]
