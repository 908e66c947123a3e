"""JSON manifests read column-wise (``h5lens.manifest.refs_columns``) read exactly as key by key.

The column-wise route recognises the refs writers give (an array's chunk keys together,
``[url, offset, length]`` values) and hands everything else to the key-by-key route, which
names the key it refuses. The oracle here is that route: for any manifest, intact or
damaged (keys outside the grid, leading zeros, values of every wrong type, keys in any
order, nodes below arrays, keys below none), both give the same manifest or the same error,
class and message. The parse of the file is held to the json module's the same way: a key
given twice is refused whatever the text looks like, and nothing else is.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import h5lens
from h5lens.errors import H5LensError
from h5lens.manifest import refs_json, unique_json
from h5lens.manifest.limits import Limits
from h5lens.manifest.model import Manifest

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
SOURCES = [{"url": "f1.h5", "size": 10**6}, {"url": "g2.h5", "size": 10**6}]
TEMPLATES = {"u": "f1.h5", "v": "g2.h5"}
URLS = ["{{u}}"] * 16 + ["{{v}}", "f1.h5", "g2.h5"]  # templates, and URLs the manifest declares
ENCODINGS = [("default", "/")] * 12 + [("default", ".")] * 3 + [("v2", "."), ("v2", "/")]
NAMES = ["a", "g/b", "g/sub/c", "x y", "é"]

BAD_TAILS = ["c/01", "c/0/0/0/0", "c/x", "c/-1", "c/99999999999999999999", "c/", "c//1", "c/7", "c.0", "0", "c",
             "c/0 ", "c/٣", "c/+1", "c/1_0", "zarr.jsonx"]
BAD_VALUES: list[Any] = [
    1.5, True, -1, 2**64, 2**63, None, {"a": 1}, "base64:!!", "base64:AAAA", "plain text",
    ["{{u}}", 1], ["{{u}}", 1, 2, 3], ["{{zz}}", 0, 1], ["/etc/passwd", 0, 1], [5, 0, 1], [["{{u}}"], 0, 1],
    ["{{u}}", 0.0, 1], ["{{u}}", True, 1], ["{{u}}", 0, 10**7], ["f1.h5", 0, 4], ["{{u}}", 2**64, 1], ["{{u}}", -1, 1],
    ["{{u}}5", 0, 1], ["f1.h55", 0, 1], ["{{u}}", 0, 1, 5], [], [[], 0, 1], ["{{u}}", 1e3, 1],
]


def _document(shape: list[int], chunks: list[int], encoding: tuple[str, str]) -> str:
    return json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": encoding[0], "configuration": {"separator": encoding[1]}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    })


def _tail(index: tuple[int, ...], encoding: tuple[str, str]) -> str:
    name, sep = encoding
    if name == "default":
        return "c" + "".join(sep + str(i) for i in index)
    return sep.join(map(str, index)) if index else "0"


@st.composite
def manifests(draw: st.DrawFn) -> dict[str, Any]:
    """kerchunk refs of a few arrays of up to 64 chunks (most over the column-wise route's
    threshold), in the writer's order or another, damaged or not."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    root_array = draw(st.integers(0, 9)) == 0
    names = [""] if root_array else draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    group = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
    refs: dict[str, Any] = {} if root_array else {"zarr.json": group}
    chunk_keys: list[tuple[str, Any]] = []
    arrays: dict[str, tuple[list[int], tuple[str, str]]] = {}
    for name in names:
        parents = name.split("/")[:-1]
        for depth in range(1, len(parents) + 1):
            refs["/".join(parents[:depth]) + "/zarr.json"] = group
        ndim = draw(st.sampled_from([0, 1, 1, 2, 2, 3]))
        grid = [int(rng.integers(1, {1: 41, 2: 9, 3: 5}[ndim])) for _ in range(ndim)]
        chunks = [int(rng.integers(1, 4)) for _ in range(ndim)]
        shape = [g * c - int(rng.integers(0, c)) for g, c in zip(grid, chunks, strict=True)]
        encoding = draw(st.sampled_from(ENCODINGS))
        arrays[name] = (grid, encoding)
        refs[(name + "/" if name else "") + "zarr.json"] = _document(shape, chunks, encoding)
        inline_share = draw(st.sampled_from([0.0, 0.0, 0.1]))
        mixed = draw(st.sampled_from([0.0, 0.0, 0.2]))  # the share of chunks in another declared file
        for index in np.ndindex(*grid):
            if rng.random() < 0.1:
                continue  # a missing chunk: the fill value
            key = (name + "/" if name else "") + _tail(index, encoding)
            if rng.random() < inline_share:
                value: Any = "base64:" + base64.b64encode(rng.bytes(4)).decode()
            else:
                url = URLS[int(rng.integers(len(URLS)))] if rng.random() < mixed else "{{u}}"
                value = [url, int(rng.integers(0, 10**5)), int(rng.integers(1, 999))]
            chunk_keys.append((key, value))
    order = draw(st.sampled_from(["written", "written", "shuffled", "reversed"]))
    if order == "shuffled":
        chunk_keys = [chunk_keys[i] for i in rng.permutation(len(chunk_keys))]
    elif order == "reversed":
        chunk_keys.reverse()
    refs.update(chunk_keys)
    damages = ["tail"] * 3 + ["outside"] * 2 + ["zeros", "value", "value", "near", "near", "move", "move", "stray", "below",
                                                "newline", "v2"]
    for damage in draw(st.lists(st.sampled_from(damages), max_size=2)):
        keys = [key for key, _ in chunk_keys if key in refs]
        if not keys:
            break
        key = keys[int(rng.integers(len(keys)))]
        head = key[: key.rfind("/") + 1] if key.count("/") > (0 if root_array else 1) else key.split("/")[0] + "/"
        array = next((n for n in names if key.startswith(n + "/")), "") if not root_array else ""
        grid, encoding = arrays[array]
        if damage == "tail":
            refs[(array + "/" if array else "") + draw(st.sampled_from(BAD_TAILS))] = refs.pop(key)
        elif damage in ("outside", "zeros") and grid:  # an index just past the grid, or with a leading 0
            index = [int(rng.integers(n)) for n in grid]
            axis = int(rng.integers(len(grid)))
            index[axis] = grid[axis] + int(rng.integers(0, 2)) * 10**17 if damage == "outside" else index[axis]
            tail = _tail(tuple(index), encoding)
            if damage == "zeros":
                cut = tail.rfind(encoding[1]) + 1
                tail = tail[:cut] + "0" + tail[cut:]
            refs[(array + "/" if array else "") + tail] = refs.pop(key)
        elif damage == "value":
            refs[key] = copy.deepcopy(draw(st.sampled_from(BAD_VALUES)))
        elif damage == "near" and isinstance(refs[key], list) and len(refs[key]) == 3 and isinstance(refs[key][0], str):
            # one character away (from a reference: not from a value another damage put there)
            url, offset, length = refs[key]
            refs[key] = draw(st.sampled_from([[url + "5", offset, length], [url, offset, length, 0], [url, -offset - 1, length],
                                              [url, float(offset), length], [url, offset, bool(length)]]))
        elif damage == "stray":
            refs["nowhere/c/0"] = ["{{u}}", 0, 1]
        elif damage == "below":
            refs[(array + "/" if array else "") + "c/0/zarr.json"] = group
        elif damage == "newline":
            refs[head + "0\n1"] = ["{{u}}", 0, 1]
        elif damage == "v2":
            refs[head + ".zattrs"] = "{}"
        else:
            refs[key] = refs.pop(key)  # the key moves to the end, away from its array's others
    return {"version": 1, "templates": dict(TEMPLATES), "refs": refs,
            "h5lens": {"version": "test", "sources": copy.deepcopy(SOURCES)}}


