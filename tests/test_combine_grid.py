"""Arrays of many HDF5 files concatenated by reference (h5lens.combining.stack) and read back
through h5lens's read engine on a rectilinear grid (h5lens.engine.segments) and through zarr
with its rectilinear flag: every region and run equals numpy's concatenation of what h5py
reads from the files."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr

import h5lens
from h5lens.combining.inputs import Input, SourceTable
from h5lens.combining.stack import Part, stack, why_not
from h5lens.errors import ManifestFormatError
from h5lens.manifest.model import Manifest
from h5lens.read.options import OpenOptions

ROOT = {"zarr_format": 3, "node_type": "group", "attributes": {}}
FILTERS = {
    "gzip": {"compression": "gzip"},
    "shuffle-gzip": {"compression": "gzip", "shuffle": True},
    "lzf": {"compression": "lzf"},
    "fletcher32": {"fletcher32": True, "chunks": True},
    "contiguous": {},
}


def _files(tmp_path: Path, kind: str, shapes: list[tuple[int, ...]], chunks: list[tuple[int, ...] | None]) -> list[Path]:
    rng = np.random.default_rng(len(shapes))
    paths = []
    for i, (shape, chunk) in enumerate(zip(shapes, chunks, strict=True)):
        path = tmp_path / f"{kind}{i}.h5"
        with h5py.File(path, "w") as f:
            options = dict(FILTERS[kind])
            if kind != "contiguous" and chunk is not None:
                options["chunks"] = chunk
            f.create_dataset("a", data=rng.integers(0, 1000, shape).astype("<f4"), **options)
        paths.append(path)
    return paths


def _combined(paths: list[Path], **index) -> Manifest:
    sources = SourceTable()
    inputs = [Input(str(p), h5lens.index(p, inline_threshold=0, **index), OpenOptions()) for p in paths]
    parts = [Part(item, "a", sources.add(item)) for item in inputs]
    assert why_not(parts) is None
    stacked = stack(parts)
    return Manifest(nodes={"": ROOT, "a": stacked.doc}, chunks={"a": stacked.table}, sources=tuple(sources.sources))


def _expected(paths: list[Path]) -> np.ndarray:
    found = []
    for path in paths:
        with h5py.File(path) as f:
            found.append(f["a"][...])
    return np.concatenate(found)


@pytest.mark.parametrize("kind", sorted(FILTERS))
def test_1d_regions_and_runs(tmp_path, kind):
    paths = _files(tmp_path, kind, [(1000,), (333,), (50,), (777,)], [(128,), (100,), (40,), (128,)])
    manifest = _combined(paths, slab_bytes=400)
    expected = _expected(paths)
    doc = manifest.nodes["a"]
    assert doc["chunk_grid"]["name"] == "rectilinear"
    store = h5lens.open_store(manifest)
    rng = np.random.default_rng(0)
    for _ in range(30):
        lo = int(rng.integers(0, len(expected)))
        hi = int(rng.integers(lo + 1, len(expected) + 1))
        np.testing.assert_array_equal(store.read_region("a", [(lo, hi)]), expected[lo:hi])
    starts = np.sort(rng.integers(0, len(expected) - 100, 40))
    stops = starts + rng.integers(0, 100, 40)
    order = rng.permutation(40)  # runs in any order, some empty
    want = np.concatenate([expected[a:b] for a, b in zip(starts[order], stops[order], strict=True)])
    np.testing.assert_array_equal(store.read_runs("a", starts[order], stops[order]), want)
    np.testing.assert_array_equal(store.read_region("a", [(0, len(expected))]), expected)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        array = zarr.open_array(store, path="a", mode="r", zarr_format=3)
        np.testing.assert_array_equal(array[...], expected)
        np.testing.assert_array_equal(array[990:1400], expected[990:1400])


@pytest.mark.parametrize("kind", ["gzip", "contiguous"])
def test_runs_in_order_across_files_decode_into_their_stretches(tmp_path, kind):
    """Runs in order over many files (a lazy block of rows): each file's pieces are one
    stretch of the result, decoded straight into it, also into a buffer the caller gives."""
    import asyncio

    paths = _files(tmp_path, kind, [(1000,), (333,), (50,), (777,)], [(128,), (100,), (40,), (128,)])
    expected = _expected(paths)
    store = h5lens.open_store(_combined(paths, slab_bytes=400))
    cases = [
        (np.asarray([0]), np.asarray([len(expected)])),  # the whole array
        (np.asarray([5, 990, 1340]), np.asarray([990, 1340, 2100])),  # runs that meet, across files
        (np.asarray([10, 500, 1300, 1380, 2000]), np.asarray([20, 1200, 1300, 1390, 2150])),  # gaps, an empty run
    ]
    for starts, stops in cases:
        want = np.concatenate([expected[a:b] for a, b in zip(starts, stops, strict=True)])
        np.testing.assert_array_equal(store.read_runs("a", starts, stops), want)
        given = np.full(len(want), -1, dtype=want.dtype)
        found = asyncio.run(store.engine.read_runs_async("a", starts, stops, given))
        assert found is given
        np.testing.assert_array_equal(given, want)


@pytest.mark.parametrize("kind", ["gzip", "contiguous"])
def test_2d_rows_from_files_of_other_chunk_lengths(tmp_path, kind):
    paths = _files(tmp_path, kind, [(90, 12), (41, 12), (7, 12)], [(16, 5), (10, 5), (4, 5)])
    manifest = _combined(paths, slab_bytes=12 * 4 * 8)
    expected = _expected(paths)
    store = h5lens.open_store(manifest)
    for bounds in ([(0, 138), (0, 12)], [(85, 100), (3, 11)], [(130, 138), (0, 1)], [(40, 41), (4, 9)]):
        window = tuple(slice(a, b) for a, b in bounds)
        np.testing.assert_array_equal(store.read_region("a", bounds), expected[window])
    nav = h5lens.open(manifest)
    np.testing.assert_array_equal(nav["a"][80:100, 2:7], expected[80:100, 2:7])
    with zarr.config.set({"array.rectilinear_chunks": True}):
        np.testing.assert_array_equal(zarr.open_array(store, path="a", mode="r")[...], expected)


def test_other_chunks_beyond_the_first_axis_cannot_be_referenced(tmp_path):
    paths = _files(tmp_path, "gzip", [(30, 12), (30, 12)], [(10, 6), (10, 4)])
    sources = SourceTable()
    inputs = [Input(str(p), h5lens.index(p, inline_threshold=0), OpenOptions()) for p in paths]
    reason = why_not([Part(item, "a", sources.add(item)) for item in inputs])
    assert reason is not None and "differ between" in reason


def test_compact_and_json_forms_keep_the_grid(tmp_path):
    paths = _files(tmp_path, "gzip", [(300,), (123,)], [(64,), (50,)])
    manifest = _combined(paths)
    expected = _expected(paths)
    for name in ("c.json", "c.h5lens"):
        manifest.save(tmp_path / name)
        loaded = Manifest.load(tmp_path / name)
        assert loaded.nodes["a"]["chunk_grid"] == manifest.nodes["a"]["chunk_grid"]
        np.testing.assert_array_equal(h5lens.open_store(loaded).read_region("a", [(0, 423)]), expected)


@pytest.mark.parametrize(
    ("chunk_shapes", "words"),
    [
        ([[100, 100]], "do not cover the shape"),
        ([[[100, 2], 0]], "chunk edge or \\[size, count\\]"),
        ([[100, 300], [4]], "do not cover the shape"),
        (["x"], "chunk edges or a positive integer"),
    ],
    ids=["short", "zero edge", "axes", "not edges"],
)
def test_damaged_rectilinear_grids_are_format_errors_naming_the_array(tmp_path, chunk_shapes, words):
    paths = _files(tmp_path, "gzip", [(300,), (123,)], [(64,), (50,)])
    manifest = _combined(paths)
    data = manifest.to_dict()
    doc = json.loads(data["refs"]["a/zarr.json"])
    doc["chunk_grid"]["configuration"]["chunk_shapes"] = chunk_shapes
    data["refs"]["a/zarr.json"] = json.dumps(doc)
    with pytest.raises(ManifestFormatError, match=f"/a: .*{words}"):
        Manifest.from_dict(data)
