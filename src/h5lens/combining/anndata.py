"""AnnData files along obs: one AnnData, as ``anndata.concat`` makes it, referencing each
file's matrices where they lie.

What ``anndata.concat`` defines is computed by ``anndata.concat`` itself, on AnnData
objects that hold each file's small elements (obs, var, and what the options keep: ``uns``
under ``uns_merge``, ``varm`` / ``varp`` under ``merge``, ``obsp`` under ``pairwise``) and
the matrices that cannot be referenced; anndata writes the result (obs with its categories
as their union, var, ...) as new small arrays (:mod:`h5lens.combining.written`).

The matrices along obs (``X``, each layer, each ``obsm`` entry) are referenced, when every
file holds one that can be: a dense array of numbers, or a csr matrix, whose stored arrays
agree between the files (:func:`h5lens.combining.stack.why_not`). A csr matrix's ``data``
and ``indices`` are concatenated by reference; its ``indptr``, offset by the values before
each file's rows, is written (8 bytes a row). Any other matrix (csc, which concatenates into
a csr whose values are in another order; arrays whose codecs differ; dataframes in obsm) is
read and concatenated by anndata, and written: the summary says so, with its bytes.

Files whose var differ (``join`` then makes the combined var the union or intersection,
as anndata does) keep ``X`` and the layers referenced as each file stores them, with each
file's column map recorded for h5lens's reader, which zarr's readers refuse, saying why
(:mod:`h5lens.combining.columns`); ``obsm`` is not indexed by var and stacks as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.adata.columns import COLUMNS
from h5lens.adata.eager import EagerReader
from h5lens.combining.columns import column_map, offset_pointers, reference_by_file
from h5lens.combining.inputs import Input, SourceTable, each_file
from h5lens.combining.result import Combined
from h5lens.combining.stack import Part, stack, why_not
from h5lens.combining.treedata import ROOT as TREEDATA_ROOT
from h5lens.combining.treedata import check as check_treedata
from h5lens.combining.treedata import concat as concat_treedata
from h5lens.combining.treedata import is_treedata, tree_elements, with_trees
from h5lens.combining.written import write_anndata_elements
from h5lens.errors import InvalidOptionError, UnsupportedFeatureError
from h5lens.read.rectilinear import rectilinear_allowed

ALONG_OBS = ("layers", "obsm")  # mappings of matrices along obs (X apart)
ALONG_VAR = ("X", "layers")  # matrices along obs whose columns are var
ROOT_ENCODINGS = ("anndata", "treedata")


@dataclass(frozen=True)
class Matrix:
    """How one matrix along obs (``X``, ``layers/k``, ``obsm/k``) is referenced: a dense
    array, or a csr group's data and indices."""

    path: str
    kind: str  # "array" | "csr_matrix"


