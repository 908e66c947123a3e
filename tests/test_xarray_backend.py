"""The ``h5lens`` xarray engine: ``xr.open_dataset("m.json", engine="h5lens")`` and
``xr.open_datatree`` give what ``engine="h5netcdf"`` gives on the source file, for both
manifest forms, locally and over S3, with xarray's decoding options and dask chunks; and
with no engine, xarray picks h5lens for an h5lens manifest and kerchunk for kerchunk JSON.

The netCDF files are tests/test_netcdf.py's (netCDF4-python, h5netcdf, xarray, DataTree,
plain HDF5 with dimension scales).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import h5lens
from h5lens.xarray_backend import H5LensBackendEntrypoint

sys.path.insert(0, str(Path(__file__).parent))
import test_netcdf

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

WRITERS = test_netcdf.WRITERS
OPEN_OPTIONS = test_netcdf.OPEN_OPTIONS  # h5netcdf's phony dimension names, as netCDF-C's
FORMS = ("json", "compact")
SUFFIX = {"json": ".json", "compact": ".h5lens"}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Callable[[str], Path]:
    return test_netcdf.file_maker(tmp_path_factory.mktemp("xarray_backend"), WRITERS)


@pytest.fixture(scope="module")
def saved(files, tmp_path_factory) -> Callable[[str, str], Path]:
    """``get(writer, form)``: the manifest of ``writer``'s file, saved in ``form``."""
    root = tmp_path_factory.mktemp("manifests")
    made: dict[tuple[str, str], Path] = {}

    def get(writer: str, form: str) -> Path:
        if (writer, form) not in made:
            path = root / f"{writer}.nc{SUFFIX[form]}"
            h5lens.index(files(writer)).save(path, format=form)
            made[writer, form] = path
        return made[writer, form]

    return get


_READ: dict[tuple[str, str, int, str], xr.Dataset | xr.DataTree] = {}


def _h5netcdf(opener: Callable[..., xr.Dataset | xr.DataTree], path: Path, kwargs: dict[str, object]):
    """What the h5netcdf engine reads, loaded, the file closed, and read once per file and
    options (it is the slow side of every comparison). Closed: an h5netcdf file left to the
    garbage collector may be closed in zarr's event-loop thread while another thread holds
    h5py's lock (kerchunk's scan below waits on zarr holding it: a deadlock)."""
    key = (opener.__name__, str(path), path.stat().st_mtime_ns, repr(sorted(kwargs.items())))
    if key not in _READ:
        with opener(path, engine="h5netcdf", **OPEN_OPTIONS, **kwargs) as opened:
            _READ[key] = opened.load()
    return _READ[key]


def expected_dataset(path: Path, **kwargs: object) -> xr.Dataset:
    return _h5netcdf(xr.open_dataset, path, kwargs)


def expected_tree(path: Path, **kwargs: object) -> xr.DataTree:
    return _h5netcdf(xr.open_datatree, path, kwargs)


def test_engine_is_registered_before_kerchunk():
    """Installed through the ``xarray.backends`` entry point; xarray asks engines in the order
    netcdf4, h5netcdf, scipy, then the others by name: h5lens before kerchunk."""
    engines = list(xr.backends.list_engines())
    assert "h5lens" in engines, "pip install -e . registers the entry point"
    assert engines.index("h5lens") < engines.index("kerchunk")
    assert isinstance(xr.backends.list_engines()["h5lens"], H5LensBackendEntrypoint)


# -- identical to the h5netcdf engine ------------------------------------------------------


# every file from the JSON form; the compact form (the same documents, other chunk tables)
# from a few
COMPACT_WRITERS = ["netcdf4_python", "xarray_h5netcdf", "user_types"]


@pytest.mark.parametrize(
    ("writer", "form"), [(w, "json") for w in sorted(WRITERS)] + [(w, "compact") for w in COMPACT_WRITERS]
)
def test_open_dataset_identical_to_h5netcdf(writer, form, files, saved):
    path = files(writer)
    for group in test_netcdf._groups(path):
        if writer == "datatree" and group != "/":
            continue  # groups that inherit the root's coordinates: compared as a DataTree
        got = xr.open_dataset(saved(writer, form), engine="h5lens", group=group).load()
        xr.testing.assert_identical(got, expected_dataset(path, group=group))


