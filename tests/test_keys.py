"""Escaped keys, per the "Escaped keys" section of the anndata on-disk format spec."""

from __future__ import annotations

import ntpath
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5lens.errors import InvalidKeyError
from h5lens.format.keys import escape_key, is_reserved_key, needs_escaping, unescape_key

# Written out independently of the implementation.
FORBIDDEN = set('/\\:*?"<>|') | {chr(i) for i in range(0x20)}
ESCAPED = FORBIDDEN | {"%"}

# Text that hits the interesting cases far more often than st.text() alone.
TRICKY_ALPHABET = list(
    '%/\\:*?"<>|. _$'
    "CONnulAUXPRTLcom019\u00b9\u00b2\u00b3zarjs.json"
    "0123456789ABCDEFabcdefG"
    "\x00\x1f\n\x7f\u00e9\u03b2\u0131"
)
tricky_text = st.text(alphabet=st.sampled_from(TRICKY_ALPHABET), max_size=12)
keys = st.one_of(st.text(), tricky_text)


def wrap_all_form(key: str) -> str:
    """What a writer that wraps every key (allowed by the spec) stores for *key*."""
    escaped = escape_key(key)
    return escaped if is_reserved_key(key) else f"%{escaped}%"


# --- examples from the spec -------------------------------------------------

SPEC_EXAMPLES = [
    ("a/b", "a%2Fb"),
    ("a:b", "a%3Ab"),
    ("CON", "%CON%"),
    ("CON%", "CON%25"),
    ("zarr.json", "%zarr.json%"),
    ("NUL.txt", "%NUL.txt%"),
    ("__x", "%__x%"),
    ("NUL.tar.gz", "%NUL.tar.gz%"),
    ("Foo", "Foo"),
    ("foo", "foo"),
    # further cases from the rules
    ("", "%%"),
    (".", "%.%"),
    ("..", "%..%"),
    ("...", "%...%"),
    ("a.", "%a.%"),
    ("a ", "%a %"),
    ("con", "%con%"),
    ("CON .txt", "%CON .txt%"),
    ("COM\u00b9", "%COM\u00b9%"),
    ("a/b.", "%a%2Fb.%"),
    ("__a/b", "%__a%2Fb%"),
    ("%", "%25"),
    ("%%", "%25%25"),
    ("%CON%", "%25CON%25"),
    ("100%", "100%25"),
    ("CON:", "CON%3A"),
    ("a\\b", "a%5Cb"),
    ('"<*?>|', "%22%3C%2A%3F%3E%7C"),
    ("tab\there", "tab%09here"),
    ("line\nbreak", "line%0Abreak"),
    ("esc\x1b", "esc%1B"),
    ("nul\x00", "nul%00"),
    ("del\x7f", "del\x7f"),
]


@pytest.mark.parametrize(("key", "stored"), SPEC_EXAMPLES)
def test_escape_examples(key: str, stored: str) -> None:
    assert escape_key(key) == stored
    assert needs_escaping(key) is (stored != key)
    assert unescape_key(stored) == key


