"""The command line's options: their types (shared by every command that takes them, one
definition each) and how their values are parsed and checked. Cheap to import."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from h5lens.cli.app import fail
from h5lens.scan.options import (
    CONVENTIONS,
    DEFAULT_CONVENTION,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_READ_BLOCK_SIZE,
    DEFAULT_SLAB_BYTES,
)

DEFAULT_BLOCK = f"{DEFAULT_READ_BLOCK_SIZE >> 10}KiB"  # KiB: any default of whole KiB prints exactly

def _pairs(option: str, pairs: list[str]) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"{option} expects KEY=VALUE, got {pair!r}")
        out.append((key, value))
    return out


def storage_options(pairs: list[str], anon: bool, endpoint_url: str | None) -> dict[str, Any]:
    options: dict[str, Any] = {key: _parse_value(value) for key, value in _pairs("--storage-option", pairs)}
    if anon:
        options["anon"] = True
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options


def source_urls(pairs: list[str]) -> dict[str, str]:
    return dict(_pairs("--source-url", pairs))


def check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        fail(f"--convention must be one of {', '.join(map(repr, CONVENTIONS))}, got {convention!r}")


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text


StorageOption = Annotated[
    list[str],
    typer.Option(
        "--storage-option", "-s", metavar="KEY=VALUE", help="fsspec storage option KEY=VALUE (repeatable)."
    ),
]
Anon = Annotated[bool, typer.Option("--anon", help="Anonymous access to object storage.")]
EndpointUrl = Annotated[
    str | None, typer.Option("--endpoint-url", metavar="URL", help="S3-compatible endpoint URL.")
]
SourceUrl = Annotated[
    list[str],
    typer.Option(
        "--source-url",
        metavar="OLD=NEW",
        help="Read the source recorded as OLD from NEW instead (a moved bucket, a local copy; repeatable).",
    ),
]
AllowLocal = Annotated[
    list[str],
    typer.Option(
        "--allow-local",
        metavar="PATH",
        help="Let a manifest read from a URL read local files under PATH (repeatable; refused otherwise).",
    ),
]
Verify = Annotated[
    bool, typer.Option("--verify/--no-verify", help="Refuse sources that changed since indexing.")
]
ReadBlockSize = Annotated[
    str,
    typer.Option(
        metavar="SIZE",
        help="Remote sources: read metadata in blocks of this size (e.g. 64KiB, 4MiB). "
        "Larger: fewer requests, more bytes fetched.",
    ),
]
Manifest = Annotated[str, typer.Argument(metavar="MANIFEST", help="Manifest JSON (path or URL).")]

Form = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORM",
        help="'json' (kerchunk references, any fsspec reader) or 'compact' (columns, for millions of chunks). "
        "Default: compact above 100,000 chunk references.",
    ),
]
FORMS = ("json", "compact")


def check_form(form: str | None) -> None:
    if form is not None and form not in FORMS:
        fail(f"--format must be 'json' or 'compact', got {form!r}")


def form_note(written: str, asked: str | None, manifest: Any) -> str:
    """Which form was written, and why when h5lens chose it."""
    if asked is not None:
        return f"{written} form"
    side = "more" if written == "compact" else "no more"
    return f"{written} form ({manifest.n_chunks} chunk references, {side} than 100,000)"


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def byte_size(option: str, text: str) -> int:
    """'64KiB' → 65536; a bad size exits with one line naming the option."""
    import re

    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        fail(f"{option}: expected a size like 65536, 64KiB or 4MiB, got {text!r}")
    return int(match.group(1)) * _UNITS[unit]


# -- the scan's options: index and index-many ---------------------------------------------------

InlineThreshold = Annotated[
    int, typer.Option(metavar="N", help="Copy arrays of at most this many stored bytes into the manifest.")
]
Convention = Annotated[str, typer.Option(metavar="NAME", help="'released' (what convention readers ship) or 'proposal'.")]
SlabBytes = Annotated[int, typer.Option(metavar="N", help="Virtual chunk size for big contiguous datasets.")]
MaterializeLimit = Annotated[
    int | None, typer.Option(metavar="N", help="Refuse to copy more than this many bytes of one dataset.")
]
