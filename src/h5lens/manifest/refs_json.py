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
import gc
import json
from typing import Any

import numpy as np
import orjson

from h5lens.errors import H5LensError, ManifestFormatError, NotAManifestError, RefusedSourceError
from h5lens.manifest.checks import (
    check_node_document,
    check_node_path,
    check_ranges,
    check_vlen_inline,
    grid_shape_of,
    ranges_fit,
)
from h5lens.manifest.documents import check_documents
from h5lens.manifest.limits import DEFAULT_LIMITS, Limits
from h5lens.manifest.refs_columns import ArrayKeys, RefKeys, grid_flat_indices, reference_columns
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
from h5lens.manifest.unique_json import loads_unique
from h5lens.manifest.zarr_keys import KeyEncoding, KeyGrammar, chunk_key, join, metadata_key, metadata_path

FORMAT_KEY = "h5lens"


def template_name(index: int) -> str:
    return "u" if index == 0 else f"u{index}"


def dumps_document(doc: dict[str, Any]) -> str:
    """A zarr.json document as zarr-python writes it: NaN/Infinity as bare tokens."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=True)


def manifest_to_refs(manifest: ManifestParts) -> dict[str, Any]:
    refs: dict[str, Any] = {}
    for path in sorted(manifest.nodes):
        refs[metadata_key(path)] = dumps_document(manifest.nodes[path])
    templates = {template_name(i): s.url for i, s in enumerate(manifest.sources)}
    names = ["{{" + template_name(i) + "}}" for i in range(len(manifest.sources))]
    for path in sorted(manifest.chunks):
        encoding = KeyEncoding.from_document(manifest.nodes[path], "/" + path)
        refs.update(_chunk_refs(manifest.chunks[path], path, encoding, names))
    return {
        "version": 1,
        "templates": templates,
        "refs": refs,
        FORMAT_KEY: {
            "version": manifest.writer,
            "convention": manifest.convention,
            "sources": [s.to_dict() for s in manifest.sources],
            "arrays": {
                path: {"chunks": manifest.chunks[path].n_present, "digest": manifest.chunks[path].digest()}
                for path in sorted(manifest.chunks)
            },
            **attribute_types_json(manifest),
            **unreadable_json(manifest),
        },
    }


def _chunk_refs(table: ChunkTable, path: str, encoding: KeyEncoding, names: list[str]) -> dict[str, Any]:
    """The refs of one array's present chunks, in C order, built column-wise (no per-chunk numpy calls)."""
    source = table.source.reshape(-1)
    present = np.flatnonzero(source != MISSING)
    if present.size == 0:
        return {}
    if table.grid_shape == ():
        keys = [chunk_key(path, (), encoding)]
    else:
        prefix = join(path, encoding.tail_prefix())
        sep = encoding.separator
        columns = [c.astype(str).tolist() for c in np.unravel_index(present, table.grid_shape)]
        keys = [prefix + sep.join(parts) for parts in zip(*columns, strict=True)]
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


_ZARR_V2_KEYS = frozenset({".zgroup", ".zarray", ".zattrs", ".zmetadata"})


