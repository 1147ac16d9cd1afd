"""glow_like's evaluator: the core interpreter running glow_like's kernels.

Used by constant folding (so folded constants are what glow_like would compute at run time),
by calibration and by the pass tests. Only kernel dispatch differs from the core
:class:`~lowerkit.ir.interpreter.Interpreter`: a glow_like kernel is prepared into
preallocated outputs instead of returning them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lowerkit.errors import UnsupportedOperatorError
from lowerkit.ir import Graph, Node, Value
from lowerkit.ir.interpreter import Interpreter

from .kernels import KERNELS

Observer = Callable[[Value, np.ndarray], None]


class GlowInterpreter(Interpreter):
    """Runs free graphs (parameters already constants) with glow_like's kernels.

    ``observe(value, array)``, if given, sees every node output as it is computed.
    """

    def __init__(self, observe: Observer | None = None) -> None:
        super().__init__(None, {}, check_outputs=False)  # outputs are allocated from the types
        self.observe = observe

    def run_node(self, node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        outputs = super().run_node(node, args)
        if self.observe is not None:
            for v, a in zip(node.outputs, outputs):
                self.observe(v, a)
        return outputs

    def call_kernel(self, node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        """Prepare ``KERNELS[node.op]`` on fresh output arrays and run it."""
        spec = KERNELS.get(node.op)
        if spec is None:
            raise UnsupportedOperatorError(f"glow_like has no kernel for {node.where()}")
        outs = [np.empty(v.type.shape, dtype=v.type.numpy_dtype) for v in node.outputs]
        spec.prepare([np.asarray(a, order="C") for a in args], outs, node.attrs, None)()
        return outs


def run_node(node: Node, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate one node with its kernel into fresh arrays."""
    return GlowInterpreter().run_node(node, list(inputs))


def evaluate(graph: Graph, inputs: Sequence[np.ndarray], observe: Observer | None = None) -> list[np.ndarray]:
    """Run ``graph`` node by node; ``observe(value, array)`` sees every node output."""
    return GlowInterpreter(observe).run_graph(graph, [np.asarray(a) for a in inputs])
