"""to_backend (stub)."""

from __future__ import annotations


def to_backend(module, backend, compile_spec=None, **options):
    raise NotImplementedError
