"""A manifest file's JSON parsed at orjson's speed, a key given twice still refused.

A JSON object that names a key twice is ambiguous: which value a reader takes is
undefined, so a manifest that does it is refused. The json module finds repeats only
through ``object_pairs_hook`` (2x the time of orjson, which keeps the last value
silently). Here orjson parses, then two counts decide whether a key can have been
repeated: the keys written in the text (numpy over its bytes) and the keys of
the objects parsed. They agree only if no object repeats a key; where they do not (or
where orjson refuses the text: NaN tokens, integers past 64 bits), the json module parses
the text again with the hook, which names the repeated key or reports the syntax error.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson

from h5lens.errors import ManifestFormatError

_COLON, _QUOTE, _BACKSLASH = 0x3A, 0x22, 0x5C
_SPACES = np.array([0x20, 0x09, 0x0A, 0x0D], dtype=np.uint8)  # JSON's whitespace


def loads_unique(raw: bytes, location: str) -> Any:
    """The JSON value of ``raw``; :class:`ManifestFormatError` naming ``location`` if it is
    not JSON or an object in it gives a key twice."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _loads_with_hook(raw, location)
    if _keys_written(raw) != _keys_parsed(data):
        return _loads_with_hook(raw, location)
    return data


def _loads_with_hook(raw: bytes, location: str) -> Any:
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise ManifestFormatError(f"{location}: the key {e.args[0]!r} appears twice") from None
    except ValueError as e:
        raise ManifestFormatError(f"{location}: not a JSON manifest ({e})") from None
    except RecursionError:
        raise ManifestFormatError(f"{location}: not a JSON manifest (nested too deeply)") from None


def _keys_written(raw: bytes) -> int:
    """An upper bound of the object keys written in ``raw`` (valid JSON), exact but for
    strings that begin with ``:`` (or with whitespace and ``:``).

    A key ends with a closing quote, then ``:`` (whitespace between allowed). A quote that
    an odd run of backslashes precedes is escaped (``\\"`` inside a string, as in the
    zarr.json documents the refs hold as strings); after an unescaped closing quote, only
    a key has a colon. So the keys are the colons after an unescaped quote, whitespace
    between allowed, less those after an opening quote."""
    text = np.frombuffer(raw, np.uint8)
    colons = np.flatnonzero(text[1:] == _COLON) + 1
    before = text[colons - 1]
    quotes = colons[before == _QUOTE] - 1
    count = quotes.size
    behind, sign = quotes, -1  # inclusion and exclusion over the length of the backslash run
    for run in range(1, len(raw)):
        behind = behind[behind >= run]
        behind = behind[text[behind - run] == _BACKSLASH]
        if not behind.size:
            break
        count += sign * behind.size
        sign = -sign
    for colon in colons[np.isin(before, _SPACES)].tolist():  # `"key" : value`, rare
        at = colon - 1
        while at > 0 and text[at] in _SPACES:
            at -= 1
        count += bool(text[at] == _QUOTE and not _escaped(text, at))
    return count


def _escaped(text: np.ndarray, at: int) -> bool:
    """Whether the character at ``at`` follows an odd run of backslashes."""
    before = at
    while before > 0 and text[before - 1] == _BACKSLASH:
        before -= 1
    return (at - before) % 2 == 1


def _keys_parsed(data: Any) -> int:
    """A lower bound of the keys of the objects in ``data``: all of them, but for those of
    objects inside the values of the refs object (a chunk reference holds none; the few
    documents given as objects rather than strings then take the json module's route)."""
    if not isinstance(data, dict):
        return _all_keys(data)
    if data.get("version") is None:
        return len(data)  # a version 0 manifest is the refs object itself
    refs = data.get("refs")
    return len(data) + sum(
        (len(value) if value is refs and isinstance(value, dict) else _all_keys(value))
        for value in data.values()
    )


def _all_keys(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_all_keys(v) for v in value.values())
    if isinstance(value, list):
        return sum(_all_keys(v) for v in value if isinstance(v, dict | list))
    return 0


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out
