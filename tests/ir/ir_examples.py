"""One example node per op (input types and attributes), shared by the IR tests.

Add an entry here when a new op is registered: ``test_every_op_has_an_example`` fails until
then, and every round-trip test picks the new entry up.
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, SourceLocation, TensorType
from lowerkit.opset import get_schema


def T(dtype: str, *shape: int) -> TensorType:
    return TensorType(dtype, shape)


_BIN = ([T("f32", 2, 3), T("f32", 3)], {})
_UNARY = ([T("f32", 2, 3)], {})
_POOL = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 1, 0, 1)}

# op -> (input types, attributes, output types for ops whose outputs are not inferred)
EXAMPLES: dict[str, tuple[list[TensorType], dict, list[TensorType] | None]] = {
    "add": (*_BIN, None),
    "sub": (*_BIN, None),
    "mul": (*_BIN, None),
    "div": (*_BIN, None),
    "neg": (*_UNARY, None),
    "relu": (*_UNARY, None),
    "relu6": (*_UNARY, None),
    "sigmoid": (*_UNARY, None),
    "tanh": (*_UNARY, None),
    "exp": (*_UNARY, None),
    "log": (*_UNARY, None),
    "sqrt": (*_UNARY, None),
    "clip": ([T("f32", 2, 3)], {"min": -0.5, "max": 6.0}, None),
    "leaky_relu": ([T("f32", 2, 3)], {"negative_slope": 0.2}, None),
    "matmul": ([T("f32", 2, 3), T("f32", 3, 4)], {}, None),
    "linear": ([T("f32", 2, 3), T("f32", 4, 3), T("f32", 4)], {}, None),
    "conv2d": (
        [T("f32", 1, 4, 8, 8), T("f32", 8, 2, 3, 3), T("f32", 8)],
        {"stride": (2, 1), "padding": (1, 0, 1, 2), "dilation": (1, 2), "groups": 2},
        None,
    ),
    "conv2d_input_grad": (
        [T("f32", 4, 3, 3, 3), T("f32", 1, 4, 6, 6)], {"input_size": (1, 3, 8, 8)}, None,
    ),
    "conv2d_weight_grad": (
        [T("f32", 1, 3, 8, 8), T("f32", 1, 4, 6, 6)], {"weight_size": (4, 3, 3, 3)}, None,
    ),
    "max_pool2d": ([T("f32", 1, 2, 8, 8)], {**_POOL, "ceil_mode": True}, None),
    "avg_pool2d": ([T("f32", 1, 2, 8, 8)], {**_POOL, "count_include_pad": False}, None),
    "global_avg_pool2d": ([T("f32", 1, 2, 4, 4)], {}, None),
    "batch_norm": ([T("f32", 1, 2, 4, 4)] + [T("f32", 2)] * 4, {"eps": 1e-3}, None),
    "flatten": ([T("f32", 2, 3, 4)], {"start_dim": 1, "end_dim": -1}, None),
    "reshape": ([T("f32", 2, 6)], {"shape": (3, -1)}, None),
    "transpose": ([T("f32", 2, 3, 4)], {"perm": (2, 0, 1)}, None),
    "concat": ([T("f32", 2, 3), T("f32", 2, 5)], {"dim": 1}, None),
    "softmax": ([T("f32", 2, 5)], {"dim": -1}, None),
    "log_softmax": ([T("f32", 2, 5)], {"dim": 0}, None),
    "constant": (
        [], {"value": np.array([[1.5, -0.0, np.nan], [np.inf, -np.inf, 1e-30]], np.float32)}, None,
    ),
    "param": ([], {"name": "layer1.0.conv1.weight"}, [T("f32", 4, 3, 3, 3)]),
    "call": (
        [T("f32", 2, 3), T("f32", 2)], {"method": "accum", "module": "sub"},
        [T("f32", 2, 3), T("i64", 2)],
    ),
}
# The ops of mobile CNNs and transformers (issue 13).
EXAMPLES.update({
    "hardsigmoid": ([T("f32", 2, 3)], {"alpha": 0.2, "beta": 0.5}, None),
    "hardswish": (*_UNARY, None),
    "silu": (*_UNARY, None),
    "gelu": ([T("f32", 2, 3)], {"approximate": "tanh"}, None),
    "erf": (*_UNARY, None),
    "pow": (*_BIN, None),
    "where": ([T("bool", 2, 1), T("f32", 2, 3), T("f32", 3)], {}, None),
    "cast": ([T("f32", 2, 3)], {"dtype": "i64"}, None),
    "reduce_mean": ([T("f32", 2, 3, 4)], {"dims": (1, -1), "keepdim": True}, None),
    "reduce_sum": ([T("f32", 2, 3, 4)], {"dims": (0,)}, None),
    "reduce_max": ([T("f32", 2, 3, 4)], {}, None),
    "reduce_min": ([T("f32", 2, 3, 4)], {"dims": (2,)}, None),
    "layer_norm": ([T("f32", 2, 3, 4), T("f32", 4), T("f32", 4)], {"eps": 1e-6}, None),
    "group_norm": ([T("f32", 2, 4, 3, 3), T("f32", 4), T("f32", 4)], {"num_groups": 2}, None),
    "slice": ([T("f32", 6, 5)], {"starts": (-1, 0), "ends": (-(2**63), 5), "axes": (0, 1), "steps": (-2, 2)}, None),
    "split": ([T("f32", 6, 5)], {"dim": 1, "sizes": (2, 3)}, None),
    "gather": ([T("f32", 6, 5)], {"dim": 1, "indices": np.array([[0, -1]], np.int64)}, None),
    "pad": ([T("f32", 1, 2, 3, 3)], {"pads": (0, 0, 1, 1, 0, 0, 1, 2), "mode": "reflect"}, None),
    "expand": ([T("f32", 3, 1)], {"shape": (2, 3, 4)}, None),
    "interpolate": (
        [T("f32", 1, 2, 3, 3)],
        {"size": (6, 5), "scales": (2.0, 5 / 3), "mode": "linear", "coordinate_transformation_mode": "half_pixel"},
        None,
    ),
    "scaled_dot_product_attention": (
        [T("f32", 2, 4, 8), T("f32", 2, 5, 8), T("f32", 2, 5, 3), T("bool", 4, 5)],
        {"scale": 0.125, "is_causal": False},
        None,
    ),
    "conv_transpose2d": (
        [T("f32", 1, 4, 5, 5), T("f32", 4, 3, 3, 3), T("f32", 6)],
        {"stride": (2, 2), "padding": (1, 1, 1, 1), "output_padding": (1, 0), "groups": 2},
        None,
    ),
})

# The backward and training ops of lowerkit.autograd (issue 15).
_PW = ([T("f32", 2, 3), T("f32", 2, 3)], {})
EXAMPLES.update({
    "sum_to_shape": ([T("f32", 2, 3, 4)], {"shape": (3, 1)}, None),
    "relu_grad": (*_PW, None),
    "clip_grad": ([T("f32", 2, 3), T("f32", 2, 3)], {"min": 0.0, "max": 6.0}, None),
    "leaky_relu_grad": ([T("f32", 2, 3), T("f32", 2, 3)], {"negative_slope": 0.2}, None),
    "hardsigmoid_grad": (*_PW, None),
    "hardswish_grad": (*_PW, None),
    "gelu_grad": ([T("f32", 2, 3), T("f32", 2, 3)], {"approximate": "tanh"}, None),
    "softmax_grad": ([T("f32", 2, 3), T("f32", 2, 3)], {"dim": 0}, None),
    "log_softmax_grad": (*_PW, None),
    "max_pool2d_grad": ([T("f32", 1, 2, 5, 5), T("f32", 1, 2, 2, 2)], {"kernel_size": (2, 2), "stride": (2, 2)}, None),
    "avg_pool2d_grad": (
        [T("f32", 1, 2, 3, 3)],
        {"input_size": (1, 2, 5, 5), "kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1)},
        None,
    ),
    "slice_grad": ([T("f32", 3, 5)], {"input_size": (6, 5), "starts": (-1,), "ends": (-(2**63),), "axes": (0,),
                                      "steps": (-2,)}, None),
    "pad_grad": ([T("f32", 1, 2, 5, 6)], {"input_size": (1, 2, 3, 3), "pads": (0, 0, 1, 1, 0, 0, 1, 2),
                                          "mode": "reflect"}, None),
    "gather_grad": ([T("f32", 6, 1, 2)], {"input_size": (6, 5), "dim": 1, "indices": np.array([[0, -1]], np.int64)},
                    None),
    "reduce_extreme_grad": ([T("f32", 2, 3, 4), T("f32", 2, 4), T("f32", 2, 4)], {"dims": (1,)}, None),
    "batch_norm_train": ([T("f32", 2, 3, 4, 4), T("f32", 3), T("f32", 3)], {"eps": 1e-3}, None),
    "batch_norm_train_grad": (
        [T("f32", 2, 3, 4, 4), T("f32", 3), T("f32", 3), T("f32", 3), T("f32", 2, 3, 4, 4)], {}, None,
    ),
    "layer_norm_grad": ([T("f32", 2, 3, 4), T("f32", 2, 3, 4), T("f32", 4)], {"eps": 1e-6}, None),
    "group_norm_grad": ([T("f32", 2, 4, 3, 3), T("f32", 2, 4, 3, 3)], {"num_groups": 2}, None),
    "one_hot": ([T("i64", 4)], {"num_classes": 10}, None),
    "interpolate_grad": (
        [T("f32", 1, 2, 6, 5)],
        {"input_size": (1, 2, 3, 3), "size": (6, 5), "scales": (2.0, 5 / 3), "mode": "linear",
         "coordinate_transformation_mode": "half_pixel"},
        None,
    ),
    "dropout": ([T("f32", 2, 3), T("i64")], {"p": 0.25, "salt": 3}, None),
})


def example_graph(op: str) -> Graph:
    """A free graph holding one example ``op`` node with metadata; its outputs are the node's."""
    in_types, attrs, out_types = EXAMPLES[op]
    schema = get_schema(op)
    attrs = schema.normalize_attrs(attrs)
    if out_types is None:
        out_types = schema.infer(in_types, attrs)
    g = Graph()
    xs = [g.add_input(f"in{i}", t) for i, t in enumerate(in_types)]
    node = g.add_node(
        op, xs, out_types, attrs, debug_handle=7, scope="layer1.0.conv1",
        source=SourceLocation("models/net.py", 42),
    )
    g.set_outputs(node.outputs)
    return g


