"""h5lens-codecs (``js/``) in Node 20: manifests read by zarrita.js over HTTP, as a page would.

Files written by libhdf5 (h5py, hdf5plugin, netCDF-C, scanpy's own h5ad) are indexed and
served from 127.0.0.1 (:class:`h5lens.testing.http.FileServer`, ranges as archives answer
them); ``js/test/read-arrays.mjs`` reads every array with zarrita.js and writes what it got;
each value must equal h5py's reading of the file, bit for bit. Two readers, two claims of
``h5lens check --for browser`` (:mod:`h5lens.browser`) put to the test:

- zarrita.js with h5lens-codecs reads every array the check says it reads, and fails on
  every array the check says no browser reader decodes;
- plain zarrita.js with @zarrita/storage's ReferenceStore reads right every array the check
  finds nothing about, and fails (or reads otherwise) where the check says it needs the pack.

Needs ``node`` and ``js/node_modules`` (``npm ci`` in ``js/``, which ``make test`` runs);
without them the tests skip, saying so, and fail where ``H5LENS_REQUIRE_JS=1`` (CI).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import h5lens
from cli_runner import h5lens as h5lens_command
from h5lens.browser import check_for_browser
from h5lens.browser.check import NAME
from h5lens.format.keys import unescape_key
from h5lens.testing.http import FileServer
from required import JS, js_packages_missing, missing
from shared_data import shared_file, shared_names

REQUIRE_JS = "H5LENS_REQUIRE_JS"


def node_or_skip() -> str:
    """The node executable, or a skip (a failure under ``H5LENS_REQUIRE_JS=1``) saying what is missing."""
    node = shutil.which("node")
    if node is None:
        missing("node not found on PATH: Node 20 or later runs the JavaScript tests", REQUIRE_JS)
    if (reason := js_packages_missing()) is not None:
        missing(reason, REQUIRE_JS)
    return node


def read_in_node(mode: str, manifest_url: str, paths: list[str], work: Path) -> dict[str, dict[str, Any]]:
    """What zarrita.js read of each of ``paths`` (``mode`` "pack" or "plain"), by path."""
    node = node_or_skip()
    work.mkdir(parents=True, exist_ok=True)
    listed = work / "paths.json"
    listed.write_text(json.dumps(paths))
    out = work / "out"
    done = subprocess.run(
        [node, "test/read-arrays.mjs", mode, manifest_url, str(listed), str(out)],
        cwd=JS, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, f"node failed:\n{done.stdout}\n{done.stderr}"
    results = json.loads((out / "results.json").read_text())
    for result in results:
        if result.get("file"):
            result["bytes"] = (out / result["file"]).read_bytes()
    return {r["path"]: r for r in results}


def hdf5_path(path: str) -> str:
    return "/".join(unescape_key(name) for name in path.split("/"))


def h5py_value(f: h5py.File, path: str) -> Any:
    ds = f[hdf5_path(path)]
    if h5py.check_string_dtype(ds.dtype) is not None:
        return ds.asstr()[()]
    return ds[()]


def assert_same(result: dict[str, Any], want: Any, where: str) -> None:
    """What Node read equals h5py's value, bit for bit (strings as text)."""
    assert result["ok"], f"{where}: {result.get('error')}"
    values = np.asarray(want)
    if "bytes" in result:
        assert values.dtype.kind in "biuf", f"{where}: bytes for {values.dtype}"
        little = np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"), copy=False))
        assert result["bytes"] == little.tobytes(), f"{where}: the bytes differ from h5py's"
        return
    got = result["values"]
    if values.dtype.kind in "OUS":
        assert got == [v.decode() if isinstance(v, bytes) else v for v in values.ravel().tolist()], where
    else:
        assert len(got) == values.size == 1, where
        value = values.ravel()[0]
        expected = str(int(value)) if values.dtype.kind in "iu" and values.dtype.itemsize == 8 else value.item()
        assert got[0] == expected or (isinstance(expected, float) and np.isnan(expected) and got[0] == "NaN"), where


# -- the test file: one dataset per filter and edge case, written by libhdf5 -----------------


