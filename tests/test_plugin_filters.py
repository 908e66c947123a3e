"""hdf5plugin filters: chunks referenced by byte range, decoded by zarr codecs, equal to h5py.

h5py + hdf5plugin is the oracle. One file holds a dataset per filter and option set
(LZ4, bitshuffle, Blosc2, SZIP, ZFP, edge chunks, chunks HDF5 stored without the
filter); it is indexed once. Each dataset must be *referenced* (its chunks byte ranges
of the file, not copies) and read, through ``h5lens.open_group`` and through plain
fsspec + zarr, exactly what h5py reads. Filters without a codec stay materialised.

Codec-level tests decode the raw chunk bytes (``read_direct_chunk``) through the codec
table's decoders and through zarr arrays over those bytes, and write encoded chunks back
with ``write_direct_chunk`` for hdf5plugin to read.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import h5py
import hdf5plugin
import numpy as np
import pytest
import zarr
import zarr.storage
from zarr.core.buffer import cpu
from zarr.core.dtype import parse_dtype
from zarr.storage import MemoryStore

import h5lens
from h5lens.codecs import bitshuffle as bshuf_mod
from h5lens.codecs import blosc2 as blosc2_mod
from h5lens.codecs import register
from h5lens.codecs import zfp as zfp_mod
from h5lens.codecs.table import FILTERS, decoder
from h5lens.manifest.model import INLINE

RNG = np.random.default_rng(20260101)
COMPOUND12 = np.dtype([("a", "<i4"), ("b", "<i4"), ("c", "<f4")])

# name -> (shape, chunks, dtype, filter options, data kind)
DATASETS: dict[str, tuple[tuple[int, ...], tuple[int, ...], Any, dict[str, Any], str]] = {
    "lz4/default_i4_2d": ((50, 37), (16, 16), "<i4", dict(hdf5plugin.LZ4()), "smooth"),
    "lz4/nbytes1024_be_f8": ((3000,), (700,), ">f8", dict(hdf5plugin.LZ4(nbytes=1024)), "smooth"),
    "lz4/nbytes100_random_u1": ((5000,), (1024,), "u1", dict(hdf5plugin.LZ4(nbytes=100)), "random"),
    "blosc2/default_1d_f8": ((1000,), (300,), "<f8", dict(hdf5plugin.Blosc2()), "smooth"),
    "blosc2/zstd_bitshuffle_2d_i2": (
        (50, 37),
        (16, 16),
        "<i2",
        dict(hdf5plugin.Blosc2(cname="zstd", clevel=5, filters=hdf5plugin.Blosc2.BITSHUFFLE)),
        "smooth",
    ),
    "blosc2/zstd_bitshuffle_1d_u2": (
        (1000,),
        (256,),
        "<u2",
        dict(hdf5plugin.Blosc2(cname="zstd", clevel=5, filters=hdf5plugin.Blosc2.BITSHUFFLE)),
        "smooth",
    ),
    "blosc2/lz4_noshuffle_3d_be_f4": (
        (9, 10, 11),
        (4, 5, 6),
        ">f4",
        dict(hdf5plugin.Blosc2(cname="lz4", filters=hdf5plugin.Blosc2.NOFILTER)),
        "smooth",
    ),
    "blosc2/random_1d_u1": ((4000,), (1024,), "u1", dict(hdf5plugin.Blosc2()), "random"),
    "blosc2/compound_2d": ((20, 9), (8, 4), COMPOUND12, dict(hdf5plugin.Blosc2()), "random"),
    "szip/nn8_le_i2": ((60, 37), (16, 16), "<i2", {"compression": "szip", "compression_opts": ("nn", 8)}, "ints"),
    "szip/nn16_be_u2": ((1000,), (300,), ">u2", {"compression": "szip", "compression_opts": ("nn", 16)}, "ints"),
    "szip/nn32_le_f8": ((60, 37), (16, 16), "<f8", {"compression": "szip", "compression_opts": ("nn", 32)}, "ints"),
    "szip/ec16_le_i4": ((1000,), (300,), "<i4", {"compression": "szip", "compression_opts": ("ec", 16)}, "ints"),
    "szip/ec32_be_f4": ((60, 37), (16, 16), ">f4", {"compression": "szip", "compression_opts": ("ec", 32)}, "ints"),
    "szip/nn16_be_i8": ((1000,), (300,), ">i8", {"compression": "szip", "compression_opts": ("nn", 16)}, "ints"),
    # szip "ec" cannot shrink some uint8 chunks: HDF5 stores them raw, with a filter mask
    "szip/ec8_u1_masked": ((60, 37), (16, 16), "u1", {"compression": "szip", "compression_opts": ("ec", 8)}, "random"),
    "zfp/reversible_2d_f4": ((37, 29), (13, 11), "<f4", dict(hdf5plugin.Zfp(reversible=True)), "smooth"),
    "zfp/rate8_1d_f8": ((1000,), (300,), "<f8", dict(hdf5plugin.Zfp(rate=8)), "smooth"),
    "zfp/precision20_3d_i4": ((9, 10, 11), (4, 5, 6), "<i4", dict(hdf5plugin.Zfp(precision=20)), "smooth"),
    "zfp/accuracy_2d_be_f4": ((37, 29), (13, 11), ">f4", dict(hdf5plugin.Zfp(accuracy=1e-3)), "smooth"),
    "zfp/reversible_4d_i8": ((5, 6, 7, 3), (4, 4, 4, 2), "<i8", dict(hdf5plugin.Zfp(reversible=True)), "smooth"),
}
for _cname in ("none", "lz4", "zstd"):
    for _nelems in (0, 16):
        for _tag, _dtype, _shape, _chunks in (
            ("u1", "u1", (1000,), (333,)),
            ("le_i2_2d", "<i2", (37, 29), (13, 11)),
            ("be_u4", ">u4", (1000,), (333,)),
            ("le_f8", "<f8", (5000,), (4099,)),
            ("c16", "<c16", (300,), (77,)),
            ("compound12", COMPOUND12, (300,), (77,)),
        ):
            DATASETS[f"bitshuffle/{_cname}_{_nelems}_{_tag}"] = (
                _shape,
                _chunks,
                _dtype,
                dict(hdf5plugin.Bitshuffle(nelems=_nelems, cname=_cname)),
                "smooth",
            )

ARRAY_TYPED = [
    ("bitshuffle/array_type_lz4", (100,), (30,), dict(hdf5plugin.Bitshuffle(cname="lz4"))),
    ("blosc2/array_type_2d", (20, 10), (8, 4), dict(hdf5plugin.Blosc2(cname="zstd"))),
    ("lz4/array_type", (100,), (30,), dict(hdf5plugin.LZ4())),
]

# the codec name each group must be referenced through
CODECS = {
    "lz4": "imagecodecs_lz4h5",
    "bitshuffle": "h5lens.bitshuffle",
    "blosc2": "h5lens.blosc2",
    "szip": "imagecodecs_szip",
    "zfp": "h5lens.zfp",
    "masked": None,  # per dataset below
}

# chunks HDF5 stored without the filter (write_direct_chunk with filter_mask=1)
MASKED = {
    "masked/lz4": (dict(hdf5plugin.LZ4()), "imagecodecs_lz4h5"),
    "masked/bitshuffle_lz4": (dict(hdf5plugin.Bitshuffle(cname="lz4")), "h5lens.bitshuffle"),
    "masked/bitshuffle_none": (dict(hdf5plugin.Bitshuffle(cname="none")), "h5lens.bitshuffle"),
    "masked/blosc2": (dict(hdf5plugin.Blosc2(cname="zstd")), "h5lens.blosc2"),
    "masked/zfp_rate": (dict(hdf5plugin.Zfp(rate=8)), "h5lens.zfp"),  # lossy: the raw chunk must stay exact
    "masked/szip": ({"compression": "szip", "compression_opts": ("nn", 8)}, "imagecodecs_szip"),
}

# filters h5lens has no codec for: decoded by h5py and stored inline
MATERIALISED = {
    "other/sz3": (dict(hdf5plugin.SZ3(absolute=1e-3)), "<f4"),
    "other/zfp_expert_mode": (dict(hdf5plugin.Zfp(minbits=1, maxbits=4000, maxprec=40, minexp=-200)), "<f4"),
}


def _values(shape: tuple[int, ...], dtype: Any, kind: str, seed: int) -> np.ndarray:
    dt = np.dtype(dtype)
    n = math.prod(shape)
    rng = np.random.default_rng(seed)
    if kind == "random" or dt.kind == "V":
        return np.frombuffer(rng.bytes(n * dt.itemsize), dtype=dt).reshape(shape).copy()
    smooth = np.sin(np.arange(n) / 17.0) * 1000 + rng.normal(size=n)
    if kind == "ints":  # whole numbers, which szip compresses in any type
        smooth = np.round(np.sin(np.arange(n) / 17.0) * 100)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        smooth = np.clip(np.abs(smooth) if dt.kind == "u" else smooth, info.min, info.max)
    if dt.kind == "c":
        return (smooth + 1j * smooth[::-1]).astype(dt).reshape(shape)
    return smooth.astype(dt).reshape(shape)


def build(path: Path) -> None:
    with h5py.File(path, "w") as f:
        for seed, (name, (shape, chunks, dtype, opts, kind)) in enumerate(DATASETS.items()):
            f.create_dataset(name, data=_values(shape, dtype, kind, seed), chunks=chunks, **opts)
        # Blosc2 special chunks: all zeros (stored as a special offset), NaN, one value, noise
        blosc2 = dict(hdf5plugin.Blosc2())
        special = f.create_dataset("blosc2/special_chunks_f8", shape=(1200,), dtype="<f8", chunks=(300,), **blosc2)
        special[0:300] = 0
        special[300:600] = np.nan
        special[600:900] = 7.5
        special[900:] = RNG.random(300)
        zeros_2d = f.create_dataset("blosc2/zero_chunk_2d_f4", shape=(40, 40), dtype="<f4", chunks=(16, 16), **blosc2)
        zeros_2d[:16, :16] = 0
        zeros_2d[16:, 16:] = 3.25
        # HDF5 array types: the filters see whole elements (bitshuffle) or base-type items
        # (Blosc2, whose B2ND shape then does not match the bytes: a plain frame)
        for name, shape, chunks, opts in ARRAY_TYPED:
            dset = f.create_dataset(name, shape=shape, dtype=np.dtype(("<f4", (3,))), chunks=chunks, **opts)
            dset[...] = _values((*shape, 3), "<f4", "smooth", 8)
        for name, (opts, _) in MASKED.items():
            dset = f.create_dataset(name, shape=(40,), dtype="<f4", chunks=(10,), **opts)
            dset[0:10] = np.arange(10.0)  # compressible: szip too keeps these
            dset[20:30] = 2.0
            for start in (10, 30):
                raw = (np.arange(start, start + 10) * 1.25).astype("<f4")
                dset.id.write_direct_chunk((start,), raw.tobytes(), filter_mask=1)
        for name, (opts, dtype) in MATERIALISED.items():
            f.create_dataset(name, data=_values((500,), dtype, "smooth", 7), chunks=(128,), **opts)


@pytest.fixture(scope="module")
def h5file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plugins") / "plugins.h5"
    build(path)  # closed before indexing: HDF5 reports direct-chunk filter masks only after a reopen
    return path


@pytest.fixture(scope="module")
def manifest(h5file) -> h5lens.Manifest:
    return h5lens.index(h5file, inline_threshold=0)


@pytest.fixture(scope="module")
def routes(manifest, tmp_path_factory) -> dict[str, zarr.Group]:
    p = tmp_path_factory.mktemp("manifest") / "manifest.json"
    manifest.to_json(p)
    fs = fsspec.filesystem(
        "reference", fo=str(p), asynchronous=True, remote_protocol="file", remote_options={"asynchronous": True}
    )
    plain = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
    return {"h5lens": h5lens.open_group(manifest), "fsspec": plain}


def _native(a: np.ndarray) -> np.ndarray:
    if a.dtype.names is not None:
        return a
    return a.astype(a.dtype.newbyteorder("="))


def _assert_same(got: np.ndarray, expect: np.ndarray, where: str) -> None:
    expect = _native(expect)
    assert got.shape == expect.shape, where
    if expect.dtype.names is not None:  # compare field by field (zarr's structured dtype may differ in form)
        for field in expect.dtype.names:
            _assert_same(np.asarray(got[field]), expect[field], f"{where}.{field}")
        return
    assert got.dtype == expect.dtype, f"{where}: {got.dtype} != {expect.dtype}"
    assert got.tobytes() == expect.tobytes(), f"{where}: values differ from h5py's"


def _referenced(manifest: h5lens.Manifest, name: str) -> np.ndarray:
    return manifest.chunks[name].source.reshape(-1)


def _codec_names(manifest: h5lens.Manifest, name: str) -> list[str]:
    return [c["name"] for c in manifest.nodes[name]["codecs"]]


# --------------------------------------------------------------------------------------
# Indexed files: referenced, and equal to h5py through both routes
# --------------------------------------------------------------------------------------

REFERENCED = [*DATASETS, "blosc2/special_chunks_f8", "blosc2/zero_chunk_2d_f4", *(a[0] for a in ARRAY_TYPED)]


@pytest.mark.parametrize("name", REFERENCED)
def test_referenced_and_equal_to_h5py(name, h5file, manifest, routes):
    codec = CODECS[name.split("/")[0]]
    assert codec in _codec_names(manifest, name), f"{name}: {_codec_names(manifest, name)}"
    source = _referenced(manifest, name)
    with h5py.File(h5file, "r") as f:
        dset = f[name]
        masks = [dset.id.get_chunk_info(i).filter_mask for i in range(dset.id.get_num_chunks())]
        expect = dset[...]
    # every chunk HDF5 stored through the filter is a byte range of the file
    assert (source >= 0).sum() == sum(1 for m in masks if m == 0), f"{name}: {source}"
    for route, group in routes.items():
        _assert_same(group[name][...], expect, f"{route}:{name}")
    sel = tuple(slice(1, max(2, n - 2)) for n in expect.shape)
    _assert_same(routes["fsspec"][name][sel], expect[sel], f"fsspec:{name}[1:-2]")


def test_szip_ec_uint8_has_masked_chunks_read_exactly(h5file, manifest):
    """The oracle file has the case it claims: chunks szip gave up on, inline, the rest referenced."""
    source = _referenced(manifest, "szip/ec8_u1_masked")
    assert (source == INLINE).any() and (source >= 0).any()


@pytest.mark.parametrize("name", list(MASKED))
def test_chunks_stored_without_the_filter(name, h5file, manifest, routes):
    """Chunks with a filter mask are re-encoded inline with the array's codecs; the others stay references."""
    _, codec = MASKED[name]
    assert codec in _codec_names(manifest, name)
    source = _referenced(manifest, name)
    assert source[[1, 3]].tolist() == [INLINE, INLINE]
    assert (source[[0, 2]] >= 0).all()
    with h5py.File(h5file, "r") as f:
        expect = f[name][...]
        assert [f[name].id.get_chunk_info(i).filter_mask for i in range(4)] == [0, 1, 0, 1]
    np.testing.assert_array_equal(expect[10:20], (np.arange(10, 20) * 1.25).astype("<f4"))
    for route, group in routes.items():
        _assert_same(group[name][...], expect, f"{route}:{name}")


