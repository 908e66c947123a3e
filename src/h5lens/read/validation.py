"""Check a manifest against the unified zarr v3 convention, its own chunk table and its sources.

:func:`validate` returns a list of :class:`Problem` (empty when the manifest is
sound). It reads no source file's data unless asked (``deep``): values are checked
only where the manifest holds them inline (reference datasets and compounds with
reference fields always are, in manifests h5lens writes). It does look at each
source (unless ``verify=False``): that it is there and is the file that was indexed
(:mod:`h5lens.manifest.identity`: its size, and its ETag or content fingerprint).

Checked:

* every ``zarr.json`` document parses with zarr (``ArrayV3Metadata`` /
  ``GroupMetadata``);
* reserved attributes are well-formed and where they belong: ``_LINKS`` (groups;
  a list of ``{name, source, path}`` string dicts, unique names that no child
  has), ``_DTYPE`` (non-compound arrays; a numpy type name, ``"str"``, ``"bytes"``
  or ``"object_reference"``, consistent with the ``data_type``), ``_SCALAR``
  (``true``, shape ``[1]``, proposal profile only), ``_REFERENCE_FIELDS``
  (existing text fields of a structured array), ``_EMPTY``, ``_ENUM``, and
  ``{"_REFERENCE": {"source", "path"}}`` attribute values;
* same-file link and reference targets exist (following links on the way),
  including every path in inline object-reference datasets, reference fields and
  their fill values;
* the profile is applied consistently: 0-d arrays and bare NaN attributes only
  under ``released``, ``_SCALAR`` only under ``proposal``;
* chunk sizes: for arrays whose only codec is ``bytes``, each referenced or inline
  chunk holds exactly ``prod(chunk_shape) * itemsize`` bytes, and referenced byte
  ranges lie within their source's recorded size;
* what the manifest lists as left out unreadable (``Manifest.unreadable``) is out of it,
  below a group it holds (what it lacks is said, and so no problem: the CLI notes it).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any, Unpack

import numpy as np

from h5lens.errors import ManifestFormatError
from h5lens.format import convention
from h5lens.manifest.documents import DocumentChecker
from h5lens.manifest.model import INLINE, MISSING, Manifest
from h5lens.manifest.zarr_keys import KeyEncoding
from h5lens.read.options import OpenKwargs, OpenOptions, PathOrManifest
from h5lens.read.problems import Problem
from h5lens.read.rectilinear import rectilinear_allowed
from h5lens.read.source_checks import check_sources, decode_every_chunk

__all__ = ["KNOWN_DTYPES", "Problem", "validate"]

_NUMERIC = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
#: Values ``_DTYPE`` may take.
KNOWN_DTYPES = frozenset(_NUMERIC) | {"str", "bytes", "object_reference", "region_reference"}
_BYTES_TYPES = ("null_terminated_bytes", "raw_bytes", "variable_length_bytes", "bytes")
_LINK_KEYS = {"name", "source", "path"}
_REFERENCE_KEYS = {"source", "path"}
_ARRAY_ONLY = (convention.DTYPE, convention.SCALAR, convention.REFERENCE_FIELDS, convention.EMPTY, convention.ENUM)
_ELSEWHERE = "\x00elsewhere"  # a path that leaves the file through an external link


def validate(
    manifest: PathOrManifest,
    *,
    deep: bool = False,
    options: OpenOptions | None = None,
    **given: Unpack[OpenKwargs],
) -> list[Problem]:
    """All problems of ``manifest`` (an object, or a manifest path/URL), in node order.

    The convention, the metadata, and each array's chunk table against what the writer
    recorded (a chunk reference deleted or edited since reads as fill values or garbage,
    and is found here); with ``verify``, that each source is there and unchanged since
    indexing (a stat, and for local files two small reads). With ``deep``, every chunk is
    also fetched from its source and decoded. The options (``options=`` or keywords) are
    :func:`h5lens.open_store`'s; a manifest it cannot load at all raises, as there.
    """
    opening = OpenOptions.of(options, given)
    manifest = opening.load(manifest)
    if "" not in manifest.nodes:
        return [Problem("/", "no root group (the key zarr.json is missing)")]
    from h5lens.codecs.per_file import stored_values

    # arrays of files encoded differently (combine --encoding per-file) hold their stored values
    manifest = stored_values(manifest)[0]
    problems = list(_Validator(manifest).run())
    if deep:
        problems += decode_every_chunk(manifest, opening)
    elif opening.verify and manifest.sources:
        problems += check_sources(manifest, opening)
    return problems


def _string_record(
    path: str, where: str, record: dict[str, Any], keys: set[str], beyond: str
) -> tuple[list[Problem], bool]:
    """What is wrong with ``record``, an object of string values under exactly ``keys``: keys
    missing, keys ``beyond`` them, values that are not strings; and whether every key it
    must have is there, a string (extra keys do not stop a reader)."""
    missing, extra = keys - set(record), set(record) - keys
    problems = []
    if missing:
        problems.append(Problem(path, f"{where} lacks {sorted(missing)}"))
    if extra:
        problems.append(Problem(path, f"{where} has keys {beyond}: {sorted(extra)}"))
    bad = [k for k in sorted(keys & set(record)) if not isinstance(record[k], str)]
    if bad:
        problems.append(Problem(path, f"{where} values must be strings: {', '.join(f'{k}={record[k]!r}' for k in bad)}"))
    return problems, not (missing or bad)


class _Validator:
    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.children = {path: set(manifest.children(path)) for path in manifest.groups()}
        self._documents = DocumentChecker()
        self._manifest_store: Any = None

    # -- driving ------------------------------------------------------------------
    def run(self) -> Iterator[Problem]:
        yield from self._recorded_tables()
        yield from self._nodes()
        yield from self._unreadable()

    def _unreadable(self) -> Iterator[Problem]:
        """What the manifest says it left out is out of it, below a group it holds."""
        nodes = self.manifest.nodes
        for entry in self.manifest.unreadable:
            node = entry.attribute is None
            owner = entry.path.rpartition("/")[0] if node else entry.path  # its group, or the node of the attribute
            held = entry.path in nodes if node else entry.attribute in nodes.get(owner, {}).get("attributes", {})
            if held:
                yield Problem(entry.where, "recorded as left out unreadable, but the manifest holds it")
            elif owner not in nodes or (node and nodes[owner].get("node_type") != "group"):
                kind = "group" if node else "node"
                said = f"recorded as left out unreadable, but the manifest holds no {kind} /{owner}"
                yield Problem(entry.where, said)

    def _recorded_tables(self) -> Iterator[Problem]:
        """Each array's chunk table against what its writer recorded (count and digest)."""
        recorded = self.manifest.recorded
        if recorded is None:
            return
        tables = self.manifest.chunks
        for path in sorted(set(recorded) - set(tables)):
            yield Problem("/" + path, "the writer recorded this array, which the manifest no longer holds")
        for path in sorted(tables):
            entry = recorded.get(path)
            if entry is None:
                yield Problem("/" + path, "an array the writer did not record (added to the manifest since)")
                continue
            table = tables[path]
            count, digest = entry.get("chunks"), entry.get("digest")
            if count != table.n_present:
                missing = f"{count - table.n_present} of {count}" if isinstance(count, int) and count > table.n_present else None
                what = f"{missing} chunk references are missing" if missing else f"{table.n_present} chunk references where the writer recorded {count}"
                yield Problem("/" + path, f"{what}: missing chunks read as the fill value")
            elif digest != table.digest():
                yield Problem("/" + path, "chunk references differ from what the writer recorded (offsets, lengths or inline bytes edited)")

    def _nodes(self) -> Iterator[Problem]:
        for key in sorted(self.manifest.nodes):
            path = "/" + key
            doc = self.manifest.nodes[key]
            attributes = doc.get("attributes", {})
            if not isinstance(attributes, dict):
                yield Problem(path, f"attributes must be an object, not {type(attributes).__name__}")
                attributes = {}
            yield from self._strict_json(path, doc)
            if doc.get("node_type") == "group":
                yield from self._group(key, path, doc, attributes)
            else:
                yield from self._array(key, path, doc, attributes)
            for name, value in attributes.items():
                if name not in (convention.LINKS, convention.REFERENCE_FIELDS, convention.ENUM):
                    yield from self._references_in(path, f"attribute {name!r}", value)

    def _strict_json(self, path: str, doc: dict[str, Any]) -> Iterator[Problem]:
        """What the strictest readers refuse: text that is not UTF-8 (lone surrogates)."""
        import orjson

        try:
            orjson.dumps(doc)
        except orjson.JSONEncodeError as e:
            yield Problem(path, f"metadata is not valid UTF-8 JSON, which strict parsers refuse ({e})")

    # -- groups ----------------------------------------------------------------------
    def _group(self, key: str, path: str, doc: dict[str, Any], attributes: dict[str, Any]) -> Iterator[Problem]:
        error = self._documents.group(doc)
        if error is not None:
            yield Problem(path, f"group metadata does not parse with zarr: {error}")
        for name in _ARRAY_ONLY:
            if name in attributes:
                yield Problem(path, f"{name} belongs on arrays, not on a group")
        if convention.LINKS in attributes:
            yield from self._links(key, path, attributes[convention.LINKS])

    def _links(self, key: str, path: str, links: Any) -> Iterator[Problem]:
        if not isinstance(links, list):
            yield Problem(path, f"_LINKS must be a list of {{name, source, path}} objects, not {type(links).__name__}")
            return
        seen: set[str] = set()
        for i, entry in enumerate(links):
            where = f"_LINKS[{i}]"
            if not isinstance(entry, dict):
                yield Problem(path, f"{where} must be an object with name, source, path; got {entry!r}")
                continue
            problems, usable = _string_record(path, where, entry, _LINK_KEYS, "the convention does not define")
            yield from problems
            if not usable:
                continue
            name, source, target = entry["name"], entry["source"], entry["path"]
            if not name or "/" in name:
                yield Problem(path, f"{where} name {name!r} is not a member name")
            if name in seen:
                yield Problem(path, f"{where} name {name!r} appears twice in _LINKS")
            seen.add(name)
            if name in self.children.get(key, ()):
                yield Problem(path, f"{where} name {name!r} is also a child node")
            if not source:
                yield Problem(path, f"{where} source is empty (\".\" for the same file)")
            if not target.startswith("/"):
                yield Problem(path, f"{where} path {target!r} is not absolute")
            elif source == "." and not self._exists(target):
                yield Problem(path, f"{where} ({name!r}) points at {target!r}, which does not exist")

    # -- arrays ----------------------------------------------------------------------
    def _array(self, key: str, path: str, doc: dict[str, Any], attributes: dict[str, Any]) -> Iterator[Problem]:
        meta, error = self._documents.array(doc)
        native = meta.dtype.to_native_dtype() if meta is not None else None
        if error is not None:
            yield Problem(path, f"array metadata does not parse with zarr: {error}")
        try:
            KeyEncoding.from_document(doc, path)
        except ManifestFormatError as e:
            yield Problem(path, str(e).removeprefix(f"{path}: "))
        if convention.LINKS in attributes:
            yield Problem(path, "_LINKS belongs on groups, not on an array")
        shape = doc.get("shape")
        data_type = doc.get("data_type")
        type_name = data_type.get("name") if isinstance(data_type, dict) else data_type
        structured = type_name == "structured"
        netcdf = isinstance(doc.get("dimension_names"), list)
        yield from self._dtype(path, attributes, type_name, structured, netcdf)
        yield from self._scalar(path, attributes, shape)
        if convention.EMPTY in attributes:
            if attributes[convention.EMPTY] is not True:
                yield Problem(path, f"_EMPTY must be true, not {attributes['_EMPTY']!r}")
            elif shape != [0]:
                yield Problem(path, f"_EMPTY marks a null dataspace, stored with shape [0], not {shape}")
            elif key in self.manifest.chunks and self.manifest.chunks[key].n_present:
                yield Problem(path, "_EMPTY array has chunks")
        if convention.ENUM in attributes:
            enum = attributes[convention.ENUM]
            if not isinstance(enum, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in enum.items()
            ):
                yield Problem(path, f"_ENUM must map names to integers, not {enum!r}")
            if native is not None and native.kind not in "iu":
                yield Problem(path, f"_ENUM on an array of {native}, not of integers")
        if convention.REFERENCE_FIELDS in attributes:
            yield from self._reference_fields(key, path, attributes[convention.REFERENCE_FIELDS], structured, native, meta)
        elif attributes.get(convention.DTYPE) == "object_reference" and type_name == "string":
            values = self._inline_values(key)
            if values is not None:
                yield from self._targets(path, "object reference", values)
        elif attributes.get(convention.DTYPE) == "region_reference" and type_name == "string":
            values = self._inline_values(key)
            if values is not None:
                yield from self._regions(path, values)
        if meta is not None and native is not None:
            yield from self._chunks(key, path, doc, native)
            yield from self._inline_decodes(key, path)

    def _dtype(
        self, path: str, attributes: dict[str, Any], type_name: Any, structured: bool, netcdf: bool = False
    ) -> Iterator[Problem]:
        """``netcdf``: an array of the netCDF profile (it has ``dimension_names``), which
        leaves ``_DTYPE`` out where ``data_type`` says it (xarray would show it as an attribute)."""
        if convention.DTYPE not in attributes:
            if not structured and not netcdf:
                yield Problem(path, "non-compound array without _DTYPE")
            return
        value = attributes[convention.DTYPE]
        if structured:
            yield Problem(path, f"_DTYPE {value!r} on a structured array (compounds carry their fields in data_type)")
            return
        if not isinstance(value, str) or value not in KNOWN_DTYPES:
            yield Problem(path, f"_DTYPE {value!r} is not one of {sorted(KNOWN_DTYPES)}")
            return
        if value in ("str", "object_reference", "region_reference"):
            expected: tuple[str, ...] = ("string",)
        elif value == "bytes":
            expected = _BYTES_TYPES
        else:
            expected = (value,)
        if type_name not in expected:
            yield Problem(path, f"_DTYPE {value!r} does not match data_type {type_name!r}")

    def _scalar(self, path: str, attributes: dict[str, Any], shape: Any) -> Iterator[Problem]:
        proposal = self.manifest.convention == "proposal"
        if convention.SCALAR in attributes:
            value = attributes[convention.SCALAR]
            if value is not True:
                yield Problem(path, f"_SCALAR must be true, not {value!r}")
            elif shape != [1]:
                yield Problem(path, f"_SCALAR on an array of shape {shape}; only shape [1] arrays are scalars")
            elif not proposal:
                yield Problem(path, "_SCALAR in a released-profile manifest (released scalars are 0-d arrays)")
        elif proposal and shape == []:
            yield Problem(path, "0-d array in a proposal-profile manifest (proposal scalars are shape [1] + _SCALAR)")

    def _reference_fields(
        self, key: str, path: str, fields: Any, structured: bool, native: np.dtype | None, meta: Any
    ) -> Iterator[Problem]:
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
            yield Problem(path, f"_REFERENCE_FIELDS must be a non-empty list of field names, not {fields!r}")
            return
        if len(set(fields)) != len(fields):
            yield Problem(path, f"_REFERENCE_FIELDS names a field twice: {fields}")
        if not structured:
            yield Problem(path, "_REFERENCE_FIELDS on an array whose data_type is not structured")
            return
        if native is None or native.names is None or native.fields is None:  # fields: None exactly when names is
            return
        unknown = [f for f in fields if f not in native.names]
        if unknown:
            yield Problem(path, f"_REFERENCE_FIELDS names fields the structured dtype lacks: {unknown} (has {list(native.names)})")
        known = [f for f in fields if f in native.names]
        for name in known:
            if native.fields[name][0].kind != "U":
                yield Problem(path, f"reference field {name!r} is {native.fields[name][0]}, not text (fixed_length_utf32)")
        known = [f for f in known if native.fields[f][0].kind == "U"]
        fill = getattr(meta, "fill_value", None)
        if isinstance(fill, np.void):
            for name in known:
                yield from self._targets(path, f"fill value of reference field {name!r}", np.asarray([fill[name]]))
        values = self._inline_values(key)
        if values is not None:
            for name in known:
                yield from self._targets(path, f"reference field {name!r}", values[name])

    def _chunks(self, key: str, path: str, doc: dict[str, Any], native: np.dtype) -> Iterator[Problem]:
        """Chunk lengths where they are known (bytes-only arrays), and byte ranges that end past
        their source's recorded size, checked column-wise: only the chunks found wrong cost
        Python work."""
        table = self.manifest.chunks.get(key)
        if table is None:
            return
        source = table.source.reshape(-1)
        length = table.length.reshape(-1)
        wrong_size: set[int] = set()
        codecs = doc.get("codecs", [])
        chunk_shape = doc.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape", [])
        expected = int(np.prod(chunk_shape, dtype=np.int64)) * native.itemsize
        if native.kind not in "OT" and len(codecs) == 1 and _codec_name(codecs[0]) == "bytes":
            wrong_size = set(np.flatnonzero((source != MISSING) & (length != np.uint64(expected))).tolist())
        sizes = np.array([-1 if s.size is None else s.size for s in self.manifest.sources] or [-1], dtype=np.int64)
        referenced = (source >= 0) & (source < len(sizes))
        ends = table.offset.reshape(-1).astype(np.int64) + length.astype(np.int64)
        limit = sizes[np.where(referenced, source, 0)]
        past_end = set(np.flatnonzero(referenced & (limit >= 0) & (ends > limit)).tolist())
        for flat in sorted(wrong_size | past_end):
            index = tuple(int(i) for i in np.unravel_index(flat, table.grid_shape)) if table.grid_shape else ()
            label = "/".join(map(str, index)) or "c"
            if flat in wrong_size:
                where = "inline" if int(source[flat]) == INLINE else "referenced"
                yield Problem(
                    path,
                    f"{where} chunk {label} holds {int(length[flat])} bytes; a bytes-only chunk of shape {chunk_shape} "
                    f"and itemsize {native.itemsize} ({native}) holds {expected}",
                )
            if flat in past_end:
                yield Problem(path, f"chunk {label} ends at byte {int(ends[flat])}, past the source's {int(limit[flat])} bytes")

    # -- references --------------------------------------------------------------------
    def _references_in(self, path: str, where: str, value: Any) -> Iterator[Problem]:
        if isinstance(value, dict):
            if convention.BYTES in value:
                yield from self._bytes(path, where, value)
                return
            if convention.REFERENCE in value:
                yield from self._reference(path, where, value)
                return
            for k, v in value.items():
                yield from self._references_in(path, f"{where}[{k!r}]", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                yield from self._references_in(path, f"{where}[{i}]", v)
        elif isinstance(value, float) and not math.isfinite(value) and self.manifest.convention == "proposal":
            yield Problem(path, f"{where}: bare {value} in a proposal-profile manifest (the proposal writes strings)")

    def _bytes(self, path: str, where: str, value: dict[str, Any]) -> Iterator[Problem]:
        if len(value) != 1:
            yield Problem(path, f"{where}: a {convention.BYTES} wrapper has other keys: {sorted(set(value) - {convention.BYTES})}")
            return
        try:
            convention.decode_bytes_value(value)
        except ValueError as e:  # binascii.Error is a ValueError
            yield Problem(path, f"{where}: {convention.BYTES} is not base64 text (or nested lists of it): {e}")

    def _reference(self, path: str, where: str, value: dict[str, Any]) -> Iterator[Problem]:
        if len(value) != 1:
            yield Problem(path, f"{where}: a _REFERENCE wrapper has other keys: {sorted(set(value) - {'_REFERENCE'})}")
        ref = value[convention.REFERENCE]
        if not isinstance(ref, dict):
            yield Problem(path, f"{where}: _REFERENCE must be an object with source and path, not {ref!r}")
            return
        problems, usable = _string_record(path, f"{where}: _REFERENCE", ref, _REFERENCE_KEYS, "beyond source and path")
        yield from problems
        if not usable:
            return
        if ref["source"] == "." and not self._exists(ref["path"]):
            yield Problem(path, f"{where}: _REFERENCE to {ref['path']!r}, which does not exist")

    def _targets(self, path: str, what: str, values: np.ndarray) -> Iterator[Problem]:
        dangling = sorted({str(v) for v in np.asarray(values).ravel().tolist() if v != "" and not self._exists(str(v))})
        if dangling:
            shown = ", ".join(repr(d) for d in dangling[:5]) + (" ..." if len(dangling) > 5 else "")
            yield Problem(path, f"{what} paths that do not exist: {shown}")

    def _regions(self, path: str, values: np.ndarray) -> Iterator[Problem]:
        from h5lens.read.references import parse

        targets = []
        for text in np.asarray(values).ravel().tolist():
            try:
                found = parse(text, path)
            except (ManifestFormatError, ValueError) as e:
                yield Problem(path, f"a region reference that is not the convention's form: {e}")
                return
            if found is not None and found[0] == ".":
                targets.append(found[1])
        yield from self._targets(path, "region reference", np.asarray(targets, dtype=object))

    def _exists(self, target: str) -> bool:
        """Whether same-file path ``target`` reaches a node, following ``_LINKS`` on the way."""
        return self._resolve(target, 0) is not None

    def _resolve(self, target: str, depth: int) -> str | None:
        """The node key ``target`` reaches (``_ELSEWHERE`` through an external link), else None."""
        if not target.startswith("/") or depth > 32:
            return None
        nodes = self.manifest.nodes
        key = target.strip("/")
        if key in nodes:
            return key
        current = ""
        for part in key.split("/"):
            child = f"{current}/{part}" if current else part
            if child in nodes:
                current = child
                continue
            links = nodes.get(current, {}).get("attributes", {}).get(convention.LINKS)
            entry = (
                next((e for e in links if isinstance(e, dict) and e.get("name") == part), None)
                if isinstance(links, list)
                else None
            )
            if entry is None or not isinstance(entry.get("path"), str):
                return None
            if entry.get("source") != ".":
                return _ELSEWHERE  # another file: not checked here
            resolved = self._resolve(entry["path"], depth + 1)
            if resolved is None or resolved == _ELSEWHERE:
                return resolved
            current = resolved
        return current

    def _store(self) -> Any:
        """One store for every inline read (its metadata index is built once)."""
        if self._manifest_store is None:
            from h5lens.store import ManifestStore

            # inline reads never touch a source, so no source needs allowing
            self._manifest_store = ManifestStore(self.manifest, allow_local=True)
        return self._manifest_store

    def _inline_values(self, key: str) -> np.ndarray | None:
        """The array's values when every present chunk is inline; None otherwise (never reads sources)."""
        table = self.manifest.chunks.get(key)
        if table is None or np.any(table.source >= 0) or self.manifest.nodes[key].get("shape") == [0]:
            return None
        import zarr

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with rectilinear_allowed([self.manifest.nodes[key]]):  # h5lens combine's grids
                    array = zarr.open_array(self._store(), path=key, mode="r", zarr_format=3)
                return np.asarray(array[...])
        except Exception:  # noqa: BLE001 - undecodable inline chunks are reported by _inline_decodes
            return None

    def _inline_decodes(self, key: str, path: str) -> Iterator[Problem]:
        """Inline chunks live in the manifest: decoding them costs no source read, and one
        that does not decode would otherwise validate clean and fail at the first read."""
        table = self.manifest.chunks.get(key)
        if table is None or not table.inline:
            return
        import zarr

        from h5lens.errors import H5LensError
        from h5lens.read.check import first_bad_block

        grid = table.grid_shape
        blocks = [tuple(int(i) for i in np.unravel_index(flat, grid)) if grid else () for flat in sorted(table.inline)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with rectilinear_allowed([self.manifest.nodes[key]]):  # h5lens combine's grids
                    array = zarr.open_array(self._store(), path=key, mode="r", zarr_format=3)
                bad = first_bad_block(array, blocks)
        except H5LensError as e:
            yield Problem(path, str(e).splitlines()[0])
            return
        except Exception as e:  # noqa: BLE001 - zarr refused to open it: the metadata check says why
            yield Problem(path, f"inline chunks cannot be read ({type(e).__name__}: {e})")
            return
        if bad is not None:
            label = "/".join(map(str, bad)) or "c"
            yield Problem(path, f"inline chunk {label} does not decode with the array's codecs")


def _codec_name(codec: Any) -> Any:
    return codec.get("name") if isinstance(codec, dict) else codec
