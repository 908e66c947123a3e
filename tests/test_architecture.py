"""docs/architecture.md describes the code as it is: its module table names every module of
``src/h5lens`` (packages' ``__init__.py`` too, and no module that is gone), and no module is
over 600 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "h5lens"
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 600


def _modules() -> set[str]:
    return {
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if "egg-info" not in p.parts
    }


def _table() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## Modules")
    return text[start : text.index("\n## ", start + 1)]


def _named() -> set[str]:
    """The modules the table names (a test it cites is not one)."""
    return {name for name in re.findall(r"`([a-z0-9_/]+\.py)`", _table()) if not name.startswith("tests/")}


def test_the_module_table_names_every_module():
    named = _named()
    missing = sorted(_modules() - named)
    assert not missing, f"docs/architecture.md's module table does not name: {missing}"


def test_the_module_table_names_no_module_that_is_gone():
    named = _named()
    gone = sorted(named - _modules())
    assert not gone, f"docs/architecture.md's module table names modules that do not exist: {gone}"


def test_no_module_is_over_600_lines():
    long = {name: n for name in sorted(_modules()) if (n := len((PACKAGE / name).read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
