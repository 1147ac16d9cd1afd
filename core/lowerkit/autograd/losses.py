"""Losses as graph code: each appends nodes computing a scalar from a prediction and a target.

``cross_entropy``: logits ``[N, C]`` and integer labels ``i64[N]``, the mean over the batch of
``-log_softmax(logits)[label]`` (torch.nn.functional.cross_entropy's default). ``mse``: the mean
of ``(prediction - target) ** 2`` over every element (torch's mse_loss).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..ir.node import Value
from ..ir.types import TensorType
from .builder import OpBuilder


@dataclass(frozen=True, slots=True)
class CrossEntropy:
    """Mean cross entropy of logits ``[N, C]`` against integer class labels ``[N]``."""

    name: str = "cross_entropy"

    def target_type(self, prediction: TensorType) -> TensorType:
        if prediction.rank != 2:
            raise InputError(f"cross_entropy expects logits [N, C], got {prediction}")
        return TensorType("i64", prediction.shape[:1])

    def build(self, b: OpBuilder, logits: Value, labels: Value) -> Value:
        n, classes = logits.type.shape
        log_probs = b.emit("log_softmax", logits, dim=-1)
        picked = b.mul(b.emit("one_hot", labels, num_classes=classes, dtype=logits.type.dtype), log_probs)
        return b.scale(b.emit("reduce_sum", picked, dims=()), -1.0 / n)


@dataclass(frozen=True, slots=True)
class MeanSquaredError:
    """Mean of the squared difference over every element."""

    name: str = "mse"

    def target_type(self, prediction: TensorType) -> TensorType:
        return prediction

    def build(self, b: OpBuilder, prediction: Value, target: Value) -> Value:
        diff = b.sub(prediction, target)
        return b.emit("reduce_mean", b.mul(diff, diff), dims=())


cross_entropy = CrossEntropy()
mse = MeanSquaredError()
LOSSES = {"cross_entropy": cross_entropy, "mse": mse}


def get_loss(loss: object):
    """A loss object from a name (``"cross_entropy"``, ``"mse"``) or a loss object itself."""
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise InputError(f"unknown loss {loss!r}; expected one of {sorted(LOSSES)} or a loss object")
        return LOSSES[loss]
    if not (hasattr(loss, "build") and hasattr(loss, "target_type")):
        raise InputError(f"loss must be a name {sorted(LOSSES)} or an object with build() and target_type(), got {loss!r}")
    return loss
