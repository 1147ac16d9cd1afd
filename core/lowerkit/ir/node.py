"""Values and nodes: the pieces a graph is made of.

A :class:`Value` is bound exactly once, by a graph input or by one node output (SSA).
A :class:`Node` applies an op from the registry (:mod:`lowerkit.opset`) to input values
and binds fresh output values. Nodes carry where they came from: a debug handle unique in
their module, the module scope (``layer1.0.conv1``) and the source location that made them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

from .types import TensorType

# An attribute value. Lists are stored as tuples so nodes can be compared and hashed.
AttrValue = Union[int, float, bool, str, tuple[int, ...], tuple[float, ...], np.ndarray]


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """Where in user code a node was created."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(eq=False, slots=True)
class Value:
    """A named, typed SSA value. Identity matters: two values are equal only if they are one."""

    name: str
    type: TensorType

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


@dataclass(eq=False, slots=True)
class Node:
    """One op application: ``outputs = op(inputs, **attrs)``."""

    op: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    debug_handle: int = -1
    scope: str = ""
    source: SourceLocation | None = None

    @property
    def output(self) -> Value:
        """The single output of a one-output node."""
        if len(self.outputs) != 1:
            raise ValueError(f"node {self.op} has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    def where(self) -> str:
        """A short human description: op, scope and source line, for error messages."""
        parts = [f"node {self.op} #{self.debug_handle}"]
        if self.scope:
            parts.append(f"in {self.scope}")
        if self.source is not None:
            parts.append(f"at {self.source}")
        return " ".join(parts)

    def __repr__(self) -> str:
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        return f"<Node {outs} = {self.op}({ins}) #{self.debug_handle}>"