@pytest.mark.parametrize("name", list(MATERIALISED))
def test_filters_without_codec_are_materialised(name, h5file, manifest, routes):
    assert name.removeprefix("other/") in ("sz3", "zfp_expert_mode")
    assert (_referenced(manifest, name) == INLINE).all()
    names = _codec_names(manifest, name)
    assert not any(n.startswith(("h5lens.", "imagecodecs_")) for n in names), names
    with h5py.File(h5file, "r") as f:
        expect = f[name][...]
    for route, group in routes.items():
        _assert_same(group[name][...], expect, f"{route}:{name}")


def test_zfp_chunk_as_long_as_its_data_is_materialised(tmp_path):
    """Fixed rate 32 on float32 makes every compressed chunk exactly as long as the data,
    which the zfp codec reads as raw: the indexer must copy those chunks, and does."""
    path = tmp_path / "zfp32.h5"
    data = _values((32, 48), "<f4", "smooth", 3)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 16), **hdf5plugin.Zfp(rate=32))
    with h5py.File(path, "r") as f:  # not in the writing session: its chunk cache holds the data before zfp
        dset = f["x"]
        lengths = {dset.id.get_chunk_info(i).size for i in range(dset.id.get_num_chunks())}
        expect = dset[...]
    assert lengths == {16 * 16 * 4}
    manifest = h5lens.index(path, inline_threshold=0)
    assert _codec_names(manifest, "x")[-1] == "h5lens.zfp"
    assert (_referenced(manifest, "x") == INLINE).all()
    _assert_same(h5lens.open_group(manifest)["x"][...], expect, "x")


