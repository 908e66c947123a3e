"""HDF5 filter pipeline → zarr v3 codecs, through the one filter table (:mod:`h5lens.codecs.table`).

A filter with no zarr codec (or a configuration none can decode) makes the pipeline
untranslatable: the dataset's values are decoded by h5py and stored inline. An
unknown filter id is never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h5py

from h5lens.codecs.shuffle import codec_json as shuffle_codec_json
from h5lens.codecs.table import FILTER_NAMES, FILTERS, FLETCHER32, LZF, SHUFFLE, ZFP


@dataclass(frozen=True)
class Filter:
    """One stage of a dataset's HDF5 filter pipeline."""

    id: int
    flags: int
    cd_values: tuple[int, ...]
    name: str

    @property
    def label(self) -> str:
        return f"{FILTER_NAMES.get(self.id, self.name or 'unknown')} (id {self.id})"


def read_pipeline(dcpl: h5py.h5p.PropDCID) -> list[Filter]:
    """The filters of a dataset creation property list, in pipeline (write) order."""
    filters = []
    for index in range(dcpl.get_nfilters()):
        filter_id, flags, cd_values, name = dcpl.get_filter(index)
        filters.append(
            Filter(
                int(filter_id),
                int(flags),
                tuple(int(v) for v in cd_values),
                name.decode("ascii", "replace") if isinstance(name, bytes) else str(name),
            )
        )
    return filters


def translate_pipeline(filters: list[Filter], itemsize: int) -> list[dict[str, Any]] | None:
    """zarr v3 bytes→bytes codecs for ``filters``, or ``None`` if any has no zarr codec.

    A shuffle after a filter that changes the length (netCDF-C writes fletcher32 first)
    may see a buffer that is not whole elements, which HDF5 shuffles up to a remainder
    and numcodecs refuses: there it is ``h5lens.shuffle``, which keeps HDF5's rule."""
    codecs = []
    for position, f in enumerate(filters):
        if f.id == SHUFFLE and any(g.id != SHUFFLE for g in filters[:position]):
            codecs.append(shuffle_codec_json(f.cd_values[0] if f.cd_values and f.cd_values[0] > 0 else itemsize))
            continue
        known = FILTERS.get(f.id)
        codec = None if known is None else known.codec_json(f.cd_values, itemsize)
        if codec is None:
            return None
        codecs.append(codec)
    return codecs


def ambiguous_length(filters: list[Filter], chunk_nbytes: int) -> int | None:
    """A stored chunk length that the pipeline's codecs cannot tell apart from a skipped filter.

    HDF5's LZF filter may write a compressed chunk exactly as long as the data, and so
    may H5Z-ZFP (a fixed rate of the type's own bits, or by chance); the LZF and ZFP
    codecs read a chunk of that length as stored uncompressed. Such chunks are re-encoded.
    """
    if not any(f.id in (LZF, ZFP) for f in filters):
        return None
    return chunk_nbytes + (4 if any(f.id == FLETCHER32 for f in filters) else 0)


def untranslatable(filters: list[Filter], itemsize: int) -> list[Filter]:
    """The filters of ``filters`` that have no zarr codec (for messages)."""
    return [f for f in filters if f.id not in FILTERS or FILTERS[f.id].codec_json(f.cd_values, itemsize) is None]
