"""LoweredModule (stub: the contract work fills in behaviour)."""

from __future__ import annotations


class LoweredModule:
    """A module whose methods run on a backend."""
