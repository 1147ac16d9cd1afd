"""``lowerkit.trace``: turn an ``nn.Module`` (one or more methods) or a function into a Module."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..ir import calls
from ..ir.module import Module, Signature
from ..ir.types import TensorType
from ..ir.verify import verify_module
from .builder import MethodBuilder, TraceSession, describe
from .parameter import Parameter
from .source import user_source
from .state import activate, current_builder, deactivate
from .tensor import TracedTensor
from .traceable import Traceable

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def trace(
    obj: Traceable | Callable[..., Any],
    *example_inputs: np.ndarray,
    methods: Mapping[str, Sequence[np.ndarray] | np.ndarray] | None = None,
    dynamic_batch: bool | str = False,
) -> Module:
    """Trace ``obj`` into a :class:`lowerkit.Module`.

    ``obj`` is a :class:`lowerkit.nn.Module` (its ``forward`` is traced on
    ``example_inputs``) or a plain function (traced as method ``forward``). With
    ``methods={"name": (inputs, ...)}`` several methods of an ``nn.Module`` are traced; a
    method that calls another traced method records a ``call`` node. The example arrays fix
    the input types (dtype and static shape); Python control flow runs once and is unrolled.
    Raises :class:`~lowerkit.errors.InputError` for bad example inputs, return values that are
    not tensors, and ops whose inputs do not fit (naming the op and the source line).

    ``dynamic_batch=True`` (or a symbol name, default ``"N"``) makes the leading dim of every
    input free: the example inputs must share one batch size, and the module then runs any
    batch size (see :func:`lowerkit.passes.free_batch`).
    """
    module = _trace(obj, example_inputs, methods)
    if not dynamic_batch:
        return module
    symbol = dynamic_batch if isinstance(dynamic_batch, str) else "N"
    batches = {
        t.shape[0] if t.rank else None
        for m in module.methods.values()
        for _, t in m.signature.inputs
    }
    if len(batches) != 1 or None in batches:
        raise InputError(
            "dynamic_batch needs every example input to have the same leading (batch) dim, got "
            + ", ".join(f"{n}: {t}" for m in module.methods.values() for n, t in m.signature.inputs)
        )
    from ..passes import free_batch

    (batch,) = batches
    return free_batch(module, batch, {name: [n for n, _ in m.signature.inputs] for name, m in module.methods.items()}, symbol=symbol)


def _trace(obj: Any, example_inputs: Sequence[Any], methods: Any) -> Module:
    if isinstance(obj, Traceable):
        specs = _method_specs(type(obj).__name__, example_inputs, methods)
        session = TraceSession(type(obj).__name__, obj)
        return _trace_nn_module(obj, session, specs)
    if _is_torch_object(obj):
        kind = "module " if _is_torch_module(obj) else ""
        raise InputError(
            f"lowerkit.trace traces lowerkit.nn modules and Python functions, got the PyTorch {kind}"
            f"{type(obj).__name__}: import it with lowerkit.torch.load(model, example_inputs) "
            "(torch.export, see docs/torch.md), or export it to ONNX and use lowerkit.onnx.load"
        )
    if isinstance(obj, Module) or not callable(obj):
        raise InputError(
            "lowerkit.trace expects a lowerkit.nn.Module or a Python function, "
            f"got {type(obj).__name__}"
        )
    if methods is not None:
        raise InputError("methods= is for lowerkit.nn.Module objects; a function is traced as 'forward'")
    name = getattr(obj, "__name__", "")
    session = TraceSession(name if _IDENT.match(name) else "Module", None)
    tracer = _MethodTracer(session, {"forward": obj}, {"forward": _check_inputs("forward", example_inputs)})
    tracer.ensure("forward")
    return _build(session, ["forward"])


def _is_torch_object(obj: object) -> bool:
    """A torch.nn.Module or torch.export.ExportedProgram, recognised without importing torch."""
    return any(
        (cls.__module__, cls.__name__) in (("torch.nn.modules.module", "Module"),
                                           ("torch.export.exported_program", "ExportedProgram"))
        for cls in type(obj).__mro__
    )


def _method_specs(
    cls: str, example_inputs: Sequence[Any], methods: Mapping[str, Any] | None
) -> dict[str, tuple[np.ndarray, ...]]:
    if methods is None:
        return {"forward": _check_inputs("forward", example_inputs)}
    if not isinstance(methods, Mapping) or not methods:
        raise InputError(
            f"methods= expects a non-empty dict of method name -> example inputs, got {methods!r}"
        )
    specs: dict[str, tuple[np.ndarray, ...]] = {}
    if example_inputs:
        if "forward" in methods:
            raise InputError(
                "example inputs for forward were given both positionally and in methods=; give them once"
            )
        specs["forward"] = _check_inputs("forward", example_inputs)
    for name, inputs in methods.items():
        if not isinstance(name, str) or not _IDENT.match(name):
            raise InputError(f"methods= keys must be method names, got {name!r}")
        if isinstance(inputs, np.ndarray):
            inputs = (inputs,)
        if not isinstance(inputs, (tuple, list)):
            raise InputError(
                f"methods[{name!r}] must be a tuple of example input arrays, got {type(inputs).__name__}"
            )
        specs[name] = _check_inputs(name, inputs)
    return specs


def _check_inputs(method: str, inputs: Sequence[Any]) -> tuple[np.ndarray, ...]:
    checked = []
    for i, x in enumerate(inputs):
        if isinstance(x, np.generic):
            x = np.asarray(x)
        if not isinstance(x, np.ndarray):
            raise InputError(
                f"method {method!r}, example input {i}: expected a numpy array, got {type(x).__name__}"
            )
        try:
            TensorType.of(x)
        except ValueError as err:
            raise InputError(f"method {method!r}, example input {i}: {err}") from None
        checked.append(x)
    return tuple(checked)


def _input_names(fn: Callable[..., Any], count: int, method: str) -> list[str]:
    """Graph input names: the Python parameter names of ``fn``; checks the input count."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [f"input{i}" for i in range(count)]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
    required = [p for p in positional if p.default is p.empty]
    missing_kw = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    listed = ", ".join(p.name for p in positional)
    if missing_kw:
        raise InputError(f"method {method!r} has required keyword-only parameters {missing_kw}; tracing passes inputs positionally")
    if count < len(required) or (varargs is None and count > len(positional)):
        expected = f"{len(required)}" if len(required) == len(positional) else f"{len(required)} to {len(positional)}"
        if varargs is not None:
            expected = f"at least {len(required)}"
        raise InputError(
            f"method {method!r} takes {expected} inputs ({listed}), got {count} example inputs"
        )
    names = [p.name for p in positional[:count]]
    names += [f"{varargs.name}{i}" for i in range(count - len(names))] if varargs else []
    return names


