"""Data flows one way: scan → manifest → store → readers. The reader side (``h5lens.read``,
``h5lens.store``, ``h5lens.manifest``, ``h5lens.validation``) imports neither h5py nor the
scanner, so a reader-only install opens and reads manifests without them."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np

import h5lens

READER_MODULES = [
    "h5lens.store",
    "h5lens.read.open",
    "h5lens.read.navigate",
    "h5lens.read.anndata",
    "h5lens.read.whole",
    "h5lens.read.check",
    "h5lens.manifest",
    "h5lens.manifest.refs_json",
    "h5lens.validation",
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
