"""The command line's options: their types (shared by every command that takes them, one
definition each) and how their values are parsed and checked. Cheap to import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from h5lens.cli.app import fail
from h5lens.scan.options import (
    CONVENTIONS,
    DEFAULT_INLINE_THRESHOLD,
    DEFAULT_MATERIALIZE_LIMIT,
    DEFAULT_READ_BLOCK_SIZE,
    DEFAULT_SLAB_BYTES,
    MIN_READ_BLOCK_SIZE,
)


def _size_text(n: int) -> str:
    """A default size as the help shows it (whole KiB / MiB where it is one)."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


DEFAULT_BLOCK = _size_text(DEFAULT_READ_BLOCK_SIZE)

def _pairs(option: str, pairs: list[str]) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"{option} expects KEY=VALUE, got {pair!r}")
        out.append((key, value))
    return out


def storage_options(pairs: list[str], anon: bool, endpoint_url: str | None) -> dict[str, Any]:
    """The storage options ``-s KEY=VALUE`` give; ``KEY.NAME=VALUE`` sets NAME in the option
    KEY that is a mapping (``-s headers.Authorization="Bearer …"``: an HTTP header, kept as
    text; ``-s config_kwargs.connect_timeout=30``); ``PREFIX:KEY=VALUE`` sets KEY for the URLs
    under PREFIX only (``-s s3://bucket-b/:anon=true``: :mod:`h5lens.fetch.source_options`)."""
    options: dict[str, Any] = {}
    for key, value in _pairs("--storage-option", pairs):
        target = options
        if "://" in key:  # PREFIX:KEY, the prefix a URL (which may hold a port's colon)
            given = key
            prefix, colon, key = key.rpartition(":")
            if not colon or "://" not in prefix or not key or "/" in key:
                fail(f"--storage-option expects PREFIX:KEY=VALUE for a URL prefix (s3://bucket/:anon=true), got {given!r}")
            target = options.setdefault(prefix, {})
        outer, dot, inner = key.partition(".")
        if not dot:
            target[key] = _parse_value(value)
            continue
        if not inner or not isinstance(target.setdefault(outer, {}), dict):
            fail(f"--storage-option {key}: {outer!r} is given both as a value and as a mapping")
        target[outer][inner] = value if outer == "headers" else _parse_value(value)
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
        "--storage-option",
        "-s",
        metavar="KEY=VALUE",
        help="fsspec storage option KEY=VALUE (repeatable; KEY.NAME=VALUE for a mapping: -s headers.Authorization=...; "
        "PREFIX:KEY=VALUE for the URLs under PREFIX only: -s s3://bucket-b/:anon=true).",
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
Manifest = Annotated[str, typer.Argument(metavar="MANIFEST", help="Manifest (path or URL; NAME.json or NAME.h5lens).")]

Form = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORM",
        help="'json' (kerchunk references, any fsspec reader; NAME.json) or 'compact' (columns, for millions "
        "of chunks; NAME.h5lens). Default: the form the output's name says; for other names, compact above "
        "100,000 chunk references.",
    ),
]
FORMS = ("json", "compact")
Force = Annotated[
    bool, typer.Option("--force", help="Replace an existing file at the destination even if it is not a manifest.")
]


def check_form(form: str | None) -> None:
    if form is not None and form not in FORMS:
        fail(f"--format must be 'json' or 'compact', got {form!r}")


