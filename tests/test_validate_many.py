"""``h5lens validate`` of many manifests: paths (as the shell expands a glob), quoted globs,
directories and prefixes (local and moto's S3), one line per manifest and a summary; exit
status 0 when all are valid, 1 when any has problems, 2 when any could not be checked.

Each manifest's verdict is compared with ``h5lens.validate`` of it alone, and the changed
source behind the one with problems is a real rewrite of the file (h5py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from cli_runner import h5lens as run_cli


def write(path: Path, n: int) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(n, dtype="<i4"), chunks=(max(n // 4, 1),))
        f.attrs["n"] = n
    return path


@pytest.fixture
def collection(tmp_path):
    """data/: three files; manifests/ as index-many names them (one compact, one in a
    sub-directory), beside a report that is no manifest; one source changed after indexing."""
    data, out = tmp_path / "data", tmp_path / "manifests"
    (out / "sub").mkdir(parents=True)
    data.mkdir()
    for name, n in (("a.h5", 100), ("b.h5", 200), ("c.h5", 300)):
        write(data / name, n)
    h5lens.index(data / "a.h5").save(out / "a.h5.json")
    h5lens.index(data / "b.h5").save(out / "sub" / "b.h5.h5lens")
    h5lens.index(data / "c.h5").save(out / "c.h5.json")
    (out / "summary.json").write_text('{"indexed": 3, "files": []}\n')
    write(data / "c.h5", 301)  # changed since indexed: a problem of c.h5.json
    return data, out


def verdicts(stdout: str) -> dict[str, str]:
    """The line each manifest ends with: ``M: valid (...)``, ``M: N problem(s)``, ``M: error: ...``."""
    found = {}
    for line in stdout.splitlines()[:-1]:
        manifest, _, rest = line.partition(": ")
        if rest.startswith(("valid (", "error: ")) or rest.endswith("problem(s)"):
            found[manifest] = rest
    return found


def test_a_directory_of_manifests(collection):
    data, out = collection
    result = run_cli("validate", out)
    manifests = [str(out / "a.h5.json"), str(out / "c.h5.json"), str(out / "sub" / "b.h5.h5lens")]
    found = verdicts(result.stdout)
    assert sorted(found) == sorted(manifests)  # summary.json is not a manifest's name
    for manifest in manifests:
        problems = h5lens.validate(manifest)
        if problems:
            assert found[manifest] == f"{len(problems)} problem(s)"
            for problem in problems:
                assert f"{manifest}: {problem.path}: " in result.stdout
        else:
            assert found[manifest].startswith("valid (")
    assert [m for m in manifests if h5lens.validate(m)] == [str(out / "c.h5.json")]
    assert "changed since the manifest was written" in result.stdout
    assert result.stdout.splitlines()[-1] == "3 manifests: 2 valid, 1 with problems, 0 could not be checked"
    assert result.returncode == 1
    assert result.stderr.strip() == "1 of 3 manifests have problems"


def test_paths_as_the_shell_expands_a_glob(collection):
    data, out = collection
    valid = [out / "a.h5.json", out / "sub" / "b.h5.h5lens"]
    result = run_cli("validate", *valid)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert [line.split(": ", 1)[0] for line in result.stdout.splitlines()[:-1]] == list(map(str, valid))
    assert result.stdout.splitlines()[-1] == "2 manifests: 2 valid, 0 with problems, 0 could not be checked"
    quoted = run_cli("validate", str(out / "*.json"))  # a glob the shell left alone: summary.json too
    assert quoted.returncode == 2
    assert f"{out / 'summary.json'}: error: " in quoted.stdout


def test_one_manifest_prints_as_before(collection):
    data, out = collection
    result = run_cli("validate", out / "a.h5.json")
    assert result.returncode == 0 and result.stdout.startswith(f"{out / 'a.h5.json'}: valid (")
    assert len(result.stdout.splitlines()) == 1


def test_what_cannot_be_checked_is_said_and_the_others_go_on(collection):
    data, out = collection
    missing = out / "gone.h5.json"
    result = run_cli("validate", out / "a.h5.json", missing, data / "b.h5")
    found = verdicts(result.stdout)
    assert found[str(out / "a.h5.json")].startswith("valid (")
    assert found[str(missing)] == "error: manifest not found"
    assert found[str(data / "b.h5")].startswith("error: an HDF5 file, not a manifest")
    assert result.stdout.splitlines()[-1] == "3 manifests: 1 valid, 0 with problems, 2 could not be checked"
    assert result.error_line() == f"2 of 3 manifests could not be checked (the first: {missing}: manifest not found)"
    empty = out.parent / "empty"
    empty.mkdir()
    assert "holds no manifest" in run_cli("validate", empty).error_line()


def test_a_prefix_on_object_storage(s3, collection, tmp_path):
    data, out = collection
    options = s3.storage_options()
    fs = s3.filesystem()
    s3.make_bucket("validated")
    for name in ("a.h5", "b.h5"):
        fs.put(str(data / name), f"validated/data/{name}")
        h5lens.index(f"s3://validated/data/{name}", storage_options=options).save(
            f"s3://validated/manifests/{name}.json", storage_options=options
        )
    fs.pipe("validated/manifests/notes.json", b"{}")
    endpoint = ["--endpoint-url", options["endpoint_url"], "-s", f"key={options['key']}", "-s", f"secret={options['secret']}"]
    result = run_cli("validate", "s3://validated/manifests/", *endpoint)
    assert result.returncode == 0 and result.stderr == "", result.stdout + result.stderr
    assert sorted(verdicts(result.stdout)) == ["s3://validated/manifests/a.h5.json", "s3://validated/manifests/b.h5.json"]
    glob = run_cli("validate", "s3://validated/manifests/*.h5.json", *endpoint)
    assert glob.returncode == 0 and sorted(verdicts(glob.stdout)) == sorted(verdicts(result.stdout))
    # a source replaced: the manifest has a problem, the other is still valid
    shutil.copy(data / "c.h5", tmp_path / "other.h5")
    fs.put(str(tmp_path / "other.h5"), "validated/data/b.h5")
    changed = run_cli("validate", "s3://validated/manifests/", *endpoint)
    assert changed.returncode == 1
    found = verdicts(changed.stdout)
    assert found["s3://validated/manifests/a.h5.json"].startswith("valid (")
    assert found["s3://validated/manifests/b.h5.json"] == "1 problem(s)"
