"""The optimizer's working graph: a copy with calls inlined and parameters as constants.

``evaluate`` and ``run_node`` (glow_like's evaluator, see ``_evaluator``) and ``const_value``
and ``make_constant`` (from :mod:`lowerkit.passes`) are re-exported for the pass tests.
"""

from __future__ import annotations

import numpy as np

from lowerkit.errors import UnsupportedOperatorError
from lowerkit.ir import Graph, Module, Node
from lowerkit.passes import const_value, make_constant

from ._evaluator import evaluate, run_node

__all__ = ["const_value", "evaluate", "make_constant", "run_node", "working_graph"]


def working_graph(module: Module, method: str) -> Graph:
    """The method's graph, copied, with calls inlined and every ``param`` a ``constant``."""
    from lowerkit.ir import graph_of

    graph = graph_of(module, method).copy()
    _inline_calls(graph, module, depth=0)
    for node in graph.nodes:
        if node.op == "param":
            name = node.attrs["name"]
            node.op = "constant"
            node.attrs = {"value": _parameter(module, name, node), "param": name}
    return graph


def _parameter(module: Module, name: str, node: Node) -> np.ndarray:
    """A parameter by qualified name, looked up in the module or down its submodules."""
    if name in module.parameters:
        return module.parameters[name]
    head, _, rest = name.partition(".")
    sub = module.submodules.get(head)
    if rest and isinstance(sub, Module):
        return _parameter(sub, rest, node)
    raise UnsupportedOperatorError(f"glow_like: parameter {name!r} not found ({node.where()})")


def _inline_calls(graph: Graph, module: Module, depth: int) -> None:
    """Replace ``call`` nodes by the callee's body (parameters requalified by submodule)."""
    if depth > 32:
        raise UnsupportedOperatorError("glow_like: calls nest more than 32 deep (recursion?)")
    index = 0
    while index < len(graph.nodes):
        node = graph.nodes[index]
        if node.op != "call":
            index += 1
            continue
        sub_name = node.attrs.get("module", "")
        target = module.submodules.get(sub_name) if sub_name else module
        if not isinstance(target, Module):
            raise UnsupportedOperatorError(
                f"glow_like cannot inline a call to an already lowered submodule "
                f"{sub_name!r} ({node.where()})"
            )
        body = _graph_of(target, node.attrs["method"], node).copy()
        _inline_calls(body, target, depth + 1)
        mapping = dict(zip(body.inputs, node.inputs))
        new_nodes = []
        for inner in body.nodes:
            if inner.op == "param" and sub_name:
                inner.attrs = {"name": f"{sub_name}.{inner.attrs['name']}"}
            inner.inputs = [mapping.get(v, v) for v in inner.inputs]
            for v in inner.outputs:
                v.name = graph.namespace.create(v.name)
            inner.scope = ".".join(p for p in (node.scope, inner.scope) if p)
            new_nodes.append(inner)
        graph.nodes[index : index + 1] = new_nodes
        for old, new in zip(node.outputs, [mapping.get(v, v) for v in body.outputs]):
            graph.replace_all_uses(old, new)
        index += len(new_nodes)


def _graph_of(module: Module, method: str, node: Node) -> Graph:
    from lowerkit.ir import GraphMethod

    m = module.methods.get(method)
    if not isinstance(m, GraphMethod):
        raise UnsupportedOperatorError(
            f"glow_like cannot inline call to method {method!r}: not a graph method ({node.where()})"
        )
    return m.graph
