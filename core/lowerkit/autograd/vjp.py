"""The context a derivative rule writes its backward ops with.

A :class:`Vjp` is made for one forward node. It exposes the node's inputs and outputs by
schema name (``d.x``, ``d.weight``, ``d.out``), its attributes (``d.attrs``), the incoming
gradient of each output (``d.grad``, ``d.grads``) and helpers that append typed nodes to the
backward graph (``d.emit("relu_grad", d.x, d.grad)``, ``d.mul(a, b)``, ``d.sum_to(v, like)``).
Identical emissions within one node's rules are shared, so a rule covering several inputs
can be called once per input without duplicating work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir.graph import Graph
from ..ir.node import Node, Value
from ..ir.types import TensorType
from ..opset import get_schema


class Emitter:
    """Appends nodes to the backward graph with fresh debug handles and a forward node's scope."""

    def __init__(self, graph: Graph, first_handle: int) -> None:
        self.graph = graph
        self.next_handle = first_handle

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any], *, like: Node | None,
             hint: str, num_outputs: int = 1) -> list[Value]:
        schema = get_schema(op)
        normalized = schema.normalize_attrs(attrs)
        if op == "constant":
            types = [TensorType.of(normalized["value"])]
        else:
            types = schema.infer([v.type for v in inputs], normalized)
        node = self.graph.add_node(
            op, list(inputs), types, normalized, output_hints=[hint] * len(types),
            debug_handle=self.next_handle, scope=like.scope if like else "",
            source=like.source if like else None,
        )
        self.next_handle += 1
        return node.outputs


class Vjp:
    """What a rule sees of one forward node, and how it writes backward ops."""

    def __init__(self, emitter: Emitter, node: Node, grads: list[Value | None]) -> None:
        self._emitter = emitter
        self.node = node
        self.attrs = node.attrs
        self._grads = grads
        self._memo: dict[tuple, list[Value]] = {}
        schema = get_schema(node.op)
        self._names = {name: i for i, name in enumerate(schema.inputs)}
        self._hint = f"{node.outputs[0].name}_grad" if node.outputs else "grad"

    # -- the forward node -------------------------------------------------------------
    @property
    def inputs(self) -> list[Value]:
        return self.node.inputs

    def has(self, name: str) -> bool:
        """Whether the (optional) input ``name`` is present."""
        return self._names[name] < len(self.node.inputs)

    def __getattr__(self, name: str) -> Value:
        names = self.__dict__.get("_names", {})
        if name in names:
            index = names[name]
            if index >= len(self.node.inputs):
                raise AttributeError(f"{self.node.op} node has no input {name!r}")
            return self.node.inputs[index]
        raise AttributeError(name)

    @property
    def out(self) -> Value:
        return self.node.outputs[0]

    @property
    def outs(self) -> list[Value]:
        return self.node.outputs

    @property
    def grad(self) -> Value:
        """The gradient of output 0 (zeros when the output does not reach the loss)."""
        return self.grad_of(0)

    def grad_of(self, index: int) -> Value:
        g = self._grads[index]
        return g if g is not None else self.zeros(self.node.outputs[index].type)

    @property
    def grads(self) -> list[Value | None]:
        """The gradient of every output, ``None`` where it does not reach the loss."""
        return list(self._grads)

    # -- emitting ---------------------------------------------------------------------
    def emit(self, op: str, *inputs: Value, num_outputs: int = 1, **attrs: Any) -> Any:
        """Append ``op(inputs, **attrs)``; returns its output (a tuple for several)."""
        key = (op, tuple(id(v) for v in inputs), _attr_key(attrs))
        outputs = self._memo.get(key)
        if outputs is None:
            outputs = self._emitter.emit(op, inputs, attrs, like=self.node, hint=self._hint)
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
