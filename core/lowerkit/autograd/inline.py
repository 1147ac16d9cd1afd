"""Inlining ``call`` nodes of a module's own methods, so reverse mode sees one flat graph."""

from __future__ import annotations

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.module import GraphMethod, Module
from ..ir.node import Node, Value


def inline_calls(graph: Graph, module: Module, method: str) -> Graph:
    """Replace every ``call`` of a method of ``module`` (``module=""``) by that method's nodes, in place.

    Calls into submodules are refused with an :class:`~lowerkit.errors.InputError`: their
    parameters live in another module (lowered ones have no graph at all).
    """
    while any(n.op == "call" for n in graph.nodes):
        at = next(i for i, n in enumerate(graph.nodes) if n.op == "call")
        node = graph.nodes[at]
        callee = module.methods.get(str(node.attrs["method"])) if node.attrs.get("module", "") == "" else None
        if not isinstance(callee, GraphMethod):
            raise InputError(
                f"method {method!r}: grad differentiates calls of this module's own graph methods only; "
                f"{node.where()} calls {node.attrs.get('module') or 'this module'}.{node.attrs['method']}"
            )
        graph.nodes[at : at + 1] = _copy_body(graph, callee.graph, node)
    return graph


def _copy_body(graph: Graph, body: Graph, call: Node) -> list[Node]:
    mapping: dict[Value, Value] = dict(zip(body.inputs, call.inputs))
    nodes = []
    for n in body.nodes:
        outputs = [Value(graph.namespace.create(v.name), v.type) for v in n.outputs]
        mapping.update(zip(n.outputs, outputs))
        nodes.append(Node(n.op, [mapping[v] for v in n.inputs], outputs, dict(n.attrs), n.debug_handle,
                          n.scope or call.scope, n.source))
    # the call's outputs now stand for the body's results
    results = [mapping[v] for v in body.outputs]
    for old, new in zip(call.outputs, results):
        graph.replace_all_uses(old, new)
    return nodes