@pytest.mark.parametrize(
    ("writer", "form"),
    [(w, "json") for w in ("netcdf4_python", "xarray_h5netcdf", "datatree", "h5netcdf")]
    + [(w, "compact") for w in ("netcdf4_python", "datatree")],
)
def test_open_datatree_identical_to_h5netcdf(writer, form, files, saved):
    path = files(writer)
    expected = expected_tree(path)
    got = xr.open_datatree(saved(writer, form), engine="h5lens").load()
    xr.testing.assert_identical(got, expected)
    groups = xr.open_groups(saved(writer, form), engine="h5lens")
    assert sorted(groups) == sorted(expected.groups)


def test_open_datatree_of_a_group(files, saved):
    path = files("netcdf4_python")
    expected = expected_tree(path, group="/obs")
    got = xr.open_datatree(saved("netcdf4_python", "json"), engine="h5lens", group="/obs").load()
    xr.testing.assert_identical(got, expected)


@pytest.mark.parametrize(
    "options",
    [
        {"decode_times": False},
        {"mask_and_scale": False},
        {"decode_cf": False},
        {"drop_variables": ["temp", "precipitation", "precip"]},
        {"decode_coords": "all"},
        {"concat_characters": False},
        {"decode_timedelta": False},
    ],
    ids=lambda options: ",".join(options),
)
def test_decoding_options_are_xarrays(options, files, saved):
    """Unpacking, masking, times, characters: each option does to the manifest what it does
    to the file (packed ints with scale_factor and _FillValue, noleap and standard times)."""
    for writer in ("netcdf4_python", "xarray_netcdf4"):
        got = xr.open_dataset(saved(writer, "json"), engine="h5lens", **options).load()
        xr.testing.assert_identical(got, expected_dataset(files(writer), **options))


def test_packed_and_masked_values_decode(saved):
    got = xr.open_dataset(saved("netcdf4_python", "compact"), engine="h5lens")
    assert got["packed"].dtype == np.float64 and np.isnan(got["packed"].values[0, 0])
    assert got["packed"].encoding["scale_factor"] == 0.01
    assert np.isnan(got["temp"].values[1, 2, 3])
    raw = xr.open_dataset(saved("netcdf4_python", "compact"), engine="h5lens", mask_and_scale=False)
    assert raw["packed"].dtype == np.int16 and raw["packed"].values[0, 0] == -32767


def test_dask_chunks(files, saved):
    """``chunks={}``: dask arrays chunked as the file is; computed, the same Dataset."""
    for form in FORMS:
        ds = xr.open_dataset(saved("netcdf4_python", form), engine="h5lens", chunks={})
        assert type(ds["temp"].data).__module__.startswith("dask")
        assert ds["temp"].chunks == ((2, 2, 2), (2, 2), (5,))
        xr.testing.assert_identical(ds.compute(), expected_dataset(files("netcdf4_python")))
    tree = xr.open_datatree(saved("netcdf4_python", "json"), engine="h5lens", chunks={})
    assert type(tree["obs"]["reading"].data).__module__.startswith("dask")
    expected = expected_tree(files("netcdf4_python"))
    xr.testing.assert_identical(tree.compute(), expected)


def test_manifest_and_store_objects(files, saved):
    """An h5lens.Manifest or an open ManifestStore, with or without the engine named."""
    manifest = h5lens.Manifest.load(saved("xarray_h5netcdf", "json"))
    expected = expected_dataset(files("xarray_h5netcdf"))
    xr.testing.assert_identical(xr.open_dataset(manifest, engine="h5lens").load(), expected)
    xr.testing.assert_identical(xr.open_dataset(manifest).load(), expected)
    store = h5lens.open_store(manifest)
    ds = xr.open_dataset(store)
    ds.close()  # the caller's store stays usable
    xr.testing.assert_identical(xr.open_dataset(store, engine="h5lens").load(), expected)
    with pytest.raises(h5lens.InvalidOptionError, match="storage_options"):
        xr.open_dataset(store, engine="h5lens", storage_options={"anon": True})


# -- open_store's options --------------------------------------------------------------------


def test_verify_and_source_urls(files, tmp_path):
    path = tmp_path / "moving.nc"
    path.write_bytes(files("h5netcdf").read_bytes())
    manifest = tmp_path / "moving.nc.json"
    h5lens.index(path).to_json(manifest)
    expected = expected_dataset(path)
    recorded = h5lens.Manifest.load(manifest).sources[0].url  # relative: the file is beside it
    moved = tmp_path / "moved.nc"
    path.rename(moved)
    remap = {recorded: str(moved)}
    xr.testing.assert_identical(xr.open_dataset(manifest, engine="h5lens", source_urls=remap).load(), expected)
    with open(moved, "ab") as f:  # changed since indexing (the bytes read are the same)
        f.write(b"\0")
    with pytest.raises(h5lens.StaleSourceError):
        xr.open_dataset(manifest, engine="h5lens", source_urls=remap)
    got = xr.open_dataset(manifest, engine="h5lens", source_urls=remap, verify=False)
    xr.testing.assert_identical(got.load(), expected)


def test_s3_manifests_and_sources(s3, files, tmp_path):
    """Manifest and netCDF file in a bucket: storage_options read both."""
    fs = s3.filesystem()
    options = s3.storage_options()
    local = files("netcdf4_python")
    fs.put(str(local), "bucket/xarray/era.nc")
    manifest = h5lens.index("s3://bucket/xarray/era.nc", storage_options=options)
    manifest.to_json("s3://bucket/xarray/era.nc.json", storage_options=options)
    manifest.save("s3://bucket/xarray/era.nc.h5lens", format="compact", storage_options=options)
    expected = expected_dataset(local)
    for url in ("s3://bucket/xarray/era.nc.json", "s3://bucket/xarray/era.nc.h5lens"):
        got = xr.open_dataset(url, engine="h5lens", storage_options=options).load()
        xr.testing.assert_identical(got, expected)
    tree = xr.open_datatree("s3://bucket/xarray/era.nc.json", engine="h5lens", storage_options=options, chunks={})
    xr.testing.assert_identical(tree.compute(), expected_tree(local))


def test_s3_manifest_of_a_local_file_needs_allow_local(s3, files):
    """A manifest read from a bucket may not make h5lens read this machine's files."""
    options = s3.storage_options()
    local = files("h5netcdf")
    # such a manifest is refused when written there (h5lens.Manifest.save): put its bytes there as
    # someone else's would be
    s3.filesystem().pipe("bucket/xarray/local.nc.json", json.dumps(h5lens.index(local).to_dict()).encode())
    with pytest.raises(h5lens.RefusedSourceError, match="allow_local"):
        xr.open_dataset("s3://bucket/xarray/local.nc.json", engine="h5lens", storage_options=options)
    got = xr.open_dataset(
        "s3://bucket/xarray/local.nc.json", engine="h5lens", storage_options=options, allow_local=[str(local.parent)]
    )
    xr.testing.assert_identical(got.load(), expected_dataset(local))


# -- no engine: which backend xarray picks ---------------------------------------------------


def guessed(target: object) -> str:
    return xr.backends.plugins.guess_engine(target)


@pytest.fixture(scope="module")
def kerchunk_json(files, tmp_path_factory) -> Path:
    from kerchunk.hdf import SingleHdf5ToZarr

    path = tmp_path_factory.mktemp("kerchunk") / "refs.json"
    gc.collect()  # h5netcdf files other tests left open: closed now, not inside kerchunk's scan
    path.write_text(json.dumps(SingleHdf5ToZarr(str(files("h5netcdf"))).translate()))
    return path


@pytest.mark.parametrize("form", FORMS)
def test_no_engine_picks_h5lens(form, files, saved):
    assert guessed(saved("netcdf4_python", form)) == "h5lens"
    assert guessed(str(saved("netcdf4_python", form))) == "h5lens"
    xr.testing.assert_identical(
        xr.open_dataset(saved("netcdf4_python", form)).load(), expected_dataset(files("netcdf4_python"))
    )
    tree = xr.open_datatree(saved("datatree", form)).load()
    xr.testing.assert_identical(tree, expected_tree(files("datatree")))


def test_no_engine_leaves_kerchunk_json_to_kerchunk(kerchunk_json, files):
    assert not H5LensBackendEntrypoint().guess_can_open(kerchunk_json)
    assert guessed(kerchunk_json) == "kerchunk"
    got = xr.open_dataset(str(kerchunk_json))  # kerchunk's engine, as before h5lens was installed
    assert set(got.variables) == set(expected_dataset(files("h5netcdf")).variables)


def test_kerchunk_json_with_engine_h5lens_says_what_it_is(kerchunk_json):
    with pytest.raises(h5lens.ManifestFormatError, match="kerchunk's.*engine='kerchunk'"):
        xr.open_dataset(kerchunk_json, engine="h5lens")


