"""Every file libhdf5 reads: the feature files written with the creation properties other
software uses, each read back through h5lens and compared with h5py.

MATLAB v7.3 files sit behind a 512-byte user block (every HDF5 address counts from the
superblock's position); C and Fortran writers choose 4-byte sizes of offsets or lengths
(every structure's field widths change, and the global heap pads its headers); files from
HDF5 1.10-1.14 carry layout-4 chunk indexes (HDF5 2.0's "latest" writes layout 5); paged
aggregation places metadata in pages. h5lens may refuse only what h5py cannot read either.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5lens
from test_feature_matrix import BUILDERS, FileKind, check_against_h5py, four_byte_offsets

KINDS = {
    kind.name: kind
    for kind in (
        FileKind("userblock", userblock=512),
        FileKind("userblock_4096_latest", userblock=4096, libver=("latest", "latest")),
        FileKind("sizes_4_4", sizes=(4, 4)),
        FileKind("sizes_8_4", sizes=(8, 4)),
        FileKind("sizes_4_8", sizes=(4, 8)),
        FileKind("userblock_sizes_4_4_v110", userblock=1024, sizes=(4, 4), libver=("v110", "latest")),
        FileKind("v110", libver=("v110", "v110")),
        FileKind("v112", libver=("v112", "v112")),
        FileKind("v114", libver=("v114", "v114")),
        FileKind("paged", libver=("v110", "latest"), paged=True),
    )
}
# Where a kind of file changes what h5lens parses itself: variable-length values (global
# heaps) in datasets and attributes, every chunk index, contiguous offsets, references.
# Every feature file is written as the kinds that change the most (addresses shifted,
# field widths changed, both); the others get the features they touch.
STRUCTURAL = ("strings", "attributes", "chunk_indexes", "unfiltered_edges", "layouts", "references")
EVERY_FEATURE = ("userblock", "sizes_4_4", "userblock_sizes_4_4_v110")
LOCAL = [(k, f) for k in KINDS for f in BUILDERS if k in EVERY_FEATURE or f in STRUCTURAL]
# What a remote scan reads differently (walker levels in batches, the heap check through the
# block cache), in the kinds that move addresses or change widths, and paged metadata.
REMOTE_FEATURES = ("strings", "attributes", "chunk_indexes", "unfiltered_edges", "layouts")
REMOTE_KINDS = ("userblock", "sizes_4_4", "v110", "paged", "userblock_sizes_4_4_v110")


def _references(value: object) -> list[h5py.Reference]:
    """The object references in a value h5py read (arrays, compound fields, scalars)."""
    if isinstance(value, h5py.Reference):
        return [value]
    if isinstance(value, np.ndarray):
        if value.dtype.names:
            return [r for name in value.dtype.names for r in _references(value[name])]
        if value.dtype.kind == "O":
            return [r for v in value.ravel() for r in _references(v)]
    if isinstance(value, np.void) and value.dtype.names:
        return [r for name in value.dtype.names for r in _references(value[name])]
    return []


def h5py_reads_everything(path: Path) -> bool:
    """Whether h5py reads every dataset and attribute of the file, and follows every object
    reference in them (but in files with 4-byte offsets, where libhdf5 does not read its
    own references the same way twice: see test_feature_matrix.UnreadableReference)."""
    try:
        with h5py.File(path, "r") as f:

            def values(obj: h5py.HLObject) -> list[object]:
                found = [obj.attrs[name] for name in obj.attrs]
                return found + [obj[()]] if isinstance(obj, h5py.Dataset) else found

            def visit(name: str, obj: h5py.HLObject) -> None:
                for value in values(obj):
                    for ref in _references(value):
                        if ref and not four_byte_offsets(f):  # no oracle there: UnreadableReference
                            f[ref]  # noqa: B018 - dereferencing is the check

            f.visititems(visit)
            visit("/", f)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"h5py cannot read {path.name}: {e}")
        return False
    return True


@pytest.fixture(scope="module")
def kind_files(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("kinds")
    built: dict[tuple[str, str], Path] = {}

    def get(kind: str, feature: str) -> Path:
        if (kind, feature) not in built:
            path = root / f"{kind}-{feature}.h5"
            try:
                BUILDERS[feature](path, KINDS[kind])
            except (OSError, ValueError, RuntimeError) as e:
                pytest.skip(f"h5py cannot write {feature} as {kind}: {e}")
            built[kind, feature] = path
        return built[kind, feature]

    return get


def check(path: Path, source: str, storage_options: dict | None = None) -> None:
    if not h5py_reads_everything(path):
        with pytest.raises(h5lens.H5LensError):
            h5lens.open_group(h5lens.index(source, storage_options=storage_options, inline_threshold=0))
        return
    try:
        manifest = h5lens.index(source, storage_options=storage_options, inline_threshold=0)
    except h5lens.UnsupportedFeatureError as e:
        with h5py.File(path, "r") as f:
            if four_byte_offsets(f) and "object reference points at nothing" in str(e):
                return  # libhdf5 wrote a reference it cannot follow either (UnreadableReference): refused, named
        raise
    check_against_h5py(path, h5lens.open_group(manifest, storage_options=storage_options), "released")


@pytest.mark.parametrize(("kind", "feature"), LOCAL)
def test_local(kind_files, kind: str, feature: str) -> None:
    path = kind_files(kind, feature)
    check(path, str(path))


@pytest.mark.parametrize("feature", REMOTE_FEATURES)
@pytest.mark.parametrize("kind", REMOTE_KINDS)
def test_from_s3(s3, kind_files, kind: str, feature: str) -> None:
    path = kind_files(kind, feature)
    key = f"bucket/{uuid.uuid4().hex}/{path.name}"
    s3.filesystem().put(str(path), key)
    check(path, f"s3://{key}", s3.storage_options())


def test_user_block_holds_the_superblock_offset(kind_files) -> None:
    """The kinds are what they claim: a user block really moves the superblock."""
    path = kind_files("userblock", "strings")
    assert path.read_bytes()[512:520] == b"\x89HDF\r\n\x1a\n"
    with h5py.File(path) as f:
        assert f.id.get_create_plist().get_userblock() == 512


@pytest.mark.parametrize("where", ["local", "s3"])
def test_matlab_v73_file(request, tmp_path: Path, where: str) -> None:
    """A MAT file as hdf5storage writes it (MATLAB's own v7.3 layout: a 512-byte user block,
    ``#refs#`` with object references for cells, complex as compounds, char as uint16)."""
    hdf5storage = pytest.importorskip("hdf5storage")
    variables = {
        "trial": np.arange(12.0).reshape(3, 4),
        "name": "session one",
        "cells": np.array(["a", "bb", "ccc"], dtype=object),
        "s": {"x": np.int32(3), "y": np.array([1, 2, 3], dtype=np.uint8)},
        "flag": True,
        "cplx": np.array([1 + 2j, 3 - 1j]),
    }
    path = tmp_path / "session.mat"
    hdf5storage.savemat(str(path), variables, format="7.3")
    assert path.read_bytes()[:10] == b"MATLAB 7.3"
    if where == "local":
        source, options = str(path), None
    else:
        s3 = request.getfixturevalue("s3")
        source, options = f"s3://bucket/{uuid.uuid4().hex}/session.mat", s3.storage_options()
        s3.filesystem().put(str(path), source.removeprefix("s3://"))
    manifest = h5lens.index(source, storage_options=options, inline_threshold=0)
    group = h5lens.open_group(manifest, storage_options=options)
    check_against_h5py(path, group, "released")
    # MATLAB stores arrays column-major: hdf5storage's reader transposes what h5py reads.
    read_back = hdf5storage.loadmat(str(path))
    np.testing.assert_array_equal(group["trial"][...].T, read_back["trial"])
    np.testing.assert_array_equal(group["s/y"][...].T.ravel(), read_back["s"]["y"].ravel())
