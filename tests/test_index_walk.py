"""Our chunk-index walker against libhdf5's own chunk table.

Files are written with h5py under several format bounds so that every chunk index
libhdf5 has shows up; the oracle is ``DatasetID.chunk_iter`` (grid index, file
offset, stored size, filter mask), or ``read_direct_chunk`` where chunk_iter is
known to be wrong.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil

import h5py
import numpy as np
import pytest

import libhdf5
from h5lens.scan.hdf5 import (
    ChunkIndex,
    UnsupportedIndexError,
    fetch_superblock,
    lookup3,
    lookup3_many,
    read_superblock,
    walk_chunk_index,
    walk_chunk_index_local,
)
from shared_data import shared_file, shared_names

# HDF5 2.0's "latest" writes layout 5; files from HDF5 1.10-1.14 (most files in the wild)
# carry layout-4 indexes, written here with the low bound at v110, v112 or v114.
LIBVERS = {
    "earliest": "earliest",
    "v108": ("v108", "latest"),
    "v110": ("v110", "latest"),
    "v112": ("v112", "v112"),
    "v114": ("v114", "v114"),
    "latest": "latest",
}
LAYOUT_4 = ("v110", "v112", "v114")


# --------------------------------------------------------------------------- helpers


def header_address(path: str, name: str) -> int:
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f[name].id).addr


def libhdf5_table(ds: h5py.Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """chunk_iter's table, sorted by grid index like the walker's."""
    infos: list = []
    ds.id.chunk_iter(infos.append)
    if not infos:
        return np.zeros((0, ds.ndim), np.int64), np.zeros(0), np.zeros(0), np.zeros(0)
    grid = np.array([i.chunk_offset for i in infos]) // np.array(ds.chunks)
    order = np.lexsort(grid.T[::-1])
    columns = (np.array([getattr(i, k) for i in infos]) for k in ("byte_offset", "size", "filter_mask"))
    return (grid[order], *(c[order] for c in columns))


def assert_matches_libhdf5(path: str, name: str) -> ChunkIndex:
    table = walk_chunk_index_local(path, header_address(path, name))
    with h5py.File(path, "r") as f:
        ds = f[name]
        grid, address, size, mask = libhdf5_table(ds)
        assert table.chunk_shape == ds.chunks
        assert table.shape == ds.shape
        # With 4-byte lengths libhdf5 reads an unlimited maximum back as 2**32 - 1.
        assert table.maxshape == tuple(None if m in (None, 2**32 - 1) else m for m in ds.maxshape)
        if not ds.dtype.hasobject:  # h5py shows variable-length members in their memory form
            assert table.element_size == ds.dtype.itemsize
    np.testing.assert_array_equal(table.grid_index, grid)
    np.testing.assert_array_equal(table.address, address)
    np.testing.assert_array_equal(table.size, size)
    np.testing.assert_array_equal(table.filter_mask, mask)
    return table


def assert_bytes_are_the_chunks(path: str, name: str, table: ChunkIndex) -> None:
    """Each chunk's bytes at the walker's address are what libhdf5 reads for that chunk."""
    with open(path, "rb") as raw, h5py.File(path, "r") as f:
        ds = f[name]
        for grid, address, size in zip(table.grid_index, table.address, table.size, strict=True):
            raw.seek(int(address))
            _, stored = ds.id.read_direct_chunk(tuple(int(g) * c for g, c in zip(grid, ds.chunks, strict=True)))
            assert raw.read(int(size)) == stored


class CountingReader:
    """A read_ranges that counts its calls (round trips) and keeps what each asked for."""

    def __init__(self, path: str, *, views: bool = False) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.views = views
        self.calls: list[list[bytes]] = []

    async def __call__(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        blobs = [os.pread(self.fd, length, offset) for offset, length in ranges]
        self.calls.append(blobs)
        return [memoryview(b) for b in blobs] if self.views else blobs

    def walk(self, address: int) -> ChunkIndex:
        async def run() -> ChunkIndex:
            superblock = await fetch_superblock(self, self.size)
            self.calls.clear()  # count the walk's round trips only
            return await walk_chunk_index(self, address, superblock=superblock, file_size=self.size)

        try:
            return asyncio.run(run())
        finally:
            os.close(self.fd)


def create_implicit(f: h5py.File, name: str, shape: tuple, chunks: tuple, maxshape: tuple | None = None) -> None:
    """Early allocation, no filters, fixed size: libhdf5 stores chunks without any index."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    space = h5py.h5s.create_simple(shape, maxshape or shape)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.NATIVE_INT32, space, dcpl=dcpl)
    f[name][...] = np.arange(np.prod(shape), dtype="i4").reshape(shape)


