"""fuse_plane_means: global_avg_pool2d(depthwise conv) -> glow.depthwise_mean, the pool's
means written by the depthwise kernel while each plane is in cache (squeeze-excitation)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, rand, reference, run_glow

from lowerkit.ir import Graph, TensorType
from lowerkit.opset import ShapeError, get_schema
from lowerkit_glow_like._compiler import compile_method
from lowerkit_glow_like._options import Options
from lowerkit_glow_like.kernels.grouped import grouped_algorithm
from lowerkit_glow_like.lir.batch import batch_sliceable
from lowerkit_glow_like.payload.validate import check_instruction


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def _squeeze_excite(n, c, hw, kernel, stride, *, dilation=1, act="silu", pooled_out=False):
    """x -> depthwise conv + act = y -> pool -> 1x1 conv + silu -> 1x1 conv -> sigmoid = gate;
    1x1 conv(y * gate): an EfficientNet block without its expansion."""
    g, params = Graph(), {}
    rng = np.random.default_rng(5)

    def param(name, shape):
        params[name] = rng.standard_normal(shape).astype(np.float32) * 0.5
        return g.add_node("param", [], [f32(*shape)], {"name": name}).output

    x = g.add_input("x", f32(n, c, hw, hw))
    pad = (dilation * (kernel // 2),) * 4
    y = _add(g, "conv2d", [x, param("dw", (c, 1, kernel, kernel)), param("dwb", (c,))],
             {"stride": (stride, stride), "padding": pad, "dilation": (dilation, dilation), "groups": c})
    y = _add(g, act, [y])
    s = _add(g, "global_avg_pool2d", [y])
    s = _add(g, "silu", [_add(g, "conv2d", [s, param("w1", (4, c, 1, 1)), param("b1", (4,))])])
    gate = _add(g, "sigmoid", [_add(g, "conv2d", [s, param("w2", (c, 4, 1, 1)), param("b2", (c,))])])
    out = _add(g, "conv2d", [_add(g, "mul", [y, gate]), param("w3", (8, c, 1, 1)), param("b3", (8,))])
    g.set_outputs([out, s] if pooled_out else [out])
    return module_of(g, params)


# (channels, input side, kernel, stride) -> the depthwise kernel each one takes (the rows kernel
# chosen for the last only: set either way whatever this CPU would choose)
CASES = {
    "depthwise3x3_same": (16, 20, 3, 1),
    "depthwise3x3_s2": (16, 32, 3, 2),
    "depthwise_blocked": (20, 14, 5, 1),  # 20 channels: a partial last block of 8
    "depthwise_rows": (20, 14, 5, 1),
}


@pytest.mark.parametrize("algorithm", list(CASES))
@pytest.mark.parametrize("batch, threads", [(1, 1), (1, 2), (3, 2)])
def test_fused_means_match_the_reference(monkeypatch, algorithm, batch, threads):
    from lowerkit.backend.cpu.jit import select

    monkeypatch.setattr(select, "rows_wanted", lambda: algorithm == "depthwise_rows")
    c, hw, k, s = CASES[algorithm]
    module, x = _squeeze_excite(batch, c, hw, k, s, pooled_out=True), rand(batch, c, hw, hw, seed=6)
    program = compile_method(module, "forward", Options(threads=threads))
    ops = [ins.op for ins in program.instructions]
    assert "fuse_plane_means" in program.passes
    assert ops.count("glow.depthwise_mean") == 1 and "global_avg_pool2d" not in ops
    dw = program.instructions[ops.index("glow.depthwise_mean")]
    shapes = [program.buffers[b].shape for b in (*dw.inputs[:2], dw.outputs[0])]
    assert grouped_algorithm(*shapes, dw.attrs) == algorithm
    assert batch_sliceable(program) == (batch > 1)
    # Both outputs: the block's, and the pooled means the depthwise kernel wrote.
    assert_close(run_glow(module, x, threads=threads), reference(module, x))


def test_a_team_sized_layer_fuses_too():
    """Large enough for the team forms (team_layers.MIN_DEPTHWISE_MACS) on two threads."""
    module, x = _squeeze_excite(1, 64, 28, 3, 1, pooled_out=True), rand(1, 64, 28, 28, seed=7)
    assert_close(run_glow(module, x, threads=2), reference(module, x))


def test_a_depthwise_kernel_without_means_keeps_its_pool():
    module = _squeeze_excite(1, 16, 20, 3, 1, dilation=2)  # dilated: the channels-last kernel
    ops = [ins.op for ins in compile_method(module, "forward", Options()).instructions]
    assert "global_avg_pool2d" in ops and "glow.depthwise_mean" not in ops


def test_an_unoptimised_program_keeps_the_pool():
    module = _squeeze_excite(1, 16, 20, 3, 1)
    ops = [ins.op for ins in compile_method(module, "forward", Options(opt_level=1)).instructions]
    assert "global_avg_pool2d" in ops and "glow.depthwise_mean" not in ops


def test_the_switch_keeps_the_pool(monkeypatch):
    monkeypatch.setenv("LOWERKIT_PLANE_MEANS", "0")
    module, x = _squeeze_excite(1, 16, 20, 3, 1, pooled_out=True), rand(1, 16, 20, 20, seed=9)
    program = compile_method(module, "forward", Options())
    ops = [ins.op for ins in program.instructions]
    assert "global_avg_pool2d" in ops and "glow.depthwise_mean" not in ops
    assert_close(run_glow(module, x), reference(module, x))


def _t(*shape, dtype="f32"):
    return TensorType(dtype, shape)


_ATTRS = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 8}


@pytest.mark.parametrize("inputs, outputs, error", [
    ([_t(2, 8, 6, 6), _t(8, 1, 3, 3), _t(8)], [_t(2, 8, 6, 6)], "has 2 outputs"),
    ([_t(2, 8, 6, 6), _t(8, 1, 3, 3), _t(8)], [_t(2, 8, 6, 6), _t(2, 8, 1, 2)], "means must be"),
    ([_t(2, 8, 6, 6), _t(8, 1, 3, 3), _t(8)], [_t(2, 8, 6, 6), _t(1, 8, 1, 1)], "means must be"),
    ([_t(2, 8, 6, 6), _t(8, 1, 3, 3), _t(8)], [_t(2, 8, 6, 5), _t(2, 8, 1, 1)], "conv2d"),
])
def test_payload_validation_refuses_bad_depthwise_mean_instructions(inputs, outputs, error):
    with pytest.raises(ShapeError, match=error):
        check_instruction("glow.depthwise_mean", inputs, _ATTRS, outputs)


def test_payload_validation_refuses_a_dense_depthwise_mean():
    attrs = {**_ATTRS, "groups": 1}
    with pytest.raises(ShapeError, match="depthwise"):
        check_instruction("glow.depthwise_mean", [_t(2, 8, 6, 6), _t(8, 8, 3, 3), _t(8)], attrs,
                          [_t(2, 8, 6, 6), _t(2, 8, 1, 1)])
