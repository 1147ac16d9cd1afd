"""Profiler wrapper plugin (stub)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def profile():
    raise NotImplementedError
    yield