def write_sparse(ds: h5py.Dataset, points: list[tuple]) -> None:
    for point in points:
        ds[point] = 1


# --------------------------------------------------------------------------- one file per format bound

# name: (what libhdf5 picks under libver="latest", how to make it)
DATASETS = {
    "single": ("single", lambda f, n: f.create_dataset(n, data=np.arange(100.0).reshape(10, 10), chunks=(10, 10))),
    "single_gzip": (
        "single",
        lambda f, n: f.create_dataset(n, data=np.arange(100.0).reshape(10, 10), chunks=(10, 10), compression="gzip"),
    ),
    "implicit": ("implicit", lambda f, n: create_implicit(f, n, (20, 30), (3, 4))),
    "implicit_below_max": ("implicit", lambda f, n: create_implicit(f, n, (20, 30), (3, 4), (26, 41))),
    "implicit_3d": ("implicit", lambda f, n: create_implicit(f, n, (5, 6, 7), (2, 3, 4))),
    # 3000 x 3 = 9000 chunks: paged data blocks (1024 entries a page), a partial last page,
    # partial edge chunks along the second axis.
    "fixed": (
        "fixed_array",
        lambda f, n: f.create_dataset(n, data=np.arange(21000, dtype="i4").reshape(3000, 7), chunks=(1, 3)),
    ),
    "fixed_gzip_shuffle": (
        "fixed_array",
        lambda f, n: f.create_dataset(
            n, data=np.arange(21000, dtype="i4").reshape(3000, 7), chunks=(1, 3), compression="gzip", shuffle=True
        ),
    ),
    "fixed_fletcher32": (
        "fixed_array",
        lambda f, n: f.create_dataset(n, data=np.arange(3000, dtype="f8"), chunks=(2,), fletcher32=True),
    ),
    # Only two of 5000 chunks written: most pages never initialised.
    "fixed_sparse": (
        "fixed_array",
        lambda f, n: write_sparse(f.create_dataset(n, shape=(5000, 5), chunks=(1, 5), dtype="i2"), [(10,), (3000,)]),
    ),
    "fixed_below_max": (
        "fixed_array",
        lambda f, n: f.create_dataset(n, data=np.ones((20, 20), "u2"), chunks=(7, 4), maxshape=(50, 30)),
    ),
    "fixed_3d_gzip": (
        "fixed_array",
        lambda f, n: f.create_dataset(
            n, data=np.arange(60000.0).reshape(30, 40, 50), chunks=(4, 5, 6), compression="gzip"
        ),
    ),
    # 1667 chunks: the index block's own entries and data blocks, then three super blocks.
    "extensible": (
        "extensible_array",
        lambda f, n: f.create_dataset(n, data=np.arange(5000, dtype="i4"), chunks=(3,), maxshape=(None,)),
    ),
    "extensible_gzip_fletcher32": (
        "extensible_array",
        lambda f, n: f.create_dataset(
            n, data=np.arange(5000, dtype="i4"), chunks=(3,), maxshape=(None,), compression="gzip", fletcher32=True
        ),
    ),
    "extensible_2d": (
        "extensible_array",
        lambda f, n: f.create_dataset(
            n, data=np.arange(12000, dtype="i8").reshape(300, 40), chunks=(7, 6), maxshape=(None, 50)
        ),
    ),
    "extensible_sparse": (
        "extensible_array",
        lambda f, n: write_sparse(
            f.create_dataset(n, shape=(3000,), chunks=(1,), maxshape=(None,), dtype="u1"), [(0,), (5,), (2999,)]
        ),
    ),
    # 10000 records of 24 bytes in 2 KiB nodes: a tree two levels deep.
    "btree2": (
        "btree_v2",
        lambda f, n: f.create_dataset(
            n, data=np.arange(60000, dtype="i4").reshape(200, 300), chunks=(2, 3), maxshape=(None, None)
        ),
    ),
    "btree2_gzip": (
        "btree_v2",
        lambda f, n: f.create_dataset(
            n,
            data=np.arange(60000, dtype="i4").reshape(200, 300),
            chunks=(2, 3),
            maxshape=(None, None),
            compression="gzip",
        ),
    ),
    "btree2_3d_sparse": (
        "btree_v2",
        lambda f, n: write_sparse(
            f.create_dataset(n, shape=(20, 30, 40), chunks=(3, 4, 5), maxshape=(None, None, None), dtype="f4"),
            [(0, 0, 0), (19, 29, 39), (10, 3, 17)],
        ),
    ),
    "never_written": (
        "btree_v2",
        lambda f, n: f.create_dataset(n, shape=(100, 100), chunks=(10, 10), maxshape=(None, None), dtype="f4"),
    ),
    "never_written_single": (
        "single",
        lambda f, n: f.create_dataset(n, shape=(10, 10), chunks=(10, 10), dtype="f4", compression="gzip"),
    ),
    "never_written_fixed": (
        "fixed_array",
        lambda f, n: f.create_dataset(n, shape=(100, 100), chunks=(10, 10), dtype="f4"),
    ),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    paths = {}
    for key, libver in LIBVERS.items():
        path = str(tmp_path_factory.mktemp("index_walk") / f"{key}.h5")
        with h5py.File(path, "w", libver=libver) as f:
            for name, (_, make) in DATASETS.items():
                make(f, name)
        paths[key] = path
    return paths


@pytest.mark.parametrize("libver", LIBVERS)
@pytest.mark.parametrize("name", DATASETS)
def test_walker_matches_chunk_iter(files: dict[str, str], libver: str, name: str) -> None:
    table = assert_matches_libhdf5(files[libver], name)
    latest_type = DATASETS[name][0]
    # The lower bound decides: earliest and v1.8 write layout 3 (v1 B-trees) for every chunked dataset.
    assert table.index_type == (latest_type if libver == "latest" or libver in LAYOUT_4 else "btree_v1")
    # libhdf5 2.0 writes layout 5 (wider chunk sizes) for filtered chunks under "latest".
    wide_sizes = table.filtered and h5py.version.hdf5_version_tuple >= (2, 0, 0)
    expected = 4 if libver in LAYOUT_4 else 3 if libver != "latest" else 5 if wide_sizes else 4
    assert table.layout_version == expected
    assert isinstance(table.address, np.ndarray) and table.address.dtype == np.uint64


@pytest.mark.parametrize("libver", LIBVERS)
def test_filter_mask_of_a_chunk_written_unfiltered(tmp_path, libver: str) -> None:
    path = str(tmp_path / "masked.h5")
    with h5py.File(path, "w", libver=LIBVERS[libver]) as f:
        for name, maxshape in (("masked_ea", (None, 10)), ("masked_bt2", (None, None)), ("masked_fa", (10, 10))):
            ds = f.create_dataset(
                name, shape=(10, 10), chunks=(5, 5), dtype="i4", compression="gzip", maxshape=maxshape
            )
            ds[...] = 1
            ds.id.write_direct_chunk((5, 5), np.full((5, 5), 9, "i4").tobytes(), filter_mask=1)
    for name in ("masked_ea", "masked_bt2", "masked_fa"):
        table = assert_matches_libhdf5(path, name)
        assert table.filter_mask.tolist() == [0, 0, 0, 1]
        assert_bytes_are_the_chunks(path, name, table)


FILE_KINDS = {
    # name: (user block, sizes of offsets and lengths, format bounds)
    "userblock_v110": (512, None, ("v110", "latest")),
    "userblock_latest": (2048, None, ("latest", "latest")),
    "sizes_4_4_v110": (0, (4, 4), ("v110", "v114")),
    "sizes_8_4_latest": (0, (8, 4), ("latest", "latest")),
    "sizes_4_8_userblock_v112": (1024, (4, 8), ("v112", "v112")),
}


@pytest.fixture(scope="module")
def kind_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    paths = {}
    for kind, (userblock, sizes, (low, high)) in FILE_KINDS.items():
        path = str(tmp_path_factory.mktemp("kinds") / f"{kind}.h5")
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        if userblock:
            fcpl.set_userblock(userblock)
        if sizes:
            fcpl.set_sizes(*sizes)
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        bounds = {"v110": h5py.h5f.LIBVER_V110, "v112": h5py.h5f.LIBVER_V112, "v114": h5py.h5f.LIBVER_V114,
                  "latest": h5py.h5f.LIBVER_LATEST}  # fmt: skip
        fapl.set_libver_bounds(bounds[low], bounds[high])
        with h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)) as f:
            for name, (_, make) in DATASETS.items():
                make(f, name)
        paths[kind] = path
    return paths


