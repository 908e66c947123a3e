"""Manifests for web browsers: what zarrita.js reads of a manifest (``h5lens check --for
browser``), and the checks ``h5lens index --for browser`` makes before writing one.

The JavaScript side, decoders for the HDF5 filters zarrita.js lacks and a ReferenceStore
that resolves relative URLs against the manifest's own, is the npm package in ``js/``
(``h5lens-codecs``). See docs/browser.md.
"""

from h5lens.browser.check import BrowserCheck, Finding, check_for_browser
from h5lens.browser.publishing import browser_url

__all__ = ["BrowserCheck", "Finding", "browser_url", "check_for_browser"]
