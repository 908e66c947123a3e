"""The chunk references of a JSON manifest read column-wise, with no Python object per chunk.

orjson gives a manifest's refs as one dict, ``{"v/c/12/3": ["{{u}}", offset, length], ...}``.
Parsing each key and value in turn cost ~1.5 µs a chunk, ten times the JSON parse. Here:

* the keys are joined into one text, where the metadata keys are found by searching for
  ``zarr.json``, and the chunk keys of each array are cut out in runs (writers put an
  array's keys together; a run is found with ``bytes.count``, galloping);
* the grid indices of an array's keys are read by numpy from the digits of all of its key
  tails at once (:func:`decimal_rows`);
* the values' columns are checked on their JSON text (one ``orjson.dumps``) and taken
  with C-level list operations.

Nothing here decides what a manifest may say. Each function recognises, exactly, what the
key-by-key route of :mod:`h5lens.manifest.refs_json` would read the same way, and answers
None for anything else: that route then reads it, and names the key where it refuses.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from h5lens.manifest.zarr_keys import METADATA, KeyEncoding, KeyGrammar, metadata_path

_NEWLINE = 0x0A


def decimal_rows(text: bytes, rows: int, cols: int, col_sep: bytes, row_sep: bytes) -> np.ndarray | None:
    """``rows`` × ``cols`` unsigned integers (uint64) from ``text``: decimal numbers of ASCII
    digits, ``col_sep`` between the numbers of a row and ``row_sep`` between rows; None if
    ``text`` is anything else. Leading zeros read as Python's ``int`` reads them; a number
    past 2**64 - 1 reads as 2**64 - 1 (strtoull's saturation: outside any grid)."""
    count = rows * cols
    if count == 0:
        return np.zeros((rows, cols), np.uint64) if not text else None
    raw = np.frombuffer(text, np.uint8)
    between = np.flatnonzero((raw - np.uint8(0x30)) >= 10)  # wraps below '0': every byte not a digit
    if between.size != count - 1:
        return None
    expected = np.full(count - 1, col_sep[0], np.uint8)
    expected[cols - 1 :: cols] = row_sep[0]
    if not np.array_equal(raw[between], expected):
        return None
    if count > 1 and (between[0] == 0 or between[-1] == raw.size - 1 or np.diff(between).min() < 2):
        return None  # an empty number: a separator first, last, or after another
    if count == 1 and raw.size == 0:
        return None
    # every byte now a digit or a separator where one belongs: numpy's text reader (C's
    # strtoull per number) reads exactly these numbers
    values = np.fromstring(text.replace(row_sep, col_sep), dtype=np.uint64, sep=col_sep.decode())
    return values.reshape(rows, cols) if values.size == count else None


@dataclass
class ArrayKeys:
    """The chunk keys of one array in a manifest: the runs of the refs' keys they make
    (``spans``, in the refs' order), their values, and, when every key is
    ``<path>/c<sep>i<sep>j...``, the digits of their grid indices, a line per key
    (``b"0/12\\n0/13"``); else ``tails`` is None and the key-by-key route reads them."""

    path: str
    spans: list[tuple[int, int]]
    values: list[Any]
    tails: bytes | None

    def key_tails(self, keys: list[str]) -> list[str]:
        """Each key below the array (``c/0/12``), for the key-by-key route."""
        cut = len(self.path) + 1 if self.path else 0
        return [keys[i][cut:] for begin, stop in self.spans for i in range(begin, stop)]


class RefKeys:
    """The keys of a refs object joined into one text (``\\n`` before each key and at the
    end), with the position of each key's newline. Made only where no key holds a newline."""

    def __init__(self, keys: list[str], text: bytes) -> None:
        self.keys = keys
        self.text = text
        self.starts = np.flatnonzero(np.frombuffer(text, np.uint8) == _NEWLINE)  # len(keys) + 1

    @classmethod
    def of(cls, refs: Mapping[Any, Any]) -> RefKeys | None:
        keys = list(refs)
        if not keys:
            return None
        try:
            joined = "\n".join(keys)
        except TypeError:  # a key that is not a string
            return None
        if joined.count("\n") != len(keys) - 1:
            return None
        return cls(keys, ("\n" + joined + "\n").encode("utf-8", "surrogatepass"))

    def has_segment_starting(self, start: str) -> bool:
        """Whether a segment of some key (between ``/``) starts with ``start``."""
        encoded = start.encode("utf-8", "surrogatepass")
        return b"/" + encoded in self.text or b"\n" + encoded in self.text

    def metadata_keys(self) -> list[tuple[int, str, str]]:
        """(index, key, node path) of each metadata key (``zarr.json``, ``<path>/zarr.json``),
        in the refs' order."""
        needle = (METADATA + "\n").encode()
        text, found, at = self.text, [], self.text.find(needle)
        while at >= 0:
            start = text.rfind(b"\n", 0, at) + 1
            key = text[start : at + len(needle) - 1].decode("utf-8", "surrogatepass")
            path = metadata_path(key)
            if path is not None:
                found.append((start, key, path))
            at = text.find(needle, at + len(needle) - 1)
        indices = np.searchsorted(self.starts, [start - 1 for start, _, _ in found]).tolist()
        return [(index, key, path) for index, (_, key, path) in zip(indices, found, strict=True)]

    def _run_end(self, begin: int, needle: bytes) -> int:
        """The end of the run of keys from ``begin`` (which starts with ``needle[1:]``)
        that all start with it: galloping, then halving, each step one ``bytes.count``."""
        text, starts, end = self.text, self.starts, len(self.keys)
        good, step = begin + 1, 1
        while good < end:
            probe = min(good + step, end)
            if text.count(needle, int(starts[good]), int(starts[probe])) == probe - good:
                good, step = probe, step * 2
                continue
            while probe - good > 1:  # [.., good) start with the needle; one of [good, probe) does not
                middle = (good + probe) // 2
                if text.count(needle, int(starts[good]), int(starts[middle])) == middle - good:
                    good = middle
                else:
                    probe = middle
            return good
        return good

    def array_keys(
        self, values: list[Any], metadata: set[int], grammar: KeyGrammar, nodes: Mapping[str, Any]
    ) -> dict[str, ArrayKeys] | None:
        """The chunk keys of each array (in the order each array first appears), or None
        where this does not read them as the grammar would: a node below an array, an array
        whose chunk keys are not the ``default`` encoding's, or a key that lies below no
        array (the key-by-key route names it). ``values`` are the refs' values, in order;
        ``metadata`` the indices of the metadata keys."""
        arrays = grammar.arrays
        if any(encoding.name != "default" for encoding, _ in arrays.values()) or _below_an_array(arrays, nodes):
            return None
        runs: dict[str, list[tuple[int, int]]] = {}
        needles: dict[str, bytes] = {}
        by_key: set[str] = set()  # arrays with a key the runs do not read
        text, starts, keys = self.text, self.starts, self.keys
        at, end = 0, len(keys)
        while at < end:
            if at in metadata:
                at += 1
                continue
            split = grammar.split_chunk_key(keys[at])
            if split is None:
                return None
            path = split[0]
            encoding, ndim = arrays[path]
            needle = needles.get(path)
            if needle is None:
                prefix = (path + "/" if path else "") + encoding.tail_prefix()
                needle = needles[path] = ("\n" + prefix).encode("utf-8", "surrogatepass")
            if ndim and text.startswith(needle, int(starts[at])):
                stop = self._run_end(at, needle)
            else:  # a 0-d array's key, or a key below the array that is none of its chunk keys
                stop = at + 1
                by_key.add(path)
            runs.setdefault(path, []).append((at, stop))
            at = stop
        found: dict[str, ArrayKeys] = {}
        for path, spans in runs.items():
            chunk_values = values[spans[0][0] : spans[0][1]]
            for begin, stop in spans[1:]:
                chunk_values += values[begin:stop]
            tails = None
            if path not in by_key:
                joined = b"".join(text[int(starts[begin]) : int(starts[stop])] for begin, stop in spans)
                tails = joined.replace(needles[path], b"\n")[1:]
            found[path] = ArrayKeys(path, spans, chunk_values, tails)
        return found


def _below_an_array(arrays: Mapping[str, Any], nodes: Mapping[str, Any]) -> bool:
    """Whether a node lies below an array (a key below that array may then be the node's:
    the grammar's own search decides)."""
    if "" in arrays:
        return len(nodes) > 1
    for node in nodes:
        cut = node.find("/")
        while cut > 0:
            if node[:cut] in arrays:
                return True
            cut = node.find("/", cut + 1)
    return False


@dataclass(frozen=True)
class ReferenceColumns:
    """The values of an array's chunk keys when all are ``[url, offset, length]``."""

    urls: list[str]  # the distinct URLs, in the order they first appear
    url_of_each: list[str] | None  # each chunk's URL; None when there is one
    offsets: np.ndarray  # uint64
    lengths: np.ndarray  # uint64


def reference_columns(values: list[Any]) -> ReferenceColumns | None:
    """The columns of ``values`` if every one is ``[url, offset, length]`` with a string URL
    and integer offset and length in [0, 2**64); None otherwise."""
    if not values or set(map(type, values)) != {list}:
        return None
    try:
        distinct = set(map(_FIRST, values))
    except (IndexError, TypeError):  # an empty list, or a list where the URL goes
        return None
    if len(distinct) == 1:
        return _one_url_columns(values, distinct.pop())
    if set(map(len, values)) != {3} or not all(type(url) is str for url in distinct):
        return None
    flat = list(itertools.chain.from_iterable(values))
    urls = flat[0::3]
    offsets = _uint64_column(flat[1::3])
    lengths = _uint64_column(flat[2::3])
    if offsets is None or lengths is None:
        return None
    return ReferenceColumns(list(dict.fromkeys(urls)), urls, offsets, lengths)


_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)
_DIGITS = b"0123456789"