def _readable_by_h5py(kind: str, name: str) -> bool:
    """libhdf5 2.0 writes, but cannot reopen, a dataset with one unlimited dimension in a file
    with 4-byte lengths ("didn't find unlimited dimension"): no oracle for those."""
    sizes = FILE_KINDS[kind][1]
    return not (sizes and sizes[1] == 4 and DATASETS[name][0] == "extensible_array")


@pytest.mark.parametrize(
    ("kind", "name"), [(k, n) for k in FILE_KINDS for n in DATASETS if _readable_by_h5py(k, n)]
)
def test_walker_matches_chunk_iter_in_every_kind_of_file(kind_files: dict[str, str], kind: str, name: str) -> None:
    """Every index type behind a user block (addresses count from it) and with 4-byte sizes
    (every field width changes), in layout 4 and 5."""
    path = kind_files[kind]
    table = assert_matches_libhdf5(path, name)
    assert table.index_type == DATASETS[name][0]
    assert_bytes_are_the_chunks(path, name, table)


@pytest.mark.parametrize("libver", ["v110", "latest"])
def test_filtered_extensible_array_with_paged_data_blocks(tmp_path, libver: str) -> None:
    """140,000 chunks: super blocks beyond the 13th hold data blocks of more than 1024
    entries, split into pages with a bitmap of the pages written (filtered entries: the
    chunk's size and filter mask too)."""
    path = str(tmp_path / "paged.h5")
    with h5py.File(path, "w", libver=LIBVERS[libver]) as f:
        ds = f.create_dataset("x", shape=(140_000,), chunks=(1,), maxshape=(None,), dtype="i1", compression="gzip")
        ds[:100_000] = np.arange(100_000) % 100
        ds[130_000:] = 7  # pages never written between
    table = assert_matches_libhdf5(path, "x")
    assert table.index_type == "extensible_array" and table.filtered and len(table) == 110_000


