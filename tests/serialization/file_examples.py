"""Modules built by hand with the IR API, shared by the file-format tests."""

from __future__ import annotations

import math

import numpy as np

from lowerkit.ir import DTYPES, Graph, GraphMethod, Module, SourceLocation, TensorType
from lowerkit.ir.equality import graph_diff
from lowerkit.opset import get_schema


def T(dtype: str, *shape: int) -> TensorType:
    return TensorType(dtype, shape)


class _Builder:
    """Appends nodes with inferred types and fresh debug handles to one graph."""

    def __init__(self, graph: Graph, first_handle: int = 0) -> None:
        self.graph = graph
        self.handle = first_handle

    def add(self, op, inputs, attrs=None, out=None, *, scope="", line=None, hint=None):
        schema = get_schema(op)
        attrs = schema.normalize_attrs(attrs or {})
        types = out if out is not None else schema.infer([v.type for v in inputs], attrs)
        node = self.graph.add_node(
            op, inputs, types, attrs, output_hints=[hint] * len(types) if hint else None,
            debug_handle=self.handle, scope=scope,
            source=SourceLocation("model.py", line) if line is not None else None,
        )
        self.handle += 1
        return node.outputs if len(node.outputs) != 1 else node.output


def tiny_module() -> Module:
    """The smallest useful module: ``forward(x) = relu(x + w)``; its file is a few hundred bytes."""
    g = Graph()
    b = _Builder(g)
    x = g.add_input("x", T("f32", 2))
    w = b.add("param", [], {"name": "w"}, [T("f32", 2)])
    g.set_outputs([b.add("relu", [b.add("add", [x, w])])])
    return Module({"w": np.array([1.0, -2.0], np.float32)}, {"forward": GraphMethod(g)}, name="Tiny")


def every_dtype_module() -> Module:
    """A parameter and a constant of every dtype, returned by ``forward`` as a tuple."""
    rng = np.random.default_rng(1)
    params = {}
    for short, dtype in DTYPES.items():
        if dtype.kind == "f":
            array = rng.standard_normal((2, 3)).astype(dtype)
        elif dtype.kind == "b":
            array = rng.integers(0, 2, (2, 3)).astype(dtype)
        else:
            info = np.iinfo(dtype)
            array = rng.integers(info.min, info.max, (2, 3), endpoint=True, dtype=dtype)
        params[f"p_{short}"] = array
    g = Graph()
    b = _Builder(g)
    outs = []
    for name, array in params.items():
        outs.append(b.add("param", [], {"name": name}, [TensorType.of(array)]))
        outs.append(b.add("constant", [], {"value": array[::-1].copy()}))
    outs.append(b.add("constant", [], {"value": np.zeros((0, 3), np.float32)}))  # empty tensor
    outs.append(b.add("constant", [], {"value": np.array(7, np.int64)}))  # scalar
    g.set_outputs(outs)
    return Module(params, {"forward": GraphMethod(g, returns_tuple=True)}, name="AllDtypes")


def _cnn_forward(b: _Builder, x, prefix: str = ""):
    w = b.add("param", [], {"name": prefix + "conv.weight"}, [T("f32", 4, 3, 3, 3)], scope="conv", line=10)
    bias = b.add("param", [], {"name": prefix + "conv.bias"}, [T("f32", 4)], scope="conv", line=10)
    y = b.add("conv2d", [x, w, bias], {"padding": (1, 1, 1, 1)}, scope="conv", line=10, hint="conv")
    y = b.add("leaky_relu", [y], {"negative_slope": 0.125}, line=11)
    y = b.add("max_pool2d", [y], {"kernel_size": (2, 2), "stride": (2, 2), "ceil_mode": True}, line=12)
    y = b.add("flatten", [y], {"start_dim": 1}, line=13)
    fw = b.add("param", [], {"name": prefix + "fc.weight"}, [T("f32", 5, 16)], scope="fc", line=14)
    y = b.add("linear", [y, fw], {}, scope="fc", line=14)  # no bias: optional input omitted
    return b.add("clip", [y], {"min": -math.inf, "max": 6.0}, line=15)


