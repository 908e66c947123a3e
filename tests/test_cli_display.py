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
def netcdf_files(tmp_path_factory):
    import test_netcdf

    return test_netcdf.file_maker(tmp_path_factory.mktemp("nc"), test_netcdf.WRITERS)


@pytest.fixture(scope="module")
def netcdf(netcdf_files):
    path = netcdf_files("netcdf4_python")
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


def test_inspect_shows_netcdf_dimensions(netcdf):
    path, out = netcdf
    expected = {"": xarray_dims(path), "obs": xarray_dims(path, "obs"), "obs/deep": xarray_dims(path, "obs/deep")}
    assert expected[""]["temp"] == (("time", 6), ("lat", 4), ("lon", 5))  # the writer's names
    # inspect: the names in the tree (paths from the tree's indentation)
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


# -- ls of a netCDF manifest: ncdump -h's header -----------------------------------------------------

# netCDF's names of its types (the netCDF users' guide), for numpy's
NC_TYPES = {
    "int8": "byte", "uint8": "ubyte", "int16": "short", "uint16": "ushort", "int32": "int", "uint32": "uint",
    "int64": "int64", "uint64": "uint64", "float32": "float", "float64": "double",
}  # fmt: skip
SUFFIXES = {"b": "int8", "UB": "uint8", "s": "int16", "US": "uint16", "U": "uint32", "LL": "int64",
            "ULL": "uint64", "f": "float32"}  # fmt: skip
CDL_NUMBER = re.compile(r"^(-?(?:[0-9.]+(?:e[-+]?\d+)?|NaN|Infinity))(ULL|LL|UB|US|U|b|s|f)?$")


def cdl_values(text: str) -> list[object]:
    """A CDL attribute value: quoted text, or numbers with ncdump's type suffixes (a list)."""
    if text.startswith('"'):
        import json

        return json.loads("[" + text + "]")
    values = []
    for part in text.split(", "):
        match = CDL_NUMBER.match(part)
        assert match, text
        number, suffix = match.groups()
        kind = SUFFIXES.get(suffix or "", "float64" if any(c in number for c in ".eNI") else "int32")
        values.append(np.dtype(kind).type(float(number) if kind.startswith("float") else int(number)))
    return values


def parse_cdl(text: str) -> dict[str, dict]:
    """ncdump -h's header, read back: per group its dimensions, variables and attributes."""
    groups: dict[str, dict] = {}
    stack: list[str] = []
    section = None
    for line in text.splitlines():
        body = line.strip()
        if not body:
            continue
        if match := re.match(r"^(?:netcdf \S+|group: (\S+)) \{$", body):
            stack.append(match[1] or "")
            groups["/".join(s for s in stack if s)] = {"dims": {}, "vars": {}, "attrs": {}}
            continue
        here = groups["/".join(s for s in stack if s)]
        if body == "}" or body.startswith("} // group"):
            stack.pop()
        elif body in ("dimensions:", "variables:"):
            section = body
        elif body.endswith("attributes:"):
            section = "attributes"
        elif section == "dimensions:":
            match = re.match(r"^(\S+) = (?:(\d+)|UNLIMITED) ;(?: // \((\d+) currently\))?$", body)
            assert match, body
            here["dims"][match[1]] = (int(match[2] or match[3]), match[2] is None)
        elif match := re.match(r"^(?:string )?(\S*):(\S+) = (.*) ;$", body):
            owner = here["attrs"] if section == "attributes" else here["vars"][match[1]][2]
            owner[match[2]] = cdl_values(match[3])
        else:
            match = re.match(r"^(.+?) (\S+?)(?:\((.*)\))? ;$", body)
            assert match and section == "variables:", body
            dims = tuple(match[3].split(", ")) if match[3] else ()
            here["vars"][match[2]] = (match[1], dims, {})
    assert not stack, text
    return groups


def netcdf4_view(path) -> dict[str, dict]:
    """What netCDF-C (through netCDF4-python) says of each group, in parse_cdl's terms."""
    netCDF4 = pytest.importorskip("netCDF4")
    out: dict[str, dict] = {}

    def attrs(obj) -> dict[str, list[object]]:
        found = {}
        for name in obj.ncattrs():
            value = obj.getncattr(name)
            found[name] = [value] if isinstance(value, str) else list(np.atleast_1d(value))
        return found

    def visit(group, key: str) -> None:
        variables = {}
        for name, var in group.variables.items():
            if var.dtype is str:
                kind = "string"
            elif var.dtype == np.dtype("S1"):
                kind = "char"
            elif isinstance(var.datatype, netCDF4.EnumType):
                kind = var.datatype.name
            elif var.dtype.names is not None:
                kind = None  # a compound: its type's name is not in the manifest
            else:
                kind = NC_TYPES[str(var.dtype)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                variables[name] = (kind, tuple(var.dimensions), attrs(var))
        out[key] = {
            "dims": {name: (len(d), d.isunlimited()) for name, d in group.dimensions.items()},
            "vars": variables,
            "attrs": attrs(group),
        }
        for name, child in group.groups.items():
            visit(child, f"{key}/{name}" if key else name)

    with netCDF4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)
        visit(ds, "")
    return out


