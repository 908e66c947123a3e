"""Small parsing tools: little-endian fields read in sequence, and runs of fixed-size records
decoded as numpy columns (every index level is decoded at once, never record by record).

The format stores every integer little-endian, in widths the file chooses ("size of
offsets", "size of lengths", or a width derived from a count: :func:`enc_size`).
"""

from __future__ import annotations

import numpy as np

from h5lens.scan.hdf5.model import UnsupportedIndexError


class Cursor:
    """Reads little-endian fields in sequence; running off the end is an error, not a guess."""

    def __init__(self, data: bytes, pos: int, what: str) -> None:
        self.data, self.pos, self.what = data, pos, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise UnsupportedIndexError(f"{self.what}: truncated at byte {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def skip(self, n: int) -> None:
        self.take(n)


def record_view(data: bytes, offset: int, count: int, size: int, what: str) -> np.ndarray:
    """``count`` fixed-size records at ``offset`` as a (count, size) uint8 view."""
    if offset + count * size > len(data):
        raise UnsupportedIndexError(f"{what}: truncated ({count} records of {size} bytes at {offset})")
    return np.frombuffer(data, np.uint8, count * size, offset).reshape(count, size)


def le_columns(columns: np.ndarray) -> np.ndarray:
    """Little-endian unsigned integers of any width from 1 to 8 bytes, one per row."""
    rows, width = columns.shape
    if width == 8:
        return np.ascontiguousarray(columns).view("<u8").reshape(rows).astype(np.uint64)
    padded = np.zeros((rows, 8), np.uint8)
    padded[:, :width] = columns
    return padded.view("<u8").reshape(rows).astype(np.uint64)


def le_uint(data: bytes, pos: int, size: int) -> int:
    """The little-endian integer at ``data[pos:pos + size]``; 0 where ``data`` is too short."""
    return int.from_bytes(data[pos : pos + size], "little") if len(data) >= pos + size else 0


def enc_size(value: int) -> int:
    """Bytes libhdf5 uses to encode counts up to ``value`` (H5VM_limit_enc_size)."""
    return (max(value, 1).bit_length() - 1) // 8 + 1
