"""Index a whole collection (a bucket, a directory, globs) on dask.distributed.

* :mod:`~h5lens.many.sources`: which files, and the manifest name of each;
* :mod:`~h5lens.many.task`: one file on one worker (skip, index, write, record);
* :mod:`~h5lens.many.check`: one file (or a manifest left alone) checked, nothing written;
* :mod:`~h5lens.many.cluster`: the client (given, by address, or a LocalCluster);
* :mod:`~h5lens.many.run`: :func:`index_many`, the records and the report.

Reading many manifests as one AnnData is :func:`h5lens.read_anndata` with a list.
"""

from __future__ import annotations

from h5lens.many.run import IndexManyResult, index_many, write_report
from h5lens.many.task import (
    CHANGED,
    CURRENT,
    FAILED,
    INDEXED,
    MISSING,
    ORPHANED,
    SKIPPED,
    FileRecord,
    IndexSettings,
)

__all__ = [
    "CHANGED",
    "CURRENT",
    "FAILED",
    "INDEXED",
    "MISSING",
    "ORPHANED",
    "SKIPPED",
    "FileRecord",
    "IndexManyResult",
    "IndexSettings",
    "index_many",
    "write_report",
]
