"""The context a derivative rule writes its backward ops with.

A :class:`Vjp` is made for one forward node. It exposes the node's inputs and outputs by
schema name (``d.x``, ``d.weight``, ``d.out``), its attributes (``d.attrs``), the incoming
gradient of each output (``d.grad``, ``d.grads``) and, from :class:`~.builder.OpBuilder`,
helpers that append typed nodes to the backward graph (``d.emit("relu_grad", d.x, d.grad)``,
``d.mul(a, b)``, ``d.sum_to(v, like)``). Identical emissions within one node's rules are
shared, so a rule covering several inputs can be called once per input without duplicating work.
"""

from __future__ import annotations

from ..ir.node import Node, Value
from ..opset import get_schema
from .builder import Emitter, OpBuilder

__all__ = ["Emitter", "Vjp"]


class Vjp(OpBuilder):
    """What a rule sees of one forward node, and how it writes backward ops."""

    def __init__(self, emitter: Emitter, node: Node, grads: list[Value | None]) -> None:
        self._names = {name: i for i, name in enumerate(get_schema(node.op).inputs)}
        super().__init__(emitter, node, f"{node.outputs[0].name}_grad" if node.outputs else "grad")
        self.node = node
        self.attrs = node.attrs
        self._grads = grads

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
