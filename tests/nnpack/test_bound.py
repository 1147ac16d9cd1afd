"""Bound calls (``lowerkit_nnpack.bound``): from the second call that hands a plan step the
same arrays, the step runs the layer's call bound to them, per thread — with results equal bit
for bit to the unbound path, the team checked on every call, and never holding the caller's
inputs or the outputs it was given."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.nnpack.test_team import _add, _param_maker, _plan, gated_projection, mobile_net, numbered_module
from tests.team_calls import record_team_calls, rows_kernel, team_on_small_layers

import lowerkit as lk
from lowerkit.ir import Graph, Module, TensorType

pytest.importorskip("numba")


def _serial_net(seed: int = 0) -> Module:
    """1x1 expand + relu6, depthwise 3x3 (flat), 3x3 /2, 5x5 (blocked), 1x1 project with a
    residual, then a squeeze: global pool, three 1x1 layers of the pooled map (the second with
    the first's output as residual), flatten and a linear layer."""
    g, params = Graph(), {}
    param = _param_maker(g, params, seed)
    x = g.add_input("x", TensorType("f32", (1, 8, 32, 32)))
    e = _add(g, "relu6", [_add(g, "conv2d", [x, param("expand", (16, 8, 1, 1)), param("expand_b", (16,))])])
    e = _add(g, "relu6", [_add(g, "conv2d", [e, param("dw3", (16, 1, 3, 3)), param("dw3_b", (16,))],
                               {"padding": (1, 1, 1, 1), "groups": 16})])
    e = _add(g, "conv2d", [e, param("dw_s2", (16, 1, 3, 3))], {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 16})
    e = _add(g, "conv2d", [e, param("dw5", (16, 1, 5, 5))], {"padding": (2, 2, 2, 2), "groups": 16})
    e = _add(g, "add", [_add(g, "conv2d", [e, param("project", (16, 16, 1, 1)), param("project_b", (16,))]), e])
    s = _add(g, "relu", [_add(g, "conv2d", [_add(g, "global_avg_pool2d", [e]), param("squeeze", (16, 16, 1, 1))])])
    s = _add(g, "add", [_add(g, "conv2d", [s, param("excite", (16, 16, 1, 1)), param("excite_b", (16,))]), s])
    s = _add(g, "conv2d", [s, param("head", (16, 16, 1, 1))])  # its flatten folds into the linear layer
    y = _add(g, "flatten", [s], {"start_dim": 1})
    g.set_outputs([_add(g, "linear", [y, param("fc", (10, 16)), param("fc_b", (10,))])])
    return numbered_module(g, params, "SerialNet")


def _bound_entries(plan) -> list[tuple]:
    return list(plan._local.spares.bound.values())


@pytest.mark.parametrize("rows", [False, True], ids=["flat-blocked", "rows"])
def test_a_serial_plan_binds_its_steps_and_computes_the_same_bits(rng, monkeypatch, rows):
    depthwise = {f"depthwise ({name})" for name in rows_kernel(monkeypatch, rows, strided=True)}
    module = _serial_net()
    x = rng.standard_normal((1, 8, 32, 32)).astype(np.float32)
    lowered = lk.to_backend(module, ["nnpack"], {"forward": {"nnpack": {"threads": 1}}})
    plan = _plan(lowered.regions["forward_region0"])
    assert plan.team is None
    algorithms = set(plan.algorithms.values())
    assert {"pooled_pointwise"} | depthwise <= algorithms, algorithms
    first = np.asarray(lowered(x))  # recorded: every step through run_into
    np.testing.assert_allclose(first, module(x), rtol=1e-4, atol=1e-5)
    for _ in range(4):
        np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    # every convolution but the first (it reads the call's input) runs its bound call, and the
    # squeeze's pool — the last convolution too: the linear layer reads its output straight,
    # not through flatten's view (the linear layer writes the call's output: never bound)
    entries = _bound_entries(plan)
    assert len(entries) == 8 and all(entry.call is not None for entry in entries), [e.call for e in entries]


def test_bound_steps_skip_run_into(monkeypatch, rng):
    from lowerkit_nnpack.conv import Conv2d
    from lowerkit_nnpack.depthwise import DepthwiseConv2d
    from lowerkit_nnpack.layers import PooledPointwise

    entries: list[str] = []
    for cls in (Conv2d, DepthwiseConv2d, PooledPointwise):
        real = cls.run_into
        monkeypatch.setattr(cls, "run_into", lambda self, *a, _f=real, _n=cls.__name__: (entries.append(_n), _f(self, *a))[1])
    module = _serial_net(seed=1)
    x = rng.standard_normal((1, 8, 32, 32)).astype(np.float32)
    lowered = lk.to_backend(module, ["nnpack"], {"forward": {"nnpack": {"threads": 1}}})
    expected = np.asarray(lowered(x))
    assert len(entries) == 8
    for _ in range(2):
        lowered(x)
    entries.clear()
    np.testing.assert_array_equal(np.asarray(lowered(x)), expected)
    assert entries == ["Conv2d"], entries  # the expansion (it reads the call's input)


def test_the_plans_loop_runs_bound_calls_itself(monkeypatch, rng):
    """Steady-state calls run a bound step's call from the plan's loop, not through the step's
    kernel; the results are the same bits, and a step handed other arrays runs its kernel."""
    module = _serial_net(seed=4)
    x = rng.standard_normal((1, 8, 32, 32)).astype(np.float32)
    lowered = lk.to_backend(module, ["nnpack"], {"forward": {"nnpack": {"threads": 1}}})
    plan = _plan(lowered.regions["forward_region0"])
    expected = np.asarray(lowered(x))
    for _ in range(2):
        lowered(x)
    ran: list[str] = []
    for step in plan.steps:
        object.__setattr__(step, "kernel", lambda *a, _k=step.kernel, _op=step.node.op: (ran.append(_op), _k(*a))[1])
    np.testing.assert_array_equal(np.asarray(lowered(x)), expected)
    # 7 of the 8 convolutions and the pool run from the loop; the expansion (it reads the
    # call's input) and the linear layer (it writes the call's output) run their kernels
    assert ran == ["conv2d", "linear"] and len(plan.steps) - len(ran) == 8, ran
    spares = plan._local.spares
    key, entry = next((k, e) for k, e in spares.bound.items() if e.call is not None)
    spares.bound[key] = entry._replace(inputs=(entry.inputs[0].copy(), *entry.inputs[1:]))  # other arrays now
    spares.chains = None  # step by step (a chain checks what its run reads from outside: below)
    ran.clear()
    np.testing.assert_array_equal(np.asarray(lowered(x)), expected)
    assert len(plan.steps) - len(ran) == 7, ran  # that step ran its kernel (and rebinds)


def _chained(seed: int):
    """The serial net lowered and called four times — recorded, on the arena, bound, replayed:
    ``(module, x, lowered, plan, first result)``."""
    module = _serial_net(seed=seed)
    x = np.random.default_rng(seed).standard_normal((1, 8, 32, 32)).astype(np.float32)
    lowered = lk.to_backend(module, ["nnpack"], {"forward": {"nnpack": {"threads": 1}}})
    plan = _plan(lowered.regions["forward_region0"])
    first = np.asarray(lowered(x))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    return module, x, lowered, plan, first


def test_runs_of_bound_steps_replay_as_chains():
    """After a call that replayed bound steps, each run of them is one chain: its calls back to back, the
    same bits; the steps around it (the expansion, the linear layer) run their kernels."""
    module, x, lowered, plan, first = _chained(seed=5)
    chains = plan._local.spares.chains
    ops = [[step.node.op for step in plan.steps[c.start:c.stop]] for c in chains]
    assert ops == [["conv2d"] * 4 + ["global_avg_pool2d"] + ["conv2d"] * 3], ops
    ran: list[str] = []
    for step in plan.steps:
        object.__setattr__(step, "kernel", lambda *a, _k=step.kernel, _op=step.node.op: (ran.append(_op), _k(*a))[1])
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    assert ran == ["conv2d", "linear"] * 2, ran
    assert plan._local.spares.chains is chains
    np.testing.assert_allclose(first, module(x), rtol=1e-4, atol=1e-5)


def test_a_chain_whose_outside_reads_changed_runs_step_by_step_then_is_rebuilt():
    import dataclasses

    _, x, lowered, plan, first = _chained(seed=6)
    spares = plan._local.spares
    chain, spans = spares.chains[0], [(c.start, c.stop) for c in spares.chains]
    assert chain.outside  # the expansion's output, at least
    moved = dataclasses.replace(chain, outside=tuple((slot, array.copy()) for slot, array in chain.outside))
    spares.chains = (moved, *spares.chains[1:])
    np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    assert spares.chains is None  # dropped: that run replayed step by step
    np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    assert spares.chains is not None and [(c.start, c.stop) for c in spares.chains] == spans


def test_a_chain_call_that_fails_names_its_node():
    import dataclasses

    from lowerkit.errors import BackendExecutionError

    _, x, lowered, plan, _ = _chained(seed=7)
    spares = plan._local.spares
    chain = spares.chains[0]

    def broken() -> None:
        raise RuntimeError("boom")

    spares.chains = (dataclasses.replace(chain, calls=(chain.calls[0], broken, *chain.calls[2:])), *spares.chains[1:])
    with pytest.raises(BackendExecutionError, match="nnpack kernel failed: boom") as caught:
        lowered(x)
    assert plan.steps[chain.start + 1].node.where() in str(caught.value)


def test_steps_never_hold_the_callers_arrays(rng):
    module = _serial_net(seed=2)
    lowered = lk.to_backend(module, ["nnpack"], {"forward": {"nnpack": {"threads": 1}}})
    plan = _plan(lowered.regions["forward_region0"])
    inputs, outputs = [], []
    for _ in range(4):
        inputs.append(rng.standard_normal((1, 8, 32, 32)).astype(np.float32))
        outputs.append(np.asarray(lowered(inputs[-1])))
    held = [array for entry in _bound_entries(plan) for array in (*entry.inputs, *entry.outputs)]
    assert not any(a is b for a in held for b in inputs + outputs)
    for x, got in zip(inputs, outputs):
        np.testing.assert_allclose(got, module(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rows", [False, True], ids=["flat-blocked", "rows"])
def test_a_team_plan_binds_its_steps_and_follows_the_guard(monkeypatch, rows):
    team_on_small_layers(monkeypatch, tiled_pixels=256)
    stride_one = rows_kernel(monkeypatch, rows)
    from lowerkit.backend.cpu import panels
    from lowerkit_nnpack import selection

    monkeypatch.setattr(panels, "TEAM_MAX_INPUTS", 100)
    monkeypatch.setattr(selection, "TEAM_WINOGRAD_MIN_TILES", 16)  # the 20x20 layer's 25 tiles take wt6x6
    monkeypatch.setattr(selection, "WINOGRAD_MIN_INPUTS", 1)  # and its few channels
    module = mobile_net(seed=4)
    x = np.random.default_rng(5).standard_normal((1, 5, 40, 40)).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    plan = _plan(lowered)
    assert plan.team is not None and "wt6x6" in plan.algorithms.values()
    ran = record_team_calls(monkeypatch)  # before any binding: bound calls hold the kernels they reach
    first = np.asarray(lowered(x))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    entries = _bound_entries(plan)
    # expand, depthwise 3x3 and 5x5, project, Winograd, strided conv, strided depthwise
    assert len(entries) == 7 and all(entry.call is not None for entry in entries), [e.call for e in entries]
    ran.clear()
    np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    assert {"team_gemm", "winograd_input", "winograd_products_output", "im2col"} | stride_one <= set(ran), ran
    ran.clear()
    guard = plan.team.guard
    guard.on, guard._serial_left = False, 5
    serial = np.asarray(lowered(x))  # the bound calls take the layers' serial forms
    assert ran == []
    np.testing.assert_allclose(serial, first, rtol=0, atol=1e-5 * max(1.0, float(np.abs(first).max())))


def test_threads_keep_their_own_bound_calls(rng):
    module = _serial_net(seed=3)
    lowered = lk.to_backend(module, ["nnpack"], {"forward": {"nnpack": {"threads": 1}}})
    plan = _plan(lowered.regions["forward_region0"])
    xs = [rng.standard_normal((1, 8, 32, 32)).astype(np.float32) for _ in range(8)]
    expected = [np.asarray(module(x)) for x in xs]
    results: dict[int, list] = {}
    spares: dict[int, object] = {}

    def work(i: int) -> None:
        results[i] = [np.asarray(lowered(xs[i])) for _ in range(5)]
        spares[i] = plan._local.spares

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s) for s in spares.values()}) == 8
    for i in range(8):
        for got in results[i]:
            np.testing.assert_allclose(got, expected[i], rtol=1e-4, atol=1e-5)
        assert sum(entry.call is not None for entry in spares[i].bound.values()) == 8


