"""h5lens.validate (h5lens.read.validation): deliberately broken manifests, each caught; real manifests clean."""

from __future__ import annotations

import base64
import copy
import importlib
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from h5lens.manifest.model import INLINE
from h5lens.read.validation import KNOWN_DTYPES, Problem, validate


def edited(table, **changes):
    """A copy of a chunk table with some grid cells changed (tables are immutable)."""
    grids = {}
    for name, cells in changes.items():
        grid = getattr(table, name).copy()
        for index, value in cells.items():
            grid[index] = value
        grids[name] = grid
    return replace(table, **grids)


def write_sample(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        group = f.create_group("g")
        target = group.create_dataset("target", data=np.arange(4.0))
        group["soft"] = h5py.SoftLink("/g/target")
        f.attrs["ref"] = target.ref
        f.attrs["nan"] = np.nan
        f.create_dataset("refs", data=[target.ref, group.ref], dtype=h5py.ref_dtype)
        f.create_dataset("scalar", data=3.5)
        records = np.zeros(400, dtype=[("a", "<i4"), ("b", "<f8")])
        records["a"] = np.arange(400)
        f.create_dataset("records", data=records, chunks=(100,))  # 1200-byte chunks: referenced
        f.create_dataset("small_records", data=records[:3])  # 36 bytes: inline
        compound = np.zeros(2, dtype=[("idx", "<i4"), ("target", h5py.ref_dtype)])
        compound["idx"] = [0, 1]
        compound["target"] = [target.ref, group.ref]
        f.create_dataset("compound_refs", data=compound)
    return path


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return write_sample(tmp_path_factory.mktemp("validate") / "sample.h5")


@pytest.fixture(scope="module")
def indexed(sample) -> dict[str, h5lens.Manifest]:
    return {c: h5lens.index(sample, convention=c) for c in ("released", "proposal")}


def test_scanned_reference_field_fill_is_null(sample):
    assert found(h5lens.index(sample)) == []


@pytest.fixture
def released(indexed) -> h5lens.Manifest:
    return copy.deepcopy(indexed["released"])


@pytest.fixture
def proposal(indexed) -> h5lens.Manifest:
    return copy.deepcopy(indexed["proposal"])


def found(manifest: h5lens.Manifest) -> list[str]:
    return [str(p) for p in validate(manifest)]


def attrs(manifest: h5lens.Manifest, key: str) -> dict:
    return manifest.nodes[key]["attributes"]


@pytest.mark.parametrize("convention", ["released", "proposal"])
def test_sample_is_clean(indexed, convention):
    assert validate(indexed[convention]) == []


def test_problem_is_path_and_message():
    assert str(Problem("/g", "broken")) == "/g: broken"
    assert {"float64", "str", "bytes", "object_reference"} <= KNOWN_DTYPES


def test_validates_a_manifest_file(released, tmp_path):
    released.to_json(tmp_path / "m.json")
    assert validate(tmp_path / "m.json") == []


def test_dangling_link(released):
    attrs(released, "g")["_LINKS"][0]["path"] = "/g/missing"
    assert found(released) == ["/g: _LINKS[0] ('soft') points at '/g/missing', which does not exist"]


def test_link_through_a_link_resolves(released):
    attrs(released, "")["_LINKS"] = [{"name": "via", "source": ".", "path": "/g/soft"}]
    assert found(released) == []
    attrs(released, "")["_LINKS"] = [{"name": "via", "source": ".", "path": "/g/soft/deeper"}]
    assert found(released) == ["/: _LINKS[0] ('via') points at '/g/soft/deeper', which does not exist"]


def test_external_link_targets_are_not_checked(released):
    attrs(released, "")["_LINKS"] = [{"name": "ext", "source": "other.h5", "path": "/anything"}]
    assert found(released) == []


def test_reference_to_missing_path(released):
    attrs(released, "")["ref"] = {"_REFERENCE": {"source": ".", "path": "/nope"}}
    assert found(released) == ["/: attribute 'ref': _REFERENCE to '/nope', which does not exist"]


def test_reference_nested_in_a_list(released):
    attrs(released, "g/target")["refs"] = [{"_REFERENCE": {"source": ".", "path": "/g"}}, {"_REFERENCE": {"source": ".", "path": "/x"}}]
    assert found(released) == ["/g/target: attribute 'refs'[1]: _REFERENCE to '/x', which does not exist"]


def test_malformed_reference(released):
    attrs(released, "")["ref"] = {"_REFERENCE": {"path": 3, "object_id": "x"}}
    assert found(released) == [
        "/: attribute 'ref': _REFERENCE lacks ['source']",
        "/: attribute 'ref': _REFERENCE has keys beyond source and path: ['object_id']",
        "/: attribute 'ref': _REFERENCE values must be strings: path=3",
    ]


def test_removed_target_breaks_every_reference(released):
    released = replace(
        released,
        nodes={k: v for k, v in released.nodes.items() if k != "g/target"},
        chunks={k: v for k, v in released.chunks.items() if k != "g/target"},
    )
    assert found(released) == [
        "/: attribute 'ref': _REFERENCE to '/g/target', which does not exist",
        "/compound_refs: reference field 'target' paths that do not exist: '/g/target'",
        "/g: _LINKS[0] ('soft') points at '/g/target', which does not exist",
        "/refs: object reference paths that do not exist: '/g/target'",
    ]


def test_bytes_attribute_values(released, tmp_path):
    path = tmp_path / "latin1.h5"
    with h5py.File(path, "w") as f:
        f.attrs.create("name", data=b"caf\xe9", dtype=h5py.string_dtype("ascii"))
    assert validate(h5lens.index(path)) == []
    attrs(released, "")["b"] = {"_BYTES": "not base64!"}
    attrs(released, "")["c"] = {"_BYTES": ["AA==", 3]}
    attrs(released, "")["d"] = {"_BYTES": "AA==", "x": 1}
    problems = found(released)
    assert len(problems) == 3 and all("_BYTES" in p for p in problems), problems


def test_text_strict_parsers_refuse(released):
    """A lone surrogate (what h5py makes of non-UTF-8 text) is not UTF-8 JSON: orjson refuses it."""
    attrs(released, "g")["name"] = "caf\udce9"
    (problem,) = found(released)
    assert problem.startswith("/g: metadata is not valid UTF-8 JSON")


def test_chunk_key_encoding_the_grammar_does_not_know(released):
    released.nodes["g/target"]["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": "|"}}
    problems = found(released)
    assert any(p.startswith("/g/target: chunk_key_encoding") for p in problems), problems


