"""ManifestStore against zarr's own store conformance suite, ``zarr.testing.store.StoreTests``.

ManifestStore is read-only, so the suite's ``set`` hook writes *through the manifest*: it
puts the value into the store's manifest as an inline chunk, creating the array that makes
the key grammar name the key, and then asks the store to serve the edited manifest
(:meth:`ManifestStore.refresh`). Every read the suite checks goes through the store itself.

What a manifest cannot hold is skipped, each with its reason: writes, deletes and writable
copies of the store, arbitrary bytes under a ``zarr.json`` key (a manifest keeps parsed
documents), keys that are neither metadata keys nor chunk keys of any array. Where only one
detail of a test is inexpressible (a key like ``"sync_get"``, an empty store with no root
document) the test is restated below with that detail swapped for one the manifest can hold,
and says which.

The project runs its tests without an asyncio plugin, so the suite's ``async def`` tests and
fixtures are run here each in a fresh event loop (see :func:`_blocking`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import pickle
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.buffer.cpu import Buffer as CPUBuffer
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.core.sync import _collect_aiterator
from zarr.testing.store import StoreTests
from zarr.testing.utils import assert_bytes_equal

from h5lens.errors import ManifestFormatError
from h5lens.manifest.model import INLINE, MISSING, ChunkTable, Manifest
from h5lens.manifest.refs_json import dumps_document
from h5lens.manifest.zarr_keys import KeyEncoding, KeyGrammar, chunk_key, metadata_path
from h5lens.store import ManifestStore

ROOT_GROUP: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": {}}
GROUP_DOCUMENT = dumps_document(ROOT_GROUP).encode()  # a zarr.json value a manifest holds as written

# the chunk key encodings the key grammar reads, in the order a new array takes them
# (zarr's defaults first: "/" for the default encoding, "." for v2)
ENCODINGS = (KeyEncoding("default", "/"), KeyEncoding("default", "."), KeyEncoding("v2", "."), KeyEncoding("v2", "/"))

# -- reasons for what is skipped ------------------------------------------------------------
READ_ONLY = (
    "writes through {what}: ManifestStore is read-only (its writes raise zarr's read-only ValueError, "
    "see test_read_only_store_raises); a manifest is written by h5lens.index, not through its store"
)
NO_DELETES = (
    "needs {what}: ManifestStore deletes nothing (supports_deletes is False; a delete raises zarr's "
    "read-only ValueError)"
)
METADATA_BYTES = (
    "{keys}: the test writes {value} under a zarr.json key; a manifest keeps each zarr.json as a parsed "
    "document and the store serves it re-serialised, so it can hold no bytes that are not such a document"
)


class Unrepresentable(ValueError):
    """A key and value no manifest can hold beside what it holds already."""


# -- writing into a manifest ---------------------------------------------------------------
def empty_manifest() -> Manifest:
    """A manifest of a root group only: no arrays, no sources."""
    return Manifest({"": dict(ROOT_GROUP)}, {}, [])


def array_document(encoding: KeyEncoding, grid: tuple[int, ...]) -> dict[str, Any]:
    """An array of one variable-length bytes element per chunk: its encoded chunks have no
    fixed size, so stored chunks of any length fit it (the store serves stored bytes as they
    are; nothing here decodes them)."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(grid),
        "data_type": "variable_length_bytes",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1] * len(grid)}},
        "chunk_key_encoding": encoding.to_json(),
        "fill_value": "",
        "codecs": [{"name": "vlen-bytes", "configuration": {}}],
        "attributes": {},
    }


def _flat(index: tuple[int, ...], grid: tuple[int, ...]) -> int:
    return int(np.ravel_multi_index(index, grid)) if grid else 0


def _table(grid: tuple[int, ...], old: ChunkTable | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, bytes]]:
    """The grids and inline bytes of ``old`` on a grid of shape ``grid`` (at least as large),
    as new mutable arrays: tables are immutable, a change makes a new one."""
    source = np.full(grid, MISSING, dtype=np.int32)
    offset = np.zeros(grid, dtype=np.uint64)
    length = np.zeros(grid, dtype=np.uint64)
    inline: dict[int, bytes] = {}
    if old is not None:
        region = tuple(slice(0, n) for n in old.grid_shape)
        source[region], offset[region], length[region] = old.source, old.offset, old.length
        for flat, payload in old.inline.items():
            index = tuple(int(i) for i in np.unravel_index(flat, old.grid_shape)) if old.grid_shape else ()
            inline[_flat(index, grid)] = payload
    return source, offset, length, inline


