"""to_backend and LoweredModule against the ``toy`` test distribution (a real entry point)."""

from __future__ import annotations

import dataclasses
import gc
import warnings

import numpy as np
import pytest

import lowerkit as lk
from tests.contract.contract_modules import accum_module, outer_module, scaled_module
from lowerkit.errors import (
    BackendExecutionError,
    BackendNotAvailableError,
    BackendNotFoundError,
    BackendUnavailableWarning,
    FormatError,
    InputError,
    NodeExecutionError,
)
from lowerkit.ir import graph_of

SPEC = {"forward": {"threads": 2, "mode": "fast"}}


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    else:
        np.testing.assert_array_equal(a, b)


def test_three_methods_match_unlowered_before_and_after_save_load(toy, xh, tmp_path):
    module = accum_module()
    lowered = lk.to_backend(module, "toy", SPEC)
    assert lowered.backend == "toy"
    assert lowered.is_compiled
    for name in ("accum", "sub_accum", "forward"):
        _same(lowered.run(name, *xh), module.run(name, *xh))
    _same(lowered(*xh), module(*xh))
    _same(lowered.forward(*xh), (xh[0] + xh[1], xh[0] - xh[1]))
    _same(lowered.accum(*xh), xh[0] + xh[1])
    assert set(toy.EXECUTED) == {"accum", "sub_accum", "forward"}

    path = tmp_path / "accum.lkm"
    lk.save(lowered, path)
    loaded = lk.load(path)
    assert isinstance(loaded, lk.LoweredModule) and loaded.is_compiled
    for name in ("accum", "sub_accum", "forward"):
        _same(loaded.run(name, *xh), module.run(name, *xh))
    expected = {"accum": {}, "sub_accum": {}, "forward": {"threads": 2, "mode": "fast"}}
    assert lowered.compile_spec == expected
    assert loaded.compile_spec == expected


def test_lowered_methods_have_signatures_and_no_graph(toy):
    module = accum_module()
    lowered = lk.to_backend(module, "toy")
    assert sorted(lowered.methods) == ["accum", "forward", "sub_accum"]
    assert lowered.methods["forward"].signature == module.signature("forward")
    assert lowered.signature("accum") == module.signature("accum")
    assert not hasattr(lowered.methods["forward"], "graph")
    with pytest.raises(InputError, match="lowered to a backend and has no graph|no method"):
        graph_of(lowered, "forward")
    with pytest.raises(InputError, match=r"has no method 'nope'; its methods are \['accum', 'forward', 'sub_accum'\]"):
        lowered.run("nope")
    with pytest.raises(AttributeError, match="nope"):
        lowered.nope


def test_compile_spec_defaults_and_errors(toy):
    module = accum_module()
    assert lk.to_backend(module, "toy").compile_spec == {"accum": {}, "sub_accum": {}, "forward": {}}
    with pytest.raises(InputError, match=r"names method\(s\) \['fwd'\] that Accum does not have; its methods are \['accum', 'forward', 'sub_accum'\]"):
        lk.to_backend(module, "toy", {"fwd": {}})
    with pytest.raises(InputError, match=r"compile_spec\['forward'\] must be a dict of options, got int"):
        lk.to_backend(module, "toy", {"forward": 3})
    with pytest.raises(InputError, match=r"compile_spec\['forward'\] must hold JSON values"):
        lk.to_backend(module, "toy", {"forward": {"x": object()}})
    spec = {"forward": {"nested": {"a": [1, 2]}}}
    lowered = lk.to_backend(module, "toy", spec)
    spec["forward"]["nested"]["a"].append(3)  # the caller's dict is copied
    lowered.compile_spec["forward"]["nested"]["a"].append(4)  # and so is what it hands out
    assert lowered.compile_spec["forward"] == {"nested": {"a": [1, 2]}}


def test_bad_inputs_are_input_errors_naming_method_and_input(toy, xh):
    lowered = lk.to_backend(accum_module(), "toy")
    with pytest.raises(InputError, match=r"method 'forward' takes 2 inputs \(x, h\), got 1"):
        lowered(xh[0])
    with pytest.raises(InputError, match=r"method 'accum', input 'h': expected f32\[2, 3\], got f64\[2, 3\]"):
        lowered.accum(xh[0], xh[1].astype(np.float64))
    with pytest.raises(InputError, match=r"input 'x': expected f32\[2, 3\], got f32\[3, 2\]"):
        lowered.accum(xh[0].T.copy(), xh[1])


