"""h5lens changes nothing of zarr's, anndata's or xarray's unless the user asks.

In a fresh process: after zarr, anndata and xarray have done their own first-use work
(a warm-up with no h5lens in it), every function, class, method and descriptor of theirs
is remembered, by identity, with zarr's codec-pipeline setting and anndata's read
registries. Then h5lens builds, opens, pickles and reads stores of every form (a Manifest
object, JSON, the compact form), through every entry point of its own (``read_anndata``
eager and lazy, ``read_treedata``, ``engine="h5lens"``, navigation, ``read_region``), and
through zarr's and anndata's APIs over its stores: everything is as it was. Then
``fast_reads()`` changes things (which proves the check can see a change) and
``fast_reads(False)`` puts each one back, as does leaving a ``with fast_reads():`` block.

A second test reads h5lens's source: no assignment to an attribute of another package's
module or class anywhere but :mod:`h5lens.hooks`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "h5lens"

SCRIPT = textwrap.dedent(
    r'''
    import json, pickle, sys, types, warnings
    warnings.simplefilter("ignore")
    import numpy as np, h5py, anndata as ad, pandas as pd, scipy.sparse as sp, xarray as xr, zarr, dask.array
    import anndata.experimental
    workdir = sys.argv[1]
    PACKAGES = ("zarr", "anndata", "xarray", "numcodecs")

    # -- files written by the software people use ------------------------------------------
    rng = np.random.default_rng(0)
    obs = pd.DataFrame({"cell_type": pd.Categorical(rng.choice(["a", "b"], 60)), "n": rng.integers(0, 9, 60)},
                       index=[f"c{i}" for i in range(60)])
    adata = ad.AnnData(sp.random(60, 20, density=0.2, format="csr", random_state=0, dtype=np.float32), obs=obs,
                       var=pd.DataFrame(index=[f"g{i}" for i in range(20)]))
    adata.obsm["pca"] = rng.random((60, 3))
    adata.uns["p"] = {"x": 1}
    h5ad = f"{workdir}/a.h5ad"
    adata.write_h5ad(h5ad)
    nc = f"{workdir}/a.nc"
    xr.Dataset({"t": (("x", "y"), rng.random((30, 4)).astype("f4"))}, coords={"x": np.arange(30)}).to_netcdf(
        nc, engine="h5netcdf")

    # -- the libraries' own first use, without h5lens --------------------------------------
    memory = zarr.storage.MemoryStore()
    adata.write_zarr(memory)
    ad.read_zarr(memory)
    lazy = ad.experimental.read_lazy(zarr.open_group(memory, mode="r"))
    lazy[lazy.obs["cell_type"] == "a"].to_memory()
    xr.open_dataset(nc, engine="h5netcdf").load()
    xr.backends.list_engines()  # xarray fills in its backends' parameters the first time it lists them
    ds = xr.Dataset({"t": (("x",), np.arange(5.0))})
    ds.to_zarr(zarr.storage.MemoryStore(), zarr_format=3, consolidated=False)

    def snapshot():
        """Every function, class and class member of the packages, by identity."""
        seen = {}
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] not in PACKAGES or not isinstance(module, types.ModuleType):
                continue
            for attr, value in list(vars(module).items()):
                if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
                    seen[f"{name}.{attr}"] = value
                if isinstance(value, type) and value.__module__ == name:
                    for member, inner in list(vars(value).items()):
                        seen[f"{name}.{attr}.{member}"] = inner
        return seen

    def settings():
        from anndata._io.specs.registry import _LAZY_REGISTRY, _REGISTRY
        return {
            "codec_pipeline.path": zarr.config.get("codec_pipeline.path"),
            "anndata reads": sorted(map(repr, _REGISTRY.read)),
            "anndata lazy reads": sorted(map(repr, _LAZY_REGISTRY.read)),
        }

    def changed(before, after):
        out = [k for k, v in before.items() if k in after and after[k] is not v]
        new_members = [k for k in after if k not in before and k.rsplit(".", 1)[0] in before
                       and isinstance(before[k.rsplit(".", 1)[0]], type)]
        return sorted(out + new_members)

    before, configured = snapshot(), settings()

    # -- h5lens, every form and entry point ------------------------------------------------
    import h5lens
    from h5lens.read.navigate import Group

    manifest = h5lens.index(h5ad, inline_threshold=0)
    manifest.to_json(f"{workdir}/a.json")
    manifest.save(f"{workdir}/a.h5lens")
    forms = [manifest, f"{workdir}/a.json", f"{workdir}/a.h5lens"]
    for form in forms:
        store = h5lens.open_store(form)
        group = h5lens.open_group(form)
        group["X/data"][:5]
        group["obsm/pca"][1:3]
        np.asarray(store.read_region("obsm/pca", [(0, 10), (0, 3)]))
        again = pickle.loads(pickle.dumps(store))
        zarr.open_group(again, mode="r")["obs/n"][:]
        h5lens.read_anndata(form)
        lazy = h5lens.read_anndata(form, lazy=True)
        lazy[lazy.obs["cell_type"] == "a"].to_memory()
        ad.read_zarr(h5lens.open_store(form))
        h5lens.open(form)["obsm/pca"][2:4]
    h5lens.read_treedata(manifest)
    netcdf = h5lens.index(nc)
    xr.open_dataset(netcdf, engine="h5lens").load()
    xr.open_datatree(netcdf, engine="h5lens").load()
    xr.open_dataset(h5lens.open_store(netcdf), engine="zarr", consolidated=False).load()

    result = {"untouched": changed(before, snapshot()), "settings": settings() == configured}

    # -- fast_reads: a change the check sees, and undone -----------------------------------
    h5lens.fast_reads()
    ad.read_zarr(h5lens.open_store(manifest))
    result["on"] = changed(before, snapshot())
    result["on settings"] = settings() == configured
    h5lens.fast_reads(False)
    result["off"] = changed(before, snapshot())
    result["off settings"] = settings() == configured
    with h5lens.fast_reads():
        xr.open_dataset(h5lens.open_store(netcdf), engine="zarr", consolidated=False).load()
    result["block"] = changed(before, snapshot())
    result["block settings"] = settings() == configured
    print(json.dumps(result))
    '''
)


def test_using_h5lens_changes_nothing_of_zarr_anndata_or_xarray(tmp_path):
    pytest.importorskip("anndata")
    pytest.importorskip("treedata")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["untouched"] == [] and result["settings"], result
    # fast_reads() is seen (the check is not blind), and fast_reads(False) undoes it, as a block's end does
    from h5lens import hooks

    if hooks.zarr_release() in hooks.WRITTEN_FOR:  # the hooks go in only on the zarr they were written for
        assert "zarr.core.array.Array.get_basic_selection" in result["on"], result
    assert not result["on settings"], result
    assert result["off"] == [] and result["off settings"], result
    assert result["block"] == [] and result["block settings"], result


# -- no assignment into another package, anywhere but h5lens.hooks ----------------------------------
def _foreign_names(tree: ast.Module) -> set[str]:
    """Names a module binds to another package's modules or objects by importing them."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "h5lens":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "h5lens":
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


