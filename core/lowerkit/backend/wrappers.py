"""Cross-cutting wrapper plugins (profiling, tracing) installed in every backend's manager.

The table is the registry's: :func:`add_wrapper` registers a factory in every loaded
backend now and in every backend loaded later (each :class:`~.manager.Backend` reads the
table it was given when it loads).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

__all__ = ["WrapperFactory", "WrapperTable", "WRAPPERS"]

WrapperFactory = Callable[[str], object]
"""``factory(backend_name) -> plugin`` holding pluggy wrapper implementations."""


class WrapperTable:
    """Wrapper factories by key, and the backends that must hear of changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._factories: dict[int, WrapperFactory] = {}
        self._keys = itertools.count(1)
        self._listeners: list[Callable[[int, WrapperFactory | None], None]] = []

    def items(self) -> list[tuple[int, WrapperFactory]]:
        with self._lock:
            return list(self._factories.items())

    def listen(self, listener: Callable[[int, WrapperFactory | None], None]) -> None:
        """``listener(key, factory)`` on every add, ``listener(key, None)`` on every removal."""
        self._listeners.append(listener)

    def add(self, factory: WrapperFactory) -> Callable[[], None]:
        """Install ``factory`` everywhere; returns the function that removes it again."""
        with self._lock:
            key = next(self._keys)
            self._factories[key] = factory
        for listener in self._listeners:
            listener(key, factory)

        def remove() -> None:
            with self._lock:
                self._factories.pop(key, None)
            for listener in self._listeners:
                listener(key, None)

        return remove


WRAPPERS = WrapperTable()
