"""h5ad files through their manifests: equal to anndata's own HDF5 reader, eager and lazy.

Oracles: ``anndata.read_h5ad(original)`` for eager reads; ``read_lazy`` of the
original (then ``to_memory``) for lazy reads; anndata's reading of its *own*
zarr v3 copy of the file for plain ``anndata.read_zarr`` over the manifest.

Every branch of anndata 0.13's ``read_h5ad`` (``_io/h5ad.py``, ``_io/utils.py``,
``_io/specs/methods.py``) that reads an old layout has a test here:

- top-level ``raw.X`` / ``raw.var`` / ``raw.varm`` (< 0.6), gathered by ``_read_legacy_raw``:
  ``test_legacy_05_raw`` (dense and h5sparse ``raw.X``);
- ``raw.*`` beside a ``raw`` group (``ValueError``): ``test_legacy_raw_beside_a_raw_group``;
- compound ``obs`` / ``var`` datasets (``read_dataframe_legacy``), categories in
  ``uns/<col>_categories`` (``_clean_uns``), and un-encoded ``uns`` datasets
  (``read_dataset``: ``S`` arrays as text, one-element ones as scalars, compounds as
  record arrays): ``test_legacy_05_compound_tables``;
- ``h5sparse_format`` groups (``read_basic``): ``test_h5sparse_legacy_matrix``;
- ``dataframe`` 0.1.0 with categoricals through object references (0.7):
  ``test_legacy_07_categoricals_lzf``.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import anndata as ad
import awkward as ak
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from anndata.tests.helpers import assert_equal

import h5lens
from h5lens.format.keys import escape_key, unescape_key
from shared_data import shared_file, shared_names

SHARED_H5AD = shared_names("*.h5ad")

pytestmark = pytest.mark.filterwarnings("ignore::anndata.OldFormatWarning", "ignore::UserWarning")


@pytest.fixture(params=SHARED_H5AD)
def shared_h5ad(request, tmp_path) -> Path:
    copy = tmp_path / request.param
    shutil.copy(shared_file(request.param), copy)
    return copy


def _lazy_original(path: Path) -> ad.AnnData:
    with h5py.File(path) as f:
        return _axes_only(ad.experimental.read_lazy(f).to_memory()).copy()  # detached before the file closes


def _axes_only(adata: ad.AnnData) -> ad.AnnData:
    """``read_lazy(...).to_memory()`` leaves some ``uns`` values lazy (anndata 0.13): compare the
    axis-aligned elements lazily; eager tests cover ``uns``."""
    adata.uns = {}
    return adata


def _text_as_object(adata: ad.AnnData) -> ad.AnnData:
    """anndata's zarr readers give text columns numpy's string dtype where its HDF5 reader gives
    pandas' ``str``: the same values. Compare the values, with the text columns in one dtype."""

    def frame(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        for column in df.columns:
            if pd.api.types.is_string_dtype(df[column].dtype) and not isinstance(df[column].dtype, pd.CategoricalDtype):
                df[column] = df[column].astype(object)
        return df

    adata.obs, adata.var = frame(adata.obs), frame(adata.var)
    if adata.raw is not None:
        raw = adata.raw.to_adata()
        raw.var = frame(raw.var)
        adata.raw = raw
    return adata


# -- the real files ------------------------------------------------------------


def test_shared_files_eager_equal_read_h5ad(shared_h5ad):
    manifest = h5lens.index(shared_h5ad)
    assert_equal(h5lens.read_anndata(manifest), ad.read_h5ad(shared_h5ad))


def test_shared_files_eager_through_json_and_proposal(shared_h5ad, tmp_path):
    out = tmp_path / "m.json"
    h5lens.index(shared_h5ad, convention="proposal").to_json(out)
    assert_equal(h5lens.read_anndata(out), ad.read_h5ad(shared_h5ad))


def test_shared_files_lazy_equal_read_lazy(shared_h5ad):
    lazy = h5lens.read_anndata(h5lens.index(shared_h5ad, inline_threshold=0), lazy=True)
    assert_equal(_text_as_object(_axes_only(lazy.to_memory())), _text_as_object(_lazy_original(shared_h5ad)))


def test_read_anndata_takes_the_h5ad_itself(shared_h5ad):
    """What h5lens.open and the CLI take, read_anndata takes: the h5ad, indexed in memory;
    eagerly, lazily and in a list."""
    expected = ad.read_h5ad(shared_h5ad)
    assert_equal(h5lens.read_anndata(shared_h5ad), expected)
    assert_equal(h5lens.read_anndata(str(shared_h5ad), lazy=True).to_memory().X, expected.X)
    both = h5lens.read_anndata([shared_h5ad, shared_h5ad], index_unique="-")
    assert_equal(both, ad.concat([expected, expected], index_unique="-"))


def test_plain_read_zarr_reads_the_manifest(shared_h5ad):
    got = ad.read_zarr(h5lens.open_group(h5lens.index(shared_h5ad)).store)
    assert_equal(_text_as_object(got), _text_as_object(ad.read_h5ad(shared_h5ad)))


# -- generated files: every encoding ----------------------------------------------


def _every_encoding() -> ad.AnnData:
    rng = np.random.default_rng(1)
    n_obs, n_var = 40, 15
    obs = pd.DataFrame(
        {
            "cat": pd.Categorical(rng.choice(["a", "b", "c"], n_obs)),
            "ordered": pd.Categorical(rng.choice(["lo", "hi"], n_obs), categories=["lo", "hi"], ordered=True),
            "int": rng.integers(0, 100, n_obs),
            "float": rng.standard_normal(n_obs),
            "bool": rng.random(n_obs) > 0.5,
            "nullable_int": pd.array([None if i % 7 == 0 else i for i in range(n_obs)], dtype="Int32"),
            "nullable_bool": pd.array([None if i % 5 == 0 else i % 2 == 0 for i in range(n_obs)], dtype="boolean"),
            "text": [f"t{i}" for i in range(n_obs)],
        },
        index=[f"cell{i}" for i in range(n_obs)],
    )
    var = pd.DataFrame({"gene_ids": [f"ENSG{i:05d}" for i in range(n_var)]}, index=[f"g{i}" for i in range(n_var)])
    x = sp.random(n_obs, n_var, density=0.2, format="csr", random_state=1, dtype=np.float32)
    adata = ad.AnnData(X=x, obs=obs, var=var)
    adata.layers["dense"] = x.toarray()
    adata.layers["csc"] = sp.csc_matrix(x)
    adata.obsm["X_pca"] = rng.standard_normal((n_obs, 3)).astype(np.float32)
    adata.obsm["frame"] = pd.DataFrame({"u": rng.standard_normal(n_obs)}, index=obs.index)
    adata.obsp["distances"] = sp.csr_matrix(rng.random((n_obs, n_obs)) > 0.9, dtype=np.float64)
    adata.varm["loadings"] = rng.standard_normal((n_var, 2))
    adata.uns["string"] = "hello"
    adata.uns["number"] = 3.5
    adata.uns["integer"] = np.int64(7)
    adata.uns["strings_1d"] = np.array(["x", "yy", "zzz"], dtype=object)
    adata.uns["strings_2d"] = np.array([["a", "b"], ["c", "d"]], dtype=object)
    adata.uns["nested"] = {"inner": {"values": np.arange(4), "flag": True}}
    adata.uns["empty_frame"] = pd.DataFrame(index=["r1", "r2"])
    adata.uns["recarray"] = np.rec.fromarrays(
        [np.array(["p", "qq"], dtype=object), np.array([1.5, 2.5])], names=["name", "score"]
    )
    adata.uns["with_nan"] = np.array([np.nan, 1.0])
    adata.uns["none"] = None
    adata.uns["nullable_strings"] = pd.DataFrame(
        {"s": pd.array(["x", None, "z"], dtype="string")}, index=["a", "b", "c"]
    )
    adata.obsm["ragged"] = ak.Array([[float(j) for j in range(i % 4)] for i in range(n_obs)])
    adata.raw = adata.copy()
    return adata


@pytest.fixture(scope="module")
def every_encoding(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("enc") / "every.h5ad"
    with warnings.catch_warnings(), ad.settings.override(allow_write_nullable_strings=True):
        warnings.simplefilter("ignore")
        _every_encoding().write_h5ad(path, compression="gzip")
    with h5py.File(path) as f:  # the encodings this test exists to cover really are in the file
        kinds = set()
        f.visititems(lambda name, obj: kinds.add(obj.attrs.get("encoding-type")))
    assert {"awkward-array", "nullable-string-array", "nullable-integer", "nullable-boolean", "null",
            "rec-array", "csc_matrix", "csr_matrix", "categorical", "string", "numeric-scalar"} <= kinds, kinds
    return path


@pytest.mark.parametrize("convention", ["released", "proposal"])
@pytest.mark.parametrize("inline_threshold", [0, 1000])
def test_every_encoding_eager(every_encoding, convention, inline_threshold):
    manifest = h5lens.index(every_encoding, convention=convention, inline_threshold=inline_threshold)
    assert_equal(h5lens.read_anndata(manifest), ad.read_h5ad(every_encoding))


def test_every_encoding_lazy(every_encoding):
    lazy = h5lens.read_anndata(h5lens.index(every_encoding), lazy=True)
    assert_equal(_text_as_object(_axes_only(lazy.to_memory())), _text_as_object(_lazy_original(every_encoding)))
    # the sparse layer h5lens reads itself comes back where the file has it, beside the dense one
    named = [name for name in ad.read_h5ad(every_encoding).layers if name is not None]  # anndata lists X as None
    assert [name for name in lazy.layers if name is not None] == named == ["csc", "dense"]
    _lazy_source(lazy.layers["csc"])


def test_the_lazy_walk_sees_every_node_as_zarr_opens_it(every_encoding):
    """The consolidated root a lazy read walks (built from the manifest) holds the members
    zarr lists from the store, in the same order, each with the metadata zarr parses from
    its zarr.json; hidden subtrees are left out of it, and only them."""
    import dataclasses

    from zarr.core.group import GroupMetadata

    from h5lens.read.consolidated import consolidated_root

    store = h5lens.open_store(h5lens.index(every_encoding))
    opened = zarr.open_group(store, mode="r", zarr_format=3)
    walk = consolidated_root(store)
    names = [name for name, _ in opened.members(max_depth=None)]
    assert sorted(names) == [name for name, _ in walk.members(max_depth=None)] and len(names) > 40
    assert list(opened.keys()) == list(walk.keys())
    for name in names:
        step = walk  # member by member, as anndata's reader walks it, and by path
        for part in name.split("/"):
            step = step[part]
        for node in (step, walk[name]):
            walked = node.metadata
            if isinstance(walked, GroupMetadata):  # a group's members come with it: the point
                assert list(node.keys()) == list(opened[name].keys()), name
                walked = dataclasses.replace(walked, consolidated_metadata=None)
            assert walked == opened[name].metadata, name
            assert node.path == opened[name].path and type(node) is type(opened[name])
    assert walk.attrs.asdict() == opened.attrs.asdict()
    hidden = consolidated_root(store, hide=["X", "layers/csc"])
    assert sorted(n for n, _ in hidden.members(max_depth=None)) == sorted(
        n for n in names if n != "X" and not n.startswith(("X/", "layers/csc"))
    )


def test_every_encoding_read_elem_on_each_element(every_encoding):
    group = h5lens.open_group(h5lens.index(every_encoding))
    with h5py.File(every_encoding) as f:
        for key in ["X", "obs", "var", "obsm/X_pca", "obsm/frame", "layers/csc", "uns/string", "uns/recarray"]:
            assert_equal(ad.io.read_elem(group[key]), ad.io.read_elem(f[key]))


def test_not_an_anndata_names_what_it_found(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(h5lens.ManifestFormatError, match="not an anndata"):
        h5lens.read_anndata(h5lens.index(path))


# -- legacy layouts -----------------------------------------------------------------


def _write_v07(path: Path) -> None:
    """anndata 0.7-era: dataframe 0.1.0 whose categorical columns reference __categories/<col>."""
    rng = np.random.default_rng(2)
    n_obs, n_var = 30, 8
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        f.create_dataset("X", data=rng.random((n_obs, n_var)).astype(np.float32), chunks=(10, 8), compression="lzf")
        f["X"].attrs["encoding-type"] = "array"
        f["X"].attrs["encoding-version"] = "0.2.0"
        for axis, n in (("obs", n_obs), ("var", n_var)):
            g = f.create_group(axis)
            g.attrs["encoding-type"] = "dataframe"
            g.attrs["encoding-version"] = "0.1.0"
            g.attrs["_index"] = "index"
            g.create_dataset("index", data=np.array([f"{axis}{i}" for i in range(n)], dtype=object),
                             dtype=h5py.string_dtype())
            cats = g.create_group("__categories")
            cats.create_dataset("kind", data=np.array(["x", "y", "z"], dtype=object), dtype=h5py.string_dtype())
            cats["kind"].attrs["ordered"] = axis == "var"
            codes = g.create_dataset("kind", data=rng.integers(0, 3, n).astype(np.int8), compression="lzf")
            codes.attrs["categories"] = cats["kind"].ref
            g.create_dataset("value", data=rng.standard_normal(n))
            g.attrs["column-order"] = np.array(["kind", "value"], dtype=object)
        for name in ("uns", "obsm", "varm", "layers", "obsp", "varp"):
            f.create_group(name)
        f["uns"].create_dataset("title", data="legacy", dtype=h5py.string_dtype())


def test_legacy_07_categoricals_lzf(tmp_path):
    path = tmp_path / "v07.h5ad"
    _write_v07(path)
    expected = ad.read_h5ad(path)
    manifest = h5lens.index(path, inline_threshold=0)
    assert_equal(h5lens.read_anndata(manifest), expected)
    # the modern encoding is presented, so plain anndata reads it too
    assert_equal(ad.read_zarr(h5lens.open_group(manifest).store).obs, expected.obs)
    # codes are still the original LZF chunks, referenced, not copied
    table = manifest.chunks["obs/kind/codes"]
    assert (table.source >= 0).all()
    assert manifest.nodes["obs/kind/codes"]["codecs"][-1]["name"] == "h5lens.lzf"


def test_h5sparse_legacy_matrix(tmp_path):
    path = tmp_path / "h5sparse.h5ad"
    x = sp.random(20, 6, density=0.3, format="csr", random_state=3, dtype=np.float32)
    ad.AnnData(X=x).write_h5ad(path)
    with h5py.File(path, "a") as f:  # rewrite X the way pre-0.7 files stored sparse matrices
        for attr in ("encoding-type", "encoding-version", "shape"):
            del f["X"].attrs[attr]
        f["X"].attrs["h5sparse_format"] = "csr"
        f["X"].attrs["h5sparse_shape"] = np.array(x.shape)
    expected = ad.read_h5ad(path)
    assert_equal(h5lens.read_anndata(h5lens.index(path)), expected)


def _write_v05(path: Path) -> None:
    """anndata 0.5/0.6-era: no encodings, compound obs/var/obsm, categories in uns, S strings."""
    rng = np.random.default_rng(5)
    n_obs, n_var = 12, 5
    with h5py.File(path, "w") as f:
        f.create_dataset("X", data=rng.random((n_obs, n_var)).astype(np.float32))
        obs = np.zeros(n_obs, dtype=[("index", "S8"), ("louvain", "i1"), ("n_genes", "<i8"), ("score", "<f4")])
        obs["index"] = [f"c{i}".encode() for i in range(n_obs)]
        obs["louvain"] = rng.integers(0, 3, n_obs)
        obs["n_genes"] = rng.integers(100, 200, n_obs)
        obs["score"] = rng.random(n_obs)
        f.create_dataset("obs", data=obs)
        var = np.zeros(n_var, dtype=[("index", "S6"), ("gene_ids", "S10")])
        var["index"] = [f"g{i}".encode() for i in range(n_var)]
        var["gene_ids"] = [f"ENSG{i}".encode() for i in range(n_var)]
        f.create_dataset("var", data=var)
        uns = f.create_group("uns")
        uns.create_dataset("louvain_categories", data=np.array([b"0", b"1", b"2"]))
        uns.create_dataset("title", data=np.array([b"old"]))
        uns.create_dataset("labels", data=np.array([b"a", b"bb"]))
        uns.create_dataset("k", data=np.int64(3))
        records = np.zeros(2, dtype=[("name", "S3"), ("score", "<f8")])
        records["name"], records["score"] = [b"ab", b"cde"], [0.5, 1.5]
        uns.create_dataset("records", data=records)
        obsm = np.zeros(n_obs, dtype=[("X_pca", "<f4", (2,)), ("X_umap", "<f8", (2,))])
        obsm["X_pca"] = rng.random((n_obs, 2))
        obsm["X_umap"] = rng.random((n_obs, 2))
        f.create_dataset("obsm", data=obsm)


def test_legacy_05_compound_tables(tmp_path):
    path = tmp_path / "v05.h5ad"
    _write_v05(path)
    expected = ad.read_h5ad(path)
    manifest = h5lens.index(path, inline_threshold=0)
    assert_equal(h5lens.read_anndata(manifest), expected)
    assert_equal(_text_as_object(ad.read_zarr(h5lens.open_group(manifest).store)), _text_as_object(expected))
    assert (manifest.chunks["X"].source >= 0).all()  # the matrix is referenced, not copied


def _add_legacy_raw(path: Path, *, sparse: bool, prefix: str = "raw.") -> None:
    """anndata < 0.7 wrote raw as top-level raw.X / raw.var / raw.varm."""
    rng = np.random.default_rng(9)
    n_raw = 7
    with h5py.File(path, "a") as f:
        n_obs = f["obs"].shape[0]
        x = sp.random(n_obs, n_raw, density=0.4, format="csr", random_state=4, dtype=np.float32)
        if sparse:
            g = f.create_group(f"{prefix}X")
            g.attrs["h5sparse_format"] = "csr"
            g.attrs["h5sparse_shape"] = np.array(x.shape)
            g.create_dataset("data", data=x.data)
            g.create_dataset("indices", data=x.indices)
            g.create_dataset("indptr", data=x.indptr)
        else:
            f.create_dataset(f"{prefix}X", data=x.toarray(), chunks=(4, n_raw), compression="gzip")
        var = np.zeros(n_raw, dtype=[("index", "S6"), ("gene_ids", "S10"), ("mean", "<f8")])
        var["index"] = [f"r{i}".encode() for i in range(n_raw)]
        var["gene_ids"] = [f"ENSR{i}".encode() for i in range(n_raw)]
        var["mean"] = rng.random(n_raw)
        f.create_dataset(f"{prefix}var", data=var)
        varm = np.zeros(n_raw, dtype=[("PCs", "<f4", (2,))])
        varm["PCs"] = rng.random((n_raw, 2))
        f.create_dataset(f"{prefix}varm", data=varm)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "h5sparse"])
def test_legacy_05_raw(tmp_path, sparse):
    path = tmp_path / "v05raw.h5ad"
    _write_v05(path)
    _add_legacy_raw(path, sparse=sparse)
    expected = ad.read_h5ad(path)
    assert expected.raw is not None and expected.raw.shape == (12, 7)
    manifest = h5lens.index(path, inline_threshold=0)
    assert_equal(h5lens.read_anndata(manifest), expected)
    lazy = h5lens.read_anndata(manifest, lazy=True).to_memory()
    assert_equal(_text_as_object(lazy.raw.to_adata()), _text_as_object(expected.raw.to_adata()))
    assert_equal(_text_as_object(ad.read_zarr(h5lens.open_group(manifest).store)), _text_as_object(expected))
    # raw.X's bytes are referenced where they lie, not copied
    x_key = "raw/X/data" if sparse else "raw/X"
    assert (manifest.chunks[x_key].source >= 0).all()


def test_legacy_raw_beside_a_raw_group(tmp_path):
    """read_h5ad refuses a file with both; the manifest keeps every element visible, and
    reading it as AnnData is refused alike, never silently without raw."""
    path = tmp_path / "both.h5ad"
    _write_v05(path)
    _add_legacy_raw(path, sparse=False)
    with h5py.File(path, "a") as f:
        f.create_group("raw").create_dataset("X", data=np.zeros((12, 7), dtype=np.float32))
    with pytest.raises(ValueError, match="both legacy and current raw"):
        ad.read_h5ad(path)
    manifest = h5lens.index(path)
    assert {"raw.X", "raw.var", "raw.varm", "raw/X"} <= set(manifest.nodes)
    with pytest.raises(ValueError, match="both legacy and current raw"):
        h5lens.read_anndata(manifest)


def test_compound_with_array_members_outside_profiles_reads_as_h5py(tmp_path):
    path = tmp_path / "plain.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        data = np.zeros(3, dtype=[("a", "<f4", (2,))])
        data["a"] = rng.random((3, 2))
        f.create_dataset("table", data=data)
    got = h5lens.open(h5lens.index(path))["table"][()]
    with h5py.File(path) as f:
        expected = f["table"][()]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got["a"], expected["a"])


