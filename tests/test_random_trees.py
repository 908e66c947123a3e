"""Random HDF5 trees (hypothesis): groups and datasets under any names HDF5 allows
(any Unicode, the characters anndata's escaped keys rewrite, names zarr reserves),
numbers of every width, user enums, strings, compounds, shapes with zero-length axes,
chunkings with maximum shapes, fill values, filters and partial edge chunks stored
unfiltered, attributes in compact and dense storage (more than 8, or one over 64 KiB),
in files of every kind: every format bound, user blocks, 4-byte sizes. Each file is
indexed, and every dataset and attribute reads back through the manifest as h5py reads
it from the file (and the manifest is the one the scan makes without the documents it
builds from object headers); a file h5py cannot read back is no example.

Bounded for the test command (``H5LENS_RANDOM_TREES`` examples, 200 by default).
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import h5lens
import libhdf5
from h5lens.format.convention import RESERVED_ATTRIBUTES
from h5lens.scan import header_arrays
from test_feature_matrix import FileKind
from test_file_kinds import h5py_reads_everything

EXAMPLES = int(os.environ.get("H5LENS_RANDOM_TREES", "200"))

# Names HDF5 accepts: no "/", no NUL, not "." (and not empty). The sampled ones are those
# zarr or anndata's escaped keys treat specially.
SPECIAL = ["zarr.json", "c", "__x", "a:b", "50%", "CON", "x.y", " lead", "trail ", "%", "é", "日本", "..", "-"]
names = st.one_of(
    st.sampled_from(SPECIAL),
    st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=8),
).filter(lambda n: n != ".")

# (an attribute named like one of the convention's is refused: its own test, below)
attribute_names = names.filter(lambda n: n not in RESERVED_ATTRIBUTES)

NUMERIC = ["i1", "<u2", ">i4", "<u8", "<f2", ">f4", "<f8", "<c8", "?"]
shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=12)


ENUM = h5py.enum_dtype({"LOW": -3, "MID": 0, "HIGH": 1000}, basetype="<i2")


@st.composite
def datasets(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["numeric", "numeric", "fixed", "vlen", "compound", "enum"]))
    shape = draw(shapes)
    if kind == "numeric":
        dtype = np.dtype(draw(st.sampled_from(NUMERIC)))
        data = draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(dtype, allow_nan=True, allow_subnormal=False)))
    elif kind == "enum":
        data = draw(hnp.arrays(np.dtype("<i2"), shape, elements=st.sampled_from([-3, 0, 1000])))
    elif kind == "fixed":
        data = draw(hnp.arrays(np.dtype("S5"), shape, elements=st.binary(max_size=5).filter(lambda b: not b.endswith(b"\x00"))))
    elif kind == "vlen":
        text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6)
        values = draw(st.lists(text, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        data = np.array(values, dtype=object).reshape(shape)
    else:
        dtype = np.dtype([("a", "<i2"), ("b", "<f8")])
        data = draw(hnp.arrays(dtype, shape, elements=st.tuples(st.integers(-100, 100), st.floats(-1e3, 1e3))))
    options: dict[str, Any] = {}
    unfiltered_edges = False
    if data.ndim and data.size and draw(st.booleans()):
        options["chunks"] = tuple(draw(st.integers(1, max(1, n))) for n in data.shape)
        options["maxshape"] = tuple(draw(st.sampled_from([n, n + 3, None])) for n in data.shape)
        if kind in ("numeric", "fixed", "compound", "enum") and data.dtype.kind != "c":
            compression = draw(st.sampled_from([None, "gzip", "lzf"]))
            if compression:
                options["compression"] = compression
            options["shuffle"] = draw(st.booleans())
            options["fletcher32"] = draw(st.booleans())
            unfiltered_edges = draw(st.booleans())
        if kind == "numeric" and data.dtype.kind in "iu" and draw(st.booleans()):
            options["fillvalue"] = draw(hnp.from_dtype(data.dtype))
    return {"data": data, "kind": kind, "options": options, "unfiltered_edges": unfiltered_edges}


@st.composite
def file_kinds(draw: st.DrawFn) -> FileKind:
    libver = draw(st.sampled_from(["earliest", "v108", "v110", "v112", "v114", "latest"]))
    return FileKind(
        libver=(libver, "latest"),
        userblock=draw(st.sampled_from([0, 0, 512, 2048])),
        sizes=draw(st.sampled_from([None, None, (4, 4), (8, 4), (4, 8)])),
    )


attribute_values = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10),
    hnp.arrays(np.dtype("<f8"), hnp.array_shapes(max_dims=1, min_side=1, max_side=4)),
    hnp.arrays(np.dtype("<i4"), hnp.array_shapes(max_dims=1, min_side=1, max_side=4)),
)

trees = st.recursive(
    st.dictionaries(names, datasets(), min_size=1, max_size=3),
    lambda children: st.dictionaries(names, st.one_of(datasets(), children), min_size=1, max_size=3),
    max_leaves=6,
)


def _write(group: h5py.Group, tree: dict[str, Any], attributes: st.DataObject, dense: bool) -> None:
    for name, node in tree.items():
        if "data" in node and "kind" in node:
            data, options = node["data"], dict(node["options"])
            if node["unfiltered_edges"]:
                options["dcpl"] = dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_chunk(options["chunks"])  # the option needs a chunked layout
                libhdf5.set_chunk_opts(dcpl)
            if node["kind"] == "vlen":
                ds = group.create_dataset(name, data=data, dtype=h5py.string_dtype(), **options)
            elif node["kind"] == "enum":
                ds = group.create_dataset(name, data=data, dtype=ENUM, **options)
            else:
                ds = group.create_dataset(name, data=data, **options)
            obj: h5py.HLObject = ds
        else:
            obj = group.create_group(name)
            _write(obj, node, attributes, dense)
        # more than 8 attributes (or one over 64 KiB) go to dense storage where the format allows
        most = 10 if dense else 2
        for attr_name, value in attributes.draw(st.dictionaries(attribute_names, attribute_values, max_size=most)).items():
            obj.attrs[attr_name] = value
        if dense and attributes.draw(st.booleans()):
            obj.attrs["large"] = np.arange(10_000, dtype="<f8")  # 80 KB: beyond compact storage


def _normal(value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        flat = [_text(v) for v in array.ravel().tolist()]
        return np.array(flat, dtype=object).reshape(array.shape)
    return array


def _text(value: Any) -> Any:
    """Text as text whichever form a reader gives it (h5py: bytes for vlen strings); bytes
    that are not UTF-8 stay bytes."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def _same(expected: Any, actual: Any) -> bool:
    a, b = _normal(expected), _normal(actual)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "O" or b.dtype.kind == "O":
        return bool(np.all(a == b))
    if a.dtype.names:
        return a.dtype.names == b.dtype.names and all(_same(a[n], b[n]) for n in a.dtype.names)
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(tree=trees, attributes=st.data(), kind=file_kinds())
def test_random_trees_read_back_as_h5py_reads_them(tree, attributes, kind):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree.h5"
        dense = kind.libver is not None and kind.libver[0] != "earliest"
        try:
            with kind.create(path) as f:
                _write(f, tree, attributes, dense)
        except (OSError, ValueError, RuntimeError, TypeError) as e:
            event(f"h5py cannot write it: {type(e).__name__}")
            assume(False)
        if not h5py_reads_everything(path):
            event("h5py cannot read it back")
            assume(False)
        event(f"libver {kind.libver[0] if kind.libver else '-'}, userblock {kind.userblock}, sizes {kind.sizes}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            manifest = h5lens.index(path)
            header_arrays.ENABLED = False  # documents made from object headers: the same manifest
            try:
                full = h5lens.index(path)
            finally:
                header_arrays.ENABLED = True
        assert json.dumps(manifest.to_dict(), sort_keys=True, default=repr) == json.dumps(
            full.to_dict(), sort_keys=True, default=repr
        )
        root = h5lens.open(manifest)
        with h5py.File(path) as f:
            expected: dict[str, h5py.HLObject] = {}
            f.visititems(lambda name, obj: expected.__setitem__("/" + name, obj))
            found = dict(root.walk())
            event(f"{sum(isinstance(o, h5py.Dataset) for o in expected.values())} datasets")
            assert sorted(found) == sorted(expected)
            for name, node in found.items():
                obj = expected[name]
                if isinstance(obj, h5py.Dataset):
                    assert _same(obj[()], node[()]), name
                assert sorted(node.attrs) == sorted(obj.attrs), name
                for key in obj.attrs:
                    assert _same(obj.attrs[key], node.attrs[key]), (name, key)


def test_an_attribute_named_like_a_convention_attribute_is_refused(tmp_path):
    """Found by the random trees: an HDF5 attribute ``_DTYPE`` was overwritten by the
    convention's own ``_DTYPE`` (and navigation hid it). Refused, naming it."""
    import pytest

    path = tmp_path / "reserved.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
        f["x"].attrs["_DTYPE"] = 0
    with pytest.raises(h5lens.UnsupportedFeatureError, match=r"/x attribute '_DTYPE': the unified zarr convention"):
        h5lens.index(path)
