"""Small queries and edits that passes share (public: backends' own passes use them too)."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, TensorType, Value


def single_user(graph: Graph, value: Value, users: dict[Value, list[Node]]) -> Node | None:
    """The only node reading ``value``, if exactly one does (once) and it is not a graph output."""
    readers = users.get(value, [])
    if len(readers) != 1 or any(v is value for v in graph.outputs):
        return None
    if sum(1 for v in readers[0].inputs if v is value) != 1:
        return None
    return readers[0]


def const_value(node: Node | None) -> np.ndarray | None:
    """The array of a ``constant`` node, else ``None``."""
    if node is not None and node.op == "constant":
        return node.attrs["value"]  # type: ignore[return-value]
    return None


def _fresh_handle(graph: Graph) -> int:
    return max((n.debug_handle for n in graph.nodes), default=0) + 1


def make_constant(graph: Graph, array: np.ndarray, hint: str, index: int, like: Node | None = None) -> Value:
    """Insert a ``constant`` node at ``index`` holding ``array`` (made read-only); its value.

    ``like`` lends the new node its scope and source line. Debug handles are unique in a
    graph, so the constant gets a fresh one (one past the largest) when ``like`` has one.
    """
    array = np.asarray(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
    array.flags.writeable = False
    node = graph.add_node(
        "constant",
        [],
        [TensorType.of(array)],
        {"value": array},
        output_hints=[hint],
        index=index,
        scope=like.scope if like is not None else "",
        debug_handle=_fresh_handle(graph) if like is not None and like.debug_handle >= 0 else -1,
        source=like.source if like is not None else None,
    )
    return node.output
