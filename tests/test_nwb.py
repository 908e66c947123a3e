"""NWB files written by pynwb, indexed by h5lens, read back by hdmf-zarr and by h5lens's navigation API.

Every expectation comes from the software that wrote the file: hdmf-zarr's reading
of a manifest is compared with ``NWBHDF5IO`` reading the original, container by
container and field by field; the navigation API is compared with h5py reading the
original, object by object (links, attributes, references, values).

Under the ``proposal`` profile hdmf-zarr 0.14 cannot read NWB; the tests below pin
exactly what fails (so they notice when it starts working), while the navigation
API reads everything.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np
import pytest

pynwb = pytest.importorskip("pynwb")
hdmf_zarr = pytest.importorskip("hdmf_zarr")

import pandas as pd  # noqa: E402
from hdmf.build.errors import ConstructError  # noqa: E402
from hdmf.container import AbstractContainer  # noqa: E402
from hdmf_zarr import NWBZarrIO  # noqa: E402
from pynwb import NWBHDF5IO, NWBFile, TimeSeries  # noqa: E402

import h5lens  # noqa: E402
from h5lens.format import convention  # noqa: E402
from h5lens.read import navigate  # noqa: E402

T0 = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
EXTENSION_NAMESPACE = "h5lens-test-ext"

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


# -- the files ---------------------------------------------------------------------------


def write_ecephys(path: Path, series_name: str = "es") -> None:
    """Session metadata, scalars, NaN/Inf attributes, electrodes, units, trials, ogen."""
    from pynwb.ecephys import ElectricalSeries
    from pynwb.file import Subject
    from pynwb.ogen import OptogeneticStimulusSite

    nwb = NWBFile(
        session_description="ecephys session",
        identifier="id-ecephys",
        session_start_time=T0,
        experimenter=["Ada", "Bob"],
        keywords=["k1", "k2"],
        institution="Inst",
        lab="Lab",
        session_id="sess-1",
        notes="n",
        pharmacology="none",
        related_publications=["doi:10.1/x"],
        subject=Subject(subject_id="m1", age="P90D", species="Mus musculus", weight="20 g", sex="F"),
    )
    device = nwb.create_device(name="probe", description="a probe", manufacturer="maker")
    shank0 = nwb.create_electrode_group(
        name="shank0", description="g0", location="CA1", device=device, position=(1.0, 2.0, 3.0)
    )
    shank1 = nwb.create_electrode_group(name="shank1", description="g1", location="CA3", device=device)
    nwb.add_electrode_column("label", "a string column")
    for i in range(4):
        nwb.add_electrode(
            group=shank0 if i < 2 else shank1, location="CA1", x=float(i), y=np.nan, z=np.inf, label=f"e{i}"
        )
    region = nwb.create_electrode_table_region([0, 2, 3], "three electrodes")
    data = np.arange(60, dtype=np.float32).reshape(20, 3)
    data[1, 1], data[2, 2] = np.nan, np.inf
    nwb.add_acquisition(
        ElectricalSeries(
            name=series_name,
            data=data,
            electrodes=region,
            starting_time=0.5,
            rate=1000.0,
            resolution=np.nan,
            conversion=2.0,
            offset=-np.inf,
            filtering="none",
        )
    )
    ts = TimeSeries(
        name="ts",
        data=np.array([1.0, np.nan, np.inf, -np.inf, 5.0]),
        unit="m",
        timestamps=np.linspace(0, 1, 5),
        resolution=np.inf,
        comments="c",
        description="a time series",
        continuity="continuous",
    )
    nwb.add_acquisition(ts)
    nwb.add_unit_column("quality", "a string column")
    nwb.add_unit(spike_times=[0.1, 0.2], quality="good", electrodes=[0, 1], electrode_group=shank0)
    nwb.add_unit(spike_times=[0.3], quality="bad", electrodes=[2], electrode_group=shank1)
    nwb.add_unit(spike_times=[], quality="empty", electrodes=[3], electrode_group=shank1)
    nwb.add_trial(start_time=0.0, stop_time=1.0, timeseries=[ts])
    nwb.add_trial(start_time=1.0, stop_time=2.0, timeseries=[ts])
    nwb.add_ogen_site(
        OptogeneticStimulusSite(name="site", device=device, description="s", excitation_lambda=473.0, location="VISp")
    )
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)


def write_icephys(path: Path) -> None:
    """IntracellularRecordingsTable: TimeSeriesReferenceVectorData (compound with a reference field)."""
    from pynwb.testing.icephys_testutils import create_icephys_testfile

    create_icephys_testfile(os.fspath(path), randomize_data=False)


def write_plain(path: Path) -> None:
    """Metadata, scalars, a scalar compound, tables, no NaN/Inf attribute anywhere."""
    from pynwb.file import Subject

    nwb = NWBFile(
        session_description="plain session",
        identifier="id-plain",
        session_start_time=T0,
        session_id="s1",
        experimenter=["Ada"],
        subject=Subject(subject_id="m2", species="Mus musculus", age="P10D"),
    )
    device = nwb.create_device(name="probe", description="d")
    group = nwb.create_electrode_group(
        name="shank", description="g", location="CA1", device=device, position=(4.0, 5.0, 6.0)
    )
    for i in range(2):
        nwb.add_electrode(group=group, location="CA1")
    nwb.add_acquisition(
        TimeSeries(name="ts", data=np.arange(5.0), unit="m", starting_time=1.5, rate=10.0, resolution=0.1)
    )
    nwb.add_unit(spike_times=[0.1, 0.2, 0.4])
    nwb.add_unit(spike_times=[0.3])
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)


def write_linked(path: Path, target: Path) -> None:
    """External links into ``target``: a whole TimeSeries (container link) and one dataset."""
    from pynwb.misc import DecompositionSeries

    with NWBHDF5IO(target, "r") as src:
        ts = src.read().acquisition["ts"]
        nwb = NWBFile(session_description="links", identifier="id-links", session_start_time=T0)
        decomposition = DecompositionSeries(
            name="decomp", data=np.zeros((5, 1, 2)), metric="power", source_timeseries=ts, rate=1.0
        )
        decomposition.add_band(band_name="theta", band_limits=(4.0, 8.0), band_mean=6.0, band_stdev=1.0)
        decomposition.add_band(band_name="gamma", band_limits=(30.0, 80.0), band_mean=55.0, band_stdev=5.0)
        nwb.add_acquisition(decomposition)
        nwb.add_acquisition(TimeSeries(name="linked_data", data=ts.data, unit="m", rate=1.0))
        with NWBHDF5IO(path, "w", manager=src.manager) as io:
            io.write(nwb, link_data=True)


def extension_class(spec_dir: Path) -> type:
    """A custom neurodata type in its own namespace, exported to ``spec_dir`` and loaded."""
    from pynwb.spec import NWBAttributeSpec, NWBDatasetSpec, NWBGroupSpec, NWBNamespaceBuilder

    if EXTENSION_NAMESPACE not in pynwb.available_namespaces():
        lens = NWBGroupSpec(
            neurodata_type_def="LensSeries",
            neurodata_type_inc="TimeSeries",
            doc="a TimeSeries with lens settings",
            attributes=[
                NWBAttributeSpec(name="lens_power", dtype="float", doc="power"),
                NWBAttributeSpec(name="lens_label", dtype="text", doc="label"),
            ],
            datasets=[
                NWBDatasetSpec(name="gains", dtype="float", shape=(None,), doc="per-sample gains"),
                NWBDatasetSpec(name="focus", dtype="float", doc="a scalar"),
            ],
        )
        builder = NWBNamespaceBuilder(
            doc="h5lens test extension",
            name=EXTENSION_NAMESPACE,
            version="0.1.0",
            author="h5lens",
            contact="h5lens@example.org",
        )
        builder.include_type("TimeSeries", namespace="core")
        builder.add_spec(f"{EXTENSION_NAMESPACE}.extensions.yaml", lens)
        builder.export(f"{EXTENSION_NAMESPACE}.namespace.yaml", outdir=os.fspath(spec_dir))
        pynwb.load_namespaces(os.fspath(spec_dir / f"{EXTENSION_NAMESPACE}.namespace.yaml"))
    return pynwb.get_class("LensSeries", EXTENSION_NAMESPACE)


def write_extension(path: Path, spec_dir: Path) -> None:
    LensSeries = extension_class(spec_dir)
    nwb = NWBFile(session_description="extension", identifier="id-ext", session_start_time=T0)
    nwb.add_acquisition(
        LensSeries(
            name="lens",
            data=np.arange(4.0),
            unit="V",
            rate=2.0,
            lens_power=np.nan,
            lens_label="front",
            gains=np.array([1.0, 2.0, np.inf]),
            focus=-np.inf,
        )
    )
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)


#: file name -> whether it has NaN/±Inf attributes, external links
NWB_FILES = {
    "ecephys.nwb": {"nan_attrs": True, "external": False},
    "icephys.nwb": {"nan_attrs": True, "external": False},
    "plain.nwb": {"nan_attrs": False, "external": False},
    "linked.nwb": {"nan_attrs": False, "external": True},
    "extension.nwb": {"nan_attrs": True, "external": False},
}


def write_all(root: Path) -> Path:
    """Write every file of ``NWB_FILES`` into ``root``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_ecephys(root / "ecephys.nwb")
        write_icephys(root / "icephys.nwb")
        write_plain(root / "plain.nwb")
        write_linked(root / "linked.nwb", root / "ecephys.nwb")
        spec_dir = root / "spec"
        spec_dir.mkdir(exist_ok=True)
        write_extension(root / "extension.nwb", spec_dir)
    return root


