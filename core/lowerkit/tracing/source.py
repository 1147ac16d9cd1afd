"""Finding the user's source line that created a node."""

from __future__ import annotations

import os
import sys

from ..ir.node import SourceLocation

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The tracing machinery; everything else (user code, but also lowerkit.models and the demo,
# which define models the way users do) is where a node "comes from".
_MACHINERY_DIRS = tuple(os.path.join(_PKG_DIR, d) + os.sep for d in ("tracing", "nn", "ir", "opset"))
_MACHINERY_FILES = frozenset(
    os.path.join(_PKG_DIR, f) for f in ("ops.py", "_trace.py", "_lowered.py", "__init__.py")
)
_internal_cache: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    cached = _internal_cache.get(filename)
    if cached is None:
        path = os.path.abspath(filename)
        cached = path in _MACHINERY_FILES or path.startswith(_MACHINERY_DIRS)
        _internal_cache[filename] = cached
    return cached


def _display(filename: str) -> str:
    # Relative to the working directory when inside it, so listings are stable per checkout.
    path = os.path.abspath(filename)
    cwd = os.getcwd()
    if path.startswith(cwd + os.sep):
        return os.path.relpath(path, cwd)
    return filename


def user_source() -> SourceLocation | None:
    """The first stack frame outside lowerkit's tracing machinery (tracing, nn, ops, ir)."""
    frame = sys._getframe(1)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return SourceLocation(_display(frame.f_code.co_filename), frame.f_lineno)
        frame = frame.f_back
    return None
