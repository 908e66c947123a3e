"""h5lens as an xarray backend: ``xr.open_dataset("air.nc.json", engine="h5lens")``.

Registered as the ``h5lens`` engine through the ``xarray.backends`` entry point. Opening
is :func:`h5lens.open_store` then xarray's own zarr backend over that store (zarr v3, no
consolidated metadata): every decoding option, group, DataTree and dask chunking is
xarray's, exactly as ``xr.open_dataset(h5lens.open_store(m), engine="zarr")`` does it.

xarray imports every backend's entry point the first time it needs one, so this module is
cheap to import: xarray's ``BackendEntrypoint`` (xarray is being imported anyway), the
standard library, and nothing of h5lens beyond the package itself; the store, zarr and
xarray's zarr backend are imported when a manifest is opened. ``import h5lens`` does not
import this module.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from xarray.backends import BackendEntrypoint

if TYPE_CHECKING:
    from xarray import Dataset, DataTree
    from xarray.backends.common import T_PathFileOrDataStore

    from h5lens.manifest.limits import Limits
    from h5lens.manifest.model import Manifest
    from h5lens.read.options import OpenOptions
    from h5lens.store import ManifestStore

__all__ = ["H5LensBackendEntrypoint"]

# The compact form's first bytes (h5lens.manifest.compact.MAGIC, repeated here so that
# guessing imports nothing: tests/test_xarray_backend.py checks they agree).
COMPACT_MAGIC = b"H5LENS-COMPACT\x00\x01"
# How much of a local .json file guessing reads: its first MiB and, when the file is longer,
# its last MiB (h5lens's writer puts the top-level "h5lens" object after "refs").
_HEAD = 1 << 20
_TAIL = 1 << 20
_REMOTE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*(://|::)")  # a URL or an fsspec chain
_SPACE = re.compile(r"[ \t\n\r]*")
_KEY = '"h5lens"'


class H5LensBackendEntrypoint(BackendEntrypoint):
    """Open h5lens manifests (JSON or compact; a path, an fsspec URL, a
    :class:`~h5lens.manifest.model.Manifest` or a :class:`~h5lens.store.ManifestStore`)
    with xarray.

    ``storage_options`` read the manifest and, unless ``source_options`` is given, the
    source files; ``source_urls``, ``verify``, ``allow_local`` and ``limits`` are
    :func:`h5lens.open_store`'s. Decoding options and ``group`` are xarray's zarr engine's.
    """

    description = (
        "Open h5lens manifests (HDF5 / netCDF-4 indexed as zarr v3 references) in xarray; see h5lens's docs/xarray.md"
    )
    supports_groups = True

    def guess_can_open(self, filename_or_obj: T_PathFileOrDataStore | Manifest | ManifestStore) -> bool:
        if _is_h5lens_object(filename_or_obj):
            return True
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        location = os.fspath(filename_or_obj)
        if not isinstance(location, str):
            return False
        if location.startswith("file://"):
            location = location.removeprefix("file://")
        elif _REMOTE.match(location):
            # A remote URL is never read here: guess_can_open is given no storage_options (a
            # private bucket would be read with the wrong credentials, or not at all), and a
            # request on every engine-less open_dataset is a cost the user did not ask for.
            # So the name decides: ".h5lens" is the compact form's and nothing else's, but
            # ".json" does not tell an h5lens manifest from a kerchunk JSON, and claiming
            # every remote .json would take from kerchunk's engine references it opens
            # today: not claimed, engine="h5lens" opens it. (With netCDF4-python installed,
            # xarray's netcdf4 engine, asked first, claims every remote URL that does not
            # mention "zarr" anyway.)
            from h5lens.manifest.io import COMPACT_SUFFIX

            name = location.split("?", 1)[0].split("#", 1)[0].rstrip("/")
            return name.lower().endswith(COMPACT_SUFFIX)
        try:
            return _is_local_manifest(os.path.expanduser(location))
        except (OSError, ValueError):
            return False

    def open_dataset(
        self,
        filename_or_obj: T_PathFileOrDataStore | Manifest | ManifestStore,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        storage_options: dict[str, Any] | None = None,
        source_options: dict[str, Any] | None = None,
        source_urls: dict[str, str] | None = None,
        verify: bool = True,
        allow_local: Iterable[str] | bool = (),
        limits: Limits | None = None,
        options: OpenOptions | None = None,
    ) -> Dataset:
        from xarray.backends.zarr import ZarrBackendEntrypoint

        from h5lens.read.per_file import Decoding, PerFileZarrStore, stored_values_store
        from h5lens.read.rectilinear import rectilinear_allowed

        opening = _opening(options, storage_options, source_options, source_urls, verify, allow_local, limits)
        store = _open_store(filename_or_obj, opening, options is not None)
        # arrays on a rectilinear grid (h5lens combine's) need zarr's flag while xarray opens them
        with _closing_on_error(store, filename_or_obj), rectilinear_allowed(store.manifest.nodes.values()):
            # arrays whose files were encoded differently (combine --encoding per-file): their stored
            # values read, each file's rows decoded with its own attributes
            reading, records = stored_values_store(store)
            decoding = Decoding(mask_and_scale, decode_times, use_cftime, decode_timedelta)
            with _closing_on_error(reading, store):
                data_store = PerFileZarrStore.open_group(
                    _as_given(reading), group=_zarr_group(group), mode="r", consolidated=False,
                    consolidate_on_close=False, zarr_format=3,
                ).per_file(records, decoding)  # fmt: skip
                ds = ZarrBackendEntrypoint().open_dataset(
                    _as_given(reading),
                    store=data_store,
                    mask_and_scale=mask_and_scale,
                    decode_times=decode_times,
                    concat_characters=concat_characters,
                    decode_coords=decode_coords,
                    drop_variables=drop_variables,
                    use_cftime=use_cftime,
                    decode_timedelta=decode_timedelta,
                    group=_zarr_group(group),
                    mode="r",
                    consolidated=False,  # a manifest has none: looking for it would only warn
                    zarr_format=3,
                )
        ds.set_close(_also_closing(ds._close, store, filename_or_obj, reading))
        return ds

    def open_datatree(
        self,
        filename_or_obj: T_PathFileOrDataStore | Manifest | ManifestStore,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        storage_options: dict[str, Any] | None = None,
        source_options: dict[str, Any] | None = None,
        source_urls: dict[str, str] | None = None,
        verify: bool = True,
        allow_local: Iterable[str] | bool = (),
        limits: Limits | None = None,
        options: OpenOptions | None = None,
    ) -> DataTree:
        from xarray.backends.common import datatree_from_dict_with_io_cleanup

        groups = self.open_groups_as_dict(
            filename_or_obj,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            storage_options=storage_options,
            source_options=source_options,
            source_urls=source_urls,
            verify=verify,
            allow_local=allow_local,
            limits=limits,
            options=options,
        )
        return datatree_from_dict_with_io_cleanup(groups)

    def open_groups_as_dict(
        self,
        filename_or_obj: T_PathFileOrDataStore | Manifest | ManifestStore,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        storage_options: dict[str, Any] | None = None,
        source_options: dict[str, Any] | None = None,
        source_urls: dict[str, str] | None = None,
        verify: bool = True,
        allow_local: Iterable[str] | bool = (),
        limits: Limits | None = None,
        options: OpenOptions | None = None,
    ) -> dict[str, Dataset]:
        from xarray.backends.store import StoreBackendEntrypoint
        from xarray.core.treenode import NodePath

        from h5lens.read.per_file import Decoding, PerFileZarrStore, stored_values_store
        from h5lens.read.rectilinear import rectilinear_allowed

        opening = _opening(options, storage_options, source_options, source_urls, verify, allow_local, limits)
        store = _open_store(filename_or_obj, opening, options is not None)
        # as open_dataset: zarr's flag on while xarray opens arrays on a rectilinear grid
        with _closing_on_error(store, filename_or_obj), rectilinear_allowed(store.manifest.nodes.values()):
            reading, records = stored_values_store(store)  # as open_dataset: files encoded differently
            decoding = Decoding(mask_and_scale, decode_times, use_cftime, decode_timedelta)
            # as xarray's zarr engine does it (open_groups_as_dict), with region reads
            zarr_group = _zarr_group(group)
            parent = str(NodePath("/") / NodePath(zarr_group)) if zarr_group else "/"
            with _closing_on_error(reading, store):
                stores = PerFileZarrStore.open_store(
                    _as_given(reading), group=parent, mode="r", consolidated=False, consolidate_on_close=False,
                    zarr_format=3,
                )  # fmt: skip
                groups = {}
                for path_group, data_store in stores.items():
                    ds = StoreBackendEntrypoint().open_dataset(
                        data_store.per_file(records, decoding),
                        mask_and_scale=mask_and_scale,
                        decode_times=decode_times,
                        concat_characters=concat_characters,
                        decode_coords=decode_coords,
                        drop_variables=drop_variables,
                        use_cftime=use_cftime,
                        decode_timedelta=decode_timedelta,
                    )
                    name = str(NodePath(path_group).relative_to(parent)) if zarr_group else str(NodePath(path_group))
                    groups[name] = ds
        # the store is shared by every group: closed with the first (the root of the tree)
        first = next(iter(groups.values()), None)
        if first is not None:
            first.set_close(_also_closing(first._close, store, filename_or_obj, reading))
        return groups


# -- opening -------------------------------------------------------------------------------


def _is_h5lens_object(obj: object) -> bool:
    """A Manifest or ManifestStore, found without importing h5lens's reader side: when its
    module was never imported, ``obj`` cannot be one of its objects."""
    model = sys.modules.get("h5lens.manifest.model")
    if model is not None and isinstance(obj, model.Manifest):
        return True
    store = sys.modules.get("h5lens.store")
    return store is not None and isinstance(obj, store.ManifestStore)


def _opening(
    options: OpenOptions | None,
    storage_options: dict[str, Any] | None,
    source_options: dict[str, Any] | None,
    source_urls: dict[str, str] | None,
    verify: bool,
    allow_local: Iterable[str] | bool,
    limits: Limits | None,
) -> OpenOptions:
    """The engine's options as one :class:`OpenOptions` (xarray passes backend options by
    name, so the engine spells them out; those left at their default do not override
    ``options``)."""
    from h5lens.read.options import OpenKwargs, OpenOptions

    given: OpenKwargs = {}
    if storage_options is not None:
        given["storage_options"] = storage_options
    if source_options is not None:
        given["source_options"] = source_options
    if source_urls is not None:
        given["source_urls"] = source_urls
    if not verify:
        given["verify"] = verify
    if allow_local != ():
        given["allow_local"] = allow_local
    if limits is not None:
        given["limits"] = limits
    return OpenOptions.of(options, given)


def _open_store(filename_or_obj: object, opening: OpenOptions, options_given: bool) -> ManifestStore:
    import h5lens
    from h5lens.manifest.model import Manifest
    from h5lens.read.options import OpenOptions
    from h5lens.store import ManifestStore

    if isinstance(filename_or_obj, ManifestStore):
        # already open: its options are the ones it was opened with
        fields = ("storage_options", "source_options", "source_urls", "limits")
        ignored = sorted(name for name in fields if getattr(opening, name) != getattr(OpenOptions(), name))
        if options_given:
            ignored.insert(0, "options")
        if ignored:
            raise h5lens.InvalidOptionError(
                f"{', '.join(ignored)} cannot apply to an open ManifestStore: pass the manifest "
                "(path, URL or Manifest) instead, or give them to h5lens.open_store"
            )
        return filename_or_obj
    if isinstance(filename_or_obj, Manifest):
        manifest: Manifest | str = filename_or_obj
    elif isinstance(filename_or_obj, str | os.PathLike) and isinstance(os.fspath(filename_or_obj), str):
        location = os.fspath(filename_or_obj)
        manifest = location if _REMOTE.match(location) else os.path.abspath(os.path.expanduser(location))
    else:
        raise TypeError(
            "engine='h5lens' opens a manifest: a path or URL of one (JSON or compact), an h5lens.Manifest "
            f"or an h5lens.ManifestStore, not a {type(filename_or_obj).__name__}"
        )
    try:
        return h5lens.open_store(manifest, options=opening)
    except h5lens.ManifestFormatError as e:
        if getattr(e, "kind", None) == "zarr v2" and e.args:  # NotAManifestError: kerchunk's references
            e.args = (f"{e.args[0]}; or open them with xarray's engine='kerchunk'", *e.args[1:])
        raise


def _as_given(store: ManifestStore) -> Any:
    """The store as xarray's zarr backend takes it: any zarr store is opened as it is
    (``zarr.open_group(store)``), although its type hints name paths and xarray's own stores."""
    return store


