"""Batches as slices: a batch-sliceable program runs whole on each worker, each on its own
rows of the batch (lowerkit_glow_like.lir.batch, runtime.Executable). Which programs qualify,
and that slices compute what the whole program and the reference backend compute — on
uneven slices, over repeated calls (workers run ahead of each other), from 8 threads. A
slice runs its first instructions (those on large maps, lir.batch.head_length) image by
image: where the head ends, and that it computes the same."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, peak_call_bytes, rand

import lowerkit as lk
import lowerkit_glow_like as glow
from lowerkit import models
from lowerkit.ir import Graph
from lowerkit.opset import get_schema
from lowerkit_glow_like._compiler import compile_method
from lowerkit_glow_like._options import Options
from lowerkit_glow_like.lir.batch import batch_sliceable, head_length


@pytest.fixture(autouse=True)
def _slices_not_images(monkeypatch):
    """Programs with depthwise layers would run image by image on the team (test_per_image.py)."""
    monkeypatch.setenv("LOWERKIT_GLOW_PER_IMAGE", "0")


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def _param(g: Graph, name: str, shape) -> object:
    return g.add_node("param", [], [f32(*shape)], {"name": name}).output


def _program(graph: Graph, params: dict):
    return compile_method(module_of(graph, params), "forward", Options())


def _conv_relu(n: int) -> tuple[Graph, dict]:
    g = Graph()
    x = g.add_input("x", f32(n, 3, 8, 8))
    y = _add(g, "conv2d", [x, _param(g, "w", (4, 3, 3, 3))], {"padding": (1, 1, 1, 1)})
    g.set_outputs([_add(g, "relu", [y])])
    return g, {"w": rand(4, 3, 3, 3)}


def test_per_sample_programs_are_sliceable():
    assert batch_sliceable(_program(*_conv_relu(3)))
    assert not batch_sliceable(_program(*_conv_relu(1)))  # nothing to split


@pytest.mark.parametrize("case", ["softmax-over-batch", "per-sample-constant", "reshape-across-batch", "matmul"])
def test_programs_where_samples_meet_are_not_sliceable(case):
    g = Graph()
    x = g.add_input("x", f32(4, 6))
    params: dict = {}
    if case == "softmax-over-batch":
        y = _add(g, "softmax", [x], {"dim": 0})
    elif case == "per-sample-constant":
        params["c"] = rand(4, 6)
        y = _add(g, "add", [x, _param(g, "c", (4, 6))])
    elif case == "reshape-across-batch":
        y = _add(g, "relu", [_add(g, "reshape", [_add(g, "relu", [x])], {"shape": (2, 12)})])
    else:
        y = _add(g, "matmul", [x, _add(g, "transpose", [x], {"perm": (1, 0)})])
    g.set_outputs([y])
    program = _program(g, params)
    assert not batch_sliceable(program)
    (got,) = glow.lowerkit_execute(handle=_handle(module_of(g, params), threads=2), inputs=[rand(4, 6, seed=2)])
    want = module_of(g, params).run("forward", rand(4, 6, seed=2))
    assert_close([got], [want], rtol=1e-5)


def _handle(module, **options):
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": options})
    return glow.lowerkit_compile(processed=payload, compile_spec={"forward": options})["forward"]


def test_slices_are_chosen_per_batch_and_thread_count(monkeypatch):
    module = module_of(*_conv_relu(3))
    assert _handle(module, threads=2).batch_slices == [slice(0, 2), slice(2, 3)]
    assert _handle(module, threads=3).batch_slices == [slice(0, 1), slice(1, 2), slice(2, 3)]
    assert _handle(module, threads=4).batch_slices is None  # fewer images than workers: whole
    assert _handle(module, threads=1).batch_slices is None
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")
    assert _handle(module, threads=2).batch_slices is None


@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0", "resnet18"])
def test_slices_match_the_whole_program_and_the_reference(name, monkeypatch):
    x = models.example_input(name, batch=3, small=True)
    module = lk.trace(models.get(name, small=True), x)
    sliced = _handle(module, threads=2)
    assert sliced.batch_slices == [slice(0, 2), slice(2, 3)]
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")
    whole = _handle(module, threads=2)
    assert whole.batch_slices is None
    (expected,) = whole.run([x])
    for _ in range(5):  # the workers run ahead of each other differently on every call
        (got,) = sliced.run([x])
        assert_close([got], [expected], rtol=1e-5)
    assert_close([got], [np.asarray(module(x))], rtol=1e-4)


def test_eight_threads_share_one_sliced_handle():
    x = models.example_input("mobilenet_v2", batch=4, small=True)
    module = lk.trace(models.get("mobilenet_v2", small=True), x)
    handle = _handle(module, threads=2)
    assert handle.batch_slices is not None
    inputs = [x + np.float32(0.1 * i) for i in range(8)]
    expected = [handle.run([xi])[0] for xi in inputs]
    results: list = [None] * 8

    def worker(i: int) -> None:
        for _ in range(3):
            results[i] = handle.run([inputs[i]])[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_sliced_steady_state_calls_allocate_only_their_outputs():
    x = models.example_input("mobilenet_v2", batch=4, small=True)
    module = lk.trace(models.get("mobilenet_v2", small=True), x)
    handle = _handle(module, threads=2)
    assert handle.batch_slices is not None
    (out,) = handle.run([x])  # binds this thread's slices
    handle.run([x])
    peak = peak_call_bytes(handle, x)
    # The output, plus small Python objects (the pool's futures, closures) and numpy's
    # fixed-size iteration buffers: nothing activation-sized (the arena is per slice).
    assert peak < out.nbytes + 128 * 1024, f"a call allocated {peak} bytes (output {out.nbytes})"
    assert peak < handle.program.plan.peak_bytes / 4


def _large_then_small(n: int) -> tuple[Graph, dict]:
    """conv + relu at 32x32 (1024 pixels), a stride-2 conv to 16x16, a conv at 16x16."""
    g = Graph()
    x = g.add_input("x", f32(n, 3, 32, 32))
    y = _add(g, "relu", [_add(g, "conv2d", [x, _param(g, "w0", (4, 3, 3, 3))], {"padding": (1, 1, 1, 1)})])
    y = _add(g, "conv2d", [y, _param(g, "w1", (6, 4, 3, 3))], {"padding": (1, 1, 1, 1), "stride": (2, 2)})
    g.set_outputs([_add(g, "conv2d", [y, _param(g, "w2", (5, 6, 3, 3))], {"padding": (1, 1, 1, 1)})])
    return g, {"w0": rand(4, 3, 3, 3, seed=1), "w1": rand(6, 4, 3, 3, seed=2), "w2": rand(5, 6, 3, 3, seed=3)}


def test_the_head_ends_after_the_last_instruction_on_a_large_map():
    program = _program(*_large_then_small(4))
    assert [ins.op for ins in program.instructions] == ["glow.conv2d", "conv2d", "conv2d"]  # relu fused
    assert head_length(program) == 2  # the stride-2 conv reads the 32x32 map
    assert head_length(program, min_pixels=256) == 3  # every map counts as large
    assert head_length(program, min_pixels=2048, mid_pixels=2048) == 0  # none does
    assert head_length(_program(*_conv_relu(3))) == 0  # 8x8 maps only


def test_a_slice_runs_its_head_image_by_image_and_computes_the_same(monkeypatch):
    module = module_of(*_large_then_small(5))
    x = rand(5, 3, 32, 32, seed=4)
    handle = _handle(module, threads=2)
    assert handle.batch_slices == [slice(0, 3), slice(3, 5)] and handle.head == 2
    (got,) = handle.run([x])
    state = handle._state()
    assert all(len(part.head.calls) == 2 and len(part.calls) == 1 for part in state.slices)
    monkeypatch.setenv("LOWERKIT_GLOW_SLICE_HEAD", "0")
    layers = _handle(module, threads=2)
    assert layers.head == 0
    layers.run([x])
    assert all(part.head is None for part in layers._state().slices)
    np.testing.assert_array_equal(got, layers.run([x])[0])
    assert_close([got], [module.run("forward", x)], rtol=1e-5)


def test_a_slice_of_one_image_has_no_head():
    handle = _handle(module_of(*_large_then_small(3)), threads=3)
    handle.run([rand(3, 3, 32, 32)])
    assert handle.head == 2 and all(part.head is None for part in handle._state().slices)


@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0", "resnet18"])
def test_zoo_heads_match_the_whole_program(name, monkeypatch):
    """At 64x64 the small zoo models have heads of several instructions, with residual adds
    and squeeze-excitation gates inside and maps crossing into the slice's arena."""
    x = np.random.default_rng(5).standard_normal((5, 3, 64, 64)).astype(np.float32)
    module = lk.trace(models.get(name, small=True), x)
    sliced = _handle(module, threads=2)
    assert sliced.head >= 2
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")
    (expected,) = _handle(module, threads=2).run([x])
    for _ in range(3):
        (got,) = sliced.run([x])
        assert_close([got], [expected], rtol=1e-5)
    peak = peak_call_bytes(sliced, x)
    assert peak < got.nbytes + 128 * 1024, f"a call allocated {peak} bytes (output {got.nbytes})"


