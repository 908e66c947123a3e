"""How a manifest is opened: one typed options object for every opener.

``h5lens.open``, ``open_group``, ``open_store``, ``read_anndata``, ``read_treedata``,
``validate`` and the xarray engine take the same options, as keywords
(:class:`OpenKwargs`) or as one :class:`OpenOptions` (``options=``), and open through
:meth:`OpenOptions.store`: one way to read a manifest in any form (JSON, compact,
``icechunk://``), one verification rule, one check of what a remote manifest may read.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from h5lens.errors import InvalidOptionError
from h5lens.manifest.limits import Limits
from h5lens.manifest.model import Manifest

if TYPE_CHECKING:
    from h5lens.store import ManifestStore

PathOrManifest = Manifest | str | os.PathLike[str]


def load_manifest(
    manifest: PathOrManifest, *, storage_options: dict[str, Any] | None = None, limits: Limits | None = None
) -> Manifest:
    """The manifest: the object itself, or read from a file in either form, or the one committed to an Icechunk
    repository (``icechunk://PATH``, ``icechunk://s3://BUCKET/PREFIX``; the tip of ``main``
    unless ``#branch=``, ``#tag=`` or ``#snapshot=`` says otherwise:
    :mod:`h5lens.icechunk.snapshot`). Either way it is untrusted input, checked against ``limits``."""
    if isinstance(manifest, Manifest):
        return manifest
    text = os.fspath(manifest)
    if text.startswith("icechunk://"):
        from h5lens.icechunk.snapshot import read_parts
        from h5lens.manifest.limits import DEFAULT_LIMITS

        return Manifest.from_parts(read_parts(text, storage_options=storage_options, limits=limits or DEFAULT_LIMITS))
    return Manifest.load(text, storage_options=storage_options, limits=limits)


class OpenKwargs(TypedDict, total=False):
    """The options of :class:`OpenOptions`, as keyword arguments of an opener."""

    storage_options: dict[str, Any] | None
    source_options: dict[str, Any] | None
    source_urls: dict[str, str] | None
    verify: bool
    allow_local: Iterable[str] | bool
    limits: Limits | None
    decoded_cache_bytes: int


@dataclass(frozen=True, kw_only=True)
class OpenOptions:
    """How to open a manifest and read its sources.

    ``storage_options``: fsspec's (or obstore's) options for reading the manifest and,
    unless ``source_options`` is given, the source files it points at. Either may hold
    options per URL prefix (``{"s3://bucket-b/": {"anon": True}}``): a URL is read with the
    options of the longest prefix it starts with, merged over the others
    (:mod:`h5lens.fetch.source_options`); ``source_options`` of prefixes alone add to
    ``storage_options``, while other ``source_options`` replace them. ``source_urls``
    maps recorded source URLs to others (a moved bucket, a local mirror). ``verify``
    (default True) checks each source once (one HEAD or stat) and refuses one changed since
    indexing (:class:`~h5lens.errors.StaleSourceError`). A manifest read from a remote URL
    may not read local files unless ``allow_local`` names them (path prefixes, or True); a
    manifest that claims more than ``limits`` is refused: see docs/security.md.
    ``decoded_cache_bytes`` (default 0: off) keeps up to that many bytes of decoded chunks
    for later reads (minibatch loaders: see docs/ml-loading.md).
    """

    storage_options: dict[str, Any] | None = None
    source_options: dict[str, Any] | None = None
    source_urls: dict[str, str] | None = None
    verify: bool = True
    allow_local: Iterable[str] | bool = ()
    limits: Limits | None = None
    decoded_cache_bytes: int = 0

    def __post_init__(self) -> None:
        from h5lens.fetch.source_options import split_prefixes

        for given in (self.storage_options, self.source_options):
            split_prefixes(given)  # options per prefix are mappings: refused now, not at the first read
        if not isinstance(self.allow_local, bool):  # a generator would be spent by the first store
            object.__setattr__(self, "allow_local", tuple(self.allow_local))

    @classmethod
    def of(cls, options: OpenOptions | None, given: OpenKwargs) -> OpenOptions:
        """``options`` with the keywords an opener was given on top (either may be empty)."""
        unknown = sorted(set(given) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise InvalidOptionError(f"unknown option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
        if options is None:
            return cls(**given)
        if not isinstance(options, OpenOptions):
            raise InvalidOptionError(f"options= takes an h5lens.OpenOptions, not a {type(options).__name__}")
        return dataclasses.replace(options, **given) if given else options

    @property
    def for_sources(self) -> dict[str, Any] | None:
        """The options the source files are read with (:func:`h5lens.fetch.source_options.for_sources`)."""
        from h5lens.fetch.source_options import for_sources

        return for_sources(self.storage_options, self.source_options)

    def but(self, **changes: Any) -> OpenOptions:
        return dataclasses.replace(self, **changes)

    def load(self, manifest: PathOrManifest) -> Manifest:
        """The manifest: the object itself, or read from a file or repository in any form."""
        return load_manifest(manifest, storage_options=self.storage_options, limits=self.limits)

    def store(self, manifest: PathOrManifest) -> ManifestStore:
        """A :class:`ManifestStore` over the manifest, its sources checked if ``verify``."""
        from h5lens.store import ManifestStore

        store = ManifestStore(
            self.load(manifest),
            source_options=self.for_sources,
            source_urls=self.source_urls,
            allow_local=self.allow_local,
            decoded_cache_bytes=self.decoded_cache_bytes,
        )
        if self.verify:
            store.check_sources()  # a manifest of many sources: each before its first read
        return store