def test_one_chunk_with_unfiltered_edges(tmp_path) -> None:
    """One chunk, under the flag that stores partial edge chunks unfiltered: a dataset the
    size of its chunk (a single-chunk index, its chunk filtered) and one smaller than its
    chunk (libhdf5 picks a fixed array; its chunk is a partial edge, stored unfiltered)."""
    path = str(tmp_path / "one_chunk.h5")
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        libhdf5.create_dataset(f, "partial", np.arange(10, dtype="<i4"), chunks=(16,), maxshape=(16,), deflate=4)
        libhdf5.create_dataset(f, "whole", np.arange(16, dtype="<i4"), chunks=(16,), maxshape=(16,), deflate=4)
    for name, index_type, partial in (("partial", "fixed_array", True), ("whole", "single", False)):
        table = assert_matches_libhdf5(path, name)
        assert table.index_type == index_type and table.unfiltered_edges
        assert table.partial_edges().tolist() == [partial]


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_userblock(tmp_path, libver: str) -> None:
    path = str(tmp_path / "userblock.h5")
    with h5py.File(path, "w", libver=libver, userblock_size=512) as f:
        f.create_dataset("x", data=np.arange(5000, dtype="i4"), chunks=(3,), maxshape=(None,), compression="gzip")
    with open(path, "rb") as raw:
        assert read_superblock(raw.read(4096)).base_address == 512
    table = assert_matches_libhdf5(path, "x")
    assert_bytes_are_the_chunks(path, "x", table)


