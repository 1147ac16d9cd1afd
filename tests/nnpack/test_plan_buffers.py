"""A convolution writes into the buffer of a value that died earlier — in this call or, per
thread, an earlier one (``spares.Spares``), the most recently freed first, always on a cache
line: never the caller's inputs, a constant, or a buffer a live value (or a view of it)
still holds; returned outputs stay the caller's. From the second call on, those buffers are
views of one arena at offsets planned from the recorded call (``spares.plan_offsets``):
values alive at the same time never share memory, and a call that takes other sizes drops
the plan."""

from __future__ import annotations

import numpy as np

import lowerkit
from lowerkit import nn
from lowerkit.backend.cpu import ALIGNMENT
from lowerkit_nnpack.spares import Spares, plan_offsets


class _Chain(nn.Module):
    """Four same-shaped convolutions with ReLUs: every dead activation fits the next output."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = [nn.Conv2d(6, 6, 3, padding=1) for _ in range(4)]
        for i, conv in enumerate(self.convs):
            setattr(self, f"c{i}", conv)
        self.act = nn.ReLU()

    def forward(self, x):
        for conv in self.convs:
            x = self.act(conv(x))
        return x


def test_outputs_survive_the_next_call_and_match_the_reference(rng):
    with nn.init_seed(0):
        net = _Chain()
    x1 = rng.standard_normal((1, 6, 12, 12)).astype(np.float32)
    x2 = rng.standard_normal((1, 6, 12, 12)).astype(np.float32)
    module = lowerkit.trace(net, x1)
    lowered = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": 1}})
    first = np.asarray(lowered(x1))
    kept = first.copy()
    second = np.asarray(lowered(x2))
    np.testing.assert_array_equal(first, kept)  # the second call wrote elsewhere
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(first, np.asarray(module(x1)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(second, np.asarray(module(x2)), rtol=1e-4, atol=1e-4)


def test_spares_take_back_only_what_a_step_made_and_nobody_holds():
    spares = Spares()

    def made() -> np.ndarray:  # a step's output, written into an array take() gave
        array = spares.take((2, 3))
        spares.produced([array])
        return array

    first = made()
    assert first.ctypes.data % ALIGNMENT == 0 and first.shape == (2, 3) and first.dtype == np.float32
    other = np.zeros((2, 3), np.float32)
    spares.produced([other])  # not from take: a caller's input, a step's view of one, a constant
    spares.died(other, [])
    assert not np.shares_memory(spares.take((2, 3)), other)
    held = made()
    spares.died(held, [held])  # a live value still holds it
    assert not np.shares_memory(spares.take((2, 3)), held)
    viewed = made()
    spares.died(viewed, [viewed.reshape(-1)])  # a live view of its memory
    assert not np.shares_memory(spares.take((2, 3)), viewed)
    freed = made()
    spares.died(freed, [])
    assert not np.shares_memory(spares.take((5, 3)), freed)  # too small for it
    assert not np.shares_memory(spares.take((1, 2)), freed)  # more than twice its size: kept for bigger ones
    again = spares.take((1, 3))  # half its size: fits
    assert np.shares_memory(again, freed) and again.ctypes.data % ALIGNMENT == 0
    assert not np.shares_memory(spares.take((1, 3)), freed)  # taken once


def test_spares_prefer_the_most_recently_freed_buffer():
    """Memory freed a layer ago is still in cache: of two buffers that fit, the later one is taken."""
    spares = Spares()
    older, newer = spares.take((4, 4)), spares.take((4, 4))
    spares.produced([older, newer])
    spares.died(older, [])
    spares.died(newer, [])
    assert np.shares_memory(spares.take((4, 4)), newer)
    assert np.shares_memory(spares.take((4, 4)), older)


def test_spares_plan_one_arena_per_thread_from_the_second_call(rng):
    """The first call reuses freed buffers and is recorded; from the next, the values that die
    within a call live in one arena, the same every call, and the freed buffers are let go."""
    import threading

    from lowerkit_nnpack.plan import Plan

    with nn.init_seed(0):
        net = _Chain()
    x = rng.standard_normal((1, 6, 12, 12)).astype(np.float32)
    lowered = lowerkit.to_backend(lowerkit.trace(net, x), "nnpack", {"forward": {"threads": 1}})
    (plan,) = [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]
    expected = np.asarray(lowered(x))
    spares = plan._local.spares
    assert spares._arena is None and spares._free  # recorded: intermediates died and were kept
    lowered(x)
    arena = spares._arena
    # three intermediates die, two at most alive at once: the arena holds two maps
    assert arena is not None and arena.nbytes == 2 * 6 * 12 * 12 * 4 and not spares._free
    views = list(spares._views)
    assert sum(v is not None for v in views) == 3  # the three intermediates that die
    for _ in range(5):
        np.testing.assert_array_equal(np.asarray(lowered(x)), expected)
    assert spares._arena is arena
    # each take's view of the arena is made once and handed out again on every later call
    assert [id(v) for v in spares._views] == [id(v) for v in views]
    seen = []
    worker = threading.Thread(target=lambda: (lowered(x), seen.append(plan._local.spares)))
    worker.start()
    worker.join()
    assert seen[0] is not spares  # another thread, another pool and arena


def test_a_call_whose_buffers_never_die_is_planned_once(monkeypatch):
    """A plan of no arena slots (every take returned by the call): made once, then kept, its
    takes fresh buffers that stay the caller's."""
    import lowerkit_nnpack.spares as spares_module

    planned = []
    monkeypatch.setattr(spares_module, "plan_offsets", lambda log: planned.append(1) or plan_offsets(log))
    spares = Spares()
    outputs = []
    for _ in range(4):
        spares.start_call()
        out = spares.take((4, 4))
        spares.produced([out])
        out.fill(len(outputs))
        outputs.append(out)
    assert len(planned) == 1 and spares._arena is None and spares._slots == [None]
    assert [float(a[0, 0]) for a in outputs] == [0.0, 1.0, 2.0, 3.0]  # four buffers, none shared


