"""The LINDI form of a manifest: the reference JSON the DANDI archive's NWB viewer reads.

LINDI (pip ``lindi``, ``LindiH5pyFile.from_lindi_file``) reads kerchunk-style references
with **zarr v2** keys (``.zgroup``, ``.zarray``, ``.zattrs``, chunk keys ``0.1``) and
marks what zarr has no form for with its own attributes (its docs/special_zarr_annotations.md):
``_SCALAR`` (a shape-(1,) array that is an HDF5 scalar), ``_SOFT_LINK`` (an otherwise
empty group standing for a link), ``_REFERENCE`` (an object reference, with the object
ids hdmf checks), ``_COMPOUND_DTYPE`` (records stored as JSON), NaN and infinities as
the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.

:func:`to_lindi` writes that form from any manifest, reading it through h5lens's own
navigation (values and attributes as h5py gives them). Numeric arrays keep the manifest's
chunk references, the same bytes of the same files, wherever their zarr v3 codecs have a
zarr v2 (numcodecs) form LINDI decodes; everything LINDI stores inline (scalars, strings,
references, records) is written inline in LINDI's form. What LINDI has no form for is
refused by name (:class:`~h5lens.errors.UnsupportedFeatureError` naming the HDF5 path),
never written differently: external links, region references, null dataspaces,
variable-length sequences, records nested or holding arrays, complex attributes, and
referenced arrays behind a codec numcodecs cannot undo as HDF5 wrote it (LZF, bitshuffle,
Blosc2, ZFP, SZIP, HDF5-LZ4, shuffle after a filter that changes length, bit fields).
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from h5lens.errors import InvalidOptionError, UnsupportedFeatureError
from h5lens.format import convention
from h5lens.manifest.files import write_bytes_atomic
from h5lens.manifest.locations import resolve
from h5lens.manifest.model import Manifest
from h5lens.manifest.tables import INLINE, MISSING
from h5lens.read import navigate
from h5lens.read.references import Region

LINDI_SUFFIX = ".lindi.json"
ZGROUP = {"zarr_format": 2}
# HDF5 filters whose zarr v3 codec (as h5lens writes it) numcodecs decodes as the same
# bytes: the v3 name -> the numcodecs id and the configuration keys that id takes.
V2_CODECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "numcodecs.zlib": ("zlib", ("level",)),
    "numcodecs.shuffle": ("shuffle", ("elementsize",)),
    "numcodecs.fletcher32": ("fletcher32", ()),
    "numcodecs.bz2": ("bz2", ("level",)),
    "zstd": ("zstd", ("level",)),
    "blosc": ("blosc", ("cname", "clevel", "shuffle", "blocksize")),
}
NUMERIC_TYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
     "float64", "complex64", "complex128"}
)  # fmt: skip
# attributes that make an array's stored values differ from what h5py reads
_STORED_OTHERWISE = (
    convention.FLOAT_LAYOUT, convention.ARRAY_FIELDS, convention.EMPTY, convention.REFERENCE_FIELDS, convention.SCALAR,
)  # fmt: skip
_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_NON_FINITE = tuple(convention.NON_FINITE_TEXT)


def to_lindi(manifest: Manifest, *, url: str | None = None) -> dict[str, Any]:
    """The LINDI reference file system of ``manifest`` (a dict to write as JSON).

    ``url`` replaces the URL of the manifest's first source (the file indexed): LINDI
    reads ``http(s)://`` URLs and local paths, so a source in object storage needs the
    https URL it is served at. Raises :class:`UnsupportedFeatureError` naming the first
    HDF5 object LINDI has no form for."""
    urls = _source_urls(manifest, url)  # refused before any read
    root = navigate.open(manifest)
    writer = _Writer(manifest, urls, root.file)
    writer.root_object_id = root.attrs.get("object_id")  # every reference's source_object_id
    writer.group(root, "")
    from h5lens._version import __version__

    return {
        "version": 1,
        "refs": dict(sorted(writer.refs.items())),
        "generationMetadata": {
            "generatedBy": "h5lens",
            "generatedByVersion": __version__,
            "sourceUrls": writer.urls,
        },
    }


def write_lindi(
    manifest: Manifest, path: str, *, url: str | None = None, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write :func:`to_lindi` of ``manifest`` to ``path`` (``NAME.lindi.json``, local or a
    URL) atomically, as strict JSON (no bare NaN); returns what was written."""
    check_lindi_name(path)
    written = to_lindi(manifest, url=url)
    payload = json.dumps(written, allow_nan=False, separators=(",", ":")).encode()
    write_bytes_atomic(path, payload, storage_options=storage_options)
    return written


