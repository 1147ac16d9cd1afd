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


def _mixed_conv_bn(tiny, *, dim: int = 1, also_read: bool = False) -> Graph:
    """Two depthwise convolutions (3x3 on 2 channels, 5x5 on 3), concatenated over ``dim``
    (1; else 3, the second a dense 3 -> 2 channels), then a batch norm; with ``also_read`` the first
    convolution's output is a graph output too."""
    g = Graph()
    a = g.add_input("a", tiny.f32(1, 2, 6, 6))
    b = g.add_input("b", tiny.f32(1, 3, 6, 6))
    ya = tiny.node(g, "conv2d", [a, tiny.const(g, tiny.rand(2, 1, 3, 3, seed=1)), tiny.const(g, tiny.rand(2, seed=2))],
                   tiny.f32(1, 2, 6, 6), {"padding": (1, 1, 1, 1), "groups": 2}).output
    if dim == 1:
        yb = tiny.node(g, "conv2d", [b, tiny.const(g, tiny.rand(3, 1, 5, 5, seed=3))],
                       tiny.f32(1, 3, 6, 6), {"padding": (2, 2, 2, 2), "groups": 3}).output
    else:  # two channels, as the other part: concatenated along the width
        yb = tiny.node(g, "conv2d", [b, tiny.const(g, tiny.rand(2, 3, 5, 5, seed=3))],
                       tiny.f32(1, 2, 6, 6), {"padding": (2, 2, 2, 2)}).output
    shape = (1, 5, 6, 6) if dim == 1 else (1, 2, 6, 12)
    y = tiny.node(g, "concat", [ya, yb], tiny.f32(*shape), {"dim": dim}).output
    c = shape[1]
    stats = [tiny.rand(c, seed=4), np.abs(tiny.rand(c, seed=5)) + 0.5, tiny.rand(c, seed=6), tiny.rand(c, seed=7)]
    z = tiny.node(g, "batch_norm", [y, *(tiny.const(g, s) for s in stats)], tiny.f32(*shape), {"eps": 1e-5})
    g.set_outputs([z.output, ya] if also_read else [z.output])
    return g


def test_a_batch_norm_of_concatenated_convolutions_folds_into_each(tiny):
    g = _mixed_conv_bn(tiny)
    inputs = tiny.rand(1, 2, 6, 6, seed=8), tiny.rand(1, 3, 6, 6, seed=9)
    expected = tiny.run(g.copy(), *inputs)[0]
    assert fold_batch_norm(g) is True
    eliminate_dead_code(g)
    assert [n.op for n in g.nodes if n.op != "constant"] == ["conv2d", "conv2d", "concat"]
    assert all(len(n.inputs) == 3 for n in g.nodes if n.op == "conv2d")  # each with its folded bias
    verify_graph(g)
    np.testing.assert_allclose(tiny.run(g, *inputs)[0], expected, rtol=1e-4, atol=1e-4)


def test_a_batch_norm_of_other_concatenations_stays(tiny):
    for kwargs in ({"dim": 3}, {"also_read": True}):
        g = _mixed_conv_bn(tiny, **kwargs)
        assert fold_batch_norm(g) is False, kwargs
        assert "batch_norm" in tiny.ops(g)
