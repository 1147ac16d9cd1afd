"""Per-size specialisations for backends that compile for static shapes.

A backend whose compiled form depends on every size (a static memory plan, per-shape
workspaces) keeps one compiled handle per binding of a method's symbolic dims (the batch
size), built on first use and kept in a bounded least-recently-used table. Thread-safe:
one lock guards the table, so concurrent first calls of one size build it once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..ir.module import Signature
from ..ir.specialize import bind_sizes

__all__ = ["DEFAULT_MAX_SPECIALIZATIONS", "Specializations", "max_specializations_option"]

DEFAULT_MAX_SPECIALIZATIONS = 8


def max_specializations_option(backend: str, method: str, value: Any) -> int:
    """Check a ``max_specializations`` compile option (a positive int; ``None`` means the default)."""
    if value is None:
        return DEFAULT_MAX_SPECIALIZATIONS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(
            f"{backend} compile_spec for method {method!r}: max_specializations must be a positive "
            f"int, got {value!r}"
        )
    return value


class Specializations:
    """Handles of one method, one per size binding, at most ``limit`` kept (LRU).

    ``build(sizes)`` compiles the method for ``sizes`` (``{"N": 8}``); ``release(handle)``,
    if given, frees an evicted one. ``get(inputs)`` returns the handle for the inputs' sizes.
    """

    def __init__(
        self,
        method: str,
        signature: Signature,
        build: Callable[[dict[str, int]], Any],
        limit: int = DEFAULT_MAX_SPECIALIZATIONS,
        release: Callable[[Any], None] | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.method = method
        self.signature = signature
        self.limit = limit
        self._build = build
        self._release = release
        self._table: OrderedDict[tuple[tuple[str, int], ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0  # how many specialisations were compiled (evictions make it grow)

    def get(self, inputs: Sequence[np.ndarray]) -> Any:
        sizes = bind_sizes(self.method, self.signature, inputs)
        key = tuple(sorted(sizes.items()))
        with self._lock:
            handle = self._table.get(key)
            if handle is not None:
                self._table.move_to_end(key)
                return handle
            handle = self._build(sizes)
            self.builds += 1
            self._table[key] = handle
            while len(self._table) > self.limit:
                _, old = self._table.popitem(last=False)
                if self._release is not None:
                    self._release(old)
            return handle

    def sizes(self) -> list[dict[str, int]]:
        """The size bindings compiled now, least recently used first."""
        with self._lock:
            return [dict(k) for k in self._table]

    def close(self) -> None:
        with self._lock:
            handles = list(self._table.values())
            self._table.clear()
        if self._release is not None:
            for h in handles:
                self._release(h)
