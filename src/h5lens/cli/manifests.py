"""Opening the manifest a command names (or indexing the HDF5 file named instead), shared
by the commands that read one and ``convert``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from h5lens.cli.app import fail, reporting
from h5lens.cli.progress import ScanProgressBar

if TYPE_CHECKING:
    from h5lens.manifest.model import Manifest as Loaded


def open_manifest(manifest: str, options: dict[str, Any], *, index_hdf5: bool = False) -> Loaded:
    """The manifest, or one line saying why not (not found: said once, naming it once).
    With ``index_hdf5``, an HDF5 file given instead is indexed in memory (nothing written),
    leaving out what cannot be read (``skip_unreadable``): the commands that show a file
    mark it, and reading it says why."""
    from h5lens.errors import NotAManifestError, SourceNotFoundError

    with reporting(manifest, "reading the manifest", anon=bool(options.get("anon"))):
        from h5lens.read.options import load_manifest

        if manifest.startswith("icechunk://"):
            from h5lens.icechunk.containers import quiet_logs

            quiet_logs()  # the command's output is its own lines

        try:
            return load_manifest(manifest, storage_options=options or None)
        except SourceNotFoundError as e:
            fail(f"{manifest}: manifest not found", e)
        except NotAManifestError as e:
            if e.kind != "hdf5" or not index_hdf5:
                raise
    with reporting(manifest, "indexing", anon=bool(options.get("anon"))):
        import h5lens

        with ScanProgressBar(f"indexing {manifest} (in memory)") as progress:
            return h5lens.index(manifest, storage_options=options or None, progress=progress, skip_unreadable=True)
