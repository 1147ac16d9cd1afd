"""Shared setup of the pass tests: a fixture that builds tiny graphs and runs them on the oracle."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from lowerkit.ir import Graph, Node, TensorType, Value
from lowerkit.ir.interpreter import Interpreter
from lowerkit.opset import get_schema


class Tiny:
    """Builds free graphs (constants, no parameters) and runs them with the reference kernels."""

    def __init__(self, kernels) -> None:
        self.kernels = kernels

    @staticmethod
    def f32(*shape: int) -> TensorType:
        return TensorType("f32", shape)

    @staticmethod
    def rand(*shape: int, seed: int = 0) -> np.ndarray:
        return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

    @staticmethod
    def node(graph: Graph, op: str, inputs: Sequence[Value], out: TensorType, attrs: dict | None = None) -> Node:
        """A one-output node with normalised attributes and a fresh debug handle."""
        normal = get_schema(op).normalize_attrs(dict(attrs or {}))
        return graph.add_node(op, inputs, [out], normal, debug_handle=len(graph.nodes) + 1)

    def const(self, graph: Graph, array: np.ndarray) -> Value:
        array = np.ascontiguousarray(array)
        array.flags.writeable = False
        return self.node(graph, "constant", [], TensorType.of(array), {"value": array}).output

    def run(self, graph: Graph, *inputs: np.ndarray) -> list[np.ndarray]:
        return Interpreter(None, self.kernels).run_graph(graph, list(inputs))

    @staticmethod
    def ops(graph: Graph) -> list[str]:
        return [n.op for n in graph.nodes]


@pytest.fixture
def tiny() -> Tiny:
    reference = pytest.importorskip("lowerkit_reference")
    return Tiny(reference.KERNELS)
