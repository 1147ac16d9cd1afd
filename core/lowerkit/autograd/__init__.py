"""Reverse-mode differentiation of lowerkit graphs, from a table of derivatives.

- :data:`DERIVATIVES`: one entry per differentiable op, its vector-Jacobian product written
  as lowerkit ops (``rules_*.py``); :func:`derivative` adds one.
- :func:`grad`: a module with ``f"{method}_grad"`` (inputs, cotangents -> outputs, gradients).
- losses (:func:`cross_entropy`, :func:`mse`) and optimizers (:class:`SGD`, :class:`Adam`) as
  graph code; :class:`Trainer` (defined in :mod:`lowerkit.training`, above lowering) runs one
  lowered training step per call.
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
    "cross_entropy", "derivative", "grad", "missing_entries", "mse", "training_step",
]


def __getattr__(name: str) -> Any:
    # Trainer lowers to backends, a layer above this package: imported on first use only.
    if name == "Trainer":
        from ..training import Trainer

        return Trainer
    raise AttributeError(f"module 'lowerkit.autograd' has no attribute {name!r}")
