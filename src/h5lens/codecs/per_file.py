"""A codec that refuses: the values of files encoded differently, which only a reader that
decodes each file's rows with that file's own encoding may read.

``h5lens combine --dim NAME --encoding per-file`` concatenates netCDF variables whose files
pack or date their values differently (another ``scale_factor``, ``add_offset``,
``_FillValue``, or ``units`` of time): the combined array holds every file's stored values
as they lie, and no single set of attributes decodes them all. Read through one set (the
first file's), the other files' values would come out off by the difference, silently.
So the array's codec chain starts with ``h5lens.per_file_encoding``, whose configuration
records each file's encoding by its rows along the combined dimension (:class:`Record`),
and which refuses to decode, saying why and how to read the array. zarr (``xr.open_zarr``,
plain ``zarr``, ``h5lens.open``'s navigation) therefore raises on the first read of its
values; h5lens's xarray engine takes the codec out of the chain and decodes each file's rows
with the file's own attributes (:mod:`h5lens.read.per_file`).

A zarr without h5lens installed does not know the codec's name and refuses to open the
array; with h5lens installed (the ``zarr.codecs`` entry point) it opens the array, reads its
attributes, and refuses its values with this module's message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from zarr.abc.codec import ArrayArrayCodec
from zarr.core.common import JSON, parse_named_configuration

from h5lens.codecs.named import only
from h5lens.errors import UnsupportedFeatureError

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer

    from h5lens.manifest.model import Manifest

__all__ = [
    "CODEC_NAME",
    "FileEncoding",
    "PerFileEncodingCodec",
    "Record",
    "record_of",
    "register",
    "stored_values",
    "without_record",
]

CODEC_NAME = "h5lens.per_file_encoding"


@dataclass(frozen=True)
class FileEncoding:
    """One file's rows ``[start, stop)`` along the combined dimension, its source (an index
    into the manifest's sources), and its values of the attributes that differ between the
    files (JSON, as its manifest recorded them; one absent from the file is absent here),
    with their recorded HDF5 types (a float32 ``scale_factor``)."""

    source: int
    start: int
    stop: int
    attributes: Mapping[str, Any]
    types: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "source": self.source,
            "rows": [self.start, self.stop],
            "attributes": dict(self.attributes),
        }
        if self.types:
            found["types"] = dict(self.types)
        return found

    @classmethod
    def from_json(cls, data: Any) -> FileEncoding:
        given = (
            only(dict(data), CODEC_NAME, {"source", "rows", "attributes", "types"}) if isinstance(data, Mapping) else {}
        )
        rows, attributes, types = given.get("rows"), given.get("attributes", {}), given.get("types", {})
        source = given.get("source")
        if (
            not isinstance(rows, list) or len(rows) != 2 or not all(_count(r) for r in rows) or rows[0] > rows[1]
            or not _count(source) or not isinstance(attributes, Mapping) or not isinstance(types, Mapping)
        ):  # fmt: skip
            raise ValueError(
                f"{CODEC_NAME}: a file's entry needs source, rows [start, stop] and attributes; got {data!r}"
            )
        assert isinstance(source, int)  # _count said so
        return cls(source, int(rows[0]), int(rows[1]), dict(attributes), {str(k): str(v) for k, v in types.items()})


@dataclass(frozen=True)
class Record:
    """Which attributes differ between the files of the array ``array`` (its path), and each
    file's values of them, in the order of the rows."""

    array: str
    attributes: tuple[str, ...]
    files: tuple[FileEncoding, ...]

    def to_json(self) -> dict[str, Any]:
        return {"array": self.array, "attributes": list(self.attributes), "files": [f.to_json() for f in self.files]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        given = only(dict(data), CODEC_NAME, {"array", "attributes", "files"})
        names, files = given.get("attributes"), given.get("files")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not isinstance(files, list):
            raise ValueError(f"{CODEC_NAME}: needs attributes (names) and files (one entry each); got {data!r}")
        record = cls(str(given.get("array", "")), tuple(names), tuple(FileEncoding.from_json(f) for f in files))
        stops = [f.start for f in record.files[1:]]
        if any(f.stop != start for f, start in zip(record.files, stops, strict=False)) or (
            record.files and record.files[0].start
        ):
            raise ValueError(f"{CODEC_NAME}: the files' rows must follow one another from 0; got {data!r}")
        return record

    @property
    def rows(self) -> int:
        return self.files[-1].stop if self.files else 0


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def refusal(array: str, attributes: Sequence[str]) -> str:
    """Why the values of ``array`` cannot be read through zarr, and how to read them."""
    where = array or "this array"
    return (
        f"{where}: its files were encoded differently (they differ in {', '.join(attributes)}), and the "
        "combined array holds each file's stored values; only a reader that decodes each file's rows with "
        "that file's own attributes gives their values. Read it with h5lens: "
        "xr.open_dataset(MANIFEST, engine='h5lens') (this zarr reader would otherwise show the stored values "
        "under one file's attributes)"
    )


@dataclass(frozen=True)
class PerFileEncodingCodec(ArrayArrayCodec):
    """The record of each file's encoding, which refuses to decode. JSON: ``{"name":
    "h5lens.per_file_encoding", "configuration": {"array": path, "attributes": [names],
    "files": [{"source": i, "rows": [start, stop], "attributes": {...}, "types": {...}}, ...]}}``."""

    record: Record
    is_fixed_size = True

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, CODEC_NAME)
        return cls(Record.from_json(configuration))

    def to_dict(self) -> dict[str, JSON]:
        return {"name": CODEC_NAME, "configuration": self.record.to_json()}

    def _refuse(self) -> UnsupportedFeatureError:
        return UnsupportedFeatureError(refusal(self.record.array, self.record.attributes))

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        raise self._refuse()

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer | None:
        raise self._refuse()

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        return input_byte_length


def record_of(doc: Mapping[str, Any]) -> Record | None:
    """The per-file record of an array's ``zarr.json`` document; None for any other array."""
    for codec in doc.get("codecs") or ():
        if isinstance(codec, Mapping) and codec.get("name") == CODEC_NAME:
            return Record.from_json(codec.get("configuration") or {})
    return None


def without_record(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document with the codec taken out: its stored values, as zarr decodes them."""
    codecs = [c for c in doc.get("codecs") or () if not (isinstance(c, Mapping) and c.get("name") == CODEC_NAME)]
    return {**doc, "codecs": codecs}


def stored_values(manifest: Manifest) -> tuple[Manifest, dict[str, Record]]:
    """The manifest with the codec taken out of its arrays (whose values then read as the
    files stored them: what h5lens's reader decodes file by file, and what ``validate
    --deep`` checks), and their records by array path (none: the manifest itself)."""
    records = {}
    for path, doc in manifest.nodes.items():
        if doc.get("node_type") == "array" and doc.get("codecs"):
            found = record_of(doc)
            if found is not None:
                records[path] = found
    if not records:
        return manifest, records
    nodes = {**manifest.nodes, **{path: without_record(manifest.nodes[path]) for path in records}}
    return replace(manifest, nodes=nodes), records


def register() -> None:
    """Register :class:`PerFileEncodingCodec` with zarr under ``h5lens.per_file_encoding`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, PerFileEncodingCodec)
