"""The compact manifest form: chunk tables as compressed columns, loaded when first used.

For manifests with millions of chunk references, where JSON costs ~36 bytes per chunk and
seconds to parse. One file (local or object storage, read by byte ranges)::

    MAGIC (16 bytes) | header length (8 bytes, little-endian) | header | tables

The header is zstd-compressed JSON: the writer's ``h5lens`` object (version, convention,
sources), every node's ``zarr.json`` document, and per array with chunks its recorded
count and digest and where its table lies among the tables (small tables are kept in the
header itself). Opening reads the header only; an array's table is fetched and decoded
the first time that array is read.

A table holds the present chunks in C order of the grid, column by column:

* which cells are present: nothing when all are, else a bitmap;
* the source of each chunk: a constant when they share one, else a column (with the
  ``INLINE`` sentinel for inline chunks);
* for referenced chunks, the gap between each one's offset and the previous one's end,
  and each length: chunks of one array sit mostly one after another in the file, so gaps
  are mostly 0 and compress to almost nothing;
* inline chunks' lengths and their concatenated bytes.

Each integer column is narrowed to the smallest integer type holding its range (after
subtracting its minimum), byte-shuffled and zstd-compressed (numcodecs): about one byte
per irregular gzip chunk, next to nothing where offsets are regular. Decoding is
vectorised: no Python object per chunk.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError
from h5lens.manifest.checks import (
    check_node_document,
    check_node_path,
    check_ranges,
    check_vlen_inline,
    grid_shape_of,
)
from h5lens.manifest.documents import check_documents
from h5lens.manifest.limits import DEFAULT_LIMITS, Limits
from h5lens.manifest.tables import (
    INLINE,
    MISSING,
    ChunkTable,
    ChunkTableBuilder,
    ManifestParts,
    Source,
    attribute_types_json,
    parts_of_file,
    unreadable_json,
)
from h5lens.manifest.zarr_keys import KeyEncoding, KeyGrammar

MAGIC = b"H5LENS-COMPACT\x00\x01"
FORMAT = "h5lens-compact"
VERSION = 1
_HEADER_LENGTH = struct.Struct("<Q")
_PREAMBLE = len(MAGIC) + _HEADER_LENGTH.size
# Tables of at most this many stored bytes live in the header: a blob each would cost a
# request each when read remotely.
_IN_HEADER_MAX = 512
_ZSTD_LEVEL = 9
_NARROW = (np.uint8, np.uint16, np.uint32, np.uint64)
_DTYPE_CODES = {np.dtype(d).str: i for i, d in enumerate(_NARROW)}

ReadRange = Callable[[int, int], bytes]  # (offset, length) -> bytes of the manifest file


def is_compact(head: bytes) -> bool:
    return head.startswith(MAGIC)


# -- columns -------------------------------------------------------------------------


def _zstd() -> Any:
    import numcodecs

    return numcodecs.Zstd(level=_ZSTD_LEVEL)


def encode_ints(values: np.ndarray) -> bytes:
    """A column of integers: dtype code (1 byte), base (8 bytes), zstd(shuffle(values - base))."""
    import numcodecs

    values = np.asarray(values, dtype=np.int64)
    base = int(values.min()) if values.size else 0
    span = int(values.max()) - base if values.size else 0
    dtype = next(np.dtype(d) for d in _NARROW if span <= np.iinfo(d).max)
    narrowed = (values - base).astype(dtype.newbyteorder("<"))
    payload = _zstd().encode(numcodecs.Shuffle(dtype.itemsize).encode(narrowed))
    return struct.pack("<Bq", _DTYPE_CODES[dtype.newbyteorder("<").str], base) + payload


def decode_ints(blob: bytes, count: int) -> np.ndarray:
    import numcodecs

    code, base = struct.unpack_from("<Bq", blob)
    if code >= len(_NARROW):
        raise ManifestFormatError(f"compact manifest: unknown column type {code}")
    dtype = np.dtype(_NARROW[code]).newbyteorder("<")
    raw = numcodecs.Shuffle(dtype.itemsize).decode(_zstd().decode(blob[9:]))
    values = np.frombuffer(raw, dtype=dtype)
    if values.size != count:
        raise ManifestFormatError(f"compact manifest: a column holds {values.size} values, expected {count}")
    out = values.astype(np.int64)
    if base:
        out += base  # in place: a million-chunk column is 8 MB, twice is twice that
    return out


def _bytes_column(data: bytes) -> bytes:
    return _zstd().encode(data)


def _unbytes(blob: bytes) -> bytes:
    return bytes(_zstd().decode(blob))


# -- one table ---------------------------------------------------------------------------


def encode_table(table: ChunkTable) -> bytes:
    """A chunk table as columns: a small JSON directory, then the column blobs."""
    source = table.source.reshape(-1)
    present = np.flatnonzero(source != MISSING)
    columns: dict[str, bytes] = {}
    spec: dict[str, Any] = {"n": int(present.size)}
    if present.size != source.size:
        columns["present"] = _bytes_column(np.packbits(source != MISSING).tobytes())
    present_source = source[present]
    distinct = np.unique(present_source)
    if distinct.size == 1:
        spec["source"] = int(distinct[0])
    else:
        columns["source"] = encode_ints(present_source)
    referenced = present[present_source >= 0]
    if referenced.size:
        offset = table.offset.reshape(-1)[referenced].astype(np.int64)
        length = table.length.reshape(-1)[referenced].astype(np.int64)
        previous_end = np.concatenate([[0], (offset + length)[:-1]])
        columns["gap"] = encode_ints(offset - previous_end)
        columns["length"] = encode_ints(length)
    inline_at = present[present_source == INLINE]
    if inline_at.size:
        payloads = [table.inline[i] for i in inline_at.tolist()]
        columns["inline_length"] = encode_ints(np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads)))
        columns["inline"] = _bytes_column(b"".join(payloads))
    directory: dict[str, list[int]] = {}
    body = bytearray()
    for name, blob in columns.items():
        directory[name] = [len(body), len(blob)]
        body += blob
    spec["columns"] = directory
    head = json.dumps(spec, separators=(",", ":")).encode()
    return struct.pack("<I", len(head)) + head + bytes(body)


def decode_table(blob: bytes, grid: tuple[int, ...], where: str) -> ChunkTable:
    """The chunk table of ``blob`` (see :func:`encode_table`) on a grid of shape ``grid``."""
    try:
        (head_length,) = struct.unpack_from("<I", blob)
        spec = json.loads(blob[4 : 4 + head_length])
        body = memoryview(blob)[4 + head_length :]

        def column(name: str) -> bytes | None:
            at = spec["columns"].get(name)
            return None if at is None else bytes(body[at[0] : at[0] + at[1]])

        builder = ChunkTableBuilder(grid)
        cells = builder.source.size
        n = int(spec["n"])
        mask_blob = column("present")
        if mask_blob is None:  # every cell present (the usual case): no index array at all
            if n != cells:
                raise ManifestFormatError(
                    f"{where}: {n} chunks recorded on a grid of {cells} cells, none marked absent"
                )
            present = None
        else:
            bits = np.unpackbits(np.frombuffer(_unbytes(mask_blob), dtype=np.uint8), count=cells)
            present = np.flatnonzero(bits)
            if present.size != n:
                raise ManifestFormatError(f"{where}: the presence bitmap marks {present.size} chunks, {n} recorded")
        everywhere = np.arange(cells, dtype=np.int64) if present is None else present
        source_blob = column("source")
        if source_blob is None:  # one source for every chunk: a scalar, not a column
            shared = int(spec["source"])
            sources: Any = shared
            referenced = everywhere if shared >= 0 else everywhere[:0]
            inline_at = everywhere if shared == INLINE else everywhere[:0]
        else:
            per_chunk = decode_ints(source_blob, n)
            sources = per_chunk[per_chunk >= 0]
            referenced = everywhere[per_chunk >= 0]
            inline_at = everywhere[per_chunk == INLINE]
        if referenced.size:
            # offsets from gaps, in place: gap += length; cumsum -> ends; ends -= length -> offsets
            offsets = decode_ints(column("gap") or b"", referenced.size)
            length = decode_ints(column("length") or b"", referenced.size)
            offsets += length
            np.cumsum(offsets, out=offsets)
            offsets -= length
            if referenced.size == cells:  # every cell a reference: fill the grids, no scatter
                builder.source.reshape(-1)[:] = sources
                builder.offset.reshape(-1)[:] = offsets.view(np.uint64)
                builder.length.reshape(-1)[:] = length.view(np.uint64)
            else:
                builder.refer(referenced, offsets.view(np.uint64), length.view(np.uint64), sources)
            del offsets, length
        if inline_at.size:
            sizes = decode_ints(column("inline_length") or b"", inline_at.size)
            data = _unbytes(column("inline") or b"")
            if int(sizes.sum()) != len(data):
                raise ManifestFormatError(f"{where}: inline bytes do not add up")
            bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
            builder.set_inline(inline_at, [data[bounds[i] : bounds[i + 1]] for i in range(inline_at.size)])
        return builder.build()
    except ManifestFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged table is a format error naming the array
        raise ManifestFormatError(
            f"{where}: the compact chunk table does not decode ({type(e).__name__}: {e})"
        ) from None


# -- the file ------------------------------------------------------------------------------


def encode(manifest: ManifestParts) -> bytes:
    """The compact form of ``manifest``, as bytes."""
    tables = bytearray()
    entries: dict[str, Any] = {}
    for path in sorted(manifest.chunks):
        table = manifest.chunks[path]
        entry: dict[str, Any] = {"chunks": table.n_present, "digest": table.digest()}
        if table.n_present:
            blob = encode_table(table)
            if len(blob) <= _IN_HEADER_MAX:
                entry["table"] = base64.b64encode(blob).decode("ascii")
            else:
                entry["at"] = [len(tables), len(blob)]
                tables += blob
        entries[path] = entry
    header = {
        "format": FORMAT,
        "version": VERSION,
        "h5lens": {
            "version": manifest.writer,
            "convention": manifest.convention,
            "sources": [s.to_dict() for s in manifest.sources],
            **attribute_types_json(manifest),
            **unreadable_json(manifest),
        },
        "nodes": {path: manifest.nodes[path] for path in sorted(manifest.nodes)},
        "arrays": entries,
    }
    packed = _zstd().encode(json.dumps(header, separators=(",", ":"), allow_nan=True).encode())
    return MAGIC + _HEADER_LENGTH.pack(len(packed)) + packed + bytes(tables)


class LazyTables(Mapping[str, ChunkTable]):
    """Chunk tables decoded the first time each is asked for, from byte ranges of the file."""

    def __init__(
        self,
        read_range: ReadRange,
        base: int,
        entries: dict[str, Any],
        grids: dict[str, tuple[int, ...]],
        sources: list[Source],
        encodings: dict[str, KeyEncoding],
        limits: Limits = DEFAULT_LIMITS,
        nodes: Mapping[str, dict[str, Any]] | None = None,
        whole: bytes | None = None,
    ):
        self._read_range = read_range
        # the whole file, where the first read held it all (a small manifest): its tables are
        # decoded from these bytes, not fetched again one request each
        self._whole = whole
        self._nodes = nodes or {}
        self._base = base
        self._entries = entries
        self._grids = grids
        self._sources = sources
        self._encodings = encodings
        self._limits = limits
        self._loaded: dict[str, ChunkTable] = {}

    def __getitem__(self, path: str) -> ChunkTable:
        table = self._loaded.get(path)
        if table is None:
            if path not in self._grids:
                raise KeyError(path)
            table = self._loaded[path] = self._load(path)
        return table

    def _load(self, path: str) -> ChunkTable:
        entry = self._entries.get(path, {})
        where = "/" + path
        if "table" in entry:
            try:
                blob = base64.b64decode(entry["table"], validate=True)
            except ValueError:
                raise ManifestFormatError(f"{where}: the inline chunk table is not base64") from None
        elif "at" in entry:
            offset, length = entry["at"]  # checked when the header was read
            self._limits.check("a chunk table of (bytes)", length, "manifest_bytes", where)
            start = self._base + offset
            blob = self._whole[start : start + length] if self._whole is not None else self._read_range(start, length)
            if len(blob) != length:
                raise ManifestFormatError(f"{where}: the compact manifest is truncated (its table is cut short)")
        else:
            return ChunkTable.empty(self._grids[path])
        table = decode_table(blob, self._grids[path], where)
        if table.n_present != entry.get("chunks", table.n_present):
            raise ManifestFormatError(f"{where}: {table.n_present} chunks decoded, {entry['chunks']} recorded")
        self._limits.check("inline chunk bytes:", table.inline_bytes, "inline_bytes", where)
        check_ranges(path, table, self._sources, self._encodings[path])
        if path in self._nodes:
            check_vlen_inline(path, self._nodes[path], table, self._encodings[path])
        return table

    def __iter__(self) -> Iterator[str]:
        return iter(self._grids)

    def __len__(self) -> int:
        return len(self._grids)

    def __contains__(self, path: object) -> bool:
        return path in self._grids

    @property
    def loaded(self) -> int:
        """How many tables have been decoded so far."""
        return len(self._loaded)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_whole"] = None  # a copy (a dask task's) reads its tables from the file
        return state


def _check_entry(path: str, entry: Any) -> None:
    """One array's entry in the header: where its table is, how many chunks it holds."""
    where = "/" + path
    if not isinstance(entry, dict):
        raise ManifestFormatError(f"{where}: the compact manifest's array entry is not an object")
    at, table, chunks, digest = entry.get("at"), entry.get("table"), entry.get("chunks", 0), entry.get("digest")
    if at is not None and not (
        isinstance(at, list) and len(at) == 2 and all(type(v) is int and 0 <= v < 2**63 for v in at)
    ):
        raise ManifestFormatError(f"{where}: a table position must be [offset, length]. Got {at!r}")
    if table is not None and not isinstance(table, str):
        raise ManifestFormatError(f"{where}: an inline table must be base64 text")
    if not (type(chunks) is int and chunks >= 0) or not (digest is None or isinstance(digest, str)):
        raise ManifestFormatError(f"{where}: expected a chunk count and a digest string. Got {entry!r}")


