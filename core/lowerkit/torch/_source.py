"""Where an exported node came from: module scope (``nn_module_stack``) and user source line
(``stack_trace``), read from the node's ``meta``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ..ir.node import SourceLocation

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
# Old torch.export spelled paths as Python expressions: L['self'].layer1[0], getattr(..., '0').
_SELF = re.compile(r"^L\['self'\]\.?|^L__self___?")
_INDEX = re.compile(r"\[(\d+)\]")
_GETATTR = re.compile(r"getattr\((.+?), '([^']+)'\)")


def scope_of(meta: Mapping[str, Any]) -> str:
    """The qualified path of the innermost module (``layer1.0.conv1``; ``""`` at the top)."""
    stack = meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return normalize_path(str(path))


def normalize_path(path: str) -> str:
    """``L['self'].layer1[0].conv1`` or ``layer1.0.conv1`` -> ``layer1.0.conv1``."""
    while _GETATTR.search(path):
        path = _GETATTR.sub(r"\1.\2", path)
    path = _SELF.sub("", path)
    path = _INDEX.sub(r".\1", path)
    return path.strip(".")


def _is_library(path: str, library_dirs: tuple[str, ...]) -> bool:
    return os.path.abspath(path).startswith(library_dirs)


def source_of(meta: Mapping[str, Any], library_dirs: tuple[str, ...]) -> SourceLocation | None:
    """The innermost frame of ``stack_trace`` outside torch (the user's line), if any."""
    trace = meta.get("stack_trace") or ""
    frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(trace)]
    user = [f for f in frames if not _is_library(f[0], library_dirs)]
    if not user:
        return None
    file, line = user[-1]
    return SourceLocation(_display(file), line)


def _display(path: str) -> str:
    # Relative to the working directory when inside it, as lowerkit.trace shows paths.
    full = os.path.abspath(path)
    cwd = os.getcwd()
    if full.startswith(cwd + os.sep):
        return os.path.relpath(full, cwd)
    return path