def cnn_graph() -> tuple[Graph, dict[str, np.ndarray]]:
    """A small CNN ``forward`` (param, conv2d, relu, max_pool2d, flatten, linear) and its params."""
    rng = np.random.default_rng(0)
    params = {
        "conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "conv.bias": rng.standard_normal(4).astype(np.float32),
        "fc.weight": rng.standard_normal((10, 64)).astype(np.float32),
        "fc.bias": rng.standard_normal(10).astype(np.float32),
    }
    g = Graph()
    x = g.add_input("x", T("f32", 1, 3, 8, 8))
    handle = iter(range(100))

    def add(op, inputs, attrs, hint, scope, line, out=None):
        schema = get_schema(op)
        attrs = schema.normalize_attrs(attrs)
        types = out or schema.infer([v.type for v in inputs], attrs)
        node = g.add_node(
            op, inputs, types, attrs, output_hints=[hint], debug_handle=next(handle),
            scope=scope, source=SourceLocation("net.py", line),
        )
        return node.output

    w = add("param", [], {"name": "conv.weight"}, "conv_weight", "conv", 12, [T("f32", 4, 3, 3, 3)])
    b = add("param", [], {"name": "conv.bias"}, "conv_bias", "conv", 12, [T("f32", 4)])
    y = add("conv2d", [x, w, b], {"padding": (1, 1, 1, 1)}, "conv", "conv", 12)
    y = add("relu", [y], {}, "relu", "", 13)
    y = add("max_pool2d", [y], {"kernel_size": (2, 2), "stride": (2, 2)}, "max_pool2d", "", 13)
    y = add("flatten", [y], {"start_dim": 1}, "flatten", "", 14)
    fw = add("param", [], {"name": "fc.weight"}, "fc_weight", "fc", 15, [T("f32", 10, 64)])
    fb = add("param", [], {"name": "fc.bias"}, "fc_bias", "fc", 15, [T("f32", 10)])
    y = add("linear", [y, fw, fb], {}, "fc", "fc", 15)
    g.set_outputs([y])
    return g, params


