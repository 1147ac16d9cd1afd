"""Tracing front end: ``lowerkit.trace`` (the implementation lives in :mod:`lowerkit.tracing`)."""

from __future__ import annotations

from .tracing.api import intercept_call, trace
from .tracing.tensor import TracedTensor

__all__ = ["TracedTensor", "intercept_call", "trace"]