def _with_inline(old: ChunkTable | None, grid: tuple[int, ...], index: tuple[int, ...], data: bytes) -> ChunkTable:
    source, offset, length, inline = _table(grid, old)
    source[index], offset[index], length[index] = INLINE, 0, len(data)
    inline[_flat(index, grid)] = data
    return ChunkTable(source, offset, length, inline)


def _unserved(nodes: dict[str, dict[str, Any]], chunks: dict[str, ChunkTable]) -> str | None:
    """Why a store over these nodes and tables would not serve each present chunk under its
    own key (a new array's keys may capture another's: an array "c" takes "c/0/0" from an
    array at the root); None if it would."""
    try:
        grammar = KeyGrammar.of_documents(nodes)
    except ManifestFormatError as e:
        return str(e)
    for path, table in chunks.items():
        encoding = grammar.arrays[path][0]
        for found in np.argwhere(table.source != MISSING):
            index = tuple(int(i) for i in found)
            key = chunk_key(path, index, encoding)
            if grammar.chunk(key) != (path, index):
                return f"chunk {index} of /{path} would be read from {grammar.chunk(key)} under {key!r}"
    return None


def _new_arrays(manifest: Manifest, key: str) -> Iterator[tuple[str, KeyEncoding, tuple[int, ...]]]:
    """Every (array path, encoding, grid index) of a new array under which ``key`` is a
    chunk key, the array highest in the tree first ("foo/0/0": array "foo", v2 "/", (0, 0)
    before array "foo/0", v2, (0,))."""
    starts = [0] + [i + 1 for i, char in enumerate(key) if char == "/"]
    for start in starts:
        path, tail = key[: max(start - 1, 0)], key[start:]
        node = manifest.nodes.get(path)
        # a new array takes no node's place, except the root group of the empty manifest
        # (a key like "c/0" names a chunk of an array at the root)
        if node is not None and not (path == "" and node == ROOT_GROUP):
            continue
        for encoding in ENCODINGS:
            sep = encoding.separator
            if encoding.name == "default":
                ndims = [0] if tail == "c" else [len(tail[2:].split(sep))] if tail.startswith("c" + sep) else []
            else:
                ndims = [len(tail.split(sep)), 0]  # 1-d before 0-d for "0": a grid grows
            for ndim in ndims:
                index = encoding.parse_tail(tail, ndim)
                if index is not None:
                    yield path, encoding, index


def put(manifest: Manifest, key: str, value: bytes) -> Manifest:
    """``manifest`` with ``value`` under ``key`` (a new manifest: they do not change): a
    zarr.json document, or an inline chunk of the array that makes the key grammar name
    ``key`` (an existing one, its grid grown as needed, or a new one). Raises
    :class:`Unrepresentable` if no manifest can hold it beside what ``manifest`` holds."""
    path = metadata_path(key)
    if path is not None:
        return _put_document(manifest, key, path, value)
    grammar = KeyGrammar.of_documents(manifest.nodes)
    found = grammar.chunk(key)
    if found is not None:
        candidates: Iterator[tuple[str, KeyEncoding, tuple[int, ...]]] = iter([(found[0], grammar.arrays[found[0]][0], found[1])])
    else:
        candidates = _new_arrays(manifest, key)
    reasons = []
    for array, encoding, index in candidates:
        old = manifest.chunks.get(array)
        if old is None:
            grid = tuple(i + 1 for i in index)
            doc = array_document(encoding, grid)
        else:
            grid = tuple(max(n, i + 1) for n, i in zip(old.grid_shape, index, strict=True))
            doc = dict(manifest.nodes[array])
            chunk_shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
            doc["shape"] = [max(s, g * c) for s, g, c in zip(doc["shape"], grid, chunk_shape, strict=True)]
        table = _with_inline(old, grid, index, value)
        nodes, chunks = {**manifest.nodes, array: doc}, {**manifest.chunks, array: table}
        why = _unserved(nodes, chunks)
        if why is None and KeyGrammar.of_documents(nodes).chunk(key) != (array, index):
            why = f"{key!r} would not name chunk {index} of /{array}"
        if why is None:
            return replace(manifest, nodes=nodes, chunks=chunks)
        reasons.append(f"as chunk {index} of /{array}: {why}")
    raise Unrepresentable(
        f"{key!r} is no metadata key and names no chunk of an array that can exist beside "
        f"{sorted(manifest.nodes)}" + (f" ({'; '.join(reasons)})" if reasons else "")
    )


