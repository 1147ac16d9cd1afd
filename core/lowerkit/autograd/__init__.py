"""Reverse-mode differentiation of lowerkit graphs, from a table of derivatives.

- :data:`DERIVATIVES`: one entry per differentiable op, its vector-Jacobian product written
  as lowerkit ops (``rules_*.py``); :func:`derivative` adds one.
- :func:`grad`: a module with ``f"{method}_grad"`` (inputs, cotangents -> outputs, gradients).
- losses (:data:`cross_entropy`, :data:`mse`), optimizers (:class:`SGD`, :class:`Adam`) and
  :func:`training_step` as graph code; ``Trainer`` runs one lowered training step per call. It
  lives in :mod:`lowerkit.training` (it lowers, a floor above this one), which installs it here.
"""

from __future__ import annotations

from typing import Any

from .api import grad
from .losses import CrossEntropy, MeanSquaredError, cross_entropy, mse
from .optim import SGD, Adam
from .reverse import missing_entries
from .table import DERIVATIVES, Derivative, derivative
from .train_graph import TrainStep, training_step

__all__ = [
    "DERIVATIVES", "Adam", "CrossEntropy", "Derivative", "MeanSquaredError", "SGD", "TrainStep", "Trainer",
    "cross_entropy", "derivative", "grad", "install", "missing_entries", "mse", "training_step",
]


_INSTALLED: dict[str, Any] = {}


def install(**names: Any) -> None:
    """Make names of the floors above available here: ``lowerkit.training`` installs ``Trainer``."""
    _INSTALLED.update(names)


def __getattr__(name: str) -> Any:
    if name in _INSTALLED:
        return _INSTALLED[name]
    if name == "Trainer":
        raise AttributeError("lowerkit.autograd.Trainer is installed by lowerkit.training (import lowerkit)")
    raise AttributeError(f"module 'lowerkit.autograd' has no attribute {name!r}")