def _one_url_columns(values: list[Any], url: Any) -> ReferenceColumns | None:
    """The columns of lists whose first item is ``url``, checked on their JSON text: with
    its digits taken out, ``[[url,1,2],[url,3,4]]`` must read ``[[url,,],[url,,]]``, which
    only lists of exactly three items whose second and third are non-negative integers
    give (orjson writes a bool, a float, a negative number or a string with some other
    character; refuses an integer past 64 bits and, asked to, a subclass of int or str).
    So no check of each item in Python."""
    if type(url) is not str:
        return None
    try:
        text = orjson.dumps(values, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except TypeError:
        return None
    item = b"[" + orjson.dumps(url).translate(None, _DIGITS) + b",,]"
    if text.translate(None, _DIGITS) != b"[" + (item + b",") * (len(values) - 1) + item + b"]":
        return None
    count = len(values)
    offsets = np.fromiter(map(_SECOND, values), np.uint64, count)
    lengths = np.fromiter(map(_THIRD, values), np.uint64, count)
    return ReferenceColumns([url], None, offsets, lengths)


def _uint64_column(column: list[Any]) -> np.ndarray | None:
    """Integers (not bools, not floats) in [0, 2**64) as uint64."""
    if set(map(type, column)) != {int}:
        return None
    try:
        return np.fromiter(column, np.uint64, len(column))
    except OverflowError:
        return None


def grid_flat_indices(tails: bytes, count: int, encoding: KeyEncoding, grid: tuple[int, ...]) -> np.ndarray | None:
    """The flat C-order indices of ``count`` keys' tails (digits only, a line per key), or
    None where one is not a grid index of ``grid``."""
    index = decimal_rows(tails, count, len(grid), encoding.separator.encode(), b"\n")
    if index is None or (index >= np.asarray(grid, dtype=np.uint64)).any():
        return None
    return np.asarray(np.ravel_multi_index(tuple(index.astype(np.int64).T), grid), dtype=np.int64)
