"""The real files written by other software, in ``shared/data`` beside the repository.

A clone of the repository alone has no ``shared/``: tests that need those files skip,
naming the directory. CI sets ``H5LENS_REQUIRE_SHARED_DATA=1``, which turns their
absence into a failure, so the real files are never skipped there without a word.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REQUIRED = os.environ.get("H5LENS_REQUIRE_SHARED_DATA", "") not in ("", "0")


def _missing(what: str) -> str:
    return f"{what} not found in {DATA} (the shared files lie beside the repository)"


def shared_names(pattern: str) -> list:
    """Parameters for the shared files matching ``pattern``: one skipped parameter if none."""
    names = sorted(p.name for p in DATA.glob(pattern)) if DATA.is_dir() else []
    if names:
        return names
    if REQUIRED:
        raise RuntimeError(_missing(f"files matching {pattern!r}"))
    return [pytest.param(None, marks=pytest.mark.skip(reason=_missing(f"files matching {pattern!r}")))]


def shared_file(name: str) -> Path:
    """The path of one shared file; skips (or, in CI, fails) when it is absent."""
    path = DATA / name
    if not path.is_file():
        if REQUIRED:
            pytest.fail(_missing(name))
        pytest.skip(_missing(name))
    return path
