"""Ctrl-C, start-up and the terminal: exit 130 with one line and nothing left behind; a
cheap ``import h5lens``; readable ``--help``; the progress bar on a terminal.

No timings are asserted: "started" is observed (the scanner has the source file open),
and "fast to start" is checked as "imports neither zarr nor h5py nor numpy".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

CLI = [sys.executable, "-m", "h5lens.cli"]
COMMANDS = ["index", "publish", "inspect", "ls", "cat", "validate", "demo"]


def _as_at_a_terminal() -> None:
    """Ctrl-C as a user's shell delivers it: SIGINT at its default in the child. A test
    runner's worker may ignore SIGINT (pytest-xdist's do), and an ignored signal stays
    ignored across exec, so Python would never raise KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _has_open(pid: int, path: str) -> bool:
    try:
        return any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.fixture(scope="module")
def many_datasets(tmp_path_factory):
    """10,000 small datasets: quick to write, seconds to scan."""
    path = tmp_path_factory.mktemp("many") / "many.h5"
    data = np.arange(10.0)
    with h5py.File(path, "w") as f:
        for g in range(100):
            group = f.create_group(f"g{g}")
            for i in range(100):
                group[f"d{i}"] = data
    return str(path.resolve())


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to see the scan start")
def test_ctrl_c_during_a_scan(many_datasets, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    process = subprocess.Popen(
        [*CLI, "index", many_datasets, "-o", out_dir / "m.json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_at_a_terminal,
    )
    while process.poll() is None and not _has_open(process.pid, many_datasets):
        time.sleep(0.005)  # until the scanner has the file open
    assert process.poll() is None, "the scan ended before it could be interrupted"
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130
    assert stderr.strip().splitlines() == ["h5lens: interrupted"]
    assert stdout == ""
    assert list(out_dir.iterdir()) == []  # no manifest, no .m.json.<pid>.tmp


_INTERRUPT_DURING_IMPORT = textwrap.dedent(
    """
    import os, signal, sys

    class CtrlC:
        "Ctrl-C while {module} is being imported."
        def find_spec(self, name, path=None, target=None):
            if name == {module!r}:
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, CtrlC())
    sys.argv = ["h5lens", *{args!r}]
    from h5lens.cli import main  # as the console script does
    sys.exit(main())
    """
)


@pytest.mark.parametrize("module", ["typer", "numpy", "zarr"])
def test_ctrl_c_during_imports(tmp_path, module):
    """typer: while the command starts; numpy and zarr: inside the command."""
    out = tmp_path / "m.json"
    code = _INTERRUPT_DURING_IMPORT.format(module=module, args=["index", str(tmp_path / "x.h5"), "-o", str(out)])
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=_as_at_a_terminal
    )
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip().splitlines() == ["h5lens: interrupted"]
    assert list(tmp_path.iterdir()) == []


def test_import_h5lens_is_cheap():
    code = textwrap.dedent(
        """
        import sys
        import h5lens
        import h5lens.cli
        heavy = sorted(m for m in ("zarr", "h5py", "numpy", "fsspec", "rich") if m in sys.modules)
        print(",".join(heavy))
        assert h5lens.__version__
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_public_api_resolves_lazily():
    import importlib

    import zarr

    import h5lens

    for name in h5lens.__all__:
        assert getattr(h5lens, name) is not None
    assert set(h5lens.__all__) <= set(dir(h5lens))
    from h5lens.api import index

    assert h5lens.index is index
    importlib.import_module("h5lens.read.validation")
    assert callable(h5lens.validate) and h5lens.validate.__module__ == "h5lens.read.validation"
    assert zarr.registry.get_codec_class("h5lens.lzf").__name__ == "LZFCodec"
    with pytest.raises(AttributeError):
        h5lens.no_such_name  # noqa: B018


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_arguments_readably(command):
    result = subprocess.run([*CLI, command, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    usage = result.stdout.strip().splitlines()[0]
    assert usage.startswith(f"Usage: h5lens {command} [OPTIONS]")
    assert "{" not in result.stdout and "<list" not in result.stdout
    for word in usage.split()[4:]:
        assert word.strip("[]").isupper(), usage


def test_top_level_help_imports_nothing_heavy():
    code = "import sys; sys.argv = ['h5lens', '--help']\nfrom h5lens.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\nprint('heavy:' + ','.join(m for m in ('zarr', 'h5py', 'numpy') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "heavy:"
    for command in COMMANDS:
        assert command in result.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_progress_bar_on_a_terminal(tmp_path):
    """On a terminal, index shows datasets done, chunks found (and MiB read, remotely)."""
    import pty

    from h5lens.cli.sample import write_sample

    source = write_sample(tmp_path / "sample.h5ad")
    main, secondary = pty.openpty()
    process = subprocess.Popen(
        [*CLI, "index", source, "-o", tmp_path / "m.json"],
        stdout=subprocess.PIPE,
        stderr=secondary,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm"},
    )
    os.close(secondary)
    shown = b""
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        shown += data
    stdout, _ = process.communicate(timeout=120)
    os.close(main)
    assert process.returncode == 0
    text = shown.decode(errors="replace")
    with h5py.File(source) as f:
        datasets = []
        f.visititems(lambda name, node: datasets.append(name) if isinstance(node, h5py.Dataset) else None)
    assert f"indexing {source}" in text and " chunks" in text and f"{len(datasets)}/{len(datasets)}" in text
    assert b"m.json:" in stdout


def test_an_interrupt_a_finalizer_swallowed_arrives_after_the_hook_returns():
    """A Ctrl-C that lands in a finalizer reaches the unraisable hook, which sends it again:
    it must arrive in the command's own code, not inside the hook (where Python could only
    print it as "Exception ignored in sys.unraisablehook" and the command would go on)."""
    import importlib
    import threading

    app = importlib.import_module("h5lens.cli.app")  # the module (h5lens.cli.app is also the Typer app)

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are handled on the main thread")

    class Found:
        exc_value = KeyboardInterrupt()

    printed: list[object] = []
    returned = False
    previous = signal.signal(signal.SIGINT, app._on_interrupt)
    saved = dict(app.state)
    try:
        app.state["interrupted"] = True
        hook = app._unraisable(printed.append)
        with pytest.raises(KeyboardInterrupt):
            try:
                hook(Found())
            except KeyboardInterrupt:
                pytest.fail("the interrupt was raised inside the unraisable hook")
            returned = True
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
        assert returned and printed == []
    finally:
        signal.signal(signal.SIGINT, previous)
        app.state.clear()
        app.state.update(saved)
