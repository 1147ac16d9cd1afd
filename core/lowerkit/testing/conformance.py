"""``BackendConformance``: the contract tests every backend package runs against itself.

Subclass it in a test module of the backend package::

    from lowerkit.testing import BackendConformance

    class TestMyBackendConformance(BackendConformance):
        backend_name = "my_backend"
        supported_ops = frozenset({"conv2d", "relu", "add"})
        rtol, atol = 1e-4, 1e-5

It checks that the backend is installed and not broken, the availability semantics
(creation, call, save, load), save/load round trips, composition inside an outer module,
input checking, and, for every op case whose op is in ``supported_ops``, agreement with
the un-lowered module run on ``reference``. Where the backend is unavailable, the tests
that need it to run are skipped with its reason.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
import pytest

import lowerkit as lk

from ..backend.registry import BackendInfo, backends, get_backend
from ..errors import BackendNotAvailableError, BackendUnavailableWarning, InputError
from ..ir import Graph, GraphMethod, Module
from .cases import OP_CASES, OpCase, case_module

__all__ = ["BackendConformance"]

# Preferred ops for the module the contract tests lower, most common first.
_CONTRACT_OPS = ("relu", "add", "mul", "conv2d", "linear", "neg", "sub", "matmul")


def _case_id(case: OpCase) -> str:
    return case.name


class BackendConformance:
    """Base class of a backend's conformance tests (pytest collects ``Test*`` subclasses)."""

    #: The backend under test, as listed by ``lowerkit.backends()``.
    backend_name: ClassVar[str] = ""
    #: Ops the backend claims; their op cases must agree with ``reference``.
    supported_ops: ClassVar[frozenset[str]] = frozenset()
    #: Tolerances for comparing with reference, and per-op overrides ``{op: (rtol, atol)}``.
    rtol: ClassVar[float] = 1e-5
    atol: ClassVar[float] = 1e-6
    op_tolerances: ClassVar[dict[str, tuple[float, float]]] = {}
    #: Case names to skip (with a reason), e.g. ``{"conv2d-dilation2": "not planned"}``.
    skip_cases: ClassVar[dict[str, str]] = {}
    #: The op case the contract tests lower; ``None`` picks a supported basic case.
    contract_case: ClassVar[str | None] = None
    #: Options for ``forward`` the backend accepts; the save/load test checks they round-trip.
    compile_options: ClassVar[dict[str, Any]] = {}

    # -- helpers ----------------------------------------------------------------------------
    def info(self) -> BackendInfo:
        if not self.backend_name:
            pytest.fail("set backend_name on your BackendConformance subclass")
        listed = {b.name: b for b in backends()}
        if self.backend_name not in listed:
            pytest.fail(f"backend {self.backend_name!r} is not installed; installed: {sorted(listed)}")
        return listed[self.backend_name]

    def require_available(self) -> None:
        info = self.info()
        if not info.available:
            pytest.skip(f"backend {self.backend_name} is not available here: {info.note or info.error}")

    def the_case(self) -> OpCase:
        by_name = {c.name: c for c in OP_CASES}
        if self.contract_case is not None:
            return by_name[self.contract_case]
        for op in _CONTRACT_OPS:
            if op in self.supported_ops:
                return next(c for c in OP_CASES if c.op == op and c.basic)
        for case in OP_CASES:
            if case.basic and case.op in self.supported_ops:
                return case
        pytest.skip("supported_ops names no op with a conformance case")

    def contract_module(self, seed: int = 0) -> tuple[Module, list[np.ndarray]]:
        """A two-method module (``forward`` and ``again``) of the contract case, and inputs."""
        case = self.the_case()
        return case_module(case, seed=seed, methods=("forward", "again")), case.inputs(seed)

    def lower(self, module: Module, **kwargs: Any) -> lk.LoweredModule:
        """``to_backend`` with the unavailable-backend warning silenced."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BackendUnavailableWarning)
            return lk.to_backend(module, self.backend_name, **kwargs)

    def assert_close(self, got: Any, expected: Any, op: str = "") -> None:
        rtol, atol = self.op_tolerances.get(op, (self.rtol, self.atol))
        got_t = got if isinstance(got, tuple) else (got,)
        exp_t = expected if isinstance(expected, tuple) else (expected,)
        assert len(got_t) == len(exp_t)
        for g, e in zip(got_t, exp_t):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)

    # -- contract ---------------------------------------------------------------------------
    def test_installed_and_not_broken(self) -> None:
        info = self.info()
        assert info.error is None, info.error
        assert info.distribution, "an installed backend names its distribution"
        assert isinstance(info.available, bool)

    def test_creation_follows_availability(self) -> None:
        module, inputs = self.contract_module()
        info = self.info()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lowered = lk.to_backend(module, self.backend_name)
        warned = [w for w in caught if issubclass(w.category, BackendUnavailableWarning)]
        assert lowered.backend == self.backend_name
        if info.available:
            assert not warned and lowered.is_compiled
        else:
            assert warned and not lowered.is_compiled
            with pytest.raises(BackendNotAvailableError, match=f"Backend {self.backend_name} is not available"):
                lowered(*inputs)

    def test_matches_reference_on_every_method(self) -> None:
        self.require_available()
        module, inputs = self.contract_module()
        lowered = self.lower(module)
        for method in ("forward", "again"):
            self.assert_close(lowered.run(method, *inputs), module.run(method, *inputs), self.the_case().op)

    def test_save_load_round_trip(self) -> None:
        module, inputs = self.contract_module()
        spec = {"forward": dict(self.compile_options)}
        lowered = self.lower(module, compile_spec=spec, keep_source=True)
        data = lk.dumps(lowered)
        if not self.info().available:
            with pytest.raises(BackendNotAvailableError):
                lk.loads(data)
            with pytest.warns(BackendUnavailableWarning):
                fallen = lk.loads(data, fallback="reference")
            self.assert_close(fallen(*inputs), module(*inputs))
            return
        loaded = lk.loads(data)
        assert loaded.backend == self.backend_name
        assert loaded.compile_spec == {"forward": dict(self.compile_options), "again": {}}
        self.assert_close(loaded(*inputs), module(*inputs), self.the_case().op)
        assert lk.dumps(loaded) == data

    def test_composes_inside_an_outer_module(self) -> None:
        self.require_available()
        first, inputs = self.contract_module(seed=0)
        second, _ = self.contract_module(seed=1)
        a, b = self.lower(first), self.lower(second)
        outer = _outer({"a": a, "b": b}, first)
        plain = _outer({"a": first, "b": second}, first)
        expected = plain(*inputs)
        self.assert_close(outer(*inputs), expected, self.the_case().op)
        self.assert_close(lk.loads(lk.dumps(outer))(*inputs), expected, self.the_case().op)

    def test_bad_inputs_are_input_errors(self) -> None:
        module, inputs = self.contract_module()
        lowered = self.lower(module)
        with pytest.raises(InputError, match="method 'forward' takes"):
            lowered(*inputs, inputs[0])
        wrong = [x.astype(np.float64) for x in inputs]
        with pytest.raises(InputError, match="expected f32"):
            lowered(*wrong)
        with pytest.raises(InputError, match="has no method 'missing'"):
            lowered.run("missing", *inputs)

    def test_is_supported_accepts_the_basic_cases(self) -> None:
        backend = get_backend(self.backend_name)
        if not backend.has_hook("lowerkit_is_supported"):
            pytest.skip(f"{self.backend_name} lowers whole modules only")
        for case in OP_CASES:
            if case.basic and case.op in self.supported_ops:
                node = _the_node(case)
                ok, reason = backend.supports(node)
                assert ok, f"{self.backend_name} declines its claimed op {case.op}: {reason}"

    def pytest_generate_tests(self, metafunc: Any) -> None:
        # One test per op case whose op the backend claims (pytest calls this per class).
        if "case" in metafunc.fixturenames:
            cases = [c for c in OP_CASES if c.op in self.supported_ops]
            metafunc.parametrize("case", cases, ids=_case_id)

    def test_op_matches_reference(self, case: OpCase) -> None:
        """The backend agrees with the un-lowered module run on reference."""
        if case.name in self.skip_cases:
            pytest.skip(self.skip_cases[case.name])
        backend = get_backend(self.backend_name)
        if backend.has_hook("lowerkit_is_supported"):
            ok, reason = backend.supports(_the_node(case))
            if not ok and not case.basic:
                pytest.skip(f"{self.backend_name} declines {case.name}: {reason}")
        module = case_module(case)
        lowered = self.lower(module)
        self.require_available()
        inputs = case.inputs()
        self.assert_close(lowered(*inputs), module(*inputs), case.op)


def _the_node(case: OpCase):
    graph = case_module(case).methods["forward"].graph
    return next(n for n in graph.nodes if n.op == case.op)


def _outer(submodules: dict[str, Any], like: Module) -> Module:
    """``forward(*xs) = (a.forward(*xs), b.forward(*xs))``, run on reference."""
    sig = like.signature("forward")
    g = Graph()
    xs = [g.add_input(name, t) for name, t in sig.inputs]
    outs = []
    for handle, name in enumerate(submodules, start=1):
        node = g.add_node("call", xs, list(sig.outputs), {"method": "forward", "module": name}, debug_handle=handle)
        outs.extend(node.outputs)
    g.set_outputs(outs)
    return Module({}, {"forward": GraphMethod(g, returns_tuple=True)}, dict(submodules), name="ConformanceOuter")
