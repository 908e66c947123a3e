"""Manifests are untrusted input: they reach only the sources they declare, stay inside the
store's key space, and claim nothing beyond the limits; every refusal is an h5lens error
naming the key (never a traceback from deep inside zarr, never another file's bytes)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.manifest.limits import Limits


@pytest.fixture
def indexed(tmp_path) -> tuple[Path, dict]:
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.arange(1000, dtype="i4"), chunks=(100,), compression="gzip")
        f.create_dataset("b", data=np.arange(10, dtype="i2"))
    out = tmp_path / "x.json"
    h5lens.index(path, inline_threshold=0).save(out, relative_sources=False)  # its source: an absolute path
    return path, json.loads(out.read_text())


def _load(refs: dict, tmp_path: Path, **kwargs) -> h5lens.Manifest:
    out = tmp_path / f"{uuid.uuid4().hex}.json"
    out.write_text(json.dumps(refs))
    return h5lens.Manifest.load(out, **kwargs)


def test_a_reference_to_an_undeclared_file_is_refused(indexed, tmp_path):
    _, refs = indexed
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"not yours" * 100)
    for url in (f"file://{secret}", str(secret)):
        refs["refs"]["a/c/3"] = [url, 0, 400]
        with pytest.raises(h5lens.RefusedSourceError, match=r"a/c/3: .*none of the manifest's declared sources"):
            _load(refs, tmp_path)


def test_keys_outside_the_store_are_refused(indexed, tmp_path):
    _, refs = indexed
    for key in ("../zarr.json", "/zarr.json", "a//zarr.json", "a/./zarr.json", "/a/zarr.json"):
        bad = json.loads(json.dumps(refs))
        bad["refs"][key] = bad["refs"]["a/zarr.json"]
        with pytest.raises(h5lens.ManifestFormatError, match=re_key(key)):
            _load(bad, tmp_path)
    bad = json.loads(json.dumps(refs))
    bad["refs"]["a/c/../c/1"] = bad["refs"]["a/c/1"]
    with pytest.raises(h5lens.ManifestFormatError, match=r"a/c/\.\./c/1"):
        _load(bad, tmp_path)


def re_key(key: str) -> str:
    import re

    return re.escape(key)


def test_a_key_given_twice_is_refused(indexed, tmp_path):
    _, refs = indexed
    text = json.dumps(refs).replace('"a/c/1":', '"a/c/1": ["{{u}}", 0, 1], "a/c/1":', 1)
    out = tmp_path / "dup.json"
    out.write_text(text)
    with pytest.raises(h5lens.ManifestFormatError, match="'a/c/1' appears twice"):
        h5lens.Manifest.load(out)


@pytest.mark.parametrize(
    ("offset", "length", "match"),
    [(-1, 10, "non-negative"), (2**63, 10, "past the end"), (0, 10**9, "past the end"), (10**12, 1, "past the end")],
)
def test_byte_ranges_must_fit_the_source(indexed, tmp_path, offset, length, match):
    _, refs = indexed
    refs["refs"]["a/c/2"] = ["{{u}}", offset, length]
    with pytest.raises(h5lens.ManifestFormatError, match=match):
        _load(refs, tmp_path)


def test_a_grid_of_a_trillion_chunks_is_refused_before_allocation(indexed, tmp_path):
    _, refs = indexed
    doc = json.loads(refs["refs"]["a/zarr.json"])
    doc["shape"] = [10**12 * 100]
    refs["refs"]["a/zarr.json"] = json.dumps(doc)
    with pytest.raises(h5lens.ManifestLimitError, match=r"/a: chunk grid of 1,000,000,000,000 exceeds"):
        _load(refs, tmp_path)


def test_a_chunk_of_a_trillion_elements_is_refused(indexed, tmp_path):
    _, refs = indexed
    doc = json.loads(refs["refs"]["a/zarr.json"])
    doc["shape"] = [10**12]
    doc["chunk_grid"]["configuration"]["chunk_shape"] = [10**12]
    refs["refs"]["a/zarr.json"] = json.dumps(doc)
    for key in [k for k in refs["refs"] if k.startswith("a/c/")]:
        del refs["refs"][key]
    refs["h5lens"]["arrays"].pop("a")
    with pytest.raises(h5lens.ManifestLimitError, match=r"/a: a chunk of \(bytes\) 4,000,000,000,000 exceeds"):
        _load(refs, tmp_path)


def test_limits_can_be_narrowed_and_widened(indexed, tmp_path):
    _, refs = indexed
    with pytest.raises(h5lens.ManifestLimitError, match="Limits.chunk_refs"):
        _load(refs, tmp_path, limits=Limits(chunk_refs=5))
    inlined = tmp_path / "inlined.json"
    h5lens.index(indexed[0]).to_json(inlined)  # default threshold: "b" (20 bytes) is inlined
    with pytest.raises(h5lens.ManifestLimitError, match="Limits.inline_bytes"):
        _load(json.loads(inlined.read_text()), tmp_path, limits=Limits(inline_bytes=4))
    with pytest.raises(h5lens.ManifestLimitError, match="Limits.manifest_bytes"):
        _load(refs, tmp_path, limits=Limits(manifest_bytes=100))
    assert _load(refs, tmp_path, limits=Limits(chunk_refs=100)).chunks["a"].n_present == 10


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"version": 2, "refs": {}}',
        '{"version": 1, "refs": []}',
        '{"version": 1, "refs": {"zarr.json": "{\\"zarr_format\\": 2}"}}',
        '{"version": 1, "refs": {"zarr.json": 5}}',
        '{"version": 1, "refs": {"zarr.json": "{\\"zarr_format\\": 3, \\"node_type\\": \\"array\\"}"}}',
        '{"version": 1, "templates": {"u": 3}, "refs": {}}',
        '{"version": 1, "refs": {}, "h5lens": {"sources": "x"}}',
        "[" * 100_000,
    ],
    ids=["syntax", "a list", "version 2", "refs a list", "zarr v2", "a number", "no array fields", "template",
         "sources", "deep nesting"],
)
def test_malformed_manifests_are_format_errors(tmp_path, text):
    out = tmp_path / "bad.json"
    out.write_text(text)
    with pytest.raises(h5lens.ManifestFormatError):
        h5lens.Manifest.load(out)


def test_a_manifest_from_a_bucket_may_not_read_local_files(s3, indexed, tmp_path):
    path, refs = indexed
    key = f"bucket/{uuid.uuid4().hex}/x.json"
    s3.filesystem().pipe(key, json.dumps(refs).encode())  # its source is the local file's absolute path
    options = s3.storage_options()
    with pytest.raises(h5lens.RefusedSourceError, match="may not read local files"):
        h5lens.open_group(f"s3://{key}", storage_options=options)
    group = h5lens.open_group(f"s3://{key}", storage_options=options, allow_local=[str(tmp_path)])
    with h5py.File(path) as f:
        np.testing.assert_array_equal(group["a"][...], f["a"][...])
    remapped = h5lens.open_group(f"s3://{key}", storage_options=options, source_urls={str(path): str(path)})
    assert remapped["b"][3] == 3
    with pytest.raises(h5lens.RefusedSourceError):
        h5lens.open_group(f"s3://{key}", storage_options=options, allow_local=[str(tmp_path / "elsewhere")])


def test_allow_local_forms(s3, indexed, tmp_path):
    """``allow_local``: True allows every local file, False none; a listed path allows that
    file or what lies below that directory, never a path that merely sorts before it."""
    path, refs = indexed
    key = f"bucket/{uuid.uuid4().hex}/x.json"
    s3.filesystem().pipe(key, json.dumps(refs).encode())
    url, options = f"s3://{key}", s3.storage_options()
    with h5py.File(path) as f:
        expected = f["a"][...]
    for allowed in (True, [str(path)], [str(tmp_path)], [str(tmp_path) + "/"]):
        np.testing.assert_array_equal(h5lens.open_group(url, storage_options=options, allow_local=allowed)["a"][...], expected)
    after = str(tmp_path / "zzz")  # sorts after the file's path, and is not its directory
    assert str(path) < after
    for refused in (False, [after], [str(path) + "x"], [str(tmp_path) + "x"]):
        with pytest.raises(h5lens.RefusedSourceError, match="may not read local files"):
            h5lens.open_group(url, storage_options=options, allow_local=refused)


@pytest.mark.parametrize("first", ["a remote source", "a remapped source"])
def test_every_local_source_is_checked_whatever_comes_before_it(s3, indexed, tmp_path, first):
    """A remote or remapped source listed first does not let a local one after it through."""
    path, refs = indexed
    refs = json.loads(json.dumps(refs))
    refs["h5lens"]["sources"].insert(0, {"url": "s3://bucket/elsewhere.h5"})
    key = f"bucket/{uuid.uuid4().hex}/x.json"
    s3.filesystem().pipe(key, json.dumps(refs).encode())
    options = s3.storage_options()
    remap = {"s3://bucket/elsewhere.h5": "s3://bucket/moved.h5"} if first == "a remapped source" else None
    with pytest.raises(h5lens.RefusedSourceError, match="may not read local files"):
        h5lens.open_group(f"s3://{key}", storage_options=options, source_urls=remap, verify=False)


def test_damaged_compact_manifests_are_refused(indexed, tmp_path):
    path, refs = indexed
    manifest = h5lens.Manifest.from_dict(refs)
    saved = tmp_path / "m.h5lens"
    h5lens.index(path, inline_threshold=0).save(saved, format="compact")
    data = bytearray(saved.read_bytes())
    data[16:24] = (2**40).to_bytes(8, "little")  # a header length of a terabyte
    saved.write_bytes(bytes(data))
    with pytest.raises(h5lens.ManifestLimitError):
        h5lens.Manifest.load(saved)
    assert manifest.chunks["a"].n_present == 10


def _doc_edit(key: str, **changes):
    def edit(refs: dict) -> None:
        doc = json.loads(refs["refs"][key])
        doc.update(changes)
        refs["refs"][key] = json.dumps(doc)

    return edit


def _set(*path, value):
    def edit(refs: dict) -> None:
        node = refs
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return edit


# Damage the fuzz tests found, each once a traceback from numpy, zarr or Python itself.
@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_set("h5lens", "sources", 0, "size", value=""), "'size' must be a byte count"),
        (_set("h5lens", "sources", 0, "size", value=2**70), "'size' must be a byte count"),
        (_set("refs", "a/c/1", 1, value=1.5), r"a/c/1: the offset must be a non-negative integer"),
        (_set("refs", "a/c/1", 2, value=[]), r"a/c/1: the length must be a non-negative integer"),
        (_set("refs", "a/c/1", 2, value=True), r"a/c/1: the length must be a non-negative integer"),
        (_set("refs", "a/c/1", 0, value=["x"]), r"a/c/1: a reference's URL must be a string"),
        (_set("h5lens", "arrays", "a", "chunks", value="10"), r"h5lens.arrays\['a'\]"),
        (_doc_edit("a/zarr.json", shape=False), "/a: shape must be a list"),
        (_doc_edit("a/zarr.json", chunk_grid={"name": "regular", "configuration": None}), "regular chunk grids"),
        (_doc_edit("a/zarr.json", chunk_grid={"name": "rectilinear", "configuration": {"chunk_shapes": [[500, 500]]}}),
         "rectilinear grid of kind 'inline'"),  # h5lens combine writes rectilinear grids: this one lacks its kind
    ],
    ids=["size text", "size huge", "offset float", "length list", "length bool", "url list", "recorded count",
         "shape bool", "grid null", "grid rectilinear"],
)
def test_damaged_fields_are_format_errors_naming_the_place(indexed, tmp_path, edit, match):
    _, refs = indexed
    edit(refs)
    with pytest.raises(h5lens.ManifestFormatError, match=match):
        _load(refs, tmp_path)


def test_a_manifest_without_a_root_group_is_refused(indexed, tmp_path):
    _, refs = indexed
    del refs["refs"]["zarr.json"]
    with pytest.raises(h5lens.ManifestFormatError, match="no root group"):
        h5lens.open_group(_load(refs, tmp_path))


def test_a_compact_table_naming_an_undeclared_source_is_refused(indexed, tmp_path):
    path, _ = indexed
    manifest = h5lens.index(path, inline_threshold=0)
    from dataclasses import replace

    saved = tmp_path / "m.h5lens"
    replace(manifest, sources=[]).save(saved, format="compact")
    loaded = h5lens.Manifest.load(saved)
    with pytest.raises(h5lens.ManifestFormatError, match=r"a/c/0: refers to source 0; the manifest declares 0"):
        loaded.chunks["a"]


@pytest.mark.parametrize("claimed", [2**31 - 1, 5])
def test_a_variable_length_chunk_claiming_more_items_is_refused_before_allocation(tmp_path, claimed):
    """numcodecs allocates the claimed number of objects before reading one: 2^31 of them
    took 16 GiB and 100 s before failing. Refused naming the chunk: inline chunks when the
    manifest is loaded, referenced ones when the store reads them."""
    import base64
    import struct

    path = tmp_path / "text.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("text", data=["alpha", "beta", "", "gamma"], dtype=h5py.string_dtype())
    refs = h5lens.index(path).to_dict()
    raw = base64.b64decode(refs["refs"]["text/c/0"].removeprefix("base64:"))
    assert struct.unpack_from("<I", raw)[0] == 4  # the count the writer put there
    crafted = struct.pack("<I", claimed) + raw[4:]
    refs["refs"]["text/c/0"] = "base64:" + base64.b64encode(crafted).decode()
    with pytest.raises(h5lens.ManifestFormatError, match=rf"text/c/0: .*4 items claims {claimed}"):
        _load(refs, tmp_path)

    elsewhere = tmp_path / "chunk.bin"
    elsewhere.write_bytes(crafted)
    refs["refs"]["text/c/0"] = [str(elsewhere), 0, len(crafted)]
    refs.pop("h5lens")  # plain kerchunk references: no declared sources, no recorded sizes
    refs.pop("templates", None)
    group = h5lens.open_group(_load(refs, tmp_path))
    with pytest.raises(h5lens.SourceReadError, match=rf"text/c/0.*4 items claims {claimed}"):
        group["text"][...]
    # the synchronous path (zarr's fused pipeline reads local sources through it) checks too
    with pytest.raises(h5lens.SourceReadError, match=rf"text/c/0.*4 items claims {claimed}"):
        group.store.get_sync("text/c/0")
