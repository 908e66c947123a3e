"""What an element of a manifest is, and its values as a person reads them.

Used by ``h5lens ls``, ``cat`` and ``inspect``. Everything that describes a node
works from the manifest's metadata alone; what prints values reads only what it
prints:

* a selection (``PATH[0:10, 2:4]`` or ``--slice 0:10``) is read as that basic
  selection, and nothing else;
* without one (or when the selection is still too big to print whole) numpy's
  summarised form is printed, ``[0 1 2 ... 7 8 9]``, and only the leading and
  trailing values that appear in it are read (a block per corner), never the
  whole array;
* groups with an anndata ``encoding-type`` are decoded: ``categorical`` (labels),
  ``nullable-integer``, ``nullable-boolean``, ``nullable-string-array`` (masked
  values as ``<NA>``), ``dataframe`` (index and columns, sliced by rows);
  sparse matrices and other groups are described with the command that reads
  their parts.

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
        text = f"{_shape(doc.get('shape', []))} {data_type(doc)}"
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

Item = int | slice | EllipsisType


def parse_selection(text: str, *, what: str = "selection") -> tuple[Item, ...]:
    """``"0:10, 2"`` → ``(slice(0, 10), 2)``; ints, ``start:stop:step`` (step > 0) and ``...``."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    items: list[Item] = []
    for part in body.split(","):
        part = part.strip()
        if not part and len(items) == 0 and body.strip() == "":
            break
        if part in ("...", "…"):
            items.append(Ellipsis)
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
            raise InvalidOptionError(
                f"{what} {text!r}: expected integers and start:stop[:step] ranges separated by commas, "
                "like 0:10 or 0:10, 2:4"
            ) from None
        if step is not None and step <= 0:
            raise InvalidOptionError(f"{what} {text!r}: the step must be positive")
        items.append(slice(start, stop, step))
    if sum(item is Ellipsis for item in items) > 1:
        raise InvalidOptionError(f"{what} {text!r}: at most one ...")
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

    pieces: tuple[tuple[tuple[slice, int], ...], ...]  # per axis: (source slice, offset in the output)
    out_shape: tuple[int, ...]
    long_axes: tuple[int, ...]
    drop: tuple[int, ...]  # axes indexed by an integer: removed after reading
    size: int  # values selected
    summarized: bool
    edgeitems: int


def plan(
    shape: Sequence[int], selection: tuple[Item, ...] | None, *, threshold: float, edgeitems: int, name: str = ""
) -> Plan:
    """What to read of an array of ``shape`` (``name`` in messages) to print ``selection``.

    ``threshold`` is numpy's print option: a float, since ``np.inf`` means "never summarise"."""
    where = f"{name}: " if name else ""
    items = _expand(tuple(selection or ()), len(shape), where)
    ranges: list[range] = []
    drop: list[int] = []
    for axis, (item, length) in enumerate(zip(items, shape, strict=True)):
        if isinstance(item, slice):
            ranges.append(range(*item.indices(length)))
            continue
        index = item + length if item < 0 else item
        if not 0 <= index < length:
            raise InvalidOptionError(f"{where}index {item} is out of range for axis {axis} of length {length}")
        ranges.append(range(index, index + 1))
        drop.append(axis)
    size = math.prod(len(r) for r in ranges)
    summarized = size > threshold
    pieces: list[tuple[tuple[slice, int], ...]] = []
    out_shape: list[int] = []
    long_axes: list[int] = []
    for axis, r in enumerate(ranges):
        if summarized and len(r) > 2 * edgeitems:
            pieces.append(((_as_slice(r[:edgeitems]), 0), (_as_slice(r[-edgeitems:]), edgeitems + 1)))
            out_shape.append(2 * edgeitems + 1)
            long_axes.append(axis)
        else:
            pieces.append(((_as_slice(r), 0),))
            out_shape.append(len(r))
    return Plan(tuple(pieces), tuple(out_shape), tuple(long_axes), tuple(drop), size, summarized, edgeitems)


def _expand(items: tuple[Item, ...], ndim: int, where: str) -> tuple[int | slice, ...]:
    explicit = sum(item is not Ellipsis for item in items)
    if explicit > ndim:
        raise InvalidOptionError(f"{where}too many indices: {explicit} for {ndim} dimension{'s' if ndim != 1 else ''}")
    out: list[int | slice] = []
    for item in items:
        if item is Ellipsis:
            out.extend([slice(None)] * (ndim - explicit))
        else:
            out.append(item)
    out.extend([slice(None)] * (ndim - len(out)))
    return tuple(out)


def _as_slice(r: range) -> slice:
    return slice(r.start, r.stop, r.step)


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
            raise InvalidOptionError(
                f"{where} is a {kind}: slice its parts, e.g. h5lens cat {manifest_name} {child(path, 'data')} --slice 0:10"
            )
        major = "row" if kind == "csr_matrix" else "column"
        minor = "column" if kind == "csr_matrix" else "row"
        return "\n".join(
            [
                f"{where}: {summary(manifest, path)}",
                f"  {child(path, 'data')}: the stored values; {child(path, 'indices')}: the {minor} of each; "
                f"{child(path, 'indptr')}: where each {major} starts in data",
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
