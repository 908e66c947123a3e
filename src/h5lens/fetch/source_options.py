"""Options per source: storage options keyed by URL prefix, for a manifest whose sources lie
in places that want different options (two buckets with different credentials, a public
bucket beside a private one, two endpoints).

Storage options may hold, besides the options themselves, entries keyed by a URL prefix
(a key with ``://`` in it), each a mapping of options::

    {"key": "…", "secret": "…",                      # every URL
     "s3://bucket-b/": {"anon": True},               # URLs under s3://bucket-b/
     "s3://other/": {"endpoint_url": "https://…"}}

A URL is read with the options of the longest prefix it starts with, merged over the
options outside the prefixes (:func:`options_for`): mappings (``client_kwargs``,
``config_kwargs``, ``headers``) merged key by key, other values replaced; and credentials
as a whole: a prefix that names any credential (``key``, ``secret``, ``token``, ``anon``,
``profile``, ``account_key``, ``sas_token`` …) takes none of the others' credentials, so
``{"anon": True}`` for a public bucket is not signed with the keys of a private one. A URL
under no prefix is read with the options outside them. :func:`h5lens.fetch.clients.open_client`
applies it to every read (sources, manifests, a file indexed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from h5lens.errors import InvalidOptionError
from h5lens.fetch.credentials import CREDENTIAL_OPTIONS

__all__ = ["for_sources", "has_prefixes", "is_prefix", "options_for", "split_prefixes"]


def is_prefix(key: object) -> bool:
    """Whether a storage options key is a URL prefix (``s3://bucket/``), not an option name."""
    return isinstance(key, str) and "://" in key


def has_prefixes(options: Mapping[str, Any] | None) -> bool:
    return options is not None and any(is_prefix(k) for k in options)


def split_prefixes(options: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The options outside any prefix, and the options of each prefix (checked: mappings of
    option names; the message names the prefix, never a value, which may be a secret)."""
    plain: dict[str, Any] = {}
    prefixed: dict[str, dict[str, Any]] = {}
    for key, value in (options or {}).items():
        if not is_prefix(key):
            plain[key] = value
            continue
        if not isinstance(value, Mapping):
            raise InvalidOptionError(
                f"storage options for the prefix {key!r} must be a mapping of option names to values, "
                f"not a {type(value).__name__}"
            )
        nested = [name for name in value if is_prefix(name)]
        if nested:
            raise InvalidOptionError(f"storage options for the prefix {key!r} hold another prefix ({nested[0]!r})")
        prefixed[key] = dict(value)
    return plain, prefixed


def options_for(url: str, options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The options ``url`` is read with: those of the longest prefix of ``options`` it starts
    with, merged over the options outside the prefixes (see the module docstring); ``options``
    itself (as a dict) when it has no prefixes."""
    if options is None:
        return None
    if not has_prefixes(options):
        return dict(options)
    plain, prefixed = split_prefixes(options)
    matching = [prefix for prefix in prefixed if url.startswith(prefix)]
    if not matching:
        return plain
    return merged(plain, prefixed[max(matching, key=len)])


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged over ``base``: credentials as a whole, mappings key by key, values replaced."""
    out = dict(base)
    if CREDENTIAL_OPTIONS & set(over):
        for name in CREDENTIAL_OPTIONS:
            out.pop(name, None)
    for name, value in over.items():
        below = out.get(name)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[name] = {**below, **value}
        else:
            out[name] = value
    return out


def for_sources(
    storage_options: Mapping[str, Any] | None, source_options: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The options a manifest's sources are read with: ``source_options`` that name options
    outside any prefix replace ``storage_options`` (as they always have); ``source_options``
    of prefixes alone are added to ``storage_options`` (theirs winning for the same prefix),
    so their options merge over the global ones."""
    if source_options is None:
        return None if storage_options is None else dict(storage_options)
    given, prefixed = split_prefixes(source_options)
    if not prefixed or given:
        return dict(source_options)
    return {**(storage_options or {}), **prefixed}