def test_unknown_dtype(released):
    attrs(released, "g/target")["_DTYPE"] = "float"
    assert found(released) == [f"/g/target: _DTYPE 'float' is not one of {sorted(KNOWN_DTYPES)}"]


def test_dtype_disagreeing_with_data_type(released):
    attrs(released, "g/target")["_DTYPE"] = "int32"
    attrs(released, "refs")["_DTYPE"] = "float64"
    assert found(released) == [
        "/g/target: _DTYPE 'int32' does not match data_type 'float64'",
        "/refs: _DTYPE 'float64' does not match data_type 'string'",
    ]


def test_dtype_missing_or_on_a_compound(released):
    del attrs(released, "g/target")["_DTYPE"]
    attrs(released, "records")["_DTYPE"] = "bytes"
    assert found(released) == [
        "/g/target: non-compound array without _DTYPE",
        "/records: _DTYPE 'bytes' on a structured array (compounds carry their fields in data_type)",
    ]


def test_reserved_attribute_on_the_wrong_node(released):
    attrs(released, "g")["_DTYPE"] = "float64"
    attrs(released, "scalar")["_LINKS"] = []
    assert found(released) == [
        "/g: _DTYPE belongs on arrays, not on a group",
        "/scalar: _LINKS belongs on groups, not on an array",
    ]


def test_non_list_links(released):
    attrs(released, "g")["_LINKS"] = {"name": "soft", "source": ".", "path": "/g/target"}
    assert found(released) == ["/g: _LINKS must be a list of {name, source, path} objects, not dict"]


def test_malformed_link_entries(released):
    attrs(released, "g")["_LINKS"] = [
        {"name": "a", "source": "."},
        {"name": "b", "source": ".", "path": 7},
        {"name": "c", "source": ".", "path": "/g/target", "object_id": "x"},
        {"name": "target", "source": ".", "path": "/g/target"},
        {"name": "c", "source": ".", "path": "g/target"},
        "soft",
    ]
    assert found(released) == [
        "/g: _LINKS[0] lacks ['path']",
        "/g: _LINKS[1] values must be strings: path=7",
        "/g: _LINKS[2] has keys the convention does not define: ['object_id']",
        "/g: _LINKS[3] name 'target' is also a child node",
        "/g: _LINKS[4] name 'c' appears twice in _LINKS",
        "/g: _LINKS[4] path 'g/target' is not absolute",
        "/g: _LINKS[5] must be an object with name, source, path; got 'soft'",
    ]


