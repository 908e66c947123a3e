"""``h5lens cat`` of sparse matrices and integer lists, ``ls`` / ``inspect`` of netCDF
dimensions: as a user runs them, compared with what the writing library reads back
(anndata, h5py, xarray through h5netcdf), printed by numpy with the CLI's printoptions.
"""

from __future__ import annotations

import re
import warnings

import anndata as ad
import h5py
import numpy as np
import pytest
import scipy.sparse as sp

import h5lens
from cli_runner import h5lens as run_cli

PRINT = {"threshold": 200, "edgeitems": 5}  # numpy printoptions of `h5lens cat`
SHOWN = 25  # stored values listed before and after "..." for a big sparse selection
ENTRY = re.compile(r"^  \((\d+), (\d+)\)\s+(\S+)$")


def h5lens_cli(*args):
    return run_cli(*args)


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def refused(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("h5lens: error: "), result.stderr
    return lines[0]


def count(n: int) -> str:
    return f"{n} stored value{'s' if n != 1 else ''}"


def printed(values) -> str:
    with np.printoptions(**PRINT):
        return str(values)


# -- sparse matrices ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def h5ad(tmp_path_factory):
    """X a csr_matrix, layers/counts the same as a csc_matrix; gzip, so data is in chunks."""
    X = sp.random(2000, 150, density=0.1, format="csr", dtype=np.float32, random_state=1)
    adata = ad.AnnData(X=X)
    adata.layers["counts"] = sp.csc_matrix(X)
    path = tmp_path_factory.mktemp("sparse") / "sparse.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")
    with h5py.File(path) as f:
        assert f["X"].attrs["encoding-type"] == "csr_matrix"
        assert f["layers/counts"].attrs["encoding-type"] == "csc_matrix"
        assert f["X/data"].chunks[0] < f["X/data"].shape[0]
    out = path.with_suffix(".json")
    h5lens.index(path).to_json(out)
    return path, out


@pytest.fixture(scope="module")
def read_back(h5ad):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_h5ad(h5ad[0])


def stored(matrix, row0: int = 0, col0: int = 0) -> list[tuple[int, int, np.floating]]:
    """The stored values of a scipy csr/csc matrix in its own order, at (row + row0, column + col0)."""
    out = []
    major_is_row = matrix.format == "csr"
    for major in range(matrix.shape[0 if major_is_row else 1]):
        for k in range(matrix.indptr[major], matrix.indptr[major + 1]):
            minor = int(matrix.indices[k])
            row, col = (major, minor) if major_is_row else (minor, major)
            out.append((row + row0, col + col0, matrix.data[k]))
    return out


def listing(text: str) -> tuple[str, list[tuple[int, int, np.float32]], bool]:
    """(the ``selected:`` line, the (row, column, value) entries, whether "..." cut the list)."""
    lines = text.splitlines()
    entries = [ENTRY.match(line) for line in lines[2:] if line != "  ..."]
    assert all(entries), lines
    return lines[1], [(int(m[1]), int(m[2]), np.float32(m[3])) for m in entries if m], "  ..." in lines


def expected_listing(entries: list) -> list:
    return entries if len(entries) <= 2 * SHOWN else entries[:SHOWN] + entries[-SHOWN:]


def test_cat_csr_rows_as_anndata_reads_them(h5ad, read_back):
    _, out = h5ad
    X = read_back.X
    # a row: 150 values, printed whole and dense, as numpy prints the dense row
    lines = ok(h5lens_cli("cat", out, "X[7]")).splitlines()
    assert "csr_matrix" in lines[0] and "(2000, 150)" in lines[0] and f"{X.nnz} stored values" in lines[0]
    assert lines[1] == f"selected: (150,), {count(X[7].nnz)}"
    assert "\n".join(lines[2:]) == printed(X[7].toarray()[0])
    # rows and columns, a list of rows: dense
    for selection, expected in [
        ("X[0:3, 0:40]", X[0:3, 0:40]),
        ("X[[9, 2, 2], 100:150:10]", X[[9, 2, 2]][:, 100:150:10]),
    ]:
        lines = ok(h5lens_cli("cat", out, selection)).splitlines()
        assert lines[1] == f"selected: {expected.shape}, {count(expected.nnz)}", selection
        assert "\n".join(lines[2:]) == printed(expected.toarray()), selection
    # rows too many to print whole: their stored values at (row, column), the first and last 25
    for args, rows in [(["X[0:3]"], slice(0, 3)), (["X", "--slice", "100:140"], slice(100, 140))]:
        selected, entries, cut = listing(ok(h5lens_cli("cat", out, *args)))
        expected = stored(X[rows], row0=rows.start)
        assert selected.startswith(f"selected: ({rows.stop - rows.start}, 150), {count(len(expected))}")
        assert cut == (len(expected) > 2 * SHOWN)
        assert entries == expected_listing(expected), args
    assert cut  # the second one is long enough to be cut