# -- escaped keys and accessors ------------------------------------------------------

ESCAPE_ME = ["a:b", "CON", "zarr.json", "__x", "50%", "sp ace.", "q?"]


def _base_file(path: Path) -> None:
    ad.AnnData(X=np.ones((3, 2), dtype=np.float32)).write_h5ad(path)


def test_dict_keys_zarr_cannot_hold_become_dict_020(tmp_path):
    path = tmp_path / "keys.h5ad"
    _base_file(path)
    with h5py.File(path, "a") as f:
        g = f["uns"].create_group("weird")
        g.attrs["encoding-type"] = "dict"
        g.attrs["encoding-version"] = "0.1.0"
        for i, name in enumerate(ESCAPE_ME):
            ds = g.create_dataset(name, data=np.int64(i))
            ds.attrs["encoding-type"] = "numeric-scalar"
            ds.attrs["encoding-version"] = "0.2.0"
    expected = ad.read_h5ad(path)
    manifest = h5lens.index(path)
    assert manifest.nodes["uns/weird"]["attributes"]["encoding-version"] == "0.2.0"
    assert sorted(manifest.children("uns/weird")) == sorted(escape_key(n) for n in ESCAPE_ME)
    assert_equal(h5lens.read_anndata(manifest), expected)


def test_dict_020_written_escaped_passes_through(tmp_path):
    path = tmp_path / "escaped.h5ad"
    _base_file(path)
    keys = ["a/b", "CON", "zarr.json", "__x", "", "50%", "x:y"]
    with h5py.File(path, "a") as f:
        g = f["uns"].create_group("mapping")
        g.attrs["encoding-type"] = "dict"
        g.attrs["encoding-version"] = "0.2.0"
        for i, key in enumerate(keys):
            ds = g.create_dataset(escape_key(key), data=np.int64(i))
            ds.attrs["encoding-type"] = "numeric-scalar"
            ds.attrs["encoding-version"] = "0.2.0"
        stored = sorted(g.keys())
    manifest = h5lens.index(path)
    assert sorted(manifest.children("uns/mapping")) == stored  # not escaped a second time
    mapping = h5lens.read_anndata(manifest).uns["mapping"]
    with h5py.File(path) as f:
        expected = {unescape_key(name): int(f["uns/mapping"][name][()]) for name in f["uns/mapping"]}
    assert mapping == expected
    assert set(mapping) == set(keys)