_SHARED: dict[str, Any] = {}  # written once per process, for this module and test_validate.py


def shared_nwb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if "dir" not in _SHARED:
        _SHARED["dir"] = write_all(tmp_path_factory.mktemp("nwb"))
    return _SHARED["dir"]


def shared_manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], h5lens.Manifest]:
    """(file name, convention) -> manifest, written beside the file as ``<name>.<convention>.json``."""
    if "manifests" not in _SHARED:
        root = shared_nwb_dir(tmp_path_factory)
        out = {}
        for name in NWB_FILES:
            for convention in ("released", "proposal"):
                target = root / f"{name}.{convention}.json"
                h5lens.index(root / name, convention=convention).to_json(target)
                out[name, convention] = h5lens.Manifest.from_json(target)
        _SHARED["manifests"] = out
    return _SHARED["manifests"]


@pytest.fixture(scope="session")
def nwb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NWB files of this module, written once per session."""
    return shared_nwb_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], h5lens.Manifest]:
    return shared_manifests(tmp_path_factory)


# -- comparing containers ----------------------------------------------------------------


def tree_path(container: AbstractContainer) -> str:
    names = []
    node: Any = container
    while node is not None:
        names.append(node.name)
        node = node.parent
    return "/".join(reversed(names))


def identity(container: AbstractContainer) -> tuple[str, str, str | None, str]:
    """What a link or reference must resolve to: type, name, object id, place in its tree."""
    return (type(container).__name__, container.name, container.object_id, tree_path(container))


def plain(value: Any) -> Any:
    """Any value pynwb/hdmf hands out → plain Python/numpy, containers → their identity."""
    if isinstance(value, AbstractContainer):
        return ("container", identity(value))
    if isinstance(value, pd.DataFrame):
        return {
            "index": plain(list(value.index)),
            "columns": [str(c) for c in value.columns],
            "values": [plain(list(value[c])) for c in value.columns],
        }
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return value.decode() if isinstance(value, (bytes, np.bytes_)) else str(value)
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value
    if isinstance(value, np.void):
        return tuple(plain(value[n]) for n in value.dtype.names)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):  # namedtuples too (TimeSeriesReference)
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.names:
            return Records(value.shape, [plain(v) for v in value.ravel()])
        if value.dtype.kind in "biufc":
            return value
        if value.ndim == 0:
            return plain(value[()])
        return [plain(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "__getitem__"):  # h5py / zarr / hdmf datasets
        shape = getattr(value, "shape", None)
        return plain(value[()] if shape == () else value[:])
    return value


class Records(NamedTuple):
    """A structured array, plain: its shape and its records as tuples."""

    shape: tuple[int, ...]
    rows: list[Any]


def differences(expected: Any, actual: Any, where: str) -> Iterator[str]:
    """Where ``actual`` differs from ``expected`` (both plain), NaN equal to NaN."""
    if isinstance(expected, Records) and isinstance(actual, Records) and expected.shape != actual.shape:
        yield f"{where}: structured shape {expected.shape} != {actual.shape}"
        return
    if isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        e, a = np.asarray(expected), np.asarray(actual)
        if e.shape != a.shape or e.dtype != a.dtype:
            yield f"{where}: {e.dtype}{e.shape} != {a.dtype}{a.shape}"
            return
        try:
            np.testing.assert_array_equal(e, a)
        except AssertionError:
            yield f"{where}: values differ: {e!r} != {a!r}"
        return
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(expected) != set(actual):
            yield f"{where}: keys {sorted(expected)} != {sorted(actual)}"
            return
        for key in expected:
            yield from differences(expected[key], actual[key], f"{where}[{key!r}]")
        return
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if len(expected) != len(actual):
            yield f"{where}: length {len(expected)} != {len(actual)}"
            return
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            yield from differences(e, a, f"{where}[{i}]")
        return
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) and math.isnan(actual):
        return
    if type(expected) is not type(actual) and not (
        isinstance(expected, (int, float)) and isinstance(actual, (int, float)) and not isinstance(expected, bool)
    ):
        yield f"{where}: {type(expected).__name__} {expected!r} != {type(actual).__name__} {actual!r}"
        return
    if expected != actual:
        yield f"{where}: {expected!r} != {actual!r}"


def container_differences(expected: NWBFile, actual: NWBFile) -> list[str]:
    """Every container of the two trees, matched by object id, field by field."""
    from hdmf.common import DynamicTable
    from hdmf.container import Data

    found: list[str] = []
    exp_objects, act_objects = expected.objects, actual.objects
    if set(exp_objects) != set(act_objects):
        return [f"objects differ: {sorted(set(exp_objects) ^ set(act_objects))}"]
    for object_id, e in exp_objects.items():
        a = act_objects[object_id]
        where = f"{type(e).__name__} {tree_path(e)}"
        found.extend(differences(plain(identity(e)), plain(identity(a)), f"{where} identity"))
        parents = [identity(c.parent) if c.parent is not None else None for c in (e, a)]
        found.extend(differences(plain(parents[0]), plain(parents[1]), f"{where} parent"))
        if set(e.fields) != set(a.fields):
            found.append(f"{where}: fields {sorted(e.fields)} != {sorted(a.fields)}")
            continue
        for field in sorted(e.fields):
            found.extend(differences(plain(e.fields[field]), plain(a.fields[field]), f"{where}.{field}"))
        if isinstance(e, Data):  # VectorData, VectorIndex, ElementIdentifiers, ...: values are not a field
            found.extend(differences(plain(e.data), plain(a.data), f"{where}.data"))
        if isinstance(e, DynamicTable) and len(e):
            found.extend(differences(plain(e.to_dataframe()), plain(a.to_dataframe()), f"{where} dataframe"))
    return found


class ManifestNWBZarrIO(NWBZarrIO):
    """NWBZarrIO that follows external links into other HDF5 files through h5lens.

    hdmf-zarr opens a link's ``source`` as a zarr store path relative to the store it
    reads; for a manifest that source is an HDF5 file. This resolves it by the
    navigation API's policy (``<file>.json`` manifest, else the file indexed on the fly).
    """

    def _resolve_ref_source(self, source_file):  # hdmf-zarr's hook for link/reference sources
        store = self._file.store
        manifest = store.manifest
        linked = navigate.load_external(manifest, source_file, index=h5lens.index)
        return h5lens.ManifestStore(linked, source_options=store.source_options)


def read_hdf5(path: Path) -> tuple[NWBHDF5IO, NWBFile]:
    io = NWBHDF5IO(path, "r")
    return io, io.read()


@pytest.fixture(scope="module")
def released_reads(nwb_dir, manifests):
    """name -> (NWBFile read by NWBHDF5IO, NWBFile read by hdmf-zarr from the released manifest)."""
    ios, out = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, info in NWB_FILES.items():
            h5io, expected = read_hdf5(nwb_dir / name)
            cls = ManifestNWBZarrIO if info["external"] else NWBZarrIO
            zio = cls(h5lens.open_store(manifests[name, "released"]), mode="r")
            ios += [h5io, zio]
            out[name] = (expected, zio.read())
    yield out
    for io in ios:
        io.close()


# -- released: hdmf-zarr reads NWB as NWBHDF5IO does ------------------------------------


@pytest.mark.parametrize("name", list(NWB_FILES))
def test_released_reads_like_nwbhdf5io(released_reads, name):
    expected, actual = released_reads[name]
    assert container_differences(expected, actual) == []


def test_released_session_metadata_and_scalars(released_reads):
    expected, actual = released_reads["ecephys.nwb"]
    for field in ("session_description", "identifier", "session_id", "institution", "lab", "notes"):
        assert getattr(actual, field) == getattr(expected, field)
        assert isinstance(getattr(actual, field), str)
    assert actual.session_start_time == expected.session_start_time
    assert list(actual.keywords[:]) == list(expected.keywords[:])
    assert actual.subject.age == expected.subject.age
    es_e, es_a = expected.acquisition["es"], actual.acquisition["es"]
    assert es_a.starting_time == es_e.starting_time and es_a.rate == es_e.rate
    assert actual.ogen_sites["site"].excitation_lambda == expected.ogen_sites["site"].excitation_lambda


def test_released_nan_inf_attributes(released_reads):
    expected, actual = released_reads["ecephys.nwb"]
    es_e, es_a = expected.acquisition["es"], actual.acquisition["es"]
    assert math.isnan(es_e.resolution) and math.isnan(es_a.resolution)
    assert es_a.offset == es_e.offset == -math.inf
    assert actual.acquisition["ts"].resolution == expected.acquisition["ts"].resolution == math.inf
    np.testing.assert_array_equal(actual.acquisition["ts"].data[:], expected.acquisition["ts"].data[:])
    lens_e, lens_a = (read.acquisition["lens"] for read in released_reads["extension.nwb"])
    assert math.isnan(lens_a.lens_power) and math.isnan(lens_e.lens_power)
    assert lens_a.focus == lens_e.focus == -math.inf


def test_released_links_references_and_tables(released_reads):
    expected, actual = released_reads["ecephys.nwb"]
    # soft links (ElectrodeGroup.device) resolve to the same device object
    assert actual.electrode_groups["shank0"].device is actual.devices["probe"]
    assert identity(actual.electrode_groups["shank1"].device) == identity(expected.electrode_groups["shank1"].device)
    # scalar compound
    position_e, position_a = expected.electrode_groups["shank0"].position, actual.electrode_groups["shank0"].position
    assert position_a.dtype.names == position_e.dtype.names and position_a.tolist() == position_e.tolist()
    # DynamicTableRegion (its table is an attribute reference) and object-reference columns
    region = actual.acquisition["es"].electrodes
    assert region.table is actual.electrodes and list(region.data[:]) == list(expected.acquisition["es"].electrodes.data[:])
    assert [g.name for g in actual.electrodes["group"].data[:]] == [g.name for g in expected.electrodes["group"].data[:]]
    # ragged columns
    spikes_a = actual.units["spike_times"]
    spikes_e = expected.units["spike_times"]
    for i in range(len(spikes_e)):
        np.testing.assert_array_equal(spikes_a[i], spikes_e[i])
    # TimeSeriesReferenceVectorData in the trials table
    ref_a, ref_e = actual.trials["timeseries"][0][0], expected.trials["timeseries"][0][0]
    assert (ref_a.idx_start, ref_a.count) == (ref_e.idx_start, ref_e.count)
    assert ref_a.timeseries is actual.acquisition["ts"]


def test_released_time_series_references(released_reads):
    expected, actual = released_reads["icephys.nwb"]
    table_e, table_a = expected.intracellular_recordings, actual.intracellular_recordings
    assert len(table_a) == len(table_e)
    for i in range(len(table_e)):
        for category in ("stimuli", "responses"):
            column = "stimulus" if category == "stimuli" else "response"
            e = table_e[category][column][i]
            a = table_a[category][column][i]
            assert (a.idx_start, a.count) == (e.idx_start, e.count)
            if e.timeseries is None:  # a missing stimulus reads as an empty reference
                assert a.timeseries is None
            else:
                assert identity(a.timeseries) == identity(e.timeseries)
        assert identity(table_a["electrodes"]["electrode"][i]) == identity(table_e["electrodes"]["electrode"][i])


def fresh_catalog():
    from hdmf.spec import NamespaceCatalog
    from pynwb.spec import NWBDatasetSpec, NWBGroupSpec, NWBNamespace

    return NamespaceCatalog(NWBGroupSpec, NWBDatasetSpec, NWBNamespace)


@pytest.mark.parametrize("name", ["ecephys.nwb", "extension.nwb"])
def test_released_cached_specifications(nwb_dir, manifests, name):
    """The cached specifications (root ``.specloc``) load as from the HDF5 file, extension included."""
    expected, actual = fresh_catalog(), fresh_catalog()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded_e = NWBHDF5IO.load_namespaces(expected, path=nwb_dir / name)
        loaded_a = NWBZarrIO.load_namespaces(actual, path=h5lens.open_store(manifests[name, "released"]))
    assert loaded_a == loaded_e
    assert actual.namespaces == expected.namespaces
    for namespace in expected.namespaces:
        assert dict(actual.get_namespace(namespace)) == dict(expected.get_namespace(namespace))
        for type_name in expected.get_namespace(namespace).get_registered_types():
            assert actual.get_spec(namespace, type_name) == expected.get_spec(namespace, type_name)
    if name == "extension.nwb":
        assert EXTENSION_NAMESPACE in actual.namespaces


def test_released_extension_type(released_reads):
    expected, actual = released_reads["extension.nwb"]
    lens_e, lens_a = expected.acquisition["lens"], actual.acquisition["lens"]
    assert type(lens_a).__name__ == type(lens_e).__name__ == "LensSeries"
    assert lens_a.lens_label == lens_e.lens_label
    np.testing.assert_array_equal(lens_a.gains[:], lens_e.gains[:])


def test_released_external_links(nwb_dir, manifests, released_reads):
    expected, actual = released_reads["linked.nwb"]
    source_e = expected.acquisition["decomp"].source_timeseries
    source_a = actual.acquisition["decomp"].source_timeseries
    assert identity(source_a) == identity(source_e)
    np.testing.assert_array_equal(source_a.data[:], source_e.data[:])
    np.testing.assert_array_equal(actual.acquisition["linked_data"].data[:], expected.acquisition["linked_data"].data[:])


def test_plain_nwbzarrio_cannot_follow_external_links(manifests):
    """hdmf-zarr opens the link source as a zarr path joined to ``str(store)``: no such path."""
    store = h5lens.open_store(manifests["linked.nwb", "released"])
    with pytest.raises(FileNotFoundError, match=r"ManifestStore\(.*\)/ecephys\.nwb does not exist"):
        NWBZarrIO(store, mode="r").read()


# -- proposal: what hdmf-zarr 0.14 cannot read, precisely ---------------------------------


@pytest.mark.parametrize("name", list(NWB_FILES))
def test_proposal_hdmf_zarr_fails_on_cached_specs(manifests, name):
    """hdmf-zarr reads cached spec strings with ``group[path][()]``: a ``_SCALAR`` (1,) array gives a list."""
    store = h5lens.open_store(manifests[name, "proposal"])
    with pytest.raises(json.JSONDecodeError, match=r"Expecting value: line 1 column 2 \(char 1\)"):
        NWBZarrIO(store, mode="r")


@pytest.mark.parametrize("name", [n for n, info in NWB_FILES.items() if info["nan_attrs"]])
def test_proposal_hdmf_zarr_fails_on_nan_strings(manifests, name):
    """Past the specs (pynwb's own namespaces), NaN written as the string "NaN" is not a float."""
    store = h5lens.open_store(manifests[name, "proposal"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConstructError, match=r"incorrect type for '(resolution|lens_power)' \(got 'str', expected 'float[^']*'\)"):
            NWBZarrIO(store, mode="r", load_namespaces=False).read()


def decode_nan_strings(manifest: h5lens.Manifest) -> h5lens.Manifest:
    """The manifest a reader implementing the proposal's NaN decoding (section 7) would see."""
    from dataclasses import replace

    def decode(value: Any) -> Any:
        if isinstance(value, str) and value in convention.NON_FINITE_TEXT:
            return convention.NON_FINITE_TEXT[value]
        if isinstance(value, list):
            return [decode(v) for v in value]
        if isinstance(value, dict):
            return {k: decode(v) for k, v in value.items()}
        return value

    return replace(manifest, nodes={p: {**doc, "attributes": decode(doc.get("attributes", {}))} for p, doc in manifest.nodes.items()})


#: with specs from pynwb and NaN decoded, what still differs from NWBHDF5IO under the proposal
PROPOSAL_LEFTOVERS = {
    # a scalar compound stays a shape-(1,) array: hdmf-zarr unwraps only 0-d arrays
    "ecephys.nwb": ["ElectrodeGroup root/shank0.position: structured shape () != (1,)"],
    "plain.nwb": ["ElectrodeGroup root/shank.position: structured shape () != (1,)"],
    "icephys.nwb": [],
    "extension.nwb": [],
}


@pytest.mark.parametrize("name", list(PROPOSAL_LEFTOVERS))
def test_proposal_hdmf_zarr_reads_the_rest(nwb_dir, manifests, name):
    manifest = manifests[name, "proposal"]
    if NWB_FILES[name]["nan_attrs"]:
        manifest = decode_nan_strings(manifest)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h5io, expected = read_hdf5(nwb_dir / name)
        with h5io, NWBZarrIO(h5lens.open_store(manifest), mode="r", load_namespaces=False) as zio:
            found = container_differences(expected, zio.read())
    assert found == PROPOSAL_LEFTOVERS[name]


# -- the navigation API reads every object as h5py does, in both profiles -----------------


class H5Files:
    """h5py files opened by path, to find where a navigation node lives."""

    def __init__(self) -> None:
        self.opened: dict[str, h5py.File] = {}

    def get(self, path: str) -> h5py.File:
        key = os.path.realpath(path)
        if key not in self.opened:
            self.opened[key] = h5py.File(key, "r")
        return self.opened[key]

    def close(self) -> None:
        for f in self.opened.values():
            f.close()


def object_key(obj: h5py.HLObject) -> tuple[str, int]:
    return os.path.realpath(obj.file.filename), h5py.h5o.get_info(obj.id).addr


def node_key(node: navigate.Node, files: H5Files) -> tuple[str, int]:
    return object_key(files.get(node.file)[node.h5_path])


def object_array(items: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out.reshape(shape)


def h5_value(value: Any, h5file: h5py.File, files: H5Files) -> Any:
    """An h5py value in the navigation API's terms: references → object keys, text → str."""
    if isinstance(value, h5py.Empty):
        return ("empty", np.dtype(value.dtype).kind)
    if isinstance(value, h5py.Reference):
        return object_key(h5file[value]) if value else None
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode()
    if isinstance(value, np.void):
        return tuple(h5_value(value[n], h5file, files) for n in value.dtype.names)
    if isinstance(value, np.ndarray):
        if value.dtype.names:
            return [h5_value(v, h5file, files) for v in value.ravel()]
        if value.dtype.kind in "OSU":
            return object_array([h5_value(v, h5file, files) for v in value.ravel()], value.shape)
        return value
    if isinstance(value, np.generic):
        return value.item()
    return value


def nav_value(value: Any, files: H5Files) -> Any:
    if isinstance(value, h5py.Empty):
        return ("empty", np.dtype(value.dtype).kind)
    if isinstance(value, navigate.Node):
        return node_key(value, files)
    if isinstance(value, np.void):
        return tuple(nav_value(value[n], files) for n in value.dtype.names)
    if isinstance(value, list):
        return object_array([nav_value(v, files) for v in value], (len(value),))
    if isinstance(value, np.ndarray):
        if value.dtype.names:
            return [nav_value(v, files) for v in value.ravel()]
        if value.dtype.kind in "OTSU":
            return object_array([nav_value(v, files) for v in value.ravel()], value.shape)
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode()
    return value


def same(expected: Any, actual: Any, where: str) -> list[str]:
    if isinstance(expected, np.ndarray) and expected.dtype.kind in "biufc" and isinstance(actual, np.ndarray):
        if expected.shape != actual.shape or expected.dtype.newbyteorder("=") != actual.dtype:
            return [f"{where}: {expected.dtype}{expected.shape} != {actual.dtype}{actual.shape}"]
    if isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        e, a = np.asarray(expected), np.asarray(actual)
        if e.dtype.kind == "O" or a.dtype.kind == "O":
            e, a = e.astype(object), a.astype(object)
            if e.shape != a.shape:
                return [f"{where}: shape {e.shape} != {a.shape}"]
            return [m for i, (x, y) in enumerate(zip(e.ravel(), a.ravel(), strict=True)) for m in same(x, y, f"{where}[{i}]")]
        try:
            np.testing.assert_array_equal(e, a)
        except AssertionError:
            return [f"{where}: {e!r} != {a!r}"]
        return []
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if len(expected) != len(actual):
            return [f"{where}: length {len(expected)} != {len(actual)}"]
        return [m for i, (x, y) in enumerate(zip(expected, actual, strict=True)) for m in same(x, y, f"{where}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) and math.isnan(actual):
        return []
    return [] if expected == actual and type(expected) is type(actual) or (
        expected == actual and isinstance(expected, (int, float)) and isinstance(actual, (int, float))
    ) else [f"{where}: {expected!r} != {actual!r}"]


def navigation_differences(h5file: h5py.File, root: navigate.Group, files: H5Files) -> list[str]:
    """Walk the HDF5 file; every member, link, attribute and value must read the same."""
    found: list[str] = []
    seen: set[tuple[str, int]] = set()

    def attributes(obj: h5py.HLObject, node: navigate.Node, where: str) -> None:
        if sorted(obj.attrs) != sorted(node.attrs):
            found.append(f"{where}: attrs {sorted(obj.attrs)} != {sorted(node.attrs)}")
            return
        for name in obj.attrs:
            found.extend(same(h5_value(obj.attrs[name], h5file, files), nav_value(node.attrs[name], files), f"{where}@{name}"))

    def dataset(obj: h5py.Dataset, node: navigate.Dataset, where: str) -> None:
        if obj.shape != node.shape:
            found.append(f"{where}: shape {obj.shape} != {node.shape}")
            return
        found.extend(same(h5_value(obj[()], h5file, files), nav_value(node[()], files), where))

    def group(obj: h5py.Group, node: navigate.Group, where: str) -> None:
        attributes(obj, node, where)
        if sorted(obj.keys()) != sorted(node.keys()):
            found.append(f"{where}: members {sorted(obj.keys())} != {sorted(node.keys())}")
            return
        for name in obj:
            link = obj.get(name, getlink=True)
            member, child = obj[name], node[name]
            here = f"{where.rstrip('/')}/{name}"
            if object_key(member) != node_key(child, files):
                found.append(f"{here}: reaches {node_key(child, files)} not {object_key(member)}")
                continue
            entry = node.link(name)
            if isinstance(link, h5py.ExternalLink):
                if entry is None or entry.source != link.filename or entry.path != link.path:
                    found.append(f"{here}: external link {entry} != {link.filename}:{link.path}")
                continue
            if isinstance(link, h5py.SoftLink) or object_key(member) in seen:
                if entry is None or entry.source != ".":
                    found.append(f"{here}: expected a link entry, got {entry}")
                continue
            seen.add(object_key(member))
            if isinstance(member, h5py.Group):
                group(member, child, here)
            else:
                attributes(member, child, here)
                dataset(member, child, here)

    seen.add(object_key(h5file))
    group(h5file, root, "/")
    return found


@pytest.mark.parametrize("convention", ["released", "proposal"])
@pytest.mark.parametrize("name", list(NWB_FILES))
def test_navigation_reads_like_h5py(nwb_dir, manifests, name, convention):
    files = H5Files()
    try:
        root = h5lens.open(manifests[name, convention])
        assert navigation_differences(files.get(nwb_dir / name), root, files) == []
    finally:
        files.close()


@pytest.mark.parametrize("convention", ["released", "proposal"])
def test_navigation_against_pynwb(nwb_dir, manifests, convention):
    """Spot checks in pynwb's terms: scalars, NaN attributes, links, references, compounds."""
    root = h5lens.open(manifests["ecephys.nwb", convention])
    with NWBHDF5IO(nwb_dir / "ecephys.nwb", "r") as io:
        nwb = io.read()
        assert root["session_description"][()] == nwb.session_description
        assert root["general/session_id"].shape == ()
        es = root["acquisition/es"]
        assert math.isnan(es["data"].attrs["resolution"]) and es["data"].attrs["offset"] == nwb.acquisition["es"].offset
        assert es["starting_time"][()] == nwb.acquisition["es"].starting_time
        assert es["electrodes"].attrs["table"] == root["general/extracellular_ephys/electrodes"]
        shank = root["general/extracellular_ephys/shank0"]
        assert shank["device"] == root["general/devices/probe"]
        assert shank.link("device") == navigate.Link("device", ".", "/general/devices/probe")
        assert "_LINKS" in shank.convention_attrs and "_LINKS" not in shank.attrs
        assert shank["position"][()].tolist() == nwb.electrode_groups["shank0"].position.tolist()
        groups = root["general/extracellular_ephys/electrodes/group"]
        assert [g.name for g in groups[:]] == [g.name for g in nwb.electrodes["group"].data[:]]
        assert list(groups.paths()) == ["/general/extracellular_ephys/" + g.name for g in nwb.electrodes["group"].data[:]]
        trials = root["intervals/trials/timeseries"]
        assert trials.reference_fields == ("timeseries",)
        assert [r["timeseries"] for r in trials[:]] == [root["acquisition/ts"]] * 2
    linked = h5lens.open(manifests["linked.nwb", convention])
    source = linked["acquisition/decomp/source_timeseries"]
    assert source.file == os.fspath(nwb_dir / "ecephys.nwb") and source.h5_path == "/acquisition/ts"


def test_external_manifest_beside_is_preferred(nwb_dir, manifests, tmp_path):
    """A ``<file>.json`` manifest beside the linked file is used instead of indexing it."""
    import shutil

    for name in ("linked.nwb", "ecephys.nwb"):
        shutil.copy(nwb_dir / name, tmp_path / name)
    h5lens.index(tmp_path / "ecephys.nwb", convention="proposal").to_json(tmp_path / "ecephys.nwb.json")
    external = navigate.load_external(h5lens.index(tmp_path / "linked.nwb"), "ecephys.nwb")
    assert external.convention == "proposal"
    (tmp_path / "ecephys.nwb.json").unlink()
    with pytest.raises(h5lens.SourceNotFoundError, match="index=h5lens.index"):  # no indexer: no scanner
        navigate.load_external(h5lens.index(tmp_path / "linked.nwb"), "ecephys.nwb")
    linked = h5lens.index(tmp_path / "linked.nwb")
    assert navigate.load_external(linked, "ecephys.nwb", index=h5lens.index).convention == "released"
    os.unlink(tmp_path / "ecephys.nwb")
    with pytest.raises(h5lens.SourceNotFoundError):
        navigate.load_external(h5lens.index(tmp_path / "linked.nwb"), "ecephys.nwb", index=h5lens.index)
