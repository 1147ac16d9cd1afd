"""Helpers for the glow_like tests (imported as tests.glow_like.helpers)."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

glow = pytest.importorskip("lowerkit_glow_like")


def f32(*shape: int) -> TensorType:
    return TensorType("f32", shape)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def module_of(graph: Graph, params: dict[str, np.ndarray] | None = None) -> Module:
    """Wrap ``graph`` as method ``forward``, numbering nodes that have no debug handle."""
    for i, node in enumerate(graph.nodes):
        if node.debug_handle == -1:
            node.debug_handle = i + 1
        node.attrs = get_schema(node.op).normalize_attrs(node.attrs)
    return Module(params or {}, {"forward": GraphMethod(graph)}, name="Tiny")


def reference(module: Module, *inputs: np.ndarray) -> list[np.ndarray]:
    """Outputs of the un-lowered module on the reference backend."""
    out = module.run("forward", *inputs)
    return list(out) if isinstance(out, tuple) else [out]


def run_glow(module: Module, *inputs: np.ndarray, **options) -> list[np.ndarray]:
    """Preprocess, compile and execute ``forward`` through the plugin's hooks."""
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": options})
    handles = glow.lowerkit_compile(processed=payload, compile_spec={"forward": options})
    return glow.lowerkit_execute(handle=handles["forward"], inputs=list(inputs))


def peak_call_bytes(handle, *inputs: np.ndarray) -> int:
    """Peak bytes Python allocated (tracemalloc) during one steady-state ``handle.run``."""
    import tracemalloc

    tracemalloc.start()
    try:
        handle.run(list(inputs))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def assert_close(actual, expected, rtol: float = 1e-4) -> None:
    """Within ``rtol`` relative to the largest magnitude of the expected tensor."""
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        scale = max(float(np.abs(e).max()), 1e-6)
        np.testing.assert_allclose(a, e, rtol=0, atol=rtol * scale)


def conv_bn_relu_graph(with_bias: bool = True) -> tuple[Graph, dict[str, np.ndarray]]:
    """x -> conv2d(3->4, 3x3, pad 1) -> batch_norm -> relu, with its parameters."""
    g = Graph()
    x = g.add_input("x", f32(1, 3, 6, 6))
    w = g.add_node("param", [], [f32(4, 3, 3, 3)], {"name": "w"}).output
    ins = [x, w]
    if with_bias:
        ins.append(g.add_node("param", [], [f32(4)], {"name": "b"}).output)
    y = g.add_node("conv2d", ins, [f32(1, 4, 6, 6)], {"padding": (1, 1, 1, 1)}, output_hints=["conv"]).output
    stats = [g.add_node("param", [], [f32(4)], {"name": n}).output for n in ("mean", "var", "gamma", "beta")]
    z = g.add_node("batch_norm", [y, *stats], [f32(1, 4, 6, 6)], {"eps": 1e-5}, output_hints=["bn"]).output
    g.set_outputs([g.add_node("relu", [z], [f32(1, 4, 6, 6)], output_hints=["act"]).output])
    rng = np.random.default_rng(1)
    params = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
        "mean": rng.normal(0, 0.1, 4).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, 4).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.5, 4).astype(np.float32),
        "beta": rng.normal(0, 0.1, 4).astype(np.float32),
    }
    return g, params


_TRACED: dict[tuple, object] = {}


def traced(name: str, batch: int = 1, hw: int | None = None):
    """A traced lowerkit.models network (cached per process) and an example input."""
    import lowerkit as lk
    from lowerkit import models

    key = (name, batch, hw)
    if key not in _TRACED:
        shape = list(models.MODEL_INPUTS[name])
        shape[0] = batch
        if hw is not None:
            shape[2] = shape[3] = hw
        x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        _TRACED[key] = (lk.trace(getattr(models, name)(), x), x)
    return _TRACED[key]
