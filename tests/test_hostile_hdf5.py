"""Damaged and crafted HDF5 files (see hostile_files.py): indexing each either gives a
manifest whose every dataset reads as h5py reads it (or fails where h5py fails), or is
refused with an h5lens error naming the file or the HDF5 path, leaving nothing at the
destination. Never a hang, never a crash of the interpreter, never another exception."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile_files import build_corpus  # noqa: E402

CHECKER = Path(__file__).parent / "hostile_files.py"
TIMEOUT = 600  # the whole corpus; one case far past a few seconds is a hang


def _run(paths: list[Path], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), *map(str, paths)], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return build_corpus(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def reports(corpus) -> dict[str, dict]:
    """Every case checked in one child process; if it dies, each case alone, to name it."""
    by_file = {path.name: name for name, path in corpus.items()}
    try:
        result = _run(list(corpus.values()), TIMEOUT)
        lines = result.stdout.splitlines()
        complete = result.returncode == 0 and len(lines) == len(corpus)
    except subprocess.TimeoutExpired:
        complete = False
    if not complete:
        found: dict[str, dict] = {}
        for name, path in corpus.items():
            try:
                alone = _run([path], 120)
            except subprocess.TimeoutExpired:
                found[name] = {"outcome": "hang"}
                continue
            if alone.returncode != 0 or not alone.stdout.strip():
                found[name] = {"outcome": "crash", "returncode": alone.returncode, "stderr": alone.stderr[-2000:]}
            else:
                found[name] = json.loads(alone.stdout.splitlines()[-1])
        return found
    return {by_file[report["file"]]: report for report in map(json.loads, lines)}


def test_every_case_was_checked(corpus, reports):
    assert set(reports) == set(corpus)
    assert len(corpus) > 100, "the corpus lost its cases"


def test_no_case_hangs_crashes_or_loses_data(corpus, reports):
    failures = []
    for name, report in sorted(reports.items()):
        outcome = report["outcome"]
        if outcome == "refused":
            message = report["message"]
            if report["written"]:
                failures.append(f"{name}: refused but a manifest was written")
            if len(message.strip().splitlines()) != 1 or not (corpus[name].name in message or "/" in message):
                failures.append(f"{name}: the error names neither the file nor a path: {message!r}")
        elif outcome == "indexed":
            if report["mismatches"] or report["missing"]:
                failures.append(f"{name}: {report['mismatches'][:3]} missing {report['missing'][:3]}")
        else:
            failures.append(f"{name}: {report}")
    assert not failures, "\n".join(failures)


def test_intact_files_and_links_index_completely(reports):
    for name in ("earliest-intact", "latest-intact", "link-cycles", "external-links"):
        assert reports[name]["outcome"] == "indexed", reports[name]
        assert not reports[name]["unreadable"], reports[name]


def test_chunks_past_the_end_are_refused_naming_the_dataset(reports):
    """h5py fails reading such a chunk; a manifest pointing past the file would be refused by
    every reader: refused when indexing, naming the dataset."""
    for label in ("earliest", "latest"):
        report = reports[f"{label}-chunk-past-end"]
        assert report["outcome"] == "refused", report
        assert "/chunked" in report["message"], report


def test_overlapping_chunks_read_as_h5py_reads_them(reports):
    """Two chunks at one address (v1 B-tree: no checksums) read as h5py reads them. In the
    newer indexes the patched address breaks a checksum, and the file is refused (above)."""
    report = reports["earliest-chunk-overlaps"]
    assert report["outcome"] == "indexed" and not report["mismatches"], report


def test_damaged_global_heaps_are_refused_before_libhdf5_loops(reports):
    """libhdf5 never finishes parsing these collections (h5py hangs on them): refused,
    naming the object whose values they hold, before h5py touches them."""
    for kind, path in (("attribute", "/g (an attribute)"), ("dataset", "/strings")):
        for libver in ("earliest", "latest"):
            report = reports[f"heap-{kind}-{libver}"]
            assert report["outcome"] == "refused", report
            assert path in report["message"] and "global heap" in report["message"], report


def test_a_group_of_a_million_members(tmp_path):
    """Every member of a 10^6-member group is in the manifest, as h5py lists it (the walk
    lists a group in one link iteration: 17 s here, where per-member lookups took 299 s)."""
    import h5py

    import h5lens

    path = tmp_path / "wide.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["target"] = [1, 2, 3]
        wide = f.create_group("wide")  # kept: the link proxy does not keep the group open
        links = wide.id.links
        for i in range(1_000_000):  # the low-level call: h5py's g[name] = ... takes minutes
            links.create_soft(b"m%d" % i, b"/target")
    manifest = h5lens.index(path)
    root = h5lens.open(manifest)
    with h5py.File(path) as f:
        assert len(root["wide"]) == len(f["wide"]) == 1_000_000
        assert root["wide"].link("m999999").path == "/target"
        assert list(root["wide/m123456"][()]) == list(f["wide/m123456"][()])
