"""The one table between HDF5 filters and zarr v3 codecs.

For each HDF5 filter that a zarr codec can decode: the codec JSON to write for it (from
the filter's ``cd_values`` and the item size), used by the scanner; and for each such
zarr codec name, a bytes→bytes decoder (:class:`ChunkDecoder`, with the capabilities it
declares), used by the read engine (:mod:`h5lens.engine.kernel`) and the scanner's checks
of variable-length data (:mod:`h5lens.scan.global_heap`). A filter missing here has no codec: the scanner decodes the
data with h5py and stores it inline, it never skips the filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from h5lens.codecs import bitshuffle, blosc2, zfp
from h5lens.codecs.lzf import CODEC_NAME as LZF_CODEC_NAME
from h5lens.codecs.lzf import HDF5_FILTER_ID as LZF

# HDF5 filter ids (H5Zpublic.h and the registered-filter list).
DEFLATE = 1
SHUFFLE = 2
FLETCHER32 = 3
SZIP = 4
NBIT = 5
SCALEOFFSET = 6
BLOSC = 32001
ZSTD = 32015
BZIP2 = 307
LZ4 = 32004
BITSHUFFLE = bitshuffle.HDF5_FILTER_ID  # 32008
ZFP = zfp.HDF5_FILTER_ID  # 32013
BLOSC2 = blosc2.HDF5_FILTER_ID  # 32026

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
    305: "lzo",
    LZ4: "lz4",
    BITSHUFFLE: "bitshuffle",
    ZFP: "zfp",
    32017: "sz",
    # 32018 (FCIDECOMP) keeps HDF5's own name for it: tests/test_codec_guards.py uses it as
    # the example of a registered filter h5lens has no name for
    32024: "sz3",
    BLOSC2: "blosc2",
    32028: "sperr",
    32033: "htj2k",
}

Configure = Callable[[tuple[int, ...], int], "dict[str, Any] | None"]
Buffer = bytes | memoryview
Decode = Callable[[Any, int], Any]  # (stored bytes, decoded size) -> decoded bytes (any buffer)
Into = Callable[[Buffer, memoryview], None]
Many = Callable[[Sequence[Buffer]], list[Any]]


class ChunkDecoder:
    """One zarr codec of the table as a chunk decoder, with what it can do besides
    decoding a chunk to new bytes: the capabilities the read engine's kernel
    (:mod:`h5lens.engine.kernel`) uses, where it would otherwise need a loop per codec.

    ``decoder(data, nbytes)`` gives the decoded bytes of a chunk of ``nbytes`` decoded bytes
    (an upper bound, where only that is known); a decoder that can stop early never inflates
    past ``nbytes``, whatever the stream claims. ``many(nbytes)`` decodes many such chunks at
    once, bound to the size once per array: the cheapest way through them (small deflate
    chunks go through zlib's own function, with no Python between two of them).

    ``into`` writes a chunk straight into a buffer of its decoded size: no bytes object per
    chunk, no copy to join them (a 100 MB array of LZF chunks reads 25% faster). It raises
    ValueError unless the chunk decodes to exactly ``len(out)`` bytes, and pays from
    ``into_from`` decoded bytes (below, decoding to bytes and joining them is cheaper).

    ``head`` (a stream format that can stop early) writes only the first ``len(out)`` decoded
    bytes, for a read that needs nothing further in the chunk (a loader's block ending inside
    it); it raises ValueError when the stream holds fewer. It pays when fewer than
    ``head_pays_below`` of the chunk's bytes are needed; past that ``into`` is faster."""

    def __init__(
        self,
        decode: Decode,
        *,
        many: Callable[[int], Many] | None = None,
        into: Into | None = None,
        into_from: int = 0,
        head: Into | None = None,
        head_pays_below: float = 0.0,
    ) -> None:
        self._decode = decode
        self._many = many
        self.into = into
        self.into_from = into_from
        self.head = head
        self.head_pays_below = head_pays_below if head is not None else 0.0

    def __call__(self, data: Buffer, nbytes: int) -> Any:
        return self._decode(data, nbytes)

    def many(self, nbytes: int) -> Many:
        """This decoder for many chunks of ``nbytes`` decoded bytes: their stored bytes → their decoded bytes."""
        if self._many is not None:
            return self._many(nbytes)
        decode = self._decode
        return lambda datas: [decode(data, nbytes) for data in datas]


@dataclass(frozen=True)
class FilterCodec:
    """An HDF5 filter and the zarr v3 codec that decodes what it wrote."""

    filter_id: int
    codec: str  # the zarr v3 codec name
    configure: Configure  # (cd_values, itemsize) -> configuration, None if no codec can decode it

    def codec_json(self, cd_values: tuple[int, ...], itemsize: int) -> dict[str, Any] | None:
        configuration = self.configure(cd_values, itemsize)
        return None if configuration is None else {"name": self.codec, "configuration": configuration}


def _deflate(cd: tuple[int, ...], itemsize: int) -> dict[str, Any]:
    # HDF5 deflate writes a zlib stream, not gzip
    return {"level": cd[0] if cd else 6}


def _shuffle(cd: tuple[int, ...], itemsize: int) -> dict[str, Any]:
    # libhdf5 shuffles by the element size its set_local callback stored in cd_values[0]:
    # the whole HDF5 element (12 bytes for a ("<f4", (3,)) array type, not the base type's
    # 4), or whatever the writing library recorded (PyTables 1.x: 8 for 16-byte vlen descriptors)
    return {"elementsize": cd[0] if cd and cd[0] > 0 else itemsize}


def _no_configuration(cd: tuple[int, ...], itemsize: int) -> dict[str, Any]:
    return {}


_BLOSC_CNAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def _blosc(cd: tuple[int, ...], itemsize: int) -> dict[str, Any] | None:
    # cd_values: [filter rev, blosc version, typesize, chunk bytes, clevel, shuffle, compressor]
    # Only the frame matters for decoding; the configuration mirrors what wrote it.
    cname = _BLOSC_CNAMES.get(cd[6] if len(cd) > 6 else 0)
    if cname is None or cname == "snappy":  # numcodecs' blosc is built without snappy
        return None
    return {
        "cname": cname,
        "clevel": cd[4] if len(cd) > 4 else 5,
        "shuffle": _BLOSC_SHUFFLE.get(cd[5] if len(cd) > 5 else 1, "shuffle"),
        "typesize": itemsize,
        "blocksize": 0,
    }


def _bzip2(cd: tuple[int, ...], itemsize: int) -> dict[str, Any]:
    return {"level": cd[0] if cd else 9}


def _zstd(cd: tuple[int, ...], itemsize: int) -> dict[str, Any]:
    level = cd[0] if cd else 3
    if level >= 2**31:  # a negative level, stored as an unsigned cd_value
        level -= 2**32
    return {"level": level, "checksum": False}


def _lz4(cd: tuple[int, ...], itemsize: int) -> dict[str, Any]:
    # cd_values: (block size in bytes, 0 = the filter's default). Only encoding uses it:
    # every HDF5-LZ4 chunk carries its block size in its header.
    return {"blocksize": cd[0]} if cd and cd[0] > 0 else {}


def _szip(cd: tuple[int, ...], itemsize: int) -> dict[str, Any] | None:
    # The four cd_values HDF5's H5Z_set_local_szip stores; the chunk starts with HDF5's
    # 4-byte little-endian decoded size (imagecodecs' header=True).
    if len(cd) != 4:
        return None
    mask, pixels_per_block, bits_per_pixel, pixels_per_scanline = cd
    return {
        "options_mask": mask,
        "pixels_per_block": pixels_per_block,
        "bits_per_pixel": bits_per_pixel,
        "pixels_per_scanline": pixels_per_scanline,
        "header": True,
    }


def _bitshuffle(cd: tuple[int, ...], itemsize: int) -> dict[str, Any] | None:
    return bitshuffle.codec_configuration(cd)


def _blosc2(cd: tuple[int, ...], itemsize: int) -> dict[str, Any] | None:
    return blosc2.codec_configuration(cd)


def _zfp(cd: tuple[int, ...], itemsize: int) -> dict[str, Any] | None:
    return zfp.codec_configuration(cd)


FILTERS: dict[int, FilterCodec] = {
    f.filter_id: f
    for f in (
        FilterCodec(DEFLATE, "numcodecs.zlib", _deflate),
        FilterCodec(SHUFFLE, "numcodecs.shuffle", _shuffle),
        FilterCodec(FLETCHER32, "numcodecs.fletcher32", _no_configuration),
        FilterCodec(LZF, LZF_CODEC_NAME, _no_configuration),
        FilterCodec(BLOSC, "blosc", _blosc),
        FilterCodec(ZSTD, "zstd", _zstd),
        FilterCodec(BZIP2, "numcodecs.bz2", _bzip2),
        # imagecodecs' zarr codecs (imagecodecs-zarr entry points): names other readers know
        FilterCodec(LZ4, "imagecodecs_lz4h5", _lz4),
        FilterCodec(SZIP, "imagecodecs_szip", _szip),
        # h5lens's own, for formats no published codec reads (see their modules)
        FilterCodec(BITSHUFFLE, bitshuffle.CODEC_NAME, _bitshuffle),
        FilterCodec(BLOSC2, blosc2.CODEC_NAME, _blosc2),
        FilterCodec(ZFP, zfp.CODEC_NAME, _zfp),
    )
}


def _numcodecs(codec_id: str, keep: tuple[str, ...]) -> Callable[[dict[str, Any], int], Decode]:
    def make(configuration: dict[str, Any], itemsize: int) -> Decode:
        import numcodecs

        config = {k: configuration[k] for k in keep if k in configuration}
        if codec_id == "shuffle":
            config = {"elementsize": configuration.get("elementsize", itemsize)}
        codec = numcodecs.get_codec({"id": codec_id, **config})
        return lambda data, nbytes: codec.decode(data)

    return make


# Decoded chunk size (bytes) from which libdeflate beats zlib (measured: 400 B zlib 4.2 µs
# against 8.7; 4 KB 36 µs against 23).
_LIBDEFLATE_FROM = 2048
# Stored streams shorter than this are inflated whole by one call, unbounded: deflate
# expands at most 1032 times, so at most 64 MB; longer ones never past the chunk's size.
_WHOLE_BELOW = 64 << 10


def _zlib(configuration: dict[str, Any], itemsize: int) -> ChunkDecoder:
    import zlib

    from imagecodecs import deflate_decode

    streams, pays_below = _head_inflater()

    # zlib's verdict (and message) is the one libhdf5 would give; at most ``nbytes`` inflated
    def bounded(data: Buffer, nbytes: int) -> bytes:
        stream = zlib.decompressobj()
        decoded = stream.decompress(data, nbytes + 1)
        if len(decoded) > nbytes:
            raise ValueError(f"the stream inflates past the {nbytes} bytes of a chunk")
        if not stream.eof:
            raise ValueError("incomplete or truncated stream")
        return decoded

    # libdeflate (through imagecodecs) inflates a chunk of known size up to twice as fast
    # as zlib, without the GIL, but its call costs about 5 µs more: below a few KB zlib is
    # faster (400 B chunks: 4 µs against 9). A stream libdeflate refuses goes to zlib.
    def decode(data: Buffer, nbytes: int) -> bytes:
        if nbytes >= _LIBDEFLATE_FROM:
            try:
                return deflate_decode(data, out=nbytes)  # type: ignore[return-value]  # bytes when out is a size
            except Exception:  # noqa: BLE001 - zlib decides
                pass
        return bounded(data, nbytes)

    def many(nbytes: int) -> Many:
        if nbytes >= _LIBDEFLATE_FROM:
            return lambda datas: [decode(data, nbytes) for data in datas]
        whole = streams.decompress  # zlib-ng's: 8% faster than CPython's on 400 B chunks

        def small(datas: Sequence[Buffer]) -> list[Any]:
            if max(map(len, datas), default=0) < _WHOLE_BELOW:
                return list(map(whole, datas))
            return [bounded(data, nbytes) for data in datas]

        return small

    def into(data: Buffer, out: memoryview) -> None:
        if len(out) >= _LIBDEFLATE_FROM:
            try:
                written = len(deflate_decode(data, out=out))
            except Exception:  # noqa: BLE001 - zlib decides
                written = -1
            if written == len(out):
                return
        _copy_exact(bounded(data, len(out)), out)

    def head(data: Buffer, out: memoryview) -> None:
        if not out:
            return  # (a max_length of 0 is no limit at all)
        decoded = streams.decompressobj().decompress(data, len(out))
        if len(decoded) != len(out):
            raise ValueError(f"decoded to {len(decoded)} bytes; at least {len(out)} were needed")
        out[:] = decoded

    return ChunkDecoder(
        decode, many=many, into=into, into_from=_LIBDEFLATE_FROM, head=head, head_pays_below=pays_below
    )


def _head_inflater() -> tuple[Any, float]:
    """The zlib-compatible module whose ``decompressobj`` inflates only a chunk's first
    bytes, and below what share of the chunk that beats libdeflate inflating all of it.

    libdeflate cannot stop early. zlib-ng inflates at about two thirds of its speed, so it
    wins when under about 55% of the chunk is needed (measured on anndata's gzip chunks of
    X/data and X/indices: break-even at 50% for indices, 70% for data); CPython's zlib, at
    a third of libdeflate's speed, below about 35%. A loader's 32-row blocks end inside an
    h5ad's chunk of about 240 rows at a uniform place: at 10^6 cells a preload inflated 58
    ms of one core whole, 46 ms this way."""
    try:
        from zlib_ng import zlib_ng

        return zlib_ng, 0.55
    except ImportError:  # an optional speed-up: CPython's zlib reads the same streams
        import zlib

        return zlib, 0.35


def _copy_exact(decoded: bytes | memoryview, out: memoryview) -> None:
    if len(decoded) != len(out):
        raise ValueError(f"decoded to {len(decoded)} bytes; a chunk holds {len(out)}")
    out[:] = decoded


def _hdf5_shuffle(configuration: dict[str, Any], itemsize: int) -> Decode:
    from h5lens.codecs.shuffle import unshuffle

    elementsize = configuration.get("elementsize", itemsize)
    return lambda data, nbytes: unshuffle(data, elementsize)


def _lzf(configuration: dict[str, Any], itemsize: int) -> ChunkDecoder:
    from h5lens.codecs.lzf import decode_hdf5_lzf, decode_hdf5_lzf_into

    return ChunkDecoder(decode_hdf5_lzf, into=decode_hdf5_lzf_into)


def _imagecodecs_lz4h5(configuration: dict[str, Any], itemsize: int) -> Decode:
    def decode(data: bytes, nbytes: int) -> bytes:
        import imagecodecs

        return bytes(imagecodecs.lz4h5_decode(data))

    return decode


def _imagecodecs_szip(configuration: dict[str, Any], itemsize: int) -> Decode:
    keys = ("options_mask", "pixels_per_block", "bits_per_pixel", "pixels_per_scanline", "header")
    params = {k: configuration[k] for k in keys if k in configuration}

    def decode(data: bytes, nbytes: int) -> bytes:
        import imagecodecs

        return bytes(imagecodecs.szip_decode(data, **params))

    return decode


def _h5lens_bitshuffle(configuration: dict[str, Any], itemsize: int) -> Decode:
    codec = bitshuffle.BitshuffleCodec.from_dict({"name": bitshuffle.CODEC_NAME, "configuration": configuration})
    return lambda data, nbytes: bitshuffle.decode_hdf5_bitshuffle(
        data, codec.elementsize, codec.blocksize, codec.compression
    )


def _h5lens_blosc2(configuration: dict[str, Any], itemsize: int) -> Decode:
    return lambda data, nbytes: blosc2.decode_hdf5_blosc2(data)


def _h5lens_zfp(configuration: dict[str, Any], itemsize: int) -> Decode:
    codec = zfp.ZFPCodec.from_dict({"name": zfp.CODEC_NAME, "configuration": configuration})
    return lambda data, nbytes: zfp.decode_hdf5_zfp(data, codec.header, nbytes)


# zarr v3 codec name -> decoder factory (configuration, itemsize): every codec the table
# writes, plus zstd for arrays h5lens compresses inline.
DECODERS: dict[str, Callable[[dict[str, Any], int], Decode | ChunkDecoder]] = {
    "numcodecs.zlib": _zlib,
    # numcodecs' shuffle on whole elements is HDF5's (numcodecs refuses a remainder; HDF5
    # keeps it): the numpy transpose, several times faster than numcodecs on small chunks
    "numcodecs.shuffle": _hdf5_shuffle,
    "numcodecs.fletcher32": _numcodecs("fletcher32", ()),
    "numcodecs.bz2": _numcodecs("bz2", ("level",)),
    "zstd": _numcodecs("zstd", ("level",)),
    "blosc": _numcodecs("blosc", ("cname", "clevel")),
    LZF_CODEC_NAME: _lzf,
    "h5lens.shuffle": _hdf5_shuffle,
    "imagecodecs_lz4h5": _imagecodecs_lz4h5,
    "imagecodecs_szip": _imagecodecs_szip,
    bitshuffle.CODEC_NAME: _h5lens_bitshuffle,
    blosc2.CODEC_NAME: _h5lens_blosc2,
    zfp.CODEC_NAME: _h5lens_zfp,
}


def decoder(codec: Mapping[str, Any], itemsize: int) -> ChunkDecoder | None:
    """The bytes→bytes decoder for one zarr v3 codec JSON; None for a codec not in the table."""
    make = DECODERS.get(codec.get("name", ""))
    if make is None:
        return None
    found = make(dict(codec.get("configuration") or {}), itemsize)
    return found if isinstance(found, ChunkDecoder) else ChunkDecoder(found)
