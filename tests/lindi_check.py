"""Run under the LINDI venv (``make lindi``: lindi, zarr 2, pynwb), not the project's.

``python tests/lindi_check.py PAIRS.json REPORT.json`` where PAIRS.json is a list of
``[original.h5, written.lindi.json, is_nwb]``: opens each .lindi.json with LINDI's own
reader (``lindi.LindiH5pyFile.from_lindi_file``) and compares every group, link,
dataset and attribute with h5py reading the original; for NWB files, also reads both
with ``pynwb.NWBHDF5IO(file=...)`` and compares every container field by field. Writes
REPORT.json: ``{lindi json: {"h5lens": [differences...], "lindi": [...]}}`` (an empty
list when equal; an error LINDI raised is a difference), "lindi" being the same check of
LINDI's own conversion of the original (or why LINDI refused to convert it). tests/test_lindi.py runs it and asserts on it.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import warnings
from typing import Any

import h5py
import lindi
import numpy as np
from lindi.LindiH5pyFile.LindiH5pyReference import LindiH5pyReference


def plain(value: Any, file: Any = None) -> Any:
    """h5py's and LINDI's values alike: text as str, references as their target's path."""
    if isinstance(value, LindiH5pyReference):  # an h5py.Reference too: first
        return ("ref", value._path)
    if isinstance(value, h5py.Reference):
        return ("ref", file[value].name if value else None)
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8")
    if isinstance(value, np.str_):
        return str(value)
    if isinstance(value, np.void):
        return tuple(plain(value[n], file) for n in value.dtype.names)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biufc" and value.dtype.names is None:
            return value
        return (
            [plain(v, file) for v in value.tolist()]
            if value.dtype.kind != "O"
            else [plain(v, file) for v in value.reshape(-1)] + [("shape", value.shape)]
        )
    if isinstance(value, (list, tuple)):
        return [plain(v, file) for v in value]
    return value


def differences(expected: Any, actual: Any, where: str) -> list[str]:
    if isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        e, a = np.asarray(expected), np.asarray(actual)
        if e.shape != a.shape or e.dtype != a.dtype:
            return [f"{where}: {e.dtype}{e.shape} != {a.dtype}{a.shape}"]
        if not np.array_equal(e, a, equal_nan=e.dtype.kind in "fc"):
            return [f"{where}: values differ"]
        return []
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if len(expected) != len(actual):
            return [f"{where}: length {len(expected)} != {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) and math.isnan(actual):
        return []
    if expected != actual or (isinstance(expected, bool) != isinstance(actual, bool)):
        return [f"{where}: {expected!r} != {actual!r}"]
    return []


def attr_plain(value: Any, file: Any) -> Any:
    if isinstance(value, np.ndarray) and (value.dtype.kind in "biuf" or value.size == 0):  # [] has no type
        return value.tolist()
    return plain(value, file)


def attrs_differences(expected: Any, actual: Any, where: str, h5: Any) -> list[str]:
    found = []
    if sorted(expected.keys()) != sorted(actual.keys()):
        return [f"{where}: attributes {sorted(expected.keys())} != {sorted(actual.keys())}"]
    for name in expected:
        # LINDI's attributes are JSON: numbers come back as int64 / float64, values exact
        found += differences(
            attr_plain(expected[name], h5), attr_plain(actual[name], None), f"{where} attribute {name!r}"
        )
    return found


def dataset_values(dataset: Any, file: Any) -> Any:
    names = dataset.dtype.names
    if names:  # LINDI reads records field by field (1-d)
        return [plain(np.asarray(dataset[n][:]) if dataset.ndim else dataset[()][n], file) for n in names]
    value = dataset[()]
    return plain(value, file)


def tree_differences(h5: h5py.Group, lf: Any, file: h5py.File) -> list[str]:
    found = attrs_differences(h5.attrs, lf.attrs, h5.name, file)
    if sorted(h5.keys()) != sorted(lf.keys()):
        return found + [f"{h5.name}: members {sorted(h5.keys())} != {sorted(lf.keys())}"]
    for name in h5:
        where = f"{h5.name.rstrip('/')}/{name}"
        link = h5.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink):
            got = lf.get(name, getlink=True)
            if not isinstance(got, h5py.SoftLink) or got.path != link.path:
                found.append(f"{where}: soft link to {link.path} read as {got!r}")
            continue
        expected, actual = h5[name], lf[name]
        if isinstance(expected, h5py.Group):
            found += tree_differences(expected, actual, file)
            continue
        found += attrs_differences(expected.attrs, actual.attrs, where, file)
        if expected.shape != actual.shape:
            found.append(f"{where}: shape {expected.shape} != {actual.shape}")
            continue
        if expected.dtype.kind in "biufcS" and expected.dtype != actual.dtype:
            found.append(f"{where}: dtype {expected.dtype} != {actual.dtype}")
        found += differences(dataset_values(expected, file), dataset_values(actual, None), where)
    return found


