"""What runs before the command's modules are imported: the Ctrl-C handler of start-up.
Standard library only, so that the package installs it before paying for any import."""

from __future__ import annotations

import os


def interrupted_while_starting(signum: int, frame: object) -> None:
    # Nothing is written before a command runs: leaving at once is safe, and it spares
    # the user a traceback from deep inside an import.
    os.write(2, b"h5lens: interrupted\n")
    os._exit(130)