def check_lindi_name(path: str) -> None:
    """LINDI opens a reference file named ``*.lindi.json`` (its writer insists on it)."""
    if not str(path).endswith(LINDI_SUFFIX):
        raise InvalidOptionError(f"{path}: a LINDI file is named NAME{LINDI_SUFFIX}")


def _source_urls(manifest: Manifest, url: str | None) -> list[str]:
    urls = []
    for i, source in enumerate(manifest.sources):
        found = url if (i == 0 and url is not None) else resolve(source.url, manifest.location)
        scheme = found.split("://", 1)[0].lower() if "://" in found else ""
        if scheme in ("http", "https"):
            urls.append(found)
        elif scheme in ("", "file"):
            urls.append(os.path.abspath(found.split("://", 1)[-1]))  # LINDI opens a relative path from the cwd
        else:
            raise InvalidOptionError(
                f"{found}: LINDI reads http(s) URLs and local paths only; give the https:// URL the file is "
                "served at (index it with --url, or url= here)"
            )
    return urls


class _Writer:
    def __init__(self, manifest: Manifest, urls: list[str], file: str) -> None:
        self.manifest = manifest
        self.urls = urls
        self.file = file  # the root's: a reference elsewhere goes into another file
        self.refs: dict[str, Any] = {}
        self.root_object_id: Any = None

    # -- groups and links --------------------------------------------------------------------

    def group(self, group: navigate.Group, key: str) -> None:
        attributes = self.attributes(group)
        self.refs[_join(key, ".zgroup")] = ZGROUP
        if attributes:
            self.refs[_join(key, ".zattrs")] = attributes
        for name in group:
            child = _join(key, name)
            link = group.link(name)
            if link is not None:
                self.link(group, name, link, child)
                continue
            node = group[name]
            if isinstance(node, navigate.Group):
                self.group(node, child)
            elif type(node) is navigate.Dataset:
                self.dataset(node, child)
            else:  # h5lens's awkward-array form of variable-length sequences
                raise _refused(node.h5_path, "a dataset of variable-length sequences, for which LINDI has no form")

    def link(self, group: navigate.Group, name: str, link: navigate.Link, key: str) -> None:
        where = f"{group.h5_path.rstrip('/')}/{name}"
        if link.source != ".":
            raise _refused(where, f"an external link (to {link.source}:{link.path}); LINDI has no form for one")
        try:
            target = group[name]
        except KeyError as error:
            raise _refused(where, f"a soft link to {link.path!r}, which is not in the file") from error
        # LINDI's form: an otherwise empty group whose _SOFT_LINK names the target
        self.refs[_join(key, ".zgroup")] = ZGROUP
        self.refs[_join(key, ".zattrs")] = {"_SOFT_LINK": {"path": target.h5_path}}

    # -- datasets -----------------------------------------------------------------------------

    def dataset(self, node: navigate.Dataset, key: str) -> None:
        if node.is_empty:
            raise _refused(node.h5_path, "a null dataspace (h5py.Empty), for which LINDI has no form")
        attributes = self.attributes(node)
        escaped = node.path.strip("/")
        referenced = self.referenced_form(node, self.manifest.nodes[escaped])
        if referenced is None:
            self.inline(node, key, attributes)
        else:
            self.refs[_join(key, ".zarray")] = referenced
            for chunk_key, value in self.chunks(escaped, key):
                self.refs[chunk_key] = value
        if attributes:
            self.refs[_join(key, ".zattrs")] = attributes

    def referenced_form(self, node: navigate.Dataset, doc: dict[str, Any]) -> dict[str, Any] | None:
        """The .zarray of an array kept as the manifest's chunks, or None to write it inline."""
        data_type = doc.get("data_type")
        stored = doc.get("attributes", {})
        if (
            not isinstance(data_type, str)
            or data_type not in NUMERIC_TYPES
            or node.is_scalar
            or node.size == 0
            or node.is_reference
            or any(name in stored for name in _STORED_OTHERWISE)
        ):
            return None
        codecs = doc.get("codecs", [])
        filters, endian, refused = [], "little", None
        for codec in codecs:
            name, configuration = codec.get("name"), codec.get("configuration") or {}
            if name == "bytes":
                endian = configuration.get("endian", "little")
            elif name in V2_CODECS:
                codec_id, keys = V2_CODECS[name]
                filters.append(_v2_codec(codec_id, keys, configuration))
            else:
                refused = name
                break
        table = self.manifest.chunks[node.path.strip("/")]
        if refused is not None:
            if (table.source >= 0).any():  # bytes in a file, behind a codec numcodecs lacks
                raise _refused(
                    node.h5_path,
                    f"its chunks are stored with the codec {refused!r}, which LINDI (numcodecs) cannot decode; "
                    "LINDI reads deflate, shuffle, fletcher32, bzip2, zstd and blosc",
                )
            return None  # every chunk inline: written as values
        dtype = np.dtype(data_type).newbyteorder("<" if endian == "little" else ">")
        chunk_shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
        full = int(np.prod(chunk_shape)) * dtype.itemsize
        if not filters and dtype.kind not in "iuf" and (table.length[table.source >= 0] != full).any():
            # LINDI pads a short last chunk (a contiguous dataset cut in slabs) for numbers only
            raise _refused(node.h5_path, "a chunk shorter than its shape, which LINDI reads for numbers only")
        return {
            "zarr_format": 2,
            "shape": list(doc["shape"]),
            "chunks": list(chunk_shape),
            "dtype": dtype.str,
            "compressor": None,
            "fill_value": _fill_value(doc.get("fill_value"), dtype),
            "order": "C",
            "filters": filters or None,
            "dimension_separator": ".",
        }

    def chunks(self, escaped: str, key: str) -> Iterator[tuple[str, Any]]:
        table = self.manifest.chunks[escaped]
        source, offset, length = (grid.reshape(-1) for grid in (table.source, table.offset, table.length))
        grid = table.grid_shape
        flats = np.flatnonzero(source != MISSING)
        # every chunk's grid position at once (a 0-d array's one chunk has none)
        positions = np.stack(np.unravel_index(flats, grid), axis=1).tolist() if flats.size and grid else [[]] * flats.size
        for flat, position in zip(flats.tolist(), positions, strict=True):
            chunk_key = _join(key, ".".join(map(str, position)))
            if source[flat] == INLINE:
                yield chunk_key, "base64:" + base64.b64encode(table.inline[flat]).decode("ascii")
            else:
                yield chunk_key, [self.urls[int(source[flat])], int(offset[flat]), int(length[flat])]

    def inline(self, node: navigate.Dataset, key: str, attributes: dict[str, Any]) -> None:
        """Values LINDI keeps in the reference file: raw for numbers and fixed-length bytes,
        numcodecs' JSON codec for strings, references and records (as LINDI writes them)."""
        values = node[()]
        if node.is_reference:
            values = np.asarray(values, dtype=object)
            if node.is_region_reference:
                raise _refused(node.h5_path, "a dataset of region references, for which LINDI has no form")
        values = np.asarray(values)
        if node.is_scalar:
            values = values.reshape(1)
            attributes["_SCALAR"] = True
        dtype = values.dtype
        if dtype.names is not None:
            if node.is_scalar:  # LINDI's writer refuses them and its reader reads records by field, 1-d
                raise _refused(node.h5_path, "a scalar of records (compound), for which LINDI has no form")
            attributes["_COMPOUND_DTYPE"] = [[n, self.field_type(node, dtype, n)] for n in dtype.names]
            self.json_array(key, self.records(node, values), values.shape)
        elif dtype.kind in "OUT":  # T: numpy's StringDType, as zarr 3 reads text
            self.json_array(key, self.objects(node, values), values.shape)
        elif dtype.kind in "fc" and dtype.itemsize > (8 if dtype.kind == "f" else 16):
            raise _refused(node.h5_path, f"long doubles ({dtype}), for which LINDI has no form")
        elif dtype.kind in "biufcS":
            if dtype.kind == "c" and node.is_scalar:
                raise _refused(node.h5_path, "a complex scalar, for which LINDI has no form")
            self.raw_array(key, np.ascontiguousarray(values), node)
        else:
            raise _refused(node.h5_path, f"data of type {dtype}, for which LINDI has no form")

    def raw_array(self, key: str, values: np.ndarray, node: navigate.Dataset) -> None:
        self.refs[_join(key, ".zarray")] = _zarray(values.shape, values.dtype.str, _fill_value(0, values.dtype), None)
        if values.size:
            self.refs[_join(key, _chunk_name(values.ndim))] = "base64:" + base64.b64encode(values.tobytes()).decode()

    def json_array(self, key: str, items: np.ndarray, shape: tuple[int, ...]) -> None:
        import numcodecs

        codec = numcodecs.JSON()
        self.refs[_join(key, ".zarray")] = _zarray(shape, "|O", None, [codec.get_config()])
        if items.size:
            payload = codec.encode(items)
            self.refs[_join(key, _chunk_name(len(shape)))] = "base64:" + base64.b64encode(payload).decode()

    def objects(self, node: navigate.Dataset, values: np.ndarray) -> np.ndarray:
        out = np.empty(values.shape, dtype=object)
        flat_out, flat = out.reshape(-1), values.reshape(-1)
        for i, item in enumerate(flat):
            flat_out[i] = self.element(node.h5_path, item)
        return out

    def records(self, node: navigate.Dataset, values: np.ndarray) -> np.ndarray:
        names = values.dtype.names or ()
        out = np.empty(values.shape, dtype=object)
        flat_out, flat = out.reshape(-1), values.reshape(-1)
        for i, record in enumerate(flat):
            flat_out[i] = [self.element(f"{node.h5_path} field {n!r}", record[n]) for n in names]
        return out

    def field_type(self, node: navigate.Dataset, dtype: np.dtype, name: str) -> str:
        field = dtype.fields[name][0] if dtype.fields else dtype
        if name in node.reference_fields:
            return "<REFERENCE>"
        if field.kind in "UOT":  # variable-length text: LINDI reads an 'object' field as a reference
            raise _refused(node.h5_path, f"field {name!r} holds variable-length strings, which LINDI's records cannot")
        if field.names is not None or field.subdtype is not None or field.kind not in "biufS":
            raise _refused(node.h5_path, f"field {name!r} of type {field}: LINDI's records hold numbers and strings")
        return str(field)

    def element(self, where: str, item: Any) -> Any:
        """One value of a JSON-stored dataset, as LINDI stores it."""
        if item is None:
            raise _refused(where, "a null object reference, for which LINDI has no form")
        if isinstance(item, navigate.Node):
            return self.reference(item)
        if isinstance(item, (bytes, np.bytes_)):
            return _text(where, bytes(item))
        if isinstance(item, (str, np.str_)):
            return str(item)
        if isinstance(item, (bool, np.bool_)):
            return bool(item)
        if isinstance(item, (int, np.integer)):
            return int(item)
        if isinstance(item, (float, np.floating)):
            return float(item)
        raise _refused(where, f"a value of type {type(item).__name__}, for which LINDI has no form")

    # -- attributes -----------------------------------------------------------------------------

    def attributes(self, node: navigate.Node) -> dict[str, Any]:
        out = {}
        for name in node.attrs:
            if name in convention.RESERVED_ATTRIBUTES:
                continue
            out[name] = self.attribute(f"{node.h5_path} attribute {name!r}", node.attrs[name])
        return out

    def attribute(self, where: str, value: Any) -> Any:
        if isinstance(value, navigate.Node):
            return self.reference(value)
        if isinstance(value, Region):
            raise _refused(where, "a region reference, for which LINDI has no form")
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            return _float(float(value))
        if isinstance(value, (str, np.str_)):
            if str(value) in _NON_FINITE:  # LINDI would read it back as a float
                raise _refused(where, f"the text {str(value)!r}, which LINDI reads back as a float")
            return str(value)
        if isinstance(value, (bytes, np.bytes_)):
            return self.attribute(where, _text(where, bytes(value)))
        if isinstance(value, list):
            return [self.attribute(where, v) for v in value]
        if isinstance(value, np.ndarray) and value.dtype.names is None and value.dtype.kind in "biufSUOT":
            if value.dtype.kind == "O" and any(isinstance(v, navigate.Node) for v in value.reshape(-1)):
                raise _refused(where, "an array of object references, which LINDI's attributes cannot hold")
            return [self.attribute(where, v) for v in value] if value.ndim else self.attribute(where, value[()])
        raise _refused(where, f"a value of type {getattr(value, 'dtype', type(value).__name__)}, which LINDI's "
                       "attributes cannot hold")  # fmt: skip

    def reference(self, target: navigate.Node) -> dict[str, Any]:
        """LINDI's (and hdmf-zarr's) object reference, with the object ids hdmf checks."""
        if target.file != self.file:
            raise _refused(target.h5_path, "an object reference into another file, which LINDI cannot follow")
        object_id = target.attrs.get("object_id") if "object_id" in target.attrs else None
        return {
            "_REFERENCE": {
                "object_id": _plain_text(object_id),
                "path": target.h5_path,
                "source": ".",
                "source_object_id": _plain_text(self.root_object_id),
            }
        }


