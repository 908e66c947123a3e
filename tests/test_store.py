"""ManifestStore as a zarr v3 store: keys, ranges, listing, pickling, and what zarr reads through it."""

from __future__ import annotations

import asyncio
import json
import pickle

import anndata
import h5py
import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

import h5lens
from h5lens.cli.sample import write_sample

PROTO = default_buffer_prototype()


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "sample.h5ad"
    write_sample(path)
    return path


@pytest.fixture(scope="module")
def store(sample):
    return h5lens.open_store(h5lens.index(sample, inline_threshold=0))


def run(coro):
    return asyncio.run(coro)


async def collect(iterator):
    return [k async for k in iterator]


def test_missing_keys_are_none(store):
    # a parent's metadata must never stand in for a missing key (anndata recurses forever on that)
    for key in ["nope/zarr.json", "X/nope", "X/data/c/99999", "X/data/c", "obs/zarr.json/x", "X/data/c/a"]:
        assert run(store.get(key, PROTO)) is None, key
        assert not run(store.exists(key)), key


def test_metadata_and_chunks_exist(store):
    assert run(store.exists("zarr.json"))
    assert run(store.exists("X/data/zarr.json"))
    assert run(store.exists("X/data/c/0"))
    assert run(store.exists("uns/title/c"))  # a 0-d array's single chunk


@pytest.mark.parametrize(
    "byte_range", [None, RangeByteRequest(3, 17), OffsetByteRequest(5), SuffixByteRequest(9)]
)
def test_byte_ranges_match_file_bytes(store, sample, byte_range):
    table = store.manifest.chunks["X/indices"]
    offset, length = int(table.offset[0]), int(table.length[0])
    whole = sample.read_bytes()[offset : offset + length]
    expected = {
        None: whole,
        RangeByteRequest: whole[3:17],
        OffsetByteRequest: whole[5:],
        SuffixByteRequest: whole[-9:],
    }[type(byte_range) if byte_range else None]
    got = run(store.get("X/indices/c/0", PROTO, byte_range))
    assert got.to_bytes() == expected


@pytest.mark.parametrize(
    "byte_range",
    [RangeByteRequest(3, 10**9), OffsetByteRequest(10**9), SuffixByteRequest(10**9), RangeByteRequest(0, 0)],
)
def test_byte_ranges_beyond_the_chunk_as_zarr_stores_serve_them(store, sample, byte_range):
    """Ranges that run past a chunk's end give what zarr's own MemoryStore gives."""
    from zarr.core.buffer.cpu import Buffer as CPUBuffer
    from zarr.storage import MemoryStore

    table = store.manifest.chunks["X/indices"]
    offset, length = int(table.offset[0]), int(table.length[0])
    whole = sample.read_bytes()[offset : offset + length]
    memory = MemoryStore({"k": CPUBuffer.from_bytes(whole)})
    expected = run(memory.get("k", PROTO, byte_range)).to_bytes()
    assert run(store.get("X/indices/c/0", PROTO, byte_range)).to_bytes() == expected


@pytest.mark.parametrize(
    "byte_range", [None, RangeByteRequest(3, 17), OffsetByteRequest(5), SuffixByteRequest(9), SuffixByteRequest(10**9)]
)
def test_synchronous_reads_equal_asynchronous_ones(store, byte_range):
    """zarr's fused pipeline reads local sources through get_sync: the same bytes as get."""
    expected = run(store.get("X/indices/c/0", PROTO, byte_range)).to_bytes()
    assert store.get_sync("X/indices/c/0", prototype=PROTO, byte_range=byte_range).to_bytes() == expected


def test_a_failed_synchronous_read_names_the_key(tmp_path):
    from dataclasses import replace

    path = tmp_path / "chunked.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(4000, dtype="<i4"), chunks=(1000,), compression="gzip")
    manifest = h5lens.index(path, inline_threshold=0)
    offset = manifest.chunks["x"].offset.copy()
    offset[1] = manifest.sources[0].size - 10
    manifest = replace(manifest, chunks={**manifest.chunks, "x": replace(manifest.chunks["x"], offset=offset)})
    store = h5lens.open_store(manifest, verify=False)
    with pytest.raises(h5lens.SourceReadError) as raised:
        store.get_sync("x/c/1")
    assert "'x/c/1'" in " ".join(getattr(raised.value, "__notes__", []))


