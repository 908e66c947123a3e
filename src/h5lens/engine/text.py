"""Regions of text arrays (zarr ``string`` with the ``vlen-utf8`` codec alone), decoded by h5lens.

HDF5 variable-length strings become such arrays, their chunks inline in the manifest: an
AnnData's obs and var names, its categories, its text columns. zarr reads each through its
per-chunk pipeline and event loop; as a :class:`TextCodec` a region of one is assembled as
a region of numbers is (:func:`h5lens.engine.bulk.assemble`), each chunk decoded by
numcodecs' ``VLenUTF8`` as zarr's ``vlen-utf8`` codec decodes it, into ``object`` values
(zarr's ``string`` type converts them to its own).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5lens import convention
from h5lens.errors import SourceReadError
from h5lens.manifest.checks import vlen_count_problem
from h5lens.manifest.documents import ArrayDocument


@dataclass(frozen=True)
class TextCodec:
    """How the chunks of one text array decode: each a vlen-utf8 run of its ``chunk_shape``
    items. ``chunk_nbytes`` is 0: its chunks are never decoded one by one into place."""

    path: str
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    fill: str
    dtype: np.dtype = field(default=np.dtype(object))
    chunk_nbytes: int = 0

    def values(self, flats: list[int], payloads: Mapping[int, bytes | memoryview], describe: Callable[[int], str]) -> np.ndarray:
        """The values of chunks ``flats`` (all in ``payloads``), ``(n, *chunk_shape)``; a
        chunk that does not hold a whole chunk of text raises SourceReadError naming it."""
        from numcodecs import VLenUTF8

        codec = VLenUTF8()
        items = math.prod(self.chunk_shape)
        out = np.empty((len(flats), items), dtype=object)
        for row, flat in enumerate(flats):
            # numcodecs allocates the item count it reads before reading an item: checked first
            problem = vlen_count_problem(payloads[flat], items)
            if problem is not None:
                raise SourceReadError(f"{describe(flat)}: {problem}; the manifest or its source is damaged")
            try:
                decoded = codec.decode(payloads[flat])
            except Exception as e:  # noqa: BLE001 - any refusal, named with its chunk
                raise SourceReadError(f"{describe(flat)} does not decode ({type(e).__name__}: {e})") from e
            if len(decoded) != items:
                raise SourceReadError(f"{describe(flat)} does not decode (to {len(decoded)} strings; a chunk holds {items})")
            out[row] = decoded
        return out.reshape(len(flats), *self.chunk_shape)


def text_codec(path: str, doc: Mapping[str, Any]) -> TextCodec | None:
    """The :class:`TextCodec` of the array whose ``zarr.json`` is ``doc``; None unless it is
    a ``string`` array of at least one dimension whose only codec is ``vlen-utf8``."""
    view = ArrayDocument.of(doc)
    if view is None or view.data_type != "string" or not view.shape:
        return None
    if view.attributes.get(convention.SCALAR) or not isinstance(view.fill_value, str):
        return None  # what zarr makes of another fill value is zarr's to say
    if [codec.get("name") for codec in view.codecs] != ["vlen-utf8"]:
        return None
    return TextCodec(path=path, shape=view.shape, chunk_shape=view.chunk_shape, fill=view.fill_value)


__all__ = ["TextCodec", "text_codec"]