def test_scalar_marker_on_a_non_scalar(proposal):
    attrs(proposal, "g/target")["_SCALAR"] = True
    attrs(proposal, "scalar")["_SCALAR"] = 1
    assert found(proposal) == [
        "/g/target: _SCALAR on an array of shape [4]; only shape [1] arrays are scalars",
        "/scalar: _SCALAR must be true, not 1",
    ]


def test_scalar_forms_follow_the_profile(released, proposal):
    assert released.nodes["scalar"]["shape"] == [] and proposal.nodes["scalar"]["shape"] == [1]
    # a proposal scalar inside a released manifest, and the other way round
    released = replace(released, nodes={**released.nodes, "scalar": copy.deepcopy(proposal.nodes["scalar"])})
    released = replace(released, chunks={**released.chunks, "scalar": copy.deepcopy(proposal.chunks["scalar"])})
    assert found(released) == ["/scalar: _SCALAR in a released-profile manifest (released scalars are 0-d arrays)"]
    proposal = replace(proposal, convention="proposal")
    proposal = replace(proposal, nodes={**proposal.nodes, "scalar": copy.deepcopy(released.nodes["scalar"])})
    proposal.nodes["scalar"]["attributes"].pop("_SCALAR")
    proposal.nodes["scalar"]["shape"] = []
    proposal.nodes["scalar"]["chunk_grid"]["configuration"]["chunk_shape"] = []
    proposal = replace(proposal, chunks={**proposal.chunks, "scalar": proposal.chunks["scalar"].reshaped(())})
    assert found(proposal) == [
        "/scalar: 0-d array in a proposal-profile manifest (proposal scalars are shape [1] + _SCALAR)"
    ]


def test_nan_form_follows_the_profile(proposal):
    assert attrs(proposal, "")["nan"] == "NaN"
    attrs(proposal, "")["nan"] = float("nan")
    assert found(proposal) == ["/: attribute 'nan': bare nan in a proposal-profile manifest (the proposal writes strings)"]


def test_structured_referenced_chunk_length_mismatch(released):
    table = released.chunks["records"]
    assert table.source[1] == 0 and table.length[1] == 1200
    released = replace(released, chunks={**released.chunks, "records": edited(table, length={1: 1199})})
    assert found(released) == [
        "/records: referenced chunk 1 holds 1199 bytes; a bytes-only chunk of shape [100] and itemsize 12 "
        "([('a', '<i4'), ('b', '<f8')]) holds 1200"
    ]


def test_structured_inline_chunk_length_mismatch(released):
    table = released.chunks["small_records"]
    assert table.source[0] == INLINE
    released = replace(released, chunks={**released.chunks, "small_records": replace(
        table, inline={0: table.inline[0][:-1]}, length=table.length - np.uint64(1)
    )})
    problems = found(released)
    assert problems == [
        "/small_records: inline chunk 0 holds 35 bytes; a bytes-only chunk of shape [3] and itemsize 12 "
        "([('a', '<i4'), ('b', '<f8')]) holds 36",
        "/small_records: inline chunk 0 does not decode with the array's codecs",
    ]


def test_referenced_chunk_past_the_source_end(released):
    released = replace(released, chunks={**released.chunks, "records": edited(released.chunks["records"], offset={3: released.sources[0].size - 10})})
    assert found(released) == [
        f"/records: chunk 3 ends at byte {released.sources[0].size + 1190}, past the source's "
        f"{released.sources[0].size} bytes"
    ]


def test_reference_fields_naming_no_field(released):
    attrs(released, "compound_refs")["_REFERENCE_FIELDS"] = ["target", "missing"]
    attrs(released, "records")["_REFERENCE_FIELDS"] = ["a"]
    attrs(released, "g/target")["_REFERENCE_FIELDS"] = ["x"]
    assert found(released) == [
        "/compound_refs: _REFERENCE_FIELDS names fields the structured dtype lacks: ['missing'] (has ['idx', 'target'])",
        "/g/target: _REFERENCE_FIELDS on an array whose data_type is not structured",
        "/records: reference field 'a' is int32, not text (fixed_length_utf32)",
    ]
    attrs(released, "compound_refs")["_REFERENCE_FIELDS"] = "target"
    assert found(released)[0] == "/compound_refs: _REFERENCE_FIELDS must be a non-empty list of field names, not 'target'"


def test_empty_and_enum_markers(released):
    attrs(released, "g/target")["_EMPTY"] = True
    attrs(released, "records")["_ENUM"] = {"a": 1}
    attrs(released, "scalar")["_ENUM"] = {"a": "one"}
    assert found(released) == [
        "/g/target: _EMPTY marks a null dataspace, stored with shape [0], not [4]",
        "/records: _ENUM on an array of [('a', '<i4'), ('b', '<f8')], not of integers",
        "/scalar: _ENUM must map names to integers, not {'a': 'one'}",
        "/scalar: _ENUM on an array of float64, not of integers",
    ]