def _outcome(data: dict[str, Any], *, by_key: bool, limits: Limits | None = None) -> tuple[Any, ...]:
    try:
        parts = refs_json.parts_from_refs(
            copy.deepcopy(data), location="/data/m.json", by_key=by_key, **({"limits": limits} if limits else {})
        )
    except H5LensError as e:
        return ("refused", type(e), str(e))
    return ("read", Manifest.from_parts(parts))


@SETTINGS
@given(manifests())
def test_column_wise_reads_as_key_by_key(data):
    assert _outcome(data, by_key=False) == _outcome(data, by_key=True)


NEAR_VALUES: list[Any] = [
    ["{{u}}5", 40, 8], ["f1.h5", 40, 8], ["{{u}}", 40, 8, 0], ["{{u}}", 40], ["{{u}}", -41, 8], ["{{u}}", 40.0, 8],
    ["{{u}}", 40, True], ["{{u}}", 40, 2**64], ["{{u}}", 40, 10**7], "base64:AAAAAAAAAAA=", ["{{v}}", 40, 8], [],
]


@pytest.mark.parametrize("value", NEAR_VALUES, ids=[json.dumps(v) for v in NEAR_VALUES])
@pytest.mark.parametrize("at", [0, 5, 19])
def test_one_value_unlike_its_neighbours_reads_as_key_by_key(value, at):
    """Twenty references to one file, one of them one character away: the column-wise
    checks of the whole column see it."""
    refs = {"zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"}), "a/zarr.json": _document([40], [2], ENCODINGS[0])}
    refs.update({f"a/c/{i}": ["{{u}}", 8 * i, 8] for i in range(20)})
    refs[f"a/c/{at}"] = value
    data = {"version": 1, "templates": dict(TEMPLATES), "refs": refs, "h5lens": {"sources": copy.deepcopy(SOURCES)}}
    assert _outcome(data, by_key=False) == _outcome(data, by_key=True)


