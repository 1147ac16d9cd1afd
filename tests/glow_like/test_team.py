"""glow_like's team mode (one image on several cores, each convolution one compiled parallel
region): which programs take it, results against the reference and the serial program
(pointwise, im2col, depthwise of every kernel family, squeeze-excitation gates, the
fully-connected head), 8 threads on one handle, steady-state allocation, and a forked child
falling back to the serial forms."""

from __future__ import annotations

import os
import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, peak_call_bytes
from tests.team_calls import from_threads, record_team_calls, rows_kernel, team_on_small_layers

from lowerkit.ir import Graph, TensorType
from lowerkit.opset import get_schema

glow = pytest.importorskip("lowerkit_glow_like")
pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _team_everywhere(monkeypatch):
    """Team forms on the tests' small layers; batches stay whole (not slices)."""
    team_on_small_layers(monkeypatch)
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def mobile_block(n=1, c=6, hw=15, *, seed=0):
    """A MobileNet/EfficientNet-like program: strided 3x3 stem (im2col), pointwise expand
    (row bands) + relu6, depthwise 3x3 stride 1 and 2 (flat and phases above 14x14 outputs,
    else blocked), 5x5 and 7x7 (blocked),
    squeeze-excitation gate (folded into the next 1x1), pointwise project to few channels
    (column bands), global pool and a fully-connected head."""
    rng = np.random.default_rng(seed)
    g, params = Graph(), {}

    def param(name, shape, scale=0.4):
        params[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
        return g.add_node("param", [], [f32(*shape)], {"name": name}).output

    x = g.add_input("x", f32(n, 5, 2 * hw, 2 * hw))  # 5 channels: more than a direct stem takes
    y = _add(g, "conv2d", [x, param("stem", (c, 5, 3, 3)), param("stem_b", (c,))], {"stride": (2, 2), "padding": (1, 1, 1, 1)})
    y = _add(g, "relu6", [_add(g, "conv2d", [y, param("expand", (4 * c, c, 1, 1)), param("expand_b", (4 * c,))])])
    e = 4 * c
    y = _add(g, "relu6", [_add(g, "conv2d", [y, param("dw1", (e, 1, 3, 3))], {"padding": (1, 1, 1, 1), "groups": e})])
    y = _add(g, "silu", [_add(g, "conv2d", [y, param("dw5", (e, 1, 5, 5))], {"padding": (2, 2, 2, 2), "groups": e})])
    y = _add(g, "conv2d", [y, param("dw7", (e, 1, 7, 7), 0.1)], {"padding": (3, 3, 3, 3), "groups": e})
    s = _add(g, "global_avg_pool2d", [y])
    s = _add(g, "relu", [_add(g, "conv2d", [s, param("se1", (4, e, 1, 1)), param("se1_b", (4,))])])
    gate = _add(g, "sigmoid", [_add(g, "conv2d", [s, param("se2", (e, 4, 1, 1)), param("se2_b", (e,))])])
    y = _add(g, "conv2d", [_add(g, "mul", [y, gate]), param("project", (3, e, 1, 1)), param("project_b", (3,))])
    y = _add(g, "relu", [_add(g, "conv2d", [y, param("up", (e, 3, 1, 1))])])
    y = _add(g, "conv2d", [y, param("dw2", (e, 1, 3, 3))], {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": e})
    y = _add(g, "reshape", [_add(g, "global_avg_pool2d", [y])], {"shape": (n, e)})
    w_fc = param("fc", (7, e))
    g.set_outputs([_add(g, "linear", [y, w_fc, param("fc_b", (7,))])])
    return module_of(g, params)


def _param_maker(g: Graph, params: dict, rng: np.random.Generator, scale: float):
    """A function adding a random parameter of a shape to ``g`` (its values into ``params``)."""

    def param(name, shape):
        params[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
        return g.add_node("param", [], [f32(*shape)], {"name": name}).output

    return param


def _compile(module, **options):
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": options})
    return glow.lowerkit_compile(processed=payload, compile_spec={"forward": options})["forward"]


def _input(n=1, hw=15, seed=1):
    return np.random.default_rng(seed).standard_normal((n, 5, 2 * hw, 2 * hw)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 3])
def test_mobile_block_runs_as_a_team_and_matches_the_reference(n):
    module, x = mobile_block(n=n), _input(n)
    handle = _compile(module, threads=2)
    assert handle.team is not None and handle.team.ways == 2
    assert handle.blas_threads == 1 and handle.parallel is None
    ops = [(ins.op, ins.attrs.get("algo")) for ins in handle.program.instructions]
    assert ("glow.gated_conv2d", None) in ops and ("glow.fc", None) in ops
    (got,) = handle.run([x])
    assert_close([got], [module.run("forward", x)], rtol=1e-4)
    serial = _compile(module, threads=1)
    assert serial.team is None
    assert_close([got], serial.run([x]), rtol=1e-5)


def test_team_is_off_by_environment_and_beside_a_gemm_without_team_form(monkeypatch):
    module = mobile_block()
    monkeypatch.setenv("LOWERKIT_GLOW_TEAM", "0")
    assert _compile(module, threads=2).team is None
    monkeypatch.delenv("LOWERKIT_GLOW_TEAM")
    # A matmul (no team form) would run on one BLAS thread in team mode: the program keeps BLAS's threads.
    g = Graph()
    x = g.add_input("x", f32(1, 4, 6, 6))
    w = g.add_node("param", [], [f32(4, 4, 1, 1)], {"name": "w"}).output
    y = _add(g, "reshape", [_add(g, "conv2d", [x, w])], {"shape": (4, 36)})
    g.set_outputs([_add(g, "matmul", [y, _add(g, "transpose", [y], {"perm": (1, 0)})])])
    handle = _compile(module_of(g, {"w": np.ones((4, 4, 1, 1), np.float32)}), threads=2)
    assert handle.team is None and handle.blas_threads == 2


@pytest.mark.parametrize("tokens,team", [(197, True), (3, False)])
def test_a_program_of_fully_connected_layers_takes_team_mode_when_they_are_large(tokens, team):
    """No convolution (a transformer's layers, a partition's region after the patch
    embedding): fully-connected layers of at least 1M multiply-adds put the program in team
    mode, as convolutions do (BLAS at one thread, the layers as team regions); smaller ones
    leave it serial, BLAS at one thread."""
    rng = np.random.default_rng(2)
    g = Graph()
    x = g.add_input("x", f32(1, tokens, 192))
    w1 = g.add_node("param", [], [f32(768, 192)], {"name": "w1"}).output
    w2 = g.add_node("param", [], [f32(192, 768)], {"name": "w2"}).output
    y = _add(g, "gelu", [_add(g, "linear", [x, w1])])
    g.set_outputs([_add(g, "linear", [y, w2])])
    params = {"w1": (rng.standard_normal((768, 192)) * 0.05).astype(np.float32),
              "w2": (rng.standard_normal((192, 768)) * 0.05).astype(np.float32)}
    module = module_of(g, params)
    handle = _compile(module, threads=2)
    assert (handle.team is not None) is team and handle.blas_threads == 1
    xs = rng.standard_normal((1, tokens, 192)).astype(np.float32)
    assert_close(handle.run([xs]), [module.run("forward", xs)], rtol=1e-4)


def test_eight_threads_share_a_team_handle_and_calls_allocate_only_outputs():
    module = mobile_block()
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, 5, 30, 30)).astype(np.float32) for _ in range(8)]
    expected = [module.run("forward", x) for x in xs]
    handle = _compile(module, threads=2)
    for _ in range(2):
        handle.run([xs[0]])
    assert peak_call_bytes(handle, xs[0]) < 8192  # small Python objects, no arrays
    results = from_threads(lambda i: [handle.run([xs[i]])[0] for _ in range(4)])
    for i in range(8):
        for got in results[i]:
            assert_close([got], [expected[i]], rtol=1e-4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_the_serial_forms():
    """GNU OpenMP cannot run in a child forked after the parent used it: the child's calls
    take the serial forms and still compute the same result."""
    module, x = mobile_block(), _input()
    handle = _compile(module, threads=2)
    (expected,) = handle.run([x])  # the parent has run team regions
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            from lowerkit.backend.cpu.jit.layer import forked

            (got,) = handle.run([x])
            code = 0 if forked() and np.allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max()) else 3
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    status = os.read(read, 1)
    os.close(read)
    _, exit_status = os.waitpid(pid, 0)
    assert status == b"\x00" and os.waitstatus_to_exitcode(exit_status) == 0


