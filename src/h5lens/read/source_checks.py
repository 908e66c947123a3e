"""What ``h5lens.validate`` checks against a manifest's sources: that each is there and is the
file indexed, and (``deep``) that every chunk fetches and decodes."""

from __future__ import annotations

import warnings

from h5lens.manifest.model import Manifest
from h5lens.read.options import OpenOptions
from h5lens.read.problems import Problem
from h5lens.read.reader_only import is_marker
from h5lens.read.rectilinear import rectilinear_allowed


def check_sources(manifest: Manifest, options: OpenOptions) -> list[Problem]:
    """That each source is reachable and unchanged since indexing (no data read)."""
    from h5lens.errors import H5LensError

    try:
        store = options.but(verify=False).store(manifest)  # its errors are problems, below
    except H5LensError as e:
        return [Problem.of("/", e)]
    try:
        store.verify_sources()
    except H5LensError as e:
        return [Problem.of("/", e)]
    finally:
        store.close()
    return []


def decode_every_chunk(manifest: Manifest, options: OpenOptions) -> list[Problem]:
    """Fetch and decode every chunk of every array; one problem per array that fails."""
    import zarr

    from h5lens.errors import H5LensError
    from h5lens.read.check import check_array

    problems: list[Problem] = []
    try:
        store = options.but(verify=False).store(manifest)
    except H5LensError as e:  # a source this manifest may not reach
        return [Problem.of("/", e)]
    try:
        if options.verify:
            store.verify_sources()
        for path in sorted(manifest.chunks):
            if is_marker(manifest.nodes.get(path)):  # a one-byte placeholder: its values lie elsewhere
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with rectilinear_allowed([manifest.nodes[path]]):  # h5lens combine's grids
                        array = zarr.open_array(store, path=path, mode="r", zarr_format=3)
                    check_array(array)
            except H5LensError as e:
                problems.append(Problem.of("/" + path, e))
    except H5LensError as e:  # a source missing or changed: nothing can be decoded
        problems.append(Problem.of("/", e))
    finally:
        store.close()
    return problems


__all__ = ["check_sources", "decode_every_chunk"]