def write_filters_file(path: Path) -> None:
    import hdf5plugin

    rng = np.random.default_rng(48)
    smooth = np.cumsum(rng.normal(size=(203, 37)), axis=0).astype("<f4")
    with h5py.File(path, "w") as f:
        f.create_dataset("lzf_f4", data=np.round(smooth), chunks=(50, 16), compression="lzf")
        # random bytes after zeros: LZF cannot shrink those chunks, HDF5 stores them as they are
        mixed = np.concatenate([np.zeros(2048, "u1"), rng.integers(0, 256, 3000, dtype="u1")])
        f.create_dataset("lzf_mixed_u1", data=mixed, chunks=(1024,), compression="lzf")
        f.create_dataset("lzf_shuffle_i8", data=np.arange(-3000, 3000, 3, dtype="<i8"), chunks=(333,), compression="lzf", shuffle=True)
        f.create_dataset("gzip_shuffle_be_f8", data=smooth.astype(">f8")[:100], chunks=(30, 10), compression="gzip", shuffle=True)
        f.create_dataset("fletcher_gzip_f8", data=smooth.astype("<f8"), chunks=(64, 8), compression="gzip", fletcher32=True, shuffle=True)
        f.create_dataset("fletcher_odd_u1", data=rng.integers(0, 256, 1001, dtype="u1"), chunks=(77,), fletcher32=True)
        f.create_dataset("fletcher_lzf_i2", data=rng.integers(-999, 999, 3001, dtype="<i2"), chunks=(500,), compression="lzf", fletcher32=True)
        ints = rng.integers(-(2**40), 2**40, 4003, dtype="<i8")
        for cname in ("lz4", "zstd", "none"):
            f.create_dataset(f"bitshuffle_{cname}_i8", data=ints, chunks=(1500,), **hdf5plugin.Bitshuffle(nelems=256, cname=cname))
        f.create_dataset("bitshuffle_default_f4", data=smooth, chunks=(203, 37), **hdf5plugin.Bitshuffle())
        f.create_dataset("lz4_blocks_u2", data=rng.integers(0, 50, 9000, dtype="<u2"), chunks=(4000,), **hdf5plugin.LZ4(nbytes=1000))
        f.create_dataset("lz4_random_u1", data=rng.integers(0, 256, 5000, dtype="u1"), chunks=(2048,), **hdf5plugin.LZ4(nbytes=512))
        f.create_dataset("plain_bool", data=rng.integers(0, 2, 300).astype(bool), chunks=(128,))
        f.create_dataset("plain_u8", data=np.array([0, 1, 2**63, 2**64 - 1] * 50, dtype="<u8"), chunks=(64,))
        strings = f.create_dataset("strings", data=np.array(["a", "bé", "", "longer text"] * 5, dtype=object), dtype=h5py.string_dtype())
        strings.attrs["scale"] = np.nan
        f.create_dataset("scalar_text", data="hello", dtype=h5py.string_dtype())
        f.create_dataset("scalar_f8", data=np.float64(2.5))
        nan_attrs = f.create_dataset("nan_attrs", data=np.arange(10.0), chunks=(4,))
        nan_attrs.attrs["missing"] = np.nan
        nan_attrs.attrs["range"] = np.array([-np.inf, np.inf])
        for name in ("my data", "a#b", "what?", "naïve", "50%"):
            f.create_dataset(name, data=np.arange(20, dtype="<i4"), chunks=(8,), compression="gzip")
        group = f.create_group("group with space")
        group.create_dataset("inner", data=np.arange(12, dtype="<u2"), chunks=(5,), compression="gzip")
        f.create_dataset("fixed_bytes", data=np.array([b"ab", b"cde", b""] * 4, dtype="S3"), chunks=(5,))
        f.create_dataset("float16", data=np.arange(16, dtype="<f2"), chunks=(8,))
        f.create_dataset("compound", data=np.zeros(6, dtype=[("a", "<i4"), ("b", "<f8")]), chunks=(3,))
        _bitfields(f)


def _bitfields(f: h5py.File) -> None:
    h5t, h5d, h5s, h5p = h5py.h5t, h5py.h5d, h5py.h5s, h5py.h5p
    cases = {
        "bitfield_signed_i2": (h5t.STD_I16LE, 12, 2, np.array([-2000, 5, -1, 1023, -1024, 7, 0, -9] * 9, "<i2")),
        "bitfield_unsigned_u2": (h5t.STD_U16LE, 12, 0, np.array([1, 2, 4095, 0, 3, 5, 6, 7] * 9, "<u2")),
        "bitfield_be_i4": (h5t.STD_I32BE, 20, 5, np.array([-(2**19), 5, -1, 2**19 - 1, 12, -7, 0, 99] * 9, ">i4")),
    }
    for name, (base, precision, offset, values) in cases.items():
        tid = base.copy()
        tid.set_precision(precision)
        tid.set_offset(offset)
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_chunk((16,))
        dcpl.set_deflate(4)
        ds = h5d.create(f.id, name.encode(), tid, h5s.create_simple(values.shape), dcpl=dcpl)
        ds.write(h5s.ALL, h5s.ALL, values)


