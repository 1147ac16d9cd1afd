"""Which method graph is being traced right now (one per thread/task, via a ContextVar).

Kept apart from the builder so that :mod:`lowerkit.nn` can ask "am I being traced?"
without importing the tracer.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .builder import MethodBuilder

_ACTIVE: ContextVar[MethodBuilder | None] = ContextVar("lowerkit_active_trace", default=None)


def current_builder() -> MethodBuilder | None:
    """The graph builder of the method being traced, or ``None`` outside tracing."""
    return _ACTIVE.get()


def activate(builder: MethodBuilder) -> Token:
    """Make ``builder`` the active one; undo with :func:`deactivate`."""
    return _ACTIVE.set(builder)


def deactivate(token: Token) -> None:
    _ACTIVE.reset(token)
