"""A committed (named) HDF5 datatype that carries attributes, read as h5py's ``Datatype``.

The manifest holds it as a group marked ``_DATATYPE`` (the zarr data type arrays of the
type have) holding its attributes; navigation gives it as a node with ``dtype`` and
``attrs``, as ``h5py.File[name]`` gives an ``h5py.Datatype``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError
from h5lens.format import convention
from h5lens.read.navigate import DATASET_KINDS, Node


def is_datatype(doc: dict[str, Any]) -> bool:
    """Whether a node document is a committed datatype (a group marked ``_DATATYPE``)."""
    return doc.get("node_type") == "group" and convention.DATATYPE in doc.get("attributes", {})


class Datatype(Node):
    """A committed datatype: its ``dtype`` (as zarr reads arrays of it) and its ``attrs``."""

    @property
    def dtype(self) -> np.dtype:
        from zarr.core.dtype import get_data_type_from_json

        from h5lens.format.long_double import float_form_in, h5py_dtype

        attributes = self._doc["attributes"]
        stored = attributes[convention.DATATYPE]
        try:
            dtype = get_data_type_from_json(stored, zarr_format=3).to_native_dtype()
        except (TypeError, ValueError, KeyError) as e:
            raise ManifestFormatError(f"{self.h5_path}: _DATATYPE {stored!r} is not a zarr v3 data type ({e})") from None
        form = float_form_in(attributes, self.h5_path)  # long doubles: their stored bits in the data type
        return dtype if form is None else h5py_dtype(dtype, form)


DATASET_KINDS.append((is_datatype, Datatype))

__all__ = ["Datatype", "is_datatype"]
