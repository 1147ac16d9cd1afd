"""fold_scales: a per-column constant scale after a fully-connected layer (ConvNeXt's layer
scale) goes into its weight and bias; other products stay — against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, reference, run_glow

from lowerkit.ir import Graph
from lowerkit.opset import get_schema
from lowerkit_glow_like._compiler import optimized_graph


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def _scaled_fc(scale_shape=(6,), *, bias=True, act=None, extra_reader=False):
    """x [2, 5, 4] -> linear 4 -> 6 (a matmul and, with ``bias``, an add) [-> ``act``] -> * scale."""
    rng = np.random.default_rng(0)
    g, params = Graph(), {}

    def param(name, shape):
        params[name] = rng.standard_normal(shape).astype(np.float32)
        return g.add_node("param", [], [f32(*shape)], {"name": name}).output

    x = g.add_input("x", f32(2, 5, 4))
    y = _add(g, "matmul", [x, param("w", (4, 6))])
    if bias:
        y = _add(g, "add", [y, param("b", (6,))])
    if act:
        y = _add(g, act, [y])
    out = _add(g, "mul", [y, param("gamma", scale_shape)])
    g.set_outputs([out, y] if extra_reader else [out])
    return module_of(g, params)


def _ops(module):
    graph, _ = optimized_graph(module, "forward", 2)
    return [node.op for node in graph.nodes if node.op != "constant"]


@pytest.mark.parametrize("scale_shape", [(6,), (1, 1, 6)])
@pytest.mark.parametrize("bias", [True, False])
def test_a_column_scale_folds_into_the_layer(scale_shape, bias):
    module = _scaled_fc(scale_shape, bias=bias)
    assert _ops(module) == ["glow.fc"]
    x = np.random.default_rng(1).standard_normal((2, 5, 4)).astype(np.float32)
    assert_close(run_glow(module, x), reference(module, x), rtol=1e-5)


@pytest.mark.parametrize("case", [dict(act="relu"), dict(scale_shape=(5, 1)), dict(scale_shape=(2, 5, 6)),
                                  dict(extra_reader=True)])
def test_other_products_stay(case):
    """After an activation, along another axis, per element, or with the layer's output read
    elsewhere too: the product is left as it is."""
    module = _scaled_fc(**case)
    assert "mul" in _ops(module)
    x = np.random.default_rng(2).standard_normal((2, 5, 4)).astype(np.float32)
    assert_close(run_glow(module, x), reference(module, x), rtol=1e-5)