def write_netcdf_file(path: Path) -> None:
    """netCDF-C writes fletcher32 before shuffle: h5lens.shuffle with a remainder."""
    netCDF4 = pytest.importorskip("netCDF4")
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("x", 1000)
        v = ds.createVariable("v", "f8", ("x",), zlib=True, shuffle=True, fletcher32=True, chunksizes=(300,))
        v[:] = np.sin(np.arange(1000) / 7)
        w = ds.createVariable("w", "i4", ("x",), shuffle=True, fletcher32=True, chunksizes=(256,))
        w[:] = np.arange(1000) * 3 - 77
        u = ds.createVariable("u", "i2", ("x",), zlib=True, shuffle=True, chunksizes=(250,))  # deflate and shuffle only
        u[:] = np.arange(1000) % 300 - 150


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """The test files, their manifests (relative URLs; absolute ones for plain zarrita), served."""
    directory = tmp_path_factory.mktemp("served")
    write_filters_file(directory / "filters.h5")
    write_netcdf_file(directory / "packed.nc")
    shutil.copy(shared_file("scanpy-1.12.4_10x_pbmc68k_reduced.h5ad"), directory / "pbmc.h5ad")
    with FileServer(directory) as server:
        for name in ("filters.h5", "packed.nc", "pbmc.h5ad"):
            # inline_threshold=0: every chunk stays libhdf5's bytes, referenced
            manifest = h5lens.index(directory / name, inline_threshold=0)
            manifest.save(directory / f"{name}.json")
            absolute = h5lens.index(directory / name, inline_threshold=0, url=server.url(name))
            absolute.save(directory / f"{name}.abs.json", relative_sources=False)
        yield directory, server


FILES = ("filters.h5", "packed.nc", "pbmc.h5ad")


@pytest.mark.parametrize("name", FILES)
def test_pack_reads_what_the_check_says(served, tmp_path: Path, name: str) -> None:
    """Every array the check finds readable with h5lens-codecs reads as h5py reads it; every
    array it says no browser reads fails in zarrita.js."""
    directory, server = served
    manifest = h5lens.load_manifest(directory / f"{name}.json")
    unreadable = set(check_for_browser(manifest).unreadable_arrays())
    paths = sorted(manifest.arrays())
    results = read_in_node("pack", server.url(f"{name}.json"), paths, tmp_path)
    with h5py.File(directory / name, "r") as f:
        for path in paths:
            if "/" + path in unreadable or path in unreadable:
                assert not results[path]["ok"], f"{path}: the check says no browser reads it, zarrita.js did"
            else:
                assert_same(results[path], h5py_value(f, path), f"{name}:{path}")
    assert len(unreadable) < len(paths)


@pytest.mark.parametrize("name", FILES)
def test_plain_zarrita_reads_what_the_check_finds_nothing_about(served, tmp_path: Path, name: str) -> None:
    """Without the pack: arrays with no finding (and no ancestor whose name a URL changes)
    read right; arrays whose codec needs the pack do not."""
    directory, server = served
    manifest = h5lens.load_manifest(directory / f"{name}.abs.json")
    findings = check_for_browser(manifest).findings
    about = {f.where.lstrip("/") for f in findings}
    renamed = [f.where.lstrip("/") + "/" for f in findings if f.kind == NAME]
    clean = [p for p in sorted(manifest.arrays()) if p not in about and not any(p.startswith(r) for r in renamed)]
    needs_pack = sorted({f.where.lstrip("/") for f in findings if f.with_pack and f.kind == "codec"})
    results = read_in_node("plain", server.url(f"{name}.abs.json"), clean + needs_pack, tmp_path)
    with h5py.File(directory / name, "r") as f:
        for path in clean:
            assert_same(results[path], h5py_value(f, path), f"{name}:{path}")
        for path in needs_pack:
            result = results[path]
            assert not result["ok"] or result.get("bytes") != _little(h5py_value(f, path)), (
                f"{path}: the check says plain zarrita.js needs h5lens-codecs, and it read it right"
            )
    assert clean


def _little(value: Any) -> bytes:
    values = np.asarray(value)
    return np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"), copy=False)).tobytes()


