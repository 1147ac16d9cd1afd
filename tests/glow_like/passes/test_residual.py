"""``fuse_residual_adds``: conv + add [+ activation] -> one ``glow.conv2d`` with ``residual=True``;
which convolution it takes, what it leaves alone, and the fused programs against reference on
every form the convolution kernel can take (panel GEMM tiles, Winograd's output transform, the
team, batch slices, and the forms that run the sum as a pass of its own)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, rand, reference, run_glow

from lowerkit.ir import Graph
from lowerkit_glow_like._compiler import compile_method
from lowerkit_glow_like._graph import evaluate, working_graph
from lowerkit_glow_like._options import Options
from lowerkit_glow_like.passes import fuse_activations
from lowerkit_glow_like.passes.residual import fuse_residual_adds


def _ops(graph):
    return [n.op for n in graph.nodes if n.op not in ("constant", "param")]


def _block(n=1, c=8, hw=9, stride=1, kernel=1, groups=1, bias=True, act=True, shortcut_conv=False, order="conv_last"):
    """relu(conv(x) + shortcut): shortcut is x, or a 1x1 convolution of x computed before
    (``order="conv_last"``) or after the main one."""
    g = Graph()
    x = g.add_input("x", f32(n, c, hw, hw))
    pad = kernel // 2
    oh = (hw + 2 * pad - kernel) // stride + 1
    params = {"w": rand(c, c // groups, kernel, kernel, seed=1) * 0.3, "b": rand(c, seed=2)}

    def conv(name, inp, k, s, p, grp, with_bias):
        ins = [inp, g.add_node("param", [], [f32(*params[name].shape)], {"name": name}).output]
        if with_bias:
            ins.append(g.add_node("param", [], [f32(c)], {"name": "b"}).output)
        attrs = {"stride": (s, s), "padding": (p,) * 4, "dilation": (1, 1), "groups": grp}
        return g.add_node("conv2d", ins, [f32(n, c, oh, oh)], attrs).output

    short = x
    if shortcut_conv:
        params["ws"] = rand(c, c, 1, 1, seed=3) * 0.3
        if order == "conv_last":
            short = conv("ws", x, 1, stride, 0, 1, False)
    y = conv("w", x, kernel, stride, pad, groups, bias)
    if shortcut_conv and order != "conv_last":
        short = conv("ws", x, 1, stride, 0, 1, False)
    s = g.add_node("add", [y, short], [f32(n, c, oh, oh)]).output
    g.set_outputs([g.add_node("relu", [s], [f32(n, c, oh, oh)]).output if act else s])
    return module_of(g, params), rand(n, c, hw, hw, seed=4)


def _fused(module):
    work = working_graph(module, "forward")
    fuse_activations(work)
    return work, fuse_residual_adds(work)


def test_conv_add_relu_becomes_one_convolution_with_the_residual_last():
    module, x = _block()
    work, changed = _fused(module)
    assert changed and _ops(work) == ["glow.conv2d"]
    conv = next(n for n in work.nodes if n.op == "glow.conv2d")
    assert conv.attrs["residual"] is True and conv.attrs["act"] == "relu"
    assert conv.inputs[3] is work.inputs[0] and conv.output is work.outputs[0]


def test_a_convolution_without_bias_gets_a_zero_one():
    module, x = _block(bias=False, act=False)
    work, changed = _fused(module)
    conv = next(n for n in work.nodes if n.op == "glow.conv2d")
    assert changed and len(conv.inputs) == 4 and "act" not in conv.attrs
    assert_close(evaluate_fused(module, x), reference(module, x))


@pytest.mark.parametrize("order", ["conv_last", "conv_first"])
def test_of_two_convolutions_the_one_computed_last_takes_the_other(order):
    module, x = _block(shortcut_conv=True, order=order)
    work, changed = _fused(module)
    convs = [n for n in work.nodes if n.op in ("conv2d", "glow.conv2d")]
    fused = [n for n in convs if n.attrs.get("residual")]
    assert changed and len(fused) == 1 and fused[0] is convs[-1]
    assert fused[0].inputs[3] is convs[0].output


def test_left_alone_activated_grouped_or_shared_convolutions():
    module, _ = _block(groups=2)
    assert _fused(module)[1] is False
    g = Graph()  # relu(conv(x)) + x: the activation comes first
    x = g.add_input("x", f32(1, 4, 5, 5))
    w = g.add_node("param", [], [f32(4, 4, 1, 1)], {"name": "w"}).output
    y = g.add_node("conv2d", [x, w], [f32(1, 4, 5, 5)]).output
    r = g.add_node("relu", [y], [f32(1, 4, 5, 5)]).output
    g.set_outputs([g.add_node("add", [r, x], [f32(1, 4, 5, 5)]).output])
    assert _fused(module_of(g, {"w": rand(4, 4, 1, 1)}))[1] is False
    g = Graph()  # conv(x) + x, the convolution's output also a graph output
    x = g.add_input("x", f32(1, 4, 5, 5))
    w = g.add_node("param", [], [f32(4, 4, 1, 1)], {"name": "w"}).output
    y = g.add_node("conv2d", [x, w], [f32(1, 4, 5, 5)]).output
    g.set_outputs([g.add_node("add", [y, x], [f32(1, 4, 5, 5)]).output, y])
    assert _fused(module_of(g, {"w": rand(4, 4, 1, 1)}))[1] is False


def test_a_broadcast_add_is_left_alone():
    g = Graph()
    x = g.add_input("x", f32(1, 4, 5, 5))
    v = g.add_input("v", f32(1, 4, 1, 1))
    w = g.add_node("param", [], [f32(4, 4, 1, 1)], {"name": "w"}).output
    y = g.add_node("conv2d", [x, w], [f32(1, 4, 5, 5)]).output
    g.set_outputs([g.add_node("add", [y, v], [f32(1, 4, 5, 5)]).output])
    assert _fused(module_of(g, {"w": rand(4, 4, 1, 1)}))[1] is False


def evaluate_fused(module, x):
    work, _ = _fused(module)
    return evaluate(work, [x])


def test_the_compiled_program_fuses_at_level_2_in_float_only():
    module, _ = _block(n=1)
    assert "fuse_residual_adds" in compile_method(module, "forward", Options()).passes
    assert "fuse_residual_adds" not in compile_method(module, "forward", Options(opt_level=1)).passes


# 1x1 (panel GEMM in place), 3x3 (im2col then the panel GEMM, or Winograd on larger maps: the
# separate pass), 1x1/2 and 3x3/2 (row tiles or im2col), a shortcut convolution; batch 1 on
# the team and in one thread, batch 4 in slices.
CASES = [dict(kernel=1), dict(kernel=3), dict(kernel=1, stride=2, shortcut_conv=True),
         dict(kernel=3, stride=2, c=16, hw=30, shortcut_conv=True), dict(kernel=1, shortcut_conv=True, order="conv_first"),
         dict(kernel=3, c=64, hw=40)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("n, threads", [(1, 1), (1, 2), (4, 2)])
@pytest.mark.parametrize("wide_tile", [False, True], ids=["avx2_rules", "wide_tile_rules"])
def test_fused_programs_match_reference(monkeypatch, case, n, threads, wide_tile):
    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "_RULES", ["wide" if wide_tile else "avx2"])
    module, x = _block(n=n, **case)
    got = run_glow(module, x, threads=threads)
    assert_close(got, reference(module, x))


def test_a_saved_fused_program_loads(tmp_path):
    import lowerkit as lk

    module, x = _block(n=2)
    path = tmp_path / "block.lk"
    lk.save(lk.to_backend(module, "glow_like"), path)
    assert_close([np.asarray(lk.load(path)(x))], reference(module, x))


def _residual_instruction(program):
    return next(ins for ins in program.instructions if any(a.name == "residual" for a in ins.attrs))


def _set_residual_false(program):
    next(a for a in _residual_instruction(program).attrs if a.name == "residual").b = False


@pytest.mark.parametrize("edit", [
    _set_residual_false,
    lambda p: _residual_instruction(p).inputs.pop(),  # the residual operand gone
    lambda p: _residual_instruction(p).inputs.__setitem__(3, _residual_instruction(p).inputs[1]),  # the weight's type
], ids=["residual_false", "three_inputs", "wrong_type"])
def test_a_corrupt_fused_residual_is_a_format_error(edit):
    import lowerkit_glow_like as glow
    from lowerkit.errors import FormatError
    from lowerkit_glow_like.payload import glow_like_pb2 as pb

    module, _ = _block(n=1)
    msg = pb.Payload()
    msg.ParseFromString(glow.lowerkit_preprocess(module=module, compile_spec={}))
    edit(msg.programs[0])
    with pytest.raises(FormatError, match="residual|takes|inputs"):
        glow.lowerkit_compile(processed=msg.SerializeToString(), compile_spec={})


@pytest.mark.parametrize("case, n, threads, separate", [
    (dict(kernel=1, c=64, hw=40), 1, 2, False),  # the panel GEMM's tiles on the team
    (dict(kernel=3, c=64, hw=40), 1, 2, False),  # Winograd's output transform on the team
    (dict(kernel=1), 1, 1, True),  # one thread: the pass after the convolution
    (dict(kernel=3, stride=2, c=16, hw=30, shortcut_conv=True), 4, 1, True),  # one sgemm over the batch
], ids=["1x1_team_panel_gemm", "3x3_team_winograd", "1x1_one_thread", "3x3s2_batched_sgemm"])
def test_team_forms_add_the_residual_themselves_and_one_thread_runs_a_pass(monkeypatch, case, n, threads, separate):
    import lowerkit_glow_like.kernels.conv as conv_kernels
    from lowerkit.backend.cpu import make_team

    if threads > 1 and make_team(2) is None:
        pytest.skip("team kernels cannot run here")
    passes = []
    original = conv_kernels.prepare_add
    monkeypatch.setattr(conv_kernels, "prepare_add", lambda *args: passes.append(args) or original(*args))
    module, x = _block(n=n, **case)
    assert_close(run_glow(module, x, threads=threads), reference(module, x))
    assert bool(passes) is separate


def test_on_one_thread_the_tiles_can_add_it_too(monkeypatch):
    import lowerkit_glow_like.kernels.conv as conv_kernels

    monkeypatch.setattr(conv_kernels, "_FUSE_SERIAL", True)
    for case in (dict(kernel=1), dict(kernel=3, c=64, hw=40), dict(kernel=1, stride=2, shortcut_conv=True)):
        module, x = _block(n=2, **case)
        assert_close(run_glow(module, x, threads=1), reference(module, x))


def _gated_block(n=1, c=8, hw=9, act=False):
    """EfficientNet's block end: x -> expand (silu) -> squeeze-excitation gate -> the gated 1x1
    projection (glow.gated_conv2d once fold_gates ran) -> + x [-> relu]."""
    g = Graph()
    x = g.add_input("x", f32(n, c, hw, hw))
    e = 3 * c
    params = {"expand": rand(e, c, 1, 1, seed=1) * 0.3, "expand_b": rand(e, seed=2),
              "se1": rand(4, e, 1, 1, seed=3) * 0.3, "se1_b": rand(4, seed=4),
              "se2": rand(e, 4, 1, 1, seed=5) * 0.3, "se2_b": rand(e, seed=6),
              "project": rand(c, e, 1, 1, seed=7) * 0.3, "project_b": rand(c, seed=8)}

    def add(op, ins, shape, attrs=None):
        return g.add_node(op, ins, [f32(*shape)], attrs or {}).output

    def conv(inp, name, oc, size):
        ins = [inp] + [g.add_node("param", [], [f32(*params[p].shape)], {"name": p}).output for p in (name, name + "_b")]
        attrs = {"stride": (1, 1), "padding": (0,) * 4, "dilation": (1, 1), "groups": 1}
        return add("conv2d", ins, (n, oc, size, size), attrs)

    y = add("silu", [conv(x, "expand", e, hw)], (n, e, hw, hw))
    s = add("global_avg_pool2d", [y], (n, e, 1, 1))
    s = add("sigmoid", [conv(add("relu", [conv(s, "se1", 4, 1)], (n, 4, 1, 1)), "se2", e, 1)], (n, e, 1, 1))
    p = conv(add("mul", [y, s], (n, e, hw, hw)), "project", c, hw)
    out = add("add", [p, x], (n, c, hw, hw))
    g.set_outputs([add("relu", [out], (n, c, hw, hw)) if act else out])
    return module_of(g, params), rand(n, c, hw, hw, seed=9)


@pytest.mark.parametrize("act", [False, True])
def test_a_gated_projection_takes_its_residual_as_a_fifth_input(act):
    module, _ = _gated_block(act=act)
    program = compile_method(module, "forward", Options())
    gated = [ins for ins in program.instructions if ins.op == "glow.gated_conv2d"]
    assert len(gated) == 1 and gated[0].attrs.get("residual") is True and len(gated[0].inputs) == 5
    assert gated[0].attrs.get("act", "none") == ("relu" if act else "none")
    assert not any(ins.op in ("add", "glow.add") for ins in program.instructions)


@pytest.mark.parametrize("n, threads", [(1, 1), (1, 2), (3, 2)])
@pytest.mark.parametrize("wide_tile", [False, True], ids=["avx2_rules", "wide_tile_rules"])
@pytest.mark.parametrize("act", [False, True])
def test_fused_gated_programs_match_reference(monkeypatch, n, threads, wide_tile, act):
    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "_RULES", ["wide" if wide_tile else "avx2"])
    module, x = _gated_block(n=n, act=act)
    assert_close(run_glow(module, x, threads=threads), reference(module, x))


def test_on_a_team_the_gated_panel_gemm_adds_the_residual_and_off_it_a_pass_does(monkeypatch):
    """Batch 1 on two threads, the panel GEMM taking the projection: the residual goes into
    the gated kernel's bound call (bind_team_gated); with the handle's stall guard off, the
    serial form runs and then glow.add's kernel — the same outputs."""
    from lowerkit.backend.cpu import make_team, panels
    from tests.team_calls import team_on_small_layers

    if make_team(2) is None:
        pytest.skip("team kernels cannot run here")
    team_on_small_layers(monkeypatch)
    monkeypatch.setattr(panels, "_RULES", ["wide"])
    residuals = []
    original = panels.PackedWeight.bind_team_gated

    def spy(self, *args):
        call, added = original(self, *args), args[-1] is not None
        return lambda: (residuals.append(added), call())

    monkeypatch.setattr(panels.PackedWeight, "bind_team_gated", spy)
    module, x = _gated_block(act=True)
    import lowerkit_glow_like as glow

    spec = {"forward": {"threads": 2}}
    handle = glow.lowerkit_compile(processed=glow.lowerkit_preprocess(module=module, compile_spec=spec),
                                   compile_spec=spec)["forward"]
    expected = reference(module, x)
    assert_close(handle.run([x]), expected)
    assert residuals and all(residuals)
    ran = len(residuals)
    handle.team.guard.on, handle.team.guard._serial_left = False, 5
    assert_close(handle.run([x]), expected)
    assert len(residuals) == ran  # the team's kernel did not run again


def test_a_gated_residual_of_the_wrong_type_is_a_format_error():
    import lowerkit_glow_like as glow
    from lowerkit.errors import FormatError
    from lowerkit_glow_like.payload import glow_like_pb2 as pb

    module, _ = _gated_block()
    msg = pb.Payload()
    msg.ParseFromString(glow.lowerkit_preprocess(module=module, compile_spec={}))
    gated = next(ins for ins in msg.programs[0].instructions if ins.op == "glow.gated_conv2d")
    gated.inputs[4] = gated.inputs[1]  # the weight where the residual belongs
    with pytest.raises(FormatError, match="residual"):
        glow.lowerkit_compile(processed=msg.SerializeToString(), compile_spec={})
    gated.inputs.pop()  # four inputs, residual=True
    with pytest.raises(FormatError, match="takes 5 inputs"):
        glow.lowerkit_compile(processed=msg.SerializeToString(), compile_spec={})