@pytest.mark.parametrize("code", range(0x20))
def test_control_characters_are_escaped_upper_case(code: int) -> None:
    hexdigits = "0123456789ABCDEF"
    expected = "%" + hexdigits[code // 16] + hexdigits[code % 16]
    assert escape_key(f"x{chr(code)}y") == f"x{expected}y"


@pytest.mark.parametrize("char", list(" .-_#&+,;=@[]^`{}~'!()$\x7f\u00a0\u2028\u00e9\u00df"))
def test_other_characters_are_not_escaped(char: str) -> None:
    assert escape_key(f"a{char}b") == f"a{char}b"


RESERVED = [
    "", ".", "..", "....", "__", "__x", "__init__", "zarr.json", "zarr.json ",
    "a.", "a ", "x. ", "a b.", "%.",
    "CON", "con", "Con", "CON.txt", "CON .txt", "CON  ", "con.", "CON.a.b", "NUL.tar.gz",
    "PRN", "aux", "NUL", "nul.txt", "CONIN$", "conout$", "cOnIn$.x",
    "COM1", "com9", "COM\u00b9", "com\u00b2", "COM\u00b3", "COM1.a.b",
    "LPT1", "lpt9", "LPT\u00b9", "LPT\u00b2", "lpt\u00b3",
]
NOT_RESERVED = [
    "a", "_", "_x", "x__", "_ _", ".a", ".zattrs", ".zgroup", "a.b", "a .b", " a",
    "zarr.jsonx", "ZARR.JSON", "zarr.json.bak", "xzarr.json",
    " CON", "x.CON", "CON1", "CONX", "CON$", "CONIN", "CONOUT", "CON:", "CON%", "C0N",
    "NULL", "AUXILIARY", "PRN_", "COM", "COM0", "COM10", "COM\u2074", "LPT0", "LPT", "LPT10",
    "CON\u00a0", "CON\t", "%CON%", "%%", "%",
]


@pytest.mark.parametrize("key", RESERVED)
def test_reserved(key: str) -> None:
    assert is_reserved_key(key)
    stored = escape_key(key)
    assert stored.startswith("%") and stored.endswith("%") and len(stored) >= 2
    assert needs_escaping(key)


@pytest.mark.parametrize("key", NOT_RESERVED)
def test_not_reserved(key: str) -> None:
    assert not is_reserved_key(key)
    assert not escape_key(key).endswith("%")


ORDINARY = [
    "GAPDH", "ACTB", "CD8A", "HLA-DRB1", "MT-CO1", "RP11-34P13.7", "ENSG00000141510.17",
    "Zell\u00e9", "\u03b2-actin", "IL-2R\u03b1", "X_pca", "X_umap", "leiden_colors",
    "n_genes_by_counts", "obs", "var", "log1p", "Gene Symbol", "a.b.c", "_index",
    "\u65e5\u672c\u8a9e", "\U0001f9ec", "C\u00d8N", "CON\u00e9",
]


@pytest.mark.parametrize("key", ORDINARY)
def test_ordinary_names_are_untouched(key: str) -> None:
    assert escape_key(key) == key
    assert not needs_escaping(key)
    assert unescape_key(key) == key


# --- rejection ----------------------------------------------------------------

MALFORMED = [
    "%41",  # spec example: A is never escaped
    "%2f",  # spec example: lower-case hex
    "a%",  # spec example: stray %
    "%",
    "%%%",
    "%%%%",
    "%4",
    "a%2",
    "%G0",
    "%zz",
    "%%41",
    "%%25",
    "%2F%2f",
    "%CON",
    "CON%",
    "a%%b",
    "%20",  # space is not escaped
    '"a%',  # ends in % but does not start with one: not wrapped ('"' sorts before '%')
    " x%",
    "$%",
    "%7F",
    "%2E",
    "%a%2f%",  # wrapped, but with lower-case hex inside
    "%%41%",
    "%%%%%",
]
UNWRAPPED_RESERVED = [
    "", ".", "..", "a.", "a ", "__x", "zarr.json", "CON", "con", "nul.txt", "NUL.tar.gz",
    "COM\u00b9", "a%2Fb.", "__%2F",
]


@pytest.mark.parametrize("stored", MALFORMED)
def test_malformed_keys_are_rejected(stored: str) -> None:
    with pytest.raises(InvalidKeyError, match=re.escape(repr(stored))):
        unescape_key(stored)


@pytest.mark.parametrize("stored", UNWRAPPED_RESERVED + ["5.", "gE "])
def test_unwrapped_reserved_keys_read_as_themselves(stored: str) -> None:
    # The spec's reader only strips a wrap, unescapes and re-escapes: these pass step 3.
    key = unescape_key(stored)
    assert key == stored.replace("%2F", "/")
    assert escape_key(key).strip("%") == stored


@pytest.mark.parametrize("edge", ["!", "#", "$", "&", "a", "\u00e9"])
def test_only_percent_wraps_a_key(edge: str) -> None:
    """A key that starts and ends with the same character other than ``%`` is not wrapped:
    it reads as itself, and escaping it gives it back."""
    key = f"{edge}name{edge}"
    assert escape_key(key) == key
    assert unescape_key(key) == key


def test_invalid_key_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        unescape_key("%41")


# The spec lets a writer wrap every key ("a writer may wrap every key it writes"),
# so a wrapped key that is not reserved is still valid.
WRAPPED_NOT_RESERVED = [
    ("%abc%", "abc"),
    ("%a%2Fb%", "a/b"),
    ("%25%", "25"),
    ("%41%", "41"),
    ("%%25%", "%"),
    ("%Zell\u00e9%", "Zell\u00e9"),
    ("%%25CON%25%", "%CON%"),
]


@pytest.mark.parametrize(("stored", "key"), WRAPPED_NOT_RESERVED)
def test_wrapped_unreserved_keys_are_accepted(stored: str, key: str) -> None:
    assert unescape_key(stored) == key
    assert wrap_all_form(key) == stored


# --- properties ----------------------------------------------------------------


@settings(max_examples=500)
@given(keys)
def test_round_trip(key: str) -> None:
    assert unescape_key(escape_key(key)) == key


@settings(max_examples=500)
@given(keys)
def test_wrap_all_writer_round_trips(key: str) -> None:
    assert unescape_key(wrap_all_form(key)) == key


@settings(max_examples=500)
@given(keys)
def test_escaped_key_shape(key: str) -> None:
    stored = escape_key(key)
    reserved = is_reserved_key(key)
    assert not FORBIDDEN & set(stored)
    assert "/" not in stored
    assert not is_reserved_key(stored)
    wrapped = len(stored) >= 2 and stored[0] == stored[-1] == "%"
    assert wrapped is reserved
    body = stored[1:-1] if wrapped else stored
    # every % in the body starts an upper-case escape sequence ...
    assert re.fullmatch(r"(?:[^%]|%[0-9A-F]{2})*", body, flags=re.DOTALL)
    # ... so an unwrapped key never ends in %
    if not wrapped:
        assert not stored.endswith("%")
    # escaping never changes whether a key is reserved
    assert is_reserved_key(body) is reserved
    # each escaped character becomes exactly three, wrapping adds two
    n_escaped = sum(c in ESCAPED for c in key)
    assert len(stored) == len(key) + 2 * n_escaped + 2 * reserved


@settings(max_examples=500)
@given(keys)
def test_needs_escaping_reference(key: str) -> None:
    expected = is_reserved_key(key) or any(c in ESCAPED for c in key)
    assert needs_escaping(key) is expected
    assert needs_escaping(key) is (escape_key(key) != key)


@settings(max_examples=300)
@given(keys)
def test_escaping_twice_only_escapes_percent(key: str) -> None:
    once = escape_key(key)
    twice = escape_key(once)
    assert twice == once.replace("%", "%25")
    assert unescape_key(twice) == once


@given(keys, keys)
def test_escape_is_injective(a: str, b: str) -> None:
    if a != b:
        assert escape_key(a) != escape_key(b)


@given(st.text(alphabet=st.characters(min_codepoint=0x80), min_size=1))
def test_non_ascii_is_never_escaped(key: str) -> None:
    assert escape_key(key) == key
    assert not needs_escaping(key)


@given(keys)
def test_non_ascii_characters_survive(key: str) -> None:
    def non_ascii(s: str) -> list[str]:
        return [c for c in s if ord(c) > 0x7F]

    assert non_ascii(escape_key(key)) == non_ascii(key)


@settings(max_examples=1000)
@given(keys)
def test_unescape_accepts_only_writer_output(stored: str) -> None:
    try:
        key = unescape_key(stored)
    except InvalidKeyError:
        return
    # step 3 of the spec's reader: the decoded key's characters re-escape to the stored body
    wrapped = len(stored) >= 2 and stored[0] == stored[-1] == "%"
    body = stored[1:-1] if wrapped else stored
    assert "".join(f"%{ord(c):02X}" if c in ESCAPED else c for c in key) == body


# CPython 3.13's ntpath.isreserved, for one name (Lib/ntpath.py, _isreservedname), carried
# here so the comparison runs on every Python (3.12 has no ntpath.isreserved).
_NT_RESERVED_CHARS = frozenset({chr(i) for i in range(32)} | set('"*:<>?|/\\'))
_NT_RESERVED_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"COM{c}" for c in "123456789\u00b9\u00b2\u00b3"}
    | {f"LPT{c}" for c in "123456789\u00b9\u00b2\u00b3"}
)


