"""Files written before anndata recorded encodings (anndata ≤ 0.6, "0.5-era").

Such files have no ``encoding-type`` anywhere: ``obs``/``var`` are compound
datasets (first field the index, fixed-length ``S`` strings), ``obsm``/``varm``
compound datasets with one field per matrix, categorical codes in ``obs`` with
their categories in ``uns/<column>_categories``, and strings as ``S`` arrays.
anndata reads them only from HDF5; the manifest presents the modern encodings
(as ``read_h5ad`` interprets the old ones), materialising only the values that
live inside compound records. Matrices stay references.
"""

from __future__ import annotations

import h5py
import numpy as np

from h5lens.format import convention
from h5lens.scan.profiles import ProfileContext

ENCODING = "encoding-type"
VERSION = "encoding-version"
# raw.var / raw.varm / raw.X stay at the top level only beside a raw group (a file that
# read_h5ad refuses): they are still presented in modern encodings, never dropped.
DATAFRAMES = ("obs", "var", "raw/var", "raw.var")
MATRIX_MAPPINGS = ("obsm", "varm", "raw/varm", "raw.varm")


def is_legacy(ctx: ProfileContext) -> bool:
    return convention.legacy_anndata_root(ctx.attributes(""), ctx.nodes.__contains__)


def upgrade(ctx: ProfileContext) -> None:
    ctx.attributes("").update({ENCODING: "anndata", VERSION: "0.1.0"})
    _legacy_raw(ctx)
    categories = _uns_categories(ctx)
    for key in DATAFRAMES:
        if _is_compound(ctx, key):
            _dataframe(ctx, key, categories if key in ("obs", "var") else {})
    for key in MATRIX_MAPPINGS:
        if _is_compound(ctx, key):
            _matrix_mapping(ctx, key)
    for key in ("X", "raw/X", "raw.X"):
        _encode_matrix(ctx, key)
    for key in ("layers", "obsp", "varp", "obsm", "varm", "raw", "raw/varm"):
        if ctx.is_group(key) and ENCODING not in ctx.attributes(key):
            if key == "raw":
                continue  # raw is a plain group of elements, read by name
            ctx.attributes(key).update({ENCODING: "dict", VERSION: "0.1.0"})
            for name in ctx.children(key):
                _encode_matrix(ctx, f"{key}/{name}")
    if ctx.is_group("uns"):
        _uns(ctx, "uns")


LEGACY_RAW = ("X", "var", "varm")


def _legacy_raw(ctx: ProfileContext) -> None:
    """anndata before 0.6 stored raw as top-level ``raw.X`` / ``raw.var`` / ``raw.varm``,
    which ``read_h5ad`` gathers into ``adata.raw``. Present them as a modern ``raw`` group
    over the same bytes (its elements are then upgraded like any other). With a ``raw``
    group beside them, ``read_h5ad`` refuses the file ("both legacy and current raw
    formats"): they stay where they are, and anndata's zarr reader refuses it alike."""
    present = [name for name in LEGACY_RAW if f"raw.{name}" in ctx.nodes or ctx.is_refused(f"raw.{name}")]
    if not present or "raw" in ctx.nodes:
        return
    ctx.put_group("raw", {ENCODING: "raw", VERSION: "0.1.0"})
    for name in present:
        ctx.rename(f"raw.{name}", f"raw/{name}")


def _is_compound(ctx: ProfileContext, key: str) -> bool:
    return (ctx.is_array(key) or ctx.is_refused(key)) and _h5(ctx, key).dtype.names is not None


def _h5(ctx: ProfileContext, key: str) -> h5py.Dataset:
    return ctx.h5[ctx.h5_path(key)]


