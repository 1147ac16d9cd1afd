"""Functional ops of training graphs: ``dropout`` with an explicit seed and ``one_hot``.

Re-exported by :mod:`lowerkit.ops`. ``dropout`` is active whenever its node runs (there is no
training flag in a graph): a method that uses it takes the seed as an ``i64[]`` input, and
:class:`lowerkit.autograd.Trainer` feeds a fresh seed at every step.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from .state import current_builder
from .tensor import TracedTensor

__all__ = ["dropout", "one_hot"]


def _apply(fn: str, op: str, operands: list[Any], attrs: dict[str, object]) -> TracedTensor:
    builder = current_builder()
    if builder is None:
        raise InputError(f"lowerkit.ops.{fn} was called outside lowerkit.trace; ops record graph nodes")
    return builder.apply(op, operands, attrs)


def dropout(input: Any, seed: Any, p: float = 0.5) -> TracedTensor:
    """``input * mask / (1 - p)``, the mask drawn from ``seed`` (an ``i64[]`` tensor)."""
    return _apply("dropout", "dropout", [input, seed], {"p": p})


def one_hot(labels: Any, num_classes: int, dtype: str = "f32") -> TracedTensor:
    """Rows of the identity for integer ``labels`` (as torch.nn.functional.one_hot, in ``dtype``)."""
    return _apply("one_hot", "one_hot", [labels], {"num_classes": num_classes, "dtype": dtype})
