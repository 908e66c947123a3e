"""The documents of the nodes that hold no data: groups (their attributes and links) and
committed datatypes that carry attributes; and the attributes of every node, read with the
checks they need (global heap collections first, unreadable ones left out on request)."""

from __future__ import annotations

from typing import Any

import h5py

from h5lens.errors import UnsupportedFeatureError
from h5lens.format import convention
from h5lens.format.long_double import fields_json, holds_long_double
from h5lens.scan.attr_headers import AttributeHeaders
from h5lens.scan.attrs import read_attributes
from h5lens.scan.dtypes import plan_type
from h5lens.scan.global_heap import HeapCheck
from h5lens.scan.hdf5_types import stored_layout
from h5lens.scan.materialize import ResolvePath
from h5lens.scan.unreadable import LeftOut
from h5lens.scan.walk import DatasetRecord, GroupRecord


def node_attributes(
    obj: h5py.HLObject,
    path: str,
    resolve: ResolvePath,
    nan_strings: bool,
    heaps: HeapCheck | None,
    types: dict[str, str] | None,
    headers: AttributeHeaders | None = None,
    left_out: LeftOut | None = None,
) -> dict[str, Any]:
    """The node's attributes (and their types, into ``types``), the global heap collections
    of variable-length values checked before h5py parses them; the common types' values
    read from the object header where ``headers`` can. Those it cannot read are left out
    into ``left_out`` with ``skip_unreadable``."""
    check = None if heaps is None else (lambda: heaps.check_attributes(obj, path))
    refused: dict[str, UnsupportedFeatureError] | None = None if left_out is None else {}
    found = read_attributes(
        obj, path, resolve, nan_as_string=nan_strings, types=types, before_variable=check, headers=headers,
        refused=refused,
    )  # fmt: skip
    if left_out is not None and refused:
        left_out.attributes(path, refused)
    return found


def datatype_document(
    h5: h5py.File,
    record: DatasetRecord,
    resolve: ResolvePath,
    nan_strings: bool,
    heaps: HeapCheck | None,
    types: dict[str, str],
    headers: AttributeHeaders | None = None,
    left_out: LeftOut | None = None,
) -> dict[str, Any]:
    """A committed datatype that carries attributes: a group holding them, and the type as
    the zarr data type arrays of it would have (``_DATATYPE``)."""
    named = h5[record.h5_path]
    try:
        dtype = named.dtype
    except (TypeError, ValueError) as e:  # H5T_TIME: no numpy type
        said = f"{record.h5_path}: h5py cannot read this committed datatype either ({e})"
        raise UnsupportedFeatureError(said) from None
    plan = plan_type(dtype, record.h5_path)
    if holds_long_double(dtype):  # their stored bits, as arrays of the type hold them
        plan = plan.with_layout(stored_layout(named.id, dtype))
    if plan.data_type is None:  # a compound rewritten from its values: no values here to size it
        raise UnsupportedFeatureError(
            f"{record.h5_path}: a committed datatype with attributes whose type zarr stores only with values "
            f"({named.dtype})"
        )
    attributes = node_attributes(named, record.h5_path, resolve, nan_strings, heaps, types, headers, left_out)
    attributes[convention.DATATYPE] = plan.data_type
    if plan.float_layout is not None:
        attributes[convention.FLOAT_LAYOUT] = plan.float_layout.to_json()
    elif plan.float_fields:
        attributes[convention.FLOAT_LAYOUT] = fields_json(plan.float_fields)
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def group_node(group: GroupRecord, attributes: dict[str, Any]) -> dict[str, Any]:
    if group.links:
        attributes[convention.LINKS] = [{"name": e.name, "source": e.source, "path": e.path} for e in group.links]
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def group_document(
    h5: h5py.File,
    group: GroupRecord,
    resolve: ResolvePath,
    nan_strings: bool,
    heaps: HeapCheck | None = None,
    types: dict[str, str] | None = None,
    headers: AttributeHeaders | None = None,
    left_out: LeftOut | None = None,
) -> dict[str, Any]:
    h5_group = h5[group.h5_path]
    attributes = node_attributes(h5_group, group.h5_path, resolve, nan_strings, heaps, types, headers, left_out)
    return group_node(group, attributes)


__all__ = ["datatype_document", "group_document", "group_node", "node_attributes"]