def test_userblock_beyond_the_first_read(tmp_path) -> None:
    path = str(tmp_path / "big_userblock.h5")
    with h5py.File(path, "w", libver="latest", userblock_size=8192) as f:
        f.create_dataset("x", data=np.arange(1000.0).reshape(10, 100), chunks=(3, 7), maxshape=(None, None))
    with pytest.raises(UnsupportedIndexError, match="no HDF5 signature"):
        with open(path, "rb") as raw:
            read_superblock(raw.read(4096))
    table = assert_matches_libhdf5(path, "x")
    assert table.index_type == "btree_v2"


def test_file_object_without_a_descriptor(files: dict[str, str]) -> None:
    path = files["latest"]
    address = header_address(path, "extensible")
    with open(path, "rb") as raw:
        table = walk_chunk_index_local(io.BytesIO(raw.read()), address)
    np.testing.assert_array_equal(table.address, walk_chunk_index_local(path, address).address)


def test_extensible_array_whose_unlimited_dimension_is_not_first(tmp_path) -> None:
    """libhdf5 numbers these chunks with the unlimited dimension moved to the front.

    libhdf5 2.0.0's chunk_iter walks them as if it had not (it reports offsets that hold
    no chunk), so the oracle here is read_direct_chunk, which looks each chunk up.
    """
    path = str(tmp_path / "unlimited_last.h5")
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=np.arange(12000, dtype="i4").reshape(40, 300), chunks=(7, 2), maxshape=(50, None))
        f.create_dataset("y", data=np.arange(2400.0).reshape(4, 30, 20), chunks=(3, 4, 5), maxshape=(4, None, 40))
    for name in ("x", "y"):
        table = walk_chunk_index_local(path, header_address(path, name))
        assert table.index_type == "extensible_array"
        every_chunk = np.indices([-(-s // c) for s, c in zip(table.shape, table.chunk_shape, strict=True)])
        np.testing.assert_array_equal(table.grid_index, every_chunk.reshape(len(table.shape), -1).T)
        assert_bytes_are_the_chunks(path, name, table)


@pytest.mark.parametrize("name", shared_names("*.h5[a-z]*"))
def test_files_written_by_other_software(name: str) -> None:
    """Every chunked dataset of the shared h5ad/h5td files, whatever wrote them (anndata, R, treedata)."""
    path = str(shared_file(name))
    with h5py.File(path, "r") as f:
        datasets: list[str] = []
        f.visititems(lambda key, node: datasets.append(key) if isinstance(node, h5py.Dataset) else None)
        chunked = [key for key in datasets if f[key].chunks is not None]
    for key in chunked:
        assert_matches_libhdf5(path, key)
    for key in set(datasets) - set(chunked):
        with pytest.raises(UnsupportedIndexError):
            walk_chunk_index_local(path, header_address(path, key))


# --------------------------------------------------------------------------- superblocks


def create_file(path: str, low: int, *, sizes: tuple[int, int] | None = None, btree_k: int | None = None) -> h5py.File:
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    if sizes:
        fcpl.set_sizes(*sizes)
    if btree_k:
        libhdf5.set_istore_k(fcpl, btree_k)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(low, h5py.h5f.LIBVER_LATEST)
    return h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))


SUPERBLOCK_CASES = {
    # case: (low bound, sizes of offsets and lengths, chunk B-tree K, superblock version)
    "v0": (h5py.h5f.LIBVER_EARLIEST, None, None, 0),
    "v0_4byte": (h5py.h5f.LIBVER_EARLIEST, (4, 4), None, 0),
    "v1_k4": (h5py.h5f.LIBVER_EARLIEST, None, 4, 1),  # small nodes: a deep tree
    "v2_k64": (h5py.h5f.LIBVER_V18, None, 64, 2),  # K only in the superblock extension
    "v3_4byte": (h5py.h5f.LIBVER_LATEST, (4, 4), None, 3),
    "v3_4byte_offsets": (h5py.h5f.LIBVER_LATEST, (4, 8), None, 3),
    "v3_4byte_lengths": (h5py.h5f.LIBVER_LATEST, (8, 4), None, 3),
}


@pytest.mark.parametrize("case", SUPERBLOCK_CASES)
def test_superblock_versions_and_address_sizes(tmp_path, case: str) -> None:
    low, sizes, btree_k, version = SUPERBLOCK_CASES[case]
    path = str(tmp_path / f"{case}.h5")
    with create_file(path, low, sizes=sizes, btree_k=btree_k) as f:
        f.create_dataset("fixed", data=np.arange(21000, dtype="i4").reshape(3000, 7), chunks=(1, 3), compression="gzip")
        tree = dict(chunks=(2, 3), maxshape=(None, None))
        f.create_dataset("tree", data=np.arange(60000, dtype="i4").reshape(200, 300), **tree)
        f.create_dataset("tree_gzip", data=np.ones((200, 30), "i4"), compression="gzip", **tree)
    with open(path, "rb") as raw:
        superblock = read_superblock(raw.read(4096))
    assert superblock.version == version
    assert (superblock.sizeof_offsets, superblock.sizeof_lengths) == (sizes or (8, 8))
    for name in ("fixed", "tree", "tree_gzip"):
        assert_matches_libhdf5(path, name)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    ("name", "most"),
    [
        ("single", 1),  # the object header holds the chunk's address
        ("implicit", 1),
        ("fixed", 3),  # object header, array header, data block (paged, under 1 MiB: read whole)
        ("fixed_sparse", 3),
        ("extensible", 5),  # object header, array header, index block, super blocks, data blocks
        ("btree2", 5),  # object header, tree header, one read per level (root, internal, leaves)
    ],
)
def test_round_trips_per_index_type(files: dict[str, str], name: str, most: int) -> None:
    reader = CountingReader(files["latest"])
    table = reader.walk(header_address(files["latest"], name))
    assert table.reads == len(reader.calls) <= most


