"""``h5lens cat``, ``ls``, ``inspect`` and ``validate``: what the user means, read sparingly.

Values are compared with the library that wrote the file (anndata, h5py), printed by
numpy with the printoptions the CLI uses; reads are counted by the manifest store.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import h5lens
from cli_runner import h5lens as run_cli

PRINT = {"threshold": 200, "edgeitems": 5}  # numpy printoptions of `h5lens cat`
N_OBS = 300


def h5lens_cli(*args, cwd=None):
    return run_cli(*args, cwd=cwd)


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


class _NA:
    def __repr__(self) -> str:
        return "<NA>"


def printed(values) -> str:
    """numpy's printout of ``values`` (a list: missing values as <NA>) as the CLI prints it."""
    array = np.empty(len(values), dtype=object)
    array[...] = [_NA() if v is pd.NA or v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values]
    with np.printoptions(**PRINT):
        return str(array)


@pytest.fixture(scope="module")
def h5ad(tmp_path_factory):
    """An h5ad written by anndata (0.13: obs_names as a nullable-string-array group)."""
    rng = np.random.default_rng(3)
    missing = rng.random(N_OBS) < 0.1
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(
                np.where(missing, None, rng.choice(["B", "T", "NK"], N_OBS)), categories=["B", "T", "NK"]
            ),
            "stage": pd.Categorical(rng.choice(["early", "late"], N_OBS), categories=["early", "late"], ordered=True),
            "count": pd.array(np.where(missing, None, rng.integers(0, 50, N_OBS)), dtype="Int64"),
            "flag": pd.array(np.where(missing, None, rng.random(N_OBS) < 0.5), dtype="boolean"),
            "note": pd.array(np.where(missing, None, [f"n{i}" for i in range(N_OBS)]), dtype="string"),
            "score": rng.random(N_OBS),
        },
        index=[f"cell-{i:04d}" for i in range(N_OBS)],
    )
    adata = ad.AnnData(X=sp.random(N_OBS, 50, density=0.1, format="csr", dtype=np.float32, random_state=0), obs=obs)
    adata.uns["title"] = "sample"
    adata.uns["params"] = {"k": 3}
    adata.strings_to_categoricals = lambda *a, **k: None  # keep "note" a nullable-string-array
    path = tmp_path_factory.mktemp("h5ad") / "atlas.h5ad"
    with warnings.catch_warnings(), ad.settings.override(allow_write_nullable_strings=True):
        warnings.simplefilter("ignore")
        adata.write_h5ad(path)
    with h5py.File(path) as f:
        assert f["obs/_index"].attrs["encoding-type"] == "nullable-string-array"
        assert f["obs/note"].attrs["encoding-type"] == "nullable-string-array"
    return path


@pytest.fixture(scope="module")
def manifest(h5ad):
    out = h5ad.with_name("atlas.h5ad.json")
    h5lens.index(h5ad).to_json(out)
    return out


@pytest.fixture(scope="module")
def read_back(h5ad):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_h5ad(h5ad)


def test_cat_obs_index_of_an_anndata_file(manifest, read_back):
    """The README line: `h5lens cat atlas.h5ad.json obs/_index`."""
    names = list(read_back.obs_names)
    lines = ok(h5lens_cli("cat", manifest, "obs/_index")).splitlines()
    assert "nullable-string-array" in lines[0] and f"{N_OBS} values" in lines[0]
    assert "\n".join(lines[1:]) == printed(names)  # summarised as numpy summarises all 300
    part = ok(h5lens_cli("cat", manifest, "obs/_index[10:40]")).splitlines()
    assert "\n".join(part[1:]) == printed(names[10:40])


