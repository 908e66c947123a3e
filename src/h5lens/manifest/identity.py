"""Whether a source is still the file a manifest was written for: one rule, used by the
store (before reading), ``validate`` and ``index-many`` (to skip a current manifest).

What identifies a version of a file:

* object storage: the size and the ETag (a new upload has a new ETag);
* local files: the size and a *fingerprint*, a SHA-256 of the size and the first and
  last 64 KiB. The first bytes hold the superblock (whose end-of-file address moves
  with every allocation) and the first metadata; libhdf5 allocates new space at the
  end of the file, so a rewrite that moves data changes either. A copy of the same bytes
  (``cp`` without ``-p``, another machine) keeps it, where an mtime would not;
* otherwise (manifests written before fingerprints, servers without ETags) the size
  and the mtime.

Size alone identifies nothing: a rewrite of the same length passes it, so a caller that
must be sure (``index-many`` deciding to skip a file) asks :func:`compare` whether more
than the size was compared.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from h5lens.manifest.tables import FINGERPRINT_PREFIX, Source, is_fingerprint

_SPAN = 64 << 10  # bytes hashed at each end of the file
_DOMAIN = b"h5lens-fingerprint-1"


def fingerprint(read_at: Callable[[int, int], bytes], size: int) -> str:
    """The fingerprint of a file of ``size`` bytes, read with ``read_at(offset, length)``."""
    digest = hashlib.sha256(_DOMAIN + size.to_bytes(8, "little"))
    head = min(size, _SPAN)
    digest.update(read_at(0, head))
    tail_start = max(head, size - _SPAN)
    if tail_start < size:
        digest.update(read_at(tail_start, size - tail_start))
    return FINGERPRINT_PREFIX + digest.hexdigest()


@dataclass(frozen=True)
class Comparison:
    """What differs between the recorded source and the file found (``"size 10 → 12"``),
    and whether anything beyond the size was compared."""

    changes: tuple[str, ...]
    identified: bool

    @property
    def unchanged(self) -> bool:
        return not self.changes


def wants_fingerprint(recorded: Source) -> bool:
    """Whether checking ``recorded`` needs the file's fingerprint computed."""
    return recorded.fingerprint is not None and recorded.etag is None


def compare(recorded: Source, found: dict[str, object]) -> Comparison:
    """Compare a recorded source with ``found`` (``size``, ``etag``, ``fingerprint``,
    ``mtime`` of the file now; what is not known is absent or None). The strongest
    identity both sides have decides: ETag, then fingerprint, then mtime."""
    changes: list[str] = []
    size = found.get("size")
    if recorded.size is not None and size is not None and size != recorded.size:
        changes.append(f"size {recorded.size} → {size}")
    identified = False
    for key, label in (("etag", "ETag"), ("fingerprint", "content"), ("mtime", "mtime")):
        was, now = getattr(recorded, key), found.get(key)
        if was is None or now is None:
            continue
        if was != now:
            changes.append(f"{label} {_short(was)} → {_short(now)}")
        identified = True
        break  # the strongest identity both have decides; a copy changes the mtime, not the bytes
    return Comparison(tuple(changes), identified)


def _short(value: object) -> str:
    text = str(value)
    if text.startswith(FINGERPRINT_PREFIX):
        return text[len(FINGERPRINT_PREFIX) : len(FINGERPRINT_PREFIX) + 12]
    return text


__all__ = ["Comparison", "compare", "fingerprint", "is_fingerprint", "wants_fingerprint"]
