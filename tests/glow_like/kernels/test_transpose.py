"""glow_like's transpose kernel: permutations that swap two blocks of axes run compiled
(``jit.layout``), the others as numpy's copy; both exact."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import f32, module_of, run_glow

from lowerkit.ir import Graph
from lowerkit.opset import get_schema

glow = pytest.importorskip("lowerkit_glow_like")


def test_swapped_blocks_finds_the_two_blocks():
    from lowerkit_glow_like.kernels.shape import swapped_blocks

    assert swapped_blocks((2, 3, 4, 5), (0, 2, 3, 1)) == (2, 3, 20)  # NCHW -> NHWC
    assert swapped_blocks((2, 4, 5, 3), (0, 3, 1, 2)) == (2, 20, 3)  # and back
    assert swapped_blocks((6, 7), (1, 0)) == (1, 6, 7)
    assert swapped_blocks((2, 3, 4, 5), (0, 1, 3, 2)) == (6, 4, 5)
    assert swapped_blocks((2, 3, 4, 5), (0, 2, 1, 3)) is None  # the last axis stays: not two blocks
    assert swapped_blocks((2, 3, 4), (0, 1, 2)) is None


def _transposed(shape, perm):
    g = Graph()
    x = g.add_input("x", f32(*shape))
    schema = get_schema("transpose")
    attrs = schema.normalize_attrs({"perm": perm})
    (t,) = schema.infer([x.type], attrs)
    y = g.add_node("transpose", [x], [t], attrs).output
    schema = get_schema("relu")  # something after it: the transpose is not the program's whole work
    (r,) = schema.infer([t], {})
    g.set_outputs([g.add_node("relu", [y], [r], {}).output])
    return module_of(g)


# (shape, perm, whether it runs compiled: two blocks of axes swapped, at least 4096 floats)
CASES = [((2, 96, 14, 14), (0, 2, 3, 1), True), ((2, 14, 14, 96), (0, 3, 1, 2), True), ((3, 50, 70), (0, 2, 1), True),
         ((2, 3, 4, 5), (0, 2, 3, 1), False), ((2, 16, 12, 40), (0, 2, 1, 3), False)]


@pytest.mark.parametrize("shape, perm, compiled", CASES)
def test_transposes_are_exact(monkeypatch, shape, perm, compiled):
    pytest.importorskip("numba")
    from lowerkit.backend.cpu import jit

    layout, ran = jit.load("layout"), []
    kernel = layout.transpose_last
    monkeypatch.setattr(layout, "transpose_last", lambda *args: ran.append(args[0].shape) or kernel(*args))
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    (got,) = run_glow(_transposed(shape, perm), x)
    np.testing.assert_array_equal(got, np.maximum(x.transpose(perm), 0))
    assert bool(ran) == compiled, ran
