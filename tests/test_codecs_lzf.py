"""h5lens.lzf: a zarr v3 array over the raw chunk bytes of h5py's LZF filter reads what h5py reads."""

from __future__ import annotations

import json
import warnings

import h5py
import numpy as np
import pytest
import zarr
from zarr.core.buffer import cpu
from zarr.core.dtype import parse_dtype
from zarr.storage import MemoryStore

from h5lens.codecs import LZFCodec, register
from h5lens.codecs import lzf as lzf_mod

DTYPES = ["u1", "<i2", ">i4", "<u4", "<f4", "<f8", ">f8", "<i8", "<c8"]
KINDS = ["smooth", "random", "mixed"]


def _backends() -> list:
    out = []
    for cls in (lzf_mod._PythonLzf,):
        try:
            out.append(pytest.param(cls(), id=cls.name))
        except ImportError:
            out.append(pytest.param(None, id=cls.name, marks=pytest.mark.skip(reason=f"{cls.name} missing")))
    return out


@pytest.fixture(params=_backends())
def backend(request, monkeypatch):
    monkeypatch.setattr(lzf_mod, "_BACKEND", request.param)
    return request.param


@pytest.fixture(autouse=True)
def _registered():
    register()


def _data(kind: str, dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    if kind == "smooth":
        return (np.arange(n) % 23).astype(dt).reshape(shape)
    raw = np.frombuffer(rng.bytes(n * dt.itemsize), dtype=dt).reshape(shape).copy()
    if kind == "mixed":  # some chunks compress, some do not
        raw.reshape(-1)[: n // 2] = 0
    return raw


def _native(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("="))


def _same(got: np.ndarray, expect: np.ndarray) -> bool:
    e = _native(expect)  # compare bytes: NaN-safe, dtype-exact
    return got.dtype == e.dtype and got.shape == e.shape and got.tobytes() == e.tobytes()


def _bytes_codec(dt: np.dtype) -> dict:
    if dt.itemsize == 1 or dt.byteorder == "|":
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": "big" if dt.byteorder == ">" else "little"}}


def _zarr_over_hdf5_chunks(dset: h5py.Dataset, bytes_codecs: list[dict]) -> tuple[zarr.Array, list[int]]:
    """A zarr v3 array whose chunk keys hold the HDF5 chunk bytes verbatim."""
    dt = dset.dtype
    zdt = parse_dtype(_native(np.empty(0, dt)).dtype, zarr_format=3)
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(dset.shape),
        "data_type": zdt.to_json(zarr_format=3),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(dset.chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": zdt.to_json_scalar(zdt.default_scalar(), zarr_format=3),
        "codecs": [_bytes_codec(dt), *bytes_codecs],
        "attributes": {},
    }
    store = {"zarr.json": cpu.Buffer.from_bytes(json.dumps(meta).encode())}
    masks = []
    for i in range(dset.id.get_num_chunks()):
        info = dset.id.get_chunk_info(i)
        mask, raw = dset.id.read_direct_chunk(info.chunk_offset)
        masks.append(mask)
        index = [o // c for o, c in zip(info.chunk_offset, dset.chunks, strict=True)]
        store["c/" + "/".join(map(str, index))] = cpu.Buffer.from_bytes(raw)
    return zarr.open_array(MemoryStore(store), mode="r"), masks


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reads_what_h5py_reads(tmp_path, backend, dtype, kind):
    shape, chunks = (50, 37), (16, 16)  # edge chunks on both axes
    data = _data(kind, dtype, shape)
    with h5py.File(tmp_path / "lzf.h5", "w") as f:
        dset = f.create_dataset("x", data=data, chunks=chunks, compression="lzf")
        assert dset.id.get_create_plist().get_filter(0)[0] == lzf_mod.HDF5_FILTER_ID
        arr, masks = _zarr_over_hdf5_chunks(dset, [{"name": "h5lens.lzf"}])
        expect = dset[...]
        assert _same(arr[...], expect)
        assert _same(arr[3:41, 5:30], expect[3:41, 5:30])
    if kind == "smooth":
        assert not any(masks)
    else:  # incompressible chunks are stored raw with the LZF bit set in the filter mask
        assert any(masks)
        if kind == "mixed":
            assert not all(masks)


@pytest.mark.parametrize("dtype", ["<i2", "<f8", ">u4"])
@pytest.mark.parametrize("kind", KINDS)
def test_shuffle_then_lzf(tmp_path, backend, dtype, kind):
    data = _data(kind, dtype, (40, 33))
    with h5py.File(tmp_path / "s.h5", "w") as f:
        dset = f.create_dataset("x", data=data, chunks=(8, 16), shuffle=True, compression="lzf")
        plist = dset.id.get_create_plist()
        (shuffle_id, _, shuffle_cd, _), (lzf_id, _, _, _) = plist.get_filter(0), plist.get_filter(1)
        assert (shuffle_id, lzf_id) == (2, 32000)
        codecs = [
            {"name": "numcodecs.shuffle", "configuration": {"elementsize": shuffle_cd[0]}},
            {"name": "h5lens.lzf"},
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numcodecs.* "not in the spec" warnings
            arr, _ = _zarr_over_hdf5_chunks(dset, codecs)
            assert _same(arr[...], dset[...])


@pytest.mark.parametrize("shape,chunks", [((1000,), (128,)), ((7, 9, 11), (4, 4, 4))])
def test_other_ranks(tmp_path, backend, shape, chunks):
    for kind in KINDS:
        data = _data(kind, "<f4", shape, seed=3)
        with h5py.File(tmp_path / f"r-{kind}.h5", "w") as f:
            dset = f.create_dataset("x", data=data, chunks=chunks, compression="lzf")
            arr, _ = _zarr_over_hdf5_chunks(dset, [{"name": "h5lens.lzf"}])
            assert _same(arr[...], dset[...])


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_and_h5py_reads_our_chunks(tmp_path, backend, kind):
    """zarr writes with the codec, reads back; h5py decodes the same chunk bytes too."""
    shape, chunks = (50, 37), (16, 16)
    data = _data(kind, "<i4", shape, seed=5)
    stored: dict = {}
    store = MemoryStore(stored)
    arr = zarr.create_array(
        store, shape=shape, chunks=chunks, dtype="int32", serializer={"name": "bytes", "configuration": {"endian": "little"}},
        compressors=[LZFCodec()], fill_value=0,
    )
    arr[...] = data
    assert np.array_equal(arr[...], data)
    assert zarr.open_array(store, mode="r").metadata.to_dict()["codecs"][1] == {"name": "h5lens.lzf"}

    nbytes = int(np.prod(chunks)) * 4
    with h5py.File(tmp_path / "ours.h5", "w") as f:
        dset = f.create_dataset("x", shape=shape, dtype="<i4", chunks=chunks, compression="lzf")
        for key, buf in stored.items():
            if not key.startswith("c/"):
                continue
            raw = buf.to_bytes()
            assert len(raw) <= nbytes
            offset = tuple(int(i) * c for i, c in zip(key.split("/")[1:], chunks, strict=True))
            # equal length <=> the encoder kept the data raw <=> HDF5 must skip the filter
            dset.id.write_direct_chunk(offset, raw, filter_mask=1 if len(raw) == nbytes else 0)
        assert np.array_equal(dset[...], data)


def test_codec_json_and_registration():
    from zarr.registry import get_codec_class

    register()
    register()  # idempotent: still exactly one implementation, so no "any implementation" warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_codec_class("h5lens.lzf") is LZFCodec
    codec = LZFCodec.from_dict({"name": "h5lens.lzf"})
    assert codec.to_dict() == {"name": "h5lens.lzf"}
    assert LZFCodec.from_dict({"name": "h5lens.lzf", "configuration": {}}) == codec
    with pytest.raises(ValueError):
        LZFCodec.from_dict({"name": "h5lens.lzf", "configuration": {"header": True}})


def test_corrupt_or_truncated_chunks_raise(backend):
    data = (np.arange(4096) % 7).astype("<i4").tobytes()
    packed = lzf_mod.encode_hdf5_lzf(data)
    assert len(packed) < len(data)
    assert lzf_mod.decode_hdf5_lzf(packed, len(data)) == data
    with pytest.raises(ValueError):
        lzf_mod.decode_hdf5_lzf(packed[: len(packed) // 2], len(data))
    with pytest.raises(ValueError):
        lzf_mod.decode_hdf5_lzf(b"\xff" * 64, len(data))
    with pytest.raises(ValueError):
        lzf_mod.decode_hdf5_lzf(b"", len(data))
    # without a known size, decoding grows the buffer as h5py's filter does
    assert lzf_mod.decode_hdf5_lzf(packed, None) == data
    # incompressible input is kept verbatim, exactly the bytes HDF5 stores for a skipped filter
    noise = np.random.default_rng(1).bytes(1000)
    assert lzf_mod.encode_hdf5_lzf(noise) == noise
    assert lzf_mod.decode_hdf5_lzf(noise, len(noise)) == noise


def _compressed_exactly_as_long_as(data_len: int) -> tuple[bytes, bytes]:
    """Raw bytes whose LZF stream is exactly as long as they are (random bytes compress to a
    little more; a run of zeros somewhere takes just enough back)."""
    import lzf

    rng = np.random.default_rng(0)
    for run in range(8, data_len // 4):
        raw = bytearray(rng.bytes(data_len))
        raw[100 : 100 + run] = bytes(run)
        packed = lzf.compress(bytes(raw), 2 * data_len)
        if packed is not None and len(packed) == data_len:
            return bytes(raw), packed
    raise AssertionError("no such chunk found")


def test_a_chunk_compressed_to_its_own_length_reads_like_h5py(tmp_path):
    """HDF5's LZF filter may store a compressed chunk exactly as long as the data (filter mask
    0). The LZF codec takes a chunk of that length as stored uncompressed, so the scanner must
    re-encode such chunks (scan.codecs.ambiguous_length) or they read as garbage."""
    import h5lens

    raw, packed = _compressed_exactly_as_long_as(1024)
    path = tmp_path / "ambiguous.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("x", shape=(512,), dtype="<i4", chunks=(256,), compression="lzf")
        ds.id.write_direct_chunk((0,), packed, filter_mask=0)
        ds[256:] = np.arange(256, dtype="<i4")
        assert ds.id.get_chunk_info(0).size == 1024 and ds.id.get_chunk_info(0).filter_mask == 0
    with h5py.File(path) as f:
        expected = f["x"][...]
    assert expected[:256].tobytes() == raw  # h5py decodes it
    for threshold in (0, 1000):
        got = h5lens.open_group(h5lens.index(path, inline_threshold=threshold))["x"][...]
        np.testing.assert_array_equal(got, expected)


def test_our_encoder_never_writes_a_stream_as_long_as_the_data(tmp_path):
    """python-lzf may give a stream one byte over the bound asked for; a 40-byte stream for
    40 bytes of data reads back as stored uncompressed. Found by random HDF5 trees: a
    compound dataset whose LZF chunk is exactly its own length, re-encoded by the scanner."""
    import h5lens

    data = np.array([(0, 33.0), (1, 1.1409306), (0, 1.00001), (-1, 1.82430788)], dtype=[("a", "<i2"), ("b", "<f8")])
    raw = data.tobytes()
    encoded = lzf_mod.encode_hdf5_lzf(raw)
    assert len(encoded) < len(raw) or encoded == raw
    assert lzf_mod.decode_hdf5_lzf(encoded, len(raw)) == raw
    path = tmp_path / "compound.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("c", data=data, chunks=(4,), compression="lzf")
        assert f["c"].id.get_chunk_info(0).size == len(raw)  # the ambiguous case
    with h5py.File(path) as f:
        expected = f["c"][...]
    np.testing.assert_array_equal(h5lens.open_group(h5lens.index(path))["c"][...], expected)


def test_chunks_lzf_gave_up_on_are_referenced_with_the_chain_they_were_stored_by(tmp_path):
    """LZF gives up on random floats: HDF5 stores such chunks raw, their filter mask set.
    When most chunks of a dataset skip the same filters, the array's codecs are the ones they
    went through (here bytes alone) and they stay references; the chunks stored otherwise
    (here the compressible ones) are the ones re-encoded inline."""
    import h5lens

    rng = np.random.default_rng(0)
    mostly = np.ones(100_000, "f4")  # compressible: LZF keeps those chunks
    mostly[:80_000] = rng.random(80_000)
    path = tmp_path / "random.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("random", data=rng.random(100_000).astype("f4"), chunks=(4000,), compression="lzf")
        f.create_dataset("mostly", data=mostly, chunks=(4000,), compression="lzf")
        masks = [f["random"].id.get_chunk_info(i).filter_mask for i in range(25)]
        assert all(masks)  # every chunk skipped the filter: HDF5 stored them raw
    manifest = h5lens.index(path, inline_threshold=0)
    assert [c["name"] for c in manifest.nodes["random"]["codecs"]] == ["bytes"]
    assert not manifest.chunks["random"].inline and manifest.chunks["random"].n_present == 25
    assert [c["name"] for c in manifest.nodes["mostly"]["codecs"]] == ["bytes"]
    assert 0 < len(manifest.chunks["mostly"].inline) <= 5  # the constant chunks LZF did compress
    with h5py.File(path) as f:
        for name in ("random", "mostly"):
            np.testing.assert_array_equal(h5lens.open(manifest)[name][()], f[name][()])
            np.testing.assert_array_equal(h5lens.open_group(manifest)[name][...], f[name][()])
