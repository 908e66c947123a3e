"""Text arrays (zarr ``string`` with the ``vlen-utf8`` codec alone), decoded by h5lens.

HDF5 variable-length strings become such arrays, their chunks inline in the manifest: an
AnnData's obs and var names, its categories, its text columns. zarr reads each through its
per-chunk pipeline and event loop; as a :class:`TextCodec` a region of one is read by the
decode kernel (:mod:`h5lens.engine.kernel`) as a region of numbers is, each chunk decoded by
numcodecs' ``VLenUTF8`` as zarr's ``vlen-utf8`` codec decodes it, into ``object`` values
(zarr's ``string`` type converts them to its own). It declares none of the capabilities of
an :class:`~h5lens.engine.codec.ArrayCodec`: its chunks are decoded one by one, on one thread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from h5lens.format import convention
from h5lens.manifest.checks import vlen_count_problem
from h5lens.manifest.documents import ArrayDocument


@dataclass(frozen=True)
class TextCodec:
    """How the chunks of one text array decode: each a vlen-utf8 run of its ``chunk_shape``
    items. ``chunk_nbytes`` is 0: its chunks are never shared out between threads."""

    path: str
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    fill: str
    dtype: np.dtype = field(default=np.dtype(object))
    stored: np.dtype = field(default=np.dtype(object))
    chunk_nbytes = 0
    streams = False
    into = None
    head = None
    head_below = 0
    unshuffle = 0
    cache = None

    @cached_property
    def decoded_len(self) -> int:
        """The items of one chunk out of :meth:`decode`."""
        return math.prod(self.chunk_shape)

    @cached_property
    def _vlen(self) -> Any:
        from numcodecs import VLenUTF8

        return VLenUTF8()

    def decode(self, data: bytes | memoryview) -> np.ndarray:
        """One chunk's stored bytes → its strings (a ValueError if it does not hold a whole chunk)."""
        # numcodecs allocates the item count it reads before reading an item: checked first
        problem = vlen_count_problem(data, self.decoded_len)
        if problem is not None:
            raise ValueError(f"{problem}; the manifest or its source is damaged")
        return self._vlen.decode(data)

    def decode_many(self, datas: Sequence[bytes | memoryview]) -> list[np.ndarray]:
        return list(map(self.decode, datas))

    def values_of(self, decoded: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        """Chunks' strings → their values ``(n, *chunk_shape)`` (into ``out`` if given)."""
        if out is None:
            out = np.empty((len(decoded), *self.chunk_shape), dtype=object)
        rows = out.reshape(len(decoded), -1)
        for row, strings in enumerate(decoded):
            rows[row] = strings
        return out


def text_codec(path: str, doc: Mapping[str, Any]) -> TextCodec | None:
    """The :class:`TextCodec` of the array whose ``zarr.json`` is ``doc``; None unless it is
    a ``string`` array of at least one dimension whose only codec is ``vlen-utf8``."""
    view = ArrayDocument.of(doc)
    if view is None or view.data_type != "string" or not view.shape or view.edges is not None:
        return None
    if view.attributes.get(convention.SCALAR) or not isinstance(view.fill_value, str):
        return None  # what zarr makes of another fill value is zarr's to say
    if [codec.get("name") for codec in view.codecs] != ["vlen-utf8"]:
        return None
    return TextCodec(path=path, shape=view.shape, chunk_shape=view.chunk_shape, fill=view.fill_value)


__all__ = ["TextCodec", "text_codec"]