class _MethodTracer:
    """Traces methods on demand, so a method may call another that is traced first."""

    def __init__(
        self,
        session: TraceSession,
        functions: dict[str, Callable[..., Any]],
        specs: dict[str, tuple[np.ndarray, ...]],
    ) -> None:
        self.session = session
        self.functions = functions
        self.specs = specs
        self._in_progress: list[str] = []

    def ensure(self, name: str) -> None:
        if name in self.session.methods:
            return
        if name in self._in_progress:
            chain = " -> ".join([*self._in_progress, name])
            raise InputError(f"method {name!r} calls itself ({chain}); recursion cannot be traced")
        self._in_progress.append(name)
        try:
            fn, inputs = self.functions[name], self.specs[name]
            builder = MethodBuilder(self.session, name)
            args = [builder.add_input(n, x) for n, x in zip(_input_names(fn, len(inputs), name), inputs)]
            token = activate(builder)
            try:
                result = fn(*args)
            finally:
                deactivate(token)
            self.session.methods[name] = builder.finish(result)
        finally:
            self._in_progress.pop()

    def call(self, name: str, args: Sequence[Any]) -> TracedTensor | tuple[TracedTensor, ...]:
        """Record ``call(method=name)`` in the active method (tracing ``name`` first if needed)."""
        builder = current_builder()
        assert builder is not None and builder.session is self.session
        self.ensure(name)
        return record_call(builder, self.session.methods[name].signature, args, name, "")