def two_method_module():
    """A module whose ``forward`` calls ``accum`` (a tuple-returning method) and a submodule."""
    from lowerkit.ir import GraphMethod, Module

    inner = Graph()
    ix = inner.add_input("x", T("f32", 2, 3))
    n = inner.add_node("relu", [ix], [ix.type], debug_handle=0, scope="act")
    inner.set_outputs(n.outputs)
    sub = Module(methods={"forward": GraphMethod(inner)}, name="Activation")

    accum = Graph()
    x = accum.add_input("x", T("f32", 2, 3))
    h = accum.add_input("h", T("f32", 2, 3))
    big = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[..., 0] + 0.5  # 6 elements: printed
    c = accum.add_node("constant", [], [T("f32", 2, 3)], {"value": big}, debug_handle=1)
    s = accum.add_node("add", [x, h], [x.type], debug_handle=2, scope="cell", output_hints=["sum"])
    t = accum.add_node("mul", [s.output, c.output], [x.type], debug_handle=3, scope="cell")
    accum.set_outputs([t.output, s.output])

    fwd = Graph()
    fx = fwd.add_input("x", T("f32", 2, 3))
    table = np.linspace(-1, 1, 18, dtype=np.float32).reshape(3, 6)  # 18 elements: elided
    k = fwd.add_node("constant", [], [T("f32", 3, 6)], {"value": table}, debug_handle=4)
    p = fwd.add_node("param", [], [T("f32", 2, 3)], {"name": "h0"}, debug_handle=5)
    call = fwd.add_node(
        "call", [fx, p.output], [T("f32", 2, 3), T("f32", 2, 3)],
        {"method": "accum", "module": ""}, output_hints=["a", "b"], debug_handle=6,
    )
    r = fwd.add_node(
        "call", [call.outputs[0]], [T("f32", 2, 3)], {"method": "forward", "module": "act"},
        debug_handle=7, scope="act",
    )
    fwd.set_outputs([r.output])
    del k
    return Module(
        parameters={"h0": np.ones((2, 3), np.float32)},
        methods={"forward": GraphMethod(fwd), "accum": GraphMethod(accum, returns_tuple=True)},
        submodules={"act": sub},
        name="Cell",
    )