def test_v1_btree_round_trips_follow_its_depth_not_its_nodes(tmp_path) -> None:
    path = str(tmp_path / "deep.h5")
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(30000, dtype="i2"), chunks=(1,))  # 32..64 chunks a leaf
    reader = CountingReader(path, views=True)  # the walker takes memoryviews as well as bytes
    table = reader.walk(header_address(path, "x"))
    nodes = [blob for call in reader.calls for blob in call if blob[:4] == b"TREE"]
    depth = nodes[0][5] + 1  # the root's level + 1
    assert depth >= 3
    assert len(nodes) > 100 * len(reader.calls)
    assert len(reader.calls) == depth + 1  # + the object header
    assert len(table) == 30000
    assert_matches_libhdf5(path, "x")


# --------------------------------------------------------------------------- scale


@pytest.mark.parametrize(
    ("libver", "maxshape", "index_type"),
    [
        ("earliest", (None,), "btree_v1"),
        ("latest", (None,), "extensible_array"),  # past 131056 entries: paged data blocks
        ("latest", None, "fixed_array"),  # 1.6 MB of entries: prefix first, then the pages
    ],
)
def test_200k_chunks(tmp_path, libver: str, maxshape: tuple | None, index_type: str) -> None:
    path = str(tmp_path / "scale.h5")
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("x", data=np.arange(200_000, dtype="u1"), chunks=(1,), maxshape=maxshape)
    table = assert_matches_libhdf5(path, "x")
    assert table.index_type == index_type
    assert len(table) == 200_000
    # No Python object per chunk: the table is a handful of flat numeric arrays.
    columns = {"grid_index": np.int64, "address": np.uint64, "size": np.uint64, "filter_mask": np.uint32}
    for column, dtype in columns.items():
        array = getattr(table, column)
        assert type(array) is np.ndarray and array.dtype == dtype
    assert table.reads <= 5