@pytest.mark.parametrize("rows", [False, True], ids=["flat-blocked", "rows"])
def test_every_team_kernel_family_runs_in_the_mobile_block(monkeypatch, rows):
    depthwise = rows_kernel(monkeypatch, rows, strided=True)
    ran = record_team_calls(monkeypatch)
    module = mobile_block(hw=32)  # 32x32 planes: the 3x3 depthwise layers run flat and on phases
    x = _input(hw=32)
    handle = _compile(module, threads=2)
    (got,) = handle.run([x])
    assert_close([got], [module.run("forward", x)], rtol=1e-4)
    # team_gated_gemm: the squeeze-excitation gate folded into the projection (glow.gated_conv2d)
    assert {"team_gated_gemm", "im2col"} | depthwise <= set(ran), ran
    assert "fc_bias_activation" not in ran  # the head has one row: a matrix-vector product, on numpy


def test_a_fully_connected_layer_runs_on_the_team_for_several_rows_only(monkeypatch):
    """glow.fc over the last axis of [1, 4, 8, 8] (32 rows) is a team region; the head over
    the flattened result (one row) is numpy's matrix-vector product. Both match the reference."""
    rng = np.random.default_rng(5)
    g, params = Graph(), {}
    param = _param_maker(g, params, rng, 0.4)
    x = g.add_input("x", f32(1, 3, 8, 8))
    y = _add(g, "conv2d", [x, param("conv", (4, 3, 3, 3))], {"padding": (1, 1, 1, 1)})
    y = _add(g, "linear", [y, param("rows", (5, 8)), param("rows_b", (5,))])  # [1, 4, 8, 5]: 32 rows
    y = _add(g, "reshape", [y], {"shape": (1, 160)})
    g.set_outputs([_add(g, "linear", [y, param("head", (7, 160)), param("head_b", (7,))])])
    module = module_of(g, params)
    handle = _compile(module, threads=2)
    assert handle.team is not None
    ran = record_team_calls(monkeypatch)
    xv = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    (got,) = handle.run([xv])
    assert ran.count("team_fc") == 1, ran  # row panels against the packed bands
    assert_close([got], [module.run("forward", xv)], rtol=1e-4)


