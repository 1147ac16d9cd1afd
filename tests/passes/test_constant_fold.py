"""Constant folding alone, with an injected evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.errors import UnsupportedOperatorError
from lowerkit.ir import Graph, verify_graph
from lowerkit.passes import constant_folder, eliminate_dead_code, fold_constants, kernel_evaluator


def _graph(tiny) -> Graph:
    g = Graph()
    x = g.add_input("x", tiny.f32(3, 2))
    w = tiny.const(g, tiny.rand(2, 3, seed=3))
    wt = tiny.node(g, "transpose", [w], tiny.f32(3, 2), {"perm": (1, 0)}).output
    e = tiny.node(g, "exp", [wt], tiny.f32(3, 2)).output
    g.set_outputs([tiny.node(g, "add", [x, e], tiny.f32(3, 2)).output])
    return g


def test_constant_only_subgraphs_fold(tiny):
    g = _graph(tiny)
    inp = tiny.rand(3, 2)
    expected = tiny.run(g.copy(), inp)
    w = g.nodes[0].attrs["value"]
    assert fold_constants(g, kernel_evaluator(tiny.kernels)) is True
    eliminate_dead_code(g)
    assert tiny.ops(g) == ["constant", "add"]
    folded = g.nodes[0].attrs["value"]
    assert not folded.flags.writeable
    np.testing.assert_allclose(folded, np.exp(w.T), rtol=1e-6)
    verify_graph(g)
    np.testing.assert_array_equal(tiny.run(g, inp)[0], expected[0])


def test_input_dependent_nodes_stay(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(3))
    g.set_outputs([tiny.node(g, "exp", [x], tiny.f32(3)).output])
    assert fold_constants(g, kernel_evaluator(tiny.kernels)) is False
    assert tiny.ops(g) == ["exp"]


def test_folder_is_a_named_pass_using_the_injected_evaluator(tiny):
    seen = []

    def evaluate(node, args):
        seen.append(node.op)
        return kernel_evaluator(tiny.kernels)(node, args)

    fold = constant_folder(evaluate)
    assert fold.__name__ == "fold_constants"
    assert fold(_graph(tiny)) is True
    assert seen == ["transpose", "exp"]


def test_evaluator_without_a_kernel_says_which_node(tiny):
    with pytest.raises(UnsupportedOperatorError, match=r"no kernel for op 'transpose'"):
        fold_constants(_graph(tiny), kernel_evaluator({}))
