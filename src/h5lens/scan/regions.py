"""Region references in the convention's reserved ``_REGION_REFERENCE`` form.

An HDF5 region reference names a dataset and a selection of its elements. The proposal
reserves ``{"_REGION_REFERENCE": {"source": ".", "path": "/target", "region": {...}}}``
for it; h5lens writes that object as an attribute value, and as the JSON text of each
element of a dataset of region references (``_DTYPE: "region_reference"``, ``""`` for a
null reference). The ``region`` is the selection as libhdf5 holds it:

* one box: ``{"start": [...], "count": [...]}`` (the whole dataset is its one box);
* several boxes: ``{"blocks": [{"start", "count"}, ...]}``, read in row-major order;
* points: ``{"points": [[...], ...]}``, read in the order listed (none: ``[]``);

and ``shape``, the shape h5py gives the values it reads through the reference
(``dataset[ref]``), which :class:`h5lens.read.navigate.Region` gives back.
"""

from __future__ import annotations

import json
from typing import Any

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.scan.walk import Walk


class Resolver:
    """Object and region references → what the manifest records of them."""

    def __init__(self, h5: h5py.File, found: Walk) -> None:
        self.h5 = h5
        self.found = found

    def __call__(self, ref: h5py.Reference) -> str | None:
        """The path of the object ``ref`` names (as the manifest holds it), or None."""
        try:
            # the object's identity without h5py's high-level object (~50 µs each; a MATLAB
            # file's cells hold tens of thousands of references)
            recorded = self.found.canonical.get(hash(h5py.h5r.dereference(ref, self.h5.id)))
            if recorded is not None:
                return recorded
            target = self.h5[ref]
        except (ValueError, KeyError, OSError, RuntimeError, TypeError):
            return None
        return self.found.path_of(target) or target.name

    def region(self, ref: h5py.RegionReference, where: str) -> dict[str, Any] | None:
        """The ``_REGION_REFERENCE`` object of ``ref`` (None for a null reference)."""
        if not ref:
            return None
        path = self(ref)
        if path is None:
            raise UnsupportedFeatureError(f"{where}: a region reference points at nothing reachable")
        try:
            space = h5py.h5r.get_region(ref, self.h5.id)
        except (ValueError, OSError, RuntimeError) as e:
            raise UnsupportedFeatureError(f"{where}: a region reference whose selection libhdf5 cannot read ({e})") from e
        return {"source": ".", "path": path, "region": selection_json(space, where)}

    def region_text(self, ref: h5py.RegionReference, where: str) -> str:
        """One element of a dataset of region references: the object's JSON text, ``""`` if null."""
        found = self.region(ref, where)
        return "" if found is None else json.dumps(found, separators=(",", ":"))


def selection_json(space: h5py.h5s.SpaceID, where: str) -> dict[str, Any]:
    kind = space.get_select_type()
    shape = _shape_read(space)
    if kind == h5py.h5s.SEL_ALL:
        dims = [int(n) for n in space.shape]
        return {"start": [0] * len(dims), "count": dims, "shape": dims}
    if kind == h5py.h5s.SEL_NONE:
        return {"points": [], "shape": [0]}
    if kind == h5py.h5s.SEL_POINTS:
        return {"points": space.get_select_elem_pointlist().tolist(), "shape": [int(n) for n in shape]}
    if kind == h5py.h5s.SEL_HYPERSLABS:
        blocks = [
            {"start": [int(n) for n in low], "count": [int(h) - int(lo) + 1 for lo, h in zip(low, high, strict=True)]}
            for low, high in space.get_select_hyper_blocklist().tolist()
        ]
        shaped = [int(n) for n in shape]
        if len(blocks) == 1:
            return {**blocks[0], "shape": shaped}
        return {"blocks": blocks, "shape": shaped}
    raise UnsupportedFeatureError(f"{where}: a region reference with a selection of unknown kind {kind}")


def _shape_read(space: h5py.h5s.SpaceID) -> tuple[int, ...]:
    """The shape of what h5py reads through a region reference (``dataset[ref]``): the
    selection's box where it fills one (each axis counted by what masking it off leaves),
    else one axis of the points selected, in the order libhdf5 visits them."""
    kind = space.get_select_type()
    count = int(space.get_select_npoints())
    rank = len(space.shape)
    if kind == h5py.h5s.SEL_ALL:
        return tuple(int(n) for n in space.shape)
    if kind == h5py.h5s.SEL_NONE or (kind == h5py.h5s.SEL_HYPERSLABS and count == 0):
        return (0,) * rank
    if kind != h5py.h5s.SEL_HYPERSLABS:
        return (count,)
    low, high = (np.asarray(corner, dtype=np.int64) for corner in space.get_select_bounds())
    box = high - low + 1
    shape = []
    for axis in range(rank):
        if box[axis] == 1:
            shape.append(1)
            continue
        start, extent = low.copy(), box.copy()
        start[axis] += 1
        extent[axis] -= 1
        masked = space.copy()
        masked.select_hyperslab(tuple(int(n) for n in start), tuple(int(n) for n in extent), op=h5py.h5s.SELECT_NOTB)
        shape.append(count // int(masked.get_select_npoints()))
    return tuple(shape) if int(np.prod(shape, dtype=np.int64)) == count else (count,)
