"""Small modules for the backend-contract tests, built with the Graph API."""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, GraphMethod, Module, TensorType

T = TensorType("f32", (2, 3))


def _binary(op: str, handle: int) -> Graph:
    g = Graph()
    x = g.add_input("x", T)
    h = g.add_input("h", T)
    g.set_outputs([g.add_node(op, [x, h], [T], debug_handle=handle).output])
    return g


def accum_module(name: str = "Accum") -> Module:
    """``accum(x, h) = x + h``, ``sub_accum(x, h) = x - h``, ``forward`` returning both."""
    fwd = Graph()
    x = fwd.add_input("x", T)
    h = fwd.add_input("h", T)
    a = fwd.add_node("call", [x, h], [T], {"method": "accum", "module": ""}, debug_handle=3).output
    s = fwd.add_node("call", [x, h], [T], {"method": "sub_accum", "module": ""}, debug_handle=4).output
    fwd.set_outputs([a, s])
    methods = {
        "accum": GraphMethod(_binary("add", 1)),
        "sub_accum": GraphMethod(_binary("sub", 2)),
        "forward": GraphMethod(fwd, returns_tuple=True),
    }
    return Module({}, methods, name=name)


def scaled_module(scale: float, name: str = "Scaled") -> Module:
    """``forward(x) = relu(x * scale)`` with ``scale`` a parameter of shape [2, 3]."""
    g = Graph()
    x = g.add_input("x", T)
    w = g.add_node("param", [], [T], {"name": "scale"}, debug_handle=1).output
    y = g.add_node("mul", [x, w], [T], debug_handle=2).output
    g.set_outputs([g.add_node("relu", [y], [T], debug_handle=3).output])
    return Module({"scale": np.full((2, 3), scale, np.float32)}, {"forward": GraphMethod(g)}, name=name)


def outer_module(submodules: dict[str, object]) -> Module:
    """``forward(x) = neg(sum of submodule(x).forward for each submodule)``, run on reference."""
    g = Graph()
    x = g.add_input("x", T)
    total = None
    handle = 1
    for name in submodules:
        y = g.add_node("call", [x], [T], {"method": "forward", "module": name}, debug_handle=handle).output
        handle += 1
        if total is None:
            total = y
        else:
            total = g.add_node("add", [total, y], [T], debug_handle=handle).output
            handle += 1
    g.set_outputs([g.add_node("neg", [total], [T], debug_handle=handle).output])
    return Module({}, {"forward": GraphMethod(g)}, dict(submodules), name="Outer")