def test_a_stalling_handle_runs_its_serial_forms_until_a_probe(monkeypatch):
    """The handle's StallGuard switched off (as after a streak of stalled calls): calls run
    the serial forms — no team region — and compute the same result."""
    module, x = mobile_block(), _input()
    handle = _compile(module, threads=2)
    (expected,) = handle.run([x])
    ran = record_team_calls(monkeypatch)
    guard = handle.team.guard
    guard.on, guard._serial_left = False, 3
    for _ in range(2):
        (got,) = handle.run([x])
        assert_close([got], [expected], rtol=1e-5)
    assert ran == [] and not guard.on
    handle.run([x])  # the third call probes the team again
    assert ran and guard.on


@pytest.mark.parametrize("n", [1, 2])
def test_max_pool_runs_as_a_team_region(monkeypatch, n):
    """ResNet's stem: a convolution, then the 3x3 stride-2 max pool in bands of planes."""
    rng = np.random.default_rng(3)
    g, params = Graph(), {"w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)}
    x = g.add_input("x", f32(n, 3, 20, 18))
    w = g.add_node("param", [], [f32(8, 3, 3, 3)], {"name": "w"}).output
    y = _add(g, "relu", [_add(g, "conv2d", [x, w], {"padding": (1, 1, 1, 1)})])
    g.set_outputs([_add(g, "max_pool2d", [y], {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1)})])
    module = module_of(g, params)
    ran = record_team_calls(monkeypatch)
    handle = _compile(module, threads=2)
    assert handle.team is not None
    xs = rng.standard_normal((n, 3, 20, 18)).astype(np.float32)
    (got,) = handle.run([xs])
    assert "max_pool3x3" in ran, ran
    assert_close([got], [module.run("forward", xs)], rtol=1e-5)


