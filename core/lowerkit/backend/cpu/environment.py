"""Settings read from the environment, checked: :func:`whole_number`."""

from __future__ import annotations

import os

from lowerkit.errors import InputError


def whole_number(name: str, default: int, unit: str) -> int:
    """``$name`` as a whole number (0 or more), else ``default`` when unset or blank; anything
    else is an :class:`~lowerkit.errors.InputError` naming the variable, the ``unit`` it counts
    (e.g. ``"bytes (0 turns recycling off)"``) and the value given."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise InputError(f"${name} must be a whole number of {unit}, got {text!r}")
    return int(text)