# -- pynwb ------------------------------------------------------------------------------------


def container_plain(value: Any) -> Any:
    import pandas as pd
    from hdmf.container import AbstractContainer

    if isinstance(value, AbstractContainer):
        return ("container", type(value).__name__, value.name, value.object_id)
    if isinstance(value, pd.DataFrame):
        return [[str(c) for c in value.columns], container_plain(list(value.index))] + [
            container_plain(list(value[c])) for c in value.columns
        ]
    if isinstance(value, dict):
        return {k: container_plain(v) for k, v in value.items()}
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return value.decode() if isinstance(value, (bytes, np.bytes_)) else str(value)
    if isinstance(value, np.void):
        return [container_plain(value[n]) for n in value.dtype.names]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [container_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biufc" and value.dtype.names is None:
            return value
        return [container_plain(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "__getitem__"):  # datasets
        return container_plain(value[()] if value.shape == () else value[:])
    return value


def nwb_differences(original: str, lindi_file: Any) -> list[str]:
    from hdmf.common import DynamicTable
    from hdmf.container import Data
    from pynwb import NWBHDF5IO

    found: list[str] = []
    with (
        h5py.File(original, "r") as h5,
        NWBHDF5IO(file=h5, mode="r") as h5io,
        NWBHDF5IO(file=lindi_file, mode="r") as lio,
    ):
        expected, actual = h5io.read(), lio.read()
        if set(expected.objects) != set(actual.objects):
            return [f"objects differ: {sorted(set(expected.objects) ^ set(actual.objects))}"]
        for object_id, e in expected.objects.items():
            a = actual.objects[object_id]
            where = f"{type(e).__name__} {e.name}"
            if type(e).__name__ != type(a).__name__ or set(e.fields) != set(a.fields):
                found.append(f"{where}: {type(a).__name__} with fields {sorted(a.fields)}, not {sorted(e.fields)}")
                continue
            try:
                for field in sorted(e.fields):
                    found += differences(
                        container_plain(e.fields[field]), container_plain(a.fields[field]), f"{where}.{field}"
                    )
                if isinstance(e, Data):
                    found += differences(container_plain(e.data), container_plain(a.data), f"{where}.data")
                if isinstance(e, DynamicTable) and len(e):
                    found += differences(
                        container_plain(e.to_dataframe()), container_plain(a.to_dataframe()), f"{where} dataframe"
                    )
            except Exception as error:  # noqa: BLE001 - LINDI's failure is a difference
                found.append(f"{where}: LINDI failed: {type(error).__name__}: {str(error)[:200]}")
    return found


def check(original: str, written: str, is_nwb: bool) -> list[str]:
    """Where LINDI reading ``written`` differs from h5py (and pynwb) reading ``original``."""
    found: list[str] = []
    try:
        lf = lindi.LindiH5pyFile.from_lindi_file(written)
        with h5py.File(original, "r") as h5:
            found += tree_differences(h5, lf, h5)
        if is_nwb:
            found += nwb_differences(original, lindi.LindiH5pyFile.from_lindi_file(written))
    except Exception as error:  # noqa: BLE001 - every failure is reported as a difference
        found.append(f"LINDI failed: {type(error).__name__}: {str(error)[:200]}")
    return found


def lindi_own(original: str, is_nwb: bool) -> list[str] | str:
    """The same check of LINDI's own conversion of ``original`` (its differences: what
    LINDI's reader gets wrong whoever wrote the file), or why LINDI refused to convert it."""
    # beside the pairs file (the test's temporary directory), never beside the original: the
    # shared files other software wrote are read-only to the tests
    written = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), os.path.basename(original) + ".by-lindi.lindi.json")
    try:
        lindi.LindiH5pyFile.from_hdf5_file(original, url=original).write_lindi_file(written)
    except Exception as error:  # noqa: BLE001 - LINDI's own refusal, reported
        return f"LINDI refused: {str(error)[:200]}"
    return check(original, written, is_nwb)


def main() -> None:
    warnings.simplefilter("ignore")
    with open(sys.argv[1]) as given:
        pairs = json.load(given)
    report = {
        written: {"h5lens": check(original, written, is_nwb), "lindi": lindi_own(original, is_nwb)}
        for original, written, is_nwb in pairs
    }
    with open(sys.argv[2], "w") as out:  # not stdout: LINDI prints there when files close
        json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