def _attention_module(mask_kind: str, seed: int = 5, heads: int = 2):
    """Three 1x1 convolutions give q, k, v of ``heads`` heads x 20 tokens x 4 (a convolution
    puts the program in team mode), then scaled dot-product attention with ``mask_kind``:
    none, a float mask over the scores, a boolean one that masks every key of one query, or
    causal."""
    rng = np.random.default_rng(seed)
    g, params = Graph(), {}
    x = g.add_input("x", f32(1, 6, 4, 5))

    def projection(name):
        params[name] = (rng.standard_normal((4 * heads, 6, 1, 1)) * 0.5).astype(np.float32)
        w = g.add_node("param", [], [f32(4 * heads, 6, 1, 1)], {"name": name}).output
        y = _add(g, "reshape", [_add(g, "conv2d", [x, w])], {"shape": (1, heads, 4, 20)})
        return _add(g, "transpose", [y], {"perm": (0, 1, 3, 2)})

    q, k, v = projection("wq"), projection("wk"), projection("wv")
    operands, attrs = [q, k, v], {"scale": 0.5}
    if mask_kind == "float":
        params["mask"] = (rng.standard_normal((20, 20)) * 2).astype(np.float32)
        operands.append(g.add_node("param", [], [f32(20, 20)], {"name": "mask"}).output)
    elif mask_kind == "bool":
        keep = rng.random((1, 1, 20, 20)) > 0.3
        keep[..., 7, :] = False  # a query that sees no key: nan, as torch gives it
        params["mask"] = keep
        operands.append(g.add_node("param", [], [TensorType("bool", (1, 1, 20, 20))], {"name": "mask"}).output)
    elif mask_kind == "causal":
        attrs["is_causal"] = True
    g.set_outputs([_add(g, "scaled_dot_product_attention", operands, attrs)])
    return module_of(g, params)


