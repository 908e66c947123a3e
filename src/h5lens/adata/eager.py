"""An eager AnnData read by h5lens's own walk of the manifest: no event-loop trip per node.

anndata's readers find an element's members through zarr's group API (``elem[k]``,
``k in elem``, ``dict(elem)``), and zarr answers each on its event loop thread, reading and
parsing the member's ``zarr.json`` through the store: a hundred round trips for a small
h5ad, most of the time its read takes, though the manifest holds every document already.
So h5lens walks the tree itself, from the documents, on the calling thread
(:class:`EagerReader`):

* the containers of anndata's on-disk format (``anndata`` and ``raw``, ``dict``,
  ``dataframe`` 0.2.0, ``categorical``, nullable integers, booleans and strings) are
  built from their members as anndata's own readers build them
  (``anndata._io.specs.methods``: ``read_anndata``, ``read_mapping``, ``read_dataframe``,
  ``read_categorical``, ``_read_nullable``, ``_read_nullable_string``), each member read
  by path;
* arrays of numbers and text and sparse matrices are read whole through h5lens's read
  plan (:mod:`h5lens.read.whole`), scalars from their inline chunk (while
  ``h5lens.fast_reads(False)`` holds, zarr reads these: h5lens decodes nothing);
* everything else (record arrays, awkward arrays, old encodings, arrays h5lens does not
  decode) is opened as the zarr node zarr would open, built from its document on the
  calling thread, and read by anndata's public ``read_dispatched`` with this module's
  callback, so that the members anndata finds there are read the same way again.

Values equal ``anndata.read_h5ad``'s of the file (tests/test_anndata.py holds it for every
encoding). Nothing of anndata's or zarr's is replaced or registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from h5lens.adata.adapter import ANNDATA_ELEMENTS, OwnEncodings, own_encoding, read_legacy_raw, scalar_value
from h5lens.adata.blocks import sparse_matrix
from h5lens.adata.columns import remapped
from h5lens.engine.plan import decodes
from h5lens.format import convention
from h5lens.format.keys import unescape_key
from h5lens.read.consolidated import node_at

if TYPE_CHECKING:
    from h5lens.store import ManifestStore


class _NotMine:
    """What an element reader returns when it leaves the element to anndata."""


NOT_MINE = _NotMine()

Attributes = dict[str, Any]


class EagerReader:
    """Reads the elements of one store's manifest, by path, as ``read_h5ad`` reads them
    from the file (see the module's docstring)."""

    def __init__(self, store: ManifestStore) -> None:
        self.store = store
        self.manifest = store.manifest
        self.nodes = store.manifest.nodes
        self.own = OwnEncodings(store.manifest, self.read_node)
        # matrices of a combined AnnData whose files' columns h5lens maps (h5lens.adata.columns)
        self.remapped = remapped(store)

    # -- entry points ---------------------------------------------------------------
    def read_root(self) -> Any:
        """The AnnData at the root (with anndata < 0.7's ``raw.*`` gathered, as read_h5ad does)."""
        adata = self.read("")
        return read_legacy_raw(self.manifest.children(""), adata, lambda name: self.read(name))

    def read(self, path: str) -> Any:
        """The element at ``path``, read by h5lens where it owns the encoding, else by anndata."""
        if path in self.remapped:
            from h5lens.adata.columns import ColumnMaps
            from h5lens.adata.lazy_sparse import read_remapped

            maps = ColumnMaps.of(self.store)
            assert maps is not None  # remapped() found its group
            return read_remapped(self.store, path, maps)
        doc = self.nodes[path]
        found = self._own(path, doc["node_type"], doc.get("attributes", {}))
        if found is not NOT_MINE:
            return found
        return self.own.read(node_at(self.store, path))  # an accessor, or anndata's to read

    def read_node(self, elem: zarr.Array | zarr.Group) -> Any:
        """``elem`` read by anndata's dispatch, its members through :meth:`callback`."""
        from anndata.experimental import read_dispatched

        return read_dispatched(elem, self.callback)

    def callback(self, read_func: Callable[[Any], Any], elem_name: str, elem: Any, iospec: Any) -> Any:
        """anndata's ``read_dispatched`` callback: a member anndata found is read by h5lens
        where it owns the encoding; otherwise as h5lens adapts anndata's readers."""
        if elem.store is self.store:  # a member of this manifest: h5lens reads it by path
            found = self._own(elem.path, "group" if isinstance(elem, zarr.Group) else "array", dict(elem.attrs))
            if found is not NOT_MINE:
                return found
        if isinstance(elem, zarr.Group) and iospec.encoding_type in ("anndata", "raw", "dict") and self.own.holds_one(elem):
            return self.own.read_container(elem, iospec.encoding_type)
        if isinstance(elem, zarr.Array) and elem.attrs.get(convention.SCALAR) is True and elem.shape == (1,):
            if iospec.encoding_type in ("string", "numeric-scalar"):
                return scalar_value(elem)
        if iospec.encoding_type == "string-array" and isinstance(elem, zarr.Array):
            # h5py hands anndata object arrays of str (pandas infers its string dtype from them)
            strings: Any = elem[()]  # an array of str (numpy's StringDType or objects)
            return strings.astype(object)
        return read_func(elem)

    # -- the encodings h5lens reads --------------------------------------------------
    def _own(self, path: str, node_type: str, attributes: Attributes) -> Any:
        reader = _READERS.get((node_type, attributes.get("encoding-type"), attributes.get("encoding-version")))
        return NOT_MINE if reader is None else reader(self, path, attributes)

    def _member(self, path: str, name: str) -> str | None:
        """The path of member ``name`` of group ``path``, if the manifest has it."""
        found = f"{path}/{name}" if path else name
        return found if found in self.nodes else None

    def _members(self, path: str, names: list[str]) -> list[str] | None:
        paths = [self._member(path, name) for name in names]
        return None if any(p is None for p in paths) else [p for p in paths if p is not None]

    def _anndata(self, path: str, attributes: Attributes) -> Any:
        # anndata's read_anndata: the members it knows, in its order; AnnData(**them)
        import anndata

        found = {name: self._member(path, name) for name in ANNDATA_ELEMENTS}
        return anndata.AnnData(**{name: self.read(p) for name, p in found.items() if p is not None})

    def _dict(self, path: str, attributes: Attributes) -> Any:
        # anndata's read_mapping: every member, in the order zarr lists them (by name)
        return {name: self.read(f"{path}/{name}" if path else name) for name in self.manifest.children(path)}

    def _escaped_dict(self, path: str, attributes: Attributes) -> Any:
        # dict 0.2.0, which anndata does not read yet: keys unescaped strictly
        if own_encoding(attributes) is None:
            return NOT_MINE  # anndata reads it itself
        return {unescape_key(name): self.read(f"{path}/{name}" if path else name) for name in self.manifest.children(path)}

    def _dataframe(self, path: str, attributes: Attributes) -> Any:
        # anndata's read_dataframe (0.2.0)
        import pandas as pd

        columns, index = attributes.get("column-order"), attributes.get("_index")
        if not isinstance(columns, list) or not isinstance(index, str):
            return NOT_MINE  # anndata says what is wrong
        paths = self._members(path, [*columns, index])
        if paths is None:
            return NOT_MINE
        df = pd.DataFrame(
            {name: self.read(p) for name, p in zip(columns, paths, strict=False)},
            index=self.read(paths[-1]),
            columns=columns if columns else None,
        )
        if index != "_index":
            df.index.name = index
        return df

    def _categorical(self, path: str, attributes: Attributes) -> Any:
        # anndata's read_categorical
        import pandas as pd

        paths = self._members(path, ["codes", "categories"])
        if paths is None or "ordered" not in attributes:
            return NOT_MINE
        codes, categories = (self.read(p) for p in paths)
        return pd.Categorical.from_codes(codes=codes, categories=categories, ordered=bool(attributes["ordered"]))

    def _nullable(self, path: str, attributes: Attributes) -> Any:
        # anndata's _read_nullable
        import pandas as pd

        paths = self._members(path, ["values", "mask"])
        if paths is None:
            return NOT_MINE
        values, mask = (self.read(p) for p in paths)
        kind = pd.arrays.IntegerArray if attributes["encoding-type"] == "nullable-integer" else pd.arrays.BooleanArray
        return kind(values, mask=mask)

    def _nullable_string(self, path: str, attributes: Attributes) -> Any:
        # anndata's _read_nullable_string (what anndata writes a pandas string column as)
        import pandas as pd

        paths = self._members(path, ["values", "mask"])
        if paths is None:
            return NOT_MINE
        values, mask = (self.read(p) for p in paths)
        dtype = pd.StringDtype(na_value=np.nan if attributes.get("na-value", "NA") == "NaN" else pd.NA)
        found = pd.array(values.astype(np.dtypes.StringDType(na_object=dtype.na_value)), dtype=dtype)
        found[mask] = pd.NA
        return found

    def _array(self, path: str, attributes: Attributes) -> Any:
        from h5lens.read.whole import read_whole

        # text as h5py hands it to anndata: object arrays of str
        found = read_whole(self.store, path, text=attributes["encoding-type"] == "string-array")
        if found is None:
            return NOT_MINE
        # a region read is a view of its chunks laid side by side (edges cropped): h5py gives
        # a C-contiguous array of its own, which later computations expect
        return found if found.flags.c_contiguous else np.ascontiguousarray(found)

    def _sparse(self, path: str, attributes: Attributes) -> Any:
        # anndata's read_sparse: (data, indices, indptr) and the shape attribute
        from h5lens.read.whole import read_whole

        paths = self._members(path, ["data", "indices", "indptr"])
        shape = attributes.get("shape")
        if paths is None or not isinstance(shape, list):
            return NOT_MINE
        parts = [read_whole(self.store, p) for p in paths]
        if any(part is None for part in parts):
            return NOT_MINE
        return sparse_matrix(attributes["encoding-type"], tuple(parts), tuple(shape))

    def _string(self, path: str, attributes: Attributes) -> Any:
        # anndata's read_zarr_string (str of the value) for the text h5lens decodes
        found = inline_text_scalar(self.store, path) if decodes() else None
        return NOT_MINE if found is None else found

    def _number(self, path: str, attributes: Attributes) -> Any:
        # anndata's read_scalar (``elem[()].item()``) for the numbers h5lens decodes
        found = inline_number_scalar(self.store, path) if decodes() else None
        return NOT_MINE if found is None else found.item()

    def _null(self, path: str, attributes: Attributes) -> Any:
        return None  # anndata's read_null


def inline_text_scalar(store: ManifestStore, path: str) -> str | None:
    """The value of a text scalar (0-d, or the proposal's ``_SCALAR`` shape (1,)) whose one
    chunk is inline in the manifest and decoded by ``vlen-utf8`` alone; None for any other."""
    from numcodecs import VLenUTF8

    from h5lens.manifest.documents import ArrayDocument

    view = ArrayDocument.of(store.manifest.nodes[path])
    if view is None or view.data_type != "string" or [c.get("name") for c in view.codecs] != ["vlen-utf8"]:
        return None
    entry = _inline_chunk(store, path, len(view.shape)) if _scalar_shape(view) else None
    if entry is None:
        return None
    decoded = VLenUTF8().decode(entry)
    return str(decoded[0]) if len(decoded) == 1 else None


def inline_number_scalar(store: ManifestStore, path: str) -> np.generic | None:
    """The value of a number scalar (0-d, or the proposal's ``_SCALAR`` shape (1,)) whose one
    chunk is inline in the manifest and stored by the ``bytes`` codec alone (anndata writes
    scalars uncompressed); None for any other."""
    from h5lens.manifest.documents import ArrayDocument

    view = ArrayDocument.of(store.manifest.nodes[path])
    if view is None or not _scalar_shape(view) or not isinstance(view.data_type, str):
        return None
    if [c.get("name") for c in view.codecs] != ["bytes"]:
        return None
    try:
        dtype = np.dtype(view.data_type)
    except TypeError:
        return None
    if dtype.kind not in "biufc":
        return None
    entry = _inline_chunk(store, path, len(view.shape))
    if entry is None or len(entry) != dtype.itemsize:
        return None
    endian = (view.codecs[0].get("configuration") or {}).get("endian")
    stored = dtype.newbyteorder(">" if endian == "big" else "<") if dtype.itemsize > 1 else dtype
    return np.frombuffer(entry, dtype=stored)[0].astype(dtype)


def _scalar_shape(view: Any) -> bool:
    """A 0-d array, or the convention's proposal-form scalar (``_SCALAR``, shape (1,))."""
    return bool(view.shape == () or (view.shape == (1,) and view.attributes.get(convention.SCALAR) is True))


def _inline_chunk(store: ManifestStore, path: str, ndim: int) -> bytes | None:
    """The one chunk of a scalar, if it is inline in the manifest (else None: absent, the
    fill value, or in the source, which zarr reads)."""
    table = store.manifest.chunks.get(path)
    entry = None if table is None else table.lookup((0,) * ndim)
    return entry if isinstance(entry, bytes) else None


_READERS: dict[tuple[str, str | None, str | None], Callable[[EagerReader, str, Attributes], Any]] = {
    ("group", "anndata", "0.1.0"): EagerReader._anndata,
    ("group", "raw", "0.1.0"): EagerReader._anndata,
    ("group", "dict", "0.1.0"): EagerReader._dict,
    ("group", "dict", "0.2.0"): EagerReader._escaped_dict,
    ("group", "dataframe", "0.2.0"): EagerReader._dataframe,
    ("group", "categorical", "0.2.0"): EagerReader._categorical,
    ("group", "nullable-integer", "0.1.0"): EagerReader._nullable,
    ("group", "nullable-boolean", "0.1.0"): EagerReader._nullable,
    ("group", "nullable-string-array", "0.1.0"): EagerReader._nullable_string,
    ("group", "csr_matrix", "0.1.0"): EagerReader._sparse,
    ("group", "csc_matrix", "0.1.0"): EagerReader._sparse,
    ("array", "array", "0.2.0"): EagerReader._array,
    ("array", "string-array", "0.2.0"): EagerReader._array,
    ("array", "string", "0.2.0"): EagerReader._string,
    ("array", "numeric-scalar", "0.2.0"): EagerReader._number,
    ("array", "null", "0.1.0"): EagerReader._null,
}


__all__ = ["NOT_MINE", "EagerReader", "inline_number_scalar", "inline_text_scalar", "sparse_matrix"]
