"""A Vitessce view config for an h5ad in the cloud, read through its manifest
(``h5lens vitessce-config``; docs/browser.md).

Vitessce opens an h5ad through a kerchunk reference spec: its file type ``anndata.h5ad``
with ``options.refSpecUrl``. A manifest written with ``index --for browser`` is one
(kerchunk v1, zarr v3 keys, absolute URLs). The config shows each 2-D embedding of
``obsm`` in a scatterplot, the categorical ``obs`` columns as cell sets, and ``X`` as the
expression matrix (a gene list to colour by). Vitessce decodes with its own copy of
zarrita.js, without h5lens's codec pack, so an array it would show that plain zarrita.js
cannot read is refused (an embedding, ``X``, an index) or left out and said (an ``obs``
column), never shown wrong.

Which Vitessce reads it: the ``anndata.h5ad`` route works in Vitessce 3.x (3.9.11, the
version vitessce-python's widget loads). In Vitessce 4.0.8 that route passes a promise
where a store belongs (``@vitessce/zarr-utils`` ``src/normalize.ts``, ``zarrOpenRoot``:
``ReferenceStore.fromSpec(referenceSpecPromise, …)``, which ``@zarrita/storage`` 0.2.0
answers with a promise) and every file of this type fails with ``e.store.get is not a
function``; there, give the page's ``<Vitessce>`` the store itself (its ``stores`` prop,
keyed by the file's URL): the same config then reads through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from h5lens.browser.check import ATTRIBUTE, CODEC, DATA_TYPE, NAME, check_for_browser
from h5lens.browser.publishing import browser_url
from h5lens.errors import InvalidOptionError
from h5lens.manifest.model import Manifest

SCHEMA_VERSION = "1.0.16"  # Vitessce's view config schema, read by Vitessce 3.x and 4.x
SCATTERPLOTS = 3  # embeddings shown side by side; the rest are in the file definition
NUMERIC = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"})


@dataclass(frozen=True)
class VitessceConfig:
    """A view config (``config``, Vitessce's JSON) and the ``obs`` columns left out of it,
    each with why (``left_out``: name -> reason)."""

    config: dict[str, Any]
    left_out: dict[str, str]


def vitessce_config(manifest: Manifest, manifest_url: str, *, name: str | None = None) -> VitessceConfig:
    """The view config showing the h5ad ``manifest`` indexes, which the browser fetches from
    ``manifest_url``; an :class:`InvalidOptionError` for a manifest Vitessce cannot read."""
    browser_url(manifest_url, "the manifest")
    if len(manifest.sources) != 1:
        raise InvalidOptionError(f"{manifest_url}: Vitessce reads one h5ad; this manifest has {len(manifest.sources)} sources")
    h5ad_url = browser_url(manifest.sources[0].url, manifest_url)
    if manifest.nodes.get("", {}).get("attributes", {}).get("encoding-type") != "anndata":
        raise InvalidOptionError(f"{h5ad_url}: not an h5ad (its root has no encoding-type 'anndata')")
    problems = _problems(manifest)
    embeddings = _embeddings(manifest)
    if not embeddings:
        raise InvalidOptionError(f"{h5ad_url}: no 2-D numeric array in obsm for Vitessce's scatterplot")
    shown = [path for path, _ in embeddings] + [_index_of(manifest, "obs")]
    matrix = _matrix(manifest)
    if matrix is not None:
        shown += [matrix, _index_of(manifest, "var")]
    for path in shown:
        _refuse(path, problems)
    obs_sets, left_out = [], {}
    for column in _categorical_columns(manifest):
        found = _problem_under(f"obs/{column}", problems)
        if found is None:
            obs_sets.append({"name": column, "path": f"obs/{column}"})
        else:
            left_out[column] = found
    options: dict[str, Any] = {
        "refSpecUrl": manifest_url,
        "obsEmbedding": [{"path": path, "embeddingType": kind, "dims": [0, 1]} for path, kind in embeddings],
    }
    if obs_sets:
        options["obsSets"] = obs_sets
    if matrix is not None:
        options["obsFeatureMatrix"] = {"path": matrix}
    title = name or h5ad_url.rsplit("/", 1)[-1]
    return VitessceConfig(_config(title, h5ad_url, options, [kind for _, kind in embeddings], bool(obs_sets), matrix is not None), left_out)


def _config(title: str, h5ad_url: str, options: dict[str, Any], kinds: list[str], sets: bool, matrix: bool) -> dict[str, Any]:
    shown = kinds[:SCATTERPLOTS]
    scopes = {kind: chr(ord("A") + i) for i, kind in enumerate(shown)}
    width = 12 // len(shown)
    layout: list[dict[str, Any]] = [
        {"component": "scatterplot", "coordinationScopes": {"embeddingType": scopes[kind]}, "x": i * width, "y": 0, "w": width, "h": 8}
        for i, kind in enumerate(shown)
    ]
    below = [component for component, wanted in (("obsSets", sets), ("featureList", matrix)) if wanted]
    for i, component in enumerate(below):
        layout.append({"component": component, "x": i * (12 // len(below)), "y": 8, "w": 12 // len(below), "h": 4})
    return {
        "version": SCHEMA_VERSION,
        "name": title,
        "description": f"{h5ad_url}, read in place through its h5lens manifest",
        "initStrategy": "auto",
        "datasets": [{"uid": "A", "name": title, "files": [{
            "fileType": "anndata.h5ad",
            "url": h5ad_url,
            "options": options,
            "coordinationValues": {"obsType": "cell", "featureType": "gene", "featureValueType": "expression"},
        }]}],
        "coordinationSpace": {"embeddingType": {scope: kind for kind, scope in scopes.items()}},
        "layout": layout,
    }


def _problems(manifest: Manifest) -> dict[str, str]:
    """Node path (no leading ``/``) -> what plain zarrita.js (Vitessce's) gets wrong there."""
    problems: dict[str, str] = {}
    for finding in check_for_browser(manifest).findings:
        if finding.kind in (CODEC, DATA_TYPE, NAME, ATTRIBUTE):
            path = finding.where.lstrip("/")
            problems.setdefault(path, f"{finding.kind}: {finding.reason}")
    return problems


def _problem_under(path: str, problems: Mapping[str, str]) -> str | None:
    for where, reason in problems.items():
        if where == path or where.startswith(path + "/") or (where and path.startswith(where + "/")):
            return f"/{where}: {reason}"
    return None


def _refuse(path: str, problems: Mapping[str, str]) -> None:
    found = _problem_under(path, problems)
    if found is not None:
        raise InvalidOptionError(f"{found}; Vitessce reads with plain zarrita.js, so the view would not show /{path}")


def _embeddings(manifest: Manifest) -> list[tuple[str, str]]:
    """(path, Vitessce's embedding type) of each 2-D numeric obsm array with 2 columns or more."""
    found = []
    for name in manifest.children("obsm"):
        doc = manifest.nodes[f"obsm/{name}"]
        shape = doc.get("shape") or []
        if doc.get("node_type") == "array" and len(shape) == 2 and shape[1] >= 2 and doc.get("data_type") in NUMERIC:
            found.append((f"obsm/{name}", name.removeprefix("X_").upper()))
    return found


def _categorical_columns(manifest: Manifest) -> list[str]:
    return [
        name for name in manifest.children("obs")
        if manifest.nodes[f"obs/{name}"].get("attributes", {}).get("encoding-type") == "categorical"
    ]


def _index_of(manifest: Manifest, frame: str) -> str:
    index = manifest.nodes.get(frame, {}).get("attributes", {}).get("_index", "_index")
    return f"{frame}/{index}"


def _matrix(manifest: Manifest) -> str | None:
    """``X`` where Vitessce reads it as the expression matrix (dense, CSR or CSC), else None."""
    doc = manifest.nodes.get("X")
    if doc is None:
        return None
    if doc.get("node_type") == "array":
        return "X" if doc.get("data_type") in NUMERIC else None
    return "X" if doc.get("attributes", {}).get("encoding-type") in ("csr_matrix", "csc_matrix") else None