def form_note(written: str, asked: str | None, manifest: Any, output: str) -> str:
    """Which form was written, and why."""
    from h5lens.manifest.io import COMPACT_ABOVE, COMPACT_SUFFIX, named_format

    if asked is not None:
        return f"{written} form"
    if named_format(output) is not None:
        if written == "json" and manifest.n_chunks > COMPACT_ABOVE:
            return (
                f"json form, as the name says ({manifest.n_chunks:,} chunk references: a {COMPACT_SUFFIX} "
                "name would get the compact form, which opens faster)"
            )
        return f"{written} form, as the name says"
    side = "more" if written == "compact" else "no more"
    return f"{written} form ({manifest.n_chunks:,} chunk references, {side} than {COMPACT_ABOVE:,})"


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def byte_size(option: str, text: str, *, at_least: int = 0) -> int:
    """'64KiB' → 65536; a bad or too small size exits with one line naming the option."""
    import re

    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        fail(f"{option}: expected a size like 65536, 64KiB or 4MiB, got {text!r}")
    value = int(match.group(1)) * _UNITS[unit]
    if value < at_least:
        fail(f"{option}: at least {_size_text(at_least)}, got {text!r}")
    return value


# -- the scan's options: index, publish and index-many --------------------------------------------

InlineThreshold = Annotated[
    str,
    typer.Option(metavar="SIZE", help="Copy arrays of at most this many stored bytes into the manifest (0: none)."),
]
Convention = Annotated[str, typer.Option(metavar="NAME", help="'released' (what convention readers ship) or 'proposal'.")]
SlabBytes = Annotated[str, typer.Option(metavar="SIZE", help="Virtual chunk size for big contiguous datasets.")]
MaterializeLimit = Annotated[
    str,
    typer.Option(
        metavar="SIZE",
        help="Stop, naming the dataset, rather than copy more than this into the manifest for one dataset "
        "(data no zarr codec reads is decoded and copied); 'none': no limit.",
    ),
]
SkipUnreadable = Annotated[
    bool,
    typer.Option(
        "--skip-unreadable",
        help="Leave out an object that cannot be read (a dataset or attribute h5py cannot read either, data "
        "behind a filter libhdf5 cannot load here, a damaged dataset) and index everything else; the manifest "
        "lists what was left out. Default: refuse the file, naming the object.",
    ),
]
DEFAULT_INLINE = str(DEFAULT_INLINE_THRESHOLD)
DEFAULT_SLAB = _size_text(DEFAULT_SLAB_BYTES)
DEFAULT_LIMIT = _size_text(DEFAULT_MATERIALIZE_LIMIT)


@dataclass(frozen=True)
class ScanSettings:
    """The scan's options as parsed and checked at the command line (in its own words)."""

    inline_threshold: int
    convention: str
    slab_bytes: int
    materialize_limit: int | None
    read_block_size: int
    skip_unreadable: bool = False

    def index_arguments(self) -> dict[str, Any]:
        """The keyword arguments of :func:`h5lens.index` these settings stand for."""
        return {
            "inline_threshold": self.inline_threshold,
            "convention": self.convention,
            "slab_bytes": self.slab_bytes,
            "materialize_limit": self.materialize_limit,
            "read_block_size": self.read_block_size,
            "skip_unreadable": self.skip_unreadable,
        }


def scan_settings(
    *,
    inline_threshold: str = DEFAULT_INLINE,
    convention: str,
    slab_bytes: str = DEFAULT_SLAB,
    materialize_limit: str = DEFAULT_LIMIT,
    read_block_size: str,
    skip_unreadable: bool = False,
) -> ScanSettings:
    check_convention(convention)
    limit: int | None
    if materialize_limit.strip().lower() == "none":
        limit = None
    elif materialize_limit == DEFAULT_LIMIT:
        limit = DEFAULT_MATERIALIZE_LIMIT  # the default: variable-length values pass it (DefaultLimit)
    else:
        limit = byte_size("--materialize-limit", materialize_limit)
    return ScanSettings(
        inline_threshold=byte_size("--inline-threshold", inline_threshold),
        convention=convention,
        slab_bytes=byte_size("--slab-bytes", slab_bytes, at_least=1),
        materialize_limit=limit,
        read_block_size=byte_size("--read-block-size", read_block_size, at_least=MIN_READ_BLOCK_SIZE),
        skip_unreadable=skip_unreadable,
    )
