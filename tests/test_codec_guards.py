"""Each HDF5 filter becomes the zarr codec that decodes it, configured as the writer asked,
with every chunk left a reference; a filter with no codec is decoded by h5py and named.

Reading the values back is not enough to check the filter table: a filter it does not
recognise is decoded by h5py and copied into the manifest, which reads right too, at the
cost of a manifest as large as the data. These tests state what each writer was asked
for (hdf5plugin's and h5py's own parameters) and require it in the manifest.
"""

from __future__ import annotations

import zlib

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.errors import MaterializeLimitError

hdf5plugin = pytest.importorskip("hdf5plugin")

VALUES = (np.arange(4000, dtype="<i4") // 5) % 300  # runs every compressor shortens (a chunk it cannot shorten skips the filter)


def _blosc(cname: str, clevel: int, shuffle: int, shuffle_name: str) -> tuple[dict, list[dict]]:
    config = {"cname": cname, "clevel": clevel, "shuffle": shuffle_name, "typesize": 4, "blocksize": 0}
    return dict(hdf5plugin.Blosc(cname=cname, clevel=clevel, shuffle=shuffle)), [{"name": "blosc", "configuration": config}]


# name -> (h5py create_dataset keywords, the codecs after "bytes" that decode what they write)
WRITERS: dict[str, tuple[dict, list[dict]]] = {
    "gzip-7": ({"compression": "gzip", "compression_opts": 7}, [{"name": "numcodecs.zlib", "configuration": {"level": 7}}]),
    "shuffle-gzip-2": (
        {"compression": "gzip", "compression_opts": 2, "shuffle": True},
        [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}, {"name": "numcodecs.zlib", "configuration": {"level": 2}}],
    ),
    "gzip-fletcher32": (
        {"compression": "gzip", "compression_opts": 1, "fletcher32": True},
        [{"name": "numcodecs.zlib", "configuration": {"level": 1}}, {"name": "numcodecs.fletcher32", "configuration": {}}],
    ),
    "blosc-blosclz-noshuffle": _blosc("blosclz", 9, 0, "noshuffle"),
    "blosc-lz4-shuffle": _blosc("lz4", 5, 1, "shuffle"),
    "blosc-lz4hc-bitshuffle": _blosc("lz4hc", 3, 2, "bitshuffle"),
    "blosc-zlib": _blosc("zlib", 7, 1, "shuffle"),
    "blosc-zstd": _blosc("zstd", 1, 2, "bitshuffle"),
    "zstd-10": (dict(hdf5plugin.Zstd(clevel=10)), [{"name": "zstd", "configuration": {"level": 10, "checksum": False}}]),
    # a negative level is stored as an unsigned 32-bit cd_value
    "zstd-negative": (dict(hdf5plugin.Zstd(clevel=-5)), [{"name": "zstd", "configuration": {"level": -5, "checksum": False}}]),
    "bzip2-5": (dict(hdf5plugin.BZip2(blocksize=5)), [{"name": "numcodecs.bz2", "configuration": {"level": 5}}]),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, h5lens.Manifest]:
    path = str(tmp_path_factory.mktemp("filters") / "filters.h5")
    with h5py.File(path, "w") as f:
        for name, (kwargs, _) in WRITERS.items():
            f.create_dataset(name, data=VALUES, chunks=(500,), **kwargs)
    return path, h5lens.index(path, inline_threshold=0)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_each_filter_is_its_codec_as_configured_with_every_chunk_referenced(written, name):
    path, manifest = written
    codecs = manifest.nodes[name]["codecs"]
    assert codecs[0]["name"] == "bytes"
    assert codecs[1:] == WRITERS[name][1]
    table = manifest.chunks[name]
    with h5py.File(path) as f:
        expected = f[name][...]
        stored = f[name].id.get_num_chunks()
    assert len(table.inline) == 0, "chunks copied into the manifest instead of referenced"
    assert table.n_present == stored
    np.testing.assert_array_equal(h5lens.open_group(manifest)[name][...], expected)


