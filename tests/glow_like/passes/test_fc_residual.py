"""``fuse_residual_adds`` on a fully-connected layer: ``x + fc(x)`` (a transformer's attention
projection, its second MLP layer) becomes ``glow.fc(x, w, bias, x)`` with ``residual=True`` —
on a team the many-row kernel's tiles add the residual, elsewhere ``glow.add``'s kernel runs
after the product — with the reference's results."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, rand, reference, run_glow

from lowerkit.opset import ShapeError
from lowerkit.ir import Graph, TensorType
from lowerkit_glow_like._compiler import compile_method
from lowerkit_glow_like._options import Options
from lowerkit_glow_like.payload.validate import check_instruction


def _block(n=1, length=50, c=64, bias=True, act=None, second_reader=False):
    """``act(x + (x @ w + b))`` over tokens [n, length, c]; ``second_reader``: the product is
    also an output."""
    g = Graph()
    x = g.add_input("x", f32(n, length, c))
    params = {"w": rand(c, c, seed=1) * 0.2, "b": rand(c, seed=2)}
    w = g.add_node("param", [], [f32(c, c)], {"name": "w"}).output
    y = g.add_node("matmul", [x, w], [f32(n, length, c)]).output
    if bias:
        b = g.add_node("param", [], [f32(c)], {"name": "b"}).output
        y = g.add_node("add", [y, b], [f32(n, length, c)]).output
    s = g.add_node("add", [x, y], [f32(n, length, c)]).output
    if act is not None:
        s = g.add_node(act, [s], [f32(n, length, c)]).output
    g.set_outputs([s, y] if second_reader else [s])
    return module_of(g, params), rand(n, length, c, seed=4)


def _fc(module):
    program = compile_method(module, "forward", Options())
    return program, [ins for ins in program.instructions if ins.op == "glow.fc"]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act", [None, "relu", "gelu"])
def test_the_add_fuses_into_the_fc_with_its_activation(bias, act):
    module, _ = _block(bias=bias, act=act)
    program, (fc,) = _fc(module)
    assert [ins.op for ins in program.instructions] == ["glow.fc"]
    assert fc.attrs["residual"] is True and fc.attrs.get("act", "none") == (act or "none")
    assert len(fc.inputs) == 4 and fc.inputs[3] == program.inputs[0]  # a zero bias keeps the places


def test_a_product_read_elsewhere_stays_apart():
    program, (fc,) = _fc(_block(second_reader=True)[0])
    assert not fc.attrs.get("residual") and {"add", "glow.add"} & {ins.op for ins in program.instructions}


# Batch 1 on one thread (the product, then glow.add's kernel) and on the team (the tiles add it:
# 197 rows, a 192 x 192 weight), batch 4 in slices; GELU runs after the tiles.
@pytest.mark.parametrize("n, length, c, threads", [(1, 50, 64, 1), (1, 197, 192, 2), (4, 50, 64, 2), (3, 197, 192, 1)])
@pytest.mark.parametrize("act", [None, "gelu"])
def test_fused_programs_match_reference(n, length, c, threads, act):
    module, x = _block(n=n, length=length, c=c, act=act)
    assert_close(run_glow(module, x, threads=threads), reference(module, x))


def test_on_a_team_the_tiles_add_the_residual(monkeypatch):
    from lowerkit.backend.cpu import panels
    from lowerkit.backend.cpu.jit.layer import team_ready

    if not team_ready():
        pytest.skip("team kernels cannot run here")
    seen = []
    real = panels.PackedBands.run_rows_team
    monkeypatch.setattr(panels.PackedBands, "run_rows_team",
                        lambda self, x, out, act, ways, residual=None: seen.append(residual is not None)
                        or real(self, x, out, act, ways, residual))
    module, x = _block(n=1, length=197, c=192)
    for _ in range(2):
        assert_close(run_glow(module, x, threads=2), reference(module, x))
    assert seen and all(seen)


def test_validation_takes_a_residual_of_the_output_s_type():
    x, w, b, out = f32(2, 5, 8), f32(8, 6), f32(6), f32(2, 5, 6)
    attrs = {"residual": True}
    assert check_instruction("glow.fc", [x, w, b, out], attrs, [out])["residual"] is True
    with pytest.raises(ShapeError, match="residual must be the output's type"):
        check_instruction("glow.fc", [x, w, b, TensorType("f32", (2, 5, 7))], attrs, [out])
    with pytest.raises(ShapeError, match="takes 4 inputs"):
        check_instruction("glow.fc", [x, w, b, out], {}, [out])
    with pytest.raises(ShapeError, match="takes 4 inputs"):
        check_instruction("glow.fc", [x, w, b], attrs, [out])
