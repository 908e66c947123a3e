"""What an element of a manifest is, and its values as a person reads them.

Used by ``h5lens ls``, ``cat`` and ``inspect``. Everything that describes a node
works from the manifest's metadata alone; what prints values reads only what it
prints:

* a selection (``PATH[0:10, 2:4]``, ``PATH[[1, 5], 0:3]`` or ``--slice 0:10``) is read
  as that selection (numpy's basic indexing, and one list of integers), and nothing else;
* without one (or when the selection is still too big to print whole) numpy's
  summarised form is printed, ``[0 1 2 ... 7 8 9]``, and only the leading and
  trailing values that appear in it are read (a block per corner), never the
  whole array;
* groups with an anndata ``encoding-type`` are decoded: ``categorical`` (labels),
  ``nullable-integer``, ``nullable-boolean``, ``nullable-string-array`` (masked
  values as ``<NA>``), ``dataframe`` (index and columns, sliced by rows),
  ``csr_matrix`` / ``csc_matrix`` with a selection (dense if small, else the stored
  values at their coordinates); without one, they and other groups are described
  with the command that reads their parts.

Modules: :mod:`~h5lens.describe.nodes` (metadata), :mod:`~h5lens.describe.selections`,
:mod:`~h5lens.describe.values` (encoded elements, :func:`show`), :mod:`~h5lens.describe.sparse`.

Reads go through :func:`h5lens.read.check.read_checked`, so a chunk that does not
decode is named (key, source and byte range).
"""

from h5lens.describe.nodes import (
    describe_array,
    dimension_names,
    link_at,
    link_target,
    list_members,
    shape_text,
    summary,
)
from h5lens.describe.selections import parse_selection, split_selection
from h5lens.describe.values import show

__all__ = [
    "describe_array",
    "dimension_names",
    "link_at",
    "link_target",
    "list_members",
    "parse_selection",
    "shape_text",
    "show",
    "split_selection",
    "summary",
]
