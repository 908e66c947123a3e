"""The LINDI form (``h5lens convert M OUT.lindi.json --for lindi``) read by LINDI's own reader.

LINDI (pip ``lindi``) needs zarr 2, so it cannot share the project's venv: ``make lindi``
builds ``.venv-lindi`` (lindi and pynwb pinned). h5lens writes the .lindi.json files here;
``tests/lindi_check.py`` runs under that venv's Python and opens each with
``lindi.LindiH5pyFile.from_lindi_file``, comparing every group, link, dataset and
attribute with h5py reading the original, and for NWB files every container read by
``pynwb.NWBHDF5IO(file=...)`` with ``NWBHDF5IO`` on the original. It checks LINDI's own
conversion of each file the same way, which tells LINDI's reader's limits from h5lens's.
Without the venv the tests that need it skip, saying how to build it
(``H5LENS_LINDI_PYTHON`` names another interpreter). The refusals need no LINDI.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import h5lens
from cli_runner import h5lens as run
from h5lens.browser.lindi import to_lindi, write_lindi
from h5lens.errors import InvalidOptionError, UnsupportedFeatureError
from required import missing
from shared_data import DATA, shared_file

REPO = Path(__file__).resolve().parents[1]
LINDI_PYTHON = Path(os.environ.get("H5LENS_LINDI_PYTHON", REPO / ".venv-lindi" / "bin" / "python"))
CHECK = Path(__file__).with_name("lindi_check.py")


def write_features(path: Path) -> None:
    """What LINDI has a form for, as h5py writes it."""
    with h5py.File(path, "w") as f:
        data = np.arange(200 * 50, dtype=np.float32).reshape(200, 50) / 7
        data[3, 4] = np.nan
        f.create_dataset("chunked", data=data, chunks=(64, 16), compression="gzip", shuffle=True)
        f.create_dataset("checked", data=np.arange(4000, dtype="<u2"), chunks=(1000,), fletcher32=True)
        f.create_dataset("big_endian", data=np.arange(5000, dtype=">i4"))
        sparse = f.create_dataset("sparse", shape=(1000,), chunks=(100,), dtype="f8", fillvalue=np.nan)
        sparse[:100] = np.arange(100.0)
        f.create_dataset("bools", data=np.arange(3000) % 3 == 0)
        f.create_dataset("complex", data=np.arange(600) * (1 + 2j))
        f["small"] = np.array([1, 2, 3], dtype=np.int16)
        colours = h5py.enum_dtype({"red": 0, "green": 1}, basetype="i1")
        f.create_dataset("enum", data=np.arange(5000) % 2, dtype=colours, chunks=(1000,), compression="gzip")
        f["empty"] = np.zeros((0,), dtype=np.float64)
        f["scalar_f"] = 3.5
        f["scalar_i"] = np.int64(-7)
        f["scalar_s"] = "hello"
        f.create_dataset("strings", data=["a", "bé", "c"], dtype=h5py.string_dtype())
        f["fixed"] = np.array([b"ab", b"cde"], dtype="S3")
        grp = f.create_group("grp/inner")
        grp.attrs["note"] = "inner"
        f["grp"].attrs["count"] = np.int32(4)
        f["link_to_group"] = h5py.SoftLink("/grp")
        f["link_to_data"] = h5py.SoftLink("/chunked")
        f.create_dataset("refs", data=[f["grp"].ref, f["chunked"].ref], dtype=h5py.ref_dtype)
        records = np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8"), ("name", "S4"), ("ref", h5py.ref_dtype)])
        records["x"], records["y"], records["name"] = [1, 2, 3], [0.5, np.nan, np.inf], [b"a", b"bb", b"ccc"]
        records["ref"] = [f["grp"].ref, f["chunked"].ref, f["grp/inner"].ref]
        f["records"] = records
        for name, value in {
            "nan": np.nan, "inf": np.inf, "ninf": -np.inf, "int": 3, "text": "t", "bytes": b"raw",
            "floats": np.array([1.0, np.nan, -np.inf]), "texts": np.array(["x", "y"], dtype=h5py.string_dtype()),
            "flag": True, "ints": np.array([[1, 2], [3, 4]], dtype=np.uint8), "group_ref": f["grp"].ref,
        }.items():  # fmt: skip
            f.attrs[name] = value
        f["chunked"].attrs["unit"] = "V"
        f["chunked"].attrs["scale"] = np.float32(0.25)


def write_ecephys(path: Path) -> None:
    """An NWB file as DANDI holds many: compressed chunked data, tables, links, NaN attributes
    (no ElectrodeGroup position: LINDI has no form for a scalar compound)."""
    from hdmf.backends.hdf5 import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries
    from pynwb.ecephys import ElectricalSeries

    from test_nwb import T0

    nwb = NWBFile(session_description="ecephys", identifier="id-lindi", session_start_time=T0, experimenter=["Ada"])
    device = nwb.create_device(name="probe", description="a probe")
    group = nwb.create_electrode_group(name="shank0", description="g0", location="CA1", device=device)
    nwb.add_electrode_column("label", "a string column")
    for i in range(4):
        nwb.add_electrode(group=group, location="CA1", x=float(i), y=np.nan, z=np.inf, label=f"e{i}")
    region = nwb.create_electrode_table_region([0, 2, 3], "three electrodes")
    data = np.arange(3000 * 3, dtype=np.float32).reshape(3000, 3) / 3
    packed = H5DataIO(data, compression="gzip", compression_opts=4, shuffle=True, chunks=(500, 3))
    nwb.add_acquisition(
        ElectricalSeries(name="es", data=packed, electrodes=region, rate=1000.0, resolution=np.nan, offset=-np.inf)
    )
    nwb.add_acquisition(TimeSeries(name="ts", data=np.linspace(0, 1, 2000), unit="m", timestamps=np.arange(2000.0)))
    nwb.add_unit(spike_times=[0.1, 0.2], electrodes=[0, 1])
    nwb.add_unit(spike_times=[0.3], electrodes=[2])
    nwb.add_trial(start_time=0.0, stop_time=1.0)
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)


def write_fletcher32(path: Path) -> None:
    with h5py.File(path, "w") as f:
        data = np.arange(20_000, dtype="<f8")
        f.create_dataset("data", data=data, chunks=(5000,), compression="gzip", shuffle=True, fletcher32=True)


# files LINDI's own reader cannot read whole, whoever writes them (its own conversion fails
# alike): hdmf selects rows of records (TimeSeriesReferenceVectorData), LindiH5pyDataset
# reads records by field only; LINDI pads every chunk shorter than its decoded size with
# zeros, so the fletcher32 checksum after a compressed chunk reads as 0
LINDI_READER_LIMITS = {"icephys.nwb": "Compound dataset", "fletcher32.h5": "fletcher32 checksum"}
FILES = ("features.h5", "fletcher32.h5", "ecephys.nwb", "icephys.nwb", "extension.nwb")
SHARED = "adata_v0.11.4.h5ad"  # anndata's own file (../shared/data): strings, categoricals, sparse X


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, bool]]:
    """name -> (original, its .lindi.json written by h5lens, is NWB)."""
    pytest.importorskip("pynwb")
    import test_nwb

    root = tmp_path_factory.mktemp("lindi")
    write_features(root / "features.h5")
    write_fletcher32(root / "fletcher32.h5")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_ecephys(root / "ecephys.nwb")
        test_nwb.write_icephys(root / "icephys.nwb")
        spec_dir = root / "spec"
        spec_dir.mkdir()
        test_nwb.write_extension(root / "extension.nwb", spec_dir)
    out = {}
    for name in (*FILES, SHARED):
        source = DATA / name if name == SHARED else root / name
        if not source.is_file():
            continue  # the shared file: its test skips (or fails in CI), saying where it was looked for
        manifest = root / f"{name}.json"
        target = root / f"{name}.lindi.json"
        h5lens.index(source).to_json(manifest)
        done = run("convert", manifest, target, "--for", "lindi")
        assert done.returncode == 0, done.stderr
        out[name] = (source, target, name.endswith(".nwb"))
    return out


@pytest.fixture(scope="module")
def lindi_report(written: dict[str, tuple[Path, Path, bool]], tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not LINDI_PYTHON.is_file():
        missing(f"LINDI's venv not found ({LINDI_PYTHON}): `make lindi` builds it (lindi needs zarr 2)", "H5LENS_REQUIRE_LINDI")
    pairs = tmp_path_factory.mktemp("pairs") / "pairs.json"
    pairs.write_text(json.dumps([[str(o), str(w), nwb] for o, w, nwb in written.values()]))
    out = pairs.with_name("report.json")
    done = subprocess.run(
        [str(LINDI_PYTHON), str(CHECK), str(pairs), str(out)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    return {name: report[str(w)] for name, (_, w, _) in written.items()}


@pytest.mark.parametrize("name", [*FILES, SHARED])
def test_lindi_reads_as_h5py_and_nwbhdf5io(lindi_report, name):
    if name == SHARED:
        shared_file(name)
    found = lindi_report[name]
    limit = LINDI_READER_LIMITS.get(name)
    if limit is None:
        assert found["h5lens"] == []
    else:  # what LINDI's reader fails at in its own conversion too, and only that
        assert found["h5lens"] and all(limit in line for line in found["h5lens"])
        assert found["h5lens"] == found["lindi"]


def test_lindi_keeps_the_chunks_where_hdf5_stores_them(written):
    original, target, _ = written["ecephys.nwb"]
    refs = json.loads(target.read_text())["refs"]
    with h5py.File(original, "r") as f:
        dataset = f["acquisition/es/data"]
        for i in range(dataset.id.get_num_chunks()):
            info = dataset.id.get_chunk_info(i)
            key = "acquisition/es/data/" + ".".join(str(o // c) for o, c in zip(info.chunk_offset, dataset.chunks))
            assert refs[key] == [str(original), info.byte_offset, info.size]
    zarray = refs["acquisition/es/data/.zarray"]
    assert zarray["filters"] == [{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 4}]
    assert zarray["compressor"] is None and zarray["dtype"] == "<f4" and zarray["chunks"] == [500, 3]


def test_lindi_attributes_in_lindi_form(written):
    refs = json.loads(written["features.h5"][1].read_text())["refs"]
    root = refs[".zattrs"]
    assert (root["nan"], root["inf"], root["ninf"], root["floats"]) == (
        "NaN",
        "Infinity",
        "-Infinity",
        [1.0, "NaN", "-Infinity"],
    )
    assert root["group_ref"]["_REFERENCE"]["path"] == "/grp"
    assert refs["link_to_group/.zattrs"] == {"_SOFT_LINK": {"path": "/grp"}}
    assert refs["scalar_s/.zattrs"] == {"_SCALAR": True}
    assert refs["records/.zattrs"]["_COMPOUND_DTYPE"] == [
        ["x", "int32"],
        ["y", "float64"],
        ["name", "|S4"],
        ["ref", "<REFERENCE>"],
    ]


# -- what LINDI has no form for: refused by name ---------------------------------------------


def _refusal(path: Path, write) -> str:
    with h5py.File(path, "w") as f:
        write(f)
    with pytest.raises(UnsupportedFeatureError) as caught:
        to_lindi(h5lens.index(path))
    return str(caught.value)


@pytest.mark.parametrize(
    ("write", "named"),
    [
        (lambda f: f.create_dataset("packed", data=np.arange(100_000.0), chunks=(10_000,), compression="lzf"),
         "/packed: its chunks are stored with the codec 'h5lens.lzf'"),
        (lambda f: f.__setitem__("away", h5py.ExternalLink("other.h5", "/x")), "/away: an external link"),
        (lambda f: f.__setitem__("pos", np.zeros((), dtype=[("x", "f4"), ("y", "f4")])), "/pos: a scalar of records"),
        (lambda f: f.create_dataset("nothing", data=h5py.Empty("f8")), "/nothing: a null dataspace"),
        (lambda f: f.attrs.__setitem__("z", 1 + 2j), "/ attribute 'z'"),
        (lambda f: f.attrs.__setitem__("na", "NaN"), "/ attribute 'na': the text 'NaN', which LINDI reads back as a float"),
        (lambda f: f.create_dataset("t", data=np.array([(1, "a")], dtype=[("n", "i4"), ("s", h5py.string_dtype())])),
         "/t: field 's' holds variable-length strings"),
    ],
    ids=["lzf", "external-link", "scalar-compound", "null-dataspace", "complex-attribute", "nan-text", "vlen-field"],
)  # fmt: skip
def test_lindi_refuses_by_name(tmp_path, write, named):
    assert named in _refusal(tmp_path / "f.h5", write)


def test_lindi_refuses_a_region_reference(tmp_path):
    def write(f):
        data = f.create_dataset("data", data=np.arange(10))
        f.attrs["region"] = data.regionref[2:5]

    assert "/ attribute 'region': a region reference" in _refusal(tmp_path / "f.h5", write)


def test_lindi_names_and_urls(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["x"] = np.arange(5000.0)
    with pytest.raises(InvalidOptionError, match="LINDI reads http"):  # before reading anything
        to_lindi(h5lens.index(tmp_path / "f.h5", url="s3://bucket/f.h5"))
    manifest = h5lens.index(tmp_path / "f.h5")
    refs = to_lindi(manifest, url="https://example.org/f.h5")["refs"]
    assert refs["x/0"][0] == "https://example.org/f.h5"
    with pytest.raises(InvalidOptionError, match="NAME.lindi.json"):
        write_lindi(manifest, str(tmp_path / "f.json"), url="https://example.org/f.h5")
    assert "NAME.lindi.json" in run("convert", tmp_path / "m.json", tmp_path / "out.json", "--for", "lindi").stderr


def test_lindi_convert_refuses_in_one_line(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["pos"] = np.zeros((), dtype=[("x", "f4"), ("y", "f4")])
    h5lens.index(tmp_path / "f.h5").to_json(tmp_path / "f.json")
    line = run("convert", tmp_path / "f.json", tmp_path / "f.lindi.json", "--for", "lindi").error_line()
    assert line.startswith("/pos: a scalar of records")
    assert not (tmp_path / "f.lindi.json").exists()
    assert (
        "convert writes 'lindi'"
        in run("convert", tmp_path / "f.json", tmp_path / "f.lindi.json", "--for", "x").error_line()
    )
