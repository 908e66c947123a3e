"""Oracles that are never h5lens: libhdf5's own chunk tables and values, through h5py.

A remote scan used to be checked against a local scan, which runs the same walker: a
walker bug showed up in both and passed. Here every referenced chunk must be where
libhdf5 says it is (``chunk_iter``: grid offset, file offset, stored size, filter mask),
with the bytes ``read_direct_chunk`` returns, and every value must be what h5py reads.
"""

from __future__ import annotations

import h5py
import numpy as np

from h5lens.manifest.model import INLINE, MISSING, Manifest


def chunked_datasets(path: str) -> dict[str, h5py.Dataset]:
    out: dict[str, str] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, node: out.setdefault(name, name) if isinstance(node, h5py.Dataset) and node.chunks else None)
    return out  # type: ignore[return-value]


def assert_chunk_tables_match_libhdf5(manifest: Manifest, path: str, *, source: int = 0) -> int:
    """Every chunked dataset of ``path`` whose chunks the manifest references: each chunk
    libhdf5 lists is referenced at libhdf5's offset and size (or, when it skips a filter,
    inline), no other chunk is present, and the referenced bytes are libhdf5's raw chunk.
    Returns how many chunks were compared."""
    compared = 0
    with h5py.File(path, "r") as f, open(path, "rb") as raw:
        for name in chunked_datasets(path):
            ds = f[name]
            table = manifest.chunks.get(name)
            if table is None or not (table.source >= 0).any():
                continue  # materialised whole (strings, references, no codec): checked by value
            infos: list[h5py.h5d.StoreInfo] = []
            ds.id.chunk_iter(infos.append)
            listed = np.zeros(table.source.shape, bool)
            for info in infos:
                grid = tuple(o // c for o, c in zip(info.chunk_offset, ds.chunks, strict=True))
                grid += (0,) * (table.source.ndim - len(grid))  # array element types add dimensions
                listed[grid] = True
                where = f"{name} chunk {grid}"
                if table.source[grid] == INLINE:
                    continue  # re-encoded: a chunk that skips filters, or a small array's
                assert table.source[grid] == source, f"{where}: not referenced ({table.source[grid]})"
                assert int(table.offset[grid]) == info.byte_offset, f"{where}: offset"
                assert int(table.length[grid]) == info.size, f"{where}: size"
                assert info.filter_mask == 0, f"{where}: skips filters {info.filter_mask:#x} yet is referenced"
                raw.seek(info.byte_offset)
                _, stored = ds.id.read_direct_chunk(info.chunk_offset)
                assert raw.read(info.size) == bytes(stored), f"{where}: bytes differ from read_direct_chunk"
                compared += 1
            extra = (table.source != MISSING) & ~listed
            assert not extra.any(), f"{name}: chunks libhdf5 does not list: {np.argwhere(extra)[:5].tolist()}"
    return compared
