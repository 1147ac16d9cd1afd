"""The one naming authority for values: valid, unique, deterministic names."""

from __future__ import annotations

import re

_INVALID = re.compile(r"[^A-Za-z0-9_]")


class Namespace:
    """Hands out unique value names from hints: ``conv1_out``, ``conv1_out_1``, ...

    Names are made of letters, digits and ``_`` and never start with a digit, so the
    text form can print them bare after ``%``.
    """

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._next_suffix: dict[str, int] = {}

    def reserve(self, name: str) -> None:
        """Mark an existing name as taken (when building around a parsed graph)."""
        self._used.add(name)

    def copy(self) -> Namespace:
        """An independent namespace with the same names taken (and the same next suffixes)."""
        new = Namespace()
        new._used = set(self._used)
        new._next_suffix = dict(self._next_suffix)
        return new

    def create(self, hint: str = "v") -> str:
        base = _INVALID.sub("_", hint) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base not in self._used:
            self._used.add(base)
            return base
        suffix = self._next_suffix.get(base, 1)
        while f"{base}_{suffix}" in self._used:
            suffix += 1
        self._next_suffix[base] = suffix + 1
        name = f"{base}_{suffix}"
        self._used.add(name)
        return name
