"""The h5ad profile: present what anndata's zarr v3 reader expects.

Modern files need little: the generic scan already writes strings as zarr
``string`` arrays and attributes as lists. This profile handles what differs
between anndata's HDF5 and zarr readings:

* escaped keys: a ``dict`` whose child names the generic scan had to escape is
  declared ``dict`` 0.2.0; a ``dict`` 0.2.0 written by anndata already holds
  escaped names, which pass through unchanged (not escaped twice);
* dataframe columns keep their own names where zarr can hold them, since
  ``column-order`` lists them unescaped;
* legacy layouts are upgraded virtually (0.7-era ``dataframe`` 0.1.0 whose
  categorical columns point at ``__categories/<col>`` through an object
  reference; ``h5sparse_format`` sparse groups).
"""

from __future__ import annotations

from typing import Any

from h5lens.format import convention
from h5lens.format.keys import escape_key, zarr_node_name
from h5lens.scan import anndata_legacy
from h5lens.scan.profiles import ProfileContext

ANNDATA_ROOTS = ("anndata", "treedata")


def applies(ctx: ProfileContext) -> bool:
    root = ctx.attributes("")
    if root.get("encoding-type") in ANNDATA_ROOTS:
        return True
    return convention.legacy_anndata_root(root, ctx.nodes.__contains__)


def apply(ctx: ProfileContext) -> None:
    if anndata_legacy.is_legacy(ctx):
        anndata_legacy.upgrade(ctx)
    for key in sorted(ctx.nodes, key=lambda k: k.count("/")):
        if key not in ctx.nodes or not ctx.is_group(key):
            continue
        attrs = ctx.attributes(key)
        kind, version = attrs.get("encoding-type"), attrs.get("encoding-version")
        if kind == "dict":
            _mapping(ctx, key, version)
        elif kind == "dataframe":
            if version == "0.1.0":
                _dataframe_0_1_0(ctx, key)
            _dataframe_column_names(ctx, key)
        elif "h5sparse_format" in attrs and "encoding-type" not in attrs:
            _h5sparse(ctx, key)


# -- keys -------------------------------------------------------------------


def _h5_name(ctx: ProfileContext, key: str) -> str:
    """The HDF5 name of the node at zarr ``key`` (the walk escaped it)."""
    return ctx.walk_names.get(key, key.rsplit("/", 1)[-1])


def _mapping(ctx: ProfileContext, key: str, version: Any) -> None:
    children = ctx.children(key)
    if version == "0.2.0":
        # anndata escaped these names itself: undo the walk's second escaping
        for name in children:
            raw = _h5_name(ctx, f"{key}/{name}" if key else name)
            if raw != name:
                ctx.rename(_join(key, name), _join(key, raw))
        return
    if any(_h5_name(ctx, _join(key, name)) != name for name in children):
        ctx.attributes(key)["encoding-version"] = "0.2.0"


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _dataframe_column_names(ctx: ProfileContext, key: str) -> None:
    # column-order and _index name columns unescaped: keep names zarr can hold as they are
    for name in ctx.children(key):
        raw = _h5_name(ctx, _join(key, name))
        if raw != name and zarr_node_name(raw) and _join(key, raw) not in ctx.nodes:
            ctx.rename(_join(key, name), _join(key, raw))


# -- legacy layouts ------------------------------------------------------------


def _reference_target(value: Any, parent: str) -> str | None:
    if isinstance(value, dict) and convention.REFERENCE in value:
        return value[convention.REFERENCE]["path"].strip("/")
    if isinstance(value, str):
        return _join(parent, value)
    return None


def _dataframe_0_1_0(ctx: ProfileContext, key: str) -> None:
    """0.7-era dataframes: categorical columns are codes whose ``categories`` attribute
    references ``__categories/<col>``. Present modern ``categorical`` groups whose codes
    are the old bytes."""
    attrs = ctx.attributes(key)
    columns = list(attrs.get("column-order", []))
    index_key = attrs.get("_index")
    consumed: set[str] = set()
    for column in [*columns, index_key]:
        if not isinstance(column, str):
            continue
        column_key = _join(key, column)
        if not ctx.is_array(column_key):
            continue
        column_attrs = ctx.attributes(column_key)
        target = _reference_target(column_attrs.get("categories"), key)
        if target is None:
            continue
        if not ctx.is_array(target):
            from h5lens.errors import UnsupportedFeatureError

            raise UnsupportedFeatureError(f"/{column_key}: its categories reference /{target}, which is not an array")
        ordered = bool(ctx.attributes(target).get("ordered", False))
        codes_key = _join(column_key, "codes")
        ctx.rename(column_key, codes_key)
        codes_attrs = ctx.attributes(codes_key)
        codes_attrs.pop("categories", None)
        codes_attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
        ctx.nodes[_join(column_key, "categories")] = ctx.nodes[target]
        if target in ctx.tables:
            ctx.tables[_join(column_key, "categories")] = ctx.tables[target]
        categories_attrs = ctx.attributes(_join(column_key, "categories"))
        categories_attrs.pop("ordered", None)
        is_text = ctx.nodes[target].get("data_type") == "string"
        categories_attrs.update(
            {"encoding-type": "string-array" if is_text else "array", "encoding-version": "0.2.0"}
        )
        ctx.put_group(column_key, {"encoding-type": "categorical", "encoding-version": "0.2.0", "ordered": ordered})
        consumed.add(target)
    for target in consumed:
        ctx.remove(target)
    for name in ctx.children(key):
        child = _join(key, name)
        if _h5_name(ctx, child) == "__categories" and ctx.is_group(child) and not ctx.children(child):
            ctx.remove(child)
    _encode_plain_columns(ctx, key, [*columns, index_key])
    attrs["encoding-version"] = "0.2.0"


def _encode_plain_columns(ctx: ProfileContext, key: str, columns: list[Any]) -> None:
    """0.1.0 columns carry no encoding metadata; 0.2.0 readers dispatch on it."""
    for column in columns:
        if not isinstance(column, str):
            continue
        column_key = _join(key, column)
        if ctx.is_array(column_key):
            attrs = ctx.attributes(column_key)
            if "encoding-type" not in attrs:
                is_text = ctx.nodes[column_key].get("data_type") == "string"
                attrs["encoding-type"] = "string-array" if is_text else "array"
                attrs["encoding-version"] = "0.2.0"


def _h5sparse(ctx: ProfileContext, key: str) -> None:
    """Pre-0.7 sparse matrices: ``h5sparse_format`` / ``h5sparse_shape`` instead of encodings."""
    attrs = ctx.attributes(key)
    fmt = attrs.get("h5sparse_format")
    if fmt not in ("csr", "csc"):
        return
    attrs["encoding-type"] = f"{fmt}_matrix"
    attrs["encoding-version"] = "0.1.0"
    if "shape" not in attrs and "h5sparse_shape" in attrs:
        attrs["shape"] = list(attrs["h5sparse_shape"])


__all__ = ["applies", "apply", "escape_key"]
