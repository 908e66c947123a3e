"""Documents made from object headers (h5lens.scan.header_arrays) against the full path.

Plain contiguous datasets and groups are built from their header bytes, without h5py
(MATLAB files hold tens of thousands of them). The manifest must be the one the full path
builds, byte for byte, on a corpus of every element type, fill value, shape, layout and
attribute kind h5py writes, in every file format version (with and without a user block),
MATLAB files written by hdf5storage among them; and enough of each file must come from
the headers that a path that always gave up could not pass.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from tests.test_attribute_headers import _create, _everything

import h5lens
from h5lens.scan import header_arrays

_LOGGER = "h5lens.scan"


def _manifests(path: Path, **options: Any) -> tuple[str, str]:
    """The manifest's JSON with documents made from headers, and without."""
    assert header_arrays.ENABLED
    made = h5lens.index(path, **options).to_dict()
    try:
        header_arrays.ENABLED = False
        full = h5lens.index(path, **options).to_dict()
    finally:
        header_arrays.ENABLED = True
    return json.dumps(made, sort_keys=True), json.dumps(full, sort_keys=True)


def _counts(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    for record in caplog.records:
        if record.name == _LOGGER and record.getMessage().startswith("made from their headers:"):
            datasets, groups = record.args  # type: ignore[misc]
            return int(datasets), int(groups)
    raise AssertionError("the scan logged nothing of what it made from headers")


def _datasets(f: h5py.File) -> None:
    """Every element type h5py writes, as contiguous, compact, chunked and external datasets."""
    rng = np.random.default_rng(1)
    g = f.create_group("types")
    dtypes = ["<i1", "<u1", "<i2", ">i2", "<u4", ">u8", "<f2", ">f4", "<f8", "S1", "S7", "?", "<c8", ">c16"]
    for dtype in dtypes:
        for shape in [(), (1,), (5,), (3, 4), (0,), (2, 0, 3)]:
            values = rng.integers(0, 100, size=shape).astype(dtype)
            g.create_dataset(f"{dtype} {shape}", data=values)
    g.create_dataset("utf-8 fixed", data=np.array(["é".encode()], dtype=h5py.string_dtype("utf-8", 3)))
    g.create_dataset("compound", data=np.zeros(3, dtype=[("a", "<i4"), ("b", ">f8")]))
    g.create_dataset(
        "padded compound", data=np.zeros(3, dtype=np.dtype({"names": ["a"], "formats": ["<i2"], "itemsize": 8}))
    )
    g.create_dataset("enum", data=np.array([0, 1, 1], "i1"), dtype=h5py.enum_dtype({"A": 0, "B": 1}, basetype="i1"))
    g.create_dataset("array type", data=np.zeros(2, dtype=("<f4", (3,))))
    g.create_dataset("vlen str", data=["a", "bc"], dtype=h5py.string_dtype())
    g.create_dataset(
        "vlen ints", data=np.array([np.arange(2), np.arange(3)], dtype=object), dtype=h5py.vlen_dtype("i4")
    )
    g.create_dataset("refs", data=np.array([g.ref, g["enum"].ref], dtype=h5py.ref_dtype))
    g.create_dataset("null refs", data=np.array([h5py.Reference(), g.ref, h5py.Reference()], dtype=h5py.ref_dtype))
    g.create_dataset("ref 2-d", data=np.array([[g.ref], [f.ref]], dtype=h5py.ref_dtype))
    f["named type"] = np.dtype("<i4")
    f["named type"].attrs["on it"] = 1
    g.create_dataset("ref to a type", data=np.array([f["named type"].ref], dtype=h5py.ref_dtype))
    g.create_dataset("region refs", data=np.array([g["enum"].regionref[0:2]], dtype=h5py.regionref_dtype))
    g.create_dataset("opaque", data=np.void(b"\x01\x02\x03\x04"))
    g.create_dataset("datetime", data=np.array([1, 2], "M8[s]").astype(h5py.opaque_dtype("M8[s]")))
    g.create_dataset("empty", data=h5py.Empty("f4"))
    fills = f.create_group("fills")
    for dtype, fill in [("f4", 1.5), ("f8", np.nan), ("i2", -7), ("S3", b"ab"), ("u1", 0)]:
        fills.create_dataset(f"unwritten {dtype}", shape=(4,), dtype=dtype, fillvalue=fill)
        written = fills.create_dataset(f"written {dtype}", shape=(4,), dtype=dtype, fillvalue=fill)
        written[:2] = np.zeros(2, dtype)
    fills.create_dataset("no fill set", shape=(3,), dtype="f8")
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_fill_value(np.array(0, "f4"))
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    h5py.h5d.create(fills.id, b"fill never", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple((3,)), dcpl=dcpl)
    layouts = f.create_group("layouts")
    layouts.create_dataset("big", data=np.arange(300_000, dtype="f8"))  # slabs, referenced
    layouts.create_dataset("tail", data=np.arange(100_003, dtype="f8"))  # a partial last slab
    layouts.create_dataset("chunked", data=np.arange(100.0), chunks=(10,))
    layouts.create_dataset("gzip", data=np.arange(100.0), chunks=(10,), compression="gzip")
    compact = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    compact.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple((4,))
    h5py.h5d.create(layouts.id, b"compact", h5py.h5t.STD_I32LE, space, dcpl=compact).write(
        h5py.h5s.ALL, h5py.h5s.ALL, np.arange(4, dtype="<i4")
    )
    with_attrs = layouts.create_dataset("with attributes", data=[1.0, 2.0])
    with_attrs.attrs["units"] = "m"
    with_attrs.attrs["scale"] = np.float32(0.5)
    with_attrs.attrs["names"] = ["x", "y"]
    with_attrs.attrs["ragged"] = np.array([np.arange(2), np.arange(1)], dtype=h5py.vlen_dtype("<u2"))
    with_attrs.attrs["ref"] = g.ref
    layouts.attrs["vlen"] = "group text"
    layouts.attrs["vlen bytes"] = np.array(b"\xff\xfeab", dtype=h5py.string_dtype("ascii"))
    f["soft"] = h5py.SoftLink("/layouts/big")
    f["hard"] = layouts["big"]


def _matlab(path: Path) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    rng = np.random.default_rng(0)
    cells = np.empty((40,), dtype=object)
    for i in range(40):
        cells[i] = {"id": np.float64(i), "name": f"trial {i}", "spikes": rng.random(20), "ok": True,
                    "tags": np.array(["a", "bc"], dtype=object), "counts": np.arange(i % 5, dtype=np.int32)}  # fmt: skip
    hdf5storage.savemat(str(path), {"trials": cells, "meta": {"rate": 30000.0, "label": "é"}}, format="7.3",
                        matlab_compatible=True)  # fmt: skip


@pytest.mark.parametrize("variant", ["earliest", "latest", "userblock"])
def test_datasets_and_attributes_as_the_full_path(
    tmp_path: Path, variant: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / f"{variant}.h5"
    f, _ = _create(path, "latest" if variant == "latest" else "earliest", 512 if variant == "userblock" else 0)
    with f:
        _datasets(f)
        _everything(f, False)  # libhdf5 reads its unusual types only with relaxed checks
    for convention in ("released", "proposal"):
        with caplog.at_level(logging.DEBUG, logger=_LOGGER):
            caplog.clear()
            made, full = _manifests(path, convention=convention)
            datasets, groups = _counts(caplog)
        assert made == full
        assert datasets > 80 and groups >= 3, (datasets, groups)


def test_matlab_files_from_headers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "trials.mat"
    _matlab(path)
    with caplog.at_level(logging.DEBUG, logger=_LOGGER):
        made, full = _manifests(path)
        datasets, groups = _counts(caplog)
    assert made == full
    with h5py.File(path) as f:
        n_datasets, n_groups = 0, 1
        for obj in _visit(f):
            n_datasets += isinstance(obj, h5py.Dataset)
            n_groups += isinstance(obj, h5py.Group)
    # every struct field, every cell (object references) and every group
    assert datasets == n_datasets and groups == n_groups, (datasets, n_datasets, groups, n_groups)
    root = h5lens.open(h5lens.index(path))
    with h5py.File(path) as f:
        for name, obj in _items(f):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind != "O":
                assert np.array_equal(np.asarray(root[name][()]), obj[()]), name


def _visit(f: h5py.File) -> list[Any]:
    found: list[Any] = []
    f.visititems(lambda _name, obj: found.append(obj))
    return found


def _items(f: h5py.File) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    f.visititems(lambda name, obj: found.append((name, obj)))
    return found


@pytest.mark.parametrize(
    "values",
    [
        np.array(["a", "", "é", "/#refs#/b"], dtype=object),
        np.array([["x", "yz"], ["", "q"]], dtype=object),
        np.array(["", ""], dtype=object),
        np.array("only", dtype=np.dtypes.StringDType()),
        np.array(["a", "bc"], dtype=np.dtypes.StringDType()),
    ],
)
def test_text_chunks_as_zarr_encodes_them(values: np.ndarray) -> None:
    """Small arrays of text (a MATLAB cell's references) are encoded with the vlen-utf8 codec
    directly: the same chunks zarr writes, absent where all are the fill value."""
    from h5lens.scan.materialize import _text_chunks, zarr_chunks

    shape = list(values.shape)
    doc = {
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape or []}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "", "codecs": [{"name": "vlen-utf8", "configuration": {}}], "attributes": {},
    }  # fmt: skip
    index = (0,) * values.ndim
    direct = _text_chunks(doc, [(index, values)])
    assert direct is not None
    assert direct == zarr_chunks(doc, [(index, values)])
