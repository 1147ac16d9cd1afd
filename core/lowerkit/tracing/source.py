"""Finding the user's source line that created a node."""

from __future__ import annotations

import os
import sys

from ..ir.node import SourceLocation

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Model definitions shipped in the package are user-level code: their lines are the
# useful ones (``lowerkit/models.py:88``), not the caller of ``trace``.
_MODEL_CODE = (os.path.join(_PKG_DIR, "models.py"), os.path.join(_PKG_DIR, "models") + os.sep)
_internal_cache: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    cached = _internal_cache.get(filename)
    if cached is None:
        path = os.path.abspath(filename)
        cached = path.startswith(_PKG_DIR + os.sep) and not path.startswith(_MODEL_CODE)
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
    """The first stack frame outside the lowerkit package (shipped models count as outside)."""
    frame = sys._getframe(1)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return SourceLocation(_display(frame.f_code.co_filename), frame.f_lineno)
        frame = frame.f_back
    return None
