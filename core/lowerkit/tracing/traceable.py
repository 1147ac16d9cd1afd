"""What the tracer needs of a module object: its submodules and parameters, by name.

``lowerkit.nn.Module`` implements it; the tracer depends on this interface, not on ``nn``
(which sits above the tracer and records its layers through ``lowerkit.ops``).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any

from .parameter import Parameter


class Traceable(abc.ABC):
    """A module whose methods ``lowerkit.trace`` can trace."""

    @abc.abstractmethod
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """``(qualified path, module)`` for this module and every submodule."""

    @abc.abstractmethod
    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(qualified name, parameter)`` for every parameter."""
