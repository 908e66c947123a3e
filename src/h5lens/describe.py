"""What an element of a manifest is, and its values as a person reads them.

Used by ``h5lens ls``, ``cat`` and ``inspect``. Everything that describes a node
works from the manifest's metadata alone; what prints values reads only what it
prints:

* a selection (``PATH[0:10, 2:4]``, ``PATH[[1, 5], 0:3]`` or ``--slice 0:10``) is read
  as that selection (numpy's basic indexing, and one list of integers), and nothing else;
* without one (or when the selection is still too big to print whole) numpy's
  summarised form is printed, ``[0 1 2 ... 7 8 9]``, and only the leading and
  trailing values that appear in it are read (a block per corner), never the
  whole array;
* groups with an anndata ``encoding-type`` are decoded: ``categorical`` (labels),
  ``nullable-integer``, ``nullable-boolean``, ``nullable-string-array`` (masked
  values as ``<NA>``), ``dataframe`` (index and columns, sliced by rows),
  ``csr_matrix`` / ``csc_matrix`` with a selection (dense if small, else the stored
  values at their coordinates); without one, they and other groups are described
  with the command that reads their parts.

Reads go through :func:`h5lens.read.check.read_checked`, so a chunk that does not
decode is named (key, source and byte range).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

import numpy as np

from h5lens import convention
from h5lens.errors import InvalidOptionError, ManifestFormatError
from h5lens.manifest.model import Manifest

ENCODING = "encoding-type"
NULLABLE = ("nullable-integer", "nullable-boolean", "nullable-string-array")
SPARSE = ("csr_matrix", "csc_matrix")
# attributes that describe the node to h5lens or anndata, not to the user
_BOOKKEEPING = frozenset({"encoding-type", "encoding-version"}) | convention.RESERVED_ATTRIBUTES


class _Missing:
    """A masked or missing value; numpy prints object arrays with ``repr``."""

    def __repr__(self) -> str:
        return "<NA>"

    __str__ = __repr__


NA = _Missing()


# -- what a node is (metadata only) -----------------------------------------------------


def encoding(doc: dict[str, Any]) -> str | None:
    value = doc.get("attributes", {}).get(ENCODING)
    return value if isinstance(value, str) else None


def child(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def display(path: str) -> str:
    return "/" + path if path else "/"


def member(manifest: Manifest, path: str, name: str) -> str | None:
    """The key of group ``path``'s member ``name`` (given as written, or as anndata escapes it)."""
    from h5lens.keys import escape_key

    for candidate in (name, escape_key(name)):
        key = child(path, candidate)
        if key in manifest.nodes:
            return key
    return None


def links(doc: dict[str, Any]) -> list[dict[str, str]]:
    found = doc.get("attributes", {}).get(convention.LINKS, [])
    return [link for link in found if isinstance(link, dict) and "name" in link] if isinstance(found, list) else []


def link_at(manifest: Manifest, path: str) -> dict[str, str] | None:
    """The ``_LINKS`` entry that ``path`` names, if it is a link rather than a node."""
    parent, _, name = path.rpartition("/")
    doc = manifest.nodes.get(parent)
    if doc is None or doc.get("node_type") != "group":
        return None
    return next((link for link in links(doc) if link["name"] == name), None)


def link_target(link: dict[str, str]) -> str:
    source, target = link.get("source", "."), link.get("path", "?")
    return target if source == "." else f"{source}:{target}"


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def dimension_names(doc: dict[str, Any]) -> list[str | None] | None:
    """An array's ``dimension_names`` (netCDF's dimensions, as xarray names them), if it has any."""
    names = doc.get("dimension_names")
    shape = doc.get("shape", [])
    if not isinstance(names, list) or len(names) != len(shape) or not any(isinstance(n, str) for n in names):
        return None
    return [n if isinstance(n, str) else None for n in names]


def shape_text(doc: dict[str, Any]) -> str:
    """An array's shape, ``(12, 73, 144)``, or with its dimension names ``(time: 12, lat: 73, lon: 144)``."""
    shape = doc.get("shape", [])
    names = dimension_names(doc)
    if names is None:
        return _shape(shape)
    parts = (str(n) if name is None else f"{name}: {n}" for name, n in zip(names, shape, strict=True))
    return "(" + ", ".join(parts) + ")"


