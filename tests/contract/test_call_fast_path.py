"""The per-call fast path (cached signature checks, direct hook calls) keeps every behaviour:
wrappers such as the profiler still see every call, bad inputs are still refused, and a
backend that turns unavailable still stops calls."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn
from lowerkit.backend import get_backend, unregister_backend
from lowerkit.backend.hookspecs import hookimpl
from lowerkit.errors import BackendNotAvailableError, InputError

pytest.importorskip("lowerkit_reference")


class _Add(nn.Module):
    def forward(self, x, y):
        return x + y


@pytest.fixture()
def lowered():
    x = np.ones((2,), np.float32)
    return lk.to_backend(lk.trace(_Add(), x, x), "reference"), x


def test_profiler_counts_calls_made_on_the_fast_path(lowered):
    module, x = lowered
    module(x, x)  # the direct call is cached now
    with lk.profile() as report:
        module(x, x)
        module(x, x)
    module(x, x)  # after the profile: not counted, and the fast path is back
    assert report.calls("reference", "forward") == 2
    with lk.profile() as again:
        np.testing.assert_array_equal(module(x, x), x + x)
    assert again.calls("reference", "forward") == 1


def test_a_wrapper_registered_straight_on_the_manager_is_called(lowered):
    module, x = lowered
    module(x, x)
    seen = []

    class Spy:
        @hookimpl(wrapper=True)
        def lowerkit_execute(self, method):
            seen.append(method)
            return (yield)

    backend = get_backend("reference")
    spy = Spy()
    backend.pm.register(spy)
    try:
        np.testing.assert_array_equal(module(x, x), x + x)
    finally:
        backend.pm.unregister(spy)
    np.testing.assert_array_equal(module(x, x), x + x)
    assert seen == ["forward"]


def test_bad_inputs_are_still_refused(lowered):
    module, x = lowered
    module(x, x)
    with pytest.raises(InputError, match=r"input 'y'.*expected f32\[2\], got f64\[2\]"):
        module(x, x.astype(np.float64))
    with pytest.raises(InputError, match=r"expected f32\[2\], got f32\[3\]"):
        module(x, np.ones(3, np.float32))
    with pytest.raises(InputError, match="takes 2 inputs"):
        module(x)
    np.testing.assert_array_equal(module(x, np.ones(2, np.float32)[::1]), x + 1)
    assert module(x, np.float32([1, 1])).dtype == np.float32  # array-likes still convert


class _Switchable:
    """Runs ``add`` with numpy; its availability is a flag the test flips."""

    available = True

    @hookimpl
    def lowerkit_is_available(self):
        return self.available

    @hookimpl
    def lowerkit_preprocess(self, module, compile_spec):
        return b"add"

    @hookimpl
    def lowerkit_compile(self, processed, compile_spec):
        return {m: None for m in compile_spec}

    @hookimpl
    def lowerkit_execute(self, handle, inputs):
        return [np.add(*inputs)]


def test_a_backend_turning_unavailable_stops_calls_after_the_first(lowered):
    _, x = lowered
    plugin = _Switchable()
    lk.register_backend(plugin, "switchable", replace=True)
    try:
        module = lk.to_backend(lk.trace(_Add(), x, x), "switchable")
        np.testing.assert_array_equal(module(x, x), x + x)
        plugin.available = False
        with pytest.raises(BackendNotAvailableError, match="Backend switchable is not available"):
            module(x, x)
        plugin.available = True
        np.testing.assert_array_equal(module(x, x), x + x)
    finally:
        unregister_backend("switchable")
