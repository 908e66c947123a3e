"""What a web browser reading a manifest through zarrita.js would get wrong, array by array.

:func:`check_for_browser` lists every node whose codec or data type zarrita.js 0.7 cannot
decode (and whether h5lens's codec pack, npm ``h5lens-codecs``, can), every attribute whose
bare ``NaN`` / ``Infinity`` makes ``JSON.parse`` refuse the node, every name a URL would
change on the way to the store, and every source URL a browser would resolve otherwise than
h5lens does. The tables it goes by are in :mod:`h5lens.browser.readers`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from h5lens.browser import readers
from h5lens.manifest.locations import resolve
from h5lens.manifest.documents import ArrayDocument
from h5lens.manifest.model import Manifest

# what a finding is about
CODEC = "codec"
DATA_TYPE = "data type"
ATTRIBUTE = "attribute"
NAME = "name"
URL = "url"
FORM = "form"


@dataclass(frozen=True)
class Finding:
    """One thing a browser reads otherwise than h5lens: where (a node's path, ``/`` for the
    root; a source's URL), what about it, why, and whether ``h5lens-codecs`` reads it right
    (``with_pack``) where plain zarrita.js 0.7 does not."""

    where: str
    kind: str
    reason: str
    with_pack: bool

    def line(self) -> str:
        reader = "needs h5lens-codecs" if self.with_pack else "no browser reader"
        return f"{self.where}: {self.kind}: {self.reason} ({reader})"


@dataclass(frozen=True)
class BrowserCheck:
    """The findings of :func:`check_for_browser`, in node order."""

    findings: tuple[Finding, ...]
    arrays: int

    @property
    def readable(self) -> bool:
        """Plain zarrita.js reads every array as h5lens does."""
        return not self.findings

    @property
    def readable_with_pack(self) -> bool:
        """zarrita.js with h5lens-codecs reads every array as h5lens does."""
        return all(f.with_pack for f in self.findings)

    def unreadable_arrays(self) -> list[str]:
        """The arrays no browser reader here decodes (``check`` names them; ``index --for
        browser`` prints them)."""
        return [f.where for f in self.findings if not f.with_pack and f.kind in (CODEC, DATA_TYPE)]


def check_for_browser(manifest: Manifest, *, form: str | None = None) -> BrowserCheck:
    """Check ``manifest`` for a browser reading it with zarrita.js 0.7 (``form``: the file's
    form, ``"json"`` or ``"compact"``, where known)."""
    findings: list[Finding] = []
    if form == "compact":
        findings.append(
            Finding(
                manifest.location or "manifest", FORM,
                "the compact form has no JavaScript reader; write JSON with h5lens convert M.h5lens M.json", False,
            )
        )
    for source in manifest.sources:
        findings.extend(_source_findings(source.url, manifest.location))
    for path in sorted(manifest.nodes):
        findings.extend(_node_findings(path, manifest.nodes[path]))
    return BrowserCheck(tuple(findings), len(manifest.arrays()))


def _shown(path: str) -> str:
    return "/" + path


def _source_findings(url: str, location: str | None) -> Iterator[Finding]:
    if "://" not in url:
        if url.startswith("/"):
            yield Finding(url, URL, "a local path: a browser cannot read local files; index with --url https://...", False)
            return
        where = resolve(url, location)
        yield Finding(
            url, URL,
            f"relative: h5lens reads {where}; a browser resolves it against the page, not the manifest "
            "(h5lens-codecs' ReferenceStore resolves it against the manifest's URL)",
            True,
        )
        return
    scheme = url.split("://", 1)[0].lower()
    if scheme in readers.BROWSER_SCHEMES:
        return
    if scheme in ("s3", "gs", "gcs"):
        host = "s3.amazonaws.com" if scheme == "s3" else "storage.googleapis.com"
        yield Finding(
            url, URL,
            f"fetched as https://{host}/{url.split('://', 1)[1]}: right only for a public bucket there; "
            "index with --url https://... for another endpoint",
            True,
        )
        return
    yield Finding(url, URL, f"a browser fetches http(s) URLs only, not {scheme}://; index with --url https://...", False)


def _node_findings(path: str, doc: Mapping[str, Any]) -> Iterator[Finding]:
    name = path.rsplit("/", 1)[-1]
    if path and not _url_safe(name):
        yield Finding(
            _shown(path), NAME,
            f"{name!r} changes in a URL: @zarrita/storage's ReferenceStore misses it (and what is under it); "
            "h5lens-codecs' ReferenceStore and encodePath find it",
            True,
        )
    bare = sorted(_non_finite_attributes(doc.get("attributes", {})))
    if bare:
        yield Finding(
            _shown(path), ATTRIBUTE,
            f"bare NaN/Infinity in {', '.join(bare)}: JSON.parse refuses the node's zarr.json "
            "(h5lens-codecs gives the convention's strings \"NaN\", \"Infinity\"; index --for browser writes them)",
            True,
        )
    array = ArrayDocument.of(doc)
    if array is not None:
        yield from _array_findings(_shown(path), array)


def _url_safe(name: str) -> bool:
    return name not in (".", "..") and all(c in readers.URL_SAFE_NAME_CHARACTERS for c in name)


def _non_finite_attributes(attributes: Mapping[str, Any]) -> Iterator[str]:
    for key, value in attributes.items():
        if _has_non_finite(value):
            yield key


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    return False


def data_type_name(data_type: Any) -> str:
    """A zarr v3 data type's name (``"float32"``; ``"structured"`` for a compound's JSON)."""
    if isinstance(data_type, str):
        return data_type
    if isinstance(data_type, Mapping):
        return str(data_type.get("name"))
    return "structured" if isinstance(data_type, list) else repr(data_type)


def _array_findings(where: str, array: ArrayDocument) -> Iterator[Finding]:
    type_name = data_type_name(array.data_type)
    if type_name == readers.FLOAT16:
        yield Finding(where, DATA_TYPE, readers.FLOAT16_NOTE, False)
        return
    if type_name not in readers.ZARRITA_DATA_TYPES:
        yield Finding(where, DATA_TYPE, f"zarrita.js 0.7 has no data type {type_name}", False)
        return
    itemsize = readers.ZARRITA_DATA_TYPES[type_name]
    for codec in array.codecs:
        name = str(codec.get("name"))
        configuration = codec.get("configuration") or {}
        if name == "numcodecs.shuffle" and itemsize is not None and configuration.get("elementsize", itemsize) != itemsize:
            yield Finding(
                where, CODEC,
                f"numcodecs.shuffle of {configuration['elementsize']}-byte elements: zarrita.js unshuffles by the "
                f"data type's {itemsize} bytes",
                False,
            )
        elif name in readers.ZARRITA_CODECS:
            continue
        elif name in readers.PACK_CODECS:
            yield Finding(where, CODEC, f"{name}: not in zarrita.js 0.7", True)
        elif name in readers.NO_BROWSER_DECODER:
            yield Finding(where, CODEC, f"{name}: {readers.NO_BROWSER_DECODER[name]}", False)
        else:
            yield Finding(where, CODEC, f"{name}: no JavaScript decoder known to h5lens", False)
