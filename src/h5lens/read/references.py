"""References read back: object references as the nodes they name, region references as
:class:`Region` (the dataset a ``_REGION_REFERENCE`` selects from, and the values it
selects, as h5py gives them: ``dataset[ref]``; :mod:`h5lens.scan.regions` has the form)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError

# points read one by one rather than through their bounding box, past this many elements
_BOX_ELEMENTS = 1 << 20


@dataclass(frozen=True, eq=False)
class Region:
    """An HDF5 region reference: ``node`` is the dataset it selects from, ``selection`` the
    recorded selection (``start``/``count``, ``blocks`` or ``points``, and ``shape``).
    ``node[region]``, like h5py's ``dataset[ref]``, reads the values it selects."""

    node: Any  # h5lens.read.navigate.Dataset
    selection: dict[str, Any]

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the values read (h5py's: the selection's box, or one axis of points)."""
        return tuple(int(n) for n in self.selection["shape"])

    def read(self) -> np.ndarray:
        """The values selected, in the order libhdf5 visits them, shaped as h5py shapes them."""
        selection = self.selection
        if "points" in selection:
            values = _points(self.node, selection["points"])
        else:
            boxes = selection["blocks"] if "blocks" in selection else [selection]
            values = _boxes(self.node, boxes)
        return values.reshape(self.shape)

    def __repr__(self) -> str:
        return f"<Region of {self.node.h5_path!r}: {json.dumps({k: v for k, v in self.selection.items()})}>"


def parse(value: Any, where: str) -> tuple[str, str, dict[str, Any]] | None:
    """``(source, path, selection)`` of a ``_REGION_REFERENCE`` object or its JSON text
    (``""``/None: a null reference)."""
    if value in ("", None):
        return None
    found = json.loads(value) if isinstance(value, str) else value
    if not (isinstance(found, dict) and isinstance(found.get("path"), str) and isinstance(found.get("region"), dict)):
        raise ManifestFormatError(f"{where}: a region reference must name a path and a region. Got {value!r}")
    region = found["region"]
    if "shape" not in region or not ({"points", "blocks", "start"} & set(region)):
        raise ManifestFormatError(f"{where}: a region needs points, blocks or start/count, and a shape. Got {region!r}")
    return str(found.get("source", ".")), found["path"], region


def each(values: Any, convert: Callable[[str], Any]) -> Any:
    """``convert`` applied to each stored text (a path, a region's JSON): one value, or an
    object array shaped like ``values``."""
    if isinstance(values, str):
        return convert(values)
    array = np.asarray(values)
    if array.ndim == 0:
        return convert(str(array[()]))
    out = np.empty(array.shape, dtype=object)
    for i, text in enumerate(array.ravel().tolist()):
        out.flat[i] = convert(text)
    return out


def with_targets(values: Any, fields: tuple[str, ...], dtype: np.dtype, targets: Callable[[Any], Any]) -> Any:
    """A compound's values with its reference fields read as ``targets`` gives them."""
    array = np.asarray(values)
    out = np.empty(array.shape, dtype=dtype)
    for name in array.dtype.names or ():
        column = array[name]
        if name in fields:
            found = targets(column)  # an object array, even 0-d: a Group is a Mapping numpy would unpack
            if not isinstance(found, np.ndarray):
                holder = np.empty((), dtype=object)
                holder[()] = found
                found = holder
            out[name] = found
        else:
            out[name] = column
    return out[()] if isinstance(values, np.void) else out


def _boxes(node: Any, boxes: list[dict[str, Any]]) -> np.ndarray:
    starts = np.asarray([b["start"] for b in boxes], dtype=np.int64)
    ends = starts + np.asarray([b["count"] for b in boxes], dtype=np.int64)
    low, high = starts.min(axis=0), ends.max(axis=0)
    values = np.asarray(node[tuple(slice(int(lo), int(hi)) for lo, hi in zip(low, high, strict=True))])
    if len(boxes) == 1:
        return values.reshape(-1)
    mask = np.zeros(values.shape, dtype=bool)
    for start, end in zip(starts - low, ends - low, strict=True):
        mask[tuple(slice(int(a), int(b)) for a, b in zip(start, end, strict=True))] = True
    return values[mask]  # row-major, as libhdf5 visits a union of boxes


def _points(node: Any, points: list[list[int]]) -> np.ndarray:
    if not points:
        return np.empty(0, dtype=node.dtype)
    coords = np.asarray(points, dtype=np.int64)
    low, high = coords.min(axis=0), coords.max(axis=0) + 1
    if int(np.prod(high - low, dtype=np.int64)) <= max(_BOX_ELEMENTS, 4 * len(coords)):
        values = np.asarray(node[tuple(slice(int(lo), int(hi)) for lo, hi in zip(low, high, strict=True))])
        return values[tuple((coords - low).T)]
    return np.asarray([node[tuple(int(i) for i in point)] for point in coords])
