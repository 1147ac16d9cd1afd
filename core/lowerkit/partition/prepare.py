"""Step 0 of partitioning: the core graph passes, run on the whole module before nodes are
assigned, so that no backend boundary stops a rewrite.

Without this, ``[nnpack, glow_like]`` gives a ResNet's convolutions to nnpack and its batch
norms to glow_like, and neither can fold one into the other. Here batch norms are folded
into the convolutions (and linears) feeding them, all-constant nodes are evaluated and dead
nodes are dropped, on a copy: the caller's module is never changed.

Passes fold only ``constant`` nodes, so every ``param`` node becomes a ``constant`` holding
the parameter first; afterwards, constants still holding an original parameter become that
``param`` again and every new folded array (a folded conv weight, say) becomes a parameter
of its own, named after its node's scope and value (``layer1.0.conv1.conv2d_w_folded``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import Graph
from ..ir.verify import verify_module
from ..ir.module import GraphMethod, Module
from ..ir.node import Node
from ..passes import (
    constant_folder,
    eliminate_dead_code,
    fold_batch_norm,
    run_passes,
)
from ..passes.constant_fold import NodeEvaluator

__all__ = ["PREPARE_PASSES", "prepare_module"]

PREPARE_PASSES = ("fold_batch_norm", "fold_constants", "eliminate_dead_code")
"""The passes :func:`prepare_module` runs, by name (for docs and reports)."""

# Constants at most this many elements stay in the graph; larger folded arrays become parameters.
_INLINE_ELEMENTS = 16


def prepare_module(module: Module, evaluate: NodeEvaluator | None = None) -> tuple[Module, list[str]]:
    """A copy of ``module`` with the core passes run on every graph method.

    ``evaluate`` runs one node for constant folding (``None``: each node runs as a one-node
    module on ``reference``, through the registry; a node it cannot run stays as it is).
    Returns the new module and the names of the passes that changed something. Methods
    that are not graphs (already lowered) are kept as they are.
    """
    evaluate = evaluate or _reference_evaluator()
    params = dict(module.parameters)
    methods: dict[str, object] = {}
    fired: list[str] = []
    # Passes number new nodes per graph; handles must stay unique across the module's methods.
    next_handle = 1 + max((n.debug_handle for m in module.methods.values() if isinstance(m, GraphMethod)
                           for n in m.graph.nodes), default=0)
    for name, method in module.methods.items():
        if not isinstance(method, GraphMethod):
            methods[name] = method
            continue
        graph = method.graph.copy()
        known = {n.debug_handle for n in graph.nodes}
        literals = {n for n in graph.nodes if n.op == "constant"}  # stay constants
        originals = _params_to_constants(graph, module.parameters)
        passes = [fold_batch_norm, constant_folder(_safe(evaluate)), eliminate_dead_code]
        for p in run_passes(graph, passes, fixed_point=True, verify=False):
            if p not in fired:
                fired.append(p)
        _constants_to_params(graph, originals, literals, params)
        for node in graph.nodes:
            if node.debug_handle >= 0 and node.debug_handle not in known:
                node.debug_handle, next_handle = next_handle, next_handle + 1
        methods[name] = GraphMethod(graph, returns_tuple=method.returns_tuple, output_names=method.output_names)
    if not fired:
        return module, []
    used = {n.attrs["name"] for m in methods.values() if isinstance(m, GraphMethod)
            for n in m.graph.nodes if n.op == "param"}
    kept = {k: v for k, v in params.items() if k in used or k in _unread_by_graphs(module)}
    prepared = Module(kept, methods, module.submodules, name=module.name)
    verify_module(prepared)
    return prepared, fired


def _unread_by_graphs(module: Module) -> set[str]:
    """Parameters no graph method reads (kept: a lowered method might)."""
    read = {n.attrs["name"] for m in module.methods.values() if isinstance(m, GraphMethod)
            for n in m.graph.nodes if n.op == "param"}
    return set(module.parameters) - read


def _params_to_constants(graph: Graph, parameters: dict[str, np.ndarray]) -> dict[Node, tuple[str, np.ndarray]]:
    """Turn every ``param`` node into a ``constant``; returns node -> (name, array)."""
    originals: dict[Node, tuple[str, np.ndarray]] = {}
    for node in graph.nodes:
        if node.op == "param":
            name = str(node.attrs["name"])
            array = parameters[name]
            originals[node] = (name, array)
            node.op, node.attrs = "constant", {"value": array}
    return originals


def _constants_to_params(
    graph: Graph,
    originals: dict[Node, tuple[str, np.ndarray]],
    literals: set[Node],
    params: dict[str, np.ndarray],
) -> None:
    """Undo :func:`_params_to_constants`; large folded arrays become new parameters."""
    for node in graph.nodes:
        if node.op != "constant" or node in literals:
            continue
        value = node.attrs["value"]
        if node in originals and originals[node][1] is value:
            node.op, node.attrs = "param", {"name": originals[node][0]}
        elif node in originals or (node.debug_handle >= 0 and np.size(value) > _INLINE_ELEMENTS):
            base = f"{node.scope}.{node.output.name}" if node.scope else node.output.name
            name, k = base, 1
            while name in params:
                name, k = f"{base}_{k}", k + 1
            params[name] = np.asarray(value)
            node.op, node.attrs = "param", {"name": name}


def _safe(evaluate: NodeEvaluator) -> NodeEvaluator:
    """An evaluator that leaves a node unfolded (no result) instead of raising."""

    def run(node: Node, arrays: list[np.ndarray]) -> list[np.ndarray]:
        try:
            return list(evaluate(node, arrays))
        except Exception:  # an op the evaluator lacks: keep the node, fold the rest
            return []

    return run


def _reference_evaluator() -> Callable[[Node, list[np.ndarray]], list[np.ndarray]]:
    """Run one node as a one-input-per-array module on the reference backend."""

    def run(node: Node, arrays: list[np.ndarray]) -> list[np.ndarray]:
        g = Graph()
        inputs = [g.add_input(f"in{i}", v.type) for i, v in enumerate(node.inputs)]
        copy = g.add_node(node.op, inputs, [v.type for v in node.outputs], dict(node.attrs))
        g.set_outputs(copy.outputs)
        one = Module({}, {"forward": GraphMethod(g, returns_tuple=True)}, name=f"fold.{node.op}")
        return list(one.run("forward", *arrays))

    return run