def test_obs_index_is_the_index_whatever_its_column_is_called(tmp_path):
    """A dataframe whose index column anndata wrote as ``cell_id`` (scanpy's pbmc68k calls
    it ``index``): ``obs/_index`` is that column in ``cat``, ``ls`` and navigation."""
    obs = pd.DataFrame({"n": np.arange(20)}, index=pd.Index([f"c{i}" for i in range(20)], name="cell_id"))
    path = tmp_path / "named.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.AnnData(obs=obs).write_h5ad(path)
    with h5py.File(path) as f:
        assert f["obs"].attrs["_index"] == "cell_id" and "_index" not in f["obs"]
    out = tmp_path / "named.h5ad.json"
    h5lens.index(path).to_json(out)
    names = list(ad.read_h5ad(path).obs_names)
    assert ok(h5lens_cli("cat", out, "obs/_index")).splitlines()[1:] == ok(h5lens_cli("cat", out, "obs/cell_id")).splitlines()[1:]
    assert printed(names) in ok(h5lens_cli("cat", out, "obs/_index"))
    assert ok(h5lens_cli("ls", out, "obs/_index")) == ok(h5lens_cli("ls", out, "obs/cell_id"))
    frame = h5lens.open(out)["obs"]
    assert frame["_index"].path == frame["cell_id"].path == "/obs/cell_id"
    assert list(frame["_index"]["values"][...]) == names


@pytest.mark.parametrize("column", ["cell_type", "stage", "count", "flag", "note"])
def test_cat_decodes_anndata_encodings(manifest, read_back, column):
    lines = ok(h5lens_cli("cat", manifest, f"obs/{column}", "--slice", "0:40")).splitlines()
    assert "\n".join(lines[1:]) == printed(read_back.obs[column].iloc[0:40].tolist())
    if column in ("cell_type", "stage"):
        ordered = read_back.obs[column].cat.ordered
        assert ("(ordered)" if ordered else "(unordered)") in lines[0]
        assert f"{len(read_back.obs[column].cat.categories)} categories" in lines[0]


def test_cat_dataframe_by_rows(manifest, read_back):
    lines = ok(h5lens_cli("cat", manifest, "obs", "--slice", "2:5")).splitlines()
    assert "dataframe" in lines[0] and f"{N_OBS} rows" in lines[0]
    assert lines[1].split() == list(read_back.obs.columns)
    for line, (name, row) in zip(lines[2:], read_back.obs.iloc[2:5].iterrows(), strict=True):
        cells = line.split()
        assert cells[0] == name
        assert cells[1:3] == [str(row["cell_type"]) if row["cell_type"] is not np.nan else "<NA>", row["stage"]]
        assert cells[3] == ("<NA>" if row["count"] is pd.NA else str(row["count"]))
        assert float(cells[-1]) == pytest.approx(row["score"], rel=1e-5)
    whole = ok(h5lens_cli("cat", manifest, "obs")).splitlines()  # bounded: first and last rows
    assert len(whole) == 2 + 2 * PRINT["edgeitems"] + 1
    assert whole[2].split()[0] == read_back.obs_names[0] and whole[-1].split()[0] == read_back.obs_names[-1]
    assert whole[2 + PRINT["edgeitems"]].split()[0] == "..."


def test_cat_sparse_matrix_says_what_it_is(manifest, read_back):
    text = ok(h5lens_cli("cat", manifest, "X"))
    assert "csr_matrix" in text and f"({N_OBS}, 50)" in text and f"{read_back.X.nnz} stored values" in text
    assert f"h5lens cat {manifest} X/data --slice 0:10" in text
    data = ok(h5lens_cli("cat", manifest, "X/data", "--slice", "0:10"))
    with np.printoptions(**PRINT):
        assert data.strip() == str(read_back.X.data[:10])


def test_cat_group_lists_members(manifest):
    text = ok(h5lens_cli("cat", manifest, "uns"))
    assert "a group" in text and "params/" in text and "title" in text
    assert f"h5lens ls {manifest} uns" in text


def listing(text: str) -> tuple[list[str], list[str]]:
    """``ls`` of a group: its member rows, and its attribute lines (after a blank line)."""
    members, _, attributes = text.partition("\n\n")
    return members.splitlines(), attributes.splitlines()


