"""zarr v3 codecs h5lens provides for HDF5 filters that zarr and numcodecs lack."""

from __future__ import annotations

from h5lens.codecs.lzf import CODEC_NAME as LZF_CODEC_NAME
from h5lens.codecs.lzf import LZFCodec
from h5lens.codecs.lzf import register as register_lzf

__all__ = ["LZF_CODEC_NAME", "LZFCodec", "register", "register_lzf"]


def register() -> None:
    """Register every h5lens codec with zarr (idempotent)."""
    register_lzf()
