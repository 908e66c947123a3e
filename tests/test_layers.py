"""Data flows one way: scan → manifest → store → readers. The reader side (``h5lens.read``,
``h5lens.store``, ``h5lens.manifest``, ``h5lens.read.validation``) imports neither h5py nor the
scanner, so a reader-only install opens and reads manifests without them."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens

READER_MODULES = [
    "h5lens.store",
    "h5lens.engine.reader",
    "h5lens.engine.source",
    "h5lens.read.open",
    "h5lens.read.consolidated",
    "h5lens.engine.text",
    "h5lens.read.navigate",
    "h5lens.adata.readers",
    "h5lens.read.whole",
    "h5lens.read.check",
    "h5lens.manifest",
    "h5lens.manifest.tables",
    "h5lens.manifest.checks",
    "h5lens.manifest.refs_json",
    "h5lens.manifest.compact",
    "h5lens.manifest.files",
    "h5lens.manifest.io",
    "h5lens.manifest.model",
    "h5lens.read.validation",
    "h5lens.fetch",
]


def test_reading_a_manifest_imports_neither_h5py_nor_the_scanner(tmp_path):
    source = tmp_path / "x.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("values", data=np.arange(100.0), chunks=(10,), compression="gzip", compression_opts=1)
        f.create_dataset("empty", data=h5py.Empty("f8"))
    h5lens.index(source, inline_threshold=0).to_json(tmp_path / "x.json")
    # A reader-only install: importing h5py or the scanner fails, as it would without them.
    script = f"""
import sys, json
class ReaderOnly:
    def find_spec(self, name, path=None, target=None):
        if name == "h5py" or name.startswith(("h5py.", "h5lens.scan")) or name == "h5lens.api":
            raise ImportError(f"{{name}} is not installed in a reader-only environment")
sys.meta_path.insert(0, ReaderOnly())
{chr(10).join(f"import {m}" for m in READER_MODULES)}
import h5lens
group = h5lens.open_group({str(tmp_path / "x.json")!r})
values = group["values"][...].tolist()
root = h5lens.read.navigate.open({str(tmp_path / "x.json")!r})
empty = repr(root["empty"][()])
problems = h5lens.validate({str(tmp_path / "x.json")!r}, deep=True)
loaded = sorted(m for m in sys.modules if m == "h5py" or m.startswith(("h5py.", "h5lens.scan")) or m == "h5lens.api")
print(json.dumps({{"values": values, "empty": empty, "problems": len(problems), "loaded": loaded}}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["loaded"] == [], f"the reader side imported {found['loaded']}"
    assert found["values"] == np.arange(100.0).tolist() and found["problems"] == 0
    assert found["empty"].startswith("Empty(dtype=")  # h5py.Empty's stand-in without h5py


# One child interpreter imports the third-party libraries once, then forks a fresh process
# per h5lens module: each module is imported on its own (no h5lens module loaded before it),
# in milliseconds instead of an interpreter start each.
_EACH_ALONE = """
import importlib, json, os, sys
import h5py, numcodecs, numpy, zarr  # the heavy third-party imports, shared by every fork
assert not [m for m in sys.modules if m == "h5lens" or m.startswith("h5lens.")]
failures = {}
for name in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            message = ""
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            message = f"{type(e).__name__}: {e}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    if message:
        failures[name] = message
print(json.dumps(failures))
"""


def test_every_module_imports_on_its_own():
    """Every h5lens module imports in a fresh process on its own (no import cycle that works
    only by statement order)."""
    import pkgutil

    import h5lens as package

    names = sorted(m.name for m in pkgutil.walk_packages(package.__path__, "h5lens."))
    assert "h5lens.scan.build" in names and "h5lens.store" in names
    assert "h5lens.scan.hdf5.walk" in names and "h5lens.scan.hdf5.extensible_array" in names  # subpackages too
    result = subprocess.run([sys.executable, "-c", _EACH_ALONE, *names], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert failures == {}


# -- import circles ----------------------------------------------------------------------
# A circle of imports works only while some import in it stays inside a function, and breaks
# (a half-initialised module) as soon as one is moved to the top or imported first from
# elsewhere. The packages listed here form a one-way chain: all of h5lens does.
ONE_WAY_PACKAGES = ["h5lens"]


def _imports(tree: ast.Module, package: str, modules: Collection[str]) -> set[str]:
    """The modules of ``modules`` that an ``import`` anywhere in ``tree`` names: inside
    functions too, and under ``if TYPE_CHECKING:`` (a circle a type checker walks is a
    circle a reader of the code walks). ``from a import b`` names the module ``a.b`` where
    there is one, else ``a``. ``package``: where relative imports start."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found & set(modules)


def _import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules it imports, for every module of the package at ``root``."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _imports(ast.parse(path.read_text(), str(path)), package, files) - {name}
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """The shortest import path from ``start`` back to itself, or None."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if target not in previous:
                    previous[target] = module
                    following.append(target)
        frontier = following
    return None


def test_import_graph_sees_every_kind_of_import():
    """The graph below counts imports at the top, in functions, relative and ``from``
    imports, and what only a type checker reads; a circle is found as a path."""
    source = """
from typing import TYPE_CHECKING
import h5lens.a
from h5lens import b
from h5lens.c import name
from . import d
if TYPE_CHECKING:
    from h5lens import e
else:
    from h5lens import f
def later():
    from .g import thing
"""
    modules = {f"h5lens.{m}" for m in "abcdefg"} | {"h5lens"}
    found = _imports(ast.parse(source), "h5lens", modules)
    assert found == {"h5lens.a", "h5lens.b", "h5lens.c", "h5lens.d", "h5lens.e", "h5lens.f", "h5lens.g"}
    graph = {"h5lens.a": {"h5lens.b"}, "h5lens.b": {"h5lens.c"}, "h5lens.c": {"h5lens.a", "h5lens.b"}}
    assert _cycle_through(graph, "h5lens.a") == ["h5lens.a", "h5lens.b", "h5lens.c", "h5lens.a"]
    assert _cycle_through({"h5lens.a": {"h5lens.b"}, "h5lens.b": set()}, "h5lens.a") is None


@pytest.mark.parametrize("prefix", ONE_WAY_PACKAGES)
def test_no_import_circles(prefix):
    """No module of ``prefix`` lies on an import circle, lazy (function-level) imports and
    those under ``TYPE_CHECKING`` included: the package is a one-way chain, and so is its way to the rest of h5lens."""
    graph = _import_graph(Path(h5lens.__file__).parent)  # the sources of the h5lens under test
    inside = sorted(m for m in graph if m == prefix or m.startswith(prefix + "."))
    assert inside, f"no module of {prefix} found"
    cycles = [cycle for cycle in (_cycle_through(graph, m) for m in inside) if cycle]
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)
