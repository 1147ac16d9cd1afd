"""Shared helpers of the autograd tests: one-op modules, running grads on the reference backend."""

from __future__ import annotations

import numpy as np

import lowerkit as lk
from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import FLOAT_DTYPES, get_schema


def single_op_module(op: str, arrays: list[np.ndarray], attrs: dict) -> Module:
    """A module whose forward applies ``op`` to its inputs ``in0, in1, ...``."""
    graph = Graph()
    inputs = [graph.add_input(f"in{i}", TensorType.of(a)) for i, a in enumerate(arrays)]
    schema = get_schema(op)
    normalized = schema.normalize_attrs(attrs)
    types = schema.infer([v.type for v in inputs], normalized)
    node = graph.add_node(op, inputs, types, normalized, debug_handle=0)
    graph.set_outputs(node.outputs)
    return Module(methods={"forward": GraphMethod(graph, returns_tuple=len(types) > 1)}, name=op)


def float_inputs(arrays: list[np.ndarray]) -> list[int]:
    return [i for i, a in enumerate(arrays) if TensorType.of(a).dtype in FLOAT_DTYPES]


def run_grad(module: Module, arrays: list[np.ndarray], cotangents: list[np.ndarray], wrt: list[str],
             backend=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(outputs, gradients) of ``forward_grad`` of ``lk.autograd.grad(module, wrt=wrt)``."""
    gm = lk.autograd.grad(module, wrt=wrt)
    runner = gm if backend is None else lk.to_backend(gm, backend)
    results = runner.run("forward_grad", *arrays, *cotangents)
    n = len(cotangents)
    return list(results[:n]), list(results[n:])


def rel_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Norm-wise relative error (0 when both are zero)."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    scale = max(np.linalg.norm(theirs), 1e-30)
    return float(np.linalg.norm(ours - theirs) / scale) if np.any(theirs) or np.any(ours) else 0.0