def test_to_backend_argument_errors(toy):
    module = accum_module()
    lowered = lk.to_backend(module, "toy")
    with pytest.raises(InputError, match="already lowered to backend 'toy'"):
        lk.to_backend(lowered, "toy")
    with pytest.raises(InputError, match="expects a lowerkit.Module, got str"):
        lk.to_backend("module", "toy")
    with pytest.raises(BackendNotFoundError, match="no backend named 'nope'"):
        lk.to_backend(module, "nope")


def test_unavailable_backend_semantics(toy, monkeypatch, tmp_path, xh):
    module = accum_module()
    monkeypatch.setenv("LOWERKIT_TOY_UNAVAILABLE", "1")
    with pytest.warns(BackendUnavailableWarning, match=r"Backend toy is not available on this machine \(toy is switched off by LOWERKIT_TOY_UNAVAILABLE\).*can be saved and run after loading"):
        lowered = lk.to_backend(module, "toy", SPEC, keep_source=True)
    assert not lowered.is_compiled
    with pytest.raises(BackendNotAvailableError, match="Backend toy is not available on this machine: toy is switched off"):
        lowered(*xh)
    path = tmp_path / "unavailable.lkm"
    lk.save(lowered, path)
    with pytest.raises(BackendNotAvailableError, match="Backend toy is not available"):
        lk.load(path)

    monkeypatch.delenv("LOWERKIT_TOY_UNAVAILABLE")
    loaded = lk.load(path)
    _same(loaded(*xh), module(*xh))
    assert loaded.compile_spec["forward"] == SPEC["forward"]
    # the module made while unavailable compiles at its first call once available
    _same(lowered(*xh), module(*xh))
    assert lowered.is_compiled


def test_fallback_runs_the_kept_original_with_a_warning(toy, monkeypatch, tmp_path, xh):
    module = accum_module()
    path, bare = tmp_path / "kept.lkm", tmp_path / "bare.lkm"
    lk.save(lk.to_backend(module, "toy", keep_source=True), path)
    lk.save(lk.to_backend(module, "toy"), bare)
    monkeypatch.setenv("LOWERKIT_TOY_UNAVAILABLE", "1")
    with pytest.warns(BackendUnavailableWarning, match="running the kept original module on reference instead"):
        loaded = lk.load(path, fallback="reference")
    assert loaded.is_fallback and loaded.backend == "toy"
    _same(loaded(*xh), module(*xh))
    with pytest.raises(BackendNotAvailableError, match="the file keeps no original module"):
        lk.load(bare, fallback="reference")
    with pytest.raises(InputError, match="fallback must be None or 'reference', got 'gpu'"):
        lk.LoweredModule.from_record(loaded.record, fallback="gpu")


def test_not_installed_names_the_distribution_to_install(toy, xh, monkeypatch):
    lowered = lk.to_backend(accum_module(), "toy", keep_source=True)
    record = lowered.record
    monkeypatch.setenv("LOWERKIT_DISABLE_PLUGINS", "toy")
    # Disabled is not missing: the message says how to switch it back on, not "install".
    with pytest.raises(BackendNotFoundError, match=r"remove 'toy' from LOWERKIT_DISABLE_PLUGINS to run it"):
        lk.LoweredModule.from_record(record)
    gone = dataclasses.replace(record, backend="toy_gone")
    with pytest.raises(BackendNotFoundError, match=r"install lowerkit-test-toy \(the file was made with version 1.0.0\)"):
        lk.LoweredModule.from_record(gone)
    with pytest.raises(BackendNotFoundError, match="no backend named 'toy_gone' is installed.*install lowerkit-test-toy"):
        lk.LoweredModule.from_record(gone)
    with pytest.warns(BackendUnavailableWarning):
        fallen = lk.LoweredModule.from_record(gone, fallback="reference")
    _same(fallen.accum(*xh), xh[0] + xh[1])


def test_rejected_payload_is_a_format_error_naming_backend_and_versions(toy):
    record = lk.to_backend(accum_module(), "toy").record
    corrupt = dataclasses.replace(record, payload=b"garbage", version="0.9")
    with pytest.raises(FormatError, match=r"backend 'toy' rejected its payload: .*made by lowerkit-test-toy version 0.9, installed version 1.0.0"):
        lk.LoweredModule.from_record(corrupt)