def nt_isreserved(name: str) -> bool:
    if name[-1:] in (".", " "):
        return name not in (".", "..")
    if _NT_RESERVED_CHARS.intersection(name):
        return True
    return name.partition(".")[0].rstrip(" ").upper() in _NT_RESERVED_NAMES


@pytest.mark.skipif(not hasattr(ntpath, "isreserved"), reason="checks the carried rule against Python 3.13+")
@settings(max_examples=300)
@given(st.one_of(st.text(), tricky_text).filter(lambda k: k and "/" not in k and "\\" not in k))
def test_carried_rule_is_ntpath_isreserved(key: str) -> None:
    assert nt_isreserved(key) is ntpath.isreserved(key)


@pytest.mark.parametrize("key", [k for k in RESERVED + NOT_RESERVED + ORDINARY if k])
def test_device_examples_match_ntpath(key: str) -> None:
    # ntpath.isreserved also covers trailing periods/spaces and forbidden characters,
    # but knows nothing of zarr's rules.
    zarr_reserved = key.startswith("__") or key == "zarr.json" or set(key) == {"."}
    if not zarr_reserved and not FORBIDDEN & set(key):
        assert is_reserved_key(key) is nt_isreserved(key)


@settings(max_examples=500)
@given(st.one_of(st.text(), tricky_text).map(lambda k: k.upper()))
def test_device_rule_matches_ntpath(key: str) -> None:
    # Restrict to keys where only the device rule can apply: ntpath.isreserved also
    # flags forbidden characters and trailing periods/spaces, and knows nothing of zarr.
    if (
        not key
        or FORBIDDEN & set(key)
        or key.endswith((".", " "))
        or key.startswith("__")
        or key == "zarr.json"
    ):
        return
    assert is_reserved_key(key) is nt_isreserved(key)
