"""Fuzzing the manifest reader: a damaged or crafted manifest either reads, or is refused
with an ``h5lens`` error; never another exception, never a hang.

Each example starts from a real manifest (JSON or compact) and damages it: a value
anywhere in the JSON tree (inside the zarr.json documents too) replaced, deleted or
duplicated, or bytes of the file flipped, inserted or cut. Then everything a user does
with a manifest: load it, validate it, open it, decode every chunk of every array.

The number of examples is bounded for the test command; ``H5LENS_FUZZ_EXAMPLES`` runs
more (see docs/testing.md, "Fuzzing").
"""

from __future__ import annotations

import json
import os
import signal
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import h5lens
from h5lens.errors import H5LensError
from h5lens.read.check import check_array
from h5lens.read.open import store_of

EXAMPLES = int(os.environ.get("H5LENS_FUZZ_EXAMPLES", "150"))
HANG_SECONDS = 120  # one example far beyond this is a hang, not a slow machine

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def _write_source(path: Path) -> None:
    """Every kind of node a manifest carries: chunked and contiguous, inline and referenced,
    strings, a compound, a scalar, attributes of every kind, a link."""
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=np.arange(600, dtype="<i4").reshape(30, 20), chunks=(8, 20),
                         compression="gzip", shuffle=True)
        f.create_dataset("contiguous", data=np.linspace(0, 1, 500))
        f.create_dataset("text", data=["alpha", "béta", "", "gamma"], dtype=h5py.string_dtype())
        f.create_dataset("pairs", data=np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "<i2"), ("b", "<f8")]))
        f["scalar"] = 7.5
        group = f.create_group("group")
        group.attrs["name"] = "a group"
        group.attrs["values"] = np.arange(3)
        group.attrs["nan"] = np.nan
        group.create_dataset("flags", data=np.array([True, False, True]))
        f["link"] = h5py.SoftLink("/group/flags")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fuzz")
    source = root / "source.h5"
    _write_source(source)
    inline = root / "inline.json"
    h5lens.index(source).save(inline, format="json")
    referenced = root / "referenced.json"
    h5lens.index(source, inline_threshold=0).save(referenced, format="json")
    compact = root / "referenced.h5lens"
    h5lens.index(source, inline_threshold=0).save(compact, format="compact")
    return {
        "root": root,
        "json": [json.loads(inline.read_text()), json.loads(referenced.read_text())],
        "bytes": [inline.read_bytes(), compact.read_bytes()],
    }


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang(f"one example ran past {HANG_SECONDS} s")


def exercise(path: Path) -> None:
    """Everything a user does with a manifest; only h5lens errors may escape."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_SECONDS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                manifest = h5lens.Manifest.load(path)
                h5lens.validate(manifest)
                group = h5lens.open_group(manifest, verify=False)
                store = store_of(group)
                for array_path in manifest.arrays():
                    check_array(zarr.open_array(store, path=array_path, mode="r", zarr_format=3))
            except H5LensError:
                pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- damaging the JSON tree ----------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["", "..", "/", "a/../b", "c/0", "{{u}}", "file:///etc/passwd", "base64:!!", "zarr.json"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every place in the tree, including inside the zarr.json documents held as strings."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))
    elif isinstance(node, str) and node.startswith("{"):
        try:
            inner = json.loads(node)
        except ValueError:
            return
        yield from _paths(inner, (*prefix, "<json>"))


def _apply(node: Any, path: tuple, action: str, value: Any) -> Any:
    """``node`` with ``action`` done at ``path`` (a copy along the path)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if head == "<json>":
        return json.dumps(_apply(json.loads(node), rest, action, value))
    node = dict(node) if isinstance(node, dict) else list(node)
    if not rest and action == "delete":
        del node[head]
    elif not rest and action == "duplicate" and isinstance(node, list):
        node.insert(head, node[head])
    else:
        node[head] = _apply(node[head], rest, action, value)
    return node


@FUZZ
@given(data=st.data())
def test_damaged_json_manifests_read_or_are_refused(seeds, data):
    doc = data.draw(st.sampled_from(seeds["json"]))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = list(_paths(doc))[1:]
        where = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["replace", "delete", "duplicate"]))
        value = data.draw(json_values) if action == "replace" else None
        doc = _apply(doc, where, action, value)
    path = seeds["root"] / f"{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(doc))
    exercise(path)


# -- damaging the bytes --------------------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_damaged_manifest_bytes_read_or_are_refused(seeds, data):
    blob = bytearray(data.draw(st.sampled_from(seeds["bytes"])))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(blob) - 1))
        action = data.draw(st.sampled_from(["flip", "insert", "cut", "truncate"]))
        if action == "flip":
            blob[at] ^= data.draw(st.integers(1, 255))
        elif action == "insert":
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "cut":
            del blob[at : at + data.draw(st.integers(1, 8))]
        else:
            del blob[at:]
        if not blob:
            blob = bytearray(b"\x00")
    path = seeds["root"] / f"{uuid.uuid4().hex}.bin"
    path.write_bytes(bytes(blob))
    exercise(path)


def test_the_seeds_read(seeds):
    """The undamaged manifests read: the fuzz tests start from something that works."""
    for i, doc in enumerate(seeds["json"]):
        path = seeds["root"] / f"seed{i}.json"
        path.write_text(json.dumps(doc))
        group = h5lens.open_group(path)
        with h5py.File(seeds["root"] / "source.h5") as f:
            np.testing.assert_array_equal(group["chunked"][...], f["chunked"][...])