def cnn_params(prefix: str = "", seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        prefix + "conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        prefix + "conv.bias": rng.standard_normal(4).astype(np.float32),
        prefix + "fc.weight": rng.standard_normal((5, 16)).astype(np.float32),
    }


def cnn_module() -> Module:
    """A small CNN with every attribute kind, metadata, and a tuple-returning second method."""
    g = Graph()
    b = _Builder(g)
    x = g.add_input("x", T("f32", 1, 3, 4, 4))
    g.set_outputs([_cnn_forward(b, x)])

    both = Graph()
    b2 = _Builder(both, first_handle=b.handle)
    bx = both.add_input("x", T("f32", 1, 3, 4, 4))
    k = b2.add("constant", [], {"value": np.array([np.nan, -0.0, np.inf], np.float32)}, line=20)
    y = b2.add("call", [bx], {"method": "forward"}, [T("f32", 1, 5)], line=21)
    both.set_outputs([y, k, y])  # a value returned twice
    return Module(
        cnn_params(),
        {"forward": GraphMethod(g), "both": GraphMethod(both, returns_tuple=True)},
        name="SmallCNN",
    )


def nested_module() -> Module:
    """``Outer`` calls submodules ``block`` (which itself holds ``inner``) and ``head``."""
    inner_g = Graph()
    ib = _Builder(inner_g)
    ix = inner_g.add_input("x", T("f32", 1, 5))
    inner_g.set_outputs([ib.add("sigmoid", [ix], scope="inner")])
    inner = Module(methods={"forward": GraphMethod(inner_g)}, name="Inner")

    block_g = Graph()
    bb = _Builder(block_g)
    bx = block_g.add_input("x", T("f32", 1, 3, 4, 4))
    y = _cnn_forward(bb, bx)
    z = bb.add("call", [y], {"method": "forward", "module": "inner"}, [T("f32", 1, 5)], scope="inner")
    block_g.set_outputs([z, y])
    block = Module(
        cnn_params(seed=3), {"forward": GraphMethod(block_g)}, {"inner": inner}, name="Block"
    )

    head_g = Graph()
    hb = _Builder(head_g)
    hx = head_g.add_input("x", T("f32", 1, 5))
    hw = hb.add("param", [], {"name": "scale"}, [T("f32", 5)])
    head_g.set_outputs([hb.add("softmax", [hb.add("mul", [hx, hw])], {"dim": -1})])
    head = Module({"scale": np.full(5, 0.5, np.float32)}, {"forward": GraphMethod(head_g)}, name="Head")

    g = Graph()
    b = _Builder(g)
    x = g.add_input("x", T("f32", 1, 3, 4, 4))
    z, y = b.add("call", [x], {"method": "forward", "module": "block"}, [T("f32", 1, 5)] * 2, scope="block")
    out = b.add("call", [z], {"method": "forward", "module": "head"}, [T("f32", 1, 5)], scope="head")
    g.set_outputs([b.add("add", [out, y])])
    # Submodule order on purpose not alphabetical: insertion order must survive.
    return Module(methods={"forward": GraphMethod(g)}, submodules={"head": head, "block": block}, name="Outer")


def assert_modules_equal(a, b) -> None:
    """Name, parameters (order, dtype, bits), methods (order, graphs) and submodules, recursively."""
    assert type(a) is type(b)
    assert a.name == b.name
    assert list(a.parameters) == list(b.parameters)
    for key, array in a.parameters.items():
        other = b.parameters[key]
        assert other.dtype == array.dtype and other.shape == array.shape, key
        assert other.tobytes() == array.tobytes(), key  # bit-exact, NaN payloads included
    assert list(a.methods) == list(b.methods)
    for name, method in a.methods.items():
        other = b.methods[name]
        assert isinstance(other, GraphMethod)
        assert other.returns_tuple == method.returns_tuple
        diff = graph_diff(method.graph, other.graph)
        assert not diff, f"method {name}:\n{diff}"
    assert list(a.submodules) == list(b.submodules)
    for name, sub in a.submodules.items():
        if isinstance(sub, Module):
            assert_modules_equal(sub, b.submodules[name])