def test_the_offsets_never_overlap_for_values_alive_together():
    rng = np.random.default_rng(0)
    for _ in range(200):
        log, clock, alive = [], 0, []
        for _ in range(int(rng.integers(1, 30))):
            clock += 1
            log.append([int(rng.integers(1, 5000)) * 4, clock, None])
            alive.append(len(log) - 1)
            while alive and rng.random() < 0.5:
                clock += 1
                log[alive.pop(int(rng.integers(len(alive))))][2] = clock
        slots, size = plan_offsets(log)
        for i, slot in enumerate(slots):
            assert (slot is None) == (log[i][2] is None)
            if slot is None:
                continue
            assert slot[0] == log[i][0] and slot[1] % ALIGNMENT == 0 and slot[1] + slot[0] <= size
            for j in range(i):
                other = slots[j]
                together = log[i][1] < log[j][2] and log[j][1] < log[i][2] if other else False
                if together:
                    assert slot[1] + slot[0] <= other[1] or other[1] + other[0] <= slot[1], (i, j)


def test_a_call_taking_other_sizes_drops_the_plan_and_stays_safe():
    spares = Spares()

    def call(shapes):
        spares.start_call()
        arrays = []
        for shape in shapes:
            a = spares.take(shape)
            spares.produced([a])
            a.fill(len(arrays))
            arrays.append(a)
            if len(arrays) > 1:  # the one before dies once this one is written
                spares.died(arrays[-2], [])
        return arrays

    call([(8, 8), (8, 8), (4, 4)])
    first = call([(8, 8), (8, 8), (4, 4)])  # planned
    assert spares._arena is not None
    assert all(np.shares_memory(a, spares._arena) for a in first[:2])
    other = call([(8, 8), (16, 16), (4, 4)])  # differs at the second take: the plan goes
    assert spares._slots is None and not np.shares_memory(other[0], other[1])
    assert [float(a[0, 0]) for a in other] == [0.0, 1.0, 2.0]