def test_cat_csc_columns_and_rows(h5ad, read_back):
    _, out = h5ad
    counts = read_back.layers["counts"]
    assert counts.format == "csc"
    # columns of a csc: its own order (column by column)
    selected, entries, cut = listing(ok(h5lens_cli("cat", out, "layers/counts[:, 3:6]")))
    expected = stored(counts[:, 3:6], col0=3)
    assert selected.startswith(f"selected: (2000, 3), {count(len(expected))}") and cut
    assert entries == expected_listing(expected)
    # rows of a csc: every column's row indices are read (a small matrix), values as anndata
    lines = ok(h5lens_cli("cat", out, "layers/counts[5]")).splitlines()
    assert lines[1] == f"selected: (150,), {count(counts[5].nnz)}"
    assert "\n".join(lines[2:]) == printed(counts[5].toarray()[0])
    # the parts as before, and the hint that rows print
    text = ok(h5lens_cli("cat", out, "X"))
    assert f"h5lens cat {out} 'X[0:10]'" in text and f"h5lens cat {out} X/data --slice 0:10" in text
    # out of range, too many indices: one line
    assert "out of range" in refused(h5lens_cli("cat", out, "X[2000]"))
    assert "too many indices" in refused(h5lens_cli("cat", out, "X[0, 0, 0]"))


def test_sparse_reads_only_the_selected_rows(h5ad, read_back, monkeypatch):
    from h5lens import describe
    from h5lens.describe import sparse as describe_sparse
    from h5lens.errors import InvalidOptionError

    _, out = h5ad
    loaded = h5lens.Manifest.from_json(out)
    group = h5lens.open_group(loaded)
    with np.printoptions(**PRINT):
        text = describe.show(group, loaded, "X", (slice(1500, 1502), slice(0, 50)), manifest_name=str(out))
    assert text.splitlines()[2:] == printed(read_back.X[1500:1502, 0:50].toarray()).splitlines()
    chunk = max(int(loaded.chunks[name].length.max()) for name in ("X/data", "X/indices", "X/indptr"))
    referenced = sum(loaded.chunks[name].referenced_bytes for name in ("X/data", "X/indices", "X/indptr"))
    assert 0 < group.store.stats.bytes <= 3 * chunk < referenced / 3  # a chunk of indptr, indices and data
    # rows of a csc read the row of every stored value of the selected columns: bounded
    monkeypatch.setattr(describe_sparse, "SPARSE_SCAN", 100)
    with pytest.raises(InvalidOptionError, match="select fewer columns"):
        describe.show(group, loaded, "layers/counts", (slice(0, 3),), manifest_name=str(out))


# -- lists of indices -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    path = tmp_path_factory.mktemp("lists") / "arrays.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(1000, dtype=np.float64) / 4, chunks=(100,))
        f.create_dataset("m", data=np.arange(40 * 30, dtype=np.int32).reshape(40, 30), chunks=(10, 10))
    out = path.with_suffix(".json")
    h5lens.index(path).to_json(out)
    return path, out


def test_cat_integer_list_selection(arrays, h5ad):
    path, out = arrays
    with h5py.File(path) as f:
        x, m = f["x"], f["m"]
        cases = [
            (["x[[1, 2]]"], x[[1, 2]]),  # h5py's fancy indexing (increasing indices)
            (["m", "--slice", "[1, 2], 0:3"], m[[1, 2], 0:3]),
            (["x[[5, 1, 1, -1]]"], x[...][[5, 1, 1, -1]]),  # any order, repeats, negative: as numpy
            (["m[0:2, [29, 4]]"], m[...][0:2, [29, 4]]),
            ([f"m[[{', '.join(map(str, range(0, 40, 3)))}]]"], m[list(range(0, 40, 3))]),  # summarised
        ]
        for args, expected in cases:
            assert ok(h5lens_cli("cat", out, *args)).strip() == printed(expected), args
    # a list of a sparse matrix's stored values (the user's line)
    with h5py.File(h5ad[0]) as f:
        assert ok(h5lens_cli("cat", h5ad[1], "X/data[[1,2]]")).strip() == printed(f["X/data"][[1, 2]])
    assert "one list" in refused(h5lens_cli("cat", out, "m[[1, 2], [3, 4]]"))
    assert "integers only" in refused(h5lens_cli("cat", out, "x[[1, a]]"))