def test_pack_gives_nan_attributes_as_strings(served, tmp_path: Path) -> None:
    """Bare NaN / Infinity in a zarr.json (released profile) read as the convention's strings."""
    directory, server = served
    results = read_in_node("pack", server.url("filters.h5.json"), ["nan_attrs", "strings"], tmp_path)
    with h5py.File(directory / "filters.h5", "r") as f:
        assert np.isnan(f["nan_attrs"].attrs["missing"])
    assert results["nan_attrs"]["attrs"]["missing"] == "NaN"
    assert results["nan_attrs"]["attrs"]["range"] == ["-Infinity", "Infinity"]
    assert results["strings"]["attrs"]["scale"] == "NaN"


def test_index_for_browser_reads_in_plain_zarrita(served, tmp_path: Path) -> None:
    """``index --for browser``: NaN as strings (the proposal profile) and the absolute URL,
    so plain zarrita.js opens the arrays whose attributes held NaN."""
    directory, server = served
    out = directory / "filters.h5.browser.json"
    done = h5lens_command(
        "index", directory / "filters.h5", "-o", out, "--for", "browser", "--url", server.url("filters.h5"),
        "--inline-threshold", "0",
    )
    assert done.status == 0, done.stderr
    for unreadable in ("/fixed_bytes: data type", "/float16: data type", "/compound: data type"):
        assert unreadable in done.stdout
    results = read_in_node("plain", server.url(out.name), ["nan_attrs", "scalar_f8"], tmp_path)
    assert results["nan_attrs"]["attrs"]["missing"] == "NaN"
    with h5py.File(directory / "filters.h5", "r") as f:
        assert_same(results["nan_attrs"], f["nan_attrs"][()], "nan_attrs")
        assert results["scalar_f8"]["ok"] and results["scalar_f8"]["shape"] == [1]  # the proposal's (1,) scalar
        assert results["scalar_f8"]["bytes"] == np.float64(f["scalar_f8"][()]).tobytes()


def test_the_check_tables_are_the_packages() -> None:
    """h5lens.browser.readers lists what zarrita.js 0.7.5 (from the lockfile) and
    h5lens-codecs really register and allocate."""
    import re

    from h5lens.browser import readers

    modules = JS / "node_modules"
    if not (modules / "zarrita").is_dir():
        node_or_skip()
    assert json.loads((modules / "zarrita" / "package.json").read_text())["version"] == "0.7.5"
    registry = (modules / "zarrita" / "dist" / "src" / "codecs.js").read_text()
    assert set(re.findall(r'\.set\("([^"]+)"', registry)) == readers.ZARRITA_CODECS
    ctr = (modules / "zarrita" / "dist" / "src" / "util.js").read_text()
    table = ctr[ctr.index("let ctr = {") : ctr.index("}[dataType]")]
    allocated = set(re.findall(r"^\s*(\w+):", table, re.M)) | {"string"}
    assert allocated == set(readers.ZARRITA_DATA_TYPES) | {readers.FLOAT16}
    pack = (JS / "src" / "index.js").read_text()
    block = pack[pack.index("export const CODECS = {") : pack.index("};", pack.index("export const CODECS = {"))]
    assert set(re.findall(r'^\s*"?([\w.-]+)"?:', block, re.M)) == readers.PACK_CODECS


