"""``Trainer``: run training steps lowered to backends.

The step is graph code from :mod:`lowerkit.autograd.train_graph`; the Trainer lowers it, so it
lives above lowering (and is installed into ``lowerkit.autograd`` as ``Trainer``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..autograd.optim import SGD
from ..autograd.train_graph import TrainStep, training_step
from ..errors import InputError
from ..ir.module import Module
from ..lowering.to_backend import to_backend

__all__ = ["Trainer"]


class Trainer:
    """Train ``module`` one lowered step at a time.

    ``loss`` is ``"cross_entropy"`` (integer labels), ``"mse"`` or a loss object;
    ``optimizer`` an :class:`~lowerkit.autograd.SGD` or :class:`~lowerkit.autograd.Adam`
    (default ``SGD(lr=0.01)``); ``backend`` a backend name or a priority list, as for
    :func:`lowerkit.to_backend`. Each :meth:`step` runs the ``train_step`` method of
    :attr:`lowered` on the batch, the current parameters and the optimizer state, and keeps the
    new ones; batches must have the shape ``module``'s method was traced with. A forward method
    whose last input is an ``i64[]`` dropout seed gets ``seed + step number`` at each step.
    """

    def __init__(self, module: Module, loss: object = "cross_entropy", optimizer: object = None,
                 backend: str | Sequence[str] = "reference", *, compile_spec: Mapping[str, Any] | None = None,
                 method: str = "forward", batch_norm_momentum: float = 0.1, seed: int = 0) -> None:
        if not isinstance(module, Module):
            raise InputError(f"Trainer expects a lowerkit.Module, got {type(module).__name__}")
        self._source = module
        self.optimizer = optimizer if optimizer is not None else SGD(lr=0.01)
        self.layout: TrainStep = training_step(module, loss=loss, optimizer=self.optimizer, method=method,
                                               batch_norm_momentum=batch_norm_momentum)
        self.lowered = to_backend(self.layout.module, backend, compile_spec)
        self.parameters = {n: np.array(module.parameters[n]) for n in self.layout.parameters}
        self.state = {n: np.array(a) for n, a in self.layout.state}
        self.steps = 0
        self.seed = int(seed)

    @property
    def step_module(self) -> Module:
        """The un-lowered step (method ``train_step``): print it, save it, lower it elsewhere."""
        return self.layout.module

    def step(self, x: Any, target: Any) -> float:
        """One update on batch ``(x, target)``; returns the loss before the update."""
        inputs = self.step_inputs(x, target)
        outputs = self.lowered.run("train_step", *inputs)
        n = len(self.parameters)
        self.parameters = dict(zip(self.parameters, outputs[1 : 1 + n]))
        self.state = dict(zip(self.state, outputs[1 + n :]))
        self.steps += 1
        return float(outputs[0])

    def step_inputs(self, x: Any, target: Any) -> list[np.ndarray]:
        """The ``train_step`` inputs for this batch and the current parameters and state."""
        data = [np.asarray(x)]
        if self.layout.seed_input:
            data.append(np.array(self.seed + self.steps, dtype=np.int64))
        target_type = self.layout.data_inputs[-1][1]
        target = np.asarray(target)
        if target_type.dtype == "i64" and target.dtype.kind in "iu":
            target = target.astype(np.int64, copy=False)
        return data + [target] + list(self.parameters.values()) + list(self.state.values())

    @property
    def module(self) -> Module:
        """The source module with the trained parameters (its methods unchanged)."""
        return Module(self.parameters, self._source.methods, self._source.submodules, name=self._source.name)
