"""The compact manifest form: exact round trips with JSON, tables loaded on first use, small.

Oracles: the JSON form of the same manifest (to_dict equality, both ways) and h5py's
values through each form.
"""

from __future__ import annotations

import pickle

import h5py
import numpy as np
import pytest
import zarr

import h5lens
from h5lens.manifest import compact
from test_feature_matrix import BUILDERS, SLAB_BYTES  # noqa: E402 - tests/ is on sys.path


@pytest.fixture(scope="module")
def feature_manifests(tmp_path_factory):
    root = tmp_path_factory.mktemp("compact")
    out = {}
    for name, build in BUILDERS.items():
        path = root / f"{name}.h5"
        build(path)
        out[name] = (path, h5lens.index(path, slab_bytes=SLAB_BYTES, inline_threshold=0))
    return out


@pytest.mark.parametrize("feature", list(BUILDERS))
def test_round_trips_are_exact(feature, feature_manifests, tmp_path):
    path, manifest = feature_manifests[feature]
    saved = tmp_path / "m.h5lens"
    manifest.save(saved, format="compact")
    assert saved.read_bytes().startswith(compact.MAGIC)
    loaded = h5lens.Manifest.load(saved)
    assert loaded.to_dict() == manifest.to_dict()  # compact -> JSON gives what the scanner wrote
    as_json = tmp_path / "m.json"
    loaded.to_json(as_json)
    again = tmp_path / "again.h5lens"
    h5lens.Manifest.load(as_json).save(again, format="compact")
    assert again.read_bytes() == saved.read_bytes()  # JSON -> compact gives the same bytes


def test_reads_like_h5py_and_loads_tables_only_when_used(tmp_path):
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:
        for i in range(20):
            f.create_dataset(f"a{i}", data=np.arange(5000, dtype="f8") + i, chunks=(100,), compression="gzip")
    saved = tmp_path / "m.h5lens"
    h5lens.index(path, inline_threshold=0).save(saved, format="compact")
    manifest = h5lens.Manifest.load(saved)
    assert manifest.chunks.loaded == 0  # opening read the header only
    group = h5lens.open_group(manifest)
    with h5py.File(path) as f:
        np.testing.assert_array_equal(group["a7"][...], f["a7"][...])
    assert manifest.chunks.loaded == 1


def test_bytes_per_chunk(tmp_path):
    """Irregular gzip chunks cost about a byte each; regular uncompressed ones nearly nothing."""
    rng = np.random.default_rng(0)
    path = tmp_path / "sizes.h5"
    n = 20_000
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip", data=rng.integers(0, 1 << 20, n * 64, dtype="i4"), chunks=(64,), compression="gzip")
        f.create_dataset("plain", data=np.arange(n * 64, dtype="i4"), chunks=(64,))
    manifest = h5lens.index(path, inline_threshold=0)
    for name, budget in (("gzip", 3.0), ("plain", 0.5)):
        table = compact.encode_table(manifest.chunks[name])
        assert len(table) / manifest.chunks[name].n_present <= budget, (name, len(table))


def test_from_object_storage_reads_the_header_then_one_table(s3, s3_proxy, tmp_path):
    path = tmp_path / "remote.h5"
    with h5py.File(path, "w") as f:
        for i in range(5):
            f.create_dataset(f"a{i}", data=np.arange(50_000, dtype="i4") * i, chunks=(50,), compression="gzip")
    s3.filesystem().put(str(path), "bucket/compact/remote.h5")
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index("s3://bucket/compact/remote.h5", storage_options=options, inline_threshold=0)
    manifest.save("s3://bucket/compact/remote.h5lens", format="compact", storage_options=options)
    s3_proxy.stats.reset()
    loaded = h5lens.Manifest.load("s3://bucket/compact/remote.h5lens", storage_options=options)
    opening = s3_proxy.stats.gets
    assert opening <= 2
    group = h5lens.open_group(loaded, storage_options=options, verify=False)
    with h5py.File(path) as f:
        np.testing.assert_array_equal(group["a3"][:100], f["a3"][:100])
    assert loaded.chunks.loaded == 1
    # a store over a compact manifest pickles (dask workers) and reads on the other side
    clone = pickle.loads(pickle.dumps(group.store))
    assert zarr.open_group(clone, mode="r")["a4"][5] == 20


@pytest.mark.parametrize("damage", ["truncated", "header", "table"])
def test_damaged_files_are_format_errors(tmp_path, damage):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.arange(100_000, dtype="f8"), chunks=(100,), compression="gzip")
    saved = tmp_path / "m.h5lens"
    h5lens.index(path, inline_threshold=0).save(saved, format="compact")
    data = bytearray(saved.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "header":
        data[30] ^= 0xFF
    else:
        data[-20] ^= 0xFF
    saved.write_bytes(bytes(data))
    with pytest.raises(h5lens.ManifestFormatError):
        manifest = h5lens.Manifest.load(saved)
        manifest.chunks["a"]  # the table is read only now


def _cli(*args, cwd=None):
    from cli_runner import h5lens as run_cli

    return run_cli(*args, cwd=cwd)


def test_cli_takes_the_form_from_the_name_and_by_size_otherwise(tmp_path):
    """NAME.json is JSON whatever its size (plain fsspec opens it); NAME.h5lens is compact; a
    name that says neither gets compact above 100,000 chunk references, and says why. A
    --format the name contradicts is refused before the scan."""
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:  # 100,001 chunk references: one more than JSON's limit
        f.create_dataset("x", data=np.arange(100_001, dtype="i2"), chunks=(1,))
        f.create_dataset("y", data=np.arange(10, dtype="i2"), chunks=(5,))
    out = tmp_path / "m"
    result = _cli("index", path, "-o", out, "--inline-threshold", "0")
    assert result.returncode == 0, result.stderr
    assert "compact form (100,003 chunk references, more than 100,000)" in result.stdout
    assert out.read_bytes().startswith(compact.MAGIC)
    named = tmp_path / "m.json"
    result = _cli("index", path, "-o", named, "--inline-threshold", "0")
    assert result.returncode == 0, result.stderr
    assert "json form, as the name says (100,003 chunk references: a .h5lens name" in result.stdout
    assert named.read_bytes().lstrip().startswith(b"{")
    result = _cli("convert", named, tmp_path / "back.h5lens")
    assert result.returncode == 0 and "compact form" in result.stdout, result.stderr
    assert (tmp_path / "back.h5lens").read_bytes() == out.read_bytes()
    with h5py.File(path) as f:
        np.testing.assert_array_equal(h5lens.open_group(named)["x"][-5:], f["x"][-5:])
    small = tmp_path / "small.h5"
    with h5py.File(small, "w") as f:
        f["x"] = np.arange(3)
    result = _cli("index", small, "-o", tmp_path / "small")
    assert result.returncode == 0 and "json form (1 chunk references, no more than 100,000)" in result.stdout
    assert _cli("convert", out, tmp_path / "z", "--format", "yaml").returncode == 2
    refused = _cli("index", small, "-o", tmp_path / "c.json", "--format", "compact")
    assert refused.returncode == 2 and not (tmp_path / "c.json").exists()
    assert refused.stderr.strip() == (
        f"h5lens: error: {tmp_path / 'c.json'}: the name promises the json form; name the compact form "
        f"{tmp_path / 'c.h5lens'} (or pass --format json)"
    )
