"""Misbehaving plugins, installed for real (``tests/fixtures/dists/lowerkit_test_misbehaving``):
whatever one plugin does, the core turns it into a lowerkit error naming the plugin and hook,
and the other backends still list, lower and run (issue 12)."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from tests.contract.contract_modules import scaled_module
from lowerkit.backend import get_backend
from lowerkit.errors import BackendExecutionError, PluginError


def _others_still_work(x: np.ndarray) -> None:
    listed = {b.name: b for b in lk.backends()}
    assert listed["reference"].available and listed["toy"].available
    module = scaled_module(2.0)
    expected = module(x)
    for backend in ("reference", "toy", "glow_like"):
        np.testing.assert_allclose(lk.to_backend(module, backend)(x), expected, rtol=1e-6)


@pytest.fixture
def x():
    return np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)


@pytest.mark.parametrize(
    "name, raised",
    [("exits_at_import", "SystemExit: 3"), ("interrupts_at_import", "KeyboardInterrupt")],
)
def test_exit_or_interrupt_at_import_is_a_plugin_error(dists, x, name, raised):
    with pytest.raises(PluginError, match=f"backend '{name}'.*failed to load: {raised}"):
        get_backend(name).availability()
    info = {b.name: b for b in lk.backends()}[name]
    assert info.available is False and raised in info.error
    _others_still_work(x)


def test_is_available_answering_an_array_is_a_plugin_error(dists, x):
    with pytest.raises(PluginError, match="array_available.*lowerkit_is_available must return a bool.*ndarray"):
        get_backend("array_available").availability()
    info = {b.name: b for b in lk.backends()}["array_available"]
    assert info.available is False and "must return a bool" in info.error
    _others_still_work(x)


@pytest.mark.parametrize(
    "mode, message",
    [
        ("five", r"backend 'misbehaving', method 'forward': lowerkit_execute must return a list of arrays, got int"),
        ("generator", r"backend 'misbehaving', method 'forward': lowerkit_execute raised KeyError"),
        ("exit", r"backend 'misbehaving', method 'forward': lowerkit_execute raised SystemExit: 4"),
        ("object", r"backend 'misbehaving', method 'forward': lowerkit_execute returned str as output 0"),
        ("shape", r"backend 'misbehaving' returned bad outputs"),
    ],
)
def test_bad_execute_results_are_backend_execution_errors(dists, x, mode, message):
    lowered = lk.to_backend(scaled_module(2.0), "misbehaving", {"forward": {"mode": mode}})
    with pytest.raises(BackendExecutionError, match=message):
        lowered(x)
    _others_still_work(x)


def test_a_users_ctrl_c_during_a_call_passes_through(dists, x):
    lowered = lk.to_backend(scaled_module(2.0), "misbehaving", {"forward": {"mode": "interrupt"}})
    with pytest.raises(KeyboardInterrupt):
        lowered(x)


def test_exit_in_preprocess_and_no_handles_from_compile(dists, x):
    with pytest.raises(BackendExecutionError, match="'misbehaving'.*lowerkit_preprocess raised SystemExit: 5"):
        lk.to_backend(scaled_module(2.0), "misbehaving", {"forward": {"mode": "preprocess_exit"}})
    with pytest.raises(PluginError, match="'misbehaving'.*lowerkit_compile must return a dict.*NoneType"):
        lk.to_backend(scaled_module(2.0), "misbehaving", {"forward": {"mode": "compile_none"}})
    _others_still_work(x)


def test_a_well_behaved_call_still_runs(dists, x):
    module = scaled_module(2.0)
    lowered = lk.to_backend(module, "misbehaving", {"forward": {"mode": "ok"}})
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-6)