def _decode(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "S":
        return np.char.decode(values, "utf-8").astype(object)
    return values


def _uns_categories(ctx: ProfileContext) -> dict[str, tuple[str, np.ndarray]]:
    """``uns/<column>_categories`` arrays, by column name."""
    found: dict[str, tuple[str, np.ndarray]] = {}
    if not ctx.is_group("uns"):
        return found
    for name in ctx.children("uns"):
        key = f"uns/{name}"
        if name.endswith("_categories") and ctx.is_array(key):
            found[name[: -len("_categories")]] = (key, _decode(_h5(ctx, key)[()]))
    return found


def _dataframe(ctx: ProfileContext, key: str, categories: dict[str, tuple[str, np.ndarray]]) -> None:
    records = _h5(ctx, key)[()]
    names = list(records.dtype.names)
    index_name, columns = names[0], names[1:]
    ctx.remove(key)
    ctx.put_group(
        key,
        {ENCODING: "dataframe", VERSION: "0.2.0", "_index": index_name, "column-order": list(columns)},
    )
    _put_column(ctx, f"{key}/{index_name}", _decode(records[index_name]))
    for column in columns:
        values = _decode(records[column])
        if column in categories and values.dtype.kind in "iu":
            uns_key, labels = categories[column]
            ctx.put_group(f"{key}/{column}", {ENCODING: "categorical", VERSION: "0.2.0", "ordered": False})
            _put_column(ctx, f"{key}/{column}/codes", values)
            _put_column(ctx, f"{key}/{column}/categories", labels)
            ctx.remove(uns_key)
        else:
            _put_column(ctx, f"{key}/{column}", values)


def _put_column(ctx: ProfileContext, key: str, values: np.ndarray) -> None:
    text = values.dtype.kind in "OUT"
    ctx.put_array(key, values, {ENCODING: "string-array" if text else "array", VERSION: "0.2.0"})


def _matrix_mapping(ctx: ProfileContext, key: str) -> None:
    records = _h5(ctx, key)[()]
    ctx.remove(key)
    ctx.put_group(key, {ENCODING: "dict", VERSION: "0.1.0"})
    for name in records.dtype.names:
        ctx.put_array(f"{key}/{name}", np.ascontiguousarray(records[name]), {ENCODING: "array", VERSION: "0.2.0"})


def _encode_matrix(ctx: ProfileContext, key: str) -> None:
    if ctx.is_array(key) and ENCODING not in ctx.attributes(key):
        ctx.attributes(key).update({ENCODING: "array", VERSION: "0.2.0"})
    # sparse groups carry h5sparse_format and are upgraded by the h5ad profile


def _uns(ctx: ProfileContext, key: str) -> None:
    """Old ``uns`` values as read_h5ad reads them: S arrays are text, one-element ones scalars."""
    attrs = ctx.attributes(key)
    if ENCODING not in attrs and "h5sparse_format" not in attrs:
        attrs.update({ENCODING: "dict", VERSION: "0.1.0"})
    for name in ctx.children(key):
        child = f"{key}/{name}"
        if ctx.is_group(child):
            _uns(ctx, child)
        elif ENCODING not in ctx.attributes(child):
            _uns_value(ctx, child)


def _uns_value(ctx: ProfileContext, key: str) -> None:
    dataset = _h5(ctx, key)
    attributes = {k: v for k, v in ctx.attributes(key).items() if not k.startswith("_")}
    if dataset.dtype.kind == "S" or h5py.check_string_dtype(dataset.dtype) is not None:
        values = dataset[()]
        text = _decode(np.asarray(values)) if dataset.dtype.kind == "S" else np.asarray(dataset.asstr()[()])
        if dataset.dtype.kind == "S" and text.shape == (1,):
            text = text.reshape(())  # read_h5ad returns one-element S arrays as a scalar
        scalar = text.shape == ()
        attributes.update({ENCODING: "string" if scalar else "string-array", VERSION: "0.2.0"})
        ctx.put_array(key, np.asarray(text, dtype=object), attributes)
        return
    if dataset.dtype.names:  # a compound in uns: anndata decodes it to a record array
        ctx.attributes(key).update({ENCODING: "rec-array", VERSION: "0.2.0"})
        return
    scalar = dataset.shape == ()
    ctx.attributes(key).update({ENCODING: "numeric-scalar" if scalar else "array", VERSION: "0.2.0"})


__all__ = ["is_legacy", "upgrade"]
