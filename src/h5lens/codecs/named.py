"""What every h5lens codec's JSON parsing shares."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from zarr.core.common import JSON, parse_named_configuration


def no_configuration(data: dict[str, JSON], name: str) -> None:
    """Check ``data`` names codec ``name`` and configures nothing (``{"name": ...}`` or an
    empty configuration): anything else is a ``ValueError`` saying so."""
    _, configuration = parse_named_configuration(data, name, require_configuration=False)
    if configuration:
        raise ValueError(f"{name} takes no configuration, got {configuration!r}")


def only(configuration: dict[str, Any] | None, name: str, keys: set[str]) -> dict[str, Any]:
    """``configuration`` (None: empty), refused if it names keys other than ``keys``."""
    given = dict(configuration or {})
    if set(given) - keys:
        raise ValueError(f"{name} takes {', '.join(sorted(keys))}, got {given!r}")
    return given


class NoConfiguration:
    """The JSON of a codec with nothing to configure, ``{"name": codec_name}``: mixed in
    before zarr's codec base class."""

    codec_name: ClassVar[str]

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        no_configuration(data, cls.codec_name)
        return cls()

    def to_dict(self) -> dict[str, JSON]:
        return {"name": self.codec_name}


__all__ = ["NoConfiguration", "no_configuration", "only"]