def combine_anndata(
    inputs: Sequence[Input],
    sources: SourceTable,
    *,
    join: str = "inner",
    merge: str | Callable[..., Any] | None = None,
    uns_merge: str | Callable[..., Any] | None = None,
    label: str | None = None,
    keys: Sequence[Any] | None = None,
    index_unique: str | None = None,
    fill_value: Any = None,
    pairwise: bool = False,
) -> Combined:
    """The AnnData files ``inputs`` along obs (``anndata.concat``'s options), their sources
    added to ``sources``."""
    import anndata

    if join not in ("inner", "outer"):
        raise InvalidOptionError(f"join must be 'inner' or 'outer'. Got {join!r}")
    for item in inputs:
        encoding = item.manifest.nodes.get("", {}).get("attributes", {}).get("encoding-type")
        if encoding not in ROOT_ENCODINGS:
            raise InvalidOptionError(f"{item.name}: not an AnnData manifest (its root's encoding-type is {encoding!r})")
        if COLUMNS in item.manifest.nodes:
            raise UnsupportedFeatureError(
                f"{item.name}: a combined AnnData whose files' var differ (its matrices' columns are mapped "
                "file by file); combine its files again together with the new ones"
            )
    trees = is_treedata(inputs)
    if trees:
        check_treedata(inputs, index_unique)
    mappings = [sources.add(item) for item in inputs]
    docs = [item.manifest.nodes for item in inputs]
    with rectilinear_allowed(doc for nodes in docs for doc in nodes.values()):
        # one pass over the files reads each one's var and what anndata.concat concatenates, the
        # matrices chosen as if every var were the first's; a pass again if one is not
        first = EagerReader(inputs[0].store).read("var")
        first_values = _element_values(inputs[0], "var")
        inputs[0].close()

        def var_of(item: Input) -> Any:
            same = item is inputs[0] or _same_element(inputs[0], item, "var", first_values)
            return first if same else EagerReader(item.store).read("var")

        def skeleton_of(item: Input, referenced: list[Matrix], var: Any = None) -> tuple[Any, Any]:
            pointers = [f"{m.path}/indptr" for m in referenced if m.kind == "csr_matrix"]
            # what is read of a remote file here, fetched at once (merged ranges), not a request each
            wanted = _read_here(item, referenced, pointers, merge, uns_merge, pairwise)
            item.store.prefetch_all(SKELETON_BYTES, lambda path: path.startswith("var/") or wanted(path))
            var = var_of(item) if var is None else var
            for path in pointers:  # kept for _pointers, a later pass
                item.kept[path] = item.values(path)
            reader = EagerReader(item.store)
            found = _skeleton(reader, item, var, referenced, merge=merge, uns_merge=uns_merge, pairwise=pairwise)
            return var, with_trees(item, found) if trees else found

        referenced = _referenced(inputs, join)
        passed = each_file(inputs, lambda item: skeleton_of(item, referenced))
        variables = [var for var, _ in passed]
        differ = any(not var.index.equals(variables[0].index) for var in variables[1:])
        if differ and (along_files := _referenced(inputs, join, by_file=True)) != referenced:
            referenced = along_files
            read = {id(item): var for item, var in zip(inputs, variables, strict=True)}
            passed = each_file(inputs, lambda item: skeleton_of(item, along_files, read[id(item)]))
        skeletons = [skeleton for _, skeleton in passed]
    options: dict[str, Any] = {"join": join, "merge": merge, "uns_merge": uns_merge}  # checked by anndata
    if trees:  # treedata.concat: anndata.concat's, and the trees by treedata's rules
        result = concat_treedata(
            skeletons, label=label, keys=keys, fill_value=fill_value, pairwise=pairwise, **options
        )  # fmt: skip
        written = write_anndata_elements({"/": result.to_adata()})
        if written.nodes.get("raw", {}).get("attributes", {}).get("encoding-type") == "null":
            # anndata writes a missing raw as null; treedata's writer leaves it out, and its reader
            # takes any raw member for a raw AnnData
            written.nodes.pop("raw")
            written.chunks.pop("raw", None)
        root = written.nodes[""]
        written.nodes[""] = {**root, "attributes": {**root.get("attributes", {}), **TREEDATA_ROOT}}
    else:
        result = anndata.concat(
            skeletons, label=label, keys=keys, index_unique=index_unique, fill_value=fill_value, pairwise=pairwise,
            **options,
        )  # fmt: skip
        written = write_anndata_elements({"/": result})
    combined = Combined()
    for element in sorted({path.split("/", 1)[0] for path in written.nodes}):  # "" the root
        combined.add(written.only(element), element or "/")
    if trees:
        made = tree_elements(result)
        for element in sorted({path.split("/", 1)[0] for path in made.nodes}):
            combined.add(made.only(element), element)
    n_obs = result.n_obs
    by_file = [m for m in referenced if differ and m.path.split("/", 1)[0] in ALONG_VAR]
    for matrix in referenced:
        if matrix in by_file:
            continue
        parts_of = [Part(item, "", mapping) for item, mapping in zip(inputs, mappings, strict=True)]
        _reference(combined, matrix, parts_of, n_obs)
    if by_file:
        maps = [column_map(result.var_names, var.index) for var in variables]
        pointers = {m.path: _pointers(inputs, m.path) for m in by_file if m.kind == "csr_matrix"}
        reference_by_file(
            combined, inputs, mappings, [(m.path, m.kind) for m in by_file], maps, [s.n_obs for s in skeletons],
            width=result.n_vars, join=join, fill_value=fill_value, pointers=pointers,
        )  # fmt: skip
    _container_docs(combined, referenced)
    return combined


def _same_element(one: Input, other: Input, path: str, values: dict[str, np.ndarray] | None = None) -> bool:
    """Whether element ``path`` holds the same values in both files: the same documents, and
    each array's chunk tables of inline bytes equal or, with ``values`` (``one``'s arrays'
    values, read by :func:`_element_values`), its values read from ``other`` equal to them."""

    def members(item: Input) -> dict[str, Any]:
        return {p: d for p, d in item.manifest.nodes.items() if p == path or p.startswith(path + "/")}

    mine, theirs = members(one), members(other)
    if mine.keys() != theirs.keys() or any(mine[p] != theirs[p] for p in mine):
        return False
    for p in mine:
        a, b = one.manifest.chunks.get(p), other.manifest.chunks.get(p)
        if (a is None) != (b is None):
            return False
        if a is None or (not bool((a.source >= 0).any()) and a == b):
            continue  # no chunks, or the same inline bytes
        if values is None or p not in values or not _equal(values[p], other.values(p)):
            return False
    return True


