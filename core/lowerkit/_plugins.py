"""Backend discovery and registry (stub)."""

from __future__ import annotations


def backends():
    raise NotImplementedError


def register_backend(plugin, name):
    raise NotImplementedError