def test_blosc_with_snappy_has_no_codec_and_is_decoded_by_h5py_and_named(tmp_path):
    """numcodecs' blosc has no snappy: such data is decoded by h5py, stored inline, and a
    materialize limit names the filter."""
    path = str(tmp_path / "snappy.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("s", data=VALUES, chunks=(500,), **hdf5plugin.Blosc(cname="snappy", clevel=5, shuffle=1))
        expected = f["s"][...]
    manifest = h5lens.index(path)
    assert all(codec["name"] != "blosc" for codec in manifest.nodes["s"]["codecs"])
    np.testing.assert_array_equal(h5lens.open_group(manifest)["s"][...], expected)
    with pytest.raises(MaterializeLimitError, match=r"s: filters with no zarr codec: blosc \(id 32001\)"):
        h5lens.index(path, materialize_limit=0)


@pytest.mark.parametrize(
    "name, make, label",
    [
        ("scaleoffset", lambda f: f.create_dataset("d", data=VALUES, chunks=(500,), scaleoffset=0), "scaleoffset (id 6)"),
        (
            # a registered filter h5lens has no name for: HDF5's own name for it is shown
            "fcidecomp",
            lambda f: f.create_dataset("d", data=VALUES.astype("<u2").reshape(40, 100), chunks=(20, 100), **hdf5plugin.FciDecomp()),
            None,
        ),
    ],
)
def test_a_filter_without_codec_is_named_as_hdf5_names_it(tmp_path, name, make, label):
    path = str(tmp_path / f"{name}.h5")
    with h5py.File(path, "w") as f:
        make(f)
    with h5py.File(path) as f:
        expected = f["d"][...]
        filter_id, _, _, hdf5_name = f["d"].id.get_create_plist().get_filter(0)
    label = label or f"{hdf5_name.decode()} (id {filter_id})"
    with pytest.raises(MaterializeLimitError) as raised:
        h5lens.index(path, materialize_limit=0)
    assert f"d: filters with no zarr codec: {label}" in str(raised.value)
    np.testing.assert_array_equal(h5lens.open_group(h5lens.index(path))["d"][...], expected)


def _compressed_exactly(length: int, compress) -> tuple[bytes, bytes]:
    """Raw bytes whose compressed stream is exactly as long as they are: random bytes
    compress to a little more; a run of zeros somewhere takes just enough back."""
    rng = np.random.default_rng(3)
    for _ in range(100):
        noise = rng.bytes(length)
        for run in range(8, length // 2):
            raw = bytearray(noise)
            raw[40 : 40 + run] = bytes(run)
            packed = compress(bytes(raw))
            if packed is not None and len(packed) == length:
                return bytes(raw), packed
    raise AssertionError("no such chunk found")


def test_a_gzip_chunk_as_long_as_its_data_stays_a_reference(tmp_path):
    """Only LZF stores a chunk that its codec cannot tell from an unfiltered one; a deflate
    chunk of the same length is an ordinary chunk and stays a reference."""
    raw, packed = _compressed_exactly(1024, lambda data: zlib.compress(data, 9))
    path = str(tmp_path / "gzip.h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("x", shape=(512,), dtype="<i4", chunks=(256,), compression="gzip")
        ds.id.write_direct_chunk((0,), packed, filter_mask=0)
        ds[256:] = np.arange(256, dtype="<i4")
        assert ds.id.get_chunk_info(0).size == 1024
        expected = ds[...]
    assert expected[:256].tobytes() == raw
    manifest = h5lens.index(path, inline_threshold=0)
    assert len(manifest.chunks["x"].inline) == 0
    np.testing.assert_array_equal(h5lens.open_group(manifest)["x"][...], expected)


@pytest.mark.parametrize("elements", [256, 257])  # 1024 and 1028 bytes: the lengths' bits differ
@pytest.mark.parametrize("pipeline", ["lzf+fletcher32", "shuffle+lzf"])
def test_an_lzf_chunk_compressed_to_its_own_length_reads_like_h5py(tmp_path, pipeline, elements):
    """With fletcher32 after LZF, a chunk LZF compressed to its own length is stored 4 bytes
    longer (the checksum): that length is the ambiguous one. With shuffle before LZF, it is
    the data's own length."""
    from numcodecs import Fletcher32, Shuffle

    nbytes = 4 * elements
    import lzf

    raw, packed = _compressed_exactly(nbytes, lambda data: lzf.compress(data, 2 * nbytes))
    fletcher = pipeline == "lzf+fletcher32"
    stored = bytes(Fletcher32().encode(packed)) if fletcher else packed
    path = str(tmp_path / "lzf.h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(
            "x", shape=(2 * elements,), dtype="<i4", chunks=(elements,), compression="lzf",
            fletcher32=fletcher, shuffle=not fletcher,
        )
        ds.id.write_direct_chunk((0,), stored, filter_mask=0)
        ds[elements:] = np.arange(elements, dtype="<i4")
        assert ds.id.get_chunk_info(0).size == nbytes + (4 if fletcher else 0)
    with h5py.File(path) as f:
        expected = f["x"][...]
    unshuffled = raw if fletcher else bytes(Shuffle(elementsize=4).decode(raw))
    assert expected[:elements].tobytes() == unshuffled  # h5py decodes it
    for threshold in (0, 100_000):
        got = h5lens.open_group(h5lens.index(path, inline_threshold=threshold))["x"][...]
        np.testing.assert_array_equal(got, expected)


def test_netcdf_c_filter_order_fletcher32_shuffle_deflate(tmp_path):
    """netCDF-C adds fletcher32 before shuffle and deflate; the codecs follow the file's own
    order, the shuffle after a length-changing filter being HDF5's own (h5lens.shuffle)."""
    path = str(tmp_path / "order.h5")
    values = np.arange(1001, dtype="<i4") % 97
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((250,))
        dcpl.set_fletcher32()
        dcpl.set_shuffle()
        dcpl.set_deflate(3)
        space = h5py.h5s.create_simple((1001,))
        h5py.h5d.create(f.id, b"x", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
        f["x"][...] = values
        order = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
        expected = f["x"][...]
    assert order == [3, 2, 1]
    manifest = h5lens.index(path, inline_threshold=0)
    names = [codec["name"] for codec in manifest.nodes["x"]["codecs"]]
    assert names == ["bytes", "numcodecs.fletcher32", "h5lens.shuffle", "numcodecs.zlib"]
    assert manifest.nodes["x"]["codecs"][3]["configuration"] == {"level": 3}
    assert len(manifest.chunks["x"].inline) == 0
    np.testing.assert_array_equal(h5lens.open_group(manifest)["x"][...], expected)


def test_zstd_h5ad_reads_eagerly_as_anndata_reads_it(tmp_path):
    """Eager reads decode whole arrays with the filter table's own decoders."""
    anndata = pytest.importorskip("anndata")
    import scipy.sparse as sp

    adata = anndata.AnnData(X=(np.arange(6000, dtype="f4").reshape(300, 20) % 17))
    adata.layers["sparse"] = sp.random(300, 20, density=0.2, format="csr", dtype="f4", random_state=0)
    path = str(tmp_path / "zstd.h5ad")
    adata.write_h5ad(path, compression=hdf5plugin.ZSTD_ID, compression_opts=(7,))
    expected = anndata.read_h5ad(path)
    got = h5lens.read_anndata(h5lens.index(path, inline_threshold=0))
    np.testing.assert_array_equal(got.X, expected.X)
    np.testing.assert_array_equal(got.layers["sparse"].toarray(), expected.layers["sparse"].toarray())
