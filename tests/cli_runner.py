"""The ``h5lens`` command run in this process, as its console script runs it (``main``):
exit status, stdout and stderr, like ``subprocess.run(..., capture_output=True, text=True)``.

Starting Python and importing zarr, h5py and anndata costs about two seconds a command;
in this process a command costs what it does. The tests that must see a separate process
(test_cli.py: the console script, ``python -m h5lens.cli``, library warnings;
test_cli_interrupt.py: signals) start one.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def status(self) -> int:
        return self.returncode

    def error_line(self) -> str:
        """The one stderr line of a command refused on bad input (exit 2), without its prefix."""
        assert self.returncode == 2, (self.returncode, self.stdout, self.stderr)
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("h5lens: error: "), self.stderr
        return lines[0].removeprefix("h5lens: error: ")


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> Iterator[None]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(saved_env)


def h5lens(*args: object, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None) -> Run:
    from h5lens.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _environment(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
    return Run(status, out.getvalue(), err.getvalue())