def test_getsize_of_a_referenced_chunk_is_its_stored_size(store, sample):
    with h5py.File(sample) as f:
        stored = f["X/indices"].id.get_chunk_info(0).size
    assert run(store.getsize("X/indices/c/0")) == stored


def test_get_partial_values(store):
    keys = [("zarr.json", None), ("X/indices/c/0", RangeByteRequest(0, 4)), ("missing", None)]
    values = run(store.get_partial_values(PROTO, keys))
    assert values[0].to_bytes() == run(store.get("zarr.json", PROTO)).to_bytes()
    assert len(values[1].to_bytes()) == 4
    assert values[2] is None


def test_listing(store, sample):
    keys = run(collect(store.list()))
    assert "zarr.json" in keys and "X/data/c/0" in keys
    assert sorted(run(collect(store.list_prefix("obs/")))) == sorted(k for k in keys if k.startswith("obs/"))
    with h5py.File(sample) as f:
        root_members = sorted(f.keys())
        obs_members = sorted(f["obs"].keys())
    assert sorted(run(collect(store.list_dir(""))) ) == sorted(["zarr.json", *root_members])
    assert sorted(run(collect(store.list_dir("obs")))) == sorted(["zarr.json", *obs_members])
    assert sorted(run(collect(store.list_dir("X/data")))) == ["c", "zarr.json"]
    assert sorted(run(collect(store.list_dir("X/data/c")))) == sorted(
        {k.split("/")[3] for k in keys if k.startswith("X/data/c/")}
    )


def test_zarr_lists_groups_like_h5py(store, sample):
    group = zarr.open_group(store, mode="r", zarr_format=3)
    with h5py.File(sample) as f:
        assert sorted(group.keys()) == sorted(f.keys())
        assert sorted(group["obs"].keys()) == sorted(f["obs"].keys())


def test_read_only(store):
    assert store.read_only
    with pytest.raises(ValueError, match="read-only"):  # what zarr expects of a read-only store
        run(store.set("zarr.json", PROTO.buffer.from_bytes(b"{}")))
    with pytest.raises(ValueError):
        store.with_read_only(False)


def test_pickles_and_reads_after(store, sample):
    clone = pickle.loads(pickle.dumps(store))
    assert clone.manifest.nodes == store.manifest.nodes
    assert clone == store  # equal by content, not identity
    group = zarr.open_group(clone, mode="r", zarr_format=3)
    with h5py.File(sample) as f:
        np.testing.assert_array_equal(group["X/indices"][...], f["X/indices"][...])


def test_missing_source_names_it(tmp_path):
    path = tmp_path / "gone.h5ad"
    write_sample(path)
    manifest = h5lens.index(path, inline_threshold=0)
    path.unlink()
    with pytest.raises(h5lens.SourceNotFoundError, match="gone.h5ad"):
        h5lens.open_group(manifest)  # the freshness check notices at open
    group = h5lens.open_group(manifest, verify=False)
    with pytest.raises(h5lens.SourceNotFoundError, match="gone.h5ad"):
        group["X/indices"][...]


@pytest.mark.parametrize("change", ["grown", "shrunk", "rewritten at the start", "rewritten at the end"])
def test_every_kind_of_change_to_a_local_source_is_named(tmp_path, change):
    """A larger or smaller file, or one rewritten at the same size (another superblock, new
    space at the end): each is refused with what changed, as the file is now."""
    import os

    path = tmp_path / "changing.h5ad"
    write_sample(path)
    manifest = h5lens.index(path)
    before = os.stat(path)
    if change == "grown":
        with open(path, "ab") as f:
            f.write(b"\0" * 16)
    elif change == "shrunk":
        os.truncate(path, before.st_size - 16)
    else:
        with open(path, "r+b") as f:
            f.seek(40 if change.endswith("start") else before.st_size - 3)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
    after = os.stat(path)
    with pytest.raises(h5lens.StaleSourceError) as raised:
        h5lens.open_group(manifest)
    if change.startswith("rewritten"):
        (only,) = raised.value.changes
        assert only.startswith("content ") and " → " in only
    else:
        assert f"size {before.st_size} → {after.st_size}" in raised.value.changes


