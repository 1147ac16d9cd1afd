"""Modules: named parameters, named methods and named submodules.

A method is called, inspected or (for an un-lowered module) opened as a graph with
:func:`graph_of`. The graph is an implementation detail of :class:`GraphMethod`; a lowered
method has no graph.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError
from . import calls
from .graph import Graph
from .types import TensorType, dtype_name


@dataclass(frozen=True, slots=True)
class Signature:
    """What a method takes and returns.

    ``output_names`` names each output (ONNX output names, the keys of a traced dict);
    empty means the default names ``output0``, ``output1``, ... (see :attr:`names_out`).
    """

    inputs: tuple[tuple[str, TensorType], ...]
    outputs: tuple[TensorType, ...]
    returns_tuple: bool = False
    output_names: tuple[str, ...] = ()
    # (numpy dtype, shape) per input and per output, for the checks on every call.
    _input_checks: tuple[tuple[np.dtype, tuple[int, ...]], ...] = field(
        init=False, repr=False, compare=False, hash=False
    )
    _output_checks: tuple[tuple[np.dtype, tuple[int, ...]], ...] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.output_names and len(self.output_names) != len(self.outputs):
            raise InputError(
                f"a signature with {len(self.outputs)} outputs needs as many output names, "
                f"got {list(self.output_names)}"
            )
        object.__setattr__(self, "_input_checks", tuple((t.numpy_dtype, t.shape) for _, t in self.inputs))
        object.__setattr__(self, "_output_checks", tuple((t.numpy_dtype, t.shape) for t in self.outputs))

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.inputs)

    @property
    def names_out(self) -> tuple[str, ...]:
        """The output names, defaults filled in."""
        return self.output_names or default_output_names(len(self.outputs))

    def __str__(self) -> str:
        ins = ", ".join(f"{n}: {t}" for n, t in self.inputs)
        if self.output_names:
            outs = ", ".join(f"{n}: {t}" for n, t in zip(self.output_names, self.outputs))
        else:
            outs = ", ".join(str(t) for t in self.outputs)
        return f"({ins}) -> ({outs})" if self.returns_tuple else f"({ins}) -> {outs}"


def default_output_names(count: int) -> tuple[str, ...]:
    """``output0``, ``output1``, ...: the names of outputs nobody named."""
    return tuple(f"output{i}" for i in range(count))


class Method:
    """A callable entry point of a module; subclasses say how it is implemented."""

    signature: Signature


class GraphMethod(Method):
    """A method defined by an IR graph (un-lowered)."""

    def __init__(
        self, graph: Graph, returns_tuple: bool = False, output_names: Sequence[str] = ()
    ) -> None:
        self.graph = graph
        self.returns_tuple = returns_tuple or len(graph.outputs) != 1
        self.output_names = tuple(output_names)

    @property
    def signature(self) -> Signature:  # type: ignore[override]
        names = self.output_names if len(self.output_names) == len(self.graph.outputs) else ()
        return Signature(
            tuple((v.name, v.type) for v in self.graph.inputs),
            tuple(v.type for v in self.graph.outputs),
            self.returns_tuple,
            names,
        )


class CallableModule:
    """What every module a user calls shares: named methods with signatures, run three ways.

    ``module(x)`` runs ``forward``, ``module.name(x)`` runs method ``name`` and
    ``module.run("name", x)`` any method. Inputs go by position, by keyword
    (``module(x=x)``, ``module.forward(x=x)``) or, as in ONNX Runtime, as one feed dict
    (``module.run("forward", {"x": x})``). :class:`Module` (un-lowered) and the lowered
    modules of :mod:`lowerkit.lowering` implement :meth:`signature` and :meth:`_execute`;
    inside ``lowerkit.trace`` a call on traced tensors is recorded instead of run.
    """

    name: str
    methods: dict[str, Method]

    def signature(self, method: str) -> Signature:
        raise NotImplementedError

    def _execute(self, method: str, sig: Signature, inputs: list[np.ndarray]) -> Any:
        """Run ``method`` on checked inputs; returns what :meth:`run` returns."""
        raise NotImplementedError

    def run(self, method: str, *inputs: Any, **named: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run ``method``; returns one array or a tuple, as the method does.

        Inputs are given by position (``run("forward", x)``), by name
        (``run("forward", x=x)``) or as one dict of them (``run("forward", {"x": x})``).
        """
        if named or (len(inputs) == 1 and isinstance(inputs[0], dict)):
            inputs = order_inputs(self, method, inputs, named)
        for value in inputs:  # plain arrays are never traced: skip the interceptors
            if type(value) is not np.ndarray:
                traced = calls.intercept(self, method, inputs)  # inside lowerkit.trace: record a call
                if traced is not NotImplemented:
                    return traced
                break
        sig = self.signature(method)
        return self._execute(method, sig, check_inputs(method, sig, inputs))

    def __call__(self, *inputs: Any, **named: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        return self.run("forward", *inputs, **named)

    def __getattr__(self, name: str) -> Any:
        return method_attribute(self, name)


class Module(CallableModule):
    """A lowerkit module: parameters (read-only numpy arrays), methods and submodules.

    Call ``module(x)`` (method ``forward``), ``module.forward(x)`` or
    ``module.run("name", *inputs)``; an un-lowered module runs on the ``reference`` backend.
    Modules are immutable once built: parameters are stored read-only.
    """

    def __init__(
        self,
        parameters: Mapping[str, np.ndarray] | None = None,
        methods: Mapping[str, Method] | None = None,
        submodules: Mapping[str, CallableModule] | None = None,
        name: str = "Module",
    ) -> None:
        self.name = name
        self.parameters: dict[str, np.ndarray] = {}
        for key, array in (parameters or {}).items():
            array = np.array(array, copy=True)
            array.flags.writeable = False
            self.parameters[key] = array
        self.methods: dict[str, Method] = dict(methods or {})
        self.submodules: dict[str, CallableModule] = dict(submodules or {})
        self._runtime_cache: Any = None  # owned by the runner lowerkit.lowering installs

    def _execute(self, method: str, sig: Signature, inputs: list[np.ndarray]) -> Any:
        return format_outputs(method, sig, calls.run_graph(self, method, inputs))

    # Copies never share the runtime (handles compiled on reference, freed with their
    # module): each copy compiles its own at its first call.
    def __copy__(self) -> Module:
        return Module(self.parameters, self.methods, self.submodules, name=self.name)

    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        methods = copy.deepcopy(self.methods, memo)
        submodules = copy.deepcopy(self.submodules, memo)
        return Module(self.parameters, methods, submodules, name=self.name)  # copies parameters

    def signature(self, method: str) -> Signature:
        try:
            return self.methods[method].signature
        except KeyError:
            raise InputError(
                f"{self.name} has no method {method!r}; its methods are {sorted(self.methods)}"
            ) from None

    def __str__(self) -> str:
        from .printer import format_module

        return format_module(self)

    def __repr__(self) -> str:
        return f"<lowerkit.Module {self.name} methods={sorted(self.methods)}>"


def method_attribute(obj: Any, name: str) -> Any:
    """``obj.name`` for a method ``name`` of a (lowered) module: a function running it.

    Shared by the ``__getattr__`` of modules and lowered modules, so that
    ``module.forward(x)`` and ``module.accum(x, h)`` work; anything else is an
    ``AttributeError`` that lists the methods.
    """
    methods = obj.__dict__.get("methods")
    if methods is not None and name in methods:
        return lambda *inputs, **named: obj.run(name, *inputs, **named)
    listed = f"; its methods are {sorted(methods)}" if methods else ""
    raise AttributeError(f"{type(obj).__name__} has no attribute or method {name!r}{listed}")


def graph_of(module: Module, method: str = "forward") -> Graph:
    """The IR graph of an un-lowered method. Raises ``InputError`` for lowered methods."""
    if not isinstance(module, Module):
        backend = getattr(module, "backend", None)
        if backend is not None and method in getattr(module, "methods", {}):
            raise InputError(
                f"method {method!r} of {module.name} is lowered to a backend and has no graph "
                f"(backend {backend!r}); graph_of needs an un-lowered lowerkit.Module"
            )
        raise InputError(
            f"graph_of expects a lowerkit.Module, got {type(module).__name__}{trace_hint(module)}"
        )
    m = module.methods.get(method)
    if m is None:
        raise InputError(
            f"{module.name} has no method {method!r} to take a graph of; "
            f"its methods are {sorted(module.methods)}"
        )
    if not isinstance(m, GraphMethod):
        raise InputError(f"method {method!r} of {module.name} is lowered to a backend and has no graph")
    return m.graph


def trace_hint(obj: object) -> str:
    """``"; trace it first ..."`` for an object given where a Module belongs (see ``calls.misuse_hint``)."""
    return calls.misuse_hint(obj)


def order_inputs(
    module: CallableModule, method: str, inputs: Sequence[Any], named: Mapping[str, Any]
) -> tuple[Any, ...]:
    """Positional inputs from keywords or a feed dict (``{"x": x}``), in signature order."""
    sig = module.signature(method)
    expected = sig.input_names
    if not named:  # one feed dict
        feed = inputs[0]
        if not all(isinstance(k, str) for k in feed):
            raise InputError(
                f"method {method!r}: a feed dict maps input names {list(expected)} to arrays, "
                f"got keys {list(feed)}"
            )
        given, how = dict(feed), "the feed dict"
    elif len(inputs) > len(expected):
        raise InputError(
            f"method {method!r} takes {len(expected)} inputs ({', '.join(expected)}), "
            f"got {len(inputs)} positional and {len(named)} by name"
        )
    else:
        given, how = dict(named), "keywords"
        for name, value in zip(expected, inputs):
            if name in given:
                raise InputError(f"method {method!r}: input {name!r} is given by position and by name")
            given[name] = value
    unknown = [k for k in given if k not in expected]
    if unknown:
        raise InputError(
            f"method {method!r} has no input(s) {unknown} (given in {how}); "
            f"its inputs are {list(expected)}{_did_you_mean(unknown[0], expected)}"
        )
    missing = [n for n in expected if n not in given]
    if missing:
        raise InputError(
            f"method {method!r}: missing input(s) {missing} (given in {how}: {list(given)}); "
            f"its inputs are {list(expected)}"
        )
    return tuple(given[n] for n in expected)


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_inputs(method: str, sig: Signature, inputs: Sequence[Any]) -> list[np.ndarray]:
    """Check call inputs against a signature; return them as numpy arrays."""
    checks = sig._input_checks
    if len(inputs) == len(checks):  # the common case: arrays of the right type, no copies
        for value, (dtype, shape) in zip(inputs, checks):
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
                break
        else:
            return list(inputs)
    if len(inputs) != len(sig.inputs):
        names = ", ".join(n for n, _ in sig.inputs)
        raise InputError(
            f"method {method!r} takes {len(sig.inputs)} inputs ({names}), got {len(inputs)}"
        )
    arrays = []
    sizes: dict[str, int] = {}  # symbolic dims bound by the inputs seen so far
    for (name, expected), value in zip(sig.inputs, inputs):
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as err:  # ragged nested lists and the like
            raise InputError(
                f"method {method!r}, input {name!r}: expected {expected}, got a "
                f"{type(value).__name__} that is not an array: {err}"
            ) from None
        try:
            given = TensorType(dtype_name(array.dtype), array.shape)
        except ValueError:
            given = None
        if given is None or not expected.matches(given.dtype, given.shape, sizes):
            shown = given if given is not None else f"{array.dtype}{list(array.shape)}"
            source = "" if isinstance(value, np.ndarray) else f" (from a {type(value).__name__})"
            bound = ", ".join(f"{k}={v}" for k, v in sizes.items() if k in expected.symbols)
            also = f" ({bound} from the inputs before it)" if bound else ""
            raise InputError(
                f"method {method!r}, input {name!r}: expected {expected}{also}, got {shown}{source}"
            )
        arrays.append(array)
    return arrays


def format_outputs(
    method: str, sig: Signature, outputs: Sequence[np.ndarray]
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Check outputs against the signature and shape them as the method returns them."""
    checks = sig._output_checks
    if len(outputs) == len(checks):
        for out, (dtype, shape) in zip(outputs, checks):
            if out.dtype != dtype or out.shape != shape:
                break
        else:
            return tuple(outputs) if sig.returns_tuple else outputs[0]
    if len(outputs) != len(sig.outputs):
        raise InputError(
            f"method {method!r} should return {len(sig.outputs)} outputs, got {len(outputs)}"
        )
    sizes: dict[str, int] = {}
    for i, (out, expected) in enumerate(zip(outputs, sig.outputs)):
        if out.dtype != expected.numpy_dtype or not expected.matches(expected.dtype, out.shape, sizes):
            raise InputError(
                f"method {method!r}, output {i}: expected {expected}, got {out.dtype}{list(out.shape)}"
            )
    return tuple(outputs) if sig.returns_tuple else outputs[0]