def test_ls_group_and_array(manifest, h5ad):
    """A dataframe's members in the dataframe's order (its index, then column-order, as
    pandas shows them), then its attributes with their values."""
    from h5lens.describe.attributes import one_line

    member_lines, attribute_lines = listing(ok(h5lens_cli("ls", manifest, "obs")))
    rows = [line.split() for line in member_lines]
    with h5py.File(h5ad) as f:
        obs = f["obs"]
        order = [obs.attrs["_index"], *obs.attrs["column-order"]]
        assert order[1:] != sorted(order[1:])  # a test of the order, not of sorting
        expected = [n + ("/" if isinstance(obs[n], h5py.Group) else "") for n in order]
        kinds = {n: obs[n].attrs["encoding-type"] for n in obs}
        attributes = {name: obs.attrs[name] for name in obs.attrs}
    assert [row[0] for row in rows] == expected
    assert attribute_lines[0] == "attributes of /obs:"
    width = max(map(len, attributes))
    assert attribute_lines[1:] == [f"  {name:<{width}} = {one_line(value)}" for name, value in attributes.items()]
    assert '  column-order     = ["cell_type", "stage", "count", "flag", "note", "score"]' in attribute_lines
    for row in rows:
        name = row[0].rstrip("/")
        assert row[1] == ("group" if row[0].endswith("/") else "array")
        if kinds[name] != "array":
            assert kinds[name] in " ".join(row)
    root = {line.split()[0]: line for line in listing(ok(h5lens_cli("ls", manifest)))[0]}
    assert "dataframe" in root["obs/"] and "csr_matrix" in root["X/"]
    array = h5lens_cli("ls", manifest, "obs/score")
    text = ok(array)
    for expected_text in ("shape", f"({N_OBS},)", "float64", "chunks", "codecs", "encoding  array"):
        assert expected_text in text


def test_ls_shows_links(tmp_path):
    path = tmp_path / "links.h5"
    with h5py.File(path, "w") as f:
        f["data/x"] = np.arange(3)
        f["alias"] = h5py.SoftLink("/data/x")
    out = tmp_path / "links.json"
    h5lens.index(path).to_json(out)
    lines = ok(h5lens_cli("ls", out)).splitlines()
    assert any(line.split()[:2] == ["alias@", "link"] and "/data/x" in line for line in lines), lines
    assert any(line.split()[:2] == ["data/", "group"] for line in lines), lines


def test_inspect_shows_root_sources_and_encodings(manifest, h5ad):
    text = ok(h5lens_cli("inspect", manifest))
    first = text.splitlines()[0]
    assert first.startswith("/ ") and not first.startswith("//")
    assert f"source: {h5ad.name}" in first  # recorded relative to the manifest beside it
    for encoding in ("dataframe", "categorical", "nullable-integer", "csr_matrix", "nullable-string-array"):
        assert encoding in text


# -- reading only what is printed ---------------------------------------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(2_000_000, dtype=np.float64), chunks=(20_000,), compression="gzip")
        f.create_dataset("m", data=np.arange(1_000_000, dtype=np.int32).reshape(1000, 1000), chunks=(100, 100))
    out = path.with_suffix(".json")
    h5lens.index(path).to_json(out)
    return path, out


@pytest.mark.parametrize(
    "name, selection, most_chunks",
    [
        ("x", None, 2),  # first and last values: the first and the last chunk
        ("m", None, 4),  # the four corners
        ("m", (slice(3, 4), slice(10, 20)), 1),
        ("m", (Ellipsis, 7), 10),  # a column: one chunk per row of chunks
        ("x", (slice(100_000, 100_010),), 1),
    ],
)
def test_cat_reads_only_what_it_prints(big, name, selection, most_chunks):
    from h5lens.describe import show

    path, out = big
    loaded = h5lens.Manifest.from_json(out)
    group = h5lens.open_group(loaded)
    with np.printoptions(**PRINT):
        text = show(group, loaded, name, selection, manifest_name=str(out))
        with h5py.File(path) as f:
            assert text == str(f[name][selection if selection is not None else ...])
    table = loaded.chunks[name]
    largest_chunk = int(table.length.max())
    stats = group.store.stats
    assert 0 < stats.bytes <= most_chunks * largest_chunk
    assert stats.bytes < table.referenced_bytes / 10


