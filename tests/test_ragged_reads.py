"""Selections of ragged datasets (HDF5 variable-length sequences) read through navigation:
the rows asked for only, equal to h5py's reading of the same selection, and a buffer that
does not decode named."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.errors import H5LensError

KEYS = [0, 1, -1, 17, slice(None), slice(3, 9), slice(-5, None), slice(None, 4), slice(7, 7), slice(2, 30, 3), (5,), (slice(1, 4),), Ellipsis, ()]
GRID_KEYS = [0, -1, (1, 2), (slice(0, 2), 1), (slice(1, 3), slice(None, 2)), (-1, slice(None)), Ellipsis]


def _objects(sequences: list, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(sequences), dtype=object)
    out[:] = sequences
    return out.reshape(shape)


@pytest.fixture(scope="module")
def ragged_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ragged") / "ragged.h5"
    rng = np.random.default_rng(3)
    ints = [rng.integers(-99, 99, size=rng.integers(0, 12)).astype("<i4") for _ in range(40)]
    floats = [rng.normal(size=rng.integers(0, 6)) for _ in range(12)]
    record = np.dtype([("t", "<f8"), ("code", "<u2")])
    events = [np.array([(float(i), i % 7)] * (i % 4), dtype=record) for i in range(40)]
    with h5py.File(path, "w") as f:
        f.create_dataset("ints", data=_objects(ints, (40,)), dtype=h5py.vlen_dtype(np.int32), chunks=(8,), compression="gzip")
        f.create_dataset("grid", data=_objects(floats, (4, 3)), dtype=h5py.vlen_dtype(np.float64))
        f.create_dataset("events", data=_objects(events, (40,)), dtype=h5py.vlen_dtype(record))
    return path


def _same(got: object, want: object, where: str) -> None:
    if isinstance(want, np.ndarray) and want.dtype == object:
        assert isinstance(got, np.ndarray) and got.dtype == object and got.shape == want.shape, where
        for g, w in zip(got.ravel(), want.ravel(), strict=True):
            assert g.dtype == w.dtype, where
            np.testing.assert_array_equal(g, w, err_msg=where)
    else:
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, where  # type: ignore[union-attr]
        np.testing.assert_array_equal(got, want, err_msg=where)


@pytest.mark.parametrize("threshold", [0, 10**6], ids=["refs", "inline"])
def test_selections_of_ragged_datasets_equal_h5py(ragged_file: Path, threshold: int) -> None:
    root = h5lens.open(h5lens.index(ragged_file, inline_threshold=threshold))
    with h5py.File(ragged_file) as f:
        for name, keys in (("ints", KEYS), ("events", KEYS), ("grid", GRID_KEYS)):
            for key in keys:
                if isinstance(key, slice) and key.step not in (None, 1) and name == "grid":
                    continue
                _same(root[name][key], f[name][key], f"{name}[{key!r}]")


def test_a_row_out_of_bounds_is_refused_as_numpy_refuses_it(ragged_file: Path) -> None:
    root = h5lens.open(h5lens.index(ragged_file))
    with pytest.raises(IndexError):
        root["ints"][40]
    with pytest.raises(IndexError):
        root["ints"][-41]


def test_rows_read_only_their_sequences(ragged_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row's sequence is built alone: its offsets and its elements, not every sequence's."""
    import h5lens.read.ragged as ragged

    built: list[int] = []
    real = ragged.ragged_values

    def counting(shape: tuple[int, ...], offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
        built.append(int(np.prod(shape)))
        return real(shape, offsets, data)

    monkeypatch.setattr(ragged, "ragged_values", counting)
    root = h5lens.open(h5lens.index(ragged_file))
    with h5py.File(ragged_file) as f:
        _same(root["ints"][17], f["ints"][17], "ints[17]")
        _same(root["ints"][3:6], f["ints"][3:6], "ints[3:6]")
    assert built == [1, 3]


def test_a_buffer_that_does_not_decode_is_named(ragged_file: Path, tmp_path: Path) -> None:
    saved = tmp_path / "m.json"
    h5lens.index(ragged_file, inline_threshold=10**6).to_json(saved)
    doc = json.loads(saved.read_text())
    key = "ints/node1-data/c/0"
    assert doc["refs"][key].startswith("base64:")
    doc["refs"][key] = "base64:" + base64.b64encode(b"\x28\xb5\x2f\xfd not zstd at all").decode()
    saved.write_text(json.dumps(doc))
    root = h5lens.open(saved)
    with pytest.raises(H5LensError, match="ints/node1-data"):
        root["ints"][0]
