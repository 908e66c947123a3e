"""The profiles the scanner applies, in order: a registry it calls through.

A profile is detected from the file (``applies``) and rewrites the manifest being built
(``apply``) into what a format's own zarr readers expect. To add one: a module with
``applies(ctx) -> bool`` and ``apply(ctx) -> None`` over a
:class:`~h5lens.scan.profiles.ProfileContext`, listed here. Imports point down: this
module imports the profiles, the profiles import only the context and shared helpers.
"""

from __future__ import annotations

from types import ModuleType

from h5lens.scan import anndata, netcdf, treedata
from h5lens.scan.profiles import ProfileContext

# TreeData's trees first (their JSON datasets become groups), then AnnData encodings, then
# netCDF-4 / dimension scales (files of the other two carry none: it names dimensions and
# translates netCDF's own bookkeeping).
PROFILES: tuple[ModuleType, ...] = (treedata, anndata, netcdf)


def apply_profiles(context: ProfileContext, profiles: tuple[ModuleType, ...] = PROFILES) -> list[str]:
    """Run every profile that applies; return the names of those that ran. Each module's
    functions are looked up when called, so a profile can be wrapped or replaced."""
    ran = []
    for profile in profiles:
        if profile.applies(context):
            profile.apply(context)
            ran.append(profile.__name__.rsplit(".", 1)[-1])
    return ran