def _zarr_group(group: str | None) -> str | None:
    """netCDF's "/obs" (h5netcdf's spelling) as zarr's "obs"; the root as None."""
    if group is None:
        return None
    return group.strip("/") or None


@contextmanager
def _closing_on_error(store: ManifestStore, given: object) -> Iterator[None]:
    """Close the store if xarray fails to open it (a missing group, say), unless the caller
    passed the store and keeps it."""
    try:
        yield
    except BaseException:
        if store is not given:
            store.close()
        raise


def _also_closing(
    close: Callable[[], None] | None, store: ManifestStore, given: object, reading: ManifestStore
) -> Callable[[], None]:
    """``close`` (xarray's, for its zarr wrapper), then the ManifestStore's source readers,
    unless the caller passed the store and keeps it, and those of the store of stored values
    read instead of it (:func:`h5lens.read.per_file.stored_values_store`), where it is another."""
    owned = store is not given

    def close_both() -> None:
        try:
            if close is not None:
                close()
        finally:
            try:
                if reading is not store:
                    reading.close()
            finally:
                if owned:
                    store.close()

    return close_both


# -- guessing ------------------------------------------------------------------------------


def _is_local_manifest(path: str) -> bool:
    """A local file that is an h5lens manifest: the compact form's magic under any name (16
    bytes no other format starts with), or a ``.json`` file holding a JSON object with a
    top-level ``"h5lens"`` object. Reads the first MiB, and the last MiB of longer files."""
    with open(path, "rb") as f:
        head = f.read(_HEAD)
        if head.startswith(COMPACT_MAGIC):
            return True
        from h5lens.manifest.io import JSON_SUFFIX

        if not path.lower().endswith(JSON_SUFFIX):
            return False
        size = os.fstat(f.fileno()).st_size
        complete = size <= len(head)
        found = _member_in_head(head.decode("utf-8", errors="replace"), complete)
        if found is not None or complete:
            return bool(found)
        f.seek(max(size - _TAIL, len(head)))
        return _last_member(f.read().decode("utf-8", errors="replace"))


