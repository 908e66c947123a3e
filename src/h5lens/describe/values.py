"""Values of encoded elements as a person reads them (categoricals, nullable arrays,
dataframes) and :func:`show`, what ``h5lens cat`` prints."""

from __future__ import annotations

from typing import Any

import numpy as np

from h5lens.describe.nodes import ENCODING, NA, NULLABLE, SPARSE, child, display, encoding, links, member, rows, summary
from h5lens.describe.selections import Item, Plan, plan, read, to_text
from h5lens.describe.sparse import show_sparse
from h5lens.errors import InvalidOptionError, ManifestFormatError
from h5lens.manifest.model import Manifest

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
        from h5lens.describe.attributes import packing_note

        p = plan(node.shape, selection, threshold=options["threshold"], edgeitems=options["edgeitems"], name=display(path))
        note = packing_note(manifest, path, manifest_name)
        values = to_text(read(node, p), p)
        return values if note is None else f"{note}\n{values}"
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
            text = show_sparse(node, path, kind, selection, threshold=options["threshold"])
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