def _gated_net(seed: int = 0) -> Module:
    """A squeeze-excitation block whose gate folds into the projection, with a residual that
    is no input of the call (a 1x1 layer of it), then a last 1x1 layer: the gated step binds."""
    g, params = Graph(), {}
    param = _param_maker(g, params, seed)
    x = g.add_input("x", TensorType("f32", (1, 8, 12, 12)))
    r = _add(g, "conv2d", [x, param("stem", (8, 8, 1, 1))])
    p = gated_projection(g, param, r)
    g.set_outputs([_add(g, "conv2d", [_add(g, "add", [p, r]), param("head", (8, 8, 1, 1))])])
    return numbered_module(g, params, "GatedBlock")


def test_a_gated_projection_binds_and_the_loop_runs_it(monkeypatch):
    """The projection fed by a folded gate multiply, with its residual, on the team's gated
    panel GEMM: bound from the second call, run from the plan's loop after that, the same
    bits; with the guard holding the team off, its bound call takes the serial form."""
    team_on_small_layers(monkeypatch)
    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "_RULES", ["wide"])  # the panel GEMM takes the projection
    bound_gated = []
    real = panels.PackedWeight.bind_team_gated
    monkeypatch.setattr(panels.PackedWeight, "bind_team_gated",
                        lambda self, *a: (bound_gated.append(a[-1] is not None), real(self, *a))[1])
    module = _gated_net()
    x = np.random.default_rng(8).standard_normal((1, 8, 12, 12)).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    plan = _plan(lowered)
    assert plan.team is not None and not any(step.node.op == "mul" for step in plan.steps)
    gated = next(step for step in plan.steps if len(step.reads) == 3)  # map, gate, residual
    assert gated.key is not None
    expected = np.asarray(module(x))
    first = np.asarray(lowered(x))
    np.testing.assert_allclose(first, expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    entry = plan._local.spares.bound[gated.key]
    assert entry.call is not None and len(entry.inputs) == 3
    assert bound_gated == [True]  # bound once, to the gated panel GEMM with the residual fused
    ran = []
    object.__setattr__(gated, "kernel", lambda *a, _k=gated.kernel: (ran.append(1), _k(*a))[1])
    np.testing.assert_array_equal(np.asarray(lowered(x)), first)
    assert ran == []  # the loop ran the bound call
    guard = plan.team.guard
    guard.on, guard._serial_left = False, 5
    np.testing.assert_allclose(np.asarray(lowered(x)), first, rtol=0, atol=1e-5 * max(1.0, float(np.abs(first).max())))


@pytest.mark.parametrize("packed", [True, False], ids=["packed_tuples", "sgemm"])
def test_a_winograd_layer_binds_and_computes_the_same_bits(monkeypatch, rng, packed):
    """A one-thread plan's wt6x6 layer (its residual fused) binds: from the third call its
    bound call runs — the input transform, the channel GEMMs (on the packed kernel, or
    sgemm) and the output transform — with the unbound path's results, bit for bit."""
    from lowerkit.backend.cpu import panels
    from lowerkit_nnpack import selection
    from lowerkit_nnpack.algorithms.winograd import Winograd6

    monkeypatch.setattr(selection, "WINOGRAD_MIN_INPUTS", 1)
    monkeypatch.setenv(panels.TUPLES_ENV, "1" if packed else "0")
    monkeypatch.setattr(panels, "rules", lambda: "avx2")
    bound: list[object] = []
    real = Winograd6.bind_chunk
    monkeypatch.setattr(Winograd6, "bind_chunk", lambda self, *a: (bound.append(real(self, *a)), bound[-1])[1])
    g, params = Graph(), {}
    param = _param_maker(g, params, seed=3)
    x = g.add_input("x", TensorType("f32", (2, 32, 20, 18)))
    y = _add(g, "relu", [_add(g, "conv2d", [x, param("w1", (40, 32, 3, 3), 0.1), param("b1", (40,))],
                              {"padding": (1, 1, 1, 1)})])
    z = _add(g, "conv2d", [y, param("w2", (40, 40, 3, 3), 0.1), param("b2", (40,))], {"padding": (1, 1, 1, 1)})
    g.set_outputs([_add(g, "max_pool2d", [_add(g, "relu", [_add(g, "add", [z, y])])],
                        {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0)})])
    module = numbered_module(g, params, "WinoNet")
    lowered = lk.to_backend(module, ["nnpack"], {"forward": {"nnpack": {"threads": 1, "algorithm": "wt6x6"}}})
    plan = _plan(lowered.regions["forward_region0"])
    assert list(plan.algorithms.values()).count("wt6x6") == 2, plan.algorithms
    data = rng.standard_normal((2, 32, 20, 18)).astype(np.float32)
    first = np.asarray(lowered(data))
    np.testing.assert_allclose(first, module(data), rtol=1e-4, atol=1e-4)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(lowered(data)), first)
    assert bound and all(call is not None for call in bound)  # the second conv: its input is a spare


