"""What ``h5lens.validate`` checks of the arrays only h5lens's readers assemble.

``h5lens combine`` writes two kinds of them, each with a codec that makes zarr's readers
refuse the array, saying why, rather than give wrong values:

* a *marker* (``h5lens.file_columns``): the matrix of files whose var differ, a one-byte
  placeholder whose codec refuses; the values lie in each file's arrays and column maps
  (``h5lens_columns/``), which are checked as any array is. The marker itself holds
  nothing to decode.
* a *per-file record* (``h5lens.per_file_encoding``): the codec first in the chain, the
  stored values behind it. Those are checked with the record taken out (as h5lens's xarray
  engine reads them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from h5lens.codecs.file_columns import CODEC_NAME as FILE_COLUMNS
from h5lens.manifest.model import Manifest

MARKERS = frozenset({FILE_COLUMNS})


def is_marker(doc: Mapping[str, Any] | None) -> bool:
    """Whether an array's document is a marker (its values lie elsewhere)."""
    if doc is None or doc.get("node_type") != "array":
        return False
    return any(isinstance(c, Mapping) and c.get("name") in MARKERS for c in doc.get("codecs") or ())


def checked_form(manifest: Manifest) -> Manifest:
    """The manifest as validation decodes it: per-file records taken out (their stored
    values decode with the codecs behind them)."""
    from h5lens.codecs.per_file import stored_values

    return stored_values(manifest)[0]


__all__ = ["MARKERS", "checked_form", "is_marker"]