def test_plain_zarr_reads_the_manifest_through_entry_points(manifest, h5file, tmp_path):
    """Plain zarr, no ``import h5lens``: the codecs are found through ``zarr.codecs`` entry
    points, h5lens's and imagecodecs-zarr's."""
    p = tmp_path / "m.json"
    manifest.to_json(p)
    names = [
        "lz4/default_i4_2d",
        "bitshuffle/zstd_16_le_f8",
        "blosc2/default_1d_f8",
        "szip/nn16_be_u2",
        "zfp/rate8_1d_f8",
    ]
    script = f"""
import json, sys, fsspec, zarr, zarr.storage, numpy as np
fs = fsspec.filesystem("reference", fo={str(p)!r}, asynchronous=True, remote_protocol="file",
                       remote_options={{"asynchronous": True}})
g = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
out = {{name: g[name][...].tobytes().hex() for name in {names!r}}}
# zarr imported h5lens's codec modules through their entry points, and nothing else of h5lens
assert {{"h5lens.codecs.bitshuffle", "h5lens.codecs.blosc2", "h5lens.codecs.zfp"}} <= set(sys.modules)
assert not [m for m in ("h5lens.store", "h5lens.read", "h5lens.api") if m in sys.modules]
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    with h5py.File(h5file, "r") as f:
        for name in names:
            assert bytes.fromhex(got[name]) == _native(f[name][...]).tobytes(), name


def test_import_h5lens_does_not_import_imagecodecs():
    script = "import sys, h5lens, h5lens.scan.codecs, h5lens.codecs.table; assert 'imagecodecs' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------------------
# Codec level: the raw chunk bytes, decoded; encoded chunks, read back by hdf5plugin
# --------------------------------------------------------------------------------------


def _filter(dset: h5py.Dataset) -> tuple[int, tuple[int, ...]]:
    filter_id, _, cd_values, _ = dset.id.get_create_plist().get_filter(0)
    return int(filter_id), tuple(int(v) for v in cd_values)


def _codec_json(dset: h5py.Dataset) -> dict[str, Any]:
    filter_id, cd_values = _filter(dset)
    codec = FILTERS[filter_id].codec_json(cd_values, dset.dtype.itemsize)
    assert codec is not None
    return codec


def _chunks(dset: h5py.Dataset):
    """(chunk index, filter mask, raw bytes, the chunk's values as h5py reads them, padded)."""
    for i in range(dset.id.get_num_chunks()):
        info = dset.id.get_chunk_info(i)
        mask, raw = dset.id.read_direct_chunk(info.chunk_offset)
        region = tuple(slice(o, o + c) for o, c in zip(info.chunk_offset, dset.chunks, strict=True))
        values = dset[region]
        full = np.zeros(dset.chunks, dset.dtype)
        full[tuple(slice(0, n) for n in values.shape)] = values
        yield tuple(o // c for o, c in zip(info.chunk_offset, dset.chunks, strict=True)), mask, raw, values, full


def _valid(decoded: bytes, dset: h5py.Dataset, values: np.ndarray) -> np.ndarray:
    chunk = np.frombuffer(decoded, dtype=dset.dtype).reshape(dset.chunks)
    return chunk[tuple(slice(0, n) for n in values.shape)]


def _bytes_codec(dt: np.dtype) -> dict:
    if dt.itemsize == 1 or dt.byteorder == "|" or dt.names is not None:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": "big" if dt.byteorder == ">" else "little"}}


def _zarr_over_hdf5_chunks(dset: h5py.Dataset, codec: dict) -> zarr.Array:
    """A zarr v3 array whose chunk keys hold the HDF5 chunk bytes verbatim."""
    zdt = parse_dtype(_native(np.empty(0, dset.dtype)).dtype, zarr_format=3)
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(dset.shape),
        "data_type": zdt.to_json(zarr_format=3),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(dset.chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": zdt.to_json_scalar(zdt.default_scalar(), zarr_format=3),
        "codecs": [_bytes_codec(dset.dtype), codec],
        "attributes": {},
    }
    store = {"zarr.json": cpu.Buffer.from_bytes(json.dumps(meta).encode())}
    for index, mask, raw, _, _ in _chunks(dset):
        assert mask == 0
        store["c/" + "/".join(map(str, index))] = cpu.Buffer.from_bytes(raw)
    return zarr.open_array(MemoryStore(store), mode="r")


CODEC_LEVEL = [n for n in DATASETS if n != "szip/ec8_u1_masked" and DATASETS[n][2] is not COMPOUND12]


@pytest.mark.parametrize("name", CODEC_LEVEL)
def test_raw_chunks_decode_to_what_h5py_reads(name, h5file):
    register()
    with h5py.File(h5file, "r") as f:
        dset = f[name]
        codec = _codec_json(dset)
        decode = decoder(codec, dset.dtype.itemsize)
        assert decode is not None
        nbytes = math.prod(dset.chunks) * dset.dtype.itemsize
        masks = []
        for _, mask, raw, values, _ in _chunks(dset):
            masks.append(mask)
            if mask == 0:  # chunks HDF5 stored without the filter are not the codec's
                np.testing.assert_array_equal(
                    _valid(decode(raw, nbytes), dset, values).view(np.uint8), values.view(np.uint8)
                )
        assert masks.count(0) > len(masks) // 2
        if not any(masks):
            _assert_same(_zarr_over_hdf5_chunks(dset, codec)[...], dset[...], name)


def _round_trip(tmp_path: Path, data: np.ndarray, chunks: tuple[int, ...], opts: dict, encode) -> list[bool]:
    """Write ``data`` with the filter; re-encode every chunk from the values h5py reads with
    ``encode(full chunk values, raw filter bytes) -> (bytes, filter mask)``; write those
    chunks into a fresh dataset with the same filter; h5py must read the same values back.
    Returns, per chunk encoded, whether the bytes equal the filter's."""
    src_path, dst_path = tmp_path / "src.h5", tmp_path / "dst.h5"
    with h5py.File(src_path, "w") as f:
        f.create_dataset("x", data=data, chunks=chunks, **opts)
    same = []
    # read in a session of its own: the writing session's chunk cache holds the data as
    # it was before a lossy filter
    with h5py.File(src_path, "r") as src, h5py.File(dst_path, "w") as dst:
        out = dst.create_dataset("x", shape=data.shape, dtype=data.dtype, chunks=chunks, **opts)
        for index, mask, raw, _, full in _chunks(src["x"]):
            if mask:  # stored without the filter: copied as it is
                encoded, filter_mask = raw, mask
            else:
                encoded, filter_mask = encode(full, raw)
                same.append(encoded == raw)
            offset = tuple(i * c for i, c in zip(index, chunks, strict=True))
            out.id.write_direct_chunk(offset, encoded, filter_mask=filter_mask)
    with h5py.File(src_path, "r") as src, h5py.File(dst_path, "r") as dst:
        assert dst["x"][...].tobytes() == src["x"][...].tobytes()
    return same


@pytest.mark.parametrize("cname", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("nelems", [0, 16, 256])
@pytest.mark.parametrize(
    ("dtype", "shape"),
    [("u1", (1000,)), ("<i2", (999,)), (">u4", (1001,)), ("<f8", (3000,)), ("<c16", (301,)), (COMPOUND12, (301,))],
    ids=["u1", "i2", "be_u4", "f8", "c16", "compound12"],
)
def test_bitshuffle_encode_is_what_the_filter_writes(tmp_path, cname, nelems, dtype, shape):
    data = _values(shape, dtype, "smooth", 11)
    chunks = (shape[0] // 3 + 5,)  # not a multiple of 8 elements, nor of the block size

    def encode(full: np.ndarray, raw: bytes) -> tuple[bytes, int]:
        level = 3 if cname == "zstd" else None
        return bshuf_mod.encode_hdf5_bitshuffle(full.tobytes(), full.dtype.itemsize, nelems, cname, level), 0

    same = _round_trip(tmp_path, data, chunks, dict(hdf5plugin.Bitshuffle(nelems=nelems, cname=cname)), encode)
    if cname != "lz4" or _same_lz4("bshuf"):
        assert all(same)  # byte for byte what bshuf_h5filter wrote
    # else: LZ4's output differs from one LZ4 release to the next (the round trip above
    # still checks that the filter decodes what h5lens wrote to h5py's values)


def _same_lz4(plugin: str) -> bool:
    """Whether hdf5plugin's ``plugin`` filter and imagecodecs carry the same LZ4 release."""
    import ctypes

    import imagecodecs

    try:
        version = ctypes.CDLL(hdf5plugin.get_config().registered_filters[plugin]).LZ4_versionString
    except (AttributeError, KeyError, OSError):
        return False
    version.restype = ctypes.c_char_p
    return imagecodecs.lz4_version().split()[-1] == version().decode()


@pytest.mark.parametrize(
    ("shape", "chunks", "dtype", "opts"),
    [
        ((1000,), (300,), "<f8", {}),
        ((1000,), (256,), "<u2", dict(cname="zstd", clevel=5, filters=hdf5plugin.Blosc2.BITSHUFFLE)),
        ((50, 37), (16, 16), "<i2", {}),
        ((9, 10, 11), (4, 5, 6), ">f4", dict(cname="lz4", filters=hdf5plugin.Blosc2.NOFILTER)),
        ((20, 9), (8, 4), COMPOUND12, dict(cname="zlib")),
    ],
    ids=["1d", "1d_zstd_bitshuffle", "2d", "3d_lz4", "2d_compound"],
)
def test_blosc2_encode_reads_back_through_hdf5plugin(tmp_path, shape, chunks, dtype, opts):
    data = _values(shape, dtype, "smooth", 5)
    data.reshape(-1)[: data.size // 3] = np.zeros(1, data.dtype)  # some chunks all zeros (special chunks)
    with h5py.File(tmp_path / "probe.h5", "w") as f:
        codec = _codec_json(f.create_dataset("p", shape=shape, dtype=dtype, chunks=chunks, **hdf5plugin.Blosc2(**opts)))
    config = codec["configuration"]

    def encode(full: np.ndarray, raw: bytes) -> tuple[bytes, int]:
        encoded = blosc2_mod.encode_hdf5_blosc2(
            full.tobytes(),
            config["typesize"],
            config["clevel"],
            config["compressor"],
            config["shuffle"],
            config["blocksize"],
            tuple(config["chunkshape"]) if "chunkshape" in config else None,
        )
        assert blosc2_mod.decode_hdf5_blosc2(encoded) == full.tobytes()
        return encoded, 0

    _round_trip(tmp_path, data, chunks, dict(hdf5plugin.Blosc2(**opts)), encode)


@pytest.mark.parametrize(
    "opts", [dict(reversible=True), dict(rate=8), dict(precision=16)], ids=["reversible", "rate8", "precision16"]
)
@pytest.mark.parametrize("dtype", ["<f4", "<f8", "<i4", "<i8"])
def test_zfp_encode_is_lossless_and_reads_back_through_h5z_zfp(tmp_path, opts, dtype):
    """Encoding keeps the data exact: a zfp stream in reversible mode when shorter, else the
    raw chunk, which HDF5 reads when the filter mask says the filter was skipped."""
    data = _values((29, 21), dtype, "smooth", 9)
    chunks = (8, 8)
    with h5py.File(tmp_path / "probe.h5", "w") as f:
        probe = f.create_dataset("p", shape=data.shape, dtype=dtype, chunks=chunks, **hdf5plugin.Zfp(**opts))
        codec = _codec_json(probe)
    header = bytes.fromhex(codec["configuration"]["header"])
    nbytes = math.prod(chunks) * np.dtype(dtype).itemsize
    streams = []

    def encode(full: np.ndarray, raw: bytes) -> tuple[bytes, int]:
        encoded = zfp_mod.encode_hdf5_zfp(full.tobytes(), header)
        assert zfp_mod.decode_hdf5_zfp(encoded, header, nbytes) == full.tobytes()
        streams.append(len(encoded) != nbytes)
        return encoded, 0 if len(encoded) != nbytes else 1

    _round_trip(tmp_path, data, chunks, dict(hdf5plugin.Zfp(**opts)), encode)
    if "reversible" in opts:
        assert any(streams)  # smooth data: reversible zfp streams, not just raw chunks


@pytest.mark.parametrize("nbytes", [0, 1024, 100])
def test_lz4_encode_reads_back_through_hdf5plugin(tmp_path, nbytes):
    import imagecodecs

    data = _values((3000,), "<i4", "smooth", 4)

    def encode(full: np.ndarray, raw: bytes) -> tuple[bytes, int]:
        codec = FILTERS[32004].codec_json((nbytes,), 4)
        assert codec is not None
        blocksize = codec.get("configuration", {}).get("blocksize")
        return bytes(imagecodecs.lz4h5_encode(full.tobytes(), blocksize=blocksize)), 0

    _round_trip(tmp_path, data, (700,), dict(hdf5plugin.LZ4(nbytes=nbytes)), encode)


@pytest.mark.parametrize(("mode", "ppb", "dtype"), [("nn", 8, "<i2"), ("ec", 16, ">f4"), ("nn", 32, "<f8")])
def test_szip_encode_is_what_hdf5_writes(tmp_path, mode, ppb, dtype):
    import imagecodecs

    data = _values((40, 37), dtype, "ints", 6)
    chunks = (16, 16)
    with h5py.File(tmp_path / "probe.h5", "w") as f:
        opts = {"compression": "szip", "compression_opts": (mode, ppb)}
        probe = f.create_dataset("p", shape=data.shape, dtype=dtype, chunks=chunks, **opts)
        config = _codec_json(probe)["configuration"]

    def encode(full: np.ndarray, raw: bytes) -> tuple[bytes, int]:
        return bytes(imagecodecs.szip_encode(full.tobytes(), **config)), 0

    same = _round_trip(tmp_path, data, chunks, {"compression": "szip", "compression_opts": (mode, ppb)}, encode)
    assert same and all(same)


# --------------------------------------------------------------------------------------
# The table: configurations the codecs cannot decode are refused (materialised), never misread
# --------------------------------------------------------------------------------------


def test_table_refuses_what_the_codecs_cannot_decode():
    assert FILTERS[32008].codec_json((0, 4, 4, 12, 2), 4) is None  # block size not a multiple of 8
    assert FILTERS[32008].codec_json((0, 4, 4, 0, 1), 4) is None  # unknown compression
    assert FILTERS[32008].codec_json((0, 4), 4) is None  # no element size
    assert FILTERS[32026].codec_json((1, 0, 4, 1024, 5, 1, 3), 4) is None  # compressor 3: none in c-blosc2
    assert FILTERS[32026].codec_json((1, 0, 4, 1024, 5, 4, 0), 4) is None  # TRUNC_PREC: lossy, not hdf5plugin's
    assert FILTERS[4].codec_json((141, 16, 32), 4) is None  # szip needs its four cd_values
    # zfp: a long-form mode (expert), and a header of another codec version
    assert FILTERS[32013].codec_json((0x10105111, 0x570667A, 0xC00000A6, 0xFFF00000, 0xC7CF8000, 0x7F4E9), 4) is None
    assert FILTERS[32013].codec_json((0x10105111, 0x470667A, 0xC00000A6, 0x88000000), 4) is None
    # and accepts what hdf5plugin writes
    assert FILTERS[32013].codec_json((0x10105111, 0x570667A, 0xC00000A6, 0x88000000), 4) == {
        "name": "h5lens.zfp",
        "configuration": {"header": "7a667005a60000c000000088"},
    }
    assert zfp_mod.describe_header(bytes.fromhex("7a667005a60000c000000088")) == {
        "codec": 5,
        "type": "float32",
        "shape": [13, 11],
        "mode": "reversible",
    }


@pytest.mark.parametrize(
    "codec",
    [
        {"name": "h5lens.bitshuffle", "configuration": {"elementsize": 4, "blocksize": 0, "compression": "lz4"}},
        {
            "name": "h5lens.bitshuffle",
            "configuration": {"elementsize": 8, "blocksize": 16, "compression": "zstd", "level": 3},
        },
        {
            "name": "h5lens.blosc2",
            "configuration": {"typesize": 2, "clevel": 5, "compressor": "zstd", "shuffle": 2, "blocksize": 0},
        },
        {
            "name": "h5lens.blosc2",
            "configuration": {
                "typesize": 4,
                "clevel": 5,
                "compressor": "blosclz",
                "shuffle": 1,
                "blocksize": 0,
                "chunkshape": [4, 5, 6],
            },
        },
        {"name": "h5lens.zfp", "configuration": {"header": "7a667005a60000c000000088"}},
    ],
    ids=["bitshuffle_lz4", "bitshuffle_zstd", "blosc2_plain", "blosc2_b2nd", "zfp"],
)
def test_codec_json_round_trips_through_zarr_registry(codec):
    from zarr.registry import get_codec_class

    register()
    cls = get_codec_class(codec["name"])
    assert cls.from_dict(codec).to_dict() == codec
    with pytest.raises(ValueError):
        cls.from_dict({"name": codec["name"], "configuration": {**codec["configuration"], "bogus": 1}})


def test_bitshuffle_decode_rejects_damaged_chunks():
    data = np.arange(1000, dtype="<i4").tobytes()
    encoded = bshuf_mod.encode_hdf5_bitshuffle(data, 4, 0, "lz4")
    assert bshuf_mod.decode_hdf5_bitshuffle(encoded, 4, 0, "lz4") == data
    for damaged in (encoded[:-1], encoded + b"\0", encoded[:10]):
        with pytest.raises(ValueError):
            bshuf_mod.decode_hdf5_bitshuffle(damaged, 4, 0, "lz4")
    with pytest.raises(ValueError):
        bshuf_mod.decode_hdf5_bitshuffle(data[:-1], 4, 0, "none")


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_bitshuffle_decodes_chunks_that_compress_very_well(compression):
    data = bytes(8 << 20)  # 8 MiB of zeros: a few hundred times smaller compressed
    encoded = bshuf_mod.encode_hdf5_bitshuffle(data, 4, 0, compression)
    assert len(encoded) * 100 < len(data)
    assert bshuf_mod.decode_hdf5_bitshuffle(encoded, 4, 0, compression) == data


def test_blosc2_decode_rejects_what_is_not_a_frame():
    with pytest.raises(ValueError, match="b2frame"):
        blosc2_mod.decode_hdf5_blosc2(b"\0" * 200)
