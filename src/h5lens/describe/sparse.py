"""Sparse matrices (anndata's ``csr_matrix`` / ``csc_matrix``) shown with a selection:
dense when small, else their stored values at their coordinates, reading only those."""

from __future__ import annotations

from typing import Any

import numpy as np

from h5lens.describe.nodes import display, shape_of
from h5lens.describe.selections import Item, expand, positions
from h5lens.errors import InvalidOptionError, ManifestFormatError

# -- sparse matrices ----------------------------------------------------------------------------

SPARSE_SHOWN = 25  # stored values listed before and after "...", as scipy prints (maxprint 50)
SPARSE_SCAN = 1_000_000  # stored values whose indices may be read to select along the minor axis


def _sparse_shape(group: Any, where: str) -> tuple[int, int]:
    shape = group.attrs.get("shape")
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(n, int) and n >= 0 for n in shape)):
        raise ManifestFormatError(f"{where}: a sparse matrix whose shape attribute is {shape!r}")
    return shape[0], shape[1]


def _read_at(array: Any, at: np.ndarray) -> np.ndarray:
    """``array[at]`` for sorted indices ``at`` of a 1-d array: one range when they are
    contiguous, else only the chunks they fall in."""
    from h5lens.read.check import read_checked

    if not len(at):
        return np.asarray(read_checked(array, (slice(0, 0),)))
    if int(at[-1]) - int(at[0]) + 1 == len(at):
        return np.asarray(read_checked(array, (slice(int(at[0]), int(at[-1]) + 1),)))
    return np.asarray(read_checked(array, (at,)))


def _read_positions(array: Any, at: np.ndarray) -> np.ndarray:
    """``array[at]`` for any indices ``at`` (each distinct one read once)."""
    unique, inverse = np.unique(at, return_inverse=True)
    return _read_at(array, unique)[inverse.reshape(-1)]