def data_type(doc: dict[str, Any]) -> str:
    kind = doc.get("data_type")
    if isinstance(kind, dict):
        kind = kind.get("name", kind)
    declared = doc.get("attributes", {}).get(convention.DTYPE)
    if isinstance(declared, str) and declared not in (kind, "str", "bytes"):
        return f"{kind} ({declared})"
    return str(kind)


def codecs(doc: dict[str, Any]) -> str:
    names = [c.get("name", "?") if isinstance(c, dict) else str(c) for c in doc.get("codecs", [])]
    return " → ".join(names) or "none"


def chunk_shape(doc: dict[str, Any]) -> tuple[int, ...]:
    return tuple(doc.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape", ()))


def rows(manifest: Manifest, path: str) -> int | None:
    """The length of a one-dimensional element: an array, or an encoded group's values."""
    doc = manifest.nodes.get(path)
    if doc is None:
        return None
    if doc.get("node_type") == "array":
        shape = doc.get("shape", [])
        return int(shape[0]) if shape else None
    kind = encoding(doc)
    part = {"categorical": "codes", **dict.fromkeys(NULLABLE, "values")}.get(kind or "")
    if part is not None:
        return rows(manifest, child(path, part))
    if kind == "dataframe":
        index = member(manifest, path, str(doc.get("attributes", {}).get("_index", "_index")))
        return rows(manifest, index) if index is not None else None
    return None


def summary(manifest: Manifest, path: str) -> str:
    """One line: what the node at ``path`` is, from its metadata."""
    doc = manifest.nodes[path]
    kind = encoding(doc)
    attributes = doc.get("attributes", {})
    if doc.get("node_type") == "array":
        text = f"{shape_text(doc)} {data_type(doc)}"
        return text if kind in (None, "array") else f"{text}, {kind}"
    if kind in SPARSE:
        shape = attributes.get("shape", [])
        data = manifest.nodes.get(child(path, "data"), {})
        nnz = (data.get("shape") or ["?"])[0]
        return f"{kind} {_shape(shape)} {data_type(data) if data else '?'}, {nnz} stored values"
    if kind == "dataframe":
        columns = attributes.get("column-order", [])
        columns = columns if isinstance(columns, list) else []
        return f"dataframe, {rows(manifest, path)} rows × {len(columns)} columns"
    if kind == "categorical":
        categories = rows(manifest, child(path, "categories"))
        ordered = "ordered" if attributes.get("ordered") else "unordered"
        return f"categorical, {rows(manifest, path)} values, {categories} categories ({ordered})"
    if kind in NULLABLE:
        values = manifest.nodes.get(child(path, "values"), {})
        return f"{kind}, {rows(manifest, path)} values ({data_type(values) if values else '?'})"
    members = len(manifest.children(path)) + len(links(doc))
    text = f"{members} member{'s' if members != 1 else ''}"
    return f"{kind}, {text}" if kind else text


def list_members(manifest: Manifest, path: str) -> list[str]:
    """``h5lens ls`` of a group: one line per member, ``name/`` for groups, ``name@`` for links."""
    entries: list[tuple[str, str, str]] = []
    for name in manifest.children(path):
        key = child(path, name)
        is_group = manifest.nodes[key].get("node_type") == "group"
        entries.append((name + ("/" if is_group else ""), "group" if is_group else "array", summary(manifest, key)))
    for link in links(manifest.nodes[path]):
        entries.append((link["name"] + "@", "link", f"→ {link_target(link)}"))
    if not entries:
        return []
    width = max(len(name) for name, _, _ in entries)
    return [f"{name:<{width}}  {kind:<5}  {text}" for name, kind, text in sorted(entries)]


def describe_array(manifest: Manifest, path: str) -> list[str]:
    """``h5lens ls`` of an array: what it is, from its metadata (nothing is read)."""
    doc = manifest.nodes[path]
    table = manifest.chunks.get(path)
    lines = [f"{display(path)}: array"]
    lines.append(f"  shape     {_shape(doc.get('shape', []))}")
    names = dimension_names(doc)
    if names is not None:
        lines.append(f"  dims      ({', '.join('?' if name is None else name for name in names)})")
    lines.append(f"  dtype     {data_type(doc)}")
    if table is not None:
        inline = len(table.inline)
        referenced = table.n_present - inline
        total = math.prod(table.grid_shape) if table.grid_shape else 1
        lines.append(
            f"  chunks    {_shape(chunk_shape(doc))} each; {total} in the grid: {referenced} referenced "
            f"({table.referenced_bytes} bytes), {inline} inline ({table.inline_bytes} bytes), "
            f"{total - table.n_present} absent (fill value)"
        )
    lines.append(f"  codecs    {codecs(doc)}")
    lines.append(f"  fill      {doc.get('fill_value')!r}")
    attributes = doc.get("attributes", {})
    kind = encoding(doc)
    if kind is not None:
        lines.append(f"  encoding  {kind} {attributes.get('encoding-version', '')}".rstrip())
    others = sorted(name for name in attributes if name not in _BOOKKEEPING)
    if others:
        lines.append(f"  attributes {', '.join(others)}")
    return lines


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
    items = _expand(tuple(selection or ()), len(shape), where)
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


def _expand(items: tuple[Item, ...], ndim: int, where: str) -> tuple[int | slice | list[int], ...]:
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


# -- values of encoded elements ---------------------------------------------------------------


def _masked(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape, dtype=object)
    out[...] = values.tolist() if values.ndim else values.item()
    out[np.asarray(mask, dtype=bool)] = NA
    return out


def _categorical(group: Any, p: Plan) -> np.ndarray:
    from h5lens.read.check import read_checked

    codes = read(group["codes"], p).astype(np.int64)
    out = np.empty(codes.shape, dtype=object)
    out[...] = NA
    present = codes >= 0
    if present.any():
        low, high = int(codes[present].min()), int(codes[present].max())
        categories = np.asarray(read_checked(group["categories"], (slice(low, high + 1),)))
        if high - low >= len(categories):
            raise ManifestFormatError(
                f"{display(group.path)}: code {high} but only {low + len(categories)} categories"
            )
        labels = np.empty(len(categories), dtype=object)
        labels[...] = categories.tolist()
        out[present] = labels[codes[present] - low]
    return out


def values_of(node: Any, p: Plan) -> np.ndarray:
    """The values of an array or of an encoded one-dimensional group, as printed."""
    import zarr

    if isinstance(node, zarr.Array):
        return read(node, p)
    kind = node.attrs.get(ENCODING)
    if kind == "categorical":
        return _categorical(node, p)
    if kind in NULLABLE:
        return _masked(read(node["values"], p), read(node["mask"], p))
    raise InvalidOptionError(f"{display(node.path)}: cannot print a group with encoding {kind!r}")


def _cell(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        text = format(float(value), ".6g")
        return text if any(c in text for c in ".eni") else text + ".0"  # 1.0, not 1; nan, inf
    if isinstance(value, bytes):
        return repr(value)
    return str(value)


def _dataframe(group: Any, manifest: Manifest, path: str, selection: tuple[Item, ...] | None) -> str:
    attributes = dict(group.attrs)
    index_name = str(attributes.get("_index", "_index"))
    columns = attributes.get("column-order", [])
    columns = [str(c) for c in columns] if isinstance(columns, list) else []
    n = rows(manifest, path)
    index_key = member(manifest, path, index_name)
    if n is None or index_key is None:
        raise ManifestFormatError(f"{display(path)}: a dataframe without its index {index_name!r}")
    options = np.get_printoptions()
    edge = options["edgeitems"]
    if selection is not None and len([s for s in selection if s is not Ellipsis]) > 1:
        raise InvalidOptionError(f"{display(path)}: a dataframe is sliced by rows only, like 0:10")
    p = plan(
        (n,), selection, threshold=max(2 * edge, options["threshold"] // (len(columns) + 1)), edgeitems=edge,
        name=display(path),
    )
    names = [index_name if index_name != "_index" else ""]
    cells: list[list[str]] = []
    numeric: list[bool] = []
    for name in [index_name, *columns]:
        key = member(manifest, path, name)
        if key is None:
            raise ManifestFormatError(f"{display(path)}: column {name!r} is listed but not present")
        node = group[key[len(path) + 1 :]] if path else group[key]
        shape = getattr(node, "shape", None)
        if shape is not None and len(shape) != 1:
            cells.append([f"<{len(shape)}-d>"] * p.out_shape[0])
            numeric.append(False)
        elif getattr(node, "shape", None) is None and node.attrs.get(ENCODING) not in ("categorical", *NULLABLE):
            cells.append([f"<{node.attrs.get(ENCODING, 'group')}>"] * p.out_shape[0])  # not printable as a column
            numeric.append(False)
        else:
            values = np.atleast_1d(values_of(node, p))
            cells.append([_cell(v) for v in values.tolist()])
            dtype = getattr(node, "dtype", None)
            kind = getattr(dtype, "kind", "")
            numeric.append(bool(kind) and kind in "iufb")
        if name != index_name:
            names.append(name)
    if p.long_axes:
        for column in cells:
            column[edge] = "..."
    widths = [max([len(names[i]), *map(len, column)]) for i, column in enumerate(cells)]
    lines = []
    header = [f"{names[i]:<{widths[i]}}" if not numeric[i] else f"{names[i]:>{widths[i]}}" for i in range(len(cells))]
    lines.append("  ".join(header).rstrip())
    for row in range(len(cells[0]) if cells else 0):
        parts = [
            f"{cells[i][row]:>{widths[i]}}" if numeric[i] else f"{cells[i][row]:<{widths[i]}}" for i in range(len(cells))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


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


def _sparse(group: Any, path: str, kind: str, selection: tuple[Item, ...], *, threshold: float) -> str:
    """A selection of a ``csr_matrix`` / ``csc_matrix`` group: the dense values if numpy
    would print them whole, else the stored values (first and last ``SPARSE_SHOWN``) with
    their (row, column) in the matrix.

    Only what is needed is read: ``indptr`` of the selected rows (csr) or columns (csc),
    then the stored values shown. Selecting along the other axis (columns of a csr,
    rows of a csc) also reads the ``indices`` of every selected row (column), refused
    beyond ``SPARSE_SCAN`` stored values."""
    where = display(path)
    shape = _sparse_shape(group, where)
    items = _expand(selection, 2, f"{where}: ")
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
            f"{where}: a {kind} of shape {_shape(shape)} with indptr {_shape(indptr.shape)}, "
            f"indices {_shape(indices.shape)} and data {_shape(data.shape)}"
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
    head = f"selected: {_shape(out_shape)}, {n_found} stored value{'s' if n_found != 1 else ''}"
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


def show(group: Any, manifest: Manifest, path: str, selection: tuple[Item, ...] | None, *, manifest_name: str) -> str:
    """What ``h5lens cat`` prints for the node at ``path`` (``group`` is the manifest's root)."""
    doc = manifest.nodes[path]
    node = group[path] if path else group
    options = np.get_printoptions()
    if doc.get("node_type") == "array":
        p = plan(node.shape, selection, threshold=options["threshold"], edgeitems=options["edgeitems"], name=display(path))
        return to_text(read(node, p), p)
    kind = encoding(doc)
    where = display(path)
    if kind == "dataframe":
        return f"{where}: {summary(manifest, path)}\n{_dataframe(node, manifest, path, selection)}"
    if kind == "categorical" or kind in NULLABLE:
        n = rows(manifest, path)
        if n is None:
            raise ManifestFormatError(f"{where}: a {kind} group without its parts")
        p = plan((n,), selection, threshold=options["threshold"], edgeitems=options["edgeitems"], name=where)
        return f"{where}: {summary(manifest, path)}\n{to_text(values_of(node, p), p)}"
    if kind in SPARSE:
        if selection is not None:
            text = _sparse(node, path, kind, selection, threshold=options["threshold"])
            return f"{where}: {summary(manifest, path)}\n{text}"
        major = "row" if kind == "csr_matrix" else "column"
        minor = "column" if kind == "csr_matrix" else "row"
        example = f"{path}[0:10]" if kind == "csr_matrix" else f"{path}[:, 0:10]"
        return "\n".join(
            [
                f"{where}: {summary(manifest, path)}",
                f"  print {major}s with: h5lens cat {manifest_name} '{example}'",
                (
                    f"  {child(path, 'data')}: the stored values; {child(path, 'indices')}: the {minor} of each; "
                    f"{child(path, 'indptr')}: where each {major} starts in data"
                ),
                f"  read them with e.g.: h5lens cat {manifest_name} {child(path, 'data')} --slice 0:10",
            ]
        )
    if selection is not None:
        raise InvalidOptionError(f"{where} is a group: select one of its arrays (h5lens ls {manifest_name} {path})")
    names = [name + ("/" if manifest.nodes[child(path, name)].get("node_type") == "group" else "") for name in manifest.children(path)]
    names += [link["name"] + "@" for link in links(doc)]
    what = f"a group (encoding {kind})" if kind else "a group"
    shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
    return "\n".join(
        [
            f"{where}: {what} with {len(names)} member{'s' if len(names) != 1 else ''}{': ' + shown if names else ''}",
            f"  list them with: h5lens ls {manifest_name}{' ' + path if path else ''}",
        ]
    )