def test_metadata_that_zarr_cannot_parse(released):
    released.nodes["g/target"]["fill_value"] = "not a number"
    released.nodes["g"]["consolidated_metadata"] = 5
    problems = found(released)
    assert len(problems) == 2
    assert problems[0].startswith("/g: group metadata does not parse with zarr: ")
    assert problems[1].startswith("/g/target: array metadata does not parse with zarr: ")


# -- the NWB files of test_nwb.py --------------------------------------------------------

@pytest.fixture(scope="module")
def nwb_manifests(tmp_path_factory):
    """The manifests test_nwb.py reads (shared with it); skips without pynwb/hdmf-zarr."""
    test_nwb = importlib.import_module("test_nwb")
    return test_nwb.shared_manifests(tmp_path_factory)


def _nwb_params():
    for name in ("ecephys.nwb", "icephys.nwb", "plain.nwb", "linked.nwb", "extension.nwb"):
        for convention in ("released", "proposal"):
            yield pytest.param(name, convention, id=f"{name}-{convention}")


@pytest.mark.parametrize(("name", "convention"), list(_nwb_params()))
def test_nwb_manifests_validate_clean(nwb_manifests, name, convention):
    assert found(nwb_manifests[name, convention]) == []


# -- chunk tables against what the writer recorded; decoding every chunk ---------------


@pytest.fixture
def h5ad_manifest(tmp_path):
    import anndata as ad
    import scipy.sparse as sp

    path = tmp_path / "x.h5ad"
    x = sp.random(300, 40, density=0.3, format="csr", random_state=0, dtype=np.float32)
    ad.AnnData(X=x).write_h5ad(path)
    with h5py.File(path, "a") as f:  # many small chunks, as big atlases have
        data = f["X/data"][...]
        del f["X/data"]
        f["X"].create_dataset("data", data=data, chunks=(100,), compression="gzip")
    out = tmp_path / "x.h5ad.json"
    h5lens.index(path, inline_threshold=0).to_json(out)
    return path, out


def _edit(out: Path, change) -> Path:
    import json

    refs = json.loads(out.read_text())
    change(refs)
    edited = out.with_name("edited.json")
    edited.write_text(json.dumps(refs))
    return edited


def test_a_deleted_chunk_reference_is_found(h5ad_manifest):
    import anndata as ad

    path, out = h5ad_manifest
    assert validate(out) == []
    edited = _edit(out, lambda refs: refs["refs"].pop("X/data/c/3"))
    # what a reader gets without the check: stored values as the fill value, silently
    x = h5lens.read_anndata(edited).X
    assert (x.data == 0).sum() > 0 and ad.read_h5ad(path).X.nnz == x.nnz
    (problem,) = validate(edited)
    assert problem.path == "/X/data" and "1 of" in problem.message and "missing" in problem.message


def test_an_edited_chunk_reference_is_found(h5ad_manifest):
    _, out = h5ad_manifest

    def bump(refs):
        refs["refs"]["X/data/c/2"][1] += 1

    (problem,) = validate(_edit(out, bump))
    assert problem.path == "/X/data" and "differ from what the writer recorded" in problem.message


def test_deep_decodes_every_chunk(h5ad_manifest):
    """A manifest with no record (another tool's, or a record removed) is checked by decoding."""
    _, out = h5ad_manifest

    def bump_and_forget(refs):
        refs["refs"]["X/data/c/2"][1] += 1
        del refs["h5lens"]["arrays"]

    edited = _edit(out, bump_and_forget)
    assert validate(edited) == []
    (problem,) = validate(edited, deep=True)
    assert problem.path == "/X/data" and "'X/data/c/2'" in problem.message and "does not decode" in problem.message
    assert validate(out, deep=True) == []


def test_an_inline_chunk_that_does_not_decode_is_found(tmp_path):
    path = tmp_path / "inline.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("text", data=["a", "bb", "ccc"], dtype=h5py.string_dtype())  # vlen: always inline
    manifest = h5lens.index(path)
    assert validate(manifest) == []
    table = manifest.chunks["text"]
    garbage = table.inline[0][:-3]  # a truncated chunk
    manifest = replace(manifest, chunks={**manifest.chunks, "text": replace(table, inline={0: garbage}, length=np.array([len(garbage)], dtype=np.uint64))})
    (problem,) = found(manifest)
    assert problem == "/text: inline chunk 0 does not decode with the array's codecs"
