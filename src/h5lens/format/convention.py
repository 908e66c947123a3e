"""The unified zarr v3 convention's reserved attribute names, and h5lens's own additions.

One place names them; the scanner writes them, the readers and the validator read them.
See docs/conventions.md and docs/manifest-format.md.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

# Profiles: how a manifest writes what zarr has no form for (docs/conventions.md).
PROFILES = ("released", "proposal")  # as the convention's readers ship it; as first proposed
DEFAULT_PROFILE = "released"

LINKS = "_LINKS"  # groups: [{name, source, path}], the parent-centric links
DTYPE = "_DTYPE"  # non-compound arrays: what HDF5 held ("float64", "str", "bytes", "object_reference")
SCALAR = "_SCALAR"  # proposal profile: a shape-(1,) array that is an HDF5 scalar
REFERENCE = "_REFERENCE"  # attribute values: {"_REFERENCE": {source, path}}
REFERENCE_FIELDS = "_REFERENCE_FIELDS"  # structured arrays: fields holding object-reference paths
EMPTY = "_EMPTY"  # an HDF5 null dataspace, stored with shape [0]
ENUM = "_ENUM"  # enum arrays: {name: value}
EXTERNAL_ARRAY_LINK = "_EXTERNAL_ARRAY_LINK"  # reserved by the proposal (not written)
REGION_REFERENCE = "_REGION_REFERENCE"  # reserved by the proposal (not written)
COMPOUND_DTYPE = "_COMPOUND_DTYPE"  # LINDI's; replaced by zarr v3 structured
# h5lens: attribute values that are byte strings but not UTF-8 text, as base64
# ({"_BYTES": "..."} or, for an array, {"_BYTES": [...]} nested like the array).
BYTES = "_BYTES"
# h5lens: forms of HDF5 types zarr has no data type for (h5lens.format.dtypes_forms, docs/manifest-format.md)
ARRAY_FIELDS = "_ARRAY_FIELDS"  # structured arrays: [[field path], [shape]] of members that are arrays
RAGGED = "_RAGGED"  # an awkward-array group that is one HDF5 dataset of sequences: {"dtype", "shape"}
DATATYPE = "_DATATYPE"  # a group that is a committed (named) HDF5 datatype: its zarr data_type
FLOAT_LAYOUT = "_FLOAT_LAYOUT"  # raw_bytes arrays of floats h5py reads as np.longdouble: their layout

# Non-finite floats in attributes (JSON has no token for them) as zarr v3 writes them in
# fill values: the strings below; the proposal profile reads them back as floats.
NON_FINITE_TEXT = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def non_finite_text(value: float) -> str:
    """The string that stands for a non-finite float: ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


RESERVED_ATTRIBUTES = frozenset(
    {
        LINKS, DTYPE, SCALAR, REFERENCE_FIELDS, EMPTY, ENUM, EXTERNAL_ARRAY_LINK, REGION_REFERENCE, COMPOUND_DTYPE,
        ARRAY_FIELDS, RAGGED, DATATYPE, FLOAT_LAYOUT,
    }
)


def is_bytes_value(value: Any) -> bool:
    """Whether an attribute value is the ``{"_BYTES": ...}`` form."""
    return isinstance(value, dict) and len(value) == 1 and BYTES in value


def decode_bytes_value(value: dict[str, Any]) -> bytes | list[Any]:
    """``{"_BYTES": ...}`` → the bytes (nested lists of bytes for an array).

    Raises ValueError when the base64 text is malformed."""

    def decode(item: Any) -> Any:
        if isinstance(item, list):
            return [decode(v) for v in item]
        if not isinstance(item, str):
            raise ValueError(f"{BYTES} holds {type(item).__name__}, not base64 text")
        return base64.b64decode(item, validate=True)

    return decode(value[BYTES])


def legacy_anndata_root(root_attributes: Mapping[str, Any], has_member: Callable[[str], bool]) -> bool:
    """An h5ad written before anndata recorded encodings (anndata < 0.7): no
    ``encoding-type`` on the root, ``obs`` and ``var`` beside each other. The one rule the
    scanner's AnnData profile and the AnnData reader both go by."""
    return "encoding-type" not in root_attributes and has_member("obs") and has_member("var")


# anndata's dataframes name their index column in the ``_index`` attribute ("_index" when
# anndata writes it, often "index" or "cell_id" in files from elsewhere); the member path
# ``<frame>/_index`` means that column whatever it is called.
INDEX_ALIAS = "_index"


def dataframe_index(attributes: Mapping[str, Any]) -> str | None:
    """The name of a dataframe's index column (its ``_index`` attribute), None for a node
    that is not an anndata dataframe."""
    if attributes.get("encoding-type") != "dataframe":
        return None
    found = attributes.get("_index")
    return found if isinstance(found, str) else None

