"""Read and re-encode what cannot be referenced by byte range.

Values are read with h5py (which applies every HDF5 filter, resolves the
global heap and references) and encoded into zarr chunks by zarr itself, in an
in-memory store, so inline chunks are exactly what a zarr reader decodes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from h5lens.errors import UnsupportedFeatureError
from h5lens.format.dtypes_forms import struct_form
from h5lens.format.long_double import bits_dtype
from h5lens.manifest.documents import chunk_shape_of
from h5lens.scan.attrs import as_bytes
from h5lens.scan.dtypes import TypePlan, fields_of, packed, structured_json

ResolvePath = Callable[[h5py.Reference], str | None]


def read_values(
    ds: h5py.Dataset, plan: TypePlan, selection: Any, path: str, resolve: ResolvePath
) -> np.ndarray:
    """The values of ``ds[selection]`` in the form zarr stores for ``plan``."""
    if plan.kind == "string":
        # h5py reads variable-length strings as bytes, whatever their character set
        return text_or_bytes(np.asarray(ds[selection], dtype=object))
    if plan.kind == "region":
        refs = np.asarray(ds[selection], dtype=object)
        texts = [region_text(r, path, resolve) for r in refs.ravel()]
        return np.array(texts, dtype=np.dtypes.StringDType()).reshape(refs.shape)
    if plan.kind == "reference":
        refs = np.asarray(ds[selection], dtype=object)
        paths = [reference_path(r, path, resolve) for r in refs.ravel()]
        return np.array(paths, dtype=np.dtypes.StringDType()).reshape(refs.shape)
    if plan.kind == "vlen-bytes":
        raw = np.asarray(ds[selection], dtype=object)
        out = np.empty(raw.shape, dtype=object)
        for i, v in enumerate(raw.ravel()):
            out.flat[i] = bytes(np.asarray(v, dtype=np.uint8))
        return out
    if plan.kind == "compound" and not plan.raw:
        return compound_values(np.asarray(ds[selection]), plan, path, resolve)
    if plan.kind == "float-bits" and plan.values_as_bits:  # h5py's values, as this platform's bits
        values = np.asarray(ds[selection])
        return np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("=")).view(plan.known_dtype())
    if plan.kind == "float-bits" or plan.float_fields:  # records referenced with their long doubles' stored bits
        return stored_bits(ds, plan, selection, path)
    values = np.asarray(ds[selection])
    if plan.kind == "compound":  # packed, array members as nested records of their bytes
        return values.astype(packed(values.dtype)).view(plan.known_dtype())
    return values


def stored_bits(ds: h5py.Dataset, plan: TypePlan, selection: Any, path: str) -> np.ndarray:
    """The stored bytes of ``ds[selection]``'s elements, unconverted (floats h5py reads as
    np.longdouble, and records holding them: libhdf5 reads them into memory of the file's own
    type, so it converts nothing); ``selection`` is ``()`` or slices over the dataset's shape
    and its element's."""
    if plan.float_layout is None and not (plan.float_fields and plan.raw):
        raise UnsupportedFeatureError(f"{path}: a long double whose stored layout is not known")
    shape = tuple(ds.shape)
    axes = tuple(selection) + (slice(None),) * (len(shape) + len(plan.extra_shape) - len(tuple(selection)))
    if any(not isinstance(axis, slice) or axis.step not in (None, 1) for axis in axes[: len(shape)]):
        raise UnsupportedFeatureError(f"{path}: long doubles are copied by slices only (got {selection!r})")
    bounds = [axis.indices(n)[:2] for axis, n in zip(axes, shape, strict=False)]
    starts = tuple(start for start, _ in bounds)
    counts = tuple(max(0, stop - start) for start, stop in bounds)
    out = np.zeros(counts + plan.extra_shape, dtype=plan.known_dtype())
    if 0 in counts:
        return out[(slice(None),) * len(shape) + axes[len(shape) :]]
    space = ds.id.get_space()
    if shape:
        space.select_hyperslab(starts, counts)
        memory = h5py.h5s.create_simple(counts)
    else:
        memory = h5py.h5s.create(h5py.h5s.SCALAR)
    ds.id.read(memory, space, out, mtype=ds.id.get_type())
    return out[(slice(None),) * len(shape) + axes[len(shape) :]]


