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


@pytest.fixture(scope="module")
def h5py_verdicts(corpus, reports) -> dict[str, str | None]:
    """For each refused case, whether h5py reads the file (None) or what it fails on. libhdf5
    loops forever on some damage h5lens refuses first: each file alone, a hang is a failure."""
    todo = [name for name, report in sorted(reports.items()) if report["outcome"] == "refused"]
    verdicts: dict[str, str | None] = {}
    while todo:
        # one child for the rest; a file it makes no progress on for STALL seconds is a hang
        verdicts_by_file: dict[str, str | None] = {}
        done = _h5py_verdicts([corpus[name] for name in todo], verdicts_by_file)
        for name in todo[:done]:
            verdicts[name] = verdicts_by_file[corpus[name].name]
        if done < len(todo):
            verdicts[todo[done]] = "libhdf5 does not finish reading it (or crashed)"
        todo = todo[done + 1 :]
    return verdicts


# seconds without a verdict on one small file (libhdf5 reads one in milliseconds): libhdf5 is
# looping. Too short only ever calls a slow read a failure of h5py's, which weakens, never
# breaks, the check that h5lens refuses only what h5py cannot read.
STALL = 2.0


def _h5py_verdicts(paths: list[Path], out: dict[str, str | None]) -> int:
    """Run ``hostile_files.py --h5py`` over ``paths`` in order; fill ``out`` and return how many
    files it judged before it finished, crashed or stalled."""
    import selectors

    child = subprocess.Popen(
        [sys.executable, str(CHECKER), "--h5py", *map(str, paths)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)
    judged = 0
    try:
        while judged < len(paths) and selector.select(STALL):
            line = child.stdout.readline()
            if not line:
                break  # the child ended (or crashed) early
            verdict = json.loads(line)
            out[verdict["file"]] = verdict["h5py_fails"]
            judged += 1
    finally:
        child.kill()
        child.wait()
    return judged


def _known_paths(corpus) -> set[str]:
    """Every HDF5 path of the corpus's intact files: what an error may name besides the file."""
    import h5py

    paths = {"/"}
    for name in ("earliest-intact", "latest-intact"):
        with h5py.File(corpus[name]) as f:
            f.visit(lambda key: paths.add("/" + key))
    return paths


def _names_the_file_or_a_path(message: str, filename: str, known: set[str]) -> bool:
    message = message.removeprefix("h5lens: error: ")
    if filename in message:
        return True
    # an HDF5 path of the file, as the first thing said ("/chunked: ...", "/g (an attribute): ...")
    words = message.split(":", 1)[0].split()
    return bool(words) and words[0] in known


def test_every_case_was_checked(corpus, reports):
    assert set(reports) == set(corpus)
    assert len(corpus) > 100, "the corpus lost its cases"


def test_no_case_hangs_crashes_or_loses_data(corpus, reports):
    failures = []
    known = _known_paths(corpus) | {"/g", "/strings", "/wide", "/data"}
    for name, report in sorted(reports.items()):
        outcome = report["outcome"]
        if outcome == "refused":
            message = report["message"]
            if report["status"] != 2:
                failures.append(f"{name}: exit status {report['status']}, not 2")
            if report["written"]:
                failures.append(f"{name}: refused but left {report['written']}")
            if len(message.strip().splitlines()) != 1 or not _names_the_file_or_a_path(message, corpus[name].name, known):
                failures.append(f"{name}: the error names neither the file nor an HDF5 path: {message!r}")
        elif outcome == "indexed":
            if report["mismatches"] or report["missing"]:
                failures.append(f"{name}: {report['mismatches'][:3]} missing {report['missing'][:3]}")
        else:
            failures.append(f"{name}: {report}")
    assert not failures, "\n".join(failures)


def test_only_what_h5py_cannot_read_is_refused(reports, h5py_verdicts):
    """h5lens may refuse a file only where libhdf5 (h5py) fails too: a refusal of a file that
    h5py reads whole is a bug, whatever the message says."""
    wrongly = [f"{name}: {reports[name]['message']}" for name, fails in sorted(h5py_verdicts.items()) if fails is None]
    assert not wrongly, "refused, yet h5py reads every object:\n" + "\n".join(wrongly)


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
