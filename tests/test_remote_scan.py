"""Remote scans read chunk indexes with h5lens's walker: level by level, only the index bytes.

Against a real S3 endpoint (moto on 127.0.0.1, behind a counting proxy): a remote scan
gives the manifest a local scan gives; it fetches about the metadata's bytes, not the
data between index nodes; its round trips follow the depth of the indexes, not their
number of nodes; and where the walker refuses an index, libhdf5's ``chunk_iter``
lists the chunks and the log says which dataset and why.
"""

from __future__ import annotations

import asyncio
import ctypes
import glob
import logging
import os
import uuid
import warnings

import anndata as ad
import h5py
import numpy as np
import pytest
import scipy.sparse as sp

import h5lens
from h5lens.fetch.clients import CLIENT_ENV
from h5lens.manifest.model import Manifest
from h5lens.scan import hdf5
from h5lens.scan.build import build_manifest
from h5lens.scan.hdf5 import walk as hdf5_walk
from h5lens.scan.options import ScanOptions
from h5lens.scan.source import TrackedFile, open_source
from h5lens.testing.s3 import CountingProxy
from oracles import assert_chunk_tables_match_libhdf5

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MiB = 1 << 20


# --------------------------------------------------------------------------- files


def write_h5ad(path: str, *, n_obs: int, n_vars: int, density: float, chunk: int, seed: int = 0) -> str:
    """An h5ad written by anndata: obs/var by write_h5ad, then X (CSR, gzip, small chunks)
    by anndata's write_elem, so that X's index nodes sit between its data chunks."""
    rng = np.random.default_rng(seed)
    x = sp.random(n_obs, n_vars, density=density, format="csr", dtype=np.float32, random_state=rng)
    x.data[:] = rng.lognormal(0, 1, x.nnz)  # values that barely compress
    adata = ad.AnnData(
        obs={"cell_type": rng.choice(["a", "b", "c"], n_obs), "n": np.arange(n_obs)},
        var={"gene": [f"g{i}" for i in range(n_vars)]},
        obsm={"pca": rng.random((n_obs, 8), dtype=np.float32)},
    )
    adata.obs_names = [f"cell_{i}" for i in range(n_obs)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")
        with h5py.File(path, "a") as f:
            ad.io.write_elem(f, "X", x, dataset_kwargs={"chunks": (chunk,), "compression": "gzip"})
    return path


def write_latest(path: str) -> str:
    """libver latest: every chunk index type, filters, a chunk stored unfiltered, LZF."""
    rng = np.random.default_rng(1)
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("single", data=np.arange(100.0).reshape(10, 10), chunks=(10, 10), compression="gzip")
        f.create_dataset("fixed", data=rng.random((300, 70)), chunks=(7, 9), compression="gzip", shuffle=True)
        f.create_dataset("extensible", data=np.arange(50_000, dtype="i4"), chunks=(30,), maxshape=(None,))
        f.create_dataset(
            "extensible_last", data=np.arange(12000, dtype="i4").reshape(40, 300), chunks=(7, 2), maxshape=(50, None)
        )
        f.create_dataset(
            "btree2", data=rng.random((200, 300)), chunks=(20, 3), maxshape=(None, None), compression="gzip"
        )
        f.create_dataset("lzf", data=np.arange(20_000, dtype="f8"), chunks=(100,), compression="lzf")
        masked = f.create_dataset("masked", shape=(10, 10), chunks=(5, 5), dtype="i4", compression="gzip")
        masked[...] = 1
        masked.id.write_direct_chunk((5, 5), np.full((5, 5), 9, "i4").tobytes(), filter_mask=1)
        f.create_dataset("contiguous", data=np.arange(1000.0))
        f.create_dataset("strings", data=np.array(["a", "bb", "ccc"] * 100, dtype=object), chunks=(50,))
        f.create_dataset("empty", shape=(0, 4), chunks=(10, 4), maxshape=(None, 4), dtype="f4")
        f.attrs["kind"] = "all index types"
    return path


def write_deep(path: str) -> str:
    """A v1 B-tree three levels deep over 1-element chunks, behind 4 MiB of other data."""
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("before", data=np.random.default_rng(2).random(4 * MiB // 8))
        f.create_dataset("x", data=np.arange(30_000, dtype="i2"), chunks=(1,))
    return path


def metadata_bytes(path: str) -> int:
    """The file's size less every dataset's stored data (chunks listed by libhdf5)."""
    data = 0
    with h5py.File(path, "r") as f:
        datasets: list[h5py.Dataset] = []
        f.visititems(lambda _, node: datasets.append(node) if isinstance(node, h5py.Dataset) else None)
        for ds in datasets:
            if ds.chunks is None:
                data += ds.id.get_storage_size()
            else:
                sizes: list[int] = []
                ds.id.chunk_iter(lambda info, sizes=sizes: sizes.append(info.size))
                data += sum(sizes)
    return os.path.getsize(path) - data


def index_nodes(path: str) -> int:
    """Every node of every v1 B-tree chunk index of the file (found by its signature)."""
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"TREE\x01")


# --------------------------------------------------------------------------- helpers


def upload(s3, local: str) -> str:
    key = f"bucket/{uuid.uuid4().hex}/{os.path.basename(local)}"
    s3.filesystem().put(local, key)
    return f"s3://{key}"


def assert_same_manifest(remote: Manifest, local: Manifest) -> None:
    assert remote.nodes == local.nodes
    assert remote.chunks.keys() == local.chunks.keys()
    for path, table in local.chunks.items():
        other = remote.chunks[path]
        for column in ("source", "offset", "length"):
            np.testing.assert_array_equal(getattr(other, column), getattr(table, column), err_msg=f"{path} {column}")
        assert other.inline == table.inline, path


def remote_scan(url: str, options: dict, **scan: object) -> tuple[Manifest, dict[str, int]]:
    """Scan through the scanner's own entry points, to read what each reader fetched."""
    block = scan.pop("read_block_size", None)
    opened = open_source(url, storage_options=options, **({"read_block_size": block} if block else {}))
    try:
        manifest = build_manifest(opened, ScanOptions(**scan), writer="test")  # type: ignore[arg-type]
        assert isinstance(opened.raw, TrackedFile) and opened.ranges is not None
        stats = {
            "libhdf5_requests": opened.raw.requests,
            "libhdf5_bytes": opened.raw.bytes_read,
            "batches": opened.ranges.stats.batches,
            "requests": opened.ranges.stats.requests,
            "bytes": opened.ranges.stats.bytes,
        }
    finally:
        opened.close()
    return manifest, stats


class WaveProxy(CountingProxy):
    """A counting proxy that also counts waves: GETs that arrive while no other GET is being
    served. A batch's requests, sent together, arrive while its first one is held for the
    proxy's latency; a request sent only after another's answer starts a wave of its own."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.in_flight = 0
        self.waves = 0

    async def _handle(self, request):  # type: ignore[no-untyped-def]
        if request.method != "GET":
            return await super()._handle(request)
        if self.in_flight == 0:
            self.waves += 1
        self.in_flight += 1
        try:
            return await super()._handle(request)
        finally:
            self.in_flight -= 1


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("remote_scan")
    return {
        "anndata": write_h5ad(str(root / "chunky.h5ad"), n_obs=3000, n_vars=1000, density=0.4, chunk=512),
        "latest": write_latest(str(root / "latest.h5")),
        "deep": write_deep(str(root / "deep.h5")),
    }


@pytest.fixture(params=["obstore", "fsspec"])
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both clients the scanner can send its requests with."""
    if request.param == "obstore":
        pytest.importorskip("obstore")
    monkeypatch.setenv(CLIENT_ENV, request.param)
    return str(request.param)


# --------------------------------------------------------------------------- the same manifest


def assert_values_match_h5py(manifest: Manifest, path: str, options: dict | None) -> None:
    """Every numeric dataset read through the manifest equals what h5py reads: its first and
    last 2,000 rows (the deep file's 30,000 one-element chunks cost a request each on moto)."""
    group = h5lens.open_group(manifest, storage_options=options)
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visititems(lambda n, node: names.append(n) if isinstance(node, h5py.Dataset) and node.dtype.kind in "iufcb" else None)
        for name in names:
            rows = f[name].shape[0] if f[name].ndim else 0
            parts = [slice(None)] if rows <= 4000 else [slice(0, 2000), slice(rows - 2000, rows)]
            for part in parts if rows else [()]:
                np.testing.assert_array_equal(group[name][part], f[name][part], err_msg=name)


@pytest.mark.parametrize("name", ["anndata", "latest", "deep"])
def test_remote_scan_matches_libhdf5(s3, s3_proxy, files, client, name) -> None:
    path = files[name]
    url = upload(s3, path)
    options = s3.storage_options(s3_proxy.endpoint_url)
    remote, stats = remote_scan(url, options, inline_threshold=0)
    assert assert_chunk_tables_match_libhdf5(remote, path) > 0
    assert_values_match_h5py(remote, path, options)
    # the local scan (h5lens's walker on preads) gives the same manifest
    assert_same_manifest(remote, h5lens.index(path, inline_threshold=0))
    assert stats["requests"] > 0 or name == "latest"  # a small file: libhdf5's blocks held every index
    # And at the default inlining (small arrays' chunks read in one batch).
    assert_same_manifest(h5lens.index(url, storage_options=options), h5lens.index(path))


def test_the_scanners_requests_are_the_proxys_gets(s3, s3_proxy, files) -> None:
    url = upload(s3, files["anndata"])
    _, stats = remote_scan(url, s3.storage_options(s3_proxy.endpoint_url), inline_threshold=0)
    assert s3_proxy.stats.gets == stats["libhdf5_requests"] + stats["requests"]
    assert s3_proxy.stats.bytes == stats["libhdf5_bytes"] + stats["bytes"]


# --------------------------------------------------------------------------- bytes


def test_remote_scan_fetches_the_metadata_not_the_data(s3, s3_proxy, files) -> None:
    path = files["anndata"]
    size, meta = os.path.getsize(path), metadata_bytes(path)
    assert size > 8 * meta  # mostly chunk data, its index nodes spread between the chunks
    url = upload(s3, path)
    options = s3.storage_options(s3_proxy.endpoint_url)
    for block in (None, 256 << 10, 64 << 10):
        s3_proxy.stats.reset()
        _, stats = remote_scan(url, options, read_block_size=block)
        assert s3_proxy.stats.bytes <= 2 * meta + MiB, (block, s3_proxy.stats.bytes, meta, stats)
        assert s3_proxy.stats.bytes < size / 3
        # one request per index node at most, a few round trips in all
        assert stats["requests"] <= index_nodes(path)
        assert stats["batches"] <= 5


def test_an_anndata_files_scan_fetches_its_metadata_not_the_chunks_around_it(s3, s3_proxy, tmp_path) -> None:
    """An h5ad as anndata writes it: X's object headers sit between chunk data (obsm's
    before, X's own after), and each costs a few KiB of it, not a block. The scan fetches
    about the metadata and the arrays it copies (names: their heap IDs, small arrays)."""
    path = str(tmp_path / "atlas.h5ad")
    rng = np.random.default_rng(0)
    adata = ad.AnnData(sp.random(10_000, 2_000, density=0.05, format="csr", dtype=np.float32, random_state=rng))
    adata.obs["group"] = rng.choice(["a", "b", "c"], 10_000)
    adata.obsm["X_pca"] = rng.standard_normal((10_000, 20)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path, compression="gzip")
    copied = 0
    with h5py.File(path, "r") as f:
        datasets: list[h5py.Dataset] = []
        f.visititems(lambda _, node: datasets.append(node) if isinstance(node, h5py.Dataset) else None)
        for ds in datasets:
            if ds.dtype.kind == "O" or ds.id.get_storage_size() <= 1000:  # strings, and inlined arrays
                copied += ds.id.get_storage_size()
    needed = metadata_bytes(path) + copied
    assert os.path.getsize(path) > 8 * needed
    url = upload(s3, path)
    options = s3.storage_options(s3_proxy.endpoint_url)
    manifest = h5lens.index(url, storage_options=options)
    assert s3_proxy.stats.bytes <= 1.25 * needed, (s3_proxy.stats.bytes, needed)
    assert_same_manifest(manifest, h5lens.index(path))


# --------------------------------------------------------------------------- round trips


def test_round_trips_follow_the_depth_not_the_nodes(s3, files) -> None:
    path = files["deep"]
    with h5py.File(path, "r") as f:
        address = h5py.h5g.get_objinfo(f["x"].id).objno[0]
    with open(path, "rb") as raw:
        blobs: list[bytes] = []

        async def read_ranges(ranges: list[tuple[int, int]]) -> list[bytes]:
            out = [os.pread(raw.fileno(), n, o) for o, n in ranges]
            blobs.extend(out)
            return out

        superblock = hdf5.read_superblock(os.pread(raw.fileno(), 4096, 0))
        asyncio.run(hdf5.walk_chunk_index(read_ranges, address, superblock=superblock))
    nodes = [b for b in blobs if b[:4] == b"TREE"]
    depth = nodes[0][5] + 1
    upper = sum(1 for b in nodes if b[5] > 0)  # the root and internal nodes: far apart in the file
    assert depth >= 3 and len(nodes) > 300 and upper < 20

    url = upload(s3, path)
    latency = 0.15
    with WaveProxy(s3.endpoint_url, latency_ms=latency * 1000) as proxy:
        manifest, stats = remote_scan(url, s3.storage_options(proxy.endpoint_url), inline_threshold=0)
        gets, waves = proxy.stats.gets, proxy.waves
    assert manifest.chunks["x"].n_present == 30_000
    # one batch per level (the object header came with libhdf5's blocks); the 500-odd leaves
    # sit close together (2-byte chunks between them): a few requests for them all (the cost
    # model sends their 1.2 MB as five parallel streams rather than one: 100 MB/s each)
    assert stats["batches"] <= depth + 1
    assert stats["requests"] <= upper + depth + 4
    # at the server: libhdf5's own (sequential) block reads, then one wave per batch
    assert gets == stats["libhdf5_requests"] + stats["requests"]
    assert waves <= stats["libhdf5_requests"] + stats["batches"]


def test_many_datasets_share_their_round_trips(s3, tmp_path) -> None:
    """Forty datasets' indexes (v1 B-trees two levels deep) cost the round trips of one."""
    path = str(tmp_path / "many.h5")
    rng = np.random.default_rng(3)
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("padding", data=rng.random(2 * MiB // 8))
        for i in range(40):
            f.create_dataset(f"g{i}/x", data=rng.random(3000), chunks=(20,), compression="gzip")
    url = upload(s3, path)
    manifest, stats = remote_scan(url, s3.storage_options(), inline_threshold=0, read_block_size=4096)
    assert_same_manifest(manifest, h5lens.index(path, inline_threshold=0))
    assert stats["batches"] <= 4  # headers (from libhdf5's blocks or one batch), roots, leaves
    assert stats["requests"] >= 40  # 40 datasets' nodes, far apart: separate requests...


# --------------------------------------------------------------------------- falling back


def shared_pipeline_file(path: str) -> str:
    """Two gzip datasets whose filter pipeline message is shared (SOHM): the walker refuses
    the second, whose header only points at the shared message."""
    candidates = glob.glob(os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs", "libhdf5-*.so*"))
    if not candidates:
        pytest.skip("cannot reach libhdf5 to share header messages")
    lib = ctypes.CDLL(candidates[0])
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    lib.H5Pset_shared_mesg_nindexes.argtypes = [ctypes.c_int64, ctypes.c_uint]
    lib.H5Pset_shared_mesg_index.argtypes = [ctypes.c_int64, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint]
    pipeline_flag = 1 << 0x000B  # H5O_SHMESG_PLINE_FLAG
    assert lib.H5Pset_shared_mesg_nindexes(fcpl.id, 1) >= 0
    assert lib.H5Pset_shared_mesg_index(fcpl.id, 0, pipeline_flag, 0) >= 0
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_V18, h5py.h5f.LIBVER_LATEST)
    with h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)) as f:
        for name in ("a", "b"):
            f.create_dataset(name, data=np.arange(5000.0), chunks=(10,), compression="gzip")
    return path


@pytest.mark.parametrize("where", ["local", "remote"])
def test_an_index_the_walker_refuses_is_listed_by_libhdf5(s3, tmp_path, caplog, where) -> None:
    path = shared_pipeline_file(str(tmp_path / "shared.h5"))
    expected = np.arange(5000.0)
    source = path if where == "local" else upload(s3, path)
    options = None if where == "local" else s3.storage_options()
    with caplog.at_level(logging.WARNING, logger="h5lens.scan"):
        manifest = h5lens.index(source, storage_options=options, inline_threshold=0)
    refused = [r.getMessage() for r in caplog.records if "walker refused" in r.getMessage()]
    assert refused and all(m.startswith("/b:") and "shared filter pipeline message" in m for m in refused)
    assert manifest.chunks["b"].n_present == 500
    group = h5lens.open_group(manifest, storage_options=options)
    for name in ("a", "b"):
        np.testing.assert_array_equal(group[name][...], expected)


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_refused_walk_falls_back_for_that_dataset_only(s3, files, caplog, monkeypatch, where) -> None:
    path = files["latest"]
    with h5py.File(path, "r") as f:
        refused_address = h5py.h5g.get_objinfo(f["btree2"].id).objno[0]
    walk = hdf5_walk.walk_chunk_index

    async def refusing(read_ranges, header_address, **kwargs):  # type: ignore[no-untyped-def]
        if header_address == refused_address:
            raise hdf5.UnsupportedIndexError("a test refuses this one")
        return await walk(read_ranges, header_address, **kwargs)

    # patched on its module: the scanner calls it there, and so does walk_chunk_index_local
    monkeypatch.setattr(hdf5_walk, "walk_chunk_index", refusing)
    source = path if where == "local" else upload(s3, path)
    options = None if where == "local" else s3.storage_options()
    with caplog.at_level(logging.WARNING, logger="h5lens.scan"):
        manifest = h5lens.index(source, storage_options=options, inline_threshold=0)
    messages = [r.getMessage() for r in caplog.records if r.name == "h5lens.scan"]
    assert messages == [
        "/btree2: h5lens's chunk-index walker refused it (a test refuses this one); libhdf5 lists its chunks"
    ]
    monkeypatch.setattr(hdf5_walk, "walk_chunk_index", walk)
    assert_same_manifest(manifest, h5lens.index(path, inline_threshold=0))


def test_unlimited_last_dimension_needs_the_walker(s3, files, monkeypatch) -> None:
    """libhdf5 2.0 lists these chunks at the wrong offsets: without the walker, a refusal."""

    async def refusing(read_ranges, header_address, **kwargs):  # type: ignore[no-untyped-def]
        raise hdf5.UnsupportedIndexError("refused")

    monkeypatch.setattr(hdf5_walk, "walk_chunk_index", refusing)
    with pytest.raises(h5lens.UnsupportedFeatureError, match="extensible_last.*refused"):
        h5lens.index(files["latest"])


# --------------------------------------------------------------------------- merging


def test_requests_merge_only_where_it_costs_few_bytes() -> None:
    from dataclasses import replace

    from h5lens.fetch.planner import SCAN

    def plan(ranges: list[tuple[int, int]], **kw: float) -> list[tuple[int, int]]:
        offsets, lengths = np.array([o for o, _ in ranges]), np.array([n for _, n in ranges])
        return replace(SCAN, **kw).requests(offsets, lengths)  # type: ignore[arg-type]

    # overlapping and touching ranges share a request, in any order
    assert plan([(100, 50), (0, 100), (120, 10)]) == [(0, 150)]
    # nodes 128 bytes apart: bridged (the gaps cost less than a request, and a tenth of the
    # nodes' bytes); 2 KiB apart: not (more than a tenth); 100 KiB apart: not
    assert plan([(0, 2048), (2176, 2048), (4352, 2048)]) == [(0, 6400)]
    assert plan([(0, 2048), (4096, 2048), (8192, 2048)]) == [(0, 2048), (4096, 6144), (8192, 10240)]
    spread = [(i * 100_000, 2048) for i in range(10)]
    assert plan(spread) == [(o, o + n) for o, n in spread]
    # the smallest gaps first, within the byte budget (here: as many bytes again as asked)
    assert plan([(0, 1000), (1500, 1000), (4000, 1000)], extra_ratio=0.6) == [(0, 2500), (4000, 5000)]
    # and never into a request longer than span
    assert plan([(0, 1000), (1100, 1000)], span=1500) == [(0, 1000), (1100, 2100)]


def test_a_scans_fetches_answer_every_range_they_hold(tmp_path) -> None:
    """Spans fetched level after level nest and overlap (a level's one request spanning the
    nodes fetched one by one before it): every range any of them holds is answered from
    what was fetched, without another request, and the caller's bytes are the file's."""
    from h5lens.fetch import SCAN, ChunkFetcher, LocalClient

    data = bytes(range(256)) * 64
    path = tmp_path / "spans.bin"
    path.write_bytes(data)
    fetcher = ChunkFetcher(LocalClient(str(path)), planner=SCAN, keep="all")
    spans = [(1000, 50), (2000, 50), (3000, 50), (4000, 50), (5000, 50), (6000, 50), (500, 9000), (9400, 500)]
    spans += [(700, 20), (9000, 10)]  # inside spans already held

    async def walk() -> None:
        for i, (start, length) in enumerate(spans):
            requests = fetcher.stats.requests
            assert await fetcher.read_together([(start, length)]) == [data[start : start + length]]
            assert fetcher.stats.requests == requests + (0 if i >= 8 else 1)
            held = [(o + k, m) for o, size in spans[: i + 1] for k, m in ((0, 1), (1, size - 1))]
            assert await fetcher.read_together(held) == [data[o : o + n] for o, n in held]
            assert fetcher.stats.requests == requests + (0 if i >= 8 else 1)  # all from what was fetched

    asyncio.run(walk())
    assert fetcher.stats.batches == 8