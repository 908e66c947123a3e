"""One zarr v3 key grammar: manifests of stores that zarr itself wrote read back as zarr reads them.

The oracle is zarr: an array or group written by zarr-python into a MemoryStore (root
arrays, ``.`` separators, ``v2`` chunk key encoding, 0-d arrays), turned into kerchunk
references key for key, must read through h5lens exactly as zarr reads its own store; a
key that names nothing is an error naming it, never a chunk silently read as fill.
"""

from __future__ import annotations

import base64
import warnings

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

import h5lens
from h5lens.manifest.zarr_keys import KeyEncoding, KeyGrammar, chunk_key, metadata_key, metadata_path


def refs_of(store: dict) -> dict:
    """A zarr store's keys as kerchunk references: metadata as text, chunks inline."""
    refs = {}
    for key, buffer in store.items():
        raw = buffer.to_bytes()
        refs[key] = raw.decode() if key.endswith("zarr.json") else "base64:" + base64.b64encode(raw).decode()
    return {"version": 1, "refs": refs}


def written_by_zarr(path: str, data: np.ndarray, **kwargs) -> dict:
    store: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if path:
            root = zarr.open_group(MemoryStore(store), mode="w", zarr_format=3)
            array = root.create_array(path, shape=data.shape, dtype=data.dtype, **kwargs)
        else:
            array = zarr.create_array(MemoryStore(store), shape=data.shape, dtype=data.dtype, zarr_format=3, **kwargs)
        array[...] = data
    return store


ENCODINGS = [
    {"name": "default", "separator": "/"},
    {"name": "default", "separator": "."},
    {"name": "v2", "separator": "."},
    {"name": "v2", "separator": "/"},
]


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: f"{e['name']}{e['separator']}")
@pytest.mark.parametrize("path", ["", "g/arr", "c/c"], ids=["root", "nested", "named-c"])
@pytest.mark.parametrize("shape", [(), (7,), (5, 6)], ids=["0d", "1d", "2d"])
def test_zarr_written_keys_read_back(path, shape, encoding):
    data = (np.arange(int(np.prod(shape))) + 1).reshape(shape).astype("i4")
    chunks = tuple(max(1, s // 2) for s in shape)
    store = written_by_zarr(path, data, chunks=chunks, chunk_key_encoding=encoding, fill_value=0)
    expected = zarr.open_array(MemoryStore(store), path=path, mode="r")[...]
    manifest = h5lens.Manifest.from_dict(refs_of(store))
    got = zarr.open_array(h5lens.open_store(manifest, verify=False), path=path, mode="r")[...]
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, data)  # nothing read as the fill value
    # and the JSON written back holds the same keys
    assert set(manifest.to_dict()["refs"]) == set(store)


def test_a_key_of_no_array_is_an_error_naming_it():
    store = written_by_zarr("g/arr", np.arange(4, dtype="i4"), chunks=(2,))
    refs = refs_of(store)
    refs["refs"]["g/arr/c/x"] = refs["refs"].pop("g/arr/c/1")
    with pytest.raises(h5lens.ManifestFormatError, match="g/arr/c/x"):
        h5lens.Manifest.from_dict(refs)
    refs = refs_of(store)
    refs["refs"]["g/other/c/0"] = refs["refs"]["g/arr/c/0"]
    with pytest.raises(h5lens.ManifestFormatError, match="g/other/c/0"):
        h5lens.Manifest.from_dict(refs)


def test_a_dot_key_for_a_slash_array_is_an_error():
    store = written_by_zarr("", np.arange(4, dtype="i4"), chunks=(2,))
    refs = refs_of(store)
    refs["refs"]["c.1"] = refs["refs"].pop("c/1")
    with pytest.raises(h5lens.ManifestFormatError, match=r"c\.1"):
        h5lens.Manifest.from_dict(refs)


def test_an_unknown_chunk_key_encoding_is_refused():
    store = written_by_zarr("a", np.arange(4, dtype="i4"), chunks=(2,))
    refs = refs_of(store)
    import json

    doc = json.loads(refs["refs"]["a/zarr.json"])
    doc["chunk_key_encoding"] = {"name": "hashed"}
    refs["refs"]["a/zarr.json"] = json.dumps(doc)
    with pytest.raises(h5lens.ManifestFormatError, match="chunk_key_encoding"):
        h5lens.Manifest.from_dict(refs)


@pytest.mark.parametrize("encoding", [KeyEncoding(n, s) for n in ("default", "v2") for s in "/."])
@pytest.mark.parametrize("index", [(), (0,), (3, 12), (1, 0, 2)])
def test_grammar_round_trip(encoding, index):
    for path in ("", "a", "a/c/b"):
        key = chunk_key(path, index, encoding)
        grammar = KeyGrammar({path: (encoding, len(index))})
        assert grammar.chunk(key) == (path, index)
        assert grammar.chunk(key + "/0") is None


def test_metadata_keys():
    for path in ("", "a", "a/b/zarr.json.d"):
        assert metadata_path(metadata_key(path)) == path
    assert metadata_path("a/c/0") is None


def test_a_document_zarr_refuses_is_an_error_at_load():
    """Checked once at the boundary by zarr's own metadata classes, named, never a
    traceback from deep inside zarr at the first read."""
    import json

    store = written_by_zarr("a", np.arange(4, dtype="i4"), chunks=(2,))
    refs = refs_of(store)
    doc = json.loads(refs["refs"]["a/zarr.json"])
    doc["data_type"] = "no-such-type"
    refs["refs"]["a/zarr.json"] = json.dumps(doc)
    with pytest.raises(h5lens.ManifestFormatError, match="/a: zarr refuses this metadata document"):
        h5lens.Manifest.from_dict(refs)