@SETTINGS
@given(manifests(), st.integers(0, 200))
def test_limits_are_met_as_key_by_key(data, inline_bytes):
    limits = Limits(inline_bytes=inline_bytes, chunk_refs=60)
    assert _outcome(data, by_key=False, limits=limits) == _outcome(data, by_key=True, limits=limits)


def test_the_writers_manifest_is_read_column_wise(tmp_path, monkeypatch):
    """A test that fails if the fast routes stop applying: h5lens's own output is parsed
    once (by orjson), an array of 200 chunks never goes key by key, and reads as h5py does."""
    import h5py

    source = tmp_path / "x.h5"
    values = np.arange(20_000, dtype="<i4").reshape(200, 100)
    with h5py.File(source, "w") as f:
        f.create_dataset("x", data=values, chunks=(10, 10), compression="gzip")
        f.create_dataset("small", data=np.arange(20, dtype="<i2"), chunks=(5,))
    out = tmp_path / "x.json"
    h5lens.index(source, inline_threshold=0).save(out)
    by_key: list[str] = []
    fill = refs_json._fill_table
    monkeypatch.setattr(refs_json, "_fill_table", lambda path, *args: (by_key.append(path), fill(path, *args))[1])
    parsed_again: list[bytes] = []
    monkeypatch.setattr(unique_json, "_loads_with_hook", lambda raw, where: parsed_again.append(raw))
    manifest = h5lens.Manifest.load(out)
    assert by_key == ["small"]  # 4 chunks: key by key (below the threshold)
    assert not parsed_again  # orjson's parse stood: no key can have been given twice
    assert manifest.chunks["x"].n_present == 200
    np.testing.assert_array_equal(h5lens.open_group(manifest)["x"][...], values)


# -- the parse: a key given twice ------------------------------------------------------------

KEYS = ["a", "b", ":", " :", ": ", "a\\", '"', 'x":', "\\\\", "é", "", "\\\":"]
TEXTS = [":", ": x", " :", '":', "\\", "a\\\\", "[", "\":\"", "\\\"", "x"]