def _member_in_head(text: str, complete: bool) -> bool | None:
    """Whether the JSON object ``text`` starts has a top-level ``"h5lens"`` object: True,
    False, or None when ``text`` is cut short before it could tell (its members are read in
    order, each value parsed as a whole by the json module: no scan of string contents)."""
    decoder = json.JSONDecoder()
    at = _skip(text, 0)
    if not text.startswith("{", at):
        return False
    at = _skip(text, at + 1)
    if text.startswith("}", at):
        return False
    try:
        while True:
            key, at = decoder.raw_decode(text, at)
            at = _skip(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                return False
            value, at = decoder.raw_decode(text, _skip(text, at + 1))
            if key == "h5lens":
                return isinstance(value, dict)
            at = _skip(text, at)
            if text.startswith("}", at):
                return False
            if not text.startswith(",", at):
                return False
            at = _skip(text, at + 1)
    except (ValueError, RecursionError):
        return False if complete else None


def _last_member(tail: str) -> bool:
    """Whether the end of a JSON document is a top-level ``"h5lens": {...}`` member: the key
    (where a member starts: after "," or "{"), an object parsed whole, then only the "}"
    that closes the document. Quotes inside JSON strings are escaped, so ``"h5lens"`` found
    here is a key, not text inside a string."""
    decoder = json.JSONDecoder()
    at = tail.rfind(_KEY)
    while at >= 0:
        before = tail[:at].rstrip(" \t\n\r")
        after = _skip(tail, at + len(_KEY))
        if before.endswith((",", "{")) and tail.startswith(":", after):
            try:
                value, end = decoder.raw_decode(tail, _skip(tail, after + 1))
            except (ValueError, RecursionError):
                value, end = None, 0
            if isinstance(value, dict) and tail[end:].strip(" \t\n\r") == "}":
                return True
        at = tail.rfind(_KEY, 0, at)
    return False


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match else at
