"""h5lens's zarr codec pipeline (h5lens.pipeline) and hooks (h5lens.hooks), on with
h5lens.fast_reads(): every selection zarr can make reads what h5py reads, with them on and
with zarr's own pipeline; arrays of other stores keep exactly the pipeline they had;
turning it on and off behaves as documented."""

from __future__ import annotations

import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr
import zarr.core.codec_pipeline
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import h5lens
from h5lens import fast, hooks
from h5lens.fast import fast_reads

# whether this zarr is one h5lens's hooks are written for (fast_reads() installs them)
HOOKED = hooks.zarr_release() in hooks.WRITTEN_FOR

FILTERS = {
    "none": {},
    "gzip": {"compression": "gzip"},
    "gzip_shuffle": {"compression": "gzip", "shuffle": True},
    "shuffle_fletcher32": {"shuffle": True, "fletcher32": True},
    "lzf": {"compression": "lzf"},
}


@pytest.fixture(scope="module")
def arrays(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, h5lens.Manifest]:
    """Arrays of several ranks, byte orders and filters; edge chunks; never-written chunks
    (the fill value); a dataset whose chunks are all missing."""
    path = tmp_path_factory.mktemp("pipeline") / "arrays.h5"
    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        for name, options in FILTERS.items():
            f.create_dataset(f"{name}/one", data=rng.random(1003).astype("<f4"), chunks=(10,), **options)
            f.create_dataset(f"{name}/two", data=rng.integers(-9, 9, (37, 23)).astype(">i4"), chunks=(5, 4), **options)
            f.create_dataset(f"{name}/three", data=rng.random((7, 9, 11)), chunks=(3, 4, 5), **options)
        sparse = f.create_dataset("sparse", shape=(50, 40), chunks=(7, 6), dtype="<i2", fillvalue=-3)
        sparse[10:20, 5:30] = 7
        f.create_dataset("unwritten", shape=(30,), chunks=(4,), dtype="<f8", fillvalue=2.5)
        f.create_dataset("bools", data=rng.random(101) > 0.5, chunks=(8,), compression="gzip")
        f.create_dataset("one_chunk", data=np.arange(12.0), chunks=(12,))
        # chunks of 80 KB: decoded one by one, each into its place
        f.create_dataset("big", data=rng.random((250, 230)), chunks=(100, 100), compression="gzip", shuffle=True)
    return path, h5lens.index(path, inline_threshold=0)


def expected_of(path: Path, name: str) -> np.ndarray:
    with h5py.File(path) as f:
        return f[name][()]


NAMES = [f"{f}/{r}" for f in FILTERS for r in ("one", "two", "three")] + ["sparse", "unwritten", "bools", "one_chunk", "big"]


