"""Constant folding: evaluate ahead of time every node whose inputs are all constant.

The pass does not know how to run an op: the caller injects a :data:`NodeEvaluator`, a
function ``(node, input arrays) -> output arrays``. A backend passes its own (its kernels,
so folding matches what it would compute at run time); :func:`kernel_evaluator` makes one
from a core kernel table through :class:`lowerkit.ir.interpreter.Interpreter`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..ir import Graph, Node, Value
from ..ir.interpreter import Interpreter, Kernel

NodeEvaluator = Callable[[Node, list[np.ndarray]], list[np.ndarray]]


def kernel_evaluator(kernels: Mapping[str, Kernel]) -> NodeEvaluator:
    """A node evaluator running ``kernels`` (op name -> core kernel) with no module bound."""
    return Interpreter(None, kernels).run_node


def fold_constants(graph: Graph, evaluate: NodeEvaluator) -> bool:
    """Turn all-constant-input nodes into ``constant`` nodes; True if any was folded.

    ``call`` nodes and nodes without inputs (``param``, ``constant``) are left alone, and so
    is a node with more than one output. Folded arrays are copied and made read-only.
    """
    changed = False
    constant: dict[Value, np.ndarray] = {}
    for node in graph.nodes:
        if node.op == "constant":
            constant[node.output] = node.attrs["value"]  # type: ignore[assignment]
            continue
        if not node.inputs or node.op == "call" or not all(v in constant for v in node.inputs):
            continue
        results = evaluate(node, [constant[v] for v in node.inputs])
        if len(results) != 1:
            continue
        array = np.array(results[0], copy=True)
        array.flags.writeable = False
        node.op, node.inputs, node.attrs = "constant", [], {"value": array}
        constant[node.output] = array
        changed = True
    return changed


def constant_folder(evaluate: NodeEvaluator) -> Callable[[Graph], bool]:
    """:func:`fold_constants` with ``evaluate`` bound: a ``pass(graph) -> bool`` named ``fold_constants``."""

    def fold_constants_pass(graph: Graph) -> bool:
        return fold_constants(graph, evaluate)

    fold_constants_pass.__name__ = fold_constants_pass.__qualname__ = "fold_constants"
    fold_constants_pass.__doc__ = fold_constants.__doc__
    return fold_constants_pass
