"""zarr v3 codecs h5lens provides for HDF5 filters that zarr and numcodecs lack.

HDF5-LZ4 and SZIP chunks use imagecodecs' codecs (``imagecodecs_lz4h5``,
``imagecodecs_szip``), which zarr finds through the imagecodecs-zarr entry points.
"""

from __future__ import annotations

from h5lens.codecs.bitfield import CODEC_NAME as BITFIELD_CODEC_NAME
from h5lens.codecs.bitfield import BitfieldCodec
from h5lens.codecs.bitfield import register as register_bitfield
from h5lens.codecs.bitshuffle import CODEC_NAME as BITSHUFFLE_CODEC_NAME
from h5lens.codecs.bitshuffle import BitshuffleCodec
from h5lens.codecs.bitshuffle import register as register_bitshuffle
from h5lens.codecs.blosc2 import CODEC_NAME as BLOSC2_CODEC_NAME
from h5lens.codecs.blosc2 import Blosc2Codec
from h5lens.codecs.blosc2 import register as register_blosc2
from h5lens.codecs.file_columns import register as register_file_columns
from h5lens.codecs.lzf import CODEC_NAME as LZF_CODEC_NAME
from h5lens.codecs.lzf import LZFCodec
from h5lens.codecs.lzf import register as register_lzf
from h5lens.codecs.per_file import CODEC_NAME as PER_FILE_CODEC_NAME
from h5lens.codecs.per_file import PerFileEncodingCodec
from h5lens.codecs.per_file import register as register_per_file
from h5lens.codecs.shuffle import CODEC_NAME as SHUFFLE_CODEC_NAME
from h5lens.codecs.shuffle import HDF5ShuffleCodec
from h5lens.codecs.shuffle import register as register_shuffle
from h5lens.codecs.spacepad import CODEC_NAME as SPACEPAD_CODEC_NAME
from h5lens.codecs.spacepad import SpacePadCodec
from h5lens.codecs.spacepad import register as register_spacepad
from h5lens.codecs.zfp import CODEC_NAME as ZFP_CODEC_NAME
from h5lens.codecs.zfp import ZFPCodec
from h5lens.codecs.zfp import register as register_zfp

__all__ = [
    "BITFIELD_CODEC_NAME",
    "BITSHUFFLE_CODEC_NAME",
    "BLOSC2_CODEC_NAME",
    "LZF_CODEC_NAME",
    "PER_FILE_CODEC_NAME",
    "SHUFFLE_CODEC_NAME",
    "SPACEPAD_CODEC_NAME",
    "ZFP_CODEC_NAME",
    "BitfieldCodec",
    "BitshuffleCodec",
    "Blosc2Codec",
    "HDF5ShuffleCodec",
    "LZFCodec",
    "PerFileEncodingCodec",
    "SpacePadCodec",
    "ZFPCodec",
    "register",
    "register_bitfield",
    "register_bitshuffle",
    "register_blosc2",
    "register_lzf",
    "register_per_file",
    "register_shuffle",
    "register_spacepad",
    "register_zfp",
]


def register() -> None:
    """Register every h5lens codec with zarr (idempotent)."""
    register_lzf()
    register_shuffle()
    register_bitshuffle()
    register_blosc2()
    register_zfp()
    register_bitfield()
    register_spacepad()
    register_file_columns()
    register_per_file()