# -- helpers -----------------------------------------------------------------------------------


def _refused(where: str, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"{where}: {why}; not written in the LINDI form")


def _join(key: str, name: str) -> str:
    return f"{key}/{name}" if key else name


def _chunk_name(ndim: int) -> str:
    return ".".join("0" for _ in range(ndim)) or "0"


def _zarray(shape: tuple[int, ...], dtype: str, fill: Any, filters: list[dict[str, Any]] | None) -> dict[str, Any]:
    # one chunk; zarr v2 takes no chunk of length 0, so an empty array has chunks of 1
    chunks = [n if n else 1 for n in shape]
    return {
        "zarr_format": 2, "shape": list(shape), "chunks": chunks, "dtype": dtype, "compressor": None,
        "fill_value": fill, "order": "C", "filters": filters, "dimension_separator": ".",
    }  # fmt: skip


def _v2_codec(codec_id: str, keys: tuple[str, ...], configuration: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": codec_id}
    for name in keys:
        if name in configuration:
            value = configuration[name]
            out[name] = _BLOSC_SHUFFLE.get(value, value) if name == "shuffle" else value
    return out


def _fill_value(value: Any, dtype: np.dtype) -> Any:
    """A zarr v2 fill value: non-finite floats as the strings zarr v2 writes."""
    if value is None:
        return None
    if dtype.kind == "S":
        return base64.b64encode(b"").decode() if value == 0 else value
    if dtype.kind == "b":
        return bool(value)
    if isinstance(value, float):
        return _float(value)
    return value


def _float(value: float) -> float | str:
    return value if math.isfinite(value) else convention.non_finite_text(value)


def _text(where: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _refused(where, "bytes that are not UTF-8 text, which LINDI stores as text only") from error


def _plain_text(value: Any) -> Any:
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8", "replace")
    return None if value is None else str(value)
