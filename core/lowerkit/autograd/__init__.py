"""Reverse-mode differentiation of lowerkit graphs, from a table of derivatives.

- :data:`DERIVATIVES`: one entry per differentiable op, its vector-Jacobian product written
  as lowerkit ops (``rules_*.py``); :func:`derivative` adds one.
- :func:`grad`: a module with ``f"{method}_grad"`` (inputs, cotangents -> outputs, gradients).
- losses (:data:`cross_entropy`, :data:`mse`), optimizers (:class:`SGD`, :class:`Adam`) and
  :func:`training_step` as graph code; ``Trainer`` runs one lowered training step per call. It
  lives in :mod:`lowerkit.training` (it lowers, a floor above this one), which installs it here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import grad
    from .losses import CrossEntropy, MeanSquaredError, cross_entropy, mse
    from .optim import SGD, Adam
    from .reverse import missing_entries
    from .table import DERIVATIVES, Derivative, derivative
    from .train_graph import TrainStep, training_step

# Each public name is imported from its module on first use (``import lowerkit`` does not pay
# ~25 ms for a table of derivatives it may never need). The table's names go through
# ``reverse``, whose import registers the rules, so the table is never seen half filled.
_HOME = {
    "grad": "api", "CrossEntropy": "losses", "MeanSquaredError": "losses", "cross_entropy": "losses",
    "mse": "losses", "SGD": "optim", "Adam": "optim", "missing_entries": "reverse",
    "DERIVATIVES": "table", "Derivative": "table", "derivative": "table",
    "TrainStep": "train_graph", "training_step": "train_graph",
}

__all__ = [
    "DERIVATIVES", "Adam", "CrossEntropy", "Derivative", "MeanSquaredError", "SGD", "TrainStep", "Trainer",
    "cross_entropy", "derivative", "grad", "install", "install_from", "missing_entries", "mse", "training_step",
]


_INSTALLED: dict[str, Any] = {}
_PROVIDERS: dict[str, str] = {}  # name -> the module (a floor above) that installs it


def install(**names: Any) -> None:
    """Make names of the floors above available here: ``lowerkit.training`` installs ``Trainer``."""
    _INSTALLED.update(names)


def install_from(module: str, *names: str) -> None:
    """Import ``module`` on the first use of any of ``names``; importing it must install them.

    ``lowerkit/__init__.py`` says so for ``Trainer``: autograd never names the floors above
    it, and ``import lowerkit`` does not pay for the training package until it is used.
    """
    _PROVIDERS.update(dict.fromkeys(names, module))


def __getattr__(name: str) -> Any:
    if name in _HOME:
        importlib.import_module(f"{__name__}.reverse")  # the rules, registered in the table
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    if name not in _INSTALLED and name in _PROVIDERS:
        importlib.import_module(_PROVIDERS[name])
    if name in _INSTALLED:
        return _INSTALLED[name]
    if name == "Trainer":
        raise AttributeError("lowerkit.autograd.Trainer is installed by lowerkit.training (import lowerkit)")
    raise AttributeError(f"module 'lowerkit.autograd' has no attribute {name!r}")
