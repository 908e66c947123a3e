"""TreeData files along obs: ``treedata.concat`` of the files, its trees computed by treedata.

``treedata.concat`` concatenates the AnnData part with ``anndata.concat`` (the same options,
but no ``index_unique``: treedata requires obs names unique across the files instead) and
decides the rest itself: ``obst`` trees of one key in several files are merged with the
``merge`` strategy (dropped under the default ``merge=None``, with treedata's warning) unless
the alignment is ``"leaves"``, a key in one file is kept; ``vart`` trees are merged with
``merge``; ``label``, ``alignment`` and ``allow_overlap`` follow treedata's rules. So treedata
computes them, on TreeData objects of each file's small elements and its trees (read from its
manifest by treedata's ``read_tree_elems``), and treedata's ``write_tree_elems`` writes them as
new small arrays, in the columnar form its zarr writer uses (as h5lens's TreeData profile
presents an ``.h5td``). The matrices are referenced as for AnnData
(:mod:`h5lens.combining.anndata`).

An ``.h5ad`` among ``.h5td`` files is the TreeData ``treedata.read_h5td`` reads from it: no trees.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from h5lens.combining.inputs import Input
from h5lens.combining.written import Written, from_store, memory_group
from h5lens.errors import InvalidOptionError, UnsupportedFeatureError

TREE_ELEMENTS = ("obst", "vart", "label", "allow_overlap", "alignment")
ROOT = {"encoding-type": "treedata", "encoding-version": "0.1.0"}  # what treedata's writers put on the root


def is_treedata(inputs: Sequence[Input]) -> bool:
    """Whether any file is a TreeData (its root's encoding, or tree elements beside AnnData's)."""
    for item in inputs:
        nodes = item.manifest.nodes
        if nodes.get("", {}).get("attributes", {}).get("encoding-type") == "treedata":
            return True
        if any(name in nodes for name in ("obst", "vart")):
            return True
    return False


def check(inputs: Sequence[Input], index_unique: str | None) -> None:
    """Refuse what ``treedata.concat`` does not take, before anything is read."""
    if index_unique is not None:
        raise InvalidOptionError(
            "index_unique: treedata.concat takes none (it requires obs names unique across the files); "
            "combine the TreeData files without it"
        )
    for item in inputs:
        if "raw.treedata" in item.manifest.nodes:
            raise UnsupportedFeatureError(
                f"{item.name}: TreeData's legacy layout (/raw.treedata, treedata < 0.1); write the file again "
                "with treedata (treedata.read_h5td(...).write_h5td(...)) to combine it"
            )


def with_trees(item: Input, skeleton: Any) -> Any:
    """The file's TreeData: ``skeleton`` (its AnnData of small elements) with its trees, as
    treedata reads them from the manifest."""
    import treedata

    from h5lens.read.open import root_group

    try:
        return treedata.read_tree_elems(root_group(item.store), skeleton)
    finally:
        item.close()  # one file open at a time


def concat(tdatas: Sequence[Any], **options: Any) -> Any:
    """``treedata.concat`` (its warnings about merged trees and labels stand, as treedata gives them)."""
    import treedata

    try:
        return treedata.concat(list(tdatas), **options)
    except ValueError as e:  # treedata's own rules (obs names unique across the files, trees that stay trees)
        raise InvalidOptionError(f"treedata.concat refuses these TreeData files: {e}") from e


def tree_elements(result: Any) -> Written:
    """The tree elements of ``result`` written by treedata's ``write_tree_elems`` (the zarr form)."""
    import treedata

    group, store_dict = memory_group()
    treedata.write_tree_elems(group, result)
    written = from_store(store_dict)
    written.nodes.pop("", None)
    written.chunks.pop("", None)
    return written


__all__ = ["ROOT", "TREE_ELEMENTS", "check", "concat", "is_treedata", "tree_elements", "with_trees"]
