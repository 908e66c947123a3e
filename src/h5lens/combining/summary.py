"""What a combine made: the arrays it references (their chunks and bytes, and their grids),
and the bytes it wrote into the manifest (new small arrays, chunks cut short): the
summary ``h5lens combine`` prints, and whose figures ``--report``-style callers read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from h5lens.manifest.model import Manifest


class _Made(Protocol):
    referenced: dict[str, Any]
    written: dict[str, int]
    remapped: list[str]


@dataclass(frozen=True)
class ReferencedArray:
    path: str
    chunks: int  # chunk references (and chunks written anew) in its table
    referenced_bytes: int  # bytes of the files it references
    written_bytes: int  # chunks cut short, written anew inline
    rectilinear: bool


@dataclass(frozen=True)
class Summary:
    """How many files, what is referenced, what was written (bytes) and which arrays lie on
    a rectilinear grid (zarr reads those only with ``array.rectilinear_chunks``)."""

    files: int
    referenced: tuple[ReferencedArray, ...]
    written: dict[str, int] = field(default_factory=dict)  # element -> bytes of new arrays
    inline_bytes: int = 0  # every inline byte of the combined manifest
    remapped: tuple[str, ...] = ()  # matrices whose files' columns h5lens's reader maps (var differ)

    @classmethod
    def of(cls, inputs: Sequence[Any], made: _Made, manifest: Manifest) -> Summary:
        arrays = tuple(
            ReferencedArray(
                path, manifest.chunks[path].n_present, manifest.chunks[path].referenced_bytes, stacked.written_bytes,
                stacked.rectilinear,
            )
            for path, stacked in sorted(made.referenced.items())
        )  # fmt: skip
        inline = sum(table.inline_bytes for table in manifest.chunks.values())
        return cls(len(inputs), arrays, dict(made.written), inline, tuple(getattr(made, "remapped", ())))

    @property
    def rectilinear(self) -> list[str]:
        return [a.path for a in self.referenced if a.rectilinear]

    @property
    def written_bytes(self) -> int:
        return sum(self.written.values()) + sum(a.written_bytes for a in self.referenced)

    def lines(self) -> list[str]:
        """The summary as the command prints it."""
        out = [f"{self.files} files combined"]
        for a in self.referenced:
            grid = "rectilinear" if a.rectilinear else "regular"
            cut = f", {a.written_bytes} B of chunks cut short written" if a.written_bytes else ""
            out.append(f"  referenced /{a.path}: {a.chunks} chunks, {a.referenced_bytes} B in the files, {grid} grid{cut}")
        for element, nbytes in sorted(self.written.items()):
            if nbytes:
                out.append(f"  written /{element.lstrip('/')}: {nbytes} B")
        out.append(f"  bytes written into the manifest: {self.written_bytes} (inline in all: {self.inline_bytes})")
        if self.remapped:
            out.append(
                f"  columns mapped file by file (the files' var differ): {', '.join('/' + p for p in self.remapped)}; "
                "read by h5lens's readers, refused by zarr's own (their values would sit in the wrong columns)"
            )
        if self.rectilinear:
            out.append(
                "  rectilinear grids: zarr's own readers need zarr.config.set({'array.rectilinear_chunks': True}); "
                "h5lens's readers need nothing"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "referenced": [a.__dict__ for a in self.referenced],
            "written": self.written,
            "written_bytes": self.written_bytes,
            "inline_bytes": self.inline_bytes,
            "rectilinear": self.rectilinear,
            "remapped": list(self.remapped),
        }


__all__ = ["ReferencedArray", "Summary"]