def parts_from_refs(
    data: dict[str, Any], *, location: str | None = None, limits: Limits = DEFAULT_LIMITS, by_key: bool = False
) -> ManifestParts:
    """A manifest's parts from kerchunk reference JSON (a parsed dict). The input is untrusted: keys
    outside zarr's grammar, references to sources the manifest does not declare, byte ranges
    past a source's recorded size and claims beyond ``limits`` are refused, naming the key.

    The chunk references are read column-wise (:mod:`h5lens.manifest.refs_columns`) where
    they take the form writers give them, else key by key; ``by_key`` reads every one key
    by key (the route the column-wise one must agree with, for tests)."""
    where = location or "manifest"
    if not isinstance(data, dict):
        raise NotAManifestError(f"{where}: not a manifest (JSON {type(data).__name__}, not an object)")
    version = data.get("version")
    refs: object
    if version is None:
        refs = data
    elif version == 1:
        refs = data.get("refs")
    else:
        raise ManifestFormatError(f"Expected reference format version 1. Got {version!r}")
    if not isinstance(refs, dict):
        raise ManifestFormatError(f"{where}: Expected a 'refs' object")
    keys = None if by_key else RefKeys.of(refs)
    if _names_zarr_v2_keys(refs, keys):
        raise NotAManifestError(
            f"{where}: zarr v2 references (kerchunk's); h5lens reads zarr v3 manifests: index the HDF5 file with h5lens",
            kind="zarr v2",
        )
    if "zarr.json" not in refs:
        raise NotAManifestError(f"{where}: not a manifest (no root group: the key zarr.json is missing)")
    templates = data.get("templates") or {} if version == 1 else {}
    info = data.get(FORMAT_KEY) or {}
    if not isinstance(templates, dict) or not all(isinstance(v, str) for v in templates.values()):
        raise ManifestFormatError("Expected 'templates' to map names to URL strings")
    if not isinstance(info, dict) or not isinstance(info.get("sources", []), list):
        raise ManifestFormatError(f"Expected an '{FORMAT_KEY}' object with a 'sources' list")

    sources: list[Source] = [Source.from_dict(s) for s in info.get("sources", [])]
    source_index: dict[str, int] = {}
    for name, url in templates.items():
        match = next((i for i, s in enumerate(sources) if s.url == url), None)
        if match is None:
            sources.append(Source(url))
            match = len(sources) - 1
        source_index["{{" + name + "}}"] = match

    nodes: dict[str, dict[str, Any]] = {}
    if keys is not None:
        metadata = keys.metadata_keys()
    else:
        metadata = [(i, key, path) for i, key in enumerate(refs) if (path := metadata_path(key)) is not None]
    for _, key, path in metadata:
        value = refs[key]
        check_node_path(key, path)
        if isinstance(value, str):
            limits.check("a document of", len(value), "document_bytes", key)
        nodes[path] = _parse_document(key, value)
    limits.check("chunk references:", len(refs) - len(metadata), "chunk_refs", location or "manifest")
    check_documents(nodes, limits=limits)  # zarr accepts each document before anything reads one
    for path, doc in nodes.items():
        if doc.get("node_type") == "array":
            _check_array_document(path, doc)
    builders: dict[str, ChunkTableBuilder] = {}
    for path, doc in nodes.items():
        if doc.get("node_type") == "array":
            grid = grid_shape_of(doc)
            limits.check_grid(grid, "/" + path)
            builders[path] = ChunkTableBuilder(grid)

    grammar = KeyGrammar.of_documents(nodes)
    # References may reach only the sources the manifest declares (its h5lens sources and
    # templates); a manifest that declares none (plain kerchunk) declares its literal URLs.
    declared = {s.url for s in sources}
    resolve = _SourceResolver(sources, source_index, strict=bool(declared))
    inline_total = 0
    metadata_at = {i for i, _, _ in metadata}
    runs = None if keys is None else keys.array_keys(list(refs.values()), metadata_at, grammar, nodes)
    if keys is None or runs is None:
        chunk_items = [(key, value) for i, (key, value) in enumerate(refs.items()) if i not in metadata_at]
        for path, (tails, values) in _group_chunk_keys(chunk_items, grammar).items():
            inline_total += _fill_table(path, builders[path], grammar.arrays[path][0], tails, values, resolve)
            limits.check("inline chunk bytes:", inline_total, "inline_bytes", location or "manifest")
    else:
        for path, found in runs.items():
            inline_total += _fill_columns(found, builders[path], grammar.arrays[path][0], keys.keys, resolve)
            limits.check("inline chunk bytes:", inline_total, "inline_bytes", location or "manifest")
    chunks = {path: builder.build() for path, builder in builders.items()}
    fit = ranges_fit(chunks.values(), sources)  # one pass; where one does not, the first is named
    for path, table in chunks.items():
        if not fit:
            check_ranges(path, table, sources, grammar.arrays[path][0])
        check_vlen_inline(path, nodes[path], table, grammar.arrays[path][0])
    return parts_of_file(
        info,
        nodes=nodes,
        chunks=chunks,
        sources=sources,
        location=location,
        recorded=_recorded(info.get("arrays")),
    )


def _names_zarr_v2_keys(refs: dict[Any, Any], keys: RefKeys | None) -> bool:
    """Whether a key names a zarr v2 metadata document (``.zarray``, ...): kerchunk's refs."""
    if keys is not None and not keys.has_segment_starting(".z"):  # what every one of those names starts with
        return False
    return any(str(key).rsplit("/", 1)[-1] in _ZARR_V2_KEYS for key in refs)


