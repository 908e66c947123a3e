"""The typer app, what every command shares at run time, and the entry point.

Errors: every command exits 0 on success and 2 with one line ``h5lens: error: ...`` on
bad input (an :class:`h5lens.H5LensError`, or a storage failure the library let through,
mapped by :func:`h5lens.fetch.backend_errors.storage_error`); Ctrl-C exits 130 with
``h5lens: interrupted``. Only typer and the standard library at module level.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
# Exception types from these packages are storage failures, whatever their class.

# verbose: -v given; interrupted: Ctrl-C seen; target: what the running step works on
# (url, action, anon, stale hint), for an error that escapes the step's own handling.
state: dict[str, Any] = {
    "verbose": False, "interrupted": False, "target": ("h5lens", "running", False, "index it again")
}


class Command(TyperCommand):
    """Usage lines that name arguments as the help text does: ``SOURCE``, ``[PATH]``."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if getattr(param, "param_type_name", "") != "argument":
                continue
            name = param.metavar or param.name.upper()
            pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """typer labels an argument given many times ``<list[str]>``; its name says so
        already (``SOURCES...``): ``<str>``, as for one, the columns kept aligned."""
        super().format_help(ctx, formatter)
        buffer = getattr(formatter, "buffer", None)
        if isinstance(buffer, list):
            buffer[:] = [part.replace("<list[str]>", "<str>      ") for part in buffer]


app = typer.Typer(
    name="h5lens",
    help="Index HDF5 files (h5ad, h5td, NWB, any HDF5) into zarr v3 reference manifests and read them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _options(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also show the warnings of the libraries h5lens uses, and tracebacks of errors."
        ),
    ] = False,
) -> None:
    """Index HDF5 files (h5ad, h5td, NWB, any HDF5) into zarr v3 reference manifests and read them."""
    import logging
    import warnings

    state["verbose"] = verbose
    if not verbose:
        # The CLI speaks in its own lines; zarr's UnstableSpecificationWarning, asyncio's
        # "Task was destroyed but it is pending!" after a failed read, and the like are for
        # people debugging (-v), not for every run.
        warnings.simplefilter("ignore")
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        # h5lens's own warnings say where a scan took a slower road (libhdf5 listing a chunk
        # index the walker refused): for -v, not an extra line before every error.
        logging.getLogger("h5lens").setLevel(logging.ERROR)
    _stop_logging()
    if verbose:
        # -v also says what h5lens decided on the way (public data read unsigned, a scan's
        # requests and bytes): its INFO records, one line each on this command's stderr
        logger = logging.getLogger("h5lens")
        logger.setLevel(logging.INFO)
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(_LOG_HANDLER)
        handler.setFormatter(logging.Formatter("h5lens: %(message)s"))
        logger.addHandler(handler)


_LOG_HANDLER = "h5lens-cli"


def _stop_logging() -> None:
    """Remove the handler -v gave the h5lens logger (its stderr is the command's)."""
    import logging

    logger = logging.getLogger("h5lens")
    for handler in [h for h in logger.handlers if h.get_name() == _LOG_HANDLER]:
        logger.removeHandler(handler)


# -- errors ---------------------------------------------------------------------------------