@pytest.mark.parametrize("heads", [2, 3])
@pytest.mark.parametrize("mask_kind", ["none", "float", "bool", "causal"])
def test_attention_splits_its_query_rows_on_the_team(monkeypatch, mask_kind, heads):
    """The heads' query rows in two equal bands on the team (jit.team.attention; with three
    heads the band boundary falls inside the second head), the mask added between two
    regions; the same values as the reference and the serial program."""
    module = _attention_module(mask_kind, heads=heads)
    x = np.random.default_rng(6).standard_normal((1, 6, 4, 5)).astype(np.float32)
    handle = _compile(module, threads=2)
    assert handle.team is not None
    ran = record_team_calls(monkeypatch)
    (got,) = handle.run([x])
    assert ran.count("attention") == (1 if mask_kind == "none" else 2)
    want = np.asarray(module.run("forward", x))
    if mask_kind == "bool":
        assert np.isnan(got[:, :, 7]).all() and np.isnan(want[:, :, 7]).all()
        got, want = np.delete(got, 7, axis=2), np.delete(want, 7, axis=2)
    assert_close([got], [want], rtol=1e-5)
    (serial,) = _compile(module, threads=1).run([x])
    if mask_kind == "bool":
        serial = np.delete(serial, 7, axis=2)
    np.testing.assert_allclose(got, serial, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mask_kind", ["none", "float"])
def test_eight_threads_share_an_attention_handle(mask_kind):
    """Eight threads calling one handle whose attention runs on the team get, call after call,
    the bits a lone call gives for their input."""
    module = _attention_module(mask_kind)
    handle = _compile(module, threads=2)
    assert handle.team is not None
    xs = [np.random.default_rng(10 + i).standard_normal((1, 6, 4, 5)).astype(np.float32) for i in range(8)]
    alone = [handle.run([x])[0] for x in xs]
    results = from_threads(lambda i: [handle.run([xs[i]])[0] for _ in range(10)])
    for i in range(8):
        for got in results[i]:
            np.testing.assert_array_equal(got, alone[i])


def test_a_squeeze_excitation_layer_runs_on_the_team_where_its_weight_is_large(monkeypatch):
    """1x1 convolutions on a pooled map (one pixel an image) are matrix-vector products: the
    one whose weight reaches MIN_LINEAR_WEIGHTS (512 -> 256) runs as a team region whatever
    its FLOPs (262K, under MIN_FLOPS), the small one (256 -> 16) on the calling thread; both
    match the reference."""
    from lowerkit.backend.cpu import team_layers

    monkeypatch.setattr(team_layers, "MIN_FLOPS", 1_000_000)  # the real thresholds, not the fixture's
    monkeypatch.setattr(team_layers, "MIN_LINEAR_WEIGHTS", 65_536)
    rng = np.random.default_rng(7)
    g, params = Graph(), {}
    param = _param_maker(g, params, rng, 0.05)
    x = g.add_input("x", f32(1, 512, 7, 7))
    s = _add(g, "global_avg_pool2d", [x])
    s = _add(g, "relu", [_add(g, "conv2d", [s, param("se1", (256, 512, 1, 1)), param("se1_b", (256,))])])
    g.set_outputs([_add(g, "conv2d", [s, param("se2", (16, 256, 1, 1)), param("se2_b", (16,))])])
    module = module_of(g, params)
    assert _compile(module, threads=2).team is not None
    xv = rng.standard_normal((1, 512, 7, 7)).astype(np.float32)
    ran = record_team_calls(monkeypatch)
    handle = _compile(module, threads=2)  # compiling binds and runs once on zeros
    ran.clear()
    (got,) = handle.run([xv])
    assert ran == ["team_gemm"], ran
    assert_close([got], [module.run("forward", xv)], rtol=1e-4)


def _transformer_block(tokens=64, width=96, heads=4, n=2, seed=9):
    """Layer norm, a qkv projection (3.5M multiply-adds: team mode), the heads split off by a
    reshape and a transpose, a split into q, k and v, attention, the heads merged back."""
    rng = np.random.default_rng(seed)
    g, params = Graph(), {}
    param = _param_maker(g, params, rng, 0.2)
    x = g.add_input("x", f32(n, tokens, width))
    y = _add(g, "layer_norm", [x, param("ln_w", (width,)), param("ln_b", (width,))], {"axis": -1})
    qkv = _add(g, "linear", [y, param("qkv", (3 * width, width))])
    qkv = _add(g, "reshape", [qkv], {"shape": (n, tokens, 3, heads, width // heads)})
    qkv = _add(g, "transpose", [qkv], {"perm": (2, 0, 3, 1, 4)})
    schema = get_schema("split")
    attrs = schema.normalize_attrs({"sizes": (1, 1, 1), "dim": 0})
    types = schema.infer([qkv.type], attrs)
    q, k, v = (_add(g, "reshape", [part], {"shape": (n, heads, tokens, width // heads)})
               for part in g.add_node("split", [qkv], types, attrs).outputs)
    a = _add(g, "scaled_dot_product_attention", [q, k, v], {"scale": 0.5})
    g.set_outputs([_add(g, "transpose", [a], {"perm": (0, 2, 1, 3)})])
    return module_of(g, params)


@pytest.mark.parametrize("rows_per_token", [1, 2])
def test_a_layer_norm_runs_as_a_team_region(monkeypatch, rows_per_token):
    """In team mode a layer norm runs in bands of rows (``jit.team.layer_norm``, the serial
    row kernel on each band): the same values as the reference and the serial program."""
    from lowerkit_glow_like.kernels import layernorm

    monkeypatch.setattr(layernorm, "TEAM_MIN_FLOATS", 0)
    module = _transformer_block(n=rows_per_token)
    x = np.random.default_rng(4).standard_normal((rows_per_token, 64, 96)).astype(np.float32)
    handle = _compile(module, threads=2)
    assert handle.team is not None
    ran = record_team_calls(monkeypatch)
    (got,) = handle.run([x])
    assert ran.count("layer_norm") == 1, ran
    assert_close([got], [module.run("forward", x)], rtol=1e-5)
    (serial,) = _compile(module, threads=1).run([x])
    np.testing.assert_allclose(got, serial, rtol=1e-5, atol=1e-6)