@st.composite
def json_texts(draw: st.DrawFn, depth: int = 0) -> str:
    """JSON text of objects whose keys may repeat, spaced in every way JSON allows."""
    space = st.sampled_from(["", " ", "\n", "\t", "\r\n  "])
    kind = draw(st.sampled_from(["object", "object", "list", "text", "number"] if depth < 3 else ["text", "number"]))
    if kind == "number":
        return str(draw(st.integers(-5, 5)))
    if kind == "text":
        return json.dumps(draw(st.sampled_from(TEXTS)), ensure_ascii=draw(st.booleans()))
    if kind == "list":
        items = draw(st.lists(json_texts(depth + 1), max_size=3))
        return "[" + ",".join(draw(space) + item + draw(space) for item in items) + "]"
    keys = draw(st.lists(st.sampled_from(KEYS), max_size=4))
    members = [
        draw(space) + json.dumps(key, ensure_ascii=draw(st.booleans())) + draw(space) + ":" + draw(space)
        + draw(json_texts(depth + 1)) + draw(space)
        for key in keys
    ]
    return "{" + ",".join(members) + "}"


def _parsed(raw: bytes, parse: Any) -> tuple[Any, ...]:
    try:
        return ("read", parse(raw, "m.json"))
    except H5LensError as e:
        return ("refused", type(e), str(e))


@SETTINGS
@given(json_texts())
def test_the_parse_refuses_what_the_json_module_refuses(text):
    raw = text.encode()
    assert _parsed(raw, unique_json.loads_unique) == _parsed(raw, unique_json._loads_with_hook)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"version": 1, "refs": {"zarr.json": "{}"}, "templates": {"u": "a", "u": "b"}}', "u"),
        ('{"version": 1, "refs": {}, "h5lens": {"sources": [{"url": "a", "url": "b"}]}}', "url"),
        ('{"version": 1, "refs": {"a\\\\": 1, "a\\\\": 2}}', "a\\"),
        ('{"version": 1, "refs": {"a\\"": 1, "a\\"" : 2}}', 'a"'),
        ('{"version": 1, "refs": {":x": ":", ":x"\n:\t2}}', ":x"),
        ('{"zarr.json": "{}", "a/c/0": [], "a/c/0": []}', "a/c/0"),
        ('{"version": 1, "refs": {"zarr.json": {"zarr_format": 3, "zarr_format": 3}}}', "zarr_format"),
        ('{"version": 1, "refs": {"a/c/0": [{"k": 1, "k": 2}]}}', "k"),
    ],
    ids=["templates", "a source", "escaped backslash", "escaped quote", "spaces before the colon", "version 0",
         "a document object", "inside a value"],
)
def test_a_key_given_twice_is_refused_wherever_it_is(tmp_path, text, key):
    out = tmp_path / "m.json"
    out.write_text(text)
    with pytest.raises(h5lens.ManifestFormatError, match=f"the key {key!r:} appears twice".replace("\\", "\\\\")):
        h5lens.Manifest.load(out)


def test_keys_that_look_like_repeats_are_not(tmp_path):
    """Strings that open with a colon, escaped quotes before colons, spaced colons in text:
    read, not refused."""
    group = {"zarr_format": 3, "node_type": "group", "attributes": {"note": 'a : b', ":x": ":", 'q"': '":'}}
    text = json.dumps({"version": 1, "refs": {"zarr.json": json.dumps(group)}, "h5lens": {"note": ": :"}}, indent=1)
    out = tmp_path / "m.json"
    out.write_text(text.replace('"version":', '"version" :'))
    assert h5lens.Manifest.load(out).nodes[""]["attributes"] == group["attributes"]


# -- zarr parses each kind of document once, and each document is still checked ------------------------

def _array(shape: list[int], chunks: list[int], codecs: list[dict[str, Any]], **more: Any) -> str:
    return json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": codecs, **more,
    })


