"""Building typed nodes into a graph: the helpers derivative rules, losses and optimizers use.

An :class:`OpBuilder` appends ``op(inputs, **attrs)`` nodes whose output types come from the
op's schema, with fresh debug handles and the scope and source line of the node they stand
for (``like``). Identical emissions through one builder are shared (``d.emit`` twice with the
same op, inputs and attributes gives one node).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir.graph import Graph
from ..ir.node import Node, Value
from ..ir.types import TensorType
from ..errors import LowerkitError
from ..opset import ShapeError, get_schema


class Emitter:
    """Appends nodes to the backward graph with fresh debug handles and a forward node's scope."""

    def __init__(self, graph: Graph, first_handle: int) -> None:
        self.graph = graph
        self.next_handle = first_handle

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any], *, like: Node | None,
             hint: str) -> list[Value]:
        schema = get_schema(op)
        try:
            normalized = schema.normalize_attrs(attrs)
            if op == "constant":
                types = [TensorType.of(normalized["value"])]
            else:
                types = schema.infer([v.type for v in inputs], normalized)
        except (ShapeError, TypeError, ValueError) as err:  # a derivative rule built a bad node
            where = f" for {like.where()}" if like is not None else ""
            raise LowerkitError(f"backward op {op}{where} is ill-formed: {err}") from None
        node = self.graph.add_node(
            op, list(inputs), types, normalized, output_hints=[hint] * len(types),
            debug_handle=self.next_handle, scope=like.scope if like else "",
            source=like.source if like else None,
        )
        self.next_handle += 1
        return node.outputs


class OpBuilder:
    """Appends typed nodes through an :class:`Emitter`, standing for node ``like`` (or none)."""

    def __init__(self, emitter: Emitter, like: Node | None = None, hint: str = "v") -> None:
        self._emitter = emitter
        self._like = like
        self._hint = hint
        self._memo: dict[tuple, list[Value]] = {}

    # -- emitting ---------------------------------------------------------------------
    def emit(self, op: str, *inputs: Value, **attrs: Any) -> Any:
        """Append ``op(inputs, **attrs)``; returns its output (a tuple for several)."""
        key = (op, tuple(inputs), _attr_key(attrs))  # values hash by identity
        outputs = self._memo.get(key)
        if outputs is None:
            outputs = self._emitter.emit(op, inputs, attrs, like=self._like, hint=self._hint)
            self._memo[key] = outputs
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def const(self, value: float | np.ndarray, like: Value | TensorType) -> Value:
        """A constant of ``like``'s dtype (a 0-d scalar when ``value`` is a number)."""
        dtype = (like.type if isinstance(like, Value) else like).numpy_dtype
        array = np.array(value, dtype=dtype)
        array.flags.writeable = False
        return self.emit("constant", value=array)

    def zeros(self, type: TensorType) -> Value:
        return self.emit("expand", self.const(0.0, type), shape=type.shape)

    def add(self, a: Value, b: Value) -> Value:
        return self.emit("add", a, b)

    def sub(self, a: Value, b: Value) -> Value:
        return self.emit("sub", a, b)

    def mul(self, a: Value, b: Value) -> Value:
        return self.emit("mul", a, b)

    def div(self, a: Value, b: Value) -> Value:
        return self.emit("div", a, b)

    def neg(self, a: Value) -> Value:
        return self.emit("neg", a)

    def scale(self, a: Value, factor: float) -> Value:
        return self.mul(a, self.const(factor, a))

    def reshape(self, a: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return a if a.type.shape == shape else self.emit("reshape", a, shape=shape)

    def transpose(self, a: Value, perm: Sequence[int]) -> Value:
        perm = tuple(int(p) for p in perm)
        return a if perm == tuple(range(len(perm))) else self.emit("transpose", a, perm=perm)

    def swap_last(self, a: Value) -> Value:
        perm = list(range(a.type.rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        return self.transpose(a, perm)

    def sum_to(self, a: Value, like: Value | Sequence[int]) -> Value:
        """``a`` summed down to ``like``'s shape (the gradient of broadcasting to a's shape)."""
        shape = tuple(like.type.shape if isinstance(like, Value) else like)
        return a if a.type.shape == shape else self.emit("sum_to_shape", a, shape=shape)

    def expand(self, a: Value, shape: Sequence[int]) -> Value:
        shape = tuple(shape)
        return a if a.type.shape == shape else self.emit("expand", a, shape=shape)

    def per_channel(self, v: Value, rank: int) -> Value:
        """A ``[C]`` vector as ``[1, C, 1, ...]`` of ``rank`` dims (to broadcast over dim 1)."""
        return self.reshape(v, (1, v.type.shape[0]) + (1,) * (rank - 2))


def _attr_key(attrs: dict[str, Any]) -> tuple:
    items = []
    for k, v in sorted(attrs.items()):
        if isinstance(v, np.ndarray):
            v = (v.dtype.str, v.shape, v.tobytes())
        elif isinstance(v, list):
            v = tuple(v)
        items.append((k, v))
    return tuple(items)