def test_invalid_escaped_key_is_rejected(tmp_path):
    path = tmp_path / "bad.h5ad"
    _base_file(path)
    with h5py.File(path, "a") as f:
        g = f["uns"].create_group("mapping")
        g.attrs["encoding-type"] = "dict"
        g.attrs["encoding-version"] = "0.2.0"
        ds = g.create_dataset("%41", data=np.int64(1))  # no writer escapes "A"
        ds.attrs["encoding-type"] = "numeric-scalar"
        ds.attrs["encoding-version"] = "0.2.0"
    with pytest.raises(h5lens.H5LensError, match="%41"):
        h5lens.read_anndata(h5lens.index(path))


def test_dataframe_columns_keep_names_zarr_can_hold(tmp_path):
    path = tmp_path / "cols.h5ad"
    obs = pd.DataFrame({"a:b": [1, 2, 3], "q?": ["x", "y", "z"]}, index=["c1", "c2", "c3"])
    ad.AnnData(X=np.ones((3, 2), dtype=np.float32), obs=obs).write_h5ad(path)
    assert_equal(h5lens.read_anndata(h5lens.index(path)), ad.read_h5ad(path))


def test_accessor_resolves_through_anndata_acc(tmp_path):
    from anndata.acc import A
    from anndata.acc._parse_json import parse_json

    path = tmp_path / "acc.h5ad"
    adata = ad.AnnData(X=np.ones((3, 2), dtype=np.float32), obsm={"pca": np.arange(6.0).reshape(3, 2)})
    adata.write_h5ad(path)
    with h5py.File(path, "a") as f:
        ds = f["uns"].create_dataset("ref", data='["obsm", "pca", 0]', dtype=h5py.string_dtype())
        ds.attrs["encoding-type"] = "accessor"
        ds.attrs["encoding-version"] = "0.1.0"
    manifest = h5lens.index(path)
    assert manifest.nodes["uns/ref"]["attributes"]["encoding-type"] == "accessor"  # kept as such
    ref = h5lens.read_anndata(manifest).uns["ref"]
    assert ref == parse_json(A, ["obsm", "pca", 0])
    np.testing.assert_array_equal(ref.acc.get(adata, ref.idx), adata.obsm["pca"][:, 0])


