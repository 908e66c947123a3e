"""The dask.distributed client a collection run submits to: one given, one connected to a
scheduler address, or a LocalCluster started for the run and closed after it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from h5lens.errors import InvalidOptionError, StorageError, first_line

if TYPE_CHECKING:
    from distributed import Client


@contextmanager
def client_for(scheduler: str | Client | None, workers: int | None) -> Iterator[Client]:
    """A client for the run.

    ``scheduler``: a :class:`distributed.Client` (used as it is, left open), a scheduler
    address (connected, and the connection closed after), or None: a LocalCluster of
    ``workers`` processes (default: one per core) with one thread each, closed after.
    One thread per process because libhdf5 runs one call at a time per process: more
    threads would wait for it, more processes index in parallel.
    """
    try:
        from distributed import Client
    except ImportError as e:  # pragma: no cover - an optional dependency
        raise ModuleNotFoundError("index_many needs dask.distributed (pip install 'h5lens[distributed]')",
                                  name="distributed") from e
    if workers is not None and workers < 1:
        raise InvalidOptionError(f"workers must be at least 1, got {workers}")
    if isinstance(scheduler, Client):
        yield scheduler
        return
    if scheduler is not None:
        try:
            client = Client(scheduler, set_as_default=False)
        except OSError as e:  # distributed's "Timed out trying to connect to ..."
            raise StorageError(f"{scheduler}: cannot reach the dask scheduler ({first_line(e)})") from e
        with client:
            yield client
        return
    from distributed import LocalCluster

    n = workers or os.cpu_count() or 1
    # No dashboard: nothing to look at for a command that ends. The scheduler serves HTTP
    # all the same (health checks), on port 8787 unless told: where that port is taken,
    # distributed warns and leaves the socket it tried unclosed. Any free port of the loopback.
    with (
        LocalCluster(
            n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50,
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


