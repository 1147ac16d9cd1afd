"""The ``torch.Tensor`` methods and numpy ufuncs a traced tensor answers, by mapping them to
:mod:`lowerkit.ops`; and the error, naming what to use instead, for everything else.

Each method in :data:`METHODS` calls the ``lowerkit.ops`` function of the same meaning with
the tensor first (``x.sum(1)`` is ``ops.sum(x, 1)``). A method whose op this installation
lacks says so. Ufuncs in :data:`UFUNCS` record the matching op (``np.tanh(x)``,
``np.add(a, x)``); ``out=``, ``where=`` and ufunc methods (``np.add.reduce``) are refused.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["METHODS", "UFUNCS", "TracedAttributeError", "install", "unknown_attribute", "ufunc_call"]

# torch.Tensor method -> lowerkit.ops function taking the tensor first.
METHODS = {
    "sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "max": "max", "min": "min",
    "softmax": "softmax", "log_softmax": "log_softmax", "clamp": "clip", "clip": "clip",
    "matmul": "matmul", "mm": "matmul", "add": "add", "sub": "sub", "mul": "mul", "div": "div",
    "pow": "pow", "neg": "neg", "erf": "erf", "squeeze": "squeeze", "unsqueeze": "unsqueeze",
    "expand": "expand", "narrow": "narrow", "split": "split", "chunk": "chunk",
    "index_select": "index_select", "select": "select", "relu": "relu", "sigmoid": "sigmoid",
    "tanh": "tanh", "exp": "exp", "log": "log", "sqrt": "sqrt",
}

# Methods that change nothing while tracing (no autograd, no devices, always contiguous).
IDENTITY = ("contiguous", "detach", "clone", "cpu")

# Advice for torch.Tensor methods lowerkit has no op for.
ADVICE = {
    "item": "its data is unknown while tracing; return the tensor and read it after running",
    "tolist": "its data is unknown while tracing; return the tensor and read it after running",
    "numpy": "its data is unknown while tracing; compute with lowerkit.ops instead",
    "cuda": "lowerkit modules run where their backend is; drop the device move",
    "to": "lowerkit traces one dtype and no devices; drop the call, or cast the input before tracing",
    "float": "lowerkit's op set has no cast; give inputs of the dtype you want when tracing",
    "double": "lowerkit's op set has no cast; give inputs of the dtype you want when tracing",
    "half": "lowerkit's op set has no cast; give inputs of the dtype you want when tracing",
    "type": "lowerkit's op set has no cast; give inputs of the dtype you want when tracing",
    "argmax": "lowerkit's op set has no index-returning reductions; use amax for the values",
    "argmin": "lowerkit's op set has no index-returning reductions; use amin for the values",
    "abs": "lowerkit's op set has no abs; use relu(x) + relu(-x)",
    "masked_fill": "use lowerkit.ops.where(mask, value, x)",
    "t": "use x.transpose(0, 1)",
}

# numpy ufunc name -> (op, arity); "pow" and "erf" exist only where lowerkit.ops has them.
UFUNCS = {
    "add": ("add", 2), "subtract": ("sub", 2), "multiply": ("mul", 2), "true_divide": ("div", 2),
    "divide": ("div", 2), "matmul": ("matmul", 2), "power": ("pow", 2), "negative": ("neg", 1),
    "exp": ("exp", 1), "log": ("log", 1), "sqrt": ("sqrt", 1), "tanh": ("tanh", 1),
}


class TracedAttributeError(InputError, AttributeError):
    """An unknown attribute of a traced tensor: an ``InputError`` (``hasattr`` still works)."""


def _ops() -> Any:
    from . import ops

    return ops


def _method(name: str, function: str) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(_ops(), function, None)
        if fn is None:
            raise InputError(
                f"{_where(self)}: .{name}() maps to lowerkit.ops.{function}, which this lowerkit "
                "does not have; see docs/tracing.md for the ops it offers"
            )
        return fn(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"As ``torch.Tensor.{name}``: ``lowerkit.ops.{function}(self, ...)``."
    return method


def _identity(self: Any) -> Any:
    return self


def install(cls: type) -> None:
    """Add the mapped methods to ``cls`` (methods it defines itself win)."""
    for name, function in METHODS.items():
        if name not in cls.__dict__:
            setattr(cls, name, _method(name, function))
    for name in IDENTITY:
        if name not in cls.__dict__:
            setattr(cls, name, _identity)


def _where(tensor: Any) -> str:
    value = tensor._value
    return f"traced value %{value.name} ({value.type}) in method {tensor._builder.method!r}"


def unknown_attribute(tensor: Any, name: str) -> TracedAttributeError:
    """The error for ``tensor.name`` when the name is neither an attribute nor a mapped method."""
    advice = ADVICE.get(name)
    if advice is None:
        known = sorted(set(METHODS) | {"reshape", "view", "flatten", "transpose", "permute", "size", "dim"})
        close = difflib.get_close_matches(name, known, n=1)
        advice = (f"did you mean .{close[0]}()? " if close else "") + (
            "traced tensors have the torch.Tensor methods that map to lowerkit ops: "
            + ", ".join(known) + "; for anything else use lowerkit.ops (docs/tracing.md)"
        )
    return TracedAttributeError(f"{_where(tensor)} has no method .{name}: {advice}")


def ufunc_call(tensor: Any, ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``np.<ufunc>(...)`` with a traced tensor among the inputs: record the matching op."""
    name = getattr(ufunc, "__name__", str(ufunc))
    if method != "__call__":
        raise InputError(f"{_where(tensor)}: numpy's {name}.{method} is not traceable; use lowerkit.ops "
                         "(e.g. ops.sum for add.reduce)")
    if kwargs:
        raise InputError(f"{_where(tensor)}: numpy's {name} with {sorted(kwargs)} is not traceable; "
                         "call it without out=/where=/dtype=")
    if name == "positive":
        return inputs[0]
    if name in ("maximum", "minimum"):  # with a number: a clip
        traced = [x for x in inputs if type(x).__name__ == "TracedTensor"]
        others = [x for x in inputs if type(x).__name__ != "TracedTensor"]
        if len(traced) == 1 and len(others) == 1 and np.ndim(others[0]) == 0:
            bound = float(others[0])
            return _ops().clip(traced[0], min=bound) if name == "maximum" else _ops().clip(traced[0], max=bound)
    entry = UFUNCS.get(name)
    if entry is None or (entry[0] in ("pow",) and not hasattr(_ops(), entry[0])):
        mapped = ", ".join(sorted(UFUNCS) + ["maximum/minimum with a number", "positive"])
        raise InputError(f"{_where(tensor)}: numpy's {name} has no lowerkit op; traceable ufuncs are "
                         f"{mapped}; for anything else use lowerkit.ops (docs/tracing.md)")
    op, arity = entry
    if len(inputs) != arity:
        raise InputError(f"{_where(tensor)}: numpy's {name} takes {arity} inputs, got {len(inputs)}")
    return tensor._builder.apply(op, inputs)
