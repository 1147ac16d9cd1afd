"""``lowerkit.autograd.grad``: a module with the backward method of one of its methods."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.module import GraphMethod, Module, graph_of
from ..ir.node import Value
from ..ir.types import TensorType
from ..ir.verify import verify_module
from .reverse import append_backward, decompose_undifferentiable
from .inline import inline_calls


def grad(module: Module, method: str = "forward", wrt: Sequence[str] | None = None) -> Module:
    """Return ``module`` plus method ``f"{method}_grad"``, the reverse-mode gradient of ``method``.

    The new method takes the method's inputs followed by one cotangent per output (same type
    as that output) and returns the method's outputs followed by one gradient per entry of
    ``wrt``: parameter names and/or input names of ``method``; ``None`` means every parameter,
    in ``module.parameters`` order. A parameter the method does not use gets zeros.
    Raises :class:`~lowerkit.errors.InputError` for unknown names and
    :class:`~lowerkit.errors.UnsupportedOperatorError` listing every node whose op has no
    derivative entry.
    """
    if not isinstance(module, Module):
        raise InputError(f"lowerkit.autograd.grad expects a lowerkit.Module, got {type(module).__name__}")
    source = graph_of(module, method)
    target = f"{method}_grad"
    if target in module.methods:
        raise InputError(f"{module.name} already has a method {target!r}; grad would replace it")
    names = _wrt_names(module, method, source, wrt)
    graph = inline_calls(source.copy(), module, method)
    decompose_undifferentiable(graph)
    outputs = list(graph.outputs)
    sources = [_wrt_values(module, graph, name) for name in names]
    _, grads = append_backward(graph, sources, method=method, first_handle=0)
    graph.set_outputs(outputs + grads)
    _renumber(graph, _next_handle(module))
    methods = dict(module.methods)
    methods[target] = GraphMethod(graph, returns_tuple=True)
    result = Module(module.parameters, methods, module.submodules, name=module.name)
    verify_module(result)
    return result


def _wrt_names(module: Module, method: str, graph: Graph, wrt: Sequence[str] | None) -> list[str]:
    if wrt is None:
        return list(module.parameters)
    if isinstance(wrt, str) or not all(isinstance(n, str) for n in wrt):
        raise InputError(f"wrt must be a list of parameter and/or input names, got {wrt!r}")
    inputs = [v.name for v in graph.inputs]
    unknown = [n for n in wrt if n not in module.parameters and n not in inputs]
    if unknown:
        raise InputError(
            f"wrt names {unknown} that are neither parameters of {module.name} nor inputs of "
            f"method {method!r}; its inputs are {inputs} and its parameters {list(module.parameters)}"
        )
    both = [n for n in wrt if n in module.parameters and n in inputs]
    if both:
        raise InputError(f"wrt names {both} are both a parameter and an input of {method!r}; rename one")
    return list(wrt)


def _wrt_values(module: Module, graph: Graph, name: str) -> tuple[TensorType, list[Value]]:
    if name in module.parameters:
        array = module.parameters[name]
        reads = [n.outputs[0] for n in graph.nodes if n.op == "param" and n.attrs["name"] == name]
        return TensorType.of(array), reads
    value = next(v for v in graph.inputs if v.name == name)
    return value.type, [value]


def _next_handle(module: Module) -> int:
    handles = [n.debug_handle for m in module.methods.values() if isinstance(m, GraphMethod) for n in m.graph.nodes]
    return max(handles, default=-1) + 1


def _renumber(graph: Graph, first: int) -> None:
    """Fresh handles for every node: the forward copies must not repeat the original method's."""
    for i, node in enumerate(graph.nodes):
        node.debug_handle = first + i