def _element_values(item: Input, path: str) -> dict[str, np.ndarray]:
    """The values of the arrays of element ``path`` of ``item`` that reference its file and
    that h5lens reads (numbers, booleans, strings), for :func:`_same_element`."""
    found = {}
    for p, doc in item.manifest.nodes.items():
        inside = (p == path or p.startswith(path + "/")) and doc.get("node_type") == "array"
        if inside and p in item.manifest.chunks and doc.get("shape") and bool((item.manifest.chunks[p].source >= 0).any()):
            found[p] = item.values(p)
    return found


def _equal(one: np.ndarray, other: np.ndarray) -> bool:
    """Equal values (and dtypes, shapes); NaN equal to NaN where the values are floats."""
    if one.dtype != other.dtype or one.shape != other.shape:
        return False
    return bool(np.array_equal(one, other, equal_nan=one.dtype.kind in "fc"))


def _matrix_kind(nodes: Any, path: str) -> str | None:
    doc = nodes.get(path)
    if doc is None:
        return None
    encoding = doc.get("attributes", {}).get("encoding-type")
    if doc.get("node_type") == "array":
        return "array" if encoding in (None, "array") else None
    return "csr_matrix" if encoding == "csr_matrix" else None


def _referenced(inputs: Sequence[Input], join: str, *, by_file: bool = False) -> list[Matrix]:
    """The matrices along obs every file holds and that can be referenced. ``by_file``: the
    files' var differ, so that the matrices along var (X, layers) are referenced file by file
    (:mod:`h5lens.combining.columns`): a dense one needs only to be an array of numbers."""
    nodes = [item.manifest.nodes for item in inputs]
    candidates = ["X"] if all("X" in n for n in nodes) else []
    for mapping in ALONG_OBS:
        names = [set(item.manifest.children(mapping)) for item in inputs]
        common = set.intersection(*names) if names else set()
        candidates += [f"{mapping}/{name}" for name in sorted(common)]
    found = []
    for path in candidates:
        kinds = {_matrix_kind(n, path) for n in nodes}
        if len(kinds) != 1 or None in kinds:
            continue
        kind = kinds.pop()
        assert kind is not None
        members = [path] if kind == "array" else [f"{path}/data", f"{path}/indices"]
        if kind == "csr_matrix" and not all(f"{path}/indptr" in n for n in nodes):
            continue
        if by_file and kind == "array" and path.split("/", 1)[0] in ALONG_VAR:
            if all(_numbers(n[path], 2) for n in nodes):
                found.append(Matrix(path, kind))
            continue
        parts = [[Part(item, member, np.empty(0, np.int32)) for item in inputs] for member in members]
        if all(why_not(p) is None for p in parts):
            found.append(Matrix(path, kind))
    return found


def _skeleton(
    reader: EagerReader, item: Input, var: Any, referenced: list[Matrix], *, merge: Any, uns_merge: Any, pairwise: bool
) -> Any:
    """The file as an AnnData of what anndata must concatenate (everything but the
    referenced matrices, and what the options drop)."""
    import anndata

    nodes = item.manifest.nodes
    skip = {m.path for m in referenced}
    elements: dict[str, Any] = {"obs": reader.read("obs"), "var": var}
    if "X" in nodes and "X" not in skip:
        elements["X"] = reader.read("X")
    for mapping in ALONG_OBS:
        found = {}
        for name in item.manifest.children(mapping):
            if f"{mapping}/{name}" not in skip:
                found[_name(reader, mapping, name)] = reader.read(f"{mapping}/{name}")
        elements[mapping] = found
    if uns_merge is not None and "uns" in nodes:
        elements["uns"] = reader.read("uns")
    if merge is not None:
        for mapping in ("varm", "varp"):
            if mapping in nodes:
                elements[mapping] = reader.read(mapping)
    if pairwise and "obsp" in nodes:
        elements["obsp"] = reader.read("obsp")
    if "raw" in nodes:
        elements["raw"] = reader.read("raw")
    return anndata.AnnData(**elements)