def test_record_round_trip_keeps_everything(toy, xh):
    module = accum_module()
    lowered = lk.to_backend(module, "toy", SPEC, keep_source=True)
    record = lowered.record
    assert (record.backend, record.distribution, record.version) == ("toy", "lowerkit-test-toy", "1.0.0")
    assert record.original is module and record.name == "Accum"
    assert record.signatures == {m: module.signature(m) for m in module.methods}
    again = lk.LoweredModule.from_record(record)
    assert again.record is record
    _same(again(*xh), lowered(*xh))


def test_nested_lowered_module_matches_before_and_after_save_load(toy, tmp_path):
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    inner = scaled_module(2.0)
    outer_plain = outer_module({"inner": inner})
    outer = outer_module({"inner": lk.to_backend(inner, "toy")})
    expected = -np.maximum(x * 2.0, 0)
    _same(outer_plain(x), expected)
    _same(outer(x), expected)
    assert "forward" in toy.EXECUTED
    path = tmp_path / "outer.lkm"
    lk.save(outer, path)
    loaded = lk.load(path)
    assert isinstance(loaded.submodules["inner"], lk.LoweredModule)
    _same(loaded(x), expected)


def test_two_lowered_submodules_of_one_class_coexist(toy, tmp_path):
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    a = lk.to_backend(scaled_module(2.0), "toy")
    b = lk.to_backend(scaled_module(3.0), "toy")
    c = lk.to_backend(scaled_module(4.0), "noavail")
    outer = outer_module({"a": a, "b": b, "c": c})
    expected = -(np.maximum(x * 2, 0) + np.maximum(x * 3, 0) + np.maximum(x * 4, 0))
    _same(outer(x), expected)
    loaded = lk.loads(lk.dumps(outer))
    _same(loaded(x), expected)
    _same(loaded.submodules["a"](x), np.maximum(x * 2, 0))
    _same(loaded.submodules["b"](x), np.maximum(x * 3, 0))


def test_handles_are_destroyed_when_the_lowered_module_dies(toy):
    lowered = lk.to_backend(accum_module(), "toy")
    handles = lowered._handles
    del lowered
    gc.collect()
    assert any(d is handles for d in toy.DESTROYED)


def test_unsupported_op_in_preprocess_passes_through(toy):
    from lowerkit.ir import Graph, GraphMethod, Module, TensorType

    t = TensorType("f32", (2, 3))
    g = Graph()
    x = g.add_input("x", t)
    g.set_outputs([g.add_node("exp", [x], [t], debug_handle=1).output])
    module = Module({}, {"forward": GraphMethod(g)}, name="Exp")
    with pytest.raises(lk.UnsupportedOperatorError, match="node exp #1 is not supported"):
        lk.to_backend(module, "toy")


class _Faulty:
    """Backend whose execute fails in different ways, selected by the handle."""

    @lk.hookimpl
    def lowerkit_preprocess(self, module, compile_spec):
        return b"p"

    @lk.hookimpl
    def lowerkit_compile(self, processed, compile_spec):
        return {m: m for m in compile_spec}

    @lk.hookimpl
    def lowerkit_execute(self, handle, inputs):
        if handle == "accum":
            raise NodeExecutionError(1, "node add #1: kernel overflowed")
        if handle == "sub_accum":
            raise RuntimeError("segfault averted")
        return [inputs[0]]  # forward should return two outputs


def test_execution_failures_name_backend_method_and_node(xh):
    from lowerkit.backend import register_backend, unregister_backend

    register_backend(_Faulty, "faulty")
    try:
        lowered = lk.to_backend(accum_module(), "faulty")
        with pytest.raises(NodeExecutionError, match=r"backend 'faulty', method 'accum': node add #1: kernel overflowed") as info:
            lowered.accum(*xh)
        assert info.value.debug_handle == 1
        with pytest.raises(BackendExecutionError, match=r"backend 'faulty', method 'sub_accum': lowerkit_execute raised RuntimeError: segfault averted"):
            lowered.sub_accum(*xh)
        with pytest.raises(BackendExecutionError, match=r"backend 'faulty' returned bad outputs: method 'forward' should return 2 outputs, got 1"):
            lowered(*xh)
    finally:
        unregister_backend("faulty")


