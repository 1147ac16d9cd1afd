"""How a call on a module is intercepted or executed: hooks that the layers above install.

The IR checks a call against a method's signature, but running a graph needs a backend
(``lowerkit.lowering`` installs the runner) and recording a call while tracing needs the
tracer (``lowerkit.tracing`` installs the interceptor). Both install themselves when they
are imported, which ``import lowerkit`` does, so the IR never imports a layer above it.

The hooks are process-wide slots rather than context variables: a context variable set at
import would be invisible to threads started later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import LowerkitError

__all__ = ["Interceptor", "GraphRunner", "Hint", "install", "intercept", "run_graph", "misuse_hint"]

Interceptor = Callable[[Any, str, Sequence[Any]], Any]
"""``(module, method, inputs) -> outputs``, or ``NotImplemented`` to let the call run."""

GraphRunner = Callable[[Any, str, list[np.ndarray]], list[np.ndarray]]
"""``(module, method, checked input arrays) -> output arrays`` for an un-lowered module."""

Hint = Callable[[object], str]
"""``(object given where a module belongs) -> "; do this instead"`` or ``""``."""

_interceptors: list[Interceptor] = []
_runner: list[GraphRunner] = []
_hints: list[Hint] = []


def install(
    *, interceptor: Interceptor | None = None, runner: GraphRunner | None = None, hint: Hint | None = None
) -> None:
    """Install hooks (idempotent: installing the same function twice keeps one)."""
    if interceptor is not None and interceptor not in _interceptors:
        _interceptors.append(interceptor)
    if runner is not None:
        _runner[:] = [runner]
    if hint is not None and hint not in _hints:
        _hints.append(hint)


def intercept(module: Any, method: str, inputs: Sequence[Any]) -> Any:
    """The first interceptor's result that is not ``NotImplemented``, else ``NotImplemented``."""
    for interceptor in _interceptors:
        result = interceptor(module, method, inputs)
        if result is not NotImplemented:
            return result
    return NotImplemented


def run_graph(module: Any, method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run an un-lowered method through the installed runner."""
    if not _runner:
        raise LowerkitError("no runtime is installed to run un-lowered modules; import lowerkit")
    return _runner[0](module, method, inputs)


def misuse_hint(obj: object) -> str:
    """What to do with ``obj``, given where a ``lowerkit.Module`` belongs (``""`` if unknown)."""
    for hint in _hints:
        text = hint(obj)
        if text:
            return text
    return ""