def test_integer_lists_place_axes_as_numpy(arrays):
    """In process (no subprocess): the shapes numpy gives lists mixed with integers."""
    from h5lens.describe import show, split_selection

    path, out = arrays
    loaded = h5lens.Manifest.from_json(out)
    group = h5lens.open_group(loaded)
    with h5py.File(path) as f:
        m = f["m"][...]
    for text, expected in [
        ("m[3, [4, 1]]", m[3, [4, 1]]),
        ("m[[4, 1], 3]", m[[4, 1], 3]),
        ("m[[]]", m[[]]),
        ("m[[0:2, 1]]", m[0:2, 1]),  # brackets around a whole selection stay optional
    ]:
        key, selection = split_selection(loaded, text, None)
        with np.printoptions(**PRINT):
            assert show(group, loaded, key, selection, manifest_name=str(out)) == str(expected), text
    assert split_selection(loaded, "m", "[1, 2]")[1] == ([1, 2],)


# -- netCDF dimension names ------------------------------------------------------------------------

SHAPE = re.compile(r"\(((?:[^():,]+: \d+(?:, )?)+)\)")


def dims_of(text: str) -> tuple[tuple[str, int], ...]:
    match = SHAPE.search(text)
    assert match, text
    return tuple((name, int(n)) for name, n in (part.rsplit(": ", 1) for part in match[1].split(", ")))


@pytest.fixture(scope="module")
def netcdf(tmp_path_factory):
    import test_netcdf

    files = test_netcdf.file_maker(tmp_path_factory.mktemp("nc"), test_netcdf.WRITERS)
    path = files("netcdf4_python")
    out = path.with_suffix(".json")
    h5lens.index(path).to_json(out)
    return path, out


def xarray_dims(path, group: str | None = None) -> dict[str, tuple[tuple[str, int], ...]]:
    """Each variable's dimensions and sizes as stored (decode_cf=False: a char array keeps its
    nchar dimension), as ncdump -h lists them."""
    import xarray as xr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(path, engine="h5netcdf", group=group, decode_cf=False) as ds:
            return {
                str(name): tuple((str(d), int(ds.sizes[d])) for d in var.dims)
                for name, var in ds.variables.items()
                if var.dims
            }


def test_ls_and_inspect_show_netcdf_dimensions(netcdf):
    path, out = netcdf
    expected = {"": xarray_dims(path), "obs": xarray_dims(path, "obs"), "obs/deep": xarray_dims(path, "obs/deep")}
    assert expected[""]["temp"] == (("time", 6), ("lat", 4), ("lon", 5))  # the writer's names
    # ls: each group's arrays, with xarray's dimension names and sizes
    for group, variables in expected.items():
        rows = {
            line.split()[0]: line
            for line in ok(h5lens_cli("ls", out, *([group] if group else []))).splitlines()
            if line.split()[1] == "array"
        }
        assert set(variables) <= set(rows), (group, rows)
        for name, dims in variables.items():
            assert dims_of(rows[name].split("array", 1)[1]) == dims, (group, name, rows[name])
    # inspect: the same names in the tree (paths from the tree's indentation)
    found: dict[str, str] = {}
    stack: list[str] = []
    for line in ok(h5lens_cli("inspect", out)).splitlines()[1:-1]:
        match = re.match(r"^((?:[│ ]   )*)[├└]── (\S+)", line)
        assert match, line
        stack[len(match[1]) // 4 :] = [match[2].rstrip("/")]
        found["/".join(stack)] = line
    for group, variables in expected.items():
        for name, dims in variables.items():
            key = f"{group}/{name}" if group else name
            assert dims_of(found[key]) == dims, (key, found[key])
    # ls of one array: a dims line
    assert "  dims      (time, lat, lon)" in ok(h5lens_cli("ls", out, "temp")).splitlines()