def _recorded(value: Any) -> dict[str, dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ManifestFormatError(
            f"Expected h5lens.arrays to map array paths to {{chunks, digest}}. Got {type(value).__name__}"
        )
    for path, entry in value.items():
        chunks, digest = entry.get("chunks"), entry.get("digest")
        if not (type(chunks) is int and chunks >= 0) or not (digest is None or isinstance(digest, str)):
            raise ManifestFormatError(
                f"h5lens.arrays[{path!r}]: expected a chunk count and a digest string. Got {entry!r}"
            )
    return value


class _SourceResolver:
    """Reference URL (a ``{{template}}`` or a literal URL) → source index. ``strict``: a
    literal URL the manifest does not declare is refused."""

    def __init__(self, sources: list[Source], index: dict[str, int], *, strict: bool = False) -> None:
        self.sources = sources
        self.index = index
        self.strict = strict

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
        if self.strict:
            raise RefusedSourceError(
                f"a reference points at {url!r}, which is none of the manifest's declared sources "
                f"({', '.join(s.url for s in self.sources)})"
            )
        self.sources.append(Source(url))
        self.index[url] = len(self.sources) - 1
        return self.index[url]


_Group = tuple[list[str], list[Any]]  # the key tails of one array's chunks ("c/3/1") and their values


def _group_chunk_keys(items: list[tuple[str, Any]], grammar: KeyGrammar) -> dict[str, _Group]:
    """Chunk keys grouped by array, each reduced to its tail below the array ("c/12/0").

    A key below no array is an error naming it."""
    groups: dict[str, _Group] = {}
    for key, value in items:
        split = grammar.split_chunk_key(key)
        if split is None:
            raise ManifestFormatError(f"{key}: not a metadata key nor a chunk key of any array")
        head, tail = split
        group = groups.get(head)
        if group is None:
            group = groups[head] = ([], [])
        group[0].append(tail)
        group[1].append(value)
    return groups


def _grid_indices(path: str, encoding: KeyEncoding, tails: list[str], grid: tuple[int, ...]) -> np.ndarray:
    """Flat C-order chunk indices for one array's key tails, checked against its grid,
    parsed column-wise (one split of the joined tails, not one parse per key)."""
    where = join(path, "")
    if len(tails) == 1:  # most arrays of a small file have one chunk: its index without numpy
        single = encoding.parse_tail(tails[0], len(grid))
        if single is not None and all(i < n for i, n in zip(single, grid, strict=True)):
            flat = 0
            for i, n in zip(single, grid, strict=True):
                flat = flat * n + i
            return np.array([flat], dtype=np.int64)
    if not grid:
        bad = next((t for t in tails if encoding.parse_tail(t, 0) is None), None)
        if bad is not None:
            raise ManifestFormatError(f"{where}{bad}: a 0-d array has the single chunk key {encoding.tail(())!r}")
        return np.zeros(len(tails), dtype=np.int64)
    prefix, sep = encoding.tail_prefix(), encoding.separator
    cut = len(prefix)
    if prefix and not all(t.startswith(prefix) for t in tails):
        bad = next(t for t in tails if not t.startswith(prefix))
        raise ManifestFormatError(
            f"{where}{bad}: not a chunk key of a {len(grid)}-d array ({encoding.name!r} encoding)"
        )
    joined = sep.join(t[cut:] for t in tails)
    parts = joined.split(sep)
    digits = "".join(parts)
    if len(parts) != len(tails) * len(grid) or not (digits.isascii() and digits.isdigit()) or "" in parts:
        bad = next((t for t in tails if encoding.parse_tail(t, len(grid)) is None), tails[0])
        raise ManifestFormatError(f"{where}{bad}: not a chunk key of a {len(grid)}-d array")
    try:
        index = np.array(parts, dtype=np.int64).reshape(len(tails), len(grid))
    except OverflowError:  # an index past 2**63: outside any grid
        bad = next(t for t in tails if max(encoding.parse_tail(t, len(grid)) or (0,)) >= 2**63)
        raise ManifestFormatError(f"{where}{bad}: chunk index outside the grid {grid}") from None
    outside = (index >= np.asarray(grid, dtype=np.int64)).any(axis=1)
    if outside.any():
        bad = tails[int(np.flatnonzero(outside)[0])]
        raise ManifestFormatError(f"{where}{bad}: chunk index outside the grid {grid}")
    return np.asarray(np.ravel_multi_index(tuple(index.T), grid), dtype=np.int64)


def _fill_table(
    path: str,
    table: ChunkTableBuilder,
    encoding: KeyEncoding,
    tails: list[str],
    values: list[Any],
    resolve: _SourceResolver,
) -> int:
    """Set one array's chunk table from its keys' values, column-wise (no per-chunk numpy calls);
    return the inline bytes it holds."""
    flat = _grid_indices(path, encoding, tails, table.grid_shape)
    where = join(path, "")
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
            raise ManifestFormatError(f"{where}{tails[bad]}: expected [url, offset, length]. Got {values[bad]!r}")
        urls = [v[0] for v in refs]
        if not all(type(u) is str for u in urls):
            bad = next(i for i, v in enumerate(values) if type(v) is list and type(v[0]) is not str)
            raise ManifestFormatError(
                f"{where}{tails[bad]}: a reference's URL must be a string. Got {values[bad][0]!r}"
            )
        index: dict[Any, int] = {}
        for url in dict.fromkeys(urls):
            try:
                index[url] = resolve(url)
            except H5LensError as e:
                first = next(i for i, v in enumerate(values) if type(v) is list and v[0] == url)
                raise type(e)(f"{where}{tails[first]}: {e}") from None
        offsets = _byte_counts(where, tails, values, [v[1] for v in refs], "offset")
        lengths = _byte_counts(where, tails, values, [v[2] for v in refs], "length")
        sources = next(iter(index.values())) if len(index) == 1 else [index[u] for u in urls]
        table.refer(ref_flat, offsets, lengths, sources)
    if inline_at:
        payloads = []
        for i in inline_at:
            value = values[i]
            if not isinstance(value, str):
                raise ManifestFormatError(
                    f"{where}{tails[i]}: expected [url, offset, length] or inline data. Got {value!r}"
                )
            try:
                payloads.append(
                    base64.b64decode(value[7:], validate=True) if value.startswith("base64:") else value.encode()
                )
            except ValueError:
                raise ManifestFormatError(f"{where}{tails[i]}: inline data is not base64") from None
        table.set_inline(flat[inline_at], payloads)
        return sum(map(len, payloads))
    return 0


# Below this many chunks an array's keys are read one by one: numpy's fixed cost per call
# is more than the keys cost (most arrays of an AnnData file have one chunk).
_COLUMNS_FROM = 16


def _fill_columns(
    found: ArrayKeys, table: ChunkTableBuilder, encoding: KeyEncoding, keys: list[str], resolve: _SourceResolver
) -> int:
    """Set one array's chunk table from its keys column-wise where they are all ``[url,
    offset, length]`` references under keys of its grid; else key by key (:func:`_fill_table`,
    which names a key it refuses). Returns the inline bytes the table holds."""
    if found.tails is not None and len(found.values) >= _COLUMNS_FROM:
        flat = grid_flat_indices(found.tails, len(found.values), encoding, table.grid_shape)
        columns = None if flat is None else reference_columns(found.values)
        if flat is not None and columns is not None:
            try:  # in the order the URLs first appear: an undeclared one becomes the next source
                index = {url: resolve(url) for url in columns.urls}
            except H5LensError:
                pass  # key by key, which names the first key of that URL
            else:
                each = columns.url_of_each
                sources = index[columns.urls[0]] if each is None else list(map(index.__getitem__, each))
                table.refer(flat, columns.offsets, columns.lengths, sources)
                return 0
    return _fill_table(found.path, table, encoding, found.key_tails(keys), found.values, resolve)


def _byte_counts(where: str, tails: list[str], values: list[Any], column: list[Any], what: str) -> np.ndarray:
    """One column of offsets or lengths as uint64, refused unless every entry is an integer
    in [0, 2**64): a float (truncated), a bool or a list (reshaped) would otherwise become
    some other byte range. (Ranges past their source's end are refused later, by size.)"""
    if set(map(type, column)) <= {int}:
        try:
            return np.array(column, dtype=np.uint64)
        except OverflowError:
            pass
    i_bad = next((i for i, v in enumerate(column) if not (type(v) is int and 0 <= v < 2**64)), 0)
    bad = [i for i, v in enumerate(values) if type(v) is list][i_bad]
    raise ManifestFormatError(f"{where}{tails[bad]}: the {what} must be a non-negative integer. Got {column[i_bad]!r}")


def _parse_document(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        doc = value
    elif isinstance(value, str):
        try:
            doc = orjson.loads(value)  # several times faster than json.loads, per document
        except orjson.JSONDecodeError:
            try:  # bare NaN / Infinity tokens (as zarr writes them) are not JSON to orjson
                doc = json.loads(value)
            except ValueError as e:
                raise ManifestFormatError(f"{key}: not valid JSON ({e})") from None
    else:
        raise ManifestFormatError(f"{key}: expected a zarr.json document. Got {type(value).__name__}")
    if not isinstance(doc, dict):
        raise ManifestFormatError(f"{key}: expected a zarr.json object. Got {type(doc).__name__}")
    check_node_document(key, doc)
    return doc


def _check_array_document(path: str, doc: dict[str, Any]) -> None:
    grid = doc.get("chunk_grid", {})
    if grid.get("name") not in ("regular", "rectilinear"):  # rectilinear: h5lens combine's
        raise ManifestFormatError(f"{path}: only regular and rectilinear chunk grids are supported. Got {grid.get('name')!r}")
    KeyEncoding.from_document(doc, "/" + path)


def parse_json(raw: bytes, location: str, *, limits: Limits = DEFAULT_LIMITS) -> ManifestParts:
    """The parts of a JSON manifest from its bytes, read from ``location`` (relative source
    URLs resolve against it). A key given twice is refused: which of the two a reader would
    take is undefined."""
    limits.check("a manifest of (bytes)", len(raw), "manifest_bytes", location)
    # The parse makes a list per chunk reference, none in a cycle: the cyclic collector's
    # passes over them (a sixth of the load at 50,000 references) find nothing to free.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parts_from_refs(loads_unique(raw, location), location=location, limits=limits)
    finally:
        if collecting:
            gc.enable()
