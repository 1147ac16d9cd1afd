"""Graph helpers for the optimizer: a working copy with parameters as constants, call
inlining, constant-node creation, and a plain evaluator (used by constant folding,
calibration and the pass tests)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lowerkit.errors import UnsupportedOperatorError
from lowerkit.ir import Graph, Module, Node, TensorType, Value

from .kernels import KERNELS


def clone_graph(graph: Graph) -> Graph:
    """A copy with fresh values and nodes (attribute arrays are shared: they are read-only)."""
    new = Graph()
    mapping: dict[int, Value] = {}
    for v in graph.inputs:
        new.namespace.reserve(v.name)
        nv = Value(v.name, v.type)
        new.inputs.append(nv)
        mapping[id(v)] = nv
    for node in graph.nodes:
        outs = []
        for v in node.outputs:
            new.namespace.reserve(v.name)
            nv = Value(v.name, v.type)
            mapping[id(v)] = nv
            outs.append(nv)
        ins = [mapping[id(v)] for v in node.inputs]
        new.nodes.append(
            Node(node.op, ins, outs, dict(node.attrs), node.debug_handle, node.scope, node.source)
        )
    new.outputs = [mapping[id(v)] for v in graph.outputs]
    return new


def working_graph(module: Module, method: str) -> Graph:
    """The method's graph, copied, with calls inlined and every ``param`` a ``constant``."""
    from lowerkit.ir import graph_of

    graph = clone_graph(graph_of(module, method))
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
        body = clone_graph(_graph_of(target, node.attrs["method"], node))
        _inline_calls(body, target, depth + 1)
        mapping = {id(p): a for p, a in zip(body.inputs, node.inputs)}
        new_nodes = []
        for inner in body.nodes:
            if inner.op == "param" and sub_name:
                inner.attrs = {"name": f"{sub_name}.{inner.attrs['name']}"}
            inner.inputs = [mapping.get(id(v), v) for v in inner.inputs]
            for v in inner.outputs:
                v.name = graph.namespace.create(v.name)
            inner.scope = ".".join(p for p in (node.scope, inner.scope) if p)
            new_nodes.append(inner)
        graph.nodes[index : index + 1] = new_nodes
        for old, new in zip(node.outputs, [mapping.get(id(v), v) for v in body.outputs]):
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


def const_value(node: Node | None) -> np.ndarray | None:
    """The array of a ``constant`` node, else ``None``."""
    if node is not None and node.op == "constant":
        return node.attrs["value"]
    return None


def make_constant(graph: Graph, array: np.ndarray, hint: str, index: int, like: Node | None = None) -> Value:
    """Insert a ``constant`` node at ``index`` holding ``array`` (made read-only); its value."""
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
        debug_handle=like.debug_handle if like is not None else -1,
        source=like.source if like is not None else None,
    )
    return node.output


def run_node(node: Node, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate one node with its kernel into fresh arrays."""
    if node.op == "constant":
        return [node.attrs["value"]]
    spec = KERNELS.get(node.op)
    if spec is None:
        raise UnsupportedOperatorError(f"glow_like has no kernel for {node.where()}")
    outs = [np.empty(v.type.shape, dtype=v.type.numpy_dtype) for v in node.outputs]
    spec.prepare([np.asarray(a, order="C") for a in inputs], outs, node.attrs, None)()
    return outs


def evaluate(graph: Graph, inputs: Sequence[np.ndarray], observe=None) -> list[np.ndarray]:
    """Run ``graph`` node by node; ``observe(value, array)`` sees every node output."""
    env: dict[int, np.ndarray] = {id(v): np.asarray(a) for v, a in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        results = run_node(node, [env[id(v)] for v in node.inputs])
        for v, a in zip(node.outputs, results):
            env[id(v)] = a
            if observe is not None:
                observe(v, a)
    return [env[id(v)] for v in graph.outputs]
