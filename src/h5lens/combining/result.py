"""What combining makes: the combined manifest's nodes and chunk tables, which arrays are
referenced (and how), and the bytes written for each element."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from h5lens.combining.stack import Stacked
from h5lens.combining.written import Written


@dataclass
class Combined:
    """What combining made: the manifest's nodes and tables (referenced and written), and
    what the summary says of them."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunks: dict[str, Any] = field(default_factory=dict)
    referenced: dict[str, Stacked] = field(default_factory=dict)  # array path -> stacked
    written: dict[str, int] = field(default_factory=dict)  # element -> bytes written
    remapped: list[str] = field(default_factory=list)  # matrices whose files' columns h5lens's reader maps

    def add(self, written: Written, element: str) -> None:
        self.nodes.update(written.nodes)
        self.chunks.update(written.chunks)
        self.written[element] = self.written.get(element, 0) + written.nbytes


__all__ = ["Combined"]
