"""What a manifest may claim before h5lens refuses to read it: manifests are untrusted input.

A manifest downloaded from someone else's bucket can claim a grid of 10^12 chunks, a
chunk of 10^12 elements, gigabytes of inline data: each would exhaust memory before any
check inside zarr ran. These limits are checked while a manifest is parsed, before
anything that size is allocated; a manifest over one is refused with
:class:`~h5lens.errors.ManifestLimitError` naming the key and the limit. The defaults fit
the largest real files (10^8 chunk references, chunks of hundreds of MB); raise them
with ``limits=Limits(...)`` where a manifest legitimately needs more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from h5lens.errors import ManifestLimitError


@dataclass(frozen=True)
class Limits:
    manifest_bytes: int = 8 << 30  # a manifest file
    document_bytes: int = 64 << 20  # one zarr.json document (the compact form's header in all)
    grid_cells: int = 1 << 30  # chunk-grid cells of one array (its table costs 20 bytes each)
    chunk_refs: int = 1 << 30  # chunk references in a manifest
    chunk_bytes: int = 4 << 30  # the decoded size of one chunk
    inline_bytes: int = 4 << 30  # inline chunk bytes in a manifest

    def check(self, what: str, value: int, limit_name: str, where: str) -> None:
        limit = getattr(self, limit_name)
        if value > limit:
            raise ManifestLimitError(
                f"{where}: {what} {value:,} exceeds the limit of {limit:,} (Limits.{limit_name}); "
                "raise it with limits=Limits(...) if this manifest is trusted"
            )

    def check_grid(self, grid: tuple[int, ...], where: str) -> None:
        self.check("chunk grid of", math.prod(grid), "grid_cells", where)


DEFAULT_LIMITS = Limits()
