"""New small arrays: what ``combine`` must write rather than reference, written by the
software that defines it and taken over into the manifest as inline chunks.

AnnData elements (the concatenated ``obs`` with its categories, ``var``, a csr matrix's
``indptr`` offset by the rows before) are written by anndata's own ``write_elem`` into an
in-memory zarr v3 group, so that their encoding is anndata's; a chunk cut short (the last
chunk of a file whose rows end inside it) is encoded by zarr with the array's own codecs.
The store's documents and chunks then become manifest nodes and inline chunk tables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.storage import MemoryStore

from h5lens.codecs import register as register_codecs
from h5lens.format.convention import DTYPE
from h5lens.manifest.checks import grid_shape_of
from h5lens.manifest.model import ChunkTable, ChunkTableBuilder
from h5lens.manifest.zarr_keys import METADATA, KeyGrammar, metadata_path


@dataclass
class Written:
    """Nodes and their inline chunk tables, keyed by node path (``""`` the root)."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunks: dict[str, ChunkTable] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(table.inline_bytes for table in self.chunks.values())

    def only(self, element: str) -> Written:
        """Element ``element`` (a top-level name; ``""``: the root node alone)."""
        def mine(path: str) -> bool:
            return path == element or (bool(element) and path.startswith(element + "/"))

        return Written({p: d for p, d in self.nodes.items() if mine(p)}, {p: t for p, t in self.chunks.items() if mine(p)})

    def under(self, prefix: str) -> Written:
        """The same nodes below ``prefix`` (``"a/b"``)."""
        def moved(path: str) -> str:
            return f"{prefix}/{path}" if path else prefix

        return Written({moved(p): d for p, d in self.nodes.items()}, {moved(p): t for p, t in self.chunks.items()})


def from_store(store_dict: Mapping[str, Buffer]) -> Written:
    """The nodes and inline chunks of a zarr v3 hierarchy held in ``store_dict``."""
    nodes: dict[str, dict[str, Any]] = {}
    for key, value in store_dict.items():
        path = metadata_path(key)
        if path is not None:
            nodes[path] = _with_dtype(json.loads(value.to_bytes()))
    grammar = KeyGrammar.of_documents(nodes)
    builders = {path: ChunkTableBuilder(grid_shape_of(doc)) for path, doc in nodes.items() if doc.get("node_type") == "array"}
    for key, value in store_dict.items():
        if key == METADATA or key.endswith("/" + METADATA):
            continue
        found = grammar.chunk(key)
        if found is None:
            raise ValueError(f"{key}: neither a node nor a chunk of the hierarchy zarr wrote")
        path, index = found
        builder = builders[path]
        builder.set_inline(np.asarray([builder.flat(index)]), [value.to_bytes()])
    return Written(nodes, {path: builder.build() for path, builder in builders.items()})


def _with_dtype(doc: dict[str, Any]) -> dict[str, Any]:
    """An array's document with the convention's ``_DTYPE`` (what h5py would read it as), as
    every array an h5lens manifest holds has it: ``str`` for text, the numpy name otherwise."""
    data_type = doc.get("data_type")
    if doc.get("node_type") != "array" or not isinstance(data_type, str) or DTYPE in doc.get("attributes", {}):
        return doc
    return {**doc, "attributes": {**doc.get("attributes", {}), DTYPE: "str" if data_type == "string" else data_type}}


def memory_group() -> tuple[zarr.Group, MutableMapping[str, Buffer]]:
    """An empty zarr v3 group in memory, and the dict that holds its keys."""
    store_dict: MutableMapping[str, Buffer] = {}
    group = zarr.open_group(MemoryStore(store_dict), mode="w", zarr_format=3)
    return group, store_dict


def write_anndata_elements(elements: Mapping[str, Any]) -> Written:
    """Each element written by anndata's ``write_elem`` at its path of a new hierarchy (``"/"``
    for a whole AnnData: its root and every element it holds)."""
    import anndata

    group, store_dict = memory_group()
    for path, value in elements.items():
        # no shards: small arrays whose chunks h5lens decodes itself (it reads no sharding codec)
        anndata.io.write_elem(group, path, value, dataset_kwargs={"shards": None})
    return from_store(store_dict)


def encode_chunks(doc: Mapping[str, Any], values: np.ndarray) -> dict[tuple[int, ...], bytes]:
    """``values`` as one row of chunks of an array like ``doc`` (its codecs, data type and
    fill value; chunks of ``values``'s rows along axis 0, its own along the others): each
    chunk's encoded bytes by its grid index (chunks all fill value are left out, as zarr
    leaves them)."""
    register_codecs()  # h5lens's codecs encode too: the tail of an LZF or shuffled array
    chunk_rest = list(doc["chunk_grid"]["configuration"]["chunk_shape"])[1:] if doc["chunk_grid"]["name"] == "regular" else [
        axis for axis in doc["chunk_grid"]["configuration"]["chunk_shapes"][1:]
    ]
    part = {
        **doc,
        "shape": list(values.shape),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(1, values.shape[0]), *chunk_rest]}},
        "attributes": {},
    }
    store_dict: dict[str, Buffer] = {
        METADATA: default_buffer_prototype().buffer.from_bytes(json.dumps(part, allow_nan=True).encode())
    }
    array = zarr.open_array(MemoryStore(store_dict), mode="r+", zarr_format=3)
    array[...] = values
    grammar = KeyGrammar.of_documents({"": part})
    found: dict[tuple[int, ...], bytes] = {}
    for key, value in store_dict.items():
        if key == METADATA:
            continue
        located = grammar.chunk(key)
        if located is None:
            raise ValueError(f"{key}: not a chunk of the array zarr wrote")
        found[located[1]] = value.to_bytes()
    return found


__all__ = ["Written", "encode_chunks", "from_store", "memory_group", "write_anndata_elements"]
