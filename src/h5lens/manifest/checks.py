"""The rules a manifest read from a file must keep, whichever form it was written in.

The JSON form (:mod:`h5lens.manifest.refs_json`) and the compact form
(:mod:`h5lens.manifest.compact`) read a manifest differently, but check what it claims the
same way, here: node paths inside the store, zarr v3 node documents, chunk grids, byte
ranges within their sources, variable-length chunks that hold their item count. A
manifest is untrusted input (docs/security.md): every refusal names the key.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError
from h5lens.manifest.documents import ArrayDocument, chunk_shape_of
from h5lens.manifest.tables import ChunkTable, Source
from h5lens.manifest.zarr_keys import KeyEncoding, chunk_key


def check_node_path(key: str, path: str) -> None:
    """A node path a zarr store can hold: no leading ``/``, no empty, ``.`` or ``..`` segment
    (``../x``, ``/etc/zarr.json`` and ``a//zarr.json`` name nothing inside the manifest)."""
    if path == "" and key == "zarr.json":
        return
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ManifestFormatError(f"{key}: not a key inside the store (absolute, empty or '..' segments)")


def check_node_document(where: str, doc: Any) -> None:
    """A zarr v3 group or array document (zarr checks the rest: :mod:`h5lens.manifest.documents`)."""
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or doc.get("node_type") not in ("array", "group"):
        raise ManifestFormatError(f"{where}: expected zarr v3 metadata (zarr_format 3, node_type array|group)")


def grid_shape_of(doc: dict[str, Any]) -> tuple[int, ...]:
    """The shape of an array document's chunk grid (chunks per dimension, edge chunks included)."""
    view = ArrayDocument.of(doc)
    if view is None:
        raise ManifestFormatError("a group document has no chunk grid")
    return view.grid_shape


VLEN_ALONE = (["vlen-utf8"], ["vlen-bytes"])  # codec lists whose chunks start with their item count


def codec_names(doc: dict[str, Any]) -> list[Any]:
    return [c.get("name") if isinstance(c, dict) else c for c in doc.get("codecs", [])]


def vlen_count_problem(data: bytes | memoryview, expected: int) -> str | None:
    """What is wrong with a variable-length chunk's item count, or None. numcodecs allocates
    the count it reads before reading any item: a damaged or crafted count of 2^31 cost
    16 GiB and 100 s before failing. The count must be the chunk's, and the bytes must
    hold that many items (4 bytes of length each, at least)."""
    claimed = int.from_bytes(bytes(data[:4]), "little") if len(data) >= 4 else None
    if claimed != expected or 4 + 4 * expected > len(data):
        return f"a variable-length chunk of {expected} items claims {claimed} in {len(data)} bytes"
    return None


def check_vlen_inline(path: str, doc: dict[str, Any], table: ChunkTable, encoding: KeyEncoding) -> None:
    """Every inline chunk of a variable-length array holds the item count it must."""
    if codec_names(doc) not in VLEN_ALONE or not table.inline:
        return
    expected = math.prod(chunk_shape_of(doc))
    for flat, data in table.inline.items():
        problem = vlen_count_problem(data, expected)
        if problem is not None:
            index = _grid_index(table, flat)
            raise ManifestFormatError(f"{chunk_key(path, index, encoding)}: {problem}")


def ranges_fit(tables: Iterable[ChunkTable], sources: Sequence[Source]) -> bool:
    """Whether every referenced byte range of ``tables`` lies within its source's recorded
    size: :func:`check_ranges` of all of them in one pass (a file of many small arrays),
    which then names the first that does not."""
    grids = [(t.source.reshape(-1), t.offset.reshape(-1), t.length.reshape(-1)) for t in tables]
    if not grids:
        return True
    source, offset, length = (np.concatenate(column) for column in zip(*grids, strict=True))
    return _bad_ranges(source, offset, length, sources).size == 0


def _bad_ranges(source: np.ndarray, offset: np.ndarray, length: np.ndarray, sources: Sequence[Source]) -> np.ndarray:
    """Flat indices of the references to a source the manifest does not declare, or past
    their source's recorded size (or so large they would overflow)."""
    referenced = source >= 0
    huge = np.uint64(1 << 62)
    sizes = np.array([-1 if s.size is None else s.size for s in sources] or [-1], dtype=np.int64)
    known = referenced & (source < len(sources))
    overflow = referenced & ((offset > huge) | (length > huge))
    limit = sizes[np.where(known, source, 0)]
    ends = offset.astype(np.int64, copy=False) + length.astype(np.int64, copy=False)
    past = known & ~overflow & (limit >= 0) & (ends > limit)
    return np.flatnonzero((referenced & ~known) | overflow | past)


def check_ranges(path: str, table: ChunkTable, sources: list[Source], encoding: KeyEncoding) -> None:
    """Referenced byte ranges must lie within their source's recorded size (and not overflow)."""
    source = table.source.reshape(-1)
    referenced = source >= 0
    if not referenced.any():
        return
    unknown = np.flatnonzero(source >= len(sources))
    if unknown.size:
        flat = int(unknown[0])
        index = _grid_index(table, flat)
        raise ManifestFormatError(
            f"{chunk_key(path, index, encoding)}: refers to source {int(source[flat])}; the manifest declares "
            f"{len(sources)}"
        )
    offset = table.offset.reshape(-1)
    length = table.length.reshape(-1)
    huge = np.uint64(1 << 62)
    overflow = referenced & ((offset > huge) | (length > huge))
    sizes = np.array([-1 if s.size is None else s.size for s in sources], dtype=np.int64)
    limit = sizes[np.where(referenced, source, 0)]
    ends = offset.astype(np.int64, copy=False) + length.astype(np.int64, copy=False)
    past = referenced & ~overflow & (limit >= 0) & (ends > limit)
    bad = np.flatnonzero(overflow | past)
    if bad.size:
        flat = int(bad[0])
        index = _grid_index(table, flat)
        key = chunk_key(path, index, encoding)
        src = int(source[flat])
        raise ManifestFormatError(
            f"{key}: bytes {int(offset[flat])}-{int(offset[flat]) + int(length[flat])} lie past the end of "
            f"{sources[src].url} ({sources[src].size} bytes recorded); {bad.size} reference(s) of /{path} do"
        )


def _grid_index(table: ChunkTable, flat: int) -> tuple[int, ...]:
    """The grid index of the chunk at ``flat`` (C order), as its key names it."""
    return tuple(int(i) for i in np.unravel_index(flat, table.grid_shape)) if table.grid_shape else ()