def test_string_decoders_give_h5py_values(tmp_path: Path) -> None:
    """The two decoders no zarrita array reaches yet (zarrita.js 0.7 has no data type for
    byte strings), given chunks directly: libhdf5's space-padded strings, and the
    vlen-bytes chunk h5lens makes of a dataset of uint8 sequences."""
    node = node_or_skip()
    source = tmp_path / "strings.h5"
    padded = np.array([b"ab    ", b"      ", b"abcdef", b"a b   "], dtype="S6")
    with h5py.File(source, "w") as f:
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(6)
        tid.set_strpad(h5py.h5t.STR_SPACEPAD)
        ds = h5py.h5d.create(f.id, b"spacepad", tid, h5py.h5s.create_simple((4,)))
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, padded)
        sequences = f.create_dataset("sequences", (3,), dtype=h5py.vlen_dtype(np.uint8))
        for i, item in enumerate([b"\x00\xff", b"", b"bytes \x80"]):
            sequences[i] = np.frombuffer(item, np.uint8)
    with h5py.File(source, "r") as f:
        offset = f["spacepad"].id.get_offset()
        want_stripped = [v.decode("latin-1") for v in f["spacepad"][()].tolist()]
        want_sequences = [bytes(v).decode("latin-1") for v in f["sequences"][()]]
    stored = source.read_bytes()[offset : offset + padded.nbytes]
    manifest = h5lens.index(source)
    manifest.save(tmp_path / "strings.json")
    chunk = json.loads((tmp_path / "strings.json").read_text())["refs"]["sequences/c/0"]
    assert chunk.startswith("base64:")
    script = (
        "import { stripSpacePadding, decodeVlenBytes } from 'h5lens-codecs';"
        "const latin = (b) => String.fromCharCode(...b);"
        f"const padded = Uint8Array.from(Buffer.from({json.dumps(stored.hex())}, 'hex'));"
        f"const vlen = Uint8Array.from(Buffer.from({json.dumps(chunk[7:])}, 'base64'));"
        "console.log(JSON.stringify([stripSpacePadding(padded, 6).map(latin), decodeVlenBytes(vlen).map(latin)]));"
    )
    done = subprocess.run([node, "--input-type=module", "-e", script], cwd=JS, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    stripped, decoded = json.loads(done.stdout)
    assert stripped == want_stripped
    assert decoded == want_sequences


def test_the_docs_javascript_runs(served) -> None:
    """docs/browser.md's JavaScript, run in Node on scanpy's h5ad served here."""
    import re

    directory, server = served
    node = node_or_skip()
    page = (Path(__file__).resolve().parents[1] / "docs" / "browser.md").read_text()
    (block,) = re.findall(r"```js\n(.*?)```", page, re.S)
    script = block.replace("https://data.example.org/atlas.h5ad.json", server.url("pbmc.h5ad.json"))
    script += "\nconsole.log(JSON.stringify({ shape, first: Array.from(data.slice(0, 4)) }));\n"
    done = subprocess.run([node, "--input-type=module", "-e", script], cwd=JS, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    with h5py.File(directory / "pbmc.h5ad", "r") as f:
        umap = f["obsm/X_umap"][()]
    assert read["shape"] == list(umap.shape)
    assert read["first"] == umap.ravel()[:4].tolist()


@pytest.mark.parametrize("name", shared_names("*.h5ad") + shared_names("*.h5td"))
def test_every_shared_file_reads_or_is_named(tmp_path: Path, name: str) -> None:
    """Every array of the real files of shared/data reads in Node with h5lens-codecs as h5py
    reads it, or ``check --for browser`` named it. Arrays that are h5lens's forms rather than
    datasets of the file (TreeData's trees, from their JSON text) must read without error."""
    node_or_skip()
    shutil.copy(shared_file(name), tmp_path / name)
    h5lens.index(tmp_path / name, inline_threshold=0).save(tmp_path / f"{name}.json")
    manifest = h5lens.load_manifest(tmp_path / f"{name}.json")
    unreadable = {p.lstrip("/") for p in check_for_browser(manifest).unreadable_arrays()}
    paths = sorted(manifest.arrays())
    with FileServer(tmp_path) as server:
        results = read_in_node("pack", server.url(f"{name}.json"), paths, tmp_path / "node")
    compared = 0
    with h5py.File(tmp_path / name, "r") as f:
        for path in paths:
            if path in unreadable:
                assert not results[path]["ok"], f"{path}: the check says no browser reads it, zarrita.js did"
            elif isinstance(f.get(hdf5_path(path)), h5py.Dataset):
                assert_same(results[path], h5py_value(f, path), f"{name}:{path}")
                compared += 1
            else:
                assert results[path]["ok"], f"{name}:{path}: {results[path].get('error')}"
    assert compared


def test_pack_fetches_the_chunks_asked_for_together_in_few_requests(tmp_path: Path) -> None:
    """zarrita asks for an array's chunks at once; the pack's store fetches the ranges that
    lie end to end in the file (as libhdf5 writes a dataset's chunks) as one request each
    8 MiB, not one request per chunk, and gives each chunk its own bytes."""
    with h5py.File(tmp_path / "chunks.h5", "w") as f:
        f.create_dataset("many", data=np.sin(np.arange(200_000.0)), chunks=(1000,), compression="gzip")
        f.create_dataset("other", data=np.arange(5000, dtype="<i4"), chunks=(100,), compression="gzip")
    with FileServer(tmp_path) as server:
        manifest = h5lens.index(tmp_path / "chunks.h5", inline_threshold=0, url=server.url("chunks.h5"))
        manifest.save(tmp_path / "chunks.h5.json", relative_sources=False)
        server.stats.reset()
        results = read_in_node("pack", server.url("chunks.h5.json"), ["many", "other"], tmp_path / "node")
        requests = server.stats.by_status.get(206, 0)
    with h5py.File(tmp_path / "chunks.h5", "r") as f:
        for path in ("many", "other"):
            assert_same(results[path], f[path][()], path)
    # 250 chunks, read one array after the other: one request for each
    assert requests == 2, server.stats