def serve(store: ManifestStore, manifest: Manifest) -> None:
    """zarr's StoreTests hold one store object and write through the harness: that object
    serves ``manifest`` from now on, re-initialised (a manifest does not change, and nothing
    the store derived from the old one stays)."""
    opened = store._is_open
    store.__init__(  # type: ignore[misc]
        manifest, source_options=store.source_options, source_urls=store.source_urls, allow_local=store.allow_local
    )
    store._is_open = opened


def _put_document(manifest: Manifest, key: str, path: str, value: bytes) -> Manifest:
    try:
        doc = json.loads(value)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or dumps_document(doc).encode() != value:
        raise Unrepresentable(f"{key}: {value!r} is not a zarr v3 document as the store serves it")
    node_type = doc.get("node_type")
    if node_type not in ("group", "array"):
        raise Unrepresentable(f"{key}: node_type {node_type!r} is neither 'group' nor 'array'")
    chunks = dict(manifest.chunks)
    if node_type == "group":
        chunks.pop(path, None)
        if path in manifest.chunks and manifest.chunks[path].n_present:
            raise Unrepresentable(f"{key}: /{path} is an array with chunks; a group document would orphan them")
    else:
        try:
            grid = tuple(-(-s // c) for s, c in zip(doc["shape"], doc["chunk_grid"]["configuration"]["chunk_shape"], strict=True))
        except (KeyError, TypeError, ValueError) as e:
            raise Unrepresentable(f"{key}: not an array document with a regular chunk grid ({e!r})") from None
        old = manifest.chunks.get(path)
        if old is not None and old.grid_shape != grid:
            raise Unrepresentable(f"{key}: /{path} has a chunk grid of {old.grid_shape}, the document {grid}")
        chunks[path] = old if old is not None else ChunkTable(*_table(grid))
    nodes = {**manifest.nodes, path: doc}
    why = _unserved(nodes, chunks)
    if why is not None:
        raise Unrepresentable(f"{key}: {why}")
    return replace(manifest, nodes=nodes, chunks=chunks)


# -- running zarr's async tests without an asyncio plugin -----------------------------------
def _blocking(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """``test`` run to completion in a new event loop. ``functools.wraps`` keeps the name,
    the parametrize marks and (through ``__wrapped__``) the signature pytest reads fixtures from."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _run_coroutine_tests[C: type](cls: C) -> C:
    """Every ``async def test_*`` of ``cls``, its own or inherited, as a plain test."""
    for name in dir(cls):
        test = getattr(cls, name)
        if name.startswith("test_") and inspect.iscoroutinefunction(test):
            setattr(cls, name, _blocking(test))
    return cls


def _params_of[F: Callable[..., Any]](name: str) -> Callable[[F], F]:
    """An override keeps the parent test's parametrize marks (overriding drops them); a test
    this zarr's StoreTests does not have (an older release) is skipped, saying so."""
    parent = getattr(StoreTests, name, None)

    def mark(override: F) -> F:
        if parent is None:
            reason = f"zarr {zarr.__version__}'s StoreTests has no {name}"
            override.pytestmark = [pytest.mark.skip(reason=reason)]  # type: ignore[attr-defined]
        else:
            override.pytestmark = list(getattr(parent, "pytestmark", []))  # type: ignore[attr-defined]
        return override

    return mark


@_run_coroutine_tests
class TestManifestStoreConformance(StoreTests[ManifestStore, CPUBuffer]):
    store_cls = ManifestStore
    buffer_cls = CPUBuffer

    # -- the suite's hooks ----------------------------------------------------------------
    @pytest.fixture
    def store_kwargs(self) -> dict[str, Any]:
        return {
            "manifest": empty_manifest(),
            "source_options": {"anon": True},
            "source_urls": {"s3://bucket/moved.h5": "file:///data/moved.h5"},
        }

    @pytest.fixture
    def store(self, open_kwargs: dict[str, Any]) -> ManifestStore:
        return asyncio.run(self.store_cls.open(**open_kwargs))

    @pytest.fixture
    def store_not_open(self, store_kwargs: dict[str, Any]) -> ManifestStore:
        return self.store_cls(**store_kwargs)

    async def set(self, store: ManifestStore, key: str, value: Buffer) -> None:
        """Write through a new manifest (no store method), then have the store serve it."""
        serve(store, put(store.manifest, key, value.to_bytes()))

    async def get(self, store: ManifestStore, key: str) -> Buffer:
        """Read back from the manifest itself (no store method)."""
        path = metadata_path(key)
        if path is not None:
            return self.buffer_cls.from_bytes(dumps_document(store.manifest.nodes[path]).encode())
        found = KeyGrammar.of_documents(store.manifest.nodes).chunk(key)
        entry = None if found is None else store.manifest.chunks[found[0]].lookup(found[1])
        if not isinstance(entry, bytes):  # this suite writes inline chunks only
            raise KeyError(key)
        return self.buffer_cls.from_bytes(entry)

    # -- the suite's abstract tests ---------------------------------------------------------
    def test_store_repr(self, store: ManifestStore) -> None:
        assert repr(store) == "ManifestStore(1 nodes, sources=[])"

    def test_store_supports_writes(self, store: ManifestStore) -> None:
        assert not store.supports_writes
        assert not store.supports_deletes

    def test_store_supports_listing(self, store: ManifestStore) -> None:
        assert store.supports_listing

    # -- skipped: what a read-only manifest store cannot do ----------------------------------
    def test_store_read_only(self, store: ManifestStore) -> None:
        pytest.skip(
            "asserts `not store.read_only`: ManifestStore is read-only by construction "
            "(test_read_only_property checks the rest: read_only is True and cannot be assigned)"
        )

    @_params_of("test_store_open_read_only")
    async def test_store_open_read_only(self, open_kwargs: dict[str, Any], read_only: bool) -> None:
        if not read_only:
            pytest.skip("read_only=False: ManifestStore.open(read_only=False) raises ValueError, it cannot be writable")
        await super().test_store_open_read_only(open_kwargs, read_only)

    @_params_of("test_set")
    async def test_set(self, store: ManifestStore, key: str, data: bytes) -> None:
        pytest.skip(READ_ONLY.format(what="store.set"))

    async def test_set_not_open(self, store_not_open: ManifestStore) -> None:
        pytest.skip(READ_ONLY.format(what="store.set"))

    async def test_set_many(self, store: ManifestStore) -> None:
        pytest.skip(READ_ONLY.format(what="store._set_many (store.set for each key)"))

    async def test_set_if_not_exists(self, store: ManifestStore) -> None:
        pytest.skip(READ_ONLY.format(what="store.set_if_not_exists"))

    def test_set_sync(self, store: ManifestStore) -> None:
        pytest.skip(READ_ONLY.format(what="store.set_sync"))

    @_params_of("test_sync_async_set_get_parity")
    async def test_sync_async_set_get_parity(self, store: ManifestStore, direction: str) -> None:
        pytest.skip(READ_ONLY.format(what="store.set (one parameter) and store.set_sync (the other)"))

    async def test_clear(self, store: ManifestStore) -> None:
        pytest.skip(NO_DELETES.format(what="store.clear() deletes every key"))

    async def test_delete(self, store: ManifestStore) -> None:
        pytest.skip(NO_DELETES.format(what="store.delete"))

    async def test_delete_dir(self, store: ManifestStore) -> None:
        pytest.skip(NO_DELETES.format(what="store.delete_dir"))

    async def test_delete_nonexistent_key_does_not_raise(self, store: ManifestStore) -> None:
        pytest.skip(NO_DELETES.format(what="store.delete of a missing key"))

    def test_delete_sync(self, store: ManifestStore) -> None:
        pytest.skip(NO_DELETES.format(what="store.delete_sync"))

    def test_delete_sync_missing(self, store: ManifestStore) -> None:
        pytest.skip(NO_DELETES.format(what="store.delete_sync of a missing key"))

    async def test_delete_sync_visible_to_async_get(self, store: ManifestStore) -> None:
        pytest.skip(NO_DELETES.format(what="store.set then store.delete_sync"))

    @_params_of("test_get_partial_values")
    async def test_get_partial_values(self, store: ManifestStore, key_ranges: list[tuple[str, ByteRequest]]) -> None:
        documents = [key for key, _ in key_ranges if metadata_path(key) is not None]
        if documents:
            pytest.skip(METADATA_BYTES.format(keys=", ".join(documents), value="each key's own name"))
        await super().test_get_partial_values(store, key_ranges)

    # -- restated: the parent's checks, with what a manifest cannot hold swapped ---------------
    async def test_serializable_store(self, store: ManifestStore) -> None:
        """The parent pickles the store, then writes "foo" through ``store.set``: here the
        chunk "c/0" is written through the manifest before pickling, so that the copy is
        shown to carry the manifest and to serve it."""
        data_buf = self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")
        await self.set(store, "c/0", data_buf)
        new_store: ManifestStore = pickle.loads(pickle.dumps(store))
        assert new_store == store
        assert new_store.read_only == store.read_only
        observed = await new_store.get("c/0", prototype=default_buffer_prototype())
        assert_bytes_equal(observed, data_buf)
        # the copy has a manifest of its own: writing into it leaves the original as it was
        await self.set(new_store, "c/1", data_buf)
        assert new_store != store
        assert await store.get("c/1", prototype=default_buffer_prototype()) is None

    async def test_exists(self, store: ManifestStore) -> None:
        """The parent writes b"bar" under "foo/zarr.json": a group document here (a manifest
        holds documents only), and a chunk key besides."""
        assert not await store.exists("foo")
        await self.set(store, "foo/zarr.json", self.buffer_cls.from_bytes(GROUP_DOCUMENT))
        assert await store.exists("foo/zarr.json")
        assert not await store.exists("foo")
        assert not await store.exists("bar/c/0")
        await self.set(store, "bar/c/0", self.buffer_cls.from_bytes(b"chunk"))
        assert await store.exists("bar/c/0")
        assert not await store.exists("bar/c/1")

    async def test_is_empty(self, store: ManifestStore) -> None:
        """The parent's checks, with "foo/c/0" (chunk 0 of an array "foo") for its "foo/bar",
        which names no chunk of any array; both put one key below "foo/" and none below "fo/"
        or "spam/". The parent's first check, ``is_empty("")`` on a new store, does not hold:
        an empty manifest still has its root group's zarr.json."""
        assert await _collect_aiterator(store.list()) == ("zarr.json",)
        assert await store.is_empty("foo")
        await self.set(store, "foo/c/0", self.buffer_cls.from_bytes(b"something"))
        assert not await store.is_empty("")
        assert await store.is_empty("fo")
        assert not await store.is_empty("foo/")
        assert not await store.is_empty("foo")
        assert await store.is_empty("spam/")

    async def test_getsize_prefix(self, store: ManifestStore) -> None:
        """The parent's keys and sizes, written through the manifest (the parent uses
        ``store._set_many``): "c/i/j" are chunks of a 2-d array at the root, "cc/0" a chunk
        of an array "cc", whose key shares the string prefix "c" but not the directory."""
        data_buf = self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")
        keys = ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
        for key in [*keys, "cc/0"]:
            await self.set(store, key, data_buf)
        assert await store.getsize_prefix("c") == len(data_buf) * len(keys)
        assert await store.getsize_prefix("cc") == len(data_buf) + len(await self.get(store, "cc/zarr.json"))

    async def test_list(self, store: ManifestStore) -> None:
        """The parent's keys, written through the manifest: "foo/zarr.json" is array "foo"'s
        document, which the manifest holds with its chunks (the parent's b"" is no document),
        and the root group's zarr.json is there from the start."""
        assert await _collect_aiterator(store.list()) == ("zarr.json",)
        chunks = [f"foo/c/{idx}" for idx in range(10)]
        for key in chunks:
            await self.set(store, key, self.buffer_cls.from_bytes(b""))
        expected = sorted(["zarr.json", "foo/zarr.json", *chunks])
        assert sorted(await _collect_aiterator(store.list())) == expected

    async def test_list_prefix(self, store: ManifestStore) -> None:
        """The parent's keys and checks, each zarr.json holding a group document (the
        parent's b"" is no document)."""
        prefixes = ("", "a/", "a/b/", "a/b/c/")
        keys = [p + "zarr.json" for p in prefixes]
        for key in keys:
            await self.set(store, key, self.buffer_cls.from_bytes(GROUP_DOCUMENT))
        for prefix in prefixes:
            observed = tuple(sorted(await _collect_aiterator(store.list_prefix(prefix))))
            assert observed == tuple(sorted(k for k in keys if k.startswith(prefix)))

    async def test_list_empty_path(self, store: ManifestStore) -> None:
        """The parent's keys written through the manifest, and its checks on the keys the
        manifest then holds: those plus the root group's zarr.json and array "foo/baz"'s,
        which a manifest holds for every node."""
        written = ["foo/bar/c/1", "foo/baz/c/0"]
        for key in written:
            await self.set(store, key, self.buffer_cls.from_bytes(b""))
        held = sorted(["zarr.json", "foo/bar/zarr.json", "foo/baz/zarr.json", *written])
        assert sorted(await _collect_aiterator(store.list())) == held
        assert sorted(await _collect_aiterator(store.list_prefix(""))) == held
        observed = sorted(await _collect_aiterator(store.list_prefix("foo/bar/")))
        assert observed == ["foo/bar/c/1", "foo/bar/zarr.json"]

    async def test_list_dir(self, store: ManifestStore) -> None:
        """The parent's two levels and expected names, with keys a manifest holds:
        "foo/zarr.json" is array "foo"'s own document; "foo/bar/foobar_first_child" (which
        names no chunk) becomes a 0-d array there, "foo/bar/foobar_first_child/c"; the
        second child's zarr.json holds a group document. The root group's zarr.json is
        there from the start."""
        roots_and_keys: list[tuple[str, dict[str, bytes], set[str]]] = [
            ("foo", {"foo/c/1": b"\x01"}, {"zarr.json", "c"}),
            (
                "foo/bar",
                {"foo/bar/foobar_first_child/c": b"1", "foo/bar/foobar_second_child/zarr.json": GROUP_DOCUMENT},
                {"foobar_first_child", "foobar_second_child"},
            ),
        ]
        assert await _collect_aiterator(store.list_dir("")) == ("zarr.json",)
        for root, written, expected in roots_and_keys:
            assert await _collect_aiterator(store.list_dir(root)) == ()
            for key, value in written.items():
                await self.set(store, key, self.buffer_cls.from_bytes(value))
            assert sorted(await _collect_aiterator(store.list_dir(root))) == sorted(expected)
            assert sorted(await _collect_aiterator(store.list_dir(f"{root}/"))) == sorted(expected)
        assert sorted(await _collect_aiterator(store.list_dir(""))) == ["foo", "zarr.json"]
        # zarr lists keys: "foo/bar/..." is below array "foo" as much as its chunks are
        assert sorted(await _collect_aiterator(store.list_dir("foo"))) == ["bar", "c", "zarr.json"]

    def test_get_sync(self, store: ManifestStore) -> None:
        """The parent's check with key "c/0" for "sync_get", which names no chunk."""
        from zarr.core.sync import sync

        getter = self._require_get_sync(store)
        data_buf = self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")
        sync(self.set(store, "c/0", data_buf))
        result = getter.get_sync("c/0")
        assert result is not None
        assert_bytes_equal(result, data_buf)

    @_params_of("test_get_sync_byte_range_parity")
    async def test_get_sync_byte_range_parity(self, store: ManifestStore, byte_range: ByteRequest | None) -> None:
        """The parent's check, the value written through the manifest under "c/0" (the parent
        writes "parity_byte_range", which names no chunk, with store.set)."""
        getter = self._require_get_sync(store)
        data_buf = self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")
        await self.set(store, "c/0", data_buf)
        sync_result = getter.get_sync("c/0", byte_range=byte_range)
        async_result = await store.get("c/0", prototype=default_buffer_prototype(), byte_range=byte_range)
        assert async_result is not None and sync_result is not None
        assert_bytes_equal(sync_result, async_result)

    # -- h5lens's own checks of what the suite takes for granted --------------------------------
    def test_read_only_property(self, store: ManifestStore, store_kwargs: dict[str, Any]) -> None:
        assert store.read_only
        with pytest.raises(AttributeError):
            store.read_only = False  # type: ignore[misc]
        with pytest.raises(ValueError, match="read-only"):
            ManifestStore(**store_kwargs, read_only=False)
        with pytest.raises(NotImplementedError, match="with_read_only is not implemented"):
            store.with_read_only(False)
        assert store.with_read_only(True) is store

    def test_equal_by_content(self, store_kwargs: dict[str, Any]) -> None:
        """Two stores over two manifests of one content are equal (what a pickled copy relies on)."""
        one, other = ManifestStore(**store_kwargs), ManifestStore(**{**store_kwargs, "manifest": empty_manifest()})
        assert one == other and one.manifest is not other.manifest
        assert one != ManifestStore(**{**store_kwargs, "source_options": {}})
        serve(other, put(other.manifest, "c/0", b"\x01"))
        assert one != other

    async def test_list_dir_names_groups_without_a_document(self, store: ManifestStore) -> None:
        """A manifest may name a group only in a deeper node's path (another tool's, without
        a zarr.json for each group): "a" is listed below the root all the same."""
        await self.set(store, "a/b/zarr.json", self.buffer_cls.from_bytes(GROUP_DOCUMENT))
        await self.set(store, "a/b/x/c/0", self.buffer_cls.from_bytes(b"chunk"))
        assert sorted(await _collect_aiterator(store.list_dir(""))) == ["a", "zarr.json"]
        assert await _collect_aiterator(store.list_dir("a")) == ("b",)
        assert sorted(await _collect_aiterator(store.list_dir("a/b"))) == ["x", "zarr.json"]
        assert sorted(await _collect_aiterator(store.list_dir("a/b/x"))) == ["c", "zarr.json"]
        assert await _collect_aiterator(store.list_dir("a/b/x/c")) == ("0",)

    async def test_list_prefix_is_a_string_prefix(self, store: ManifestStore) -> None:
        """As zarr's stores take it: "c" begins "cc/0" as well as the root array's "c/0/0"."""
        for key in ["c/0/0", "c/1/0", "cc/0", "d/c/0"]:
            await self.set(store, key, self.buffer_cls.from_bytes(b"x"))
        listed = sorted(await _collect_aiterator(store.list_prefix("c")))
        assert listed == ["c/0/0", "c/1/0", "cc/0", "cc/zarr.json"]
        assert sorted(await _collect_aiterator(store.list_prefix("c/"))) == ["c/0/0", "c/1/0"]
        assert sorted(await _collect_aiterator(store.list_prefix("d/c"))) == ["d/c/0"]

    @pytest.mark.parametrize(
        ("keys", "array", "encoding", "grid"),
        [
            (["c/0"], "", KeyEncoding("default", "/"), (1,)),
            (["foo/c/0.0"], "foo/c", KeyEncoding("v2", "."), (1, 1)),
            (["foo/0/0"], "foo", KeyEncoding("v2", "/"), (1, 1)),
            (["foo/c.1.2"], "foo", KeyEncoding("default", "."), (2, 3)),
            (["foo/c"], "foo", KeyEncoding("default", "/"), ()),
            ([str(i) for i in range(10)], "", KeyEncoding("v2", "."), (10,)),
            (["c/1/0", "c/0/2"], "", KeyEncoding("default", "/"), (2, 3)),
        ],
    )
    def test_set_hook_makes_the_array_the_key_names(
        self, store: ManifestStore, keys: list[str], array: str, encoding: KeyEncoding, grid: tuple[int, ...]
    ) -> None:
        for i, key in enumerate(keys):
            asyncio.run(self.set(store, key, self.buffer_cls.from_bytes(bytes([i]) * i)))
        assert store.grammar.arrays[array] == (encoding, len(grid))
        assert store.manifest.chunks[array].grid_shape == grid
        ArrayV3Metadata.from_dict(store.manifest.nodes[array])  # a document zarr reads
        for i, key in enumerate(keys):
            got = asyncio.run(store.get(key, default_buffer_prototype()))
            assert got is not None and got.to_bytes() == bytes([i]) * i, key

    @pytest.mark.parametrize(
        ("key", "value"),
        [("foo", b""), ("foo/bar", b""), ("sync_get", b""), ("zarr.json", b"bar"), ("a/zarr.json", b"")],
    )
    def test_set_hook_refuses_what_no_manifest_holds(self, store: ManifestStore, key: str, value: bytes) -> None:
        with pytest.raises(Unrepresentable):
            asyncio.run(self.set(store, key, self.buffer_cls.from_bytes(value)))
        assert store.manifest == empty_manifest()

    def test_set_hook_refuses_a_key_that_would_hide_another(self, store: ManifestStore) -> None:
        """A new array is never one that would take another array's chunk keys."""
        asyncio.run(self.set(store, "c/0/0", self.buffer_cls.from_bytes(b"root")))
        # arrays "c" (v2 "/", 3-d) and "c/0" (2-d) would take "c/0/0" too: "c/0/1" (1-d) it is
        asyncio.run(self.set(store, "c/0/1/2", self.buffer_cls.from_bytes(b"deeper")))
        assert [p for p in store.manifest.nodes if p.startswith("c")] == ["c/0/1"]
        assert asyncio.run(store.get("c/0/0", default_buffer_prototype())).to_bytes() == b"root"


# -- listing, compared with zarr's own MemoryStore holding the same keys --------------------
CANDIDATE_KEYS = [
    "c/0", "c/1", "c/0/0", "c/1/2", "cc/0", "x/c/0/0", "x/c/1/0", "x/y/c/0", "x/y/c/3",
    "v/0.0", "v/1.1", "w/0/1", "d/c.0.1", "d/c.1.0", "a/b/c/0", "a/b/zarr.json", "g/zarr.json",
    "0", "1", "s/c", "x/c", "c/c/0",
]


def _memory_twin(manifest: Manifest) -> dict[str, bytes]:
    """Every key the manifest holds and its bytes, derived from the manifest model alone."""
    from h5lens.manifest.zarr_keys import metadata_key

    grammar = KeyGrammar.of_documents(manifest.nodes)
    keys = {metadata_key(path): dumps_document(doc).encode() for path, doc in manifest.nodes.items()}
    for path, table in manifest.chunks.items():
        encoding = grammar.arrays[path][0]
        for flat, payload in table.inline.items():
            index = tuple(int(i) for i in np.unravel_index(flat, table.grid_shape)) if table.grid_shape else ()
            keys[chunk_key(path, index, encoding)] = payload
    return keys


def _prefixes(keys: list[str]) -> list[str]:
    """Directory prefixes of the keys (as list_dir takes them) and string prefixes of them."""
    dirs = {""}
    strings = {""}
    for key in keys:
        parts = key.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        strings.update(key[:i] for i in range(1, len(key) + 1))
    return sorted(dirs), sorted(strings)


def _listings(store: Any, dirs: list[str], strings: list[str]) -> dict[str, Any]:
    async def collect() -> dict[str, Any]:
        out: dict[str, Any] = {"list": sorted(await _collect_aiterator(store.list()))}
        for prefix in dirs:
            out[f"list_dir({prefix!r})"] = sorted(await _collect_aiterator(store.list_dir(prefix)))
        for prefix in strings:
            out[f"list_prefix({prefix!r})"] = sorted(await _collect_aiterator(store.list_prefix(prefix)))
        return out

    return asyncio.run(collect())


@pytest.mark.parametrize("seed", range(40))
def test_listing_equals_a_memory_store_holding_the_same_keys(seed: int) -> None:
    """Whatever arrays (root, nested, named "c", every chunk key encoding) a manifest holds,
    list, list_prefix and list_dir give what zarr's MemoryStore gives for the same keys."""
    from zarr.storage import MemoryStore

    rng = np.random.default_rng(seed)
    manifest = empty_manifest()
    for key in rng.permutation(CANDIDATE_KEYS)[: int(rng.integers(1, len(CANDIDATE_KEYS)))]:
        value = GROUP_DOCUMENT if key.endswith("zarr.json") else bytes([int(rng.integers(256))])
        try:
            manifest = put(manifest, str(key), value)
        except Unrepresentable:
            pass
    twin = _memory_twin(manifest)
    memory = MemoryStore({key: CPUBuffer.from_bytes(value) for key, value in twin.items()})
    store = ManifestStore(manifest)
    dirs, strings = _prefixes(list(twin))
    assert _listings(store, dirs, strings) == _listings(memory, dirs, strings)
    for key, value in twin.items():
        got = asyncio.run(store.get(key, default_buffer_prototype()))
        assert got is not None and got.to_bytes() == value, key