# The interpreter's hooks for the program that owns the process, documented to be set
# (the CLI's main sets one while a command runs, and puts the previous one back).
PROCESS_HOOKS = {("sys", "unraisablehook"), ("sys", "excepthook")}


def _process_hook(target: ast.Attribute) -> bool:
    return isinstance(target.value, ast.Name) and (target.value.id, target.attr) in PROCESS_HOOKS


def assignments_into_other_packages(source: str) -> list[int]:
    """Lines that assign (or delete, or setattr) an attribute of an imported foreign name."""
    tree = ast.parse(source)
    foreign = _foreign_names(tree)
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [node.args[0]] if node.args else []
            if targets and not isinstance(targets[0], ast.Attribute) and _root(targets[0]) in foreign:
                lines.append(node.lineno)
                continue
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__setattr__":
            targets = [node.args[0]] if node.args else []
            if targets and _root(targets[0]) in foreign:
                lines.append(node.lineno)
                continue
        for target in targets:
            if isinstance(target, ast.Attribute) and _root(target) in foreign and not _process_hook(target):
                lines.append(node.lineno)
    return lines


def test_the_grep_finds_an_assignment_into_zarr():
    assert assignments_into_other_packages("import zarr\nzarr.Array.get = 1\n") == [2]
    assert assignments_into_other_packages("import zarr.core.array as a\na._get_selection = f\n") == [2]
    assert assignments_into_other_packages("from zarr import Group\nsetattr(Group, 'keys', f)\n") == [2]
    assert assignments_into_other_packages("from anndata import settings\nsettings.x = 1\n") == [2]
    assert assignments_into_other_packages("x = 1\nimport zarr\ny = zarr.config\n") == []
    assert assignments_into_other_packages("import sys\nsys.unraisablehook = f\nsys.meta_path = []\n") == [3]


