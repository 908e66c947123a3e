"""What a node of a manifest is, from its metadata alone: kind, shape, type, codecs,
members, links (``h5lens ls`` and ``inspect``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from h5lens.format import convention
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
    from h5lens.format.keys import escape_key

    for candidate in (name, escape_key(name)):
        key = child(path, candidate)
        if key in manifest.nodes:
            return key
    return None


def resolve(manifest: Manifest, key: str) -> str:
    """``key``, or for ``<frame>/_index`` of a dataframe whose index column has another name,
    that column's key (an anndata dataframe's index, whatever its column is called)."""
    parent, _, name = key.rpartition("/")
    if key in manifest.nodes or name != convention.INDEX_ALIAS or parent not in manifest.nodes:
        return key
    index = convention.dataframe_index(manifest.nodes[parent].get("attributes", {}))
    found = None if index is None else member(manifest, parent, index)
    return found if found is not None else key


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


def shape_of(shape: Sequence[int]) -> str:
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
        return shape_of(shape)
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
        return f"{kind} {shape_of(shape)} {data_type(data) if data else '?'}, {nnz} stored values"
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
    """``h5lens ls`` of a group: one line per member, ``name/`` for groups, ``name@`` for links,
    ``name!`` for what indexing left out as unreadable (and why)."""
    entries: list[tuple[str, str, str]] = []
    for name in manifest.children(path):
        key = child(path, name)
        is_group = manifest.nodes[key].get("node_type") == "group"
        entries.append((name + ("/" if is_group else ""), "group" if is_group else "array", summary(manifest, key)))
    for link in links(manifest.nodes[path]):
        entries.append((link["name"] + "@", "link", f"→ {link_target(link)}"))
    for entry in manifest.unreadable_children(path):
        entries.append((entry.path.rsplit("/", 1)[-1] + "!", "left out", f"unreadable: {entry.line}"))
    lines: list[str] = []
    if entries:
        width = max(len(name) for name, _, _ in entries)
        kinds = max(5, *(len(kind) for _, kind, _ in entries))
        order = _member_order(manifest, path)
        entries.sort(key=lambda entry: (order.get(entry[0].rstrip("/@!"), len(order)), entry))
        lines = [f"{name:<{width}}  {kind:<{kinds}}  {text}" for name, kind, text in entries]
    return lines + attribute_lines(manifest, path, heading=True)


def _member_order(manifest: Manifest, path: str) -> dict[str, int]:
    """A dataframe's members in the dataframe's order: its index, then ``column-order``
    (anndata's order, which pandas shows); other members follow, by name."""
    attributes = manifest.nodes[path].get("attributes", {})
    if encoding(manifest.nodes[path]) != "dataframe":
        return {}
    columns = attributes.get("column-order", [])
    names = [attributes.get("_index", "_index"), *(columns if isinstance(columns, list) else [])]
    order: dict[str, int] = {}
    for name in names:
        key = member(manifest, path, str(name))
        if key is not None:
            order.setdefault(key.rsplit("/", 1)[-1], len(order))
    return order


def attribute_lines(manifest: Manifest, path: str, *, heading: bool = False) -> list[str]:
    """The attributes of the node at ``path`` with their values, one per line (the
    convention's reserved ones left to h5lens); those left out as unreadable, and why.
    ``heading``: after a blank line and ``attributes of /path:`` (a group's listing)."""
    from h5lens.describe.attributes import attribute_values, one_line

    hidden = _BOOKKEEPING if manifest.nodes[path].get("node_type") == "array" else frozenset()
    values = attribute_values(manifest, path, hidden=hidden)
    left_out = [entry for entry in manifest.unreadable if entry.path == path and entry.attribute is not None]
    if not values and not left_out:
        return []
    width = max(len(name) for name in [*values, *(entry.attribute or "" for entry in left_out)])
    lines = [f"    {name:<{width}} = {one_line(value)}" for name, value in values.items()]
    lines += [f"    {entry.attribute or '':<{width}} left out: {entry.line}" for entry in left_out]
    if heading:
        return ["", f"attributes of {display(path)}:", *(line[2:] for line in lines)]
    return ["  attributes", *lines]


def describe_array(manifest: Manifest, path: str) -> list[str]:
    """``h5lens ls`` of an array: what it is, from its metadata (nothing is read)."""
    doc = manifest.nodes[path]
    table = manifest.chunks.get(path)
    lines = [f"{display(path)}: array"]
    lines.append(f"  shape     {shape_of(doc.get('shape', []))}")
    names = dimension_names(doc)
    if names is not None:
        lines.append(f"  dims      ({', '.join('?' if name is None else name for name in names)})")
    lines.append(f"  dtype     {data_type(doc)}")
    if table is not None:
        inline = len(table.inline)
        referenced = table.n_present - inline
        total = math.prod(table.grid_shape) if table.grid_shape else 1
        lines.append(
            f"  chunks    {shape_of(chunk_shape(doc))} each; {total} in the grid: {referenced} referenced "
            f"({table.referenced_bytes} bytes), {inline} inline ({table.inline_bytes} bytes), "
            f"{total - table.n_present} absent (fill value)"
        )
    lines.append(f"  codecs    {codecs(doc)}")
    lines.append(f"  fill      {doc.get('fill_value')!r}")
    attributes = doc.get("attributes", {})
    kind = encoding(doc)
    if kind is not None:
        lines.append(f"  encoding  {kind} {attributes.get('encoding-version', '')}".rstrip())
    return lines + attribute_lines(manifest, path)
