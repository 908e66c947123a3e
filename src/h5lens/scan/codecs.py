"""HDF5 filter pipeline → zarr v3 codecs.

A table from HDF5 filter id to a translator. A translator returns the zarr v3
codec JSON that decodes what the filter wrote, or ``None`` when no zarr codec
can (then the dataset's values are decoded by h5py and stored inline). An
unknown filter id is never skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py

# HDF5 filter ids (H5Zpublic.h and the registered-filter list).
DEFLATE = 1
SHUFFLE = 2
FLETCHER32 = 3
SZIP = 4
NBIT = 5
SCALEOFFSET = 6
LZF = 32000
BLOSC = 32001
ZSTD = 32015
BZIP2 = 307

FILTER_NAMES = {
    DEFLATE: "deflate",
    SHUFFLE: "shuffle",
    FLETCHER32: "fletcher32",
    SZIP: "szip",
    NBIT: "nbit",
    SCALEOFFSET: "scaleoffset",
    LZF: "lzf",
    BLOSC: "blosc",
    BZIP2: "bzip2",
    32004: "lz4",
    32008: "bitshuffle",
    32017: "sz",
    32024: "sz3",
    32026: "blosc2",
    32013: "zfp",
}


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


def _deflate(f: Filter, itemsize: int) -> dict[str, Any]:
    level = f.cd_values[0] if f.cd_values else 6
    return {"name": "numcodecs.zlib", "configuration": {"level": level}}


def _shuffle(f: Filter, itemsize: int) -> dict[str, Any]:
    return {"name": "numcodecs.shuffle", "configuration": {"elementsize": itemsize}}


def _fletcher32(f: Filter, itemsize: int) -> dict[str, Any]:
    return {"name": "numcodecs.fletcher32", "configuration": {}}


def _lzf(f: Filter, itemsize: int) -> dict[str, Any]:
    from h5lens.codecs.lzf import codec_json

    return codec_json()


_BLOSC_CNAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def _blosc(f: Filter, itemsize: int) -> dict[str, Any] | None:
    # cd_values: [filter rev, blosc version, typesize, chunk bytes, clevel, shuffle, compressor]
    # Only the frame matters for decoding; the configuration mirrors what wrote it.
    cd = f.cd_values
    clevel = cd[4] if len(cd) > 4 else 5
    shuffle = _BLOSC_SHUFFLE.get(cd[5] if len(cd) > 5 else 1, "shuffle")
    cname = _BLOSC_CNAMES.get(cd[6] if len(cd) > 6 else 0)
    if cname is None or cname == "snappy":
        return None
    return {
        "name": "blosc",
        "configuration": {
            "cname": cname,
            "clevel": clevel,
            "shuffle": shuffle,
            "typesize": itemsize,
            "blocksize": 0,
        },
    }


def _bzip2(f: Filter, itemsize: int) -> dict[str, Any]:
    level = f.cd_values[0] if f.cd_values else 9
    return {"name": "numcodecs.bz2", "configuration": {"level": level}}


def _zstd(f: Filter, itemsize: int) -> dict[str, Any]:
    level = f.cd_values[0] if f.cd_values else 3
    if level >= 2**31:
        level -= 2**32
    return {"name": "zstd", "configuration": {"level": level, "checksum": False}}


TRANSLATORS: dict[int, Callable[[Filter, int], dict[str, Any] | None]] = {
    DEFLATE: _deflate,
    SHUFFLE: _shuffle,
    FLETCHER32: _fletcher32,
    LZF: _lzf,
    BLOSC: _blosc,
    ZSTD: _zstd,
    BZIP2: _bzip2,
}


def translate_pipeline(filters: list[Filter], itemsize: int) -> list[dict[str, Any]] | None:
    """zarr v3 bytes→bytes codecs for ``filters``, or ``None`` if any has no zarr codec."""
    codecs = []
    for f in filters:
        translator = TRANSLATORS.get(f.id)
        if translator is None:
            return None
        codec = translator(f, itemsize)
        if codec is None:
            return None
        codecs.append(codec)
    return codecs


def ambiguous_length(filters: list[Filter], chunk_nbytes: int) -> int | None:
    """A stored chunk length that the pipeline's codecs cannot tell apart from a skipped filter.

    HDF5's LZF filter may write a compressed chunk exactly as long as the data; the LZF
    codec reads a chunk of that length as stored uncompressed. Such chunks are re-encoded.
    """
    if not any(f.id == LZF for f in filters):
        return None
    return chunk_nbytes + (4 if any(f.id == FLETCHER32 for f in filters) else 0)


def untranslatable(filters: list[Filter], itemsize: int) -> list[Filter]:
    """The filters of ``filters`` that have no zarr codec (for messages)."""
    return [f for f in filters if TRANSLATORS.get(f.id) is None or TRANSLATORS[f.id](f, itemsize) is None]