def test_steady_state_calls_of_a_zoo_model_take_no_fresh_buffers(monkeypatch):
    """After warm-up, every output a step writes comes from the spare buffers: none is a new
    allocation (the pool once held too few buffers for EfficientNet's many shapes)."""
    from lowerkit import models
    from lowerkit_nnpack import spares as spares_module

    x = models.example_input("efficientnet_b0", batch=1, small=True)
    lowered = lowerkit.to_backend(lowerkit.trace(models.get("efficientnet_b0", small=True), x), ["nnpack"])
    for _ in range(3):
        lowered(x)
    fresh = []
    real = spares_module.aligned_empty
    monkeypatch.setattr(spares_module, "aligned_empty", lambda shape, *a: fresh.append(shape) or real(shape, *a))
    for _ in range(3):
        lowered(x)
    assert fresh == []


def _gated_graph(map_is_input: bool = False, flatten_reads_map: bool = False):
    """conv (unless the map is the input) -> map * sigmoid(conv1x1(pool(map))) -> conv; the
    gate multiply is left to the plan (one thread: no team form folds it)."""
    from lowerkit.ir import Graph, GraphMethod, Module, TensorType
    from lowerkit.opset import get_schema

    g, params = Graph(), {}
    rng = np.random.default_rng(0)

    def add(op, ins, attrs=None):
        full = get_schema(op).normalize_attrs(attrs or {})
        (t,) = get_schema(op).infer([v.type for v in ins], full)
        return g.add_node(op, ins, [t], full).output

    def param(name, shape):
        params[name] = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        return g.add_node("param", [], [TensorType("f32", shape)], {"name": name}).output

    x = g.add_input("x", TensorType("f32", (1, 8, 6, 6)))
    m = x if map_is_input else add("relu", [add("conv2d", [x, param("w0", (8, 8, 3, 3))], {"padding": (1, 1, 1, 1)})])
    gate = add("sigmoid", [add("conv2d", [add("global_avg_pool2d", [m]), param("w1", (8, 8, 1, 1))])])
    y = add("conv2d", [add("mul", [m, gate]), param("w2", (4, 8, 1, 1))])
    outputs = [y]
    if flatten_reads_map:
        outputs.append(add("flatten", [m], {"start_dim": 1}))
    g.set_outputs(outputs)
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
    return Module(params, {"forward": GraphMethod(g)}, name="Gated")


def _mul_step(lowered):
    """The plan of ``lowered``'s one nnpack region and its mul step."""
    from lowerkit_nnpack.plan import Plan

    (plan,) = [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]
    (step,) = [s for s in plan.steps if s.node.op == "mul"]
    return plan, step


def test_a_gate_multiply_scales_a_dying_map_in_place_and_only_then(rng):
    """The map's own buffer takes the product where the map is a step's output that dies at
    the multiply; the caller's input, or a map a flatten view still reads, is never written."""
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    for kwargs, in_place in (({}, True), ({"map_is_input": True}, False), ({"flatten_reads_map": True}, False)):
        module = _gated_graph(**kwargs)
        lowered = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": 1}})
        plan, step = _mul_step(lowered)
        assert ("multiply_in_place" in step.kernel.__name__) is in_place, kwargs
        kept = x.copy()
        expected = [np.asarray(v) for v in (module(x) if isinstance(module(x), tuple) else (module(x),))]
        for _ in range(3):  # the recorded call, then the arena's
            got = lowered(x)
            got = [np.asarray(v) for v in (got if isinstance(got, tuple) else (got,))]
            for a, b in zip(got, expected):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(x, kept)
        if in_place:  # from the arena's calls on, the product is bound to the map and gate
            assert plan._local.spares.bound[step.key].call is not None
