"""A finding of ``h5lens.validate``: the node and what is wrong there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One finding: the node (``"/"``-prefixed zarr path) and what is wrong there
    (``cli_message``: the same in the command line's words, where they differ)."""

    path: str
    message: str
    cli_message: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    @classmethod
    def of(cls, path: str, error: BaseException) -> Problem:
        """The problem an h5lens error reports at ``path`` (its first line)."""

        def first(text: str) -> str:
            lines = text.strip().splitlines()
            return lines[0] if lines else type(error).__name__

        said = getattr(error, "cli_message", None)
        return cls(path, first(str(error)), first(said) if said else None)


__all__ = ["Problem"]
