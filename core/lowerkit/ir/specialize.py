"""Symbolic dims at run time: which sizes a call binds, and a module specialised to them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import InputError
from .module import GraphMethod, Module, Signature

__all__ = ["bind_module", "bind_sizes", "module_symbols"]


def module_symbols(module: Module) -> tuple[str, ...]:
    """The symbolic dims the inputs of ``module``'s methods name (``()`` for a static module)."""
    found: dict[str, None] = {}
    for method in module.methods.values():
        for _, t in method.signature.inputs:
            found.update(dict.fromkeys(t.symbols))
    return tuple(found)


def bind_sizes(method: str, sig: Signature, inputs: Sequence[np.ndarray]) -> dict[str, int]:
    """The size each symbolic dim of ``sig`` takes in ``inputs`` (``InputError`` on a clash)."""
    sizes: dict[str, int] = {}
    for (name, t), x in zip(sig.inputs, inputs):
        if not t.is_static and not t.matches(t.dtype, tuple(np.shape(x)), sizes):
            raise InputError(f"method {method!r}, input {name!r}: expected {t}, got shape {list(np.shape(x))}")
    return sizes


def bind_module(module: Module, sizes: Mapping[str, int]) -> Module:
    """A copy of ``module`` whose graph methods have every symbolic dim in ``sizes`` replaced
    by its size (types only: ops keep a symbolic batch as a pass-through, so substitution
    gives the types inference would). Parameters are shared; submodules are kept as they are."""
    methods = {}
    for name, method in module.methods.items():
        if not isinstance(method, GraphMethod):
            methods[name] = method
            continue
        graph = method.graph.copy()
        for v in graph.inputs:
            v.type = v.type.bind(sizes)
        for node in graph.nodes:
            for v in node.outputs:
                v.type = v.type.bind(sizes)
        methods[name] = GraphMethod(graph, method.returns_tuple, method.output_names)
    bound = Module(module.parameters, methods, module.submodules, name=module.name)
    return bound