def test_creation_when_available_does_not_warn(toy):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lk.to_backend(accum_module(), "toy")


def test_traced_outer_module_calls_lowered_modules(toy, tmp_path):
    from lowerkit import nn, ops

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    twice = lk.to_backend(lk.trace(lambda a: ops.relu(a * 2.0), x), "toy")
    thrice = lk.to_backend(lk.trace(lambda a: ops.relu(a * 3.0), x), "toy")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = twice
            self.b = thrice

        def forward(self, a):
            return self.a(a) - self.b(a)

    expected = np.maximum(x * 2, 0) - np.maximum(x * 3, 0)
    from_function = lk.trace(lambda a: twice(a) - thrice(a), x)
    from_module = lk.trace(Net(), x)
    for traced in (from_function, from_module):
        assert all(isinstance(s, lk.LoweredModule) for s in traced.submodules.values())
        np.testing.assert_allclose(traced(x), expected, rtol=1e-6)
        lk.save(traced, tmp_path / "traced.lkm")
        np.testing.assert_allclose(lk.load(tmp_path / "traced.lkm")(x), expected, rtol=1e-6)


def test_copies_share_the_record_and_compile_their_own_handles(toy, xh):
    import copy

    lowered = lk.to_backend(accum_module(), "toy")
    for twin in (copy.copy(lowered), copy.deepcopy(lowered)):
        assert twin.record is lowered.record and not twin.is_compiled
        _same(twin(*xh), lowered(*xh))
        assert twin._handles is not lowered._handles


class _Picky:
    """Backend whose compile fails in different ways, selected by the payload."""

    @lk.hookimpl
    def lowerkit_preprocess(self, module, compile_spec):
        return compile_spec["forward"].get("payload", "ok").encode()

    @lk.hookimpl
    def lowerkit_compile(self, processed, compile_spec):
        if processed == b"value":
            raise ValueError("payload version 7 is too new")
        if processed == b"option":
            raise InputError("option 'threads' must be positive")
        if processed == b"crash":
            raise KeyError("boom")
        return {m: m for m in compile_spec}

    @lk.hookimpl
    def lowerkit_execute(self, handle, inputs):
        return [inputs[0]]


def test_compile_failures_are_classified():
    from lowerkit.backend import register_backend, unregister_backend

    register_backend(_Picky, "picky", distribution="lowerkit-picky", version="2.0")
    module = scaled_module(1.0)
    try:
        with pytest.raises(FormatError, match=r"backend 'picky' rejected its payload: payload version 7 is too new \(payload made by lowerkit-picky version 2.0, installed version 2.0\)"):
            lk.to_backend(module, "picky", {"forward": {"payload": "value"}})
        with pytest.raises(InputError, match="option 'threads' must be positive"):
            lk.to_backend(module, "picky", {"forward": {"payload": "option"}})
        with pytest.raises(BackendExecutionError, match=r"backend 'picky': lowerkit_compile raised KeyError: 'boom'"):
            lk.to_backend(module, "picky", {"forward": {"payload": "crash"}})
    finally:
        unregister_backend("picky")


def test_to_backend_rejects_malformed_backend_and_submodules_arguments(toy):
    module = accum_module()
    with pytest.raises(InputError, match="backend must be a name or a non-empty list of names, got 3"):
        lk.to_backend(module, 3)
    with pytest.raises(InputError, match=r"submodules must be a list of module paths, got 'enc'; write submodules=\['enc'\]"):
        lk.to_backend(module, "toy", submodules="enc")
    with pytest.raises(InputError, match="submodules must be a list of module paths, got 5"):
        lk.to_backend(module, "toy", submodules=5)


def test_to_backend_of_an_nn_module_says_to_trace_it(toy):
    from lowerkit import models

    with pytest.raises(InputError, match="to_backend expects a lowerkit.Module, got SmallCNN; trace it first"):
        lk.to_backend(models.small_cnn(), "toy")


def test_a_missing_lowered_method_attribute_lists_the_methods(toy):
    lowered = lk.to_backend(accum_module(), "toy")
    with pytest.raises(AttributeError, match=r"has no attribute or method 'fwd'; its methods are \['accum', 'forward', 'sub_accum'\]"):
        lowered.fwd
