"""Human-readable summaries of a manifest (for the CLI)."""

from __future__ import annotations

from typing import Any

from h5lens.format import convention
from h5lens.manifest.documents import ArrayDocument
from h5lens.manifest.model import Manifest


def summarize(manifest: Manifest) -> dict[str, int]:
    """Counts of nodes, chunks and bytes, referenced vs inline, and of the objects left out
    as unreadable (``skip_unreadable``)."""
    tables = manifest.chunks.values()
    inline_chunks = sum(len(t.inline) for t in tables)
    return {
        "arrays": len(manifest.arrays()),
        "groups": len(manifest.groups()),
        "referenced_chunks": sum(t.n_present for t in tables) - inline_chunks,
        "referenced_bytes": sum(t.referenced_bytes for t in tables),
        "inline_chunks": inline_chunks,
        "inline_bytes": sum(t.inline_bytes for t in tables),
        "unreadable": len(manifest.unreadable),
    }


def unreadable_lines(manifest: Manifest, indent: str = "  ") -> list[str]:
    """What the scan left out as unreadable: a heading line, then one line per object
    (none when nothing was left out)."""
    if not manifest.unreadable:
        return []
    n = len(manifest.unreadable)
    heading = f"{n} object{'s' if n != 1 else ''} left out as unreadable (not in the manifest; reading one raises why):"
    return [heading, *(indent + entry.line for entry in manifest.unreadable)]


def _dtype_label(data_type: Any) -> str:
    if isinstance(data_type, str):
        return data_type
    return str(data_type.get("name", data_type))


def _codec_label(codecs: list[dict[str, Any]]) -> str:
    return " → ".join(c["name"] for c in codecs if c["name"] != "bytes") or "raw"


def _encoding_label(doc: dict[str, Any]) -> str:
    """The anndata encoding of a node, where it says more than "an array"."""
    kind = doc.get("attributes", {}).get("encoding-type")
    if not isinstance(kind, str) or (doc["node_type"] == "array" and kind == "array"):
        return ""
    return f" [yellow]{escape(kind)}[/yellow]"


def print_tree(manifest: Manifest) -> None:
    """Print the manifest as a tree: encodings, shapes, dtypes, codecs and chunk counts.

    The root is ``/``, followed by the source URLs and the convention profile. Lines
    are not wrapped when the output is not a terminal (one node per line for grep)."""
    from rich.console import Console
    from rich.tree import Tree

    from h5lens.describe import dimension_names, shape_text

    def label(path: str) -> str:
        doc = manifest.nodes[path]
        name = escape(path.rsplit("/", 1)[-1]) if path else ""
        if doc["node_type"] == "group":
            links = doc.get("attributes", {}).get(convention.LINKS, [])
            extra = f" [dim]({len(links)} links)[/dim]" if links else ""
            return f"[bold]{name}/[/bold]{_encoding_label(doc)}{extra}"
        table = manifest.chunks[path]
        view = ArrayDocument.of(doc)
        shape = "×".join(map(str, view.shape if view is not None else ())) or "scalar"
        if dimension_names(doc) is not None:  # netCDF: (time: 12, lat: 73, lon: 144), as xarray shows them
            shape = escape(shape_text(doc))
        inline = len(table.inline)
        return (
            f"{name} [cyan]{shape}[/cyan] {escape(_dtype_label(doc['data_type']))}{_encoding_label(doc)} "
            f"[magenta]{escape(_codec_label(doc['codecs']))}[/magenta] chunks: {table.n_present - inline} referenced "
            f"({table.referenced_bytes} B), {inline} inline ({table.inline_bytes} B)"
        )

    def add(node: Tree, path: str) -> None:
        left_out = {entry.path.rsplit("/", 1)[-1]: entry for entry in manifest.unreadable_children(path)}
        for name in sorted({*manifest.children(path), *left_out}):
            child = f"{path}/{name}" if path else name
            if child not in manifest.nodes:  # left out
                node.add(f"{escape(name)} [red]left out: unreadable[/red]")
                continue
            branch = node.add(label(child))
            if manifest.nodes[child]["node_type"] == "group":
                add(branch, child)

    sources = ", ".join(escape(s.url) for s in manifest.sources)
    noun = "source" if len(manifest.sources) == 1 else "sources"
    root = Tree(f"{label('')}  [dim]{noun}: {sources} · convention {escape(manifest.convention)}[/dim]")
    add(root, "")
    console = Console()
    if not console.is_terminal:
        console = Console(width=1 << 16)  # a pipe or a file: whole lines
    console.print(root)
    totals = summarize(manifest)
    console.print(
        f"{totals['arrays']} arrays, {totals['groups']} groups; referenced {totals['referenced_chunks']} chunks "
        f"/ {totals['referenced_bytes']} B; inline {totals['inline_chunks']} chunks / {totals['inline_bytes']} B"
    )
    for line in unreadable_lines(manifest):
        console.print(escape(line))


def escape(text: str) -> str:
    """``text`` shown as is by rich (names may hold ``[...]``)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)
