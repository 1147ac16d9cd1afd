"""Batch-norm folding alone."""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, verify_graph
from lowerkit.passes import eliminate_dead_code, fold_batch_norm


def _conv_bn(tiny, *, bias: bool = True, stats_constant: bool = True) -> Graph:
    g = Graph()
    x = g.add_input("x", tiny.f32(1, 3, 5, 5))
    ins = [x, tiny.const(g, tiny.rand(4, 3, 3, 3, seed=1))]
    if bias:
        ins.append(tiny.const(g, tiny.rand(4, seed=2)))
    y = tiny.node(g, "conv2d", ins, tiny.f32(1, 4, 5, 5), {"padding": (1, 1, 1, 1)}).output
    var = np.abs(tiny.rand(4, seed=4)) + 0.5
    stats = [tiny.rand(4, seed=3), var, tiny.rand(4, seed=5), tiny.rand(4, seed=6)]
    stat_values = [tiny.const(g, s) for s in stats]
    if not stats_constant:
        stat_values[0] = g.add_input("mean", tiny.f32(4))
    z = tiny.node(g, "batch_norm", [y, *stat_values], tiny.f32(1, 4, 5, 5), {"eps": 1e-5}).output
    g.set_outputs([z])
    return g


def test_batch_norm_folds_into_the_conv(tiny):
    for bias in (True, False):
        g = _conv_bn(tiny, bias=bias)
        inp = tiny.rand(1, 3, 5, 5, seed=7)
        expected = tiny.run(g.copy(), inp)[0]
        assert fold_batch_norm(g) is True
        eliminate_dead_code(g)
        assert [n.op for n in g.nodes if n.op != "constant"] == ["conv2d"]
        verify_graph(g)
        np.testing.assert_allclose(tiny.run(g, inp)[0], expected, rtol=1e-4, atol=1e-4)


def test_batch_norm_with_runtime_statistics_stays(tiny):
    g = _conv_bn(tiny, stats_constant=False)
    assert fold_batch_norm(g) is False
    assert "batch_norm" in tiny.ops(g)


def test_batch_norm_folds_into_a_grouped_transposed_conv(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(1, 4, 3, 3))
    weight = tiny.const(g, tiny.rand(4, 3, 2, 2, seed=1))  # [in, out / groups, kh, kw], groups 2: 6 outputs
    attrs = {"stride": (2, 2), "groups": 2}
    y = tiny.node(g, "conv_transpose2d", [x, weight], tiny.f32(1, 6, 6, 6), attrs).output
    stats = [tiny.rand(6, seed=3), np.abs(tiny.rand(6, seed=4)) + 0.5, tiny.rand(6, seed=5), tiny.rand(6, seed=6)]
    z = tiny.node(g, "batch_norm", [y, *(tiny.const(g, s) for s in stats)], tiny.f32(1, 6, 6, 6), {"eps": 1e-5})
    g.set_outputs([z.output])
    inp = tiny.rand(1, 4, 3, 3, seed=7)
    expected = tiny.run(g.copy(), inp)[0]
    assert fold_batch_norm(g) is True
    eliminate_dead_code(g)
    assert [n.op for n in g.nodes if n.op != "constant"] == ["conv_transpose2d"]
    verify_graph(g)
    np.testing.assert_allclose(tiny.run(g, inp)[0], expected, rtol=1e-4, atol=1e-4)