def test_a_head_with_a_winograd_layer_matches_layer_by_layer(monkeypatch):
    """A 3x3 layer of 64 channels on a 32x32 map (glow_like's Winograd form) inside the head,
    bound for one image while its scratch was planned for the batch."""
    g = Graph()
    x = g.add_input("x", f32(5, 64, 32, 32))
    y = _add(g, "relu", [_add(g, "conv2d", [x, _param(g, "w0", (64, 64, 3, 3))], {"padding": (1, 1, 1, 1)})])
    y = _add(g, "conv2d", [y, _param(g, "w1", (8, 64, 3, 3))], {"padding": (1, 1, 1, 1), "stride": (2, 2)})
    g.set_outputs([_add(g, "conv2d", [y, _param(g, "w2", (8, 8, 3, 3))], {"padding": (1, 1, 1, 1)})])
    params = {"w0": rand(64, 64, 3, 3, seed=1) * 0.1, "w1": rand(8, 64, 3, 3, seed=2), "w2": rand(8, 8, 3, 3, seed=3)}
    module = module_of(g, params)
    handle = _handle(module, threads=2)
    assert handle.program.instructions[0].attrs.get("algo") == "winograd" and handle.head == 2
    inputs = rand(5, 64, 32, 32, seed=4)
    monkeypatch.setenv("LOWERKIT_GLOW_SLICE_HEAD", "0")
    layers = _handle(module, threads=2)
    for _ in range(2):
        assert_close([handle.run([inputs])[0]], [layers.run([inputs])[0]], rtol=1e-5)
    assert_close([handle.run([inputs])[0]], [module.run("forward", inputs)], rtol=1e-4)


def test_only_convolutions_and_pools_count_their_pixels():
    """A channels-last [N, H, W, C] value (ConvNeXt's blocks) is no map: its W x C (here 8 x 256)
    must not make the head reach it."""
    g = Graph()
    x = g.add_input("x", f32(4, 256, 8, 8))
    y = _add(g, "conv2d", [x, _param(g, "w", (256, 256, 1, 1))])
    g.set_outputs([_add(g, "relu", [_add(g, "transpose", [y], {"perm": (0, 2, 3, 1)})])])
    program = _program(g, {"w": rand(256, 256, 1, 1)})
    assert any(program.buffers[ins.outputs[0]].shape == (4, 8, 8, 256) for ins in program.instructions)
    assert head_length(program) == 0
    assert head_length(program, min_pixels=64) == 1  # the convolution's 8x8 maps