def test_guess_reads_a_large_manifest_from_both_ends(tmp_path):
    """A JSON manifest longer than the MiB guessing reads first: the writer puts the
    "h5lens" object last (found at the end), another writer may put it first."""
    path = tmp_path / "big.nc"
    xr.Dataset({"x": ("n", np.arange(300_000, dtype="i4"))}).to_netcdf(path, engine="h5netcdf")
    manifest = h5lens.index(path, inline_threshold=1 << 22)  # its 1.2 MB inline
    last = tmp_path / "last.json"
    manifest.to_json(last)
    assert last.stat().st_size > 1 << 20
    refs = json.loads(last.read_bytes())
    assert list(refs)[-1] == "h5lens"
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"h5lens": refs["h5lens"], **{k: v for k, v in refs.items() if k != "h5lens"}}))
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(refs, indent=2))
    for target in (last, first, pretty):
        assert guessed(target) == "h5lens", target.name
    xr.testing.assert_identical(xr.open_dataset(last).load(), expected_dataset(path))
    # the same references without the h5lens object (a kerchunk file), or with it nested
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: v for k, v in refs.items() if k != "h5lens"}))
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({**{k: v for k, v in refs.items() if k != "h5lens"}, "x": {"h5lens": {}}}))
    in_refs = tmp_path / "in_refs.json"
    in_refs.write_text(json.dumps({"version": 1, "refs": {**refs["refs"], "h5lens": {"a": 1}}}))
    for target in (plain, nested, in_refs):
        assert not H5LensBackendEntrypoint().guess_can_open(target), target.name
        assert guessed(target) == "kerchunk", target.name


def test_guess_refuses_what_is_not_a_manifest(tmp_path, saved):
    backend = H5LensBackendEntrypoint()
    cases = {
        "small.json": b'{"version": 1, "refs": {"h5lens": {"x": 1}}}',
        "array.json": b'[{"h5lens": {}}]',
        "text.json": b"not json",
        "string.json": b'{"h5lens": "a string"}',
        "empty.json": b"",
        "binary.json": bytes(range(256)),
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        assert not backend.guess_can_open(tmp_path / name), name
    (tmp_path / "a.zarr").mkdir()
    assert not backend.guess_can_open(tmp_path / "a.zarr")
    assert not backend.guess_can_open(tmp_path / "missing.json")
    # JSON is recognised under a .json name only; the compact form by its magic, any name
    renamed = tmp_path / "manifest.txt"
    renamed.write_bytes(saved("h5netcdf", "json").read_bytes())
    assert not backend.guess_can_open(renamed)
    assert backend.guess_can_open(f"file://{saved('h5netcdf', 'json')}")
    compact = tmp_path / "manifest.bin"
    compact.write_bytes(saved("h5netcdf", "compact").read_bytes())
    assert backend.guess_can_open(compact)
    assert not backend.guess_can_open(b"H5LENS-COMPACT\x00\x01")


def test_guess_reads_nothing_remote():
    """No storage options reach guess_can_open, and kerchunk JSON has the same name: remote
    .json URLs are not claimed (engine="h5lens" opens them), remote .h5lens ones (the
    compact form's name) are, by name. An unreachable endpoint shows that nothing is read."""
    backend = H5LensBackendEntrypoint()
    for url in ("s3://bucket/era.nc.json", "https://127.0.0.1:9/era.nc.json", "simplecache::s3://b/m.json"):
        assert not backend.guess_can_open(url)
    for url in ("s3://bucket/era.nc.h5lens", "https://127.0.0.1:9/era.nc.h5lens?version=2"):
        assert backend.guess_can_open(url)


def test_compact_magic_and_names_match_the_format():
    from h5lens.manifest import compact, io
    from h5lens.xarray_backend import COMPACT_MAGIC

    assert COMPACT_MAGIC == compact.MAGIC
    assert SUFFIX == {"json": io.JSON_SUFFIX, "compact": io.COMPACT_SUFFIX}


# -- errors ----------------------------------------------------------------------------------


def test_missing_manifest_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.nc.json"
    for opener in (xr.open_dataset, xr.open_datatree):
        with pytest.raises(FileNotFoundError, match="nope.nc.json: no such file"):
            opener(missing, engine="h5lens")


def test_not_a_manifest_argument(tmp_path):
    with pytest.raises(TypeError, match="engine='h5lens' opens a manifest"):
        xr.open_dataset(b"bytes", engine="h5lens")


def test_importing_stays_cheap():
    """``import h5lens`` imports no xarray; the entry point (imported by xarray with every
    other backend's) imports neither zarr nor h5lens's reader side."""
    code = (
        "import sys, h5lens\n"
        "assert 'xarray' not in sys.modules\n"
        "import xarray, h5lens.xarray_backend\n"
        "loaded = [m for m in ('zarr', 'h5lens.store', 'h5lens.manifest.model') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
