"""Small single-op modules for backend conformance tests, built with the Graph API.

Each :class:`OpCase` is one op application with deterministic operands: graph inputs for
activations, parameters for weights (as they are in real models). The first case of each
op is ``basic`` (default attributes); the others vary strides, padding, groups, dims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir import Graph, GraphMethod, Module, TensorType
from ..opset import get_schema

__all__ = ["OP_CASES", "OpCase", "case_module", "cases_for"]


@dataclass(frozen=True)
class OpCase:
    """One op applied to operands ``(kind, shape, sampler)``; kind is ``input`` or ``param``."""

    name: str
    op: str
    operands: tuple[tuple[str, tuple[int, ...], str], ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    basic: bool = False

    def arrays(self, seed: int = 0) -> list[np.ndarray]:
        """The operand values (float32), deterministic for ``seed``."""
        rng = np.random.default_rng([seed, sum(map(ord, self.name))])
        return [_SAMPLERS[sampler](rng, shape) for _, shape, sampler in self.operands]

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """The values of the graph inputs only, in order."""
        return [a for (kind, _, _), a in zip(self.operands, self.arrays(seed)) if kind == "input"]


_SAMPLERS: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "normal": lambda rng, s: rng.standard_normal(s).astype(np.float32),
    "positive": lambda rng, s: rng.uniform(0.5, 2.0, s).astype(np.float32),
    "nonzero": lambda rng, s: (rng.uniform(0.5, 2.0, s) * rng.choice([-1.0, 1.0], s)).astype(np.float32),
    "wide": lambda rng, s: (rng.standard_normal(s) * 4).astype(np.float32),  # past the kinks at +-3
    "mask": lambda rng, s: np.concatenate(  # bool, never a fully masked last-dim row
        [np.ones(s[:-1] + (1,), bool), rng.random(s[:-1] + (s[-1] - 1,)) > 0.4], axis=-1),
}


def _case(name, op, operands, attrs=None, basic=False):
    return OpCase(name, op, tuple(operands), dict(attrs or {}), basic)


def _i(shape, sampler="normal"):
    return ("input", tuple(shape), sampler)


def _p(shape, sampler="normal"):
    return ("param", tuple(shape), sampler)


_X = (2, 3, 4)
_IMG = (1, 3, 6, 6)
OP_CASES: tuple[OpCase, ...] = (
    *(_case(op, op, [_i(_X), _i(_X)], basic=True) for op in ("add", "sub", "mul")),
    _case("div", "div", [_i(_X), _i(_X, "nonzero")], basic=True),
    _case("add-broadcast", "add", [_i(_X), _p((3, 4))]),
    *(_case(op, op, [_i(_X)], basic=True) for op in ("neg", "relu", "relu6", "sigmoid", "tanh", "exp")),
    *(_case(op, op, [_i(_X, "positive")], basic=True) for op in ("log", "sqrt")),
    _case("clip", "clip", [_i(_X)], {"min": -0.5, "max": 0.5}, basic=True),
    _case("leaky_relu", "leaky_relu", [_i(_X)], {"negative_slope": 0.1}, basic=True),
    _case("matmul", "matmul", [_i((2, 3, 4)), _p((4, 5))], basic=True),
    _case("linear", "linear", [_i((2, 4)), _p((3, 4)), _p((3,))], basic=True),
    _case("linear-nobias", "linear", [_i((2, 4)), _p((3, 4))]),
    _case("conv2d", "conv2d", [_i(_IMG), _p((4, 3, 3, 3)), _p((4,))], {"padding": [1, 1, 1, 1]}, basic=True),
    _case("conv2d-stride2-nobias", "conv2d", [_i((1, 3, 7, 7)), _p((4, 3, 3, 3))], {"stride": [2, 2], "padding": [0, 1, 1, 0]}),
    _case("conv2d-depthwise", "conv2d", [_i(_IMG), _p((3, 1, 3, 3)), _p((3,))], {"padding": [1, 1, 1, 1], "groups": 3}),
    _case("conv2d-dilation2", "conv2d", [_i(_IMG), _p((2, 3, 3, 3)), _p((2,))], {"dilation": [2, 2]}),
    _case("conv2d_input_grad", "conv2d_input_grad", [_p((4, 3, 3, 3)), _i((1, 4, 6, 6))], {"input_size": [1, 3, 6, 6], "padding": [1, 1, 1, 1]}, basic=True),
    _case("conv2d_weight_grad", "conv2d_weight_grad", [_i(_IMG), _i((1, 4, 6, 6))], {"weight_size": [4, 3, 3, 3], "padding": [1, 1, 1, 1]}, basic=True),
    _case("max_pool2d", "max_pool2d", [_i((1, 2, 6, 6))], {"kernel_size": [2, 2], "stride": [2, 2]}, basic=True),
    _case("max_pool2d-pad-ceil", "max_pool2d", [_i((1, 2, 7, 7))], {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1], "ceil_mode": True}),
    _case("avg_pool2d", "avg_pool2d", [_i((1, 2, 6, 6))], {"kernel_size": [2, 2], "stride": [2, 2]}, basic=True),
    _case("avg_pool2d-pad", "avg_pool2d", [_i((1, 2, 6, 6))], {"kernel_size": [3, 3], "stride": [1, 1], "padding": [1, 1, 1, 1], "count_include_pad": False}),
    _case("global_avg_pool2d", "global_avg_pool2d", [_i((1, 3, 4, 4))], basic=True),
    _case("batch_norm", "batch_norm", [_i((1, 3, 4, 4)), _p((3,)), _p((3,), "positive"), _p((3,)), _p((3,))], basic=True),
    _case("flatten", "flatten", [_i(_X)], basic=True),
    _case("reshape", "reshape", [_i(_X)], {"shape": [6, -1]}, basic=True),
    _case("transpose", "transpose", [_i(_X)], {"perm": [2, 0, 1]}, basic=True),
    _case("concat", "concat", [_i((2, 3)), _i((2, 5))], {"dim": 1}, basic=True),
    _case("softmax", "softmax", [_i(_X)], basic=True),
    _case("log_softmax", "log_softmax", [_i(_X)], {"dim": 1}, basic=True),
)


# The ops of mobile CNNs and transformers (issue 13).
_SEQ = (2, 5, 8)
OP_CASES += (
    _case("hardsigmoid", "hardsigmoid", [_i(_X, "wide")], basic=True),
    _case("hardsigmoid-onnx", "hardsigmoid", [_i(_X, "wide")], {"alpha": 0.2, "beta": 0.4}),
    _case("hardswish", "hardswish", [_i(_X, "wide")], basic=True),
    _case("silu", "silu", [_i(_X, "wide")], basic=True),
    _case("gelu", "gelu", [_i(_X, "wide")], basic=True),
    _case("gelu-tanh", "gelu", [_i(_X, "wide")], {"approximate": "tanh"}),
    _case("erf", "erf", [_i(_X)], basic=True),
    _case("pow", "pow", [_i(_X, "positive"), _p((4,))], basic=True),
    _case("where", "where", [_p((3, 1), "mask"), _i(_X), _i((4,))], basic=True),
    _case("reduce_mean", "reduce_mean", [_i(_IMG)], {"dims": [2, 3], "keepdim": True}, basic=True),
    _case("reduce_mean-all", "reduce_mean", [_i(_X)]),
    _case("reduce_sum", "reduce_sum", [_i(_X)], {"dims": [-1]}, basic=True),
    _case("reduce_max", "reduce_max", [_i(_X)], {"dims": [0, 2], "keepdim": True}, basic=True),
    _case("reduce_min", "reduce_min", [_i(_X)], {"dims": [1]}, basic=True),
    _case("layer_norm", "layer_norm", [_i(_SEQ), _p((8,)), _p((8,))], basic=True),
    _case("layer_norm-2d-noaffine", "layer_norm", [_i(_IMG)], {"axis": 1, "eps": 1e-6}),
    _case("group_norm", "group_norm", [_i((2, 6, 3, 3)), _p((6,)), _p((6,))], {"num_groups": 3}, basic=True),
    _case("slice", "slice", [_i(_IMG)], {"starts": [1, -1], "ends": [5, 0], "axes": [2, 3], "steps": [2, -2]},
          basic=True),
    _case("split", "split", [_i(_IMG)], {"dim": 1, "sizes": [1, 2]}, basic=True),
    _case("gather", "gather", [_i(_SEQ)], {"dim": 1, "indices": np.array(0, np.int64)}, basic=True),
    _case("gather-2d", "gather", [_i(_SEQ)], {"dim": -1, "indices": np.array([[7, 0], [-1, 3]], np.int64)}),
    _case("pad", "pad", [_i(_IMG)], {"pads": [0, 0, 1, 2, 0, 0, 2, 0], "value": 0.5}, basic=True),
    _case("pad-reflect", "pad", [_i(_IMG)], {"pads": [0, 0, 2, 1, 0, 0, 1, 2], "mode": "reflect"}),
    _case("pad-replicate", "pad", [_i(_IMG)], {"pads": [0, 0, 1, 0, 0, 0, 0, 3], "mode": "replicate"}),
    _case("expand", "expand", [_i((3, 1))], {"shape": [2, 3, 4]}, basic=True),
    _case("interpolate", "interpolate", [_i(_IMG)], {"size": [12, 12], "scales": [2.0, 2.0]}, basic=True),
    _case("interpolate-bilinear", "interpolate", [_i(_IMG)],
          {"size": [9, 4], "scales": [1.5, 4 / 6], "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    _case("interpolate-align-corners", "interpolate", [_i(_IMG)],
          {"size": [11, 7], "scales": [11 / 6, 7 / 6], "mode": "linear",
           "coordinate_transformation_mode": "align_corners"}),
    _case("scaled_dot_product_attention", "scaled_dot_product_attention", [_i((2, 2, 5, 8))] * 3,
          {"scale": 8 ** -0.5}, basic=True),
    _case("sdpa-bool-mask", "scaled_dot_product_attention",
          [_i((2, 4, 8)), _i((2, 6, 8)), _i((2, 6, 3)), _p((4, 6), "mask")], {"scale": 0.3}),
    _case("sdpa-float-mask-causal", "scaled_dot_product_attention",
          [_i((2, 5, 8)), _i((2, 5, 8)), _i((2, 5, 8)), _p((5, 5))], {"scale": 0.3, "is_causal": True}),
    _case("conv_transpose2d", "conv_transpose2d", [_i((1, 4, 5, 5)), _p((4, 3, 3, 3)), _p((3,))], basic=True),
    _case("conv_transpose2d-stride2-groups", "conv_transpose2d", [_i((1, 4, 4, 5)), _p((4, 2, 3, 3))],
          {"stride": [2, 2], "padding": [1, 0, 1, 1], "output_padding": [1, 0], "groups": 2}),
    _case("cast", "cast", [_i(_X)], {"dtype": "f32"}, basic=True),  # float32-only backends claim this one
    _case("cast-f16", "cast", [_i(_X)], {"dtype": "f16"}),
    _case("matmul-batched", "matmul", [_i((2, 1, 4, 5)), _i((3, 5, 2))]),
    _case("softmax-dim1", "softmax", [_i(_IMG)], {"dim": 1}),
)

# The float backward and training ops of lowerkit.autograd (issue 15); the forward op's
# operand first, the incoming gradient last.
OP_CASES += (
    _case("sum_to_shape", "sum_to_shape", [_i(_X)], {"shape": [3, 1]}, basic=True),
    _case("relu_grad", "relu_grad", [_i(_X), _i(_X)], basic=True),
    _case("clip_grad", "clip_grad", [_i(_X, "wide"), _i(_X)], {"min": 0.0, "max": 6.0}, basic=True),
    _case("leaky_relu_grad", "leaky_relu_grad", [_i(_X), _i(_X)], {"negative_slope": 0.1}, basic=True),
    _case("hardsigmoid_grad", "hardsigmoid_grad", [_i(_X, "wide"), _i(_X)], basic=True),
    _case("hardswish_grad", "hardswish_grad", [_i(_X, "wide"), _i(_X)], basic=True),
    _case("gelu_grad", "gelu_grad", [_i(_X, "wide"), _i(_X)], basic=True),
    _case("gelu_grad-tanh", "gelu_grad", [_i(_X, "wide"), _i(_X)], {"approximate": "tanh"}),
    _case("softmax_grad", "softmax_grad", [_i(_X, "positive"), _i(_X)], {"dim": 1}, basic=True),
    _case("log_softmax_grad", "log_softmax_grad", [_i(_X), _i(_X)], basic=True),
    _case("max_pool2d_grad", "max_pool2d_grad", [_i(_IMG), _i((1, 3, 3, 3))],
          {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1]}, basic=True),
    _case("avg_pool2d_grad", "avg_pool2d_grad", [_i((1, 3, 3, 3))],
          {"input_size": [1, 3, 6, 6], "kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1],
           "count_include_pad": False}, basic=True),
    _case("slice_grad", "slice_grad", [_i((1, 3, 2, 3))],
          {"input_size": list(_IMG), "starts": [1, -1], "ends": [5, 0], "axes": [2, 3], "steps": [2, -2]}, basic=True),
    _case("pad_grad", "pad_grad", [_i((1, 3, 9, 9))],
          {"input_size": list(_IMG), "pads": [0, 0, 2, 1, 0, 0, 1, 2], "mode": "reflect"}, basic=True),
    _case("gather_grad", "gather_grad", [_i((2, 2, 2, 8))],
          {"input_size": [2, 5, 8], "dim": 1, "indices": np.array([[4, 0], [-1, 4]], np.int64)}, basic=True),
    _case("interpolate_grad", "interpolate_grad", [_i((1, 3, 9, 4))],
          {"input_size": list(_IMG), "size": [9, 4], "scales": [1.5, 4 / 6], "mode": "linear",
           "coordinate_transformation_mode": "half_pixel"}, basic=True),
    _case("interpolate_grad-nearest", "interpolate_grad", [_i((1, 3, 12, 12))],
          {"input_size": list(_IMG), "size": [12, 12], "scales": [2.0, 2.0]}),
    _case("reduce_extreme_grad", "reduce_extreme_grad", [_i(_X), _i((2, 4)), _i((2, 4))], {"dims": [1]},
          basic=True),
    _case("batch_norm_train", "batch_norm_train", [_i(_IMG), _p((3,)), _p((3,))], basic=True),
    _case("batch_norm_train_grad", "batch_norm_train_grad",
          [_i(_IMG), _p((3,)), _p((3,)), _p((3,), "positive"), _i(_IMG)], basic=True),
    _case("layer_norm_grad", "layer_norm_grad", [_i((2, 5, 8)), _i((2, 5, 8)), _p((8,))], basic=True),
    _case("group_norm_grad", "group_norm_grad", [_i((2, 6, 3, 3)), _i((2, 6, 3, 3))], {"num_groups": 3},
          basic=True),
)


def cases_for(ops: frozenset[str] | set[str]) -> list[OpCase]:
    """The cases whose op is in ``ops``."""
    return [c for c in OP_CASES if c.op in ops]


def case_module(case: OpCase, *, seed: int = 0, methods: tuple[str, ...] = ("forward",)) -> Module:
    """A module whose methods (each named in ``methods``) apply the case's op once."""
    schema = get_schema(case.op)
    attrs = schema.normalize_attrs(case.attrs)
    arrays = case.arrays(seed)
    params: dict[str, np.ndarray] = {}
    graphs = {}
    handle = 1
    for method in methods:
        g = Graph()
        operands = []
        for i, ((kind, _, _), array) in enumerate(zip(case.operands, arrays)):
            t = TensorType.of(array)
            if kind == "input":
                operands.append(g.add_input(f"x{i}", t))
            else:
                params[f"p{i}"] = array
                node = g.add_node("param", [], [t], {"name": f"p{i}"}, debug_handle=handle)
                operands.append(node.output)
                handle += 1
        out_types = schema.infer([v.type for v in operands], attrs)
        node = g.add_node(case.op, operands, out_types, attrs, debug_handle=handle, scope=case.name)
        handle += 1
        g.set_outputs(node.outputs)
        graphs[method] = GraphMethod(g)
    return Module(params, graphs, name=f"case_{case.name.replace('-', '_')}")