@pytest.mark.parametrize("how", ["touched", "copied without -p", "copied elsewhere"])
def test_the_same_bytes_are_the_same_source(tmp_path, how):
    """A manifest goes on working after its file is touched or copied (a new mtime, the same
    bytes): local sources are identified by size and content, not by modification time."""
    import os
    import shutil

    path = tmp_path / "data.h5ad"
    write_sample(path)
    manifest_path = tmp_path / "data.h5ad.json"
    h5lens.index(path).to_json(manifest_path)
    if how == "touched":
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 5_000_000_000))
        opened = manifest_path
    else:
        target = tmp_path / ("copy" if how == "copied elsewhere" else "same")
        target.mkdir()
        shutil.copy(path, target / path.name)  # a new mtime
        shutil.copy(manifest_path, target / manifest_path.name)
        if how == "copied elsewhere":
            shutil.rmtree(tmp_path / "same", ignore_errors=True)
        path.unlink()  # only the copy is left: the manifest recorded its source relative to itself
        opened = target / manifest_path.name
    assert json.loads(opened.read_text())["h5lens"]["sources"][0]["url"] == "data.h5ad"
    group = h5lens.open_group(opened)
    expected = anndata.read_h5ad(opened.parent / "data.h5ad")
    np.testing.assert_array_equal(group["obs/_index"][...], expected.obs_names.to_numpy())


def test_a_manifest_without_a_fingerprint_is_checked_by_mtime(tmp_path):
    """Manifests written before fingerprints recorded the mtime: a touched file is refused."""
    import os
    from dataclasses import replace

    path = tmp_path / "older.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(10)
    manifest = h5lens.index(path)
    manifest = replace(manifest, sources=[replace(manifest.sources[0], fingerprint=None)])
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    with pytest.raises(h5lens.StaleSourceError) as raised:
        h5lens.open_group(manifest)
    assert raised.value.changes == (f"mtime {manifest.sources[0].mtime} → {os.stat(path).st_mtime}",)


def test_a_source_with_nothing_recorded_is_not_checked(tmp_path):
    from dataclasses import replace

    path = tmp_path / "unrecorded.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(10)
    manifest = h5lens.index(path)
    manifest = replace(manifest, sources=[replace(manifest.sources[0], size=None, mtime=None, etag=None, fingerprint=None)])
    with open(path, "ab") as f:
        f.write(b"\0" * 16)
    np.testing.assert_array_equal(h5lens.open_group(manifest)["x"][...], np.arange(10))


def test_a_source_with_its_size_only_recorded_is_checked_by_size(tmp_path):
    """Servers that give no ETag or modification time leave the size: it is still checked,
    for each source, the unrecorded ones skipped."""
    from dataclasses import replace

    from h5lens.manifest.model import Source

    path, other = tmp_path / "data.h5", tmp_path / "other.h5"
    for name in (path, other):
        with h5py.File(name, "w") as f:
            f["x"] = np.arange(10)
    manifest = h5lens.index(path)
    unknown = replace(manifest.sources[0], size=None, mtime=None, etag=None, fingerprint=None)
    manifest = replace(manifest, sources=[unknown, Source(str(other), size=other.stat().st_size)])
    np.testing.assert_array_equal(h5lens.open_group(manifest)["x"][...], np.arange(10))
    with open(other, "ab") as f:
        f.write(b"\0" * 16)
    with pytest.raises(h5lens.StaleSourceError, match="other.h5"):
        h5lens.open_group(manifest)


def test_a_failed_chunk_read_names_the_key_and_its_byte_range(tmp_path):
    """The note a failed read carries names the chunk key and the exact bytes the manifest
    gave it, so a user can find them in the file."""
    from dataclasses import replace

    path = tmp_path / "chunked.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(4000, dtype="<i4"), chunks=(1000,), compression="gzip")
    manifest = h5lens.index(path, inline_threshold=0)
    table = manifest.chunks["x"]
    offset = table.offset.copy()
    offset[1] = manifest.sources[0].size - 10  # the chunk now runs past the end of the file
    manifest = replace(manifest, chunks={**manifest.chunks, "x": replace(table, offset=offset)})
    group = h5lens.open_group(manifest, verify=False)
    with pytest.raises(h5lens.SourceReadError) as raised:
        group["x"][1000:2000]
    start, length = int(offset[1]), int(table.length[1])
    notes = " ".join(getattr(raised.value, "__notes__", []))
    assert f"'x/c/1' (/x, bytes {start}-{start + length})" in notes, notes