def _numbers(doc: dict[str, Any], ndim: int) -> bool:
    """Whether an array's document is of numbers (or booleans) of ``ndim`` axes."""
    try:
        kind = np.dtype(doc.get("data_type")).kind  # a name, or a form numpy refuses
    except TypeError:
        return False
    return kind in "biuf" and len(doc.get("shape", ())) == ndim


# bytes of one remote file fetched ahead by the pass that reads its obs (and the rest that
# anndata.concat concatenates, and indptr): obs of 10^5 cells is a few MB
SKELETON_BYTES = 256 << 20


def _read_here(
    item: Input, referenced: list[Matrix], pointers: list[str], merge: Any, uns_merge: Any, pairwise: bool
) -> Callable[[str], bool]:
    """Which arrays of the file :func:`_skeleton` (and the indptr kept) reads: obs, what is
    not referenced along obs, and the elements the options keep."""
    skip = tuple(m.path + "/" for m in referenced) + tuple(m.path for m in referenced)
    elements = ["obs/", "raw/", *(f"{m}/" for m in ALONG_OBS)]
    if "X" not in {m.path for m in referenced}:
        elements.append("X/")
        pointers = [*pointers, "X"]  # a dense X is the array X itself
    if uns_merge is not None:
        elements.append("uns/")
    if merge is not None:
        elements += ["varm/", "varp/"]
    if pairwise:
        elements.append("obsp/")
    wanted = tuple(elements)
    kept = set(pointers)

    def read(path: str) -> bool:
        return path in kept or (path.startswith(wanted) and not path.startswith(skip))

    return read


def _pointers(inputs: Sequence[Input], path: str) -> list[np.ndarray]:
    """Every file's ``indptr`` of csr matrix ``path``, checked to span its values exactly."""
    pointers = each_file(inputs, lambda item: item.values(f"{path}/indptr"))
    for item, found in zip(inputs, pointers, strict=True):
        stored = item.manifest.nodes[f"{path}/data"]["shape"][0]
        if int(found[0]) != 0 or int(found[-1]) != stored:
            raise UnsupportedFeatureError(
                f"{item.name}: /{path}/indptr spans values {int(found[0])} to {int(found[-1])} of the "
                f"{stored} stored; combine references csr matrices whose indptr spans their data exactly"
            )
    return pointers


def _name(reader: EagerReader, mapping: str, name: str) -> str:
    """A mapping member's key as anndata reads it (escaped names unescaped)."""
    from h5lens.format.keys import unescape_key

    attributes = reader.nodes.get(mapping, {}).get("attributes", {})
    return unescape_key(name) if attributes.get("encoding-version") == "0.2.0" else name


def _reference(combined: Combined, matrix: Matrix, parts_of: list[Part], n_obs: int) -> None:
    """Matrix ``matrix`` of every file, referenced into ``combined``."""
    inputs = [part.item for part in parts_of]

    def parts(member: str) -> list[Part]:
        return [Part(p.item, member, p.sources) for p in parts_of]

    first = inputs[0].manifest.nodes
    members = [matrix.path] if matrix.kind == "array" else [f"{matrix.path}/data", f"{matrix.path}/indices"]
    for member in members:
        stacked = stack(parts(member))
        combined.nodes[member] = stacked.doc
        combined.chunks[member] = stacked.table
        combined.referenced[member] = stacked
    if matrix.kind == "array":
        return
    indptr = offset_pointers(_pointers(inputs, matrix.path))
    written = write_anndata_elements({"indptr": indptr})
    written.nodes.pop("", None)
    written.chunks.pop("", None)
    combined.add(written.under(matrix.path), f"{matrix.path}/indptr")
    attributes = dict(first[matrix.path].get("attributes", {}))
    shape = attributes.get("shape", [0, 0])
    attributes["shape"] = [n_obs, int(shape[1])]
    combined.nodes[matrix.path] = {**first[matrix.path], "attributes": attributes}


def _container_docs(combined: Combined, referenced: list[Matrix]) -> None:
    """Groups above referenced matrices (``layers``, ``obsm``) that anndata's write did not
    make (it writes an empty mapping as an empty group: those stand)."""
    for matrix in referenced:
        parent = matrix.path.rpartition("/")[0]
        if parent and parent not in combined.nodes:
            combined.nodes[parent] = {
                "zarr_format": 3, "node_type": "group", "attributes": {"encoding-type": "dict", "encoding-version": "0.1.0"},
            }  # fmt: skip


__all__ = ["Combined", "combine_anndata"]
