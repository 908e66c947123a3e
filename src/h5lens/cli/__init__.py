"""The ``h5lens`` command.

Every command exits 0 on success and 2 with one line ``h5lens: error: ...`` on bad input;
nothing is written unless the command succeeds. Ctrl-C exits 130 with ``h5lens:
interrupted``. ``-v`` also shows library warnings and the traceback of a handled error.

Modules: :mod:`~h5lens.cli.app` (the app, errors, entry point), :mod:`~h5lens.cli.options`
(every option, defined once), :mod:`~h5lens.cli.progress`, and one module per command
family: :mod:`~h5lens.cli.indexing` (index, publish, index-many, convert),
:mod:`~h5lens.cli.reading` (inspect, ls, cat, validate), :mod:`~h5lens.cli.demo`.

Only typer and the standard library are imported at module level: ``h5lens --help``
must not pay for zarr, h5py and numpy, and an early Ctrl-C has little to interrupt.
Each command imports what it uses.
"""

from __future__ import annotations

import os
import signal
import sys

from h5lens.cli.startup import interrupted_while_starting


def _started_as_the_command() -> bool:
    argv = getattr(sys, "orig_argv", sys.argv)
    if any(a == "-m" and b == "h5lens.cli" for a, b in zip(argv, argv[1:], strict=False)):  # python -m h5lens.cli
        return True
    return os.path.basename(sys.argv[0] if sys.argv else "") in ("h5lens", "h5lens.exe")


if _started_as_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    # Run as the command (not imported by a program): until main() takes over.
    signal.signal(signal.SIGINT, interrupted_while_starting)

from h5lens.cli import indexing, combine, reading, demo, browser  # noqa: F401, I001 - each registers its commands, in this order
from h5lens.cli.app import app, main

__all__ = ["app", "main"]