def fail(message: str, error: BaseException | None = None) -> NoReturn:
    """Print one line ``h5lens: error: message`` (after the traceback with -v) and exit 2."""
    if error is not None and state["verbose"]:
        traceback.print_exception(error)
    lines = message.strip().splitlines()
    typer.echo(f"h5lens: error: {lines[0] if lines else 'failed'}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)




def user_error(error: BaseException, url: str, action: str, anon: bool) -> BaseException | None:
    """The h5lens error a user can act on for ``error``, or None for a bug in h5lens."""
    from h5lens.errors import H5LensError
    from h5lens.fetch.backend_errors import error_chain, from_storage_backend, storage_error

    if isinstance(error, H5LensError):
        return error
    if any(isinstance(e, ImportError) and (e.name or "").split(".")[0] == "h5lens" for e in error_chain(error)):
        return None  # a part of h5lens itself that does not import: a bug, shown as one
    if isinstance(error, ModuleNotFoundError) and not from_storage_backend(error):
        return error  # an optional dependency: said as such by message
    if isinstance(error, (OSError, ImportError)) or from_storage_backend(error):
        return storage_error(error, url, action, anon=anon)
    return None


def message(error: BaseException, *, stale_hint: str) -> str:
    from h5lens.errors import StaleSourceError

    if isinstance(error, StaleSourceError) and error.url:
        changes = f" ({'; '.join(error.changes)})" if error.changes else ""
        return f"{error.url}: changed since the manifest was written{changes}; {stale_hint}"
    if isinstance(error, ModuleNotFoundError):
        return f"this needs the Python package {error.name!r}, which is not installed"
    text = (getattr(error, "cli_message", None) or str(error)).strip()  # the CLI's words for its options
    first = text.splitlines()[0] if text else type(error).__name__
    notes = [str(n).strip() for n in getattr(error, "__notes__", ()) if str(n).strip() and str(n) not in first]
    return "; ".join([first, *notes])


@contextmanager
def reporting(url: str, action: str, *, anon: bool = False, stale_hint: str = "index it again") -> Iterator[None]:
    """Turn what a user can cause inside the block into one line and exit status 2."""
    state["target"] = (url, action, anon, stale_hint)
    try:
        yield
    except typer.Exit:
        raise
    except Exception as e:  # classified below; bugs are re-raised
        found = user_error(e, url, action, anon)
        if found is None:
            raise
        fail(message(found, stale_hint=stale_hint), e)


# -- entry point ---------------------------------------------------------------------------------


def _on_interrupt(signum: int, frame: object) -> None:
    state["interrupted"] = True
    raise KeyboardInterrupt


def _unraisable(hook: Any) -> Any:
    """``sys.unraisablehook`` for a command: a Ctrl-C that landed in a finalizer or a weakref
    callback (Python can only print it there, "Exception ignored in ...") is delivered again,
    so it interrupts the command where it runs; anything else goes to ``hook``.

    Delivered from another thread, a moment later: a signal raised here would run its handler
    in this hook (even the wait for a new thread to start runs it), whose exception Python
    can only print too ("Exception ignored in sys.unraisablehook"); sent 20 ms later it
    reaches the main thread once the hook has returned (should it land in a finalizer again,
    it comes back here and is sent once more)."""
    import _thread
    import threading

    def unraisable(found: Any) -> None:
        if isinstance(found.exc_value, KeyboardInterrupt) and state["interrupted"]:
            timer = threading.Timer(0.02, _thread.interrupt_main)
            timer.daemon = True
            timer.start()
            return
        hook(found)

    return unraisable


# typer builds click's command tree from the commands' signatures and type hints each time it
# is asked (~50 ms); in one process (tests, a notebook calling main() again) the tree is the
# same while no command is added, so it is built once.
_built: tuple[int, Any] | None = None


def _command() -> Any:
    global _built
    registered = len(app.registered_commands) + len(app.registered_groups)
    if _built is None or _built[0] != registered:
        _built = (registered, typer.main.get_command(app))
    return _built[1]


def _run(argv: list[str] | None) -> int:
    command = _command()
    try:
        code = command.main(args=argv, prog_name="h5lens", standalone_mode=False)
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        return EXIT_INTERRUPTED if state["interrupted"] else 1
    except Exception as e:
        if state["interrupted"]:
            # Ctrl-C inside a library callback (libhdf5 iterating a group) can come out as
            # another exception (h5py's lock reports a SystemError around it)
            return EXIT_INTERRUPTED
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):  # click's usage errors
            return _usage_error(e)
        url, action, anon, stale_hint = state["target"]
        found = user_error(e, url, action, anon)
        if found is None:
            raise  # a bug in h5lens: the traceback is what helps
        try:
            fail(message(found, stale_hint=stale_hint), e)
        except typer.Exit as exit_:
            return int(exit_.exit_code)
    return code if isinstance(code, int) else 0


def _usage_error(error: Any) -> int:
    if type(error).__name__ == "NoArgsIsHelpError":  # plain `h5lens`: the help
        error.show()
        return int(error.exit_code)
    ctx = getattr(error, "ctx", None)
    command_path = getattr(ctx, "command_path", "") if ctx is not None else ""
    hint = f" (see {command_path} --help)" if command_path else ""
    message = " ".join(error.format_message().split())
    typer.echo(f"h5lens: error: {message}{hint}", err=True)
    return int(error.exit_code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``argv``: the arguments; None: the process's own, as the
    ``h5lens`` command and ``python -m h5lens.cli`` run it).

    Run as the process's command, an interrupted command ends the process at once after
    saying so (nothing has been written; what is half done is cleaned up by then): the
    interpreter's own shutdown, with libhdf5 or an event loop interrupted mid-call, may
    otherwise hang or report the interrupt as a signal death."""
    import threading

    from h5lens.cli.startup import interrupted_while_starting

    state.update(verbose=False, interrupted=False, target=("h5lens", "running", False, "index it again"))
    previous = None
    previous_unraisable = sys.unraisablehook
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, _on_interrupt)
        if previous is interrupted_while_starting:
            previous = signal.default_int_handler
        sys.unraisablehook = _unraisable(previous_unraisable)
    try:
        code = _run(argv)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        _stop_logging()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = previous_unraisable
    if state["interrupted"] or code == EXIT_INTERRUPTED:
        typer.echo("h5lens: interrupted", err=True)
        if argv is None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        code = EXIT_INTERRUPTED
    sys.exit(code)
