"""The h5lens command: exit codes, one-line errors, no output left behind on failure."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.cli.sample import write_sample

CLI = [sys.executable, "-m", "h5lens.cli"]


def h5lens_cli(*args, cwd=None):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture
def sample(tmp_path):
    return write_sample(tmp_path / "sample.h5ad")


def test_index_writes_a_manifest_that_reads_like_h5py(sample, tmp_path):
    out = tmp_path / "out.json"
    result = h5lens_cli("index", sample, "-o", out, "--inline-threshold", "0")
    assert result.returncode == 0, result.stderr
    refs = json.loads(out.read_text())
    assert refs["version"] == 1 and "zarr.json" in refs["refs"]
    group = h5lens.open_group(out)
    with h5py.File(sample) as f:
        np.testing.assert_array_equal(group["obsm/X_pca"][...], f["obsm/X_pca"][...])


def test_index_proposal_convention(sample, tmp_path):
    out = tmp_path / "out.json"
    assert h5lens_cli("index", sample, "-o", out, "--convention", "proposal").returncode == 0
    title = h5lens.open_group(out)["uns/title"]
    assert title.shape == (1,) and title.attrs["_SCALAR"] is True


@pytest.mark.parametrize(
    "make_input",
    [
        lambda d: d / "missing.h5",
        lambda d: (d / "empty.h5").write_bytes(b"") and None or d / "empty.h5",
        lambda d: (d / "text.h5").write_text("hello\n") and d / "text.h5",
        lambda d: d,  # a directory
    ],
    ids=["missing", "zero-bytes", "not-hdf5", "directory"],
)
def test_bad_input_exits_2_with_one_line_and_no_output(tmp_path, make_input):
    source = make_input(tmp_path)
    out = tmp_path / "out.json"
    result = h5lens_cli("index", source, "-o", out)
    assert result.returncode == 2
    assert result.stderr.startswith("h5lens: error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_truncated_file_exits_2(sample, tmp_path):
    data = open(sample, "rb").read()
    cut = tmp_path / "cut.h5ad"
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.json"
    result = h5lens_cli("index", cut, "-o", out)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "option", [("--convention", "nope"), ("--read-block-size", "lots"), ("--read-block-size", "100")]
)
def test_bad_option_value_exits_2(sample, tmp_path, option):
    result = h5lens_cli("index", sample, "-o", tmp_path / "o.json", *option)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert option[0] in result.stderr or "read_block_size" in result.stderr
    assert not (tmp_path / "o.json").exists()


def test_inspect_ls_cat(sample, tmp_path):
    # what the commands print, in this process (cli_runner): the process itself is checked above
    from cli_runner import h5lens as h5lens_cli

    out = tmp_path / "out.json"
    assert h5lens_cli("index", sample, "-o", out).returncode == 0
    inspect = h5lens_cli("inspect", out)
    assert inspect.returncode == 0 and "X_pca" in inspect.stdout
    listing = h5lens_cli("ls", out, "obs")
    with h5py.File(sample) as f:
        expected = sorted(n + ("/" if isinstance(f["obs"][n], h5py.Group) else "") for n in f["obs"])
    members = listing.stdout.partition("\n\n")[0]  # then the group's attributes
    assert sorted(line.split()[0] for line in members.splitlines()) == expected
    cat = h5lens_cli("cat", out, "obs/cell_type/categories")
    assert cat.returncode == 0
    with h5py.File(sample) as f:
        for category in f["obs/cell_type/categories"].asstr()[...]:
            assert category in cat.stdout
    assert h5lens_cli("cat", out, "no/such").returncode == 2
    assert h5lens_cli("inspect", tmp_path / "missing.json").returncode == 2


def test_demo_runs(tmp_path):
    result = h5lens_cli("demo", "--dir", tmp_path / "demo")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "demo" / "sample.h5ad.json").exists()


def test_validate_clean_and_broken(sample, tmp_path):
    from cli_runner import h5lens as h5lens_cli

    out = tmp_path / "out.json"
    assert h5lens_cli("index", sample, "-o", out).returncode == 0
    ok = h5lens_cli("validate", out)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    refs = json.loads(out.read_text())
    root = json.loads(refs["refs"]["zarr.json"])
    root["attributes"]["_LINKS"] = [{"name": "dangling", "source": ".", "path": "/no/such/node"}]
    refs["refs"]["zarr.json"] = json.dumps(root)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(refs))
    result = h5lens_cli("validate", broken)
    assert result.returncode == 1
    assert "/no/such/node" in result.stdout


def test_bad_option_values_raise_h5lens_errors(sample):
    with pytest.raises(h5lens.InvalidOptionError, match="convention"):
        h5lens.index(sample, convention="nope")
    with pytest.raises(h5lens.InvalidOptionError, match="read_block_size"):
        h5lens.index(sample, read_block_size=0)


def test_library_warnings_only_with_verbose(tmp_path):
    """zarr warns about structured / byte-string data types; the CLI prints its own lines only."""
    source = tmp_path / "records.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("records", data=np.zeros(3, dtype=[("a", "<i4"), ("b", "S2")]))
    quiet = h5lens_cli("index", source, "-o", tmp_path / "q.json")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    loud = h5lens_cli("-v", "index", source, "-o", tmp_path / "l.json")
    assert loud.returncode == 0 and "UnstableSpecificationWarning" in loud.stderr