def test_a_squeeze_excitation_layer_with_a_large_weight_runs_on_the_team(monkeypatch):
    """A team plan's 1x1 convolutions on a pooled map (``PooledPointwise``): the one whose
    weight reaches MIN_LINEAR_WEIGHTS (512 -> 256) runs as a team region, bound or not, the
    small one (256 -> 16) on the calling thread; with the guard off, both serial, the same
    results."""
    g, params = Graph(), {}
    param = _param_maker(g, params, seed=8)
    x = g.add_input("x", TensorType("f32", (1, 512, 7, 7)))
    y = _add(g, "conv2d", [x, param("w", (512, 512, 1, 1), 0.05)])  # a team plan needs a convolution
    s = _add(g, "global_avg_pool2d", [y])
    s = _add(g, "relu", [_add(g, "conv2d", [s, param("se1", (256, 512, 1, 1), 0.05), param("se1_b", (256,))])])
    g.set_outputs([_add(g, "conv2d", [s, param("se2", (16, 256, 1, 1), 0.05), param("se2_b", (16,))])])
    module = numbered_module(g, params, "SqueezeNet")
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    plan = _plan(lowered)
    assert plan.team is not None and list(plan.algorithms.values()).count("pooled_pointwise") == 2, plan.algorithms
    data = np.random.default_rng(9).standard_normal((1, 512, 7, 7)).astype(np.float32)
    ran = record_team_calls(monkeypatch)
    first = np.asarray(lowered(data))
    np.testing.assert_allclose(first, module(data), rtol=1e-4, atol=1e-4)
    for _ in range(3):  # bound from the third call
        ran.clear()
        np.testing.assert_array_equal(np.asarray(lowered(data)), first)
        assert ran.count("team_gemm") == 2, ran  # the 512x512 map's 1x1, and se1
    guard = plan.team.guard
    guard.on, guard._serial_left = False, 5
    ran.clear()
    serial = np.asarray(lowered(data))
    assert ran == []
    np.testing.assert_allclose(serial, first, rtol=1e-5, atol=1e-5)
