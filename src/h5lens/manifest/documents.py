"""zarr.json documents checked by zarr's own metadata classes, once, at the boundary.

A manifest's documents are checked when it is built (by the scanner) and when it is
loaded (from a file): ``ArrayV3Metadata.from_dict`` / ``GroupMetadata.from_dict`` must
accept each, so a bad document is an error naming its node there, not a traceback from
deep inside zarr at the first read. zarr's parse costs ~200 µs per array document;
the arrays of a file share most of their metadata, so zarr parses each distinct kind of
document once per load: documents that differ only in their attributes, their shape and
chunk shape (once h5lens has checked both are lists of integers of the same length) and
the text of their dimension names are one kind, where zarr's checks of every codec of the
document look at neither (:func:`_shape_seen_by`; a sharding codec's do). Where the
number of dimensions matters to zarr (a transpose codec's order, as many dimension names),
it is part of the kind. Nothing is remembered from one load to the next.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5lens.errors import ManifestFormatError
from h5lens.manifest.limits import DEFAULT_LIMITS, Limits
from h5lens.manifest.zarr_keys import KeyEncoding


def chunk_shape_of(doc: Mapping[str, Any]) -> tuple[int, ...]:
    """The chunk shape of an array's ``zarr.json``: a regular grid's, or for a rectilinear
    grid (``h5lens combine`` writes them) the largest chunk along each axis, a bound."""
    grid = doc["chunk_grid"]
    if grid.get("name") == RECTILINEAR:
        return tuple(axis if isinstance(axis, int) else max(axis) for axis in chunk_edges_of(doc))
    return tuple(grid["configuration"]["chunk_shape"])


RECTILINEAR = "rectilinear"


def chunk_edges_of(doc: Mapping[str, Any]) -> tuple[int | tuple[int, ...], ...]:
    """A rectilinear grid's chunk edges per axis as zarr reads them: a bare integer (a
    regular step), or every chunk's length (``[size, count]`` run-length pairs expanded).
    Raises ManifestFormatError for anything else."""
    config = doc["chunk_grid"].get("configuration")
    shapes = config.get("chunk_shapes") if isinstance(config, dict) else None
    if not isinstance(config, dict) or config.get("kind") != "inline" or not isinstance(shapes, list):
        raise ManifestFormatError(f"Expected a rectilinear grid of kind 'inline' with 'chunk_shapes'. Got {config!r:.200}")
    axes: list[int | tuple[int, ...]] = []
    for axis in shapes:
        if type(axis) is int and axis > 0:
            axes.append(axis)
            continue
        if not isinstance(axis, list) or not axis:
            raise ManifestFormatError(f"Expected chunk edges or a positive integer per axis. Got {axis!r:.200}")
        edges: list[int] = []
        for item in axis:
            if type(item) is int and item > 0:
                edges.append(item)
            elif (isinstance(item, list) and len(item) == 2 and all(type(n) is int and n > 0 for n in item)):
                edges.extend([item[0]] * item[1])
            else:
                raise ManifestFormatError(f"Expected a chunk edge or [size, count]. Got {item!r:.200}")
        axes.append(tuple(edges))
    return tuple(axes)


def rectilinear_json(edges: Sequence[int | Sequence[int]]) -> dict[str, Any]:
    """The ``chunk_grid`` of a rectilinear grid with these edges per axis (a bare integer, or
    every chunk's length), runs of equal lengths written as ``[size, count]`` as zarr writes them."""
    shapes: list[Any] = []
    for axis in edges:
        if isinstance(axis, int):
            shapes.append(axis)
            continue
        runs: list[Any] = []
        for size in axis:
            last = runs[-1] if runs else None
            if isinstance(last, list) and last[0] == size:
                last[1] += 1
            elif last == size:
                runs[-1] = [size, 2]
            else:
                runs.append(int(size))
        shapes.append(runs)
    return {"name": RECTILINEAR, "configuration": {"kind": "inline", "chunk_shapes": shapes}}


def grid_shape(shape: Sequence[int], chunk_shape: Sequence[int]) -> tuple[int, ...]:
    """Chunks per axis of a regular grid (the last one partial; none along a 0-size chunk axis)."""
    return tuple(-(-s // c) if c else 0 for s, c in zip(shape, chunk_shape, strict=True))


def edges_grid_shape(shape: Sequence[int], edges: Sequence[int | Sequence[int]]) -> tuple[int, ...]:
    """Chunks per axis of a rectilinear grid: those that hold part of the array (zarr allows
    edges past its end)."""
    found = []
    for n, axis in zip(shape, edges, strict=True):
        if isinstance(axis, int):
            found.append(-(-n // axis))
        else:
            found.append(int(np.searchsorted(np.cumsum(axis), n, side="left")) + 1 if n else 0)
    return tuple(found)


@dataclass(frozen=True)
class ArrayDocument:
    """A frozen, typed view of an array's ``zarr.json``: the fields readers use, named, so
    that none dives into the document by key. Made from a document the manifest's checks
    accepted (:class:`DocumentChecker`: a regular grid, shapes of integers)."""

    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    data_type: Any  # a name ("float32"), or a structured type's JSON
    fill_value: Any
    codecs: tuple[Mapping[str, Any], ...]
    attributes: Mapping[str, Any]
    dimension_names: tuple[str | None, ...] | None
    # a rectilinear grid's edges per axis (chunk_edges_of), None for a regular grid, whose
    # chunk_shape is then exact; for a rectilinear grid chunk_shape is the largest chunk
    edges: tuple[int | tuple[int, ...], ...] | None = None

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> ArrayDocument | None:
        """The view of an array document; None for a group's."""
        if doc.get("node_type") != "array":
            return None
        names = doc.get("dimension_names")
        edges = chunk_edges_of(doc) if doc["chunk_grid"].get("name") == RECTILINEAR else None
        return cls(
            edges=edges,
            shape=tuple(doc["shape"]),
            chunk_shape=chunk_shape_of(doc),
            data_type=doc.get("data_type"),
            fill_value=doc.get("fill_value"),
            codecs=tuple(doc.get("codecs") or ()),
            attributes=doc.get("attributes", {}),
            dimension_names=None if names is None else tuple(names),
        )

    @property
    def grid_shape(self) -> tuple[int, ...]:
        if self.edges is not None:
            return edges_grid_shape(self.shape, self.edges)
        return grid_shape(self.shape, self.chunk_shape)


class DocumentChecker:
    """Parses documents with zarr, remembering each distinct array body's result (for one
    manifest: make one per load)."""

    def __init__(self) -> None:
        self._arrays: dict[str, tuple[Any, str | None]] = {}
        self._groups: dict[str, str | None] = {}
        self._kinds: dict[str, tuple[int, str | None]] = {}  # kind of document -> (item size, error)
        self._seen: dict[str, int] = {}  # codec name -> how much of the shape zarr's checks of it see

    def array(self, doc: Mapping[str, Any]) -> tuple[Any, str | None]:
        """(zarr's ArrayV3Metadata or None, the error text or None) for an array document."""
        body = {k: v for k, v in as_regular(doc).items() if k != "attributes"}
        key = json.dumps(body, sort_keys=True, allow_nan=True, default=repr)
        found = self._arrays.get(key)
        if found is None:
            found = self._arrays[key] = _zarr_array(body)
        return found

    def group(self, doc: Mapping[str, Any]) -> str | None:
        """The error text for a group document zarr refuses, or None (remembered per body:
        a MATLAB file has tens of thousands of groups, all alike but for their attributes)."""
        from zarr.core.group import GroupMetadata

        body = {k: v for k, v in doc.items() if k != "attributes"}
        key = repr(body)  # equal reprs: equal JSON values
        if key in self._groups:
            return self._groups[key]
        try:
            GroupMetadata.from_dict({**body, "attributes": {}})
            found = None
        except Exception as e:  # noqa: BLE001
            found = f"{type(e).__name__}: {_first_line(e)}"
        self._groups[key] = found
        return found

    def check(self, path: str, doc: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> None:
        """Raise :class:`ManifestFormatError` naming ``path`` if zarr refuses ``doc``, and
        :class:`~h5lens.errors.ManifestLimitError` if one chunk of it would exceed ``limits``."""
        if not isinstance(doc.get("attributes", {}), Mapping):
            raise ManifestFormatError(f"/{path}: attributes must be an object")
        if doc.get("node_type") != "array":
            error = self.group(doc)
            if error is not None:
                raise ManifestFormatError(f"/{path}: zarr refuses this metadata document ({error})")
            return
        _check_shapes(path, doc)
        doc = as_regular(doc)  # zarr checks the rest without its rectilinear flag
        KeyEncoding.from_document(doc, "/" + path)  # before zarr: h5lens names what it reads
        itemsize, error = self._kind(doc)
        if error is not None:
            raise ManifestFormatError(f"/{path}: zarr refuses this metadata document ({error})")
        chunk_shape = chunk_shape_of(doc)  # checked above
        limits.check("a chunk of (bytes)", math.prod(chunk_shape) * itemsize, "chunk_bytes", "/" + path)

    def _kind(self, doc: Mapping[str, Any]) -> tuple[int, str | None]:
        """(item size, zarr's error or None) of an array document whose shapes
        :func:`_check_shapes` accepted, parsed once per kind of document (see the module)."""
        body = {k: v for k, v in doc.items() if k != "attributes"}
        seen = self._shape_seen(body.get("codecs"))
        if seen != _VALUES:
            names = body.get("dimension_names")
            # zarr compares the number of dimensions with the number of names and the
            # transpose codec's order; nothing else of the shape, for these codecs
            ndim = len(body["shape"]) if seen == _NDIM or names is not None else None
            body["shape"] = ndim
            body["chunk_grid"] = {**body["chunk_grid"], "configuration": {**body["chunk_grid"]["configuration"]}}
            body["chunk_grid"]["configuration"]["chunk_shape"] = ndim
            if isinstance(names, list) and all(n is None or isinstance(n, str) for n in names):
                body["dimension_names"] = [None if n is None else "" for n in names]
        key = repr(body)  # equal reprs: equal JSON values (1, 1.0, True and "1" all differ)
        found = self._kinds.get(key)
        if found is None:
            # zarr reads the document itself (an error then names what is wrong with it)
            meta, error = _zarr_array({k: v for k, v in doc.items() if k != "attributes"})
            found = self._kinds[key] = (0 if meta is None else max(1, meta.dtype.to_native_dtype().itemsize), error)
        return found

    def _shape_seen(self, codecs: Any) -> int:
        """How much of the array's shape zarr's checks of ``codecs`` look at: nothing, the
        number of dimensions, or the values (:func:`_shape_seen_by`)."""
        if not isinstance(codecs, list) or not codecs:
            return _VALUES
        seen = _NOTHING
        for codec in codecs:
            name = codec.get("name") if isinstance(codec, dict) else codec
            if not isinstance(name, str):
                return _VALUES
            found = self._seen.get(name)
            if found is None:
                found = self._seen[name] = _shape_seen_by(name)
            seen = max(seen, found)
        return seen


_NOTHING, _NDIM, _VALUES = 0, 1, 2  # how much of an array's shape a codec's zarr checks look at


def _zarr_array(body: dict[str, Any]) -> tuple[Any, str | None]:
    """zarr's reading of an array document without its attributes: (metadata, None), or
    (None, why zarr refuses it)."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ArrayV3Metadata.from_dict({**body, "attributes": {}}), None
    except Exception as e:  # noqa: BLE001 - any refusal is the finding
        return None, f"{type(e).__name__}: {_first_line(e)}"


def _shape_seen_by(name: str) -> int:
    """How much of the array's shape zarr's checks of the codec registered as ``name`` look
    at. Nothing, where its ``validate``, ``evolve_from_array_spec`` and ``resolve_metadata``
    are zarr's defaults or ones read to look at the data type only; the number of dimensions
    for the transpose codec; the values for any other (the sharding codec's checks divide
    the chunk shape). Decided by the class zarr resolves the name to, so a codec that a
    configuration or a plugin puts under one of these names is not taken on trust."""
    from zarr import registry
    from zarr.abc.codec import BaseCodec
    from zarr.codecs import BloscCodec, BytesCodec, TransposeCodec, VLenBytesCodec, VLenUTF8Codec
    from zarr.codecs.numcodecs import Shuffle

    try:
        cls = registry.get_codec_class(name)
    except Exception:  # noqa: BLE001 - a codec zarr does not know: its checks are zarr's to make
        return _VALUES
    methods = (getattr(cls, "validate", None), getattr(cls, "evolve_from_array_spec", None),
               getattr(cls, "resolve_metadata", None))
    blind: tuple[set[Any], set[Any], set[Any]] = (
        {BaseCodec.validate},
        {
            BaseCodec.evolve_from_array_spec,
            BytesCodec.evolve_from_array_spec,  # the data type's endianness
            BloscCodec.evolve_from_array_spec,  # the data type's item size
            Shuffle.evolve_from_array_spec,  # the data type's item size
            VLenUTF8Codec.evolve_from_array_spec,
            VLenBytesCodec.evolve_from_array_spec,
        },
        {BaseCodec.resolve_metadata},
    )
    if all(method in allowed for method, allowed in zip(methods, blind, strict=True)):
        return _NOTHING
    transpose = (TransposeCodec.validate, TransposeCodec.evolve_from_array_spec, TransposeCodec.resolve_metadata)
    return _NDIM if methods == transpose else _VALUES


def as_regular(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """A rectilinear array's document as the regular one of its largest chunks (what zarr's
    checks of its codecs and data type see, without zarr's rectilinear flag); any other as it is."""
    grid = doc.get("chunk_grid")
    if not isinstance(grid, dict) or grid.get("name") != RECTILINEAR:
        return doc
    return {**doc, "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape_of(doc))}}}


def _check_shapes(path: str, doc: Mapping[str, Any]) -> None:
    """``shape`` and the regular grid's ``chunk_shape`` as h5lens reads them: lists of
    integers (zarr also takes a bool, or a bare integer, for a shape), one per dimension;
    a rectilinear grid's edges, one axis each, covering the shape."""
    shape = doc.get("shape")
    grid = doc.get("chunk_grid")
    if isinstance(grid, dict) and grid.get("name") == RECTILINEAR:
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
            raise ManifestFormatError(f"/{path}: shape must be a list of non-negative integers. Got {shape!r}")
        try:
            edges = chunk_edges_of(doc)
        except ManifestFormatError as e:
            raise ManifestFormatError(f"/{path}: {e}") from None
        if len(edges) != len(shape) or any(
            not isinstance(axis, int) and sum(axis) < n for axis, n in zip(edges, shape, strict=False)
        ):
            raise ManifestFormatError(f"/{path}: the rectilinear chunk edges do not cover the shape {shape}")
        return
    if not isinstance(grid, dict) or grid.get("name") != "regular" or not isinstance(grid.get("configuration"), dict):
        name = grid.get("name") if isinstance(grid, dict) else grid
        raise ManifestFormatError(f"/{path}: only regular chunk grids are supported. Got {name!r}")
    chunk_shape = grid["configuration"].get("chunk_shape")
    if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
        raise ManifestFormatError(f"/{path}: shape must be a list of non-negative integers. Got {shape!r}")
    if not (
        isinstance(chunk_shape, list)
        and len(chunk_shape) == len(shape)
        and all(type(n) is int and n > 0 for n in chunk_shape)
    ):
        raise ManifestFormatError(
            f"/{path}: chunk_shape must be a list of {len(shape)} positive integers. Got {chunk_shape!r}"
        )


def check_documents(nodes: Mapping[str, Mapping[str, Any]], *, limits: Limits = DEFAULT_LIMITS) -> None:
    """Check every document of a manifest (see :class:`DocumentChecker`)."""
    checker = DocumentChecker()
    for path, doc in nodes.items():
        checker.check(path, doc, limits)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
