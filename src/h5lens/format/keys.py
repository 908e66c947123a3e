"""anndata's escaped keys (the "Escaped keys" section of the on-disk format spec).

A key is escaped by replacing each of ``/ \\ : * ? " < > |``, the control
characters 0x00-0x1F and ``%`` itself with ``%XX`` (upper-case hex), and then
wrapping the result in ``%...%`` if the key is reserved (``CON`` -> ``%CON%``).
Nothing else is touched, so non-ASCII names stay legible.

Escaping never changes whether a key is reserved (it only rewrites characters
that no reserved form depends on), so "reserved" can be judged on the original
key or on the escaped characters alike.
"""

from __future__ import annotations

import re

from h5lens.errors import InvalidKeyError

__all__ = ["is_reserved_key", "needs_escaping", "escape_key", "unescape_key", "zarr_node_name"]

_ESCAPED_CHARS = frozenset('/\\:*?"<>|%' + "".join(map(chr, range(0x20))))
_ESCAPE_TABLE = {ord(c): f"%{ord(c):02X}" for c in _ESCAPED_CHARS}
_ESCAPE_SEQUENCE = re.compile("%([0-9A-Fa-f]{2})")

_SUFFIXES = "123456789\u00b9\u00b2\u00b3"  # 1-9, superscript 1, 2, 3
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"COM{s}" for s in _SUFFIXES}
    | {f"LPT{s}" for s in _SUFFIXES}
)


def is_reserved_key(key: str) -> bool:
    """Whether *key* is reserved and must therefore be stored wrapped in ``%``.

    Reserved are: the empty key, keys of only periods, keys starting with
    ``__``, ``zarr.json`` (all reserved by zarr v3), keys ending in a period or
    a space, and Windows device names: the part before the first period, with
    trailing spaces stripped, is case-insensitively one of CON, PRN, AUX, NUL,
    CONIN$, CONOUT$, COM1-COM9, COM¹-COM³, LPT1-LPT9, LPT¹-LPT³
    (so ``NUL.tar.gz`` is reserved, as with ``ntpath.isreserved``).
    """
    if key in ("", "zarr.json") or key.startswith("__") or key.endswith((".", " ")):
        # "only periods" is covered by "ends in a period"
        return True
    # str.upper() as ntpath.isreserved does
    return key.partition(".")[0].rstrip(" ").upper() in _WINDOWS_DEVICES


def _escape_chars(key: str) -> str:
    return key.translate(_ESCAPE_TABLE)


def escape_key(key: str) -> str:
    """Escape *key* for use as a child name in HDF5 or zarr.

    Each of ``/ \\ : * ? " < > |``, 0x00-0x1F and ``%`` becomes ``%XX``; the
    result is wrapped in ``%`` on both ends iff *key* is reserved
    (``a/b`` -> ``a%2Fb``, ``CON`` -> ``%CON%``, ``CON%`` -> ``CON%25``,
    ``""`` -> ``%%``). Reserved keys are the only ones wrapped.
    """
    escaped = _escape_chars(key)
    return f"%{escaped}%" if is_reserved_key(key) else escaped


def needs_escaping(key: str) -> bool:
    """Whether *key* is stored under a different name, i.e. ``escape_key(key) != key``."""
    return escape_key(key) != key


def unescape_key(key: str) -> str:
    """Recover the original key from an escaped *key*, exactly as the spec's reader MUST:

    1. strip a ``%`` from both ends if *key* is at least two characters long
       and starts and ends with ``%``;
    2. replace each ``%XX`` with the character of code point 0xXX;
    3. reject the key if escaping the result's characters does not give back
       the key from step 1 (``%41``, ``%2f``, ``a%``, a stray ``%``).

    Nothing else is rejected: a stored key that is reserved but not wrapped (``5.``,
    ``gE ``, ``CON``) reads as itself, since its characters re-escape to themselves;
    a wrapped key that is not reserved (``%abc%``) is accepted, since the spec lets a
    writer wrap every key.

    Raises:
        InvalidKeyError: if step 3 rejects *key*.
    """
    wrapped = len(key) >= 2 and key[0] == key[-1] == "%"
    inner = key[1:-1] if wrapped else key
    result = _ESCAPE_SEQUENCE.sub(lambda m: chr(int(m[1], 16)), inner)
    if _escape_chars(result) != inner:
        raise InvalidKeyError(
            f"invalid escaped key {key!r}: escaping its decoded form {result!r} gives "
            f"{_escape_chars(result)!r}, not {inner!r} (only '%' followed by two upper-case "
            "hex digits of an escaped character may appear)"
        )
    return result


def zarr_node_name(name: str) -> bool:
    """Whether zarr v3 holds ``name`` as a node name as it is (the walk escapes every HDF5
    name; a profile gives a name back where this allows)."""
    return bool(name) and "/" not in name and name.strip(".") != "" and not name.startswith("__") and name != "zarr.json"