def _selections(shape: tuple[int, ...]) -> list[tuple[str, object]]:
    """(kind, selection) pairs: basic, integer (dropping axes), orthogonal, vectorised, masks."""
    out: list[tuple[str, object]] = [("basic", ...), ("basic", tuple(slice(1, -1) for _ in shape))]
    out.append(("basic", tuple(slice(None, None, 3) for _ in shape)))
    out.append(("basic", (shape[0] // 2,) + tuple(slice(None) for _ in shape[1:])))
    out.append(("basic", tuple(min(2, n - 1) for n in shape)))
    out.append(("oindex", tuple(np.array([n - 1, 0, n // 2, n // 2]) for n in shape)))
    out.append(("vindex", tuple(np.array([0, n - 1, n // 3]) for n in shape)))
    mask = np.zeros(shape, bool)
    mask.flat[::7] = True
    out.append(("vindex", mask))
    return out


def _read(array: zarr.Array, kind: str, selection: object) -> np.ndarray:
    if kind == "oindex":
        return np.asarray(array.oindex[selection])
    if kind == "vindex":
        return np.asarray(array.vindex[selection])
    return np.asarray(array[selection])


def _numpy(values: np.ndarray, kind: str, selection: object) -> np.ndarray:
    if kind == "oindex":
        return values[np.ix_(*selection)]  # type: ignore[misc]
    return values[selection]  # type: ignore[index]


@pytest.mark.parametrize("on", [True, False], ids=["h5lens pipeline", "zarr pipeline"])
@pytest.mark.parametrize("name", NAMES)
def test_every_selection_reads_as_h5py(arrays, name, on):
    path, manifest = arrays
    expected = expected_of(path, name)
    with fast_reads(on):
        array = h5lens.open_group(manifest)[name]
        assert fast.enabled() is on
        for kind, selection in _selections(expected.shape):
            got = _read(array, kind, selection)
            want = _numpy(expected, kind, selection)
            # zarr gives values in native byte order (h5py in the file's)
            assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape, (name, kind, selection)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {kind} {selection!r}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_slices_read_as_h5py(arrays, data):
    path, manifest = arrays
    name = data.draw(st.sampled_from(NAMES))
    expected = expected_of(path, name)
    selection = tuple(
        slice(data.draw(st.integers(-n, n)), data.draw(st.integers(-n, n)), data.draw(st.sampled_from([None, 1, 2, 5])))
        for n in expected.shape
    )
    with fast_reads():
        got = np.asarray(h5lens.open_group(manifest)[name][selection])
    np.testing.assert_array_equal(got, expected[selection])


def test_a_store_turns_nothing_on_and_fast_reads_false_turns_it_off(arrays):
    _, manifest = arrays
    before = zarr.config.get("codec_pipeline.path")
    store = h5lens.open_store(manifest)
    h5lens.open_group(manifest)["gzip/one"][:5]
    assert not fast.enabled() and not hooks.installed()
    assert zarr.config.get("codec_pipeline.path") == before
    with fast_reads(False):  # restores the default at the end: h5lens's own routes decode
        fast_reads()
        assert fast.enabled() and hooks.installed() is HOOKED
        group = zarr.open_group(store, mode="r")
        assert type(group["gzip/one"]._async_array.codec_pipeline).__name__ == "H5LensCodecPipeline"
        fast_reads(False)
        assert not fast.enabled() and not hooks.installed() and not fast.decodes()
        assert zarr.config.get("codec_pipeline.path") == before  # what was there comes back
    assert fast.decodes()
    with fast_reads():
        assert fast.enabled()
        with fast_reads(False):
            assert not fast.enabled() and not hooks.installed()
        assert fast.enabled() and hooks.installed() is HOOKED
    assert zarr.config.get("codec_pipeline.path") == before and not hooks.installed()


def _pipeline_of(array: zarr.Array) -> object:
    return array._async_array.codec_pipeline


@pytest.mark.parametrize(
    "configured",
    [
        pytest.param(None, id="zarr default"),
        pytest.param(
            "zarr.core.codec_pipeline.FusedCodecPipeline",
            id="fused",
            marks=pytest.mark.skipif(
                not hasattr(zarr.core.codec_pipeline, "FusedCodecPipeline"), reason="zarr has FusedCodecPipeline from 3.3"
            ),
        ),
    ],
)
def test_other_stores_keep_exactly_their_pipeline(arrays, tmp_path, configured):
    """While it is on, arrays of a MemoryStore and a LocalStore are built exactly as zarr
    builds them with it off (the pipeline configured before: same class, equal), and write
    and read as zarr does; arrays of h5lens stores wrap that pipeline."""
    setting = {} if configured is None else {"codec_pipeline.path": configured}

    def arrays_of_other_stores(where: str) -> list[zarr.Array]:
        made = []
        for store in (zarr.storage.MemoryStore(), zarr.storage.LocalStore(tmp_path / where)):
            array = zarr.create_array(store, shape=(100,), chunks=(7,), dtype="f8", compressors=None)
            array[:] = np.arange(100.0)
            made.append(array)
        return made

    with zarr.config.set(setting):
        plain = arrays_of_other_stores("off")
        with fast_reads():
            assert fast.enabled()
            during = arrays_of_other_stores("on")
            for a, b in zip(plain, during, strict=True):
                assert type(_pipeline_of(a)) is type(_pipeline_of(b)) and _pipeline_of(a) == _pipeline_of(b)
                np.testing.assert_array_equal(b[::3], np.arange(100.0)[::3])
            h5 = h5lens.open_group(arrays[1])["gzip/one"]
            assert type(_pipeline_of(h5)).__name__ == "H5LensCodecPipeline"
            assert type(_pipeline_of(h5).inner) is type(_pipeline_of(plain[0]))  # type: ignore[attr-defined]


def test_a_chunk_that_does_not_decode_is_named(tmp_path):
    path = tmp_path / "damaged.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(1000.0), chunks=(100,), compression="gzip", shuffle=True)
    manifest = h5lens.index(path, inline_threshold=0)
    offset = int(manifest.chunks["x"].offset[4])
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\x00" * 16)
    with fast_reads(), pytest.raises(h5lens.SourceReadError, match=r"chunk 'x/c/4' of /x .* does not decode"):
        h5lens.open_group(manifest, verify=False)["x"][:]


def test_reads_from_s3_through_the_pipeline(s3, arrays):
    path, _ = arrays
    key = f"bucket/{uuid.uuid4().hex}/arrays.h5"
    s3.filesystem().put(str(path), key)
    options = s3.storage_options()
    manifest = h5lens.index(f"s3://{key}", storage_options=options, inline_threshold=0)
    with fast_reads():
        group = h5lens.open_group(manifest, storage_options=options)
        for name in ("gzip_shuffle/two", "sparse", "lzf/three"):
            np.testing.assert_array_equal(group[name][...], expected_of(path, name))


@pytest.mark.skipif(not HOOKED, reason=f"h5lens's zarr hooks are written for zarr {hooks.WRITTEN_FOR}, not {zarr.__version__}")
def test_regions_skip_zarrs_per_chunk_list(arrays, monkeypatch):
    """Slices of step 1 and integers are read as one region: the pipeline's per-chunk read
    is never asked (under the zarr this is pinned to, whose private ``_get_selection`` is
    wrapped; a failure here means that zarr changed it)."""
    from h5lens.pipeline import H5LensCodecPipeline

    path, manifest = arrays
    asked: list[int] = []
    original = H5LensCodecPipeline.read

    async def counted(self, batch_info, out, drop_axes=()):
        batch = list(batch_info)
        asked.append(len(batch))
        return await original(self, batch, out, drop_axes)

    monkeypatch.setattr(H5LensCodecPipeline, "read", counted)
    with fast_reads():
        group = h5lens.open_group(manifest)
        for name in ("gzip_shuffle/two", "sparse", "big", "lzf/three", "unwritten"):
            expected = expected_of(path, name)
            for selection in (..., tuple(slice(1, -1) for _ in expected.shape), (0,), tuple(0 for _ in expected.shape)):
                got = group[name][selection]
                np.testing.assert_array_equal(got, expected[selection], err_msg=f"{name} {selection}")
                assert np.ndim(got) == np.ndim(expected[selection])
        assert asked == []
        np.testing.assert_array_equal(group["gzip/one"][::2], expected_of(path, "gzip/one")[::2])
        assert asked  # a step is not a region: zarr lists its chunks, the pipeline reads them


@pytest.mark.skipif(not HOOKED, reason=f"h5lens's zarr hooks are written for zarr {hooks.WRITTEN_FOR}, not {zarr.__version__}")
def test_small_local_regions_are_read_on_the_calling_thread(arrays, s3, monkeypatch):
    """A small region of a local file reads without zarr's event loop (no hop to its
    thread): ``[...]`` and ``.oindex`` give h5py's values and never reach the async region
    read; a region of more stored bytes than that, or of a remote source, does."""
    import threading

    from h5lens.engine.reader import ReadEngine

    path, manifest = arrays
    threads: list[str] = []
    original = ReadEngine.read_region_async

    async def counted(self, array_path, bounds):
        threads.append(threading.current_thread().name)
        return await original(self, array_path, bounds)

    monkeypatch.setattr(ReadEngine, "read_region_async", counted)
    with fast_reads():
        group = h5lens.open_group(manifest)
        for name in ("gzip_shuffle/two", "lzf/three", "sparse", "unwritten", "one_chunk"):
            expected = expected_of(path, name)
            for selection in (..., tuple(slice(1, -1) for _ in expected.shape), (0,), tuple(0 for _ in expected.shape)):
                np.testing.assert_array_equal(group[name][selection], expected[selection], err_msg=f"{name} {selection}")
                np.testing.assert_array_equal(group[name].oindex[selection], expected[selection])
        assert threads == []
        big = expected_of(path, "big")
        np.testing.assert_array_equal(group["big"][...], big)  # 400 KB stored: decoded off the loop
        assert len(threads) == 1 and threads[0] != threading.current_thread().name
        key = f"bucket/{uuid.uuid4().hex}/arrays.h5"
        s3.filesystem().put(str(path), key)
        options = s3.storage_options()
        remote = h5lens.open_group(h5lens.index(f"s3://{key}", storage_options=options), storage_options=options)
        np.testing.assert_array_equal(remote["gzip/one"][5:50], expected_of(path, "gzip/one")[5:50])
        assert len(threads) == 2


def test_text_regions_read_as_h5py_and_zarr_read_them(tmp_path):
    """Variable-length strings (vlen-utf8 chunks in the manifest): every region (edge chunks,
    a chunk never written) and every other selection give h5py's values, with the dtype
    zarr's own pipeline gives."""
    path = tmp_path / "text.h5"
    words = np.array([f"w{i}-é" * (i % 4) for i in range(103)], dtype=object)
    with h5py.File(path, "w") as f:
        f.create_dataset("one", data=words, dtype=h5py.string_dtype(), chunks=(10,))
        f.create_dataset("two", data=words[:99].reshape(9, 11), dtype=h5py.string_dtype(), chunks=(4, 5))
        holes = f.create_dataset("holes", shape=(30,), dtype=h5py.string_dtype(), chunks=(7,))
        holes[14:21] = ["x"] * 7
    with h5py.File(path) as f:
        expected = {name: f[name].asstr()[()] for name in ("one", "two", "holes")}
    manifest = h5lens.index(path)
    with fast_reads(False):
        plain = h5lens.open_group(manifest)
        dtypes = {name: plain[name][...].dtype for name in expected}
    with fast_reads():  # the hooks read regions of text
        _text_regions_read_as_zarr_reads(manifest, expected, dtypes, plain)


def _text_regions_read_as_zarr_reads(manifest, expected, dtypes, plain):
    group = h5lens.open_group(manifest)
    assert group.store.engine.region_codec("one") is not None
    for name, want in expected.items():
        for kind, selection in [*_selections(want.shape), ("basic", (slice(3, 5),) * want.ndim)]:
            got = group[name][selection] if kind == "basic" else _read(group[name], kind, selection)
            with fast_reads(False):
                zarrs = plain[name][selection] if kind == "basic" else _read(plain[name], kind, selection)
            assert type(got) is type(zarrs) and np.shape(got) == np.shape(zarrs) == np.shape(_numpy(want, kind, selection))
            np.testing.assert_array_equal(np.asarray(got).astype(object), _numpy(want, kind, selection), err_msg=f"{name} {selection}")
            assert np.asarray(got).dtype == dtypes[name]


def test_a_region_into_out_and_the_scalar_of_a_point(arrays):
    from zarr.core.buffer import default_buffer_prototype

    path, manifest = arrays
    expected = expected_of(path, "gzip_shuffle/three")
    with fast_reads():
        array = h5lens.open_group(manifest)["gzip_shuffle/three"]
        out = default_buffer_prototype().nd_buffer.create(shape=(5, 9, 3), dtype=np.dtype("f8"), fill_value=0)
        array.get_basic_selection((slice(2, 7), slice(None), slice(4, 7)), out=out)
        np.testing.assert_array_equal(out.as_numpy_array(), expected[2:7, :, 4:7])
        point = array[1, 2, 3]
        assert np.ndim(point) == 0 and point == expected[1, 2, 3]
        # a missing chunk holds the fill value, as zarr's own read gives it
        sparse = h5lens.open_group(manifest)["sparse"]
        np.testing.assert_array_equal(sparse[40:50, 30:40], expected_of(path, "sparse")[40:50, 30:40])


def test_missing_chunks_refused_when_zarr_is_told_to(arrays):
    """``array.read_missing_chunks=False`` is zarr's: the region route leaves it to zarr."""
    _, manifest = arrays
    with fast_reads(), zarr.config.set({"array.read_missing_chunks": False}):
        array = h5lens.open_group(manifest)["unwritten"]
        with pytest.raises(zarr.errors.ChunkNotFoundError, match="not found"):
            array[:]


def test_under_a_zarr_the_hooks_were_not_written_for_they_stay_out_and_say_so(arrays, monkeypatch):
    """A zarr release outside hooks.WRITTEN_FOR (here: every release) gets no hook and one
    HookWarning naming the version; the pipeline is still on and every read is h5py's."""
    import zarr.core.array as zarr_array

    path, manifest = arrays
    monkeypatch.setattr(hooks, "WRITTEN_FOR", ((0, 1),))
    monkeypatch.setattr(hooks, "_warned", set())
    original = zarr_array._get_selection
    with pytest.warns(hooks.HookWarning, match=rf"zarr {zarr.__version__} .*not installed"):
        with fast_reads():
            assert fast.enabled() and not hooks.installed()
            assert zarr_array._get_selection is original
            group = h5lens.open_group(manifest)
            for name in ("gzip_shuffle/two", "lzf/three", "sparse"):
                np.testing.assert_array_equal(group[name][1:4], expected_of(path, name)[1:4])
    assert not fast.enabled() and zarr_array._get_selection is original


def test_fast_reads_false_means_h5lens_decodes_nothing(arrays, monkeypatch):
    """Off means off: h5lens's own routes read through zarr too (no read plan runs), and
    give the same values; leaving the block brings h5lens's decoding back."""
    from h5lens.engine import plan as read_plan

    path, manifest = arrays
    ran: list[str] = []
    for name in ("now", "run"):
        original = getattr(read_plan.ReadPlan, name)

        def counted(self, store, _original=original, _name=name):
            ran.append(_name)
            return _original(self, store)

        monkeypatch.setattr(read_plan.ReadPlan, name, counted)
    expected = expected_of(path, "gzip_shuffle/two")
    with fast_reads(False):
        store = h5lens.open_store(manifest)
        assert store.read_region("gzip_shuffle/two", [(0, 5), (0, 5)]) is None
        np.testing.assert_array_equal(h5lens.open(manifest)["gzip_shuffle/two"][2:9], expected[2:9])
        np.testing.assert_array_equal(h5lens.open_group(manifest)["gzip_shuffle/two"][...], expected)
        assert ran == []
    np.testing.assert_array_equal(h5lens.open(manifest)["gzip_shuffle/two"][2:9], expected[2:9])
    assert ran