def same_values(got: list[object], expected: list[object]) -> bool:
    if len(got) != len(expected):
        return False
    for a, b in zip(got, expected, strict=True):
        if isinstance(b, str) or isinstance(a, str):
            if a != b:
                return False
        elif np.dtype(type(a)) != np.asarray(b).dtype:  # the attribute's netCDF type, from the suffix
            return False
        elif not (a == b or (np.isnan(a) and np.isnan(b))):
            return False
    return True


@pytest.mark.parametrize("writer", ["netcdf4_python", "h5netcdf", "xarray_netcdf4", "user_types"])
def test_ls_prints_the_netcdf_header(netcdf_files, writer, tmp_path):
    """ls of a netCDF manifest's root: ncdump -h's header, every group's dimensions (sizes,
    UNLIMITED), variables (type, dimensions, attributes with their values and types) and
    group attributes as netCDF-C reads them."""
    path = netcdf_files(writer)
    out = tmp_path / f"{writer}.nc.json"
    h5lens.index(path).to_json(out)
    text = ok(h5lens_cli("ls", out))
    assert text.splitlines()[0] == f"netcdf {writer} {{"
    got, expected = parse_cdl(text), netcdf4_view(path)
    assert set(got) == set(expected)
    for group, view in expected.items():
        assert got[group]["dims"] == view["dims"], group
        assert set(got[group]["vars"]) == set(view["vars"]), group
        for name, (kind, dims, attrs) in view["vars"].items():
            got_kind, got_dims, got_attrs = got[group]["vars"][name]
            assert got_dims == dims, (group, name)
            if kind is not None:
                assert got_kind == kind, (group, name)
            assert set(got_attrs) == set(attrs), (group, name)
            for attr, values in attrs.items():
                assert same_values(got_attrs[attr], values), (group, name, attr, got_attrs[attr], values)
        assert set(got[group]["attrs"]) == set(view["attrs"]), group  # _NCProperties, _nc_* hidden
        for attr, values in view["attrs"].items():
            assert same_values(got[group]["attrs"][attr], values), (group, attr)
    # a group alone: its block, as ncdump prints it inside the file's
    if "obs" in expected:
        block = ok(h5lens_cli("ls", out, "obs")).splitlines()
        assert block[0] == "group: obs {" and block[-1] == "  } // group obs"
        assert "\n".join(block) in text


def test_packed_values_say_so(netcdf_files, tmp_path):
    """cat of a packed variable: one line saying the values are the stored ones and how to
    unpack them, then the stored values as netCDF-C reads them without unpacking."""
    netCDF4 = pytest.importorskip("netCDF4")
    path = netcdf_files("xarray_netcdf4")
    out = tmp_path / "packed.nc.json"
    h5lens.index(path).to_json(out)
    lines = ok(h5lens_cli("cat", out, "precip[0]")).splitlines()
    with netCDF4.Dataset(path) as ds:
        var = ds["precip"]
        var.set_auto_maskandscale(False)
        stored = var[0]
        factor, offset, fill = var.scale_factor, var.add_offset, var._FillValue
    assert lines[0] == (
        f"/precip: packed int16 values as stored (scale_factor {factor}, add_offset {offset}, _FillValue {fill}); "
        "unpacked: value * scale_factor + add_offset, where _FillValue marks missing values; "
        f'xr.open_dataset("{out}", engine="h5lens") gives them unpacked'
    )
    assert "\n".join(lines[1:]) == printed(stored)
    # a variable with a _FillValue only: raw, not masked
    raw = ok(h5lens_cli("cat", out, "temperature[0, 0]")).splitlines()
    assert raw[0].startswith("/temperature: raw values as stored (_FillValue ") and "not masked" in raw[0]
    assert ok(h5lens_cli("cat", out, "x")).splitlines()[0].startswith("[")  # nothing to say: values only


# -- attribute values: ls and cat NODE/ATTRIBUTE, compared with h5py ---------------------------------


@pytest.fixture(scope="module")
def attributes_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("attrs") / "attrs.h5"
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "root attributes"
        f.attrs["version"] = np.int32(3)
        f.attrs["ratio"] = np.float32(0.1)
        f.attrs["nan"] = np.float64("nan")
        f.attrs["flag"] = np.bool_(True)
        g = f.create_group("grp")
        g.attrs["names"] = np.array(["a", "bb", "ccc"], dtype=h5py.string_dtype())
        g.attrs["fixed"] = np.bytes_(b"fixed")
        g.attrs["grid"] = np.arange(12, dtype="<u2").reshape(3, 4)
        g.attrs["many"] = np.linspace(0, 1, 500)
        g.attrs["long"] = "x" * 5000
        g.attrs["x"] = "an attribute named like the array x"
        g["x"] = np.arange(4, dtype="i8")
        g["x"].attrs["units"] = "m"
        g["x"].attrs["scale"] = np.array([0.5, 2.0], dtype="f4")
        g.attrs["target"] = g["x"].ref
    out = path.with_suffix(".json")
    h5lens.index(path).to_json(out)
    return path, out