# --------------------------------------------------------------------------- what it refuses


def test_layouts_without_a_chunk_index_raise(tmp_path) -> None:
    path = str(tmp_path / "unchunked.h5")
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("contiguous", data=np.arange(100))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"compact", h5py.h5t.NATIVE_INT32, h5py.h5s.create_simple((10,)), dcpl=dcpl)
        layout = h5py.VirtualLayout(shape=(100,), dtype="i8")
        layout[:] = h5py.VirtualSource(f["contiguous"])
        f.create_virtual_dataset("virtual", layout)
        f.create_group("group")
    reasons = {"contiguous": "contiguous", "compact": "compact", "virtual": "virtual", "group": "no data layout"}
    for name, reason in reasons.items():
        with pytest.raises(UnsupportedIndexError, match=reason):
            walk_chunk_index_local(path, header_address(path, name))


@pytest.mark.parametrize(
    ("signature", "maxshape"),
    [(b"OHDR", (None, None)), (b"BTHD", (None, None)), (b"BTLF", (None, None)), (b"FAHD", (40, 40)),
     (b"FADB", (40, 40)), (b"EAHD", (None, 40)), (b"EAIB", (None, 40)), (b"EASB", (None, 40)), (b"EADB", (None, 40))],
)  # fmt: skip
def test_checksum_mismatch_raises(tmp_path, signature: bytes, maxshape: tuple) -> None:
    path = str(tmp_path / "damaged.h5")
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=np.ones((40, 40), "i4"), chunks=(1, 1), maxshape=maxshape)
    address = header_address(path, "x")
    walk_chunk_index_local(path, address)
    damaged = str(tmp_path / "damaged_copy.h5")
    shutil.copy(path, damaged)
    with open(damaged, "r+b") as raw:
        data = raw.read()
        # The file's first OHDR is the root group's; the others sit in the dataset's index.
        start = address if signature == b"OHDR" else data.index(signature)
        at = start + 9  # past signature, version, type: a field the checksum covers
        raw.seek(at)
        raw.write(bytes([data[at] ^ 0x01]))
    with pytest.raises(UnsupportedIndexError, match="checksum"):
        walk_chunk_index_local(damaged, address)


def test_lookup3_reference_values() -> None:
    # Bob Jenkins' published values for hashlittle with initval 0.
    assert lookup3(b"") == 0xDEADBEEF
    assert lookup3(b"Four score and seven years ago") == 0x17770551
    rng = np.random.default_rng(0)
    blobs = [rng.integers(0, 256, int(n), np.uint8).tobytes() for n in rng.integers(0, 300, 64)]
    assert lookup3_many(blobs).tolist() == [lookup3(b) for b in blobs]


def test_header_address_without_walking_the_index(files: dict[str, str]) -> None:
    """The scanner finds object headers with get_objinfo (no index walk), as h5o.get_info reports them."""
    from h5lens.scan.chunks import header_address as scanner_address
    from h5lens.scan.hdf5 import local_superblock

    path = files["earliest"]
    with open(path, "rb") as raw:
        superblock = local_superblock(raw)
        for name in ("fixed", "extensible", "btree2"):
            address = header_address(path, name)
            with h5py.File(path, "r") as f:
                assert scanner_address(f[name].id) == address
            shared = walk_chunk_index_local(raw, address, superblock=superblock)
            np.testing.assert_array_equal(shared.address, walk_chunk_index_local(path, address).address)
