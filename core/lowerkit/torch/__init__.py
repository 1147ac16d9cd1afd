"""PyTorch front end: import ``torch.export`` programs (optional extra ``lowerkit[torch]``).

``lowerkit.torch.load(model, example_inputs)`` exports a ``torch.nn.Module`` with
``torch.export.export`` (in eval mode), or takes an ``ExportedProgram`` as is, decomposes it to
the core ATen op set and imports it as a :class:`lowerkit.Module`. ``import lowerkit`` never
imports this package, and this package imports ``torch`` only when one of its functions runs.
See ``docs/torch.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._deps import TorchNotInstalledError

if TYPE_CHECKING:  # pragma: no cover
    from ..ir import Module

__all__ = ["TorchNotInstalledError", "load", "supported_aten_ops"]


def load(model: Any, example_inputs: Any = None, *, name: str | None = None) -> Module:
    """Import a ``torch.nn.Module`` or ``torch.export.ExportedProgram`` as a lowerkit Module.

    ``example_inputs`` (a tensor/array or a tuple of them) fixes the input shapes: a module is
    exported on them, and a program with a dynamic (symbolic) batch dim is pinned to their
    size (optional for a program that stores its example inputs). The module has one method,
    ``forward``, taking the program's tensor inputs in order (named as in ``forward``'s
    signature) and returning its outputs; parameters and buffers become module parameters
    under their state-dict names (``layer1.0.conv1.weight``). Every node keeps the module
    scope and the user source line it was exported from.

    Raises ``TorchNotInstalledError`` without torch, ``InputError`` for bad arguments or a
    model ``torch.export`` rejects, and ``UnsupportedOperatorError`` listing every ATen node
    that cannot be imported (with scope and source line).
    """
    from ._importer import load as _load

    return _load(model, example_inputs, name=name)


def supported_aten_ops() -> list[str]:
    """The ATen overloads lowerkit imports with the ops it has now, sorted."""
    from ._registry import covered

    return [entry.name for entry in covered() if entry.available()]
