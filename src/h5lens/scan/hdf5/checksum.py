"""HDF5's metadata checksum: Bob Jenkins' lookup3 ``hashlittle`` with an initial value of 0.

Specification: the "Checksum" field that ends each version-2-era structure (superblock
versions 2 and 3, version 2 object headers and their continuation blocks, v2 B-tree
headers and nodes, fixed and extensible array headers and blocks). libhdf5:
``H5_checksum_metadata`` / ``H5_checksum_lookup3`` in H5checksum.c.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from h5lens.scan.hdf5.model import UnsupportedIndexError

CHECKSUM_SIZE = 4  # bytes of the checksum field that ends a checksummed structure

# The hash as published (hashlittle), in two versions: numpy arrays, one lane per blob,
# and Python integers for a few blobs, where numpy's per-call overhead dominates.
# Each step of the tables below is x -= z; x ^= rot(z, k); z += y (mix) and
# x ^= y; x -= rot(y, k) (final).
_MIX = ((0, 2, 1, 4), (1, 0, 2, 6), (2, 1, 0, 8), (0, 2, 1, 16), (1, 0, 2, 19), (2, 1, 0, 4))
_FINAL = ((2, 1, 14), (0, 2, 11), (1, 0, 25), (2, 1, 16), (0, 2, 4), (1, 0, 14), (2, 1, 24))
_M32 = 0xFFFFFFFF
_VECTOR_LOOKUP3_MIN = 16  # from this many blobs on, numpy lanes beat Python integers


def _rot(x: np.ndarray, k: int) -> np.ndarray:
    return (x << np.uint32(k)) | (x >> np.uint32(32 - k))


def _mix(abc: list[np.ndarray]) -> None:
    for x, z, y, k in _MIX:
        abc[x] -= abc[z]
        abc[x] ^= _rot(abc[z], k)
        abc[z] += abc[y]


def _final(abc: list[np.ndarray]) -> None:
    for x, y, k in _FINAL:
        abc[x] ^= abc[y]
        abc[x] -= _rot(abc[y], k)


def _lookup3_int(data: bytes | memoryview) -> int:
    """lookup3 of one blob with Python integers."""
    n = len(data)
    init = (0xDEADBEEF + n) & _M32
    if n == 0:
        return init
    full = (n - 1) // 12  # blocks mixed before the (zero-padded) tail block
    words = np.frombuffer(bytes(data) + bytes(12 * (full + 1) - n), "<u4").tolist()

    def rot(v: int, k: int) -> int:
        return ((v << k) | (v >> (32 - k))) & _M32

    abc = [init, init, init]
    for j in range(0, 3 * (full + 1), 3):
        abc = [(abc[i] + words[j + i]) & _M32 for i in range(3)]
        if j == 3 * full:
            break
        for x, z, y, k in _MIX:
            abc[x] = ((abc[x] - abc[z]) & _M32) ^ rot(abc[z], k)
            abc[z] = (abc[z] + abc[y]) & _M32
    for x, y, k in _FINAL:
        abc[x] = ((abc[x] ^ abc[y]) - rot(abc[y], k)) & _M32
    return abc[2]


def lookup3_many(blobs: Sequence[bytes | memoryview]) -> np.ndarray:
    """HDF5's metadata checksum (Jenkins lookup3 ``hashlittle``, initval 0) of each blob.

    The hash is sequential within a blob, so the work is vectorised across blobs:
    one numpy pass per 12-byte block over all blobs still that long. Blobs are
    sorted longest first so that the blobs still hashing are always a prefix.
    """
    n = len(blobs)
    if n < _VECTOR_LOOKUP3_MIN:
        return np.fromiter((_lookup3_int(b) for b in blobs), np.uint32, n)
    lengths = np.fromiter((len(b) for b in blobs), np.int64, n)
    order = np.argsort(-lengths, kind="stable")
    lengths = lengths[order]
    full_blocks = np.where(lengths > 0, (lengths - 1) // 12, 0)  # blocks mixed before the tail
    nblocks = int(full_blocks[0]) + 1
    raw = np.zeros((n, nblocks * 12), np.uint8)  # zero padding = the tail's missing bytes
    for row, which in enumerate(order.tolist()):
        raw[row, : lengths[row]] = np.frombuffer(blobs[which], np.uint8)
    words = raw.view("<u4").reshape(n, nblocks, 3).astype(np.uint32)
    init = ((0xDEADBEEF + lengths) & _M32).astype(np.uint32)
    abc = [init.copy(), init.copy(), init.copy()]
    still = n - np.cumsum(np.bincount(full_blocks, minlength=nblocks))  # blobs with > j full blocks
    for j in range(nblocks - 1):
        k = int(still[j])
        lanes = [v[:k] for v in abc]  # views: the rounds update abc in place
        for i in range(3):
            lanes[i] += words[:k, j, i]
        _mix(lanes)
    tail = words[np.arange(n), full_blocks]
    for i in range(3):
        abc[i] += tail[:, i]
    _final(abc)
    out = np.empty(n, np.uint32)
    out[order] = np.where(lengths > 0, abc[2], init)  # an empty blob hashes to the initial value
    return out


def lookup3(data: bytes) -> int:
    """HDF5's metadata checksum of one blob."""
    return int(lookup3_many([data])[0])


def verify_checksums(blobs: Sequence[bytes], what: str) -> None:
    """Each blob ends with the lookup3 checksum of the bytes before it."""
    if not blobs:
        return
    computed = lookup3_many([memoryview(b)[:-CHECKSUM_SIZE] for b in blobs])
    stored = np.fromiter((int.from_bytes(b[-CHECKSUM_SIZE:], "little") for b in blobs), np.uint32, len(blobs))
    bad = np.flatnonzero(computed != stored)
    if len(bad):
        raise UnsupportedIndexError(f"{what}: checksum mismatch ({len(bad)} of {len(blobs)})")