def text_or_bytes(raw: np.ndarray) -> np.ndarray:
    """UTF-8 text as a StringDType array; if any value is not UTF-8, every value as bytes
    (an object array): one decision for the whole dataset, never per value."""
    flat = [v if isinstance(v, bytes) else as_bytes(v) for v in raw.ravel().tolist()]
    try:
        text = [v.decode("utf-8") for v in flat]
    except UnicodeDecodeError:
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(raw.shape)
    return np.array(text, dtype=np.dtypes.StringDType()).reshape(raw.shape)


def is_bytes_values(values: np.ndarray) -> bool:
    """Whether :func:`text_or_bytes` (or a compound rewrite) kept these values as bytes."""
    return values.dtype.kind == "O"


def region_text(ref: Any, path: str, resolve: ResolvePath) -> str:
    text_of = getattr(resolve, "region_text", None)  # h5lens.scan.regions.Resolver
    if text_of is None:
        raise UnsupportedFeatureError(f"{path}: region references need the file they select from")
    return str(text_of(ref, path))


def reference_path(ref: Any, path: str, resolve: ResolvePath) -> str:
    if not ref:
        return ""  # a null reference
    target = resolve(ref)
    if target is None:
        raise UnsupportedFeatureError(f"{path}: an object reference points at nothing reachable")
    return target


def compound_values(values: np.ndarray, plan: TypePlan, path: str, resolve: ResolvePath) -> np.ndarray:
    """Rewrite a compound array: references → target paths, vlen strings → text, packed native layout."""
    columns: dict[str, np.ndarray] = {}
    fields: list[tuple[str, Any]] = []
    for name, field_dtype, _ in fields_of(values.dtype):
        column = values[name]
        if name in plan.reference_fields:
            text = [reference_path(r, f"{path} field {name!r}", resolve) for r in column.ravel()]
            columns[name] = _fixed_text(text, column.shape, f"{path} field {name!r}")
        elif name in plan.string_fields:
            columns[name] = _string_field(column, f"{path} field {name!r}")
        else:  # nested records repacked too; an array member keeps its shape
            columns[name] = column.astype(packed(field_dtype.subdtype[0] if field_dtype.subdtype else column.dtype))
            fields.append((name, packed(field_dtype)))
            continue
        fields.append((name, columns[name].dtype))
    out = np.empty(values.shape, dtype=np.dtype(fields))
    for name, column in columns.items():
        out[name] = column
    # array members as nested records of their bytes; long doubles as their bits (this platform's)
    return out.view(struct_form(bits_dtype(out.dtype))[0])


def _string_field(column: np.ndarray, where: str) -> np.ndarray:
    """A variable-length string field as fixed-length text (``U{N}``), or, if any value is
    not UTF-8, as fixed-length bytes (``S{N}``, which reads back as the bytes h5py gives)."""
    values = text_or_bytes(column)
    if not is_bytes_values(values):
        return _fixed_text([str(v) for v in values.ravel()], column.shape, where)
    raw = values.ravel().tolist()
    if any(b"\x00" in v for v in raw):
        raise UnsupportedFeatureError(f"{where}: byte strings holding NUL cannot be stored as fixed-length bytes")
    width = max((len(v) for v in raw), default=1) or 1
    return np.array(raw, dtype=f"S{width}").reshape(column.shape)


def _fixed_text(text: list[str], shape: tuple[int, ...], where: str) -> np.ndarray:
    if any(t.endswith("\x00") for t in text):
        raise UnsupportedFeatureError(f"{where}: strings ending in NUL cannot be stored as fixed-length text")
    width = max((len(t) for t in text), default=1) or 1
    return np.array(text, dtype=f"<U{width}").reshape(shape)


def compound_plan(plan: TypePlan, values: np.ndarray) -> TypePlan:
    """The plan of a rewritten compound, now that its field widths are known."""
    return TypePlan(
        structured_json(values.dtype),
        values.dtype,
        None,
        False,
        "compound",
        None,
        reference_fields=plan.reference_fields,
        string_fields=plan.string_fields,
        array_fields=plan.array_fields,
        float_fields=plan.float_fields,
    )


