"""Deploying saved modules: what a file needs, checked here or against a target.

:func:`check` (``lowerkit check``) tells, without compiling anything, whether every backend a
file needs is installed, available and able to read its payload, here or on a target
described by the JSON ``lowerkit backends --json`` printed there, and whether a fallback
covers what is missing. :func:`requirements` (``lowerkit requirements``) turns what the
file recorded into pip requirement lines.

Layer: above :mod:`lowerkit.serialization` and :mod:`lowerkit.backend`, below the front ends.
"""

from __future__ import annotations

from .check import CheckReport, RegionCheck, check
from .needs import Need, needs_of, read_needs
from .requirements import requirements
from .target import Target, TargetBackend, load_target

__all__ = [
    "CheckReport", "Need", "RegionCheck", "Target", "TargetBackend", "check", "load_target",
    "needs_of", "read_needs", "requirements",
]