def record_call(
    builder: MethodBuilder, sig: Signature, args: Sequence[Any], method: str, module: str
) -> TracedTensor | tuple[TracedTensor, ...]:
    """Record a ``call`` node whose output types come from the callee's signature."""
    target = f"{module}.{method}" if module else method
    where = describe(f"call of {target!r}", builder.scope, user_source())
    if len(args) != len(sig.inputs):
        names = ", ".join(n for n, _ in sig.inputs)
        raise InputError(f"{where}: takes {len(sig.inputs)} inputs ({names}), got {len(args)}")
    values = []
    for (name, expected), arg in zip(sig.inputs, args):
        value = builder.value_of(arg, expected, what=f"{where}, input {name!r}")
        if value.type != expected:
            raise InputError(f"{where}, input {name!r}: expected {expected}, got {value.type}")
        values.append(value)
    hint = (module or method).replace(".", "_")
    node = builder.emit(
        "call", values, {"method": method, "module": module}, list(sig.outputs), [hint] * len(sig.outputs)
    )
    outs = [builder.wrap(v) for v in node.outputs]
    return tuple(outs) if sig.returns_tuple else outs[0]


def intercept_call(module: Any, method: str, inputs: Sequence[Any]) -> Any:
    """Called by ``lowerkit.Module``/``LoweredModule`` when a method is called.

    Returns ``NotImplemented`` when nothing is being traced (run normally); inside tracing,
    with traced inputs, records ``call(module=..., method=...)`` and returns traced outputs.
    """
    builder = current_builder()
    if not any(isinstance(x, (TracedTensor, Parameter)) for x in inputs):
        return NotImplemented
    if builder is None:
        if not any(isinstance(x, TracedTensor) for x in inputs):
            return NotImplemented  # parameters outside tracing are plain arrays
        raise InputError(
            f"{getattr(module, 'name', type(module).__name__)}.{method} was called on a traced tensor "
            "outside tracing; traced tensors live only while lowerkit.trace runs"
        )
    name = builder.session.submodule_name(module)
    return record_call(builder, module.signature(method), inputs, method, name)


def _trace_nn_module(obj: Traceable, session: TraceSession, specs: dict[str, tuple[np.ndarray, ...]]) -> Module:
    functions = {}
    for name in specs:
        fn = getattr(obj, name, None)
        if not callable(fn):
            raise InputError(f"{type(obj).__name__} has no method {name!r} to trace")
        functions[name] = fn
    tracer = _MethodTracer(session, functions, specs)

    def stub(name: str) -> Callable[..., Any]:
        def call_traced_method(*args: Any) -> Any:
            builder = current_builder()
            if builder is None or builder.session is not session:
                return functions[name](*args)
            return tracer.call(name, args)

        return call_traced_method

    # While tracing, self.<method>(...) on the root records a call node instead of inlining.
    saved = {name: obj.__dict__[name] for name in specs if name in obj.__dict__}
    try:
        for name in specs:
            obj.__dict__[name] = stub(name)
        for name in specs:
            tracer.ensure(name)
    finally:
        for name in specs:
            if name in saved:
                obj.__dict__[name] = saved[name]
            else:
                obj.__dict__.pop(name, None)
    return _build(session, list(specs))


def _build(session: TraceSession, order: list[str]) -> Module:
    """The traced module, checked by the IR verifier (a failure there is a tracer bug)."""
    methods = {name: session.methods[name] for name in order}
    module = Module(session.parameters, methods, session.submodules, session.name)
    verify_module(module)
    return module


def _trace_first_hint(obj: object) -> str:
    if isinstance(obj, Traceable):
        return "; trace it first with lowerkit.trace(obj, *example_inputs)"
    return ""


calls.install(interceptor=intercept_call, hint=_trace_first_hint)


def _is_torch_module(obj: object) -> bool:
    """A ``torch.nn.Module``, recognised without importing torch."""
    return any(
        c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(obj).__mro__
    )