# -- lazy reads fetch only what they need ---------------------------------------------


def test_lazy_row_slice_reads_only_its_chunks(tmp_path):
    path = tmp_path / "big.h5ad"
    rng = np.random.default_rng(4)
    x = rng.random((4000, 50)).astype(np.float32)
    adata = ad.AnnData(X=x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip", compression_opts=1, as_dense=["X"])
    with h5py.File(path, "a") as f:  # thousands of chunks: rewrite X chunked by 2 rows
        del f["X"]
        ds = f.create_dataset("X", data=x, chunks=(2, 50), compression="gzip", compression_opts=1)
        ds.attrs["encoding-type"] = "array"
        ds.attrs["encoding-version"] = "0.2.0"
    manifest = h5lens.index(path, inline_threshold=0)
    assert manifest.chunks["X"].n_present == 2000
    store = h5lens.open_store(manifest)
    lazy = ad.experimental.read_lazy(zarr.open_group(store, mode="r", zarr_format=3))
    store.stats.reset()
    rows = lazy.X[100:140].compute()
    np.testing.assert_array_equal(rows, x[100:140])
    assert store.stats.requests == 20  # 40 rows / 2 rows per chunk


def _lazy_source(array):
    """The LazySparse a lazy sparse matrix's blocks read through."""
    from h5lens.adata.lazy_sparse import LazySparse

    found = [v for v in dict(array.dask).values() if isinstance(v, LazySparse)]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_lazy_sparse_blocks_are_sized_by_bytes_and_slices_read_their_rows(tmp_path, layout):
    """Blocks hold about block_bytes along the stored axis (never under anndata's 1000);
    a slice reads the chunks its rows touch, not its whole block; masks and index arrays
    give read_h5ad's values."""
    path = tmp_path / "sparse.h5ad"
    shape = (20000, 40) if layout == "csr" else (40, 20000)  # 20,000 along the stored axis
    x = sp.random(*shape, density=0.1, format=layout, random_state=5, dtype=np.float32)
    obs = pd.DataFrame({"kind": pd.Categorical(np.arange(shape[0]) % 7)}, index=[str(i) for i in range(shape[0])])
    ad.AnnData(X=x, obs=obs).write_h5ad(path)
    with h5py.File(path, "a") as f:  # small chunks, as large h5ad files have them
        for name in ("data", "indices"):
            values = f[f"X/{name}"][...]
            del f[f"X/{name}"]
            f.create_dataset(f"X/{name}", data=values, chunks=(2000,), compression="gzip")
    expected = ad.read_h5ad(path)
    manifest = h5lens.index(path, inline_threshold=0)
    lazy = h5lens.read_anndata(manifest, lazy=True)
    axis = 0 if layout == "csr" else 1
    assert lazy.X.chunks[axis] == (20000,)  # 1.6 MB decoded: one block
    small = h5lens.read_anndata(manifest, lazy=True, block_bytes=400_000)
    assert 1000 <= small.X.chunks[axis][0] < 20000
    source = _lazy_source(lazy.X)
    source.store.stats.reset()
    part = lazy.X[1234:1300] if layout == "csr" else lazy.X[:, 1234:1300]
    want = x[1234:1300] if layout == "csr" else x[:, 1234:1300]
    np.testing.assert_array_equal(part.compute().toarray(), want.toarray())
    stored = int(manifest.chunks["X/data"].length.sum() + manifest.chunks["X/indices"].length.sum())
    assert 0 < source.store.stats.bytes < stored / 5  # the rows' chunks, not the block's
    mask = (expected.obs["kind"] == 3).to_numpy()
    np.testing.assert_array_equal(lazy[mask].to_memory().X.toarray(), expected[mask].X.toarray())
    picked = np.array([19999, 5, 7, 5000])
    if layout == "csr":
        np.testing.assert_array_equal(lazy.X[picked].compute().toarray(), x[picked].toarray())
    else:
        np.testing.assert_array_equal(lazy.X[:, picked].compute().toarray(), x[:, picked].toarray())
    stored_axis = x.tocsr() if layout == "csr" else x.tocsc().T.tocsr()  # rows: the stored axis
    for key in (slice(None, None, -3), slice(19990, 5, -7), np.array([7, 3, 3, 19999]), slice(100, 50)):
        got = source[key] if layout == "csr" else source[:, key]
        want_rows = stored_axis[key]
        np.testing.assert_array_equal((got if layout == "csr" else got.T).toarray(), want_rows.toarray())
    assert_equal(lazy.to_memory(), expected)


@pytest.mark.parametrize("reader", ["anndata", "treedata"])
def test_a_chunk_that_does_not_decode_is_named(tmp_path, reader):
    """A manifest pointing a chunk at the wrong bytes: the eager readers raise
    SourceReadError naming the chunk key and its byte range, not the codec's bare error."""
    from dataclasses import replace

    import scipy.sparse as sp

    adata = ad.AnnData(X=sp.random(2000, 50, density=0.1, format="csr", dtype="f4", random_state=0))
    path = tmp_path / "damaged.h5ad"
    adata.write_h5ad(path, compression="gzip")
    manifest = h5lens.index(path, inline_threshold=0)
    table = manifest.chunks["X/data"]
    offset = table.offset.copy()
    offset[1] += 7  # chunk 1 now starts inside its zlib stream
    manifest = replace(manifest, chunks={**manifest.chunks, "X/data": replace(table, offset=offset)})
    read = h5lens.read_anndata if reader == "anndata" else h5lens.read_treedata
    with pytest.raises(h5lens.SourceReadError) as raised:
        read(manifest, verify=False)
    start = int(offset[1])
    assert f"'X/data/c/1' of /X/data" in str(raised.value)
    assert f"bytes {start}-{start + int(table.length[1])}" in str(raised.value)
    assert "does not decode" in str(raised.value)


def test_the_private_anndata_names_h5lens_uses_are_there():
    """h5lens.adata.adapter reads (never writes) anndata's private read registry, to
    leave to anndata what it reads itself: each name it lists is there, and asks what it is
    used to ask. Nothing is registered in it by reading."""
    import importlib

    import zarr
    from anndata._io.specs.registry import _REGISTRY, IOSpec

    from h5lens.adata.adapter import OWN_ENCODINGS, PRIVATE_NAMES, anndata_reads

    for name in PRIVATE_NAMES:
        module, _, attribute = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attribute), name
    for (kind, version), node in OWN_ENCODINGS.items():
        assert anndata_reads(kind, version) == _REGISTRY.has_read(node, IOSpec(kind, version))
    assert anndata_reads("dataframe", "0.2.0")



def test_without_anndata_the_error_names_the_extra(monkeypatch):
    """A plain ``pip install h5lens`` has no anndata: read_anndata says what to install
    (checked before the manifest is opened)."""
    import sys

    monkeypatch.setitem(sys.modules, "anndata", None)  # what an environment without it gives import
    with pytest.raises(ModuleNotFoundError, match=r"read_anndata needs anndata: pip install 'h5lens\[anndata\]'"):
        h5lens.read_anndata("never-opened.json")
    monkeypatch.setitem(sys.modules, "treedata", None)
    with pytest.raises(ModuleNotFoundError, match=r"read_treedata needs treedata: pip install 'h5lens\[anndata\]'"):
        h5lens.read_treedata("never-opened.json")
