"""Training steps lowered to backends: :class:`Trainer`.

The autograd floor builds the step as graph code; running it needs lowering, a floor above.
Importing this package installs ``Trainer`` into :mod:`lowerkit.autograd` (as the tracer and
the runtime install their hooks into the IR), so ``lowerkit.autograd.Trainer`` is the public
name and ``import lowerkit`` makes it available.
"""

from __future__ import annotations

from ..autograd import install
from .trainer import Trainer

install(Trainer=Trainer)

__all__ = ["Trainer"]