def _load_refs(tmp_path, refs: dict[str, Any], **kwargs: Any) -> h5lens.Manifest:
    out = tmp_path / "m.json"
    group = json.dumps({"zarr_format": 3, "node_type": "group"})
    out.write_text(json.dumps({"version": 1, "refs": {"zarr.json": group, **refs}}))
    return h5lens.Manifest.load(out, **kwargs)


BYTES = [{"name": "bytes", "configuration": {"endian": "little"}}]


def test_a_shard_shape_is_checked_for_each_array(tmp_path):
    """The sharding codec's checks look at the chunk shape: two arrays alike but for it are
    two kinds, and the one whose shards do not divide into inner chunks is refused."""
    sharding = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [4], "codecs": BYTES,
                                                              "index_codecs": BYTES + [{"name": "crc32c"}]}}]
    good = _array([16], [8], sharding)
    _load_refs(tmp_path, {"a/zarr.json": good, "b/zarr.json": good})
    with pytest.raises(h5lens.ManifestFormatError, match=r"^/b: zarr refuses this metadata document"):
        _load_refs(tmp_path, {"a/zarr.json": good, "b/zarr.json": _array([16], [6], sharding)})


def test_a_transpose_order_is_checked_for_each_array(tmp_path):
    """The transpose codec's checks count the dimensions: arrays alike but for that are two
    kinds."""
    transpose = [{"name": "transpose", "configuration": {"order": [1, 0]}}, *BYTES]
    _load_refs(tmp_path, {"a/zarr.json": _array([4, 4], [2, 2], transpose), "b/zarr.json": _array([8, 2], [4, 1], transpose)})
    with pytest.raises(h5lens.ManifestFormatError, match=r"^/b: zarr refuses this metadata document"):
        _load_refs(tmp_path, {"a/zarr.json": _array([4, 4], [2, 2], transpose), "b/zarr.json": _array([4], [2], transpose)})


def test_dimension_names_are_checked_for_each_array(tmp_path):
    with pytest.raises(h5lens.ManifestFormatError, match=r"^/b: zarr refuses this metadata document"):
        _load_refs(tmp_path, {"a/zarr.json": _array([4], [2], BYTES, dimension_names=["x"]),
                              "b/zarr.json": _array([4], [2], BYTES, dimension_names=[1])})
    with pytest.raises(h5lens.ManifestFormatError, match=r"^/b: zarr refuses this metadata document"):
        _load_refs(tmp_path, {"a/zarr.json": _array([4], [2], BYTES, dimension_names=["x"]),
                              "b/zarr.json": _array([4], [2], BYTES, dimension_names=["x", "y"])})


def test_the_chunk_size_limit_is_checked_for_each_array(tmp_path):
    refs = {"a/zarr.json": _array([1000], [10], BYTES), "b/zarr.json": _array([1000], [100], BYTES)}
    with pytest.raises(h5lens.ManifestLimitError, match=r"^/b: a chunk of \(bytes\) 400"):
        _load_refs(tmp_path, refs, limits=Limits(chunk_bytes=100))


@pytest.mark.parametrize("by_key", [False, True])
def test_a_chunk_index_past_64_bits_is_outside_the_grid(by_key):
    """A key's index of 20 digits is refused naming the key, by either route (numpy's
    conversion overflowed: an OverflowError, not an h5lens error)."""
    refs = {"zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"}),
            "a/zarr.json": _array([40], [2], BYTES)}
    refs.update({f"a/c/{i}": ["{{u}}", 8 * i, 8] for i in range(20)})
    refs["a/c/99999999999999999999"] = ["{{u}}", 0, 8]
    data = {"version": 1, "templates": {"u": "f.h5"}, "refs": refs}
    with pytest.raises(h5lens.ManifestFormatError, match=r"a/c/99999999999999999999: chunk index outside the grid"):
        refs_json.parts_from_refs(data, by_key=by_key)