def test_cat_an_attribute_prints_what_h5py_reads(attributes_file):
    path, out = attributes_file
    with h5py.File(path) as f:
        for node in (f, f["grp"], f["grp/x"]):
            for name, value in node.attrs.items():
                key = f"{node.name.strip('/')}/{name}".lstrip("/")
                if node.name == "/grp" and name in ("x", "target"):
                    continue  # below
                if isinstance(value, bytes):  # fixed-length ASCII: the manifest keeps it as text (as h5lens.open reads it)
                    value = value.decode()
                assert ok(h5lens_cli("cat", out, key)).rstrip("\n") == printed(value), key
        np.testing.assert_array_equal(f["grp"].attrs["grid"][1:, 2], [6, 10])
        assert ok(h5lens_cli("cat", out, "grp/grid[1:, 2]")).strip() == printed(f["grp"].attrs["grid"][1:, 2])
        # an array and an attribute of the same path: the array wins
        assert ok(h5lens_cli("cat", out, "grp/x")).strip() == printed(f["grp/x"][...])
        assert f["grp"].attrs["x"] == "an attribute named like the array x"
        # a reference: the path it names
        assert f[f["grp"].attrs["target"]].name == "/grp/x"
    assert ok(h5lens_cli("cat", out, "grp/target")).strip() == "<object reference to /grp/x>"
    assert "prints whole" in refused(h5lens_cli("cat", out, "title[0]"))
    assert "not found" in refused(h5lens_cli("cat", out, "grp/nothing"))


def test_ls_shows_attribute_values(attributes_file):
    """ls of a group: members, then the group's attributes (the root's too) with the values
    h5py reads; of an array: its attributes with their values; of an attribute: its value."""
    from h5lens.describe.attributes import one_line

    path, out = attributes_file
    with h5py.File(path) as f:
        for group in ("", "grp"):
            members, _, attributes = ok(h5lens_cli("ls", out, *([group] if group else []))).partition("\n\n")
            node = f[group or "/"]
            assert {line.split()[0].rstrip("/") for line in members.splitlines()} == set(node)
            lines = attributes.splitlines()
            assert lines[0] == f"attributes of /{group}:"
            shown = dict(line[2:].split(" = ", 1) for line in lines[1:])
            assert {name.rstrip() for name in shown} == set(node.attrs)
            for name, text in shown.items():
                value = node.attrs[name.rstrip()]
                if isinstance(value, h5py.Reference):
                    assert text == "<object reference to /grp/x>"
                elif isinstance(value, bytes):  # as in cat: kept as text
                    assert text == one_line(value.decode()), name
                else:
                    assert text == one_line(value), name
        described = ok(h5lens_cli("ls", out, "grp/x")).splitlines()
        start = described.index("  attributes")
        assert [line.split(" = ", 1)[0].strip() for line in described[start + 1 :]] == list(f["grp/x"].attrs)
        assert set(described[start + 1 :]) == {'    units = "m"', "    scale = [0.5, 2.0] (float32)"}
        assert f["grp/x"].attrs["scale"].dtype == np.float32
    long_line = [line for line in ok(h5lens_cli("ls", out, "grp")).splitlines() if line.startswith("  long")][0]
    assert len(long_line) < 300 and "5000 characters" in long_line
    with h5py.File(path) as f:
        many = f["grp"].attrs["many"]  # 500 values: the first and last three
    shown = ", ".join([*map(str, many[:3]), "...", *map(str, many[-3:])])
    assert ok(h5lens_cli("ls", out, "grp/many")).strip() == f"/grp attribute 'many': [{shown}] (float64)"


def test_an_attribute_left_out_as_unreadable_is_said(tmp_path):
    """An attribute h5py cannot read either (an HDF5 time): ls lists it with why, cat of it
    exits 2 saying why, never "not found"."""
    import test_skip_unreadable

    path = test_skip_unreadable.write_mixed(tmp_path / "mixed.h5")
    entry = h5lens.index(path, skip_unreadable=True).unreadable_at("grp", "stamp")
    assert entry is not None
    _, _, attributes = ok(h5lens_cli("ls", path, "grp")).partition("\n\n")
    assert f"  stamp left out: {entry.line}" in attributes.splitlines()
    assert refused(h5lens_cli("cat", path, "grp/stamp")) == f"h5lens: error: {entry.error()}"
    with h5py.File(path) as f:
        assert ok(h5lens_cli("cat", path, "grp/ok")).strip() == str(f["grp"].attrs["ok"])
