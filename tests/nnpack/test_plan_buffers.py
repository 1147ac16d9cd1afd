"""A convolution writes into the buffer of a value that died earlier — in this call or, per
thread, an earlier one (``plan.Spares``), the most recently freed first, always on a cache
line: never the caller's inputs, a constant, or a buffer a live value (or a view of it)
still holds; returned outputs stay the caller's."""

from __future__ import annotations

import numpy as np

import lowerkit
from lowerkit import nn
from lowerkit.backend.cpu import ALIGNMENT
from lowerkit_nnpack.plan import Spares


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
    spares.died(other, {})
    assert not np.shares_memory(spares.take((2, 3)), other)
    held = made()
    spares.died(held, {"alive": held})  # a live value still holds it
    assert not np.shares_memory(spares.take((2, 3)), held)
    viewed = made()
    spares.died(viewed, {"flat": viewed.reshape(-1)})  # a live view of its memory
    assert not np.shares_memory(spares.take((2, 3)), viewed)
    freed = made()
    spares.died(freed, {})
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
    spares.died(older, {})
    spares.died(newer, {})
    assert np.shares_memory(spares.take((4, 4)), newer)
    assert np.shares_memory(spares.take((4, 4)), older)


def test_spares_last_across_calls_per_thread_and_stay_bounded(rng):
    """Buffers freed in one call serve the next (no fresh pages in steady state); the pool
    holds at most ``Spares.MAX_FREE`` buffers however many calls run."""
    import threading

    from lowerkit_nnpack.plan import Plan

    with nn.init_seed(0):
        net = _Chain()
    x = rng.standard_normal((1, 6, 12, 12)).astype(np.float32)
    lowered = lowerkit.to_backend(lowerkit.trace(net, x), "nnpack", {"forward": {"threads": 1}})
    (plan,) = [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]
    lowered(x)
    pool = plan._local.spares._free
    before = {id(entry[0]) for entry in pool}
    assert before  # intermediates died and were kept
    for _ in range(10):
        lowered(x)
    assert len(pool) <= Spares.MAX_FREE
    assert before & {id(entry[0]) for entry in pool}  # the same buffers serve every call
    seen = []
    worker = threading.Thread(target=lambda: (lowered(x), seen.append(plan._local.spares)))
    worker.start()
    worker.join()
    assert seen[0] is not plan._local.spares  # another thread, another pool


def test_steady_state_calls_of_a_zoo_model_take_no_fresh_buffers(monkeypatch):
    """After warm-up, every output a step writes comes from the spare buffers: none is a new
    allocation (the pool once held too few buffers for EfficientNet's many shapes)."""
    from lowerkit import models
    from lowerkit_nnpack import plan as plan_module

    x = models.example_input("efficientnet_b0", batch=1, small=True)
    lowered = lowerkit.to_backend(lowerkit.trace(models.get("efficientnet_b0", small=True), x), ["nnpack"])
    for _ in range(3):
        lowered(x)
    fresh = []
    real = plan_module.aligned_empty
    monkeypatch.setattr(plan_module, "aligned_empty", lambda shape, *a: fresh.append(shape) or real(shape, *a))
    for _ in range(3):
        lowered(x)
    assert fresh == []
