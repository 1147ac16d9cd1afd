"""A method's body: SSA values bound by inputs and nodes, nodes in topological order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .names import Namespace
from .node import AttrValue, Node, SourceLocation, Value
from .types import TensorType


class Graph:
    """Inputs, nodes in topological order, and outputs.

    Build with :meth:`add_input`, :meth:`add_node` and :meth:`set_outputs`; all value
    names come from the graph's :class:`Namespace`. Passes may edit ``nodes`` in place
    and call :meth:`replace_all_uses`; run :func:`lowerkit.ir.verify` afterwards.
    """

    def __init__(self) -> None:
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.namespace = Namespace()

    # -- building -------------------------------------------------------------------
    def add_input(self, hint: str, type: TensorType) -> Value:
        value = Value(self.namespace.create(hint), type)
        self.inputs.append(value)
        return value

    def add_node(
        self,
        op: str,
        inputs: Sequence[Value],
        output_types: Sequence[TensorType],
        attrs: dict[str, AttrValue] | None = None,
        *,
        output_hints: Sequence[str] | None = None,
        debug_handle: int = -1,
        scope: str = "",
        source: SourceLocation | None = None,
        index: int | None = None,
    ) -> Node:
        """Append (or insert at ``index``) a node binding fresh outputs of the given types."""
        hints = list(output_hints) if output_hints else [op] * len(output_types)
        outputs = [Value(self.namespace.create(h), t) for h, t in zip(hints, output_types)]
        node = Node(op, list(inputs), outputs, dict(attrs or {}), debug_handle, scope, source)
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        return node

    def set_outputs(self, outputs: Iterable[Value]) -> None:
        self.outputs = list(outputs)

    # -- queries and edits ------------------------------------------------------------
    def producers(self) -> dict[Value, Node]:
        """``value -> node`` for every node output."""
        return {v: n for n in self.nodes for v in n.outputs}

    def users(self) -> dict[Value, list[Node]]:
        """``value -> nodes that read it`` (graph outputs are not nodes)."""
        result: dict[Value, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                result.setdefault(v, []).append(node)
        return result

    def copy(self) -> Graph:
        """A structural copy: fresh values and nodes with the same names, types and attributes.

        Each node gets its own ``attrs`` dict, but attribute values are shared, not copied:
        they are immutable (numbers, strings, tuples) or read-only arrays (``constant``
        tensors). Parameters are not part of a graph (``param`` nodes name them), so the copy
        reads the same parameters as the original. The namespace is copied too, so names
        created later in the copy are those the original would create. A value that no input
        or node binds (a graph that would not verify) is kept as it is, not copied.
        """
        new = Graph()
        new.namespace = self.namespace.copy()
        mapping: dict[Value, Value] = {}

        def fresh(v: Value) -> Value:
            mapping[v] = Value(v.name, v.type)
            return mapping[v]

        new.inputs = [fresh(v) for v in self.inputs]
        for node in self.nodes:
            inputs = [mapping.get(v, v) for v in node.inputs]
            outputs = [fresh(v) for v in node.outputs]
            new.nodes.append(
                Node(node.op, inputs, outputs, dict(node.attrs), node.debug_handle, node.scope, node.source)
            )
        new.outputs = [mapping.get(v, v) for v in self.outputs]
        return new

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every node input and graph output that reads ``old`` read ``new``."""
        for node in self.nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        from .printer import format_graph

        return format_graph(self)