def encode_chunks(
    doc: dict[str, Any], regions: list[tuple[tuple[int, ...], np.ndarray]]
) -> dict[tuple[int, ...], bytes]:
    """Encode ``(chunk index, values)`` pairs with the array described by ``doc``.

    Returns the encoded bytes per chunk index; a chunk whose values all equal the
    fill value is left out (zarr reads it as the fill value).
    """
    direct = _text_chunks(doc, regions)
    return direct if direct is not None else zarr_chunks(doc, regions)


def zarr_chunks(
    doc: dict[str, Any], regions: list[tuple[tuple[int, ...], np.ndarray]]
) -> dict[tuple[int, ...], bytes]:
    """:func:`encode_chunks`, every chunk written by zarr into an array in memory."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    from h5lens.manifest.refs_json import dumps_document

    store_dict: dict[str, Any] = {}
    meta = {k: v for k, v in doc.items() if k != "attributes"}  # attributes play no part in encoding
    store_dict["zarr.json"] = default_buffer_prototype().buffer.from_bytes(dumps_document(meta).encode())
    store = MemoryStore(store_dict)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.open_array(store, mode="r+", zarr_format=3)
        chunk_shape = chunk_shape_of(doc)
        shape = tuple(doc["shape"])
        for index, values in regions:
            if not shape and values.dtype.kind == "O":
                # zarr 3.4 cannot write a 0-d variable_length_bytes array (it hands the codec
                # an ndarray); the chunk is the vlen-bytes encoding of the one value
                store_dict["c"] = _vlen_bytes_chunk(doc, values)
                continue
            if not shape:
                array[()] = values
                continue
            array[chunk_selection(index, chunk_shape, shape)] = values
    out: dict[tuple[int, ...], bytes] = {}
    for key, buffer in store_dict.items():
        if key == "zarr.json":
            continue
        parts = key.split("/")[1:]  # "c/0/1" -> ["0", "1"]
        out[tuple(int(p) for p in parts)] = buffer.to_bytes()
    return out


def _text_chunks(
    doc: dict[str, Any], regions: list[tuple[tuple[int, ...], np.ndarray]]
) -> dict[tuple[int, ...], bytes] | None:
    """What :func:`encode_chunks` gives for text (strings, references) stored with the
    ``vlen-utf8`` codec alone in whole chunks, encoded with that codec directly: zarr would
    open an array in memory for each (a millisecond; a MATLAB file's cells are thousands
    of small arrays of references). None for anything else, which zarr encodes."""
    if [c.get("name") for c in doc["codecs"]] != ["vlen-utf8"] or doc.get("fill_value") != "":
        return None
    chunk_shape = tuple(chunk_shape_of(doc))
    if not doc["shape"]:
        chunk_shape = ()
    import numcodecs

    codec = numcodecs.VLenUTF8()
    out: dict[tuple[int, ...], bytes] = {}
    for index, values in regions:
        if values.shape != chunk_shape or values.dtype.kind not in "OT":
            return None  # an edge chunk zarr pads, or values of another kind
        flat = values.reshape(-1).tolist()
        if not all(type(v) is str for v in flat):
            return None
        if all(v == "" for v in flat):
            continue  # all the fill value: absent, as zarr leaves it
        out[tuple(index)] = bytes(codec.encode(np.array(flat, dtype=object)))
    return out


def _vlen_bytes_chunk(doc: dict[str, Any], values: np.ndarray) -> Any:
    import numcodecs
    from zarr.core.buffer import default_buffer_prototype

    if [c["name"] for c in doc["codecs"]] != ["vlen-bytes"]:
        raise AssertionError(f"0-d byte strings are stored with vlen-bytes alone, not {doc['codecs']}")
    one = np.empty(1, dtype=object)
    one[0] = bytes(values[()])
    return default_buffer_prototype().buffer.from_bytes(numcodecs.VLenBytes().encode(one))


def chunk_selection(index: tuple[int, ...], chunk_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple:
    return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunk_shape, shape, strict=True))
