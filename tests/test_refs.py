"""The manifests published in refs/: regenerated from their sample, they must not change unexpectedly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import h5py
import numpy as np
import zarr

import h5lens
from h5lens.cli.sample import MANIFEST_NAME, SAMPLE_NAME, publish_refs, write_sample

REFS = Path(__file__).resolve().parent.parent / "refs"


def _h5py_values(ds: h5py.Dataset):
    return ds.asstr()[()] if h5py.check_string_dtype(ds.dtype) else ds[()]


def test_published_manifest_is_what_the_indexer_writes(tmp_path):
    # Index the committed sample again: any change in output must be a deliberate one.
    shutil.copy(REFS / SAMPLE_NAME, tmp_path / SAMPLE_NAME)
    regenerated = publish_refs(tmp_path, sample=tmp_path / SAMPLE_NAME)
    assert json.loads(Path(regenerated).read_text()) == json.loads((REFS / MANIFEST_NAME).read_text())


def test_published_sample_holds_what_the_generator_writes(tmp_path):
    fresh = write_sample(tmp_path / "fresh.h5ad")
    with h5py.File(REFS / SAMPLE_NAME) as published, h5py.File(fresh) as expected:
        names: list[str] = []
        expected.visit(names.append)
        published_names: list[str] = []
        published.visit(published_names.append)
        assert names == published_names
        for name in names:
            if isinstance(expected[name], h5py.Dataset):
                np.testing.assert_array_equal(_h5py_values(published[name]), _h5py_values(expected[name]))


def test_published_manifest_reads_like_h5py_through_h5lens_and_plain_fsspec(tmp_path, monkeypatch):
    manifest = REFS / MANIFEST_NAME
    via_h5lens = h5lens.open_group(manifest)
    # the plain route resolves the relative URL against the working directory
    monkeypatch.chdir(REFS)
    fs = fsspec.filesystem(
        "reference", fo=str(manifest), asynchronous=True, remote_protocol="file", remote_options={"asynchronous": True}
    )
    via_fsspec = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
    with h5py.File(REFS / SAMPLE_NAME) as f:
        arrays: list[str] = []
        f.visititems(lambda name, obj: arrays.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in arrays:
            expected = _h5py_values(f[name])
            for group in (via_h5lens, via_fsspec):
                np.testing.assert_array_equal(np.asarray(group[name][()]), np.asarray(expected), err_msg=name)
