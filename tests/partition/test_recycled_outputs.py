"""The regions of ``[nnpack, glow_like]`` return their large outputs on recycled buffers
(``lowerkit.backend.cpu.recycle``): steady-state calls take no new ones, and an output the
caller still holds is never written."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from lowerkit.backend.cpu import recycle
from tests.mixed_cnn import mixed_cnn, small_regions  # noqa: F401 (a fixture)

pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("lowerkit_glow_like")


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    monkeypatch.setattr(recycle, "MIN_BYTES", 1024)  # the test model's maps are a few KB
    with recycle._lock:
        recycle._buffers.clear()
    yield
    with recycle._lock:
        recycle._buffers.clear()


@pytest.mark.parametrize("batch", [1, 4])
def test_region_outputs_are_recycled_and_a_held_output_stays(small_regions, batch):  # noqa: F811
    x = models.example_input("small_cnn", batch=batch)
    module = lk.trace(mixed_cnn(), x)
    expected = module(x)
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert [r.backend for r in lowered.partition_report().regions] == ["nnpack", "glow_like", "nnpack"]
    for _ in range(3):
        np.testing.assert_allclose(lowered(x), expected, rtol=1e-5, atol=1e-5)
    kept = len(recycle._buffers)
    assert kept >= 1  # the first region's map at least
    for _ in range(3):
        lowered(x)
    assert len(recycle._buffers) == kept  # steady state: the same buffers again
    held_between_calls = recycle.recycled_bytes()[0]  # nnpack's spares may keep a freed one
    lowered(x)
    assert recycle.recycled_bytes()[0] == held_between_calls

    sub = lowered._outer.submodules["forward_region0"]
    held = sub.run("forward", x)
    held = held if isinstance(held, tuple) else (held,)
    snapshot = [a.copy() for a in held]
    for _ in range(2):
        again = sub.run("forward", 1.0 - x)
        again = again if isinstance(again, tuple) else (again,)
        for a, b in zip(held, again):
            assert not np.shares_memory(a, b)
    for a, b in zip(held, snapshot):
        np.testing.assert_array_equal(a, b)
