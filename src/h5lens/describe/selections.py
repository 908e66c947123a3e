"""Selections as a person types them (``PATH[0:10, 2:4]``, ``[1, 5], 0:3``, ``--slice``),
planned against an array's shape and read as exactly that selection or numpy's
summarised corners."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

import numpy as np

from h5lens.errors import InvalidOptionError
from h5lens.manifest.model import Manifest

# -- selections -----------------------------------------------------------------------------

Item = int | slice | EllipsisType | list[int]  # a list: numpy's ``a[[1, 5, 7]]`` along its axis


_SYNTAX = (
    "expected integers, start:stop[:step] ranges, ... and one list of integers in brackets, separated by "
    "commas, like 0:10 or 0:10, 2:4 or [1, 5, 7], 0:3"
)


def _parts(body: str) -> list[str]:
    """``body`` split at the commas outside brackets (``ValueError`` if brackets do not pair up)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(body):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise ValueError
        elif c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError
    parts.append(body[start:])
    return parts


def _index_list(part: str) -> list[int] | None:
    """``"[1, 5, 7]"`` → ``[1, 5, 7]``; ``None`` if ``part`` is not a bracketed list of integers."""
    if not (part.startswith("[") and part.endswith("]")):
        return None
    inside = part[1:-1].strip()
    try:
        return [int(x) for x in inside.split(",")] if inside else []
    except ValueError:
        return None


def _whole_group(body: str) -> bool:
    """Whether ``body`` is one bracketed group, ``[...]`` (its first bracket closes at its end)."""
    if not body.startswith("["):
        return False
    depth = 0
    for i, c in enumerate(body):
        depth += c == "["
        depth -= c == "]"
        if depth == 0:
            return i == len(body) - 1
    return False


def parse_selection(text: str, *, what: str = "selection") -> tuple[Item, ...]:
    """``"0:10, 2"`` → ``(slice(0, 10), 2)``: ints, ``start:stop:step`` (step > 0), ``...`` and
    one list of ints, ``[1, 5, 7]`` (numpy's integer-array indexing along that axis).

    Brackets around the whole selection are optional (``[0:10, 2:4]``), unless what they
    hold is a list of integers: ``[1, 2]`` is the list, as in numpy's ``a[[1, 2]]``."""
    body = text.strip()
    if _whole_group(body) and any(c in body[1:-1] for c in ":.…["):  # [0:10, 2:4], not a list
        body = body[1:-1].strip()
    try:
        parts = _parts(body)
    except ValueError:
        raise InvalidOptionError(f"{what} {text!r}: brackets do not pair up; {_SYNTAX}") from None
    items: list[Item] = []
    for part in parts:
        part = part.strip()
        if not part and len(parts) == 1:
            break
        if part in ("...", "…"):
            items.append(Ellipsis)
            continue
        if part.startswith("["):
            indices = _index_list(part)
            if indices is None:
                raise InvalidOptionError(f"{what} {text!r}: a list holds integers only, like [1, 5, 7]; {_SYNTAX}")
            items.append(indices)
            continue
        pieces = part.split(":")
        try:
            if len(pieces) == 1:
                items.append(int(pieces[0]))
                continue
            if len(pieces) > 3:
                raise ValueError
            start, stop, *rest = (int(p) if p.strip() else None for p in pieces)
            step = rest[0] if rest else None
        except ValueError:
            raise InvalidOptionError(f"{what} {text!r}: {_SYNTAX}") from None
        if step is not None and step <= 0:
            raise InvalidOptionError(f"{what} {text!r}: the step must be positive")
        items.append(slice(start, stop, step))
    if sum(item is Ellipsis for item in items) > 1:
        raise InvalidOptionError(f"{what} {text!r}: at most one ...")
    if sum(isinstance(item, list) for item in items) > 1:
        raise InvalidOptionError(
            f"{what} {text!r}: one list of integers at most (numpy's point-wise indexing with several lists "
            "is not supported); select the others with ranges, like [1, 5], 0:3"
        )
    return tuple(items)


def split_selection(manifest: Manifest, path: str, option: str | None) -> tuple[str, tuple[Item, ...] | None]:
    """``PATH[0:10]`` (unless a node is named so) and ``--slice`` → (node key, selection or None)."""
    key = path.strip("/")
    selection: tuple[Item, ...] | None = None
    if key not in manifest.nodes and key.endswith("]") and "[" in key:
        key, _, inside = key[:-1].partition("[")
        key = key.rstrip("/")
        selection = parse_selection(inside, what=f"{path}:")
    if option is not None:
        if selection is not None:
            raise InvalidOptionError(f"{path}: give the selection in brackets or with --slice, not both")
        selection = parse_selection(option, what="--slice")
    return key, selection


@dataclass(frozen=True)
class Plan:
    """What to read of an array for a selection, and how to lay it out for numpy's printer.

    Along an axis too long to print whole, the first and last ``edgeitems`` selected
    values are read (``pieces``) and placed either side of one hidden slot, so that
    numpy's summarised output of the small array is that of the full selection."""

    # per axis: (what to read: a slice or, for a list, the indices; offset in the output)
    pieces: tuple[tuple[tuple[slice | np.ndarray, int], ...], ...]
    out_shape: tuple[int, ...]
    long_axes: tuple[int, ...]
    drop: tuple[int, ...]  # axes indexed by an integer: removed after reading
    size: int  # values selected
    summarized: bool
    edgeitems: int
    front: int | None = None  # the output axis that numpy puts first (a list apart from the integers)


