"""Reverse mode over one graph: append the backward pass of a method, driven by the table.

Nodes are visited in reverse topological order; each output's incoming gradient is the sum
of what its readers sent back (``add`` nodes). Only inputs that depend on a ``wrt`` value
get gradients, and only nodes between the ``wrt`` values and the outputs need a table entry;
all nodes that need one and lack it are reported in one error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import LowerkitError, UnsupportedOperatorError
from ..ir.graph import Graph
from ..ir.node import Node, Value
from ..ir.types import TensorType
from ..opset import FLOAT_DTYPES, get_schema
from ..opset.decompose import DECOMPOSITIONS, decompose_node
from . import rules_elementwise, rules_nn, rules_shape  # noqa: F401  (register entries)
from .table import DERIVATIVES
from .vjp import Emitter, Vjp


def input_name(node: Node, index: int) -> str:
    """The schema name of input ``index`` of ``node`` (variadic inputs share the last name)."""
    names = get_schema(node.op).inputs
    return names[min(index, len(names) - 1)]


def _differentiable(node: Node, index: int) -> bool:
    value = node.inputs[index]
    if value.type.dtype not in FLOAT_DTYPES:
        return False
    entry = DERIVATIVES.get(node.op)
    return entry is None or input_name(node, index) not in entry.nondifferentiable


def decompose_undifferentiable(graph: Graph) -> None:
    """Rewrite nodes that have no entry but a core decomposition (attention) into their parts."""
    for node in [n for n in graph.nodes if n.op not in DERIVATIVES and n.op in DECOMPOSITIONS]:
        decompose_node(graph, node)


def _active(graph: Graph, sources: set[Value]) -> set[Value]:
    """Values that depend on a source through differentiable inputs."""
    active = set(sources)
    for node in graph.nodes:
        if any(v in active and _differentiable(node, i) for i, v in enumerate(node.inputs)):
            active.update(v for v in node.outputs if v.type.dtype in FLOAT_DTYPES)
    return active


def _useful(graph: Graph) -> set[Value]:
    """Values some graph output depends on."""
    useful = set(graph.outputs)
    for node in reversed(graph.nodes):
        if any(v in useful for v in node.outputs):
            useful.update(node.inputs)
    return useful


def missing_entries(graph: Graph, sources: set[Value]) -> list[Node]:
    """Nodes on a path from ``sources`` to the outputs whose op has no derivative entry."""
    active, useful = _active(graph, sources), _useful(graph)
    return [
        n for n in graph.nodes
        if n.op not in DERIVATIVES and any(v in useful for v in n.outputs)
        and any(v in active and _differentiable(n, i) for i, v in enumerate(n.inputs))
    ]


def report_missing(nodes: Sequence[Node], method: str) -> UnsupportedOperatorError:
    ops = sorted({n.op for n in nodes})
    lines = "\n".join(f"  {n.where()}" for n in nodes)
    return UnsupportedOperatorError(
        f"method {method!r}: no derivative entry for op(s) {ops} (lowerkit.autograd.DERIVATIVES); "
        f"{len(nodes)} node(s) need one:\n{lines}"
    )


def append_backward(
    graph: Graph, wrt: Sequence[tuple[TensorType, Sequence[Value]]], *, method: str, first_handle: int,
    cotangents: Sequence[Value] | None = None,
) -> tuple[list[Value], list[Value]]:
    """Add one cotangent input per output and the backward nodes to ``graph`` (in place).

    ``wrt`` holds, per requested gradient, its type and the values it is the sum over (a
    parameter read by several ``param`` nodes, or one graph input; none for an unused parameter).
    ``cotangents`` (one per output, e.g. a constant 1 for a loss) replaces the new inputs.
    Returns the cotangents and the gradients.
    """
    forward = list(graph.nodes)
    sources = {v for _, values in wrt for v in values if v.type.dtype in FLOAT_DTYPES}
    missing = missing_entries(graph, sources)
    if missing:
        raise report_missing(missing, method)
    active = _active(graph, sources)
    emitter = Emitter(graph, first_handle)
    if cotangents is None:
        cotangents = [graph.add_input(f"grad_{v.name}", v.type) for v in graph.outputs]
    cot: dict[Value, Value] = {}

    def accumulate(value: Value, grad: Value, like: Node | None) -> None:
        if value in cot:
            (grad,) = emitter.emit("add", [cot[value], grad], {}, like=like, hint=f"{value.name}_grad")
        cot[value] = grad

    for value, grad in zip(graph.outputs, cotangents):
        if value in active:
            accumulate(value, grad, None)
    for node in reversed(forward):
        grads = [cot.get(v) for v in node.outputs]
        wanted = [i for i, v in enumerate(node.inputs) if v in active and _differentiable(node, i)]
        if not wanted or all(g is None for g in grads):
            continue
        d = Vjp(emitter, node, grads)
        for i in wanted:
            accumulate(node.inputs[i], _input_grad(d, node, i), node)
    results = []
    for type_, values in wrt:
        parts = [cot[v] for v in values if v in cot]
        if not parts:
            results.append(_zeros(emitter, type_))
            continue
        total = parts[0]
        for part in parts[1:]:
            (total,) = emitter.emit("add", [total, part], {}, like=None, hint="grad")
        results.append(total)
    return list(cotangents), results


def _input_grad(d: Vjp, node: Node, index: int) -> Value:
    name = input_name(node, index)
    found = DERIVATIVES[node.op].rule_for(name)
    if found is None:
        raise LowerkitError(f"derivative entry of {node.op!r} has no rule for input {name!r} ({node.where()})")
    names, rule = found
    result = rule(d)
    schema = get_schema(node.op)
    if schema.variadic and name == schema.inputs[-1]:  # one gradient per operand of the variadic input
        result = result[index - (len(schema.inputs) - 1)]
    elif len(names) > 1:  # a rule for several inputs returns their gradients in its key's order
        result = result[names.index(name)]
    if result.type != node.inputs[index].type:
        raise LowerkitError(
            f"derivative entry of {node.op!r} gave {result.type} for input {name!r} of type "
            f"{node.inputs[index].type} ({node.where()})"
        )
    return result


def _zeros(emitter: Emitter, type_: TensorType) -> Value:
    """Zeros of ``type_``: a 0-d constant expanded (the graph stays small)."""
    zero = np.zeros((), type_.numpy_dtype)
    zero.flags.writeable = False
    (scalar,) = emitter.emit("constant", [], {"value": zero}, like=None, hint="zero")
    (full,) = emitter.emit("expand", [scalar], {"shape": type_.shape}, like=None, hint="zero_grad")
    return full
