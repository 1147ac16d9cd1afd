"""Decompositions: rewrite a composite op into ops every backend is more likely to have.

A backend may claim ``scaled_dot_product_attention`` whole (one fused kernel); for one that
does not, the core rewrites the node into ``transpose``, ``matmul``, ``mul``, ``add``/``where``
and ``softmax`` (:func:`decompose_unclaimed`, used by partitioning; the ONNX exporter uses
:func:`decompose_node` too). Each function here rewrites one node in place.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.graph import Graph
from ..ir.node import Node, Value
from ..ir.types import TensorType
from .registry import get_schema


class _Emitter:
    """Builds nodes that stand in for ``node``: same scope and source, fresh debug handles."""

    def __init__(self, graph: Graph, node: Node, first_handle: int) -> None:
        self.graph, self.node, self.handle = graph, node, first_handle
        self.nodes: list[Node] = []

    def emit(self, op: str, inputs: list[Value], attrs: dict | None = None, hint: str = "") -> Value:
        schema = get_schema(op)
        normalized = schema.normalize_attrs(dict(attrs or {}))
        types = [TensorType.of(normalized["value"])] if op == "constant" else schema.infer(
            [v.type for v in inputs], normalized)
        new = self.graph.add_node(
            op, inputs, types, normalized, output_hints=[hint or f"{self.node.output.name}_{op}"],
            debug_handle=self._take_handle(), scope=self.node.scope, source=self.node.source,
        )
        self.graph.nodes.pop()  # placed by the caller, in order
        self.nodes.append(new)
        return new.output

    def constant(self, array: np.ndarray, hint: str) -> Value:
        array = np.array(array, copy=True)  # keeps 0-d arrays 0-d
        array.flags.writeable = False
        return self.emit("constant", [], {"value": array}, hint=f"{self.node.output.name}_{hint}")

    def _take_handle(self) -> int:
        if self.node.debug_handle == -1:
            return -1
        self.handle += 1
        return self.handle - 1


def _sdpa(em: _Emitter, node: Node) -> Value:
    q, k, v = node.inputs[:3]
    dtype = q.type.numpy_dtype
    perm = list(range(k.type.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    kt = em.emit("transpose", [k], {"perm": tuple(perm)})
    scores = em.emit("matmul", [q, kt])
    scores = em.emit("mul", [scores, em.constant(np.array(node.attrs["scale"], dtype), "scale")])
    length, source = q.type.shape[-2], k.type.shape[-2]
    if node.attrs["is_causal"]:
        causal = np.where(np.tril(np.ones((length, source), dtype=bool)), 0, -np.inf).astype(dtype)
        scores = em.emit("add", [scores, em.constant(causal, "causal_mask")])
    if len(node.inputs) > 3:
        mask = node.inputs[3]
        if mask.type.dtype == "bool":
            scores = em.emit("where", [mask, scores, em.constant(np.array(-np.inf, dtype), "masked")])
        else:
            scores = em.emit("add", [scores, mask])
    weights = em.emit("softmax", [scores], {"dim": -1})
    return em.emit("matmul", [weights, v])


DECOMPOSITIONS: dict[str, Callable[[_Emitter, Node], Value]] = {"scaled_dot_product_attention": _sdpa}


def decompose_node(graph: Graph, node: Node) -> list[Node]:
    """Replace ``node`` (whose op has a decomposition) in ``graph``; returns the new nodes."""
    handles = [n.debug_handle for n in graph.nodes]
    em = _Emitter(graph, node, max(handles, default=-1) + 1)
    DECOMPOSITIONS[node.op](em, node)
    em.nodes[-1].outputs = [node.output]  # the last new node binds the original value
    at = graph.nodes.index(node)
    graph.nodes[at : at + 1] = em.nodes
    return em.nodes


def decompose_unclaimed(graph: Graph, claimed: Callable[[Node], bool]) -> Graph:
    """``graph``, or a copy of it where every decomposable node ``claimed`` rejects is decomposed.

    The original graph is never changed (it belongs to the user's module).
    """
    if not any(n.op in DECOMPOSITIONS and not claimed(n) for n in graph.nodes):
        return graph
    graph = graph.copy()
    for node in [n for n in graph.nodes if n.op in DECOMPOSITIONS and not claimed(n)]:
        decompose_node(graph, node)
    return graph