def test_stale_local_source_is_refused(tmp_path):
    path = tmp_path / "changing.h5ad"
    write_sample(path)
    manifest = h5lens.index(path)
    with open(path, "ab") as f:
        f.write(b"\0" * 16)  # the file changes after indexing
    with pytest.raises(h5lens.StaleSourceError, match="changing.h5ad"):
        h5lens.open_group(manifest)
    assert h5lens.open_group(manifest, verify=False)["X/indptr"].shape == (301,)


@pytest.mark.skipif(
    not hasattr(__import__("zarr.core.codec_pipeline").core.codec_pipeline, "FusedCodecPipeline"),
    reason="zarr has FusedCodecPipeline from 3.3",
)
def test_synchronous_reads_for_zarrs_fused_pipeline(sample):
    """zarr's FusedCodecPipeline reads through get_sync when the store allows it (local sources)."""
    import zarr

    store = h5lens.open_store(h5lens.index(sample, inline_threshold=0))
    assert store._supports_sync_io
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"}):
        group = zarr.open_group(store, mode="r", zarr_format=3)
        with h5py.File(sample) as f:
            np.testing.assert_array_equal(group["X/data"][...], f["X/data"][...])
            np.testing.assert_array_equal(group["obsm/X_pca"][10:20], f["obsm/X_pca"][10:20])
    assert store.get_sync("nope/zarr.json") is None
    assert store.get_sync("zarr.json").to_bytes() == run(store.get("zarr.json", PROTO)).to_bytes()


def test_a_manifest_does_not_change_a_new_one_is_made(tmp_path):
    """A manifest refuses changes in place (its fields, nodes, tables, sources); a change is
    a new manifest, and a store keeps serving the one it was opened on. Pickling and
    copying keep it whole."""
    import copy
    import dataclasses
    import pickle

    path = tmp_path / "m.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(10), chunks=(5,))
        f.create_dataset("y", data=np.arange(3.0))
    manifest = h5lens.index(path, inline_threshold=0)
    with pytest.raises(TypeError, match="does not change"):
        manifest.nodes["z"] = manifest.nodes["y"]
    with pytest.raises(TypeError, match="does not change"):
        del manifest.chunks["x"]
    with pytest.raises(TypeError, match="does not change"):
        manifest.nodes.update({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.location = "elsewhere"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        manifest.sources.append(manifest.sources[0])  # type: ignore[attr-defined]

    before = h5lens.open_group(manifest)
    smaller = dataclasses.replace(
        manifest,
        nodes={k: v for k, v in manifest.nodes.items() if k != "y"},
        chunks={k: v for k, v in manifest.chunks.items() if k != "y"},
    )
    assert "y" in manifest.nodes and "y" not in smaller.nodes and smaller.children("") == ["x"]
    assert sorted(before.array_keys()) == ["x", "y"]
    assert sorted(h5lens.open_group(smaller).array_keys()) == ["x"]
    for again in (pickle.loads(pickle.dumps(manifest)), copy.deepcopy(manifest), copy.copy(manifest)):
        assert again == manifest and type(again.nodes) is type(manifest.nodes)
        with pytest.raises(TypeError):
            again.nodes["z"] = {}
        np.testing.assert_array_equal(h5lens.open_group(again)["x"][...], np.arange(10))


def test_the_typed_view_of_array_documents_says_what_zarr_reads(tmp_path):
    """ArrayDocument (what readers use instead of keys into zarr.json) against zarr's own
    reading of the same documents: shape, chunks, dimension names, fill value, codecs."""
    from h5lens.cli.sample import write_sample
    from h5lens.manifest.documents import ArrayDocument

    manifest = h5lens.index(write_sample(tmp_path / "sample.h5ad"))
    root = h5lens.open_group(manifest)
    arrays = 0
    for path, doc in manifest.nodes.items():
        view = ArrayDocument.of(doc)
        if doc["node_type"] == "group":
            assert view is None
            continue
        arrays += 1
        array = root[path]
        assert view.shape == array.shape and view.chunk_shape == array.chunks
        assert view.dimension_names == array.metadata.dimension_names
        assert [c["name"] for c in view.codecs] == [c.to_dict()["name"] for c in array.metadata.codecs]
        assert view.fill_value == array.metadata.to_dict()["fill_value"] or np.isnan(array.fill_value)
        assert view.grid_shape == array._async_array._chunk_grid.grid_shape
    assert arrays > 5
