"""``h5lens.fast_reads()``: h5lens's speed for readers that go through zarr's API, on request.

h5lens's own entry points (``read_anndata``, ``read_treedata``, ``engine="h5lens"``,
``h5lens.open`` navigation, ``store.read_region``) read through h5lens's read plan and need
nothing turned on. Readers that go through zarr's API over an h5lens store
(``anndata.read_zarr``, hdmf-zarr's ``NWBZarrIO``, xarray's zarr engine) read through zarr's
codec pipeline, as for any store, unless the user asks for more:

* ``fast_reads()`` sets zarr's public ``codec_pipeline.path`` to h5lens's pipeline
  (:mod:`h5lens.pipeline`: arrays of h5lens stores read in bulk; arrays of every other
  store are built by the pipeline configured before, exactly) and installs h5lens's
  private zarr hooks (:mod:`h5lens.hooks`) when the zarr release is one they were written
  for (otherwise h5lens warns once and leaves zarr's functions alone);
* ``fast_reads(False)`` turns everything of h5lens's off: the setting goes back to what was
  configured before, every hooked function of zarr's is zarr's own again (the same
  objects), and h5lens's own entry points read through zarr's API too (zarr decodes every
  chunk: for comparing, or to rule h5lens's decoding out). That last part holds for the
  calling context only (the thread, and the event-loop reads and tasks it starts: a
  ``contextvars`` variable), not for the process's other threads;
* as a context manager, either holds for the block, and the state before comes back after.

Building, opening or unpickling a store changes nothing of zarr's, anndata's or xarray's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from h5lens import hooks
from h5lens.engine.plan import decodes as _decodes
from h5lens.engine.plan import set_decoding


@dataclass(frozen=True)
class _State:
    configured: str  # zarr's codec_pipeline.path
    fallback: str  # the pipeline h5lens's hands other arrays to
    hooked: bool
    off: bool  # fast_reads(False): h5lens decodes nothing, not even on its own routes


def decodes() -> bool:
    """Whether h5lens decodes chunks itself on its own routes in this context (unless
    ``fast_reads(False)``)."""
    return _decodes()


def _configured() -> str:
    from zarr.core.config import config

    return str(config.get("codec_pipeline.path"))


def _set(path: str) -> None:
    from zarr.core.config import config

    config.set({"codec_pipeline.path": path})


def _state() -> _State:
    from h5lens.pipeline import fallback

    return _State(_configured(), fallback.path, hooks.installed(), not _decodes())


def _turn(on: bool) -> None:
    from h5lens.pipeline import PATH, fallback

    set_decoding(on)
    if on:
        current = _configured()
        if current != PATH:
            fallback.path = current
            _set(PATH)
        hooks.install()
        return
    if _configured() == PATH:
        _set(fallback.path)
    hooks.uninstall()


def _restore(state: _State) -> None:
    from h5lens.pipeline import fallback

    _set(state.configured)
    fallback.path = state.fallback
    set_decoding(not state.off)
    if state.hooked:
        hooks.install()
    else:
        hooks.uninstall()


class fast_reads:  # noqa: N801 - a function to its callers, a context manager too
    """h5lens's codec pipeline and zarr hooks for readers that use zarr's API: on
    (``fast_reads()``), off (``fast_reads(False)``), or for a block (``with fast_reads():``)."""

    def __init__(self, enabled: bool = True) -> None:
        self._before = _state()
        _turn(enabled)

    def __enter__(self) -> fast_reads:
        return self

    def __exit__(self, *exc: object) -> None:
        _restore(self._before)


@contextmanager
def preserved() -> Iterator[None]:
    """Whatever ``fast_reads`` calls happen inside, the state before comes back after."""
    before = _state()
    try:
        yield
    finally:
        _restore(before)


def enabled() -> bool:
    """Whether zarr builds arrays of h5lens stores with h5lens's codec pipeline now."""
    from h5lens.pipeline import PATH

    return _configured() == PATH


__all__ = ["decodes", "enabled", "fast_reads", "preserved"]