def decode(
    read_range: ReadRange,
    *,
    location: str | None = None,
    head: bytes = b"",
    limits: Limits = DEFAULT_LIMITS,
    whole: bool = False,
) -> ManifestParts:
    """A manifest's parts from the compact form, reading the header now and tables when used.
    ``head`` are the file's first bytes if already read (the header often lies within);
    ``whole``: they are the whole file, whose tables are then decoded from them."""
    preamble = head if len(head) >= _PREAMBLE else read_range(0, _PREAMBLE)
    if not is_compact(preamble) or len(preamble) < _PREAMBLE:
        raise ManifestFormatError(f"{location}: not a compact h5lens manifest")
    (length,) = _HEADER_LENGTH.unpack_from(preamble, len(MAGIC))
    limits.check("a compact header of (bytes)", length, "manifest_bytes", location or "manifest")
    packed = head[_PREAMBLE : _PREAMBLE + length] if len(head) >= _PREAMBLE + length else read_range(_PREAMBLE, length)
    try:
        header = json.loads(_unbytes(packed))
    except Exception as e:  # noqa: BLE001
        raise ManifestFormatError(f"{location}: the compact manifest's header does not decode ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ManifestFormatError(f"{location}: not a compact h5lens manifest header")
    if header.get("version") != VERSION:
        raise ManifestFormatError(
            f"{location}: compact manifest version {header.get('version')!r}, this h5lens reads {VERSION}"
        )
    nodes = header.get("nodes")
    entries = header.get("arrays")
    info = header.get("h5lens") or {}
    if not isinstance(nodes, dict) or not isinstance(entries, dict):
        raise ManifestFormatError(f"{location}: the compact manifest's header lacks nodes or arrays")
    for path, doc in nodes.items():
        check_node_document(f"/{path}", doc)
    for path in nodes:
        check_node_path(f"{path}/zarr.json" if path else "zarr.json", path)
    check_documents(nodes, limits=limits)
    grammar = KeyGrammar.of_documents(nodes)  # every array's chunk key encoding is one h5lens reads
    grids = {path: grid_shape_of(doc) for path, doc in nodes.items() if doc.get("node_type") == "array"}
    for path, grid in grids.items():
        limits.check_grid(grid, "/" + path)
    for path, entry in entries.items():
        _check_entry(path, entry)
    refs = sum(e.get("chunks", 0) for e in entries.values())
    limits.check("chunk references:", refs, "chunk_refs", location or "manifest")
    unknown = sorted(set(entries) - set(grids))
    if unknown:
        raise ManifestFormatError(f"{location}: tables for arrays the manifest does not hold: {unknown[:3]}")
    sources = [Source.from_dict(s) for s in info.get("sources", [])]
    encodings = {path: grammar.arrays[path][0] for path in grids}
    tables = LazyTables(
        read_range, _PREAMBLE + length, entries, grids, sources, encodings, limits, nodes, head if whole else None
    )
    return parts_of_file(
        info,
        nodes=nodes,
        chunks=tables,
        sources=sources,
        location=location,
        recorded={path: {"chunks": e.get("chunks"), "digest": e.get("digest")} for path, e in entries.items()},
    )
