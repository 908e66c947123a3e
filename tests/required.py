"""Real components the tests start (Node and the codec pack's packages, Chromium, LINDI's
venv, the storage emulators): where one is missing its tests skip, saying what is missing,
and where CI requires it (an ``H5LENS_REQUIRE_*`` variable set) they fail instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

JS = Path(__file__).resolve().parents[1] / "js"


def required(variable: str) -> bool:
    """Whether CI requires the component ``variable`` names (set, and not "0")."""
    return os.environ.get(variable, "") not in ("", "0")


def missing(reason: str, variable: str) -> NoReturn:
    """Skip saying ``reason``; fail instead where ``variable`` requires the component."""
    if required(variable):
        pytest.fail(f"{reason}, and {variable} is set")
    pytest.skip(reason)


def js_packages_missing() -> str | None:
    """Why the codec pack's npm packages cannot be used, or None."""
    if not (JS / "node_modules" / "zarrita").is_dir():
        return "js/node_modules is missing: run `npm ci` in js/ (`make js`)"
    return None