def _spans(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions in ``data`` of the stored values of each line, concatenated, and the
    line (index into ``starts``) of each."""
    line = np.repeat(np.arange(len(starts)), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return starts[line] + offsets, line


def _first(starts: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_spans` of only the first ``n`` stored values."""
    through = int(np.searchsorted(np.cumsum(counts), n)) + 1  # the lines holding them
    found, line = _spans(starts[:through], counts[:through])
    return found[:n], line[:n]


def _last(starts: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_spans` of only the last ``n`` stored values."""
    since = max(len(starts) - int(np.searchsorted(np.cumsum(counts[::-1]), n)) - 1, 0)
    found, line = _spans(starts[since:], counts[since:])
    return found[-n:], line[-n:] + since


def show_sparse(group: Any, path: str, kind: str, selection: tuple[Item, ...], *, threshold: float) -> str:
    """A selection of a ``csr_matrix`` / ``csc_matrix`` group: the dense values if numpy
    would print them whole, else the stored values (first and last ``SPARSE_SHOWN``) with
    their (row, column) in the matrix.

    Only what is needed is read: ``indptr`` of the selected rows (csr) or columns (csc),
    then the stored values shown. Selecting along the other axis (columns of a csr,
    rows of a csc) also reads the ``indices`` of every selected row (column), refused
    beyond ``SPARSE_SCAN`` stored values."""
    where = display(path)
    shape = _sparse_shape(group, where)
    items = expand(selection, 2, f"{where}: ")
    chosen = [positions(item, n, axis, f"{where}: ") for axis, (item, n) in enumerate(zip(items, shape, strict=True))]
    major_axis = 0 if kind == "csr_matrix" else 1
    major, minor = chosen[major_axis], chosen[1 - major_axis]
    n_minor = shape[1 - major_axis]
    lines_of = ("row", "column") if major_axis == 0 else ("column", "row")
    every_minor = isinstance(minor, range) and minor == range(n_minor)
    try:
        indptr, indices, data = group["indptr"], group["indices"], group["data"]
    except KeyError:
        raise ManifestFormatError(f"{where}: a {kind} without its data, indices and indptr arrays") from None
    nnz = int(data.shape[0])
    if indptr.shape != (shape[major_axis] + 1,) or indices.shape != (nnz,):
        raise ManifestFormatError(
            f"{where}: a {kind} of shape {shape_of(shape)} with indptr {shape_of(indptr.shape)}, "
            f"indices {shape_of(indices.shape)} and data {shape_of(data.shape)}"
        )
    wanted = np.asarray(major, dtype=np.int64)
    if len(wanted):
        ends_at = _read_positions(indptr, np.concatenate([wanted, wanted + 1])).astype(np.int64)
        starts, ends = ends_at[: len(wanted)], ends_at[len(wanted) :]
    else:
        starts = ends = np.zeros(0, dtype=np.int64)
    counts = ends - starts
    if (counts < 0).any() or (len(ends) and (int(ends.max()) > nnz or int(starts.min()) < 0)):
        raise ManifestFormatError(f"{where}: indptr does not fit its {nnz} stored values")
    # the stored values selected: all of the selected lines, or those in the minor selection
    found = line = minor_of = None
    if not every_minor:
        scanned = int(counts.sum())
        if scanned > SPARSE_SCAN:
            example = f"{path}[0:100, 0:5]" if major_axis == 0 else f"{path}[0:5, 0:100]"
            raise InvalidOptionError(
                f"{where} is a {kind}: selecting {lines_of[1]}s reads the {lines_of[1]} of every stored value "
                f"in the selected {lines_of[0]}s, {scanned} here (at most {SPARSE_SCAN}); select fewer {lines_of[0]}s, like {example}"
            )
        found, line = _spans(starts, counts)
        minor_of = _read_positions(indices, found).astype(np.int64)
        keep = np.isin(minor_of, np.asarray(minor))
        found, line, minor_of = found[keep], line[keep], minor_of[keep]
        n_found = len(found)
    else:
        n_found = int(counts.sum())
    out_shape = [len(chosen[axis]) for axis in (0, 1) if not isinstance(items[axis], int)]
    head = f"selected: {shape_of(out_shape)}, {n_found} stored value{'s' if n_found != 1 else ''}"
    if len(chosen[0]) * len(chosen[1]) <= threshold:  # printed whole: the dense values
        if found is None:
            found, line = _spans(starts, counts)
            minor_of = _read_positions(indices, found).astype(np.int64)
        assert line is not None and minor_of is not None
        if len(minor_of) and (int(minor_of.min()) < 0 or int(minor_of.max()) >= n_minor):
            raise ManifestFormatError(f"{where}: a stored value's {lines_of[1]} is outside 0:{n_minor}")
        values = _read_positions(data, found)
        dense = np.zeros((len(major), len(minor)), dtype=values.dtype)
        column: dict[int, list[int]] = {}
        for at, index in enumerate(np.asarray(minor).tolist()):
            column.setdefault(index, []).append(at)
        for i, j, value in zip(line.tolist(), minor_of.tolist(), values, strict=True):
            for at in column.get(j, ()):
                dense[i, at] += value  # duplicates add up, as scipy adds them
        if major_axis == 1:
            dense = dense.T
        dense = dense[tuple(0 if isinstance(items[axis], int) else slice(None) for axis in (0, 1))]
        return f"{head}\n{dense!s}"
    if not n_found:
        return head
    # the stored values, first and last ones, at their (row, column) in the matrix
    shown: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []  # (positions, line, minor or None)
    if n_found > 2 * SPARSE_SHOWN:
        if found is None:
            shown = [(*_first(starts, counts, SPARSE_SHOWN), None), (*_last(starts, counts, SPARSE_SHOWN), None)]
        else:
            assert line is not None and minor_of is not None
            shown = [
                (found[:SPARSE_SHOWN], line[:SPARSE_SHOWN], minor_of[:SPARSE_SHOWN]),
                (found[-SPARSE_SHOWN:], line[-SPARSE_SHOWN:], minor_of[-SPARSE_SHOWN:]),
            ]
    elif found is None:
        shown = [(*_spans(starts, counts), None)]
    else:
        assert line is not None
        shown = [(found, line, minor_of)]
    every = np.concatenate([at for at, _, _ in shown])
    values = _read_positions(data, every)
    minors = np.concatenate([m if m is not None else _read_positions(indices, at) for at, _, m in shown])
    majors = np.concatenate([wanted[i] for _, i, _ in shown])
    pairs = zip(majors.tolist(), minors.tolist(), strict=True)
    coordinates = [f"({a}, {b})" if major_axis == 0 else f"({b}, {a})" for a, b in pairs]
    width = max(map(len, coordinates), default=0)
    listed = [f"  {c:<{width}}  {v!s}" for c, v in zip(coordinates, values, strict=True)]
    if len(shown) == 2:
        listed.insert(SPARSE_SHOWN, "  ...")
    which = f"the first and last {SPARSE_SHOWN}, " if len(shown) == 2 else ""
    return "\n".join([f"{head}; {which}at their (row, column) in {where}:", *listed])