def test_no_module_but_hooks_assigns_into_another_package():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "hooks.py" and path.parent == SRC:
            continue
        lines = assignments_into_other_packages(path.read_text())
        if lines:
            found[str(path.relative_to(SRC))] = lines
    assert found == {}


# -- the hooks, switched on and off safely ------------------------------------------------------


def _zarr_functions() -> dict[str, object]:
    import zarr
    import zarr.core.array as zarr_array

    return {
        "_get_selection": zarr_array.__dict__["_get_selection"],
        "get_basic_selection": zarr.Array.__dict__["get_basic_selection"],
        "get_orthogonal_selection": zarr.Array.__dict__["get_orthogonal_selection"],
        "__getitem__": zarr.Group.__dict__["__getitem__"],
        "keys": zarr.Group.__dict__["keys"],
    }


def test_install_is_all_or_nothing(monkeypatch):
    """A hook that fails to build part way leaves every zarr function as it was."""
    from h5lens import hooks

    if hooks.zarr_release() not in hooks.WRITTEN_FOR:
        pytest.skip("the hooks are not installed under this zarr release")
    hooks.uninstall()
    before = _zarr_functions()

    def broken(original):  # noqa: ANN001, ANN202
        raise RuntimeError("a hook that cannot be built")

    monkeypatch.setattr(hooks, "_keys", broken)
    with pytest.raises(RuntimeError, match="cannot be built"):
        hooks.install()
    assert not hooks.installed()
    assert _zarr_functions() == before  # the three installed before the failure were put back


def test_uninstall_takes_out_only_its_own_wrappers():
    """A function someone wrapped again after h5lens's hook stays theirs (with a warning),
    and h5lens's hook inside it hands every call to zarr's own from then on."""
    import zarr

    from h5lens import hooks

    if hooks.zarr_release() not in hooks.WRITTEN_FOR:
        pytest.skip("the hooks are not installed under this zarr release")
    hooks.uninstall()
    original = _zarr_functions()
    hooks.install()
    hooked_keys = zarr.Group.__dict__["keys"]
    calls: list[str] = []

    def theirs(self):  # noqa: ANN001, ANN202 - another library's wrapper, over h5lens's
        calls.append("theirs")
        return hooked_keys(self)

    zarr.Group.keys = theirs  # type: ignore[method-assign]  # the test plays that other library
    try:
        with pytest.warns(hooks.HookWarning, match="keys was replaced again"):
            hooks.uninstall()
        now = _zarr_functions()
        assert now["keys"] is theirs
        assert {k: v for k, v in now.items() if k != "keys"} == {k: v for k, v in original.items() if k != "keys"}
        group = zarr.group()
        group.create_group("a")
        assert list(group.keys()) == ["a"] and calls == ["theirs"]  # through zarr's own keys
    finally:
        zarr.Group.keys = original["keys"]  # type: ignore[method-assign]


def test_fast_reads_false_holds_for_its_own_context_only():
    """``with fast_reads(False):`` turns h5lens's own decoding off in the calling thread (and
    what it starts), not in another thread reading at the same time."""
    import threading

    import h5lens
    from h5lens.fast import decodes

    seen: dict[str, bool] = {}
    inside = threading.Event()
    done = threading.Event()

    def other() -> None:
        inside.wait(5)
        seen["other thread"] = decodes()
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with h5lens.fast_reads(False):
        seen["this thread"] = decodes()
        inside.set()
        done.wait(5)
    thread.join()
    assert seen == {"this thread": False, "other thread": True}
    assert decodes()
