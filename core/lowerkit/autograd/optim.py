"""Optimizers as graph code: each appends the nodes of one update of one parameter.

State lives outside the graph: per-parameter buffers (``momentum_buffer``, ``exp_avg``,
``exp_avg_sq``) and shared scalars (Adam's ``step``) are inputs of the training step and
their new values are outputs, so a step is a pure function that any backend can run.
The updates follow torch.optim's formulas (weight decay added to the gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..ir.node import Value
from ..ir.types import TensorType
from .builder import OpBuilder


def _positive(name: str, value: float, *, allow_zero: bool = True) -> float:
    value = float(value)
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


@dataclass(frozen=True)
class SGD:
    """torch.optim.SGD without dampening: ``buf = momentum * buf + (g + wd * p); p -= lr * buf``."""

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        _positive("SGD lr", self.lr, allow_zero=False)
        _positive("SGD momentum", self.momentum)
        _positive("SGD weight_decay", self.weight_decay)
        if self.nesterov and self.momentum == 0:
            raise InputError("SGD nesterov needs a momentum > 0")

    def shared_state(self) -> list[tuple[str, np.ndarray]]:
        return []

    def state(self, param: TensorType) -> list[tuple[str, np.ndarray]]:
        return [("momentum_buffer", np.zeros(param.shape, param.numpy_dtype))] if self.momentum else []

    def begin(self, b: OpBuilder, shared: list[Value]) -> tuple[list[Value], object]:
        return [], None

    def update(self, b: OpBuilder, param: Value, grad: Value, state: list[Value], context: object):
        g = b.add(grad, b.scale(param, self.weight_decay)) if self.weight_decay else grad
        new_state = []
        if self.momentum:
            buf = b.add(b.scale(state[0], self.momentum), g)
            new_state = [buf]
            g = b.add(g, b.scale(buf, self.momentum)) if self.nesterov else buf
        return b.sub(param, b.scale(g, self.lr)), new_state


@dataclass(frozen=True)
class Adam:
    """torch.optim.Adam (no amsgrad): bias-corrected first and second moments."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _positive("Adam lr", self.lr, allow_zero=False)
        _positive("Adam eps", self.eps)
        _positive("Adam weight_decay", self.weight_decay)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise InputError(f"Adam betas must be two values in [0, 1), got {self.betas}")

    def shared_state(self) -> list[tuple[str, np.ndarray]]:
        return [("step", np.zeros((), np.float32))]

    def state(self, param: TensorType) -> list[tuple[str, np.ndarray]]:
        zeros = np.zeros(param.shape, param.numpy_dtype)
        return [("exp_avg", zeros), ("exp_avg_sq", zeros.copy())]

    def begin(self, b: OpBuilder, shared: list[Value]) -> tuple[list[Value], object]:
        """Advance the step; the bias corrections are shared by every parameter's update."""
        step = b.add(shared[0], b.const(1.0, shared[0]))
        b1, b2 = self.betas
        correction1 = b.sub(b.const(1.0, step), b.emit("pow", b.const(b1, step), step))
        correction2 = b.sub(b.const(1.0, step), b.emit("pow", b.const(b2, step), step))
        return [step], (correction1, b.emit("sqrt", correction2))

    def update(self, b: OpBuilder, param: Value, grad: Value, state: list[Value], context: object):
        correction1, correction2_sqrt = context  # type: ignore[misc]
        b1, b2 = self.betas
        g = b.add(grad, b.scale(param, self.weight_decay)) if self.weight_decay else grad
        m = b.add(b.scale(state[0], b1), b.scale(g, 1 - b1))
        v = b.add(b.scale(state[1], b2), b.scale(b.mul(g, g), 1 - b2))
        denom = b.add(b.div(b.emit("sqrt", v), _like(b, correction2_sqrt, param)), b.const(self.eps, param))
        step_size = b.div(b.const(self.lr, param), _like(b, correction1, param))
        return b.sub(param, b.mul(step_size, b.div(m, denom))), [m, v]


def _like(b: OpBuilder, scalar: Value, param: Value) -> Value:
    """A shared f32 scalar in the parameter's dtype (one dtype per op)."""
    if scalar.type.dtype == param.type.dtype:
        return scalar
    raise InputError(f"Adam keeps its step in {scalar.type.dtype}; parameter %{param.name} is {param.type}")
