"""The ATen importer registry: ATen overload name -> function building lowerkit nodes.

Each importer is one small function in ``_aten_ops.py`` registered by decorator, so adding an
op touches exactly one place. Keys are the overloads' printed names (``aten.convolution.default``,
``<built-in function getitem>`` for Python's ``operator`` functions), so the registry is
readable without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class AtenImporter:
    """How one ATen overload is imported."""

    name: str
    fn: Callable[..., Any]
    #: Kept whole instead of decomposed by ``run_decompositions`` when the ``lowerkit.ops``
    #: functions it needs exist (``linear``, ``hardswish``, ``gelu``, ...): one fused op
    #: instead of its pieces.
    preserve: bool = False
    #: The ``lowerkit.ops`` functions the importer calls; without them the overload is
    #: neither kept whole nor importable (listed as unsupported).
    requires: tuple[str, ...] = ()

    def available(self) -> bool:
        from ..tracing import ops

        return all(hasattr(ops, name) for name in self.requires)


IMPORTERS: dict[str, AtenImporter] = {}


def aten(*names: str, preserve: bool = False, requires: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Register the decorated ``fn(ctx, *args, **kwargs)`` as the importer of ATen overloads.

    ``fn`` receives the node's arguments in ATen's order, tensors as traced lowerkit tensors,
    compile-time tensors as numpy arrays, and returns a traced tensor, a Python value, or a
    tuple of them for multi-output overloads (read by ``getitem``).
    """

    def decorate(fn: F) -> F:
        for name in names:
            if name in IMPORTERS:
                raise ValueError(f"ATen importer for {name!r} is registered twice")
            IMPORTERS[name] = AtenImporter(name, fn, preserve, tuple(requires))
        return fn

    return decorate


def supported(name: str) -> bool:
    """Whether ATen overload ``name`` can be imported with the ops lowerkit has."""
    entry = IMPORTERS.get(name)
    return entry is not None and entry.available()


def covered() -> list[AtenImporter]:
    """Every registered importer, sorted by overload name (for docs/torch.md)."""
    from . import _aten_ops, _aten_shape  # noqa: F401  (register the importers)

    return [IMPORTERS[name] for name in sorted(IMPORTERS)]