def positions(item: int | slice | list[int], length: int, axis: int, where: str = "") -> range | np.ndarray:
    """The indices along an axis of ``length`` that ``item`` selects (an int: a range of one)."""
    if isinstance(item, slice):
        return range(*item.indices(length))
    indices = np.asarray(item if isinstance(item, list) else [item], dtype=np.int64)
    bad = (indices < -length) | (indices >= length)
    if bad.any():
        raise InvalidOptionError(
            f"{where}index {int(indices[bad][0])} is out of range for axis {axis} of length {length}"
        )
    indices = np.where(indices < 0, indices + length, indices)
    return range(int(indices[0]), int(indices[0]) + 1) if isinstance(item, int) else indices


def plan(
    shape: Sequence[int], selection: tuple[Item, ...] | None, *, threshold: float, edgeitems: int, name: str = ""
) -> Plan:
    """What to read of an array of ``shape`` (``name`` in messages) to print ``selection``.

    ``threshold`` is numpy's print option: a float, since ``np.inf`` means "never summarise"."""
    where = f"{name}: " if name else ""
    items = expand(tuple(selection or ()), len(shape), where)
    ranges: list[range | np.ndarray] = []
    drop: list[int] = []
    listed: list[int] = []
    for axis, (item, length) in enumerate(zip(items, shape, strict=True)):
        ranges.append(positions(item, length, axis, where))
        if isinstance(item, int):
            drop.append(axis)
        elif isinstance(item, list):
            listed.append(axis)
    size = math.prod(len(r) for r in ranges)
    summarized = size > threshold
    pieces: list[tuple[tuple[slice | np.ndarray, int], ...]] = []
    out_shape: list[int] = []
    long_axes: list[int] = []
    for axis, r in enumerate(ranges):
        if summarized and len(r) > 2 * edgeitems:
            pieces.append(((_reading(r[:edgeitems]), 0), (_reading(r[-edgeitems:]), edgeitems + 1)))
            out_shape.append(2 * edgeitems + 1)
            long_axes.append(axis)
        else:
            pieces.append(((_reading(r), 0),))
            out_shape.append(len(r))
    # numpy: the integers and the list index together; if they are not neighbours, the
    # list's axis comes first (a[0, :, [1, 2]] has shape (2, n))
    front = None
    if listed and drop:
        joint = sorted([*listed, *drop])
        if joint != list(range(joint[0], joint[-1] + 1)):
            front = listed[0] - sum(axis < listed[0] for axis in drop)
    return Plan(tuple(pieces), tuple(out_shape), tuple(long_axes), tuple(drop), size, summarized, edgeitems, front)


def expand(items: tuple[Item, ...], ndim: int, where: str) -> tuple[int | slice | list[int], ...]:
    explicit = sum(item is not Ellipsis for item in items)
    if explicit > ndim:
        raise InvalidOptionError(f"{where}too many indices: {explicit} for {ndim} dimension{'s' if ndim != 1 else ''}")
    out: list[int | slice | list[int]] = []
    for item in items:
        if isinstance(item, EllipsisType):
            out.extend([slice(None)] * (ndim - explicit))
        else:
            out.append(item)
    out.extend([slice(None)] * (ndim - len(out)))
    return tuple(out)


def _reading(r: range | np.ndarray) -> slice | np.ndarray:
    """What zarr reads for these indices: a slice for a range (or an empty list), else the indices."""
    if isinstance(r, range):
        return slice(r.start, r.stop, r.step)
    return r if len(r) else slice(0, 0)


def read(array: Any, p: Plan) -> np.ndarray:
    """The values of ``array`` that ``p`` prints, read block by block (named if a chunk fails)."""
    from h5lens.read.check import read_checked

    out: np.ndarray | None = None
    for combo in itertools.product(*p.pieces):
        selection = tuple(s for s, _ in combo)
        block = np.asarray(read_checked(array, selection if selection else ()))
        if out is None:
            out = np.empty(p.out_shape, dtype=block.dtype)
        if not combo:
            out = block.reshape(())
            continue
        where = tuple(slice(offset, offset + n) for (_, offset), n in zip(combo, block.shape, strict=True))
        out[where] = block
    assert out is not None
    for axis in p.long_axes:  # the hidden slot: any value of the right type
        index: list[int | slice] = [slice(None)] * out.ndim
        index[axis] = p.edgeitems
        source = list(index)
        source[axis] = p.edgeitems - 1
        out[tuple(index)] = out[tuple(source)]
    if p.drop:
        out = out[tuple(0 if axis in p.drop else slice(None) for axis in range(out.ndim))]
    if p.front is not None:
        out = np.moveaxis(out, p.front, 0)
    return out


def to_text(values: np.ndarray, p: Plan) -> str:
    """numpy's printout of the selection (summarised as numpy would summarise it)."""
    options = np.get_printoptions()
    threshold = values.size - 1 if p.long_axes else max(options["threshold"], values.size)
    with np.printoptions(threshold=max(threshold, 0), edgeitems=p.edgeitems):
        return str(values)
