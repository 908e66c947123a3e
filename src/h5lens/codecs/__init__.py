"""zarr v3 codecs h5lens provides for HDF5 filters that zarr and numcodecs lack."""

from __future__ import annotations

from h5lens.codecs.lzf import CODEC_NAME as LZF_CODEC_NAME
from h5lens.codecs.lzf import LZFCodec
from h5lens.codecs.lzf import register as register_lzf
from h5lens.codecs.shuffle import CODEC_NAME as SHUFFLE_CODEC_NAME
from h5lens.codecs.shuffle import HDF5ShuffleCodec
from h5lens.codecs.shuffle import register as register_shuffle

__all__ = [
    "LZF_CODEC_NAME",
    "SHUFFLE_CODEC_NAME",
    "HDF5ShuffleCodec",
    "LZFCodec",
    "register",
    "register_lzf",
    "register_shuffle",
]


def register() -> None:
    """Register every h5lens codec with zarr (idempotent)."""
    register_lzf()
    register_shuffle()
