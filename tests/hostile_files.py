"""Damaged and crafted HDF5 files, and the check each must pass, run in a child process.

The corpus: truncations, zero bytes, random bytes behind the signature, bytes flipped in
the superblock and behind each metadata signature (object headers, B-trees, heaps,
symbol tables), link cycles, external links to missing or recursive files, a huge
attribute claim, chunks that overlap or point past the end of the file.

The check (``python hostile_files.py FILE...``) indexes each file and prints one JSON line
per file: ``refused`` (an h5lens error, its message, whether anything was written), or
``indexed`` with every dataset read back through the manifest and compared with h5py.
A child process, so that a crash of the interpreter or a hang is seen as such.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

# Signatures of HDF5 metadata structures (HDF5 file format specification, section III).
SIGNATURES = (
    b"OHDR", b"TREE", b"SNOD", b"HEAP", b"BTHD", b"BTIN", b"BTLF", b"FRHP", b"FHDB",
    b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB", b"EADB", b"GCOL",
)  # fmt: skip


def write_base(path: Path, *, latest: bool) -> None:
    """A file with each kind of storage: chunked (filtered, many chunks), contiguous,
    compact, strings, attributes, groups. ``latest``: the newer structures (v2 object
    headers, v2 B-trees, fractal heaps, extensible arrays)."""
    with h5py.File(path, "w", libver="latest" if latest else "earliest") as f:
        f.create_dataset("chunked", data=np.arange(4000, dtype="<i4").reshape(200, 20), chunks=(10, 20),
                         compression="gzip", shuffle=True)
        # 300 chunks: an extensible array's index block, super blocks and their data blocks
        f.create_dataset("growing", data=np.arange(300.0), chunks=(1,), maxshape=(None,))
        # 400 chunks: a v2 B-tree with internal nodes
        f.create_dataset("both_ways", data=np.arange(1600, dtype="<i2").reshape(40, 40), chunks=(2, 2),
                         maxshape=(None, None), compression="gzip")
        f.create_dataset("contiguous", data=np.linspace(0, 1, 1000))
        f.create_dataset("text", data=[f"item {i}" for i in range(50)], dtype=h5py.string_dtype())
        group = f.create_group("group")
        group.attrs["title"] = "a group"
        group.attrs["values"] = np.arange(20)
        for i in range(12):
            group.create_dataset(f"member{i}", data=np.full(5, i, dtype="i2"))


def _flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out)


def _patch_u64(data: bytes, old: int, new: int) -> bytes:
    """Replace every little-endian 8-byte occurrence of ``old`` by ``new``."""
    return data.replace(struct.pack("<Q", old), struct.pack("<Q", new))


def _chunk_offsets(path: Path, name: str) -> list[int]:
    with h5py.File(path) as f:
        dsid = f[name].id
        return [dsid.get_chunk_info(i).byte_offset for i in range(dsid.get_num_chunks())]


def build_corpus(root: Path) -> dict[str, Path]:
    """Every case of the corpus, by name (files made here, deterministically)."""
    cases: dict[str, Path] = {}

    def add(name: str, payload: bytes | Callable[[Path], None]) -> None:
        path = root / f"{name}.h5"
        if callable(payload):
            payload(path)
        else:
            path.write_bytes(payload)
        cases[name] = path

    earliest, latest = root / "base-earliest.h5", root / "base-latest.h5"
    write_base(earliest, latest=False)
    write_base(latest, latest=True)
    rng = np.random.default_rng(0)
    for label, base in (("earliest", earliest), ("latest", latest)):
        data = base.read_bytes()
        add(f"{label}-intact", data)
        for cut in (1, 8, 96, 2048, len(data) // 2, len(data) - 1):
            add(f"{label}-truncated-at-{cut}", data[:cut])
        for at in (8, 9, 13, 20, 24, 40, 44, 48, 56, 64, 72, 80, 90):  # the superblock's fields
            add(f"{label}-superblock-byte-{at}", _flip(data, at))
        for signature in SIGNATURES:
            found = data.find(signature)
            for nth, start in enumerate((found, data.find(signature, found + 4))):
                if start < 0:
                    continue
                for step in (4, 5, 8, 12, 17, 24):
                    if start + step < len(data):
                        add(f"{label}-{signature.decode()}{nth}-byte-{step}", _flip(data, start + step))
        add(f"{label}-random-after-signature", data[:8] + rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())

        offsets = _chunk_offsets(base, "chunked")
        past = len(data) + 4096
        add(f"{label}-chunk-past-end", _patch_u64(data, offsets[3], past))
        add(f"{label}-chunk-overlaps", _patch_u64(data, offsets[3], offsets[2]))

    add("zero-bytes", b"")
    add("signature-only", b"\x89HDF\r\n\x1a\n")
    add("random-bytes", rng.integers(0, 256, 8192, dtype=np.uint8).tobytes())

    def cycles(path: Path) -> None:
        with h5py.File(path, "w") as f:
            f["a"] = h5py.SoftLink("/b")
            f["b"] = h5py.SoftLink("/a")
            f["self"] = h5py.SoftLink("/self")
            f.create_group("g")
            f["g/up"] = f["/"]  # a hard link to the root: a cycle of groups
            f["g/loop"] = f["g"]
            f["g/data"] = np.arange(4)

    add("link-cycles", cycles)

    def external(path: Path) -> None:
        with h5py.File(path, "w") as f:
            f["missing"] = h5py.ExternalLink("no-such-file.h5", "/x")
            f["itself"] = h5py.ExternalLink(path.name, "/")
            f["data"] = np.arange(3)

    add("external-links", external)

    def huge_attribute(path: Path) -> None:
        """An attribute whose dataspace claims 2^28 elements (1 GiB) of a 64 KiB value."""
        with h5py.File(path, "w", libver="latest") as f:
            f["data"] = np.arange(3)
            f["data"].attrs.create("big", np.zeros(16_411, dtype="<i4"))  # an unusual count to find
        data = path.read_bytes()
        assert data.count(struct.pack("<Q", 16_411)) >= 1
        path.write_bytes(_patch_u64(data, 16_411, 1 << 28))

    add("huge-attribute-claim", huge_attribute)

    # Global heap collections libhdf5 would parse forever (size flipped so that the walk
    # lands on zero padding: free space of no size) or past the file's end, holding only
    # attribute values or only a chunked, deflated dataset's values.
    def heap_holding(kind: str, libver: str) -> Callable[[Path], None]:
        def write(path: Path) -> None:
            with h5py.File(path, "w", libver=libver) as f:
                if kind == "attribute":
                    f.create_group("g").attrs["note"] = "x" * 40
                    f["g"].attrs["notes"] = np.array(["a", "bb", "ccc"], dtype=h5py.string_dtype())
                else:
                    f.create_dataset("strings", data=[f"s{i}" for i in range(100)], dtype=h5py.string_dtype(),
                                     chunks=(10,), compression="gzip", shuffle=True)
            data = path.read_bytes()
            at = data.find(b"GCOL")
            assert at > 0
            path.write_bytes(data[: at + 8] + bytes([data[at + 8] ^ 0xFF]) + data[at + 9 :])

        return write

    for kind in ("attribute", "dataset"):
        for libver in ("earliest", "latest"):
            add(f"heap-{kind}-{libver}", heap_holding(kind, libver))
    return cases


# -- the check, in a child process ------------------------------------------------------------


def _values_equal(expected: object, actual: object) -> bool:
    expected_array, actual_array = np.asarray(expected), np.asarray(actual)
    if expected_array.dtype.kind == "O" or actual_array.dtype.kind == "O":
        norm = np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])
        return expected_array.shape == actual_array.shape and bool(
            np.all(norm(expected_array) == norm(actual_array))
        )
    return expected_array.shape == actual_array.shape and bool(np.array_equal(expected_array, actual_array, equal_nan=True))


def h5py_reads_everything(path: Path) -> str | None:
    """None if h5py reads every object, attribute and dataset of the file; else what failed."""
    try:
        with h5py.File(path, "r") as f:
            def visit(name: str, obj: h5py.HLObject) -> None:
                for key in obj.attrs:
                    obj.attrs[key]  # noqa: B018 - reading is the check
                if isinstance(obj, h5py.Dataset):
                    obj[()]  # noqa: B018

            visit("/", f)
            f.visititems(visit)
    except Exception as e:  # noqa: BLE001 - whatever h5py raises, it cannot read the file
        return f"{type(e).__name__}: {e}"
    return None


def _index_at_the_command_line(path: Path, out: Path) -> tuple[int, str]:
    """``h5lens index PATH -o OUT`` as a user runs it (in this process): exit status, stderr."""
    import contextlib
    import io

    from h5lens.cli import main as cli_main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli_main(["index", str(path), "-o", str(out)])
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
    return status, err.getvalue()


def check(path: Path) -> dict[str, object]:
    import h5lens

    out = path.with_suffix(".json")
    before = set(path.parent.iterdir())
    status, stderr = _index_at_the_command_line(path, out)
    if status != 0:
        left = sorted(p.name for p in set(path.parent.iterdir()) - before)
        return {"outcome": "refused", "status": status, "message": stderr.strip(), "written": left}
    report: dict[str, object] = {"outcome": "indexed", "mismatches": [], "unreadable": []}
    datasets: list[str] = []
    try:
        with h5py.File(path) as f:
            f.visititems(lambda name, obj: datasets.append("/" + name) if isinstance(obj, h5py.Dataset) else None)
    except Exception as e:  # noqa: BLE001 - h5py cannot list it all: compare what the manifest holds
        report["h5py_listing"] = f"{type(e).__name__}: {e}"
    root = h5lens.open(out)
    held = {p for p, node in root.walk() if isinstance(node, h5lens.Dataset)}
    report["missing"] = sorted(set(datasets) - held)
    with h5py.File(path) as f:
        for name in sorted(held):
            try:
                expected = f[name][()]
            except Exception as e:  # noqa: BLE001 - h5py cannot read it: h5lens must not either
                expected = e
            try:
                actual = root[name][()]
            except h5lens.H5LensError as e:
                actual = e
            if isinstance(expected, Exception) or isinstance(actual, Exception):
                if not (isinstance(expected, Exception) and isinstance(actual, Exception)):
                    report["mismatches"].append(f"{name}: h5py {expected!r:.120} / h5lens {actual!r:.120}")
                else:
                    report["unreadable"].append(name)
            elif not _values_equal(expected, actual):
                report["mismatches"].append(f"{name}: values differ")
    return report


def main(paths: list[str]) -> None:
    warnings.simplefilter("ignore")
    if paths[:1] == ["--h5py"]:  # what h5py makes of each file (libhdf5 may loop: a child of its own)
        for name in paths[1:]:
            print(json.dumps({"file": Path(name).name, "h5py_fails": h5py_reads_everything(Path(name))}), flush=True)
        return
    for name in paths:
        path = Path(name)
        print(json.dumps({"file": path.name, **check(path)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(0)  # h5py's atexit handlers on a damaged file are not what is tested
