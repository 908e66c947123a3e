"""The CF encoding of a variable across the files combined along a dimension: checked equal,
or (``encoding="per-file"``) each file's recorded so that h5lens's reader decodes each file's
rows with its own.

The attributes that say what a stored value means (:data:`ENCODING_ATTRIBUTES`) must agree
across the files by default: a file packed with another ``scale_factor`` read with the first
file's would come out off by the difference. Under ``"per-file"`` the attributes xarray
decodes (:data:`PER_FILE`: packing, fill and missing values, ``_Unsigned``; and ``units`` and
``calendar`` where every file's units are CF time units, ``"days since 2000-01-01"``) may
differ: the combined array holds every file's stored values, its document the first file's
attributes, and its codec chain starts with ``h5lens.per_file_encoding``
(:mod:`h5lens.codecs.per_file`), whose configuration records each file's values of the
attributes that differ by its rows, and which refuses zarr's readers. Any other difference
(``valid_range``, the ``units`` of a quantity) is refused either way: one attribute would be
shown for values of both files.

Files whose fill values differ are combined under ``"per-file"`` only if each of them
stores every chunk: a chunk never written reads as the combined array's (the first
file's) fill value, which another file's reader would not give.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from h5lens.codecs.per_file import CODEC_NAME, FileEncoding, Record, record_of, without_record
from h5lens.combining.inputs import Input
from h5lens.errors import InvalidOptionError
from h5lens.manifest.documents import ArrayDocument
from h5lens.manifest.model import MISSING

# Attributes that change what a stored value means (CF conventions, sections 2.5, 4.4, 8.1)
ENCODING_ATTRIBUTES = (
    "scale_factor", "add_offset", "_FillValue", "missing_value", "valid_min", "valid_max", "valid_range", "units",
    "calendar", "_Unsigned", "dtype",
)  # fmt: skip
# What ``encoding=`` may say: every file's encoding equal (the default), or each file's recorded
MODES = ("equal", "per-file")
# Those a reader decoding each file's rows with its own attributes applies (xarray's CF decoding)
PER_FILE = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")
TIME = ("units", "calendar")
_TIME_UNITS = re.compile(r"^\s*\w+\s+since\s+\S", re.IGNORECASE)  # CF's "<unit> since <date>"


@dataclass(frozen=True)
class FileAttributes:
    """One file's rows of an array (within its input), and its encoding attributes: JSON
    values and recorded types."""

    name: str
    source: int
    rows: int
    values: dict[str, Any]
    types: dict[str, str]

    def shown(self, name: str) -> str:
        if name not in self.values:
            return "absent"
        text = json.dumps(self.values[name], allow_nan=True, sort_keys=True)
        return text if name not in self.types else f"{text} as {self.types[name]}"

    def key(self, name: str) -> tuple[str, str | None] | None:
        if name not in self.values:
            return None
        return json.dumps(self.values[name], allow_nan=True, sort_keys=True), self.types.get(name)


def without_records(inputs: Sequence[Input]) -> tuple[list[Input], list[dict[str, Record]]]:
    """The inputs with the per-file codec taken out of their arrays' documents (a combined
    manifest appended to, whose arrays hold the files' stored values), and each input's
    records by array path."""
    found_inputs, found_records = [], []
    for item in inputs:
        records = {}
        for path in item.manifest.arrays():
            record = record_of(item.manifest.nodes[path])
            if record is not None:
                records[path] = record
        if records:
            nodes = {**item.manifest.nodes, **{path: without_record(item.manifest.nodes[path]) for path in records}}
            item = Input(item.name, replace(item.manifest, nodes=nodes), item.options)
        found_inputs.append(item)
        found_records.append(records)
    return found_inputs, found_records


def files_of(item: Input, path: str, record: Record | None, sources: np.ndarray) -> list[FileAttributes]:
    """The files of ``item``'s array ``path``, each with its encoding attributes: one, or for
    a combined manifest each file its record names (``sources``: its source index → the
    combined manifest's)."""
    doc = item.manifest.nodes[path]
    attributes = doc.get("attributes", {})
    types = item.manifest.attribute_types.get(path, {})
    values = {name: attributes[name] for name in ENCODING_ATTRIBUTES if name in attributes}
    kinds = {name: types[name] for name in values if name in types}
    view = ArrayDocument.of(doc)
    rows = view.shape[0] if view is not None and view.shape else 0
    if record is None:
        source = int(sources[0]) if len(sources) else 0
        return [FileAttributes(item.name, source, rows, values, kinds)]
    found = []
    for entry in record.files:
        mine = {k: v for k, v in values.items() if k not in record.attributes} | dict(entry.attributes)
        mine_types = {k: v for k, v in kinds.items() if k not in record.attributes} | dict(entry.types)
        found.append(FileAttributes(f"{item.name} (its source {entry.source})", int(sources[entry.source]),
                                    entry.stop - entry.start, mine, mine_types))  # fmt: skip
    return found


def differing(path: str, files: Sequence[FileAttributes], mode: str) -> tuple[str, ...]:
    """The encoding attributes that differ between ``files``; refused unless ``mode`` is
    ``"per-file"`` and each is one a per-file reader applies."""
    first = files[0]
    found: list[str] = []
    for name in ENCODING_ATTRIBUTES:
        other = next((f for f in files[1:] if f.key(name) != first.key(name)), None)
        if other is None:
            continue
        if mode != "per-file":
            raise InvalidOptionError(
                f"/{path}: attribute {name!r} differs between {first.name} ({first.shown(name)}) and {other.name} "
                f"({other.shown(name)}); their values would be read with one file's encoding, wrongly for the other. "
                "Combine files encoded alike, or pass encoding='per-file' (--encoding per-file) to record each "
                "file's own, which h5lens's xarray engine applies (and zarr's readers refuse)"
            )
        if name not in PER_FILE and not (name in TIME and all(_is_time(f) for f in files)):
            raise InvalidOptionError(
                f"/{path}: attribute {name!r} differs between {first.name} ({first.shown(name)}) and {other.name} "
                f"({other.shown(name)}); per-file encoding applies {', '.join(PER_FILE)} and the units and calendar "
                f"of time, not {name!r}: one value of it would be shown for the values of both files"
            )
        found.append(name)
    return tuple(found)


def _is_time(file: FileAttributes) -> bool:
    units = file.values.get("units")
    return isinstance(units, str) and _TIME_UNITS.match(units) is not None


def record(path: str, names: Sequence[str], files: Sequence[FileAttributes]) -> Record:
    """The record of each file's values of ``names``, by its rows in the combined array."""
    entries, start = [], 0
    for file in files:
        attributes = {name: file.values[name] for name in names if name in file.values}
        types = {name: file.types[name] for name in attributes if name in file.types}
        entries.append(FileEncoding(file.source, start, start + file.rows, attributes, types))
        start += file.rows
    return Record("/" + path, tuple(names), tuple(entries))


def with_record(doc: Mapping[str, Any], found: Record) -> dict[str, Any]:
    """The combined array's document with the record first in its codec chain."""
    if not _is_numbers(doc):
        raise InvalidOptionError(
            f"{found.array}: its files' encodings differ ({', '.join(found.attributes)}), and per-file encoding "
            f"applies to arrays of numbers, not {doc.get('data_type')!r}"
        )
    codec = {"name": CODEC_NAME, "configuration": found.to_json()}
    return {**doc, "codecs": [codec, *doc.get("codecs", [])]}


def _is_numbers(doc: Mapping[str, Any]) -> bool:
    data_type = doc.get("data_type")
    try:
        return isinstance(data_type, str) and np.dtype(data_type).kind in "biuf"
    except TypeError:
        return False


def check_fills_stored(path: str, inputs: Sequence[Input]) -> None:
    """Files whose fill value differs from the first file's store every chunk of the array
    (one never written would read as the first file's fill value)."""
    first = json.dumps(inputs[0].manifest.nodes[path].get("fill_value"), allow_nan=True)
    for item in inputs[1:]:
        if json.dumps(item.manifest.nodes[path].get("fill_value"), allow_nan=True) == first:
            continue
        table = item.manifest.chunks.get(path)
        if table is not None and bool(np.any(table.source == MISSING)):
            raise InvalidOptionError(
                f"/{path}: {item.name} has chunks never written, and its fill value differs from {inputs[0].name}'s: "
                "they would read as the first file's fill value. Combine files with the same fill value"
            )


__all__ = ["ENCODING_ATTRIBUTES", "MODES", "PER_FILE", "FileAttributes", "check_fills_stored", "differing",
           "files_of", "record", "with_record", "without_records"]  # fmt: skip