def test_cat_slice_syntax_on_the_command_line(big):
    path, out = big
    with h5py.File(path) as f, np.printoptions(**PRINT):
        expected = str(f["m"][0:10, 2:4])
    assert ok(h5lens_cli("cat", out, "m[0:10, 2:4]")).strip() == expected
    assert ok(h5lens_cli("cat", out, "m", "--slice", "0:10,2:4")).strip() == expected
    verbose = h5lens_cli("-v", "cat", out, "m", "--slice", "0:10,2:4")
    assert verbose.returncode == 0 and "h5lens: read " in verbose.stderr
    for bad in (["m[0:10, 2:4, 1]"], ["m", "--slice", "a:b"], ["x[5000000]"]):
        result = h5lens_cli("cat", out, *bad)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, (bad, result.stderr)


# -- sources elsewhere, deep validation ----------------------------------------------------------------


def test_source_url_reads_a_moved_source(h5ad, tmp_path):
    original = tmp_path / "here.h5ad"
    shutil.copy2(h5ad, original)
    out = tmp_path / "here.json"
    h5lens.index(original).to_json(out)
    moved = tmp_path / "moved" / "there.h5ad"
    moved.parent.mkdir()
    os.replace(original, moved)
    missing = h5lens_cli("cat", out, "obs/score", "--slice", "0:5")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    found = ok(h5lens_cli("cat", out, "obs/score", "--slice", "0:5", "--source-url", f"{original}={moved}"))
    with h5py.File(moved) as f, np.printoptions(**PRINT):
        assert found.strip() == str(f["obs/score"][0:5])


def test_validate_deep_decodes_every_chunk(tmp_path):
    source = tmp_path / "x.h5"
    with h5py.File(source, "w") as f:  # 800 KB: chunk 50 lies beyond the bytes a fingerprint reads
        f.create_dataset("x", data=np.random.default_rng(0).random(100_000), chunks=(1000,), compression="gzip")
    pristine = tmp_path / "pristine.h5"
    shutil.copy2(source, pristine)
    out = tmp_path / "x.json"
    h5lens.index(source).to_json(out)
    clean = h5lens_cli("validate", "--deep", out)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # damage a chunk's bytes in the middle of the source, keeping its size: only decoding finds it
    refs = json.loads(out.read_text())
    key = "x/c/50"
    _, offset, length = refs["refs"][key]
    stat = source.stat()
    with open(source, "r+b") as f:
        f.seek(offset + length // 2)
        f.write(bytes(64))
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert h5lens_cli("validate", out).returncode == 0  # the manifest itself is sound
    deep = h5lens_cli("validate", "--deep", out)
    assert deep.returncode in (1, 2) and key in deep.stdout + deep.stderr, deep.stdout + deep.stderr
    # read from elsewhere: the undamaged copy, through --source-url
    mirror = h5lens_cli("validate", "--deep", out, "--source-url", f"{source}={pristine}")
    assert mirror.returncode == 0, mirror.stdout + mirror.stderr


def test_cat_reads_a_combined_manifest_on_a_rectilinear_grid(tmp_path):
    """Files of different cell counts combined: X/data and obsm lie on a rectilinear chunk
    grid, which zarr opens only with its flag; cat reads them as h5lens's readers do."""
    paths = []
    for i, n in enumerate((150, 233)):
        adata = ad.AnnData(sp.random(n, 30, density=0.3, format="csr", dtype=np.float32, random_state=i))
        adata.obs_names = [f"f{i}c{k}" for k in range(n)]
        adata.obsm["X_umap"] = np.random.default_rng(i).random((n, 2), dtype=np.float32)
        adata.write_h5ad(tmp_path / f"f{i}.h5ad", compression="gzip")
        paths.append(tmp_path / f"f{i}.h5ad")
    h5lens.combine(paths).save(tmp_path / "c.json")
    expected = ad.concat([ad.read_h5ad(p) for p in paths])
    with np.printoptions(**PRINT):
        assert ok(h5lens_cli("cat", tmp_path / "c.json", "X/data")).strip() == str(expected.X.data)
        assert ok(h5lens_cli("cat", tmp_path / "c.json", "obsm/X_umap[140:160]")).strip() == str(
            expected.obsm["X_umap"][140:160]
        )
