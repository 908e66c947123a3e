"""Manifest ⇄ kerchunk reference JSON (version 1) with zarr v3 keys.

Layout written::

    {"version": 1,
     "templates": {"u": "<source url>"},
     "refs": {"zarr.json": "<json>", "X/zarr.json": "<json>",
              "X/c/0/0": ["{{u}}", offset, length], "s/c": "base64:..."},
     "h5lens": {"version": ..., "convention": ..., "sources": [{url, size, mtime|etag}]}}

Keys are written in a fixed order (metadata by path, then chunks in C order),
so the same input gives byte-identical output.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import numpy as np
import orjson

from h5lens.errors import ManifestFormatError
from h5lens.manifest.model import INLINE, MISSING, ChunkTable, Manifest, Source

FORMAT_KEY = "h5lens"


def template_name(index: int) -> str:
    return "u" if index == 0 else f"u{index}"


def metadata_key(path: str) -> str:
    return f"{path}/zarr.json" if path else "zarr.json"


def chunk_prefix(path: str) -> str:
    return f"{path}/c" if path else "c"


def dumps_document(doc: dict[str, Any]) -> str:
    """A zarr.json document as zarr-python writes it: NaN/Infinity as bare tokens."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=True)


def grid_shape_of(doc: dict[str, Any]) -> tuple[int, ...]:
    shape = doc["shape"]
    chunk_shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
    return tuple(-(-s // c) if c else 0 for s, c in zip(shape, chunk_shape, strict=True))


def manifest_to_refs(manifest: Manifest) -> dict[str, Any]:
    refs: dict[str, Any] = {}
    for path in sorted(manifest.nodes):
        refs[metadata_key(path)] = dumps_document(manifest.nodes[path])
    templates = {template_name(i): s.url for i, s in enumerate(manifest.sources)}
    names = ["{{" + template_name(i) + "}}" for i in range(len(manifest.sources))]
    for path in sorted(manifest.chunks):
        refs.update(_chunk_refs(manifest.chunks[path], chunk_prefix(path), names))
    return {
        "version": 1,
        "templates": templates,
        "refs": refs,
        FORMAT_KEY: {
            "version": manifest.writer,
            "convention": manifest.convention,
            "sources": [s.to_dict() for s in manifest.sources],
        },
    }


def _chunk_refs(table: ChunkTable, prefix: str, names: list[str]) -> dict[str, Any]:
    """The refs of one array's present chunks, in C order, built column-wise (no per-chunk numpy calls)."""
    source = table.source.reshape(-1)
    present = np.flatnonzero(source != MISSING)
    if present.size == 0:
        return {}
    if table.grid_shape == ():
        keys = [prefix]
    else:
        columns = [c.astype(str).tolist() for c in np.unravel_index(present, table.grid_shape)]
        keys = [prefix + "/" + "/".join(parts) for parts in zip(*columns, strict=True)]
    sources = source[present].tolist()
    offsets = table.offset.reshape(-1)[present].tolist()
    lengths = table.length.reshape(-1)[present].tolist()
    flats = present.tolist()
    values: list[Any] = []
    for flat, src, offset, length in zip(flats, sources, offsets, lengths, strict=True):
        if src == INLINE:
            values.append("base64:" + base64.b64encode(table.inline[flat]).decode("ascii"))
        else:
            values.append([names[src], offset, length])
    return dict(zip(keys, values, strict=True))


def manifest_from_refs(data: dict[str, Any], *, location: str | None = None) -> Manifest:
    if not isinstance(data, dict):
        raise ManifestFormatError(f"Expected a JSON object. Got {type(data).__name__}")
    version = data.get("version")
    if version is None:
        refs = data
    elif version == 1:
        refs = data.get("refs")
    else:
        raise ManifestFormatError(f"Expected reference format version 1. Got {version!r}")
    if not isinstance(refs, dict):
        raise ManifestFormatError("Expected a 'refs' object")
    templates: dict[str, str] = dict(data.get("templates") or {}) if version == 1 else {}
    info = data.get(FORMAT_KEY) or {}

    sources: list[Source] = [Source.from_dict(s) for s in info.get("sources", [])]
    source_index: dict[str, int] = {}
    for name, url in templates.items():
        match = next((i for i, s in enumerate(sources) if s.url == url), None)
        if match is None:
            sources.append(Source(url))
            match = len(sources) - 1
        source_index["{{" + name + "}}"] = match

    nodes: dict[str, dict[str, Any]] = {}
    chunk_items: list[tuple[str, Any]] = []
    for key, value in refs.items():
        if key == "zarr.json" or key.endswith("/zarr.json"):
            path = key[: -len("zarr.json")].rstrip("/")
            nodes[path] = _parse_document(key, value)
        else:
            chunk_items.append((key, value))
    chunks: dict[str, ChunkTable] = {}
    for path, doc in nodes.items():
        if doc.get("node_type") != "array":
            continue
        _check_array_document(path, doc)
        chunks[path] = ChunkTable.empty(grid_shape_of(doc))

    resolve = _SourceResolver(sources, source_index)
    for path, (keys, values) in _group_chunk_keys(chunk_items, chunks).items():
        _fill_table(path, chunks[path], keys, values, resolve)
    return Manifest(
        nodes=nodes,
        chunks=chunks,
        sources=sources,
        convention=info.get("convention", "released"),
        writer=info.get("version", ""),
        location=location,
    )


class _SourceResolver:
    """Reference URL (a ``{{template}}`` or a literal URL) → source index."""

    def __init__(self, sources: list[Source], index: dict[str, int]) -> None:
        self.sources = sources
        self.index = index

    def __call__(self, url: Any) -> int:
        found = self.index.get(url)
        if found is not None:
            return found
        if not isinstance(url, str):
            raise ManifestFormatError(f"Reference URL must be a string. Got {url!r}")
        for i, s in enumerate(self.sources):
            if s.url == url:
                self.index[url] = i
                return i
        if "{{" in url:
            raise ManifestFormatError(f"Reference names an undefined template: {url!r}")
        self.sources.append(Source(url))
        self.index[url] = len(self.sources) - 1
        return self.index[url]


_Group = tuple[list[str], list[Any]]  # the chunk-key tails of one array and their values


def _group_chunk_keys(items: list[tuple[str, Any]], chunks: dict[str, ChunkTable]) -> dict[str, _Group]:
    """Chunk keys grouped by array, each key reduced to the grid index part ("12/0").

    Keys whose array prefix is ambiguous ("a/c/b/c/0") or that do not parse fast go
    through :func:`_split_chunk_key`, which raises on keys of no array."""
    groups: dict[str, _Group] = {}
    for key, value in items:
        head, sep, tail = key.rpartition("/c/")
        if not sep:
            if key == "c" or key.startswith("c/"):  # chunks of a root array
                head, tail = "", key[2:]
            else:
                head = None
        if head not in chunks:
            path, idx = _split_chunk_key(key, chunks)
            head, tail = path, "/".join(map(str, idx))
        group = groups.get(head)
        if group is None:
            group = groups[head] = ([], [])
        group[0].append(tail)
        group[1].append(value)
    return groups


def _grid_indices(path: str, tails: list[str], grid: tuple[int, ...]) -> np.ndarray:
    """Flat C-order chunk indices for the tails ("3/1") of one array's keys, checked against its grid."""
    if not grid:
        if any(tails):
            raise ManifestFormatError(f"{path}: a scalar array has a single chunk key 'c'. Got {tails[:3]}")
        return np.zeros(len(tails), dtype=np.int64)
    joined = "/".join(tails)
    parts = joined.split("/")
    digits = "".join(parts)
    if len(parts) != len(tails) * len(grid) or not (digits.isascii() and digits.isdigit()) or "//" in joined:
        bad = next((t for t in tails if len(t.split("/")) != len(grid) or not t.replace("/", "").isdigit()), tails[0])
        raise ManifestFormatError(f"{path}/c/{bad}: not a chunk index of a {len(grid)}-d grid")
    index = np.array(parts, dtype=np.int64).reshape(len(tails), len(grid))
    outside = (index >= np.asarray(grid, dtype=np.int64)).any(axis=1)
    if outside.any():
        bad = tails[int(np.flatnonzero(outside)[0])]
        raise ManifestFormatError(f"{path}/c/{bad}: chunk index outside the grid {grid}")
    return np.ravel_multi_index(tuple(index.T), grid).astype(np.int64, copy=False)


def _fill_table(path: str, table: ChunkTable, tails: list[str], values: list[Any], resolve: _SourceResolver) -> None:
    """Set one array's chunk table from its keys' values, column-wise (no per-chunk numpy calls)."""
    flat = _grid_indices(path, tails, table.grid_shape)
    is_ref = [type(v) is list for v in values]
    if all(is_ref):
        refs, ref_flat, inline_at = values, flat, []
    else:
        refs = [v for v, r in zip(values, is_ref, strict=True) if r]
        ref_flat = flat[np.asarray(is_ref, dtype=bool)]
        inline_at = [i for i, r in enumerate(is_ref) if not r]
    if refs:
        if any(len(v) != 3 for v in refs):
            bad = next(i for i, v in enumerate(values) if type(v) is list and len(v) != 3)
            raise ManifestFormatError(f"{path}/c/{tails[bad]}: expected [url, offset, length]. Got {values[bad]!r}")
        urls = [v[0] for v in refs]
        index = {url: resolve(url) for url in set(urls)}
        try:
            offsets = np.array([v[1] for v in refs], dtype=np.uint64)
            lengths = np.array([v[2] for v in refs], dtype=np.uint64)
        except (TypeError, ValueError, OverflowError) as e:
            raise ManifestFormatError(f"{path}: chunk offsets and lengths must be non-negative integers ({e})") from None
        if len(index) == 1:
            table.source.reshape(-1)[ref_flat] = next(iter(index.values()))
        else:
            table.source.reshape(-1)[ref_flat] = [index[u] for u in urls]
        table.offset.reshape(-1)[ref_flat] = offsets
        table.length.reshape(-1)[ref_flat] = lengths
    if inline_at:
        payloads = []
        for i in inline_at:
            value = values[i]
            if not isinstance(value, str):
                raise ManifestFormatError(
                    f"{path}/c/{tails[i]}: expected [url, offset, length] or inline data. Got {value!r}"
                )
            payloads.append(base64.b64decode(value[7:]) if value.startswith("base64:") else value.encode())
        table.set_inline_many(flat[inline_at], payloads)


def _parse_document(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        doc = value
    elif isinstance(value, str):
        try:
            doc = json.loads(value)
        except ValueError as e:
            raise ManifestFormatError(f"{key}: not valid JSON ({e})") from None
    else:
        raise ManifestFormatError(f"{key}: expected a zarr.json document. Got {type(value).__name__}")
    if doc.get("zarr_format") != 3 or doc.get("node_type") not in ("array", "group"):
        raise ManifestFormatError(f"{key}: expected zarr v3 metadata (zarr_format 3, node_type array|group)")
    return doc


def _check_array_document(path: str, doc: dict[str, Any]) -> None:
    grid = doc.get("chunk_grid", {})
    if grid.get("name") != "regular":
        raise ManifestFormatError(f"{path}: only regular chunk grids are supported. Got {grid.get('name')!r}")
    encoding = doc.get("chunk_key_encoding", {"name": "default"})
    sep = encoding.get("configuration", {}).get("separator", "/")
    if encoding.get("name") != "default" or sep != "/":
        raise ManifestFormatError(f"{path}: only the default chunk key encoding with '/' is supported")


def _split_chunk_key(key: str, chunks: dict[str, ChunkTable]) -> tuple[str, tuple[int, ...]]:
    # The common case first: "X/data/c/12" splits at the last "/c/".
    head, sep, tail = key.rpartition("/c/")
    if sep and head in chunks:
        table = chunks[head]
        parts = tail.split("/")
        if len(parts) == len(table.grid_shape) and all(p.isdigit() for p in parts):
            idx = tuple(map(int, parts))
            if all(i < n for i, n in zip(idx, table.grid_shape, strict=True)):
                return head, idx
    # "a/c/b/c/0/1": the chunk part is "c" followed only by integers
    parts = key.split("/")
    for cut in range(len(parts) - 1, -1, -1):
        if parts[cut] == "c" and all(p.isdigit() for p in parts[cut + 1 :]):
            path = "/".join(parts[:cut])
            if path in chunks:
                idx = tuple(int(p) for p in parts[cut + 1 :])
                table = chunks[path]
                if len(idx) != len(table.grid_shape) or any(
                    i >= n for i, n in zip(idx, table.grid_shape, strict=True)
                ):
                    raise ManifestFormatError(f"{key}: chunk index outside the grid {table.grid_shape}")
                return path, idx
    raise ManifestFormatError(f"{key}: not a metadata key nor a chunk key of any array")


def write_json(manifest: Manifest, path: str, *, storage_options: dict[str, Any] | None = None) -> None:
    """Serialise and write atomically: a temporary file renamed into place."""
    payload = orjson.dumps(manifest.to_dict())
    write_bytes_atomic(path, payload, storage_options=storage_options)


def write_bytes_atomic(path: str, payload: bytes, *, storage_options: dict[str, Any] | None = None) -> None:
    if "://" not in path or path.startswith("file://"):
        local = path.removeprefix("file://")
        directory = os.path.dirname(os.path.abspath(local))
        tmp = os.path.join(directory, f".{os.path.basename(local)}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(payload)
            os.replace(tmp, local)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return
    import fsspec

    # Object stores publish an object only when its upload completes: one PUT is atomic.
    fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    fs.pipe_file(fs_path, payload)


def read_json(path: str, *, storage_options: dict[str, Any] | None = None) -> Manifest:
    import fsspec

    try:
        with fsspec.open(path, "rb", **(storage_options or {})) as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ManifestFormatError(f"{path}: cannot read manifest ({e})") from e
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # bare NaN tokens are not JSON to orjson; the stdlib reads them
            data = json.loads(raw)
        except ValueError as e:
            raise ManifestFormatError(f"{path}: not a JSON manifest ({e})") from None
    location = path if "://" in path else os.path.abspath(path)
    return manifest_from_refs(data, location=location)
