"""Op schemas: attributes and defaults, shape/dtype inference and its error messages."""

from __future__ import annotations

import pytest

from lowerkit.opset import REQUIRED, all_schemas, get_schema
from tests.ops.schema_helpers import T, fails, infer, shape_of


# -- the registry as a whole ------------------------------------------------------------

EXPECTED_OPS = {
    "add", "sub", "mul", "div", "neg", "relu", "relu6", "sigmoid", "tanh", "exp", "log", "sqrt",
    "clip", "leaky_relu", "matmul", "linear", "conv2d", "conv2d_input_grad", "conv2d_weight_grad",
    "max_pool2d", "avg_pool2d", "global_avg_pool2d", "batch_norm", "flatten", "reshape",
    "transpose", "concat", "softmax", "log_softmax", "constant", "param", "call",
}
# The ops of mobile CNNs and transformers (issue 13).
EXPECTED_OPS |= {
    "hardsigmoid", "hardswish", "silu", "gelu", "erf", "pow", "where", "reduce_mean", "reduce_sum",
    "reduce_max", "reduce_min", "layer_norm", "group_norm", "slice", "split", "gather", "pad", "expand",
    "interpolate", "scaled_dot_product_attention", "conv_transpose2d", "cast",
}

# The backward and training ops of lowerkit.autograd (issue 15).
EXPECTED_OPS |= {
    "sum_to_shape", "relu_grad", "clip_grad", "leaky_relu_grad", "hardsigmoid_grad", "hardswish_grad",
    "gelu_grad", "softmax_grad", "log_softmax_grad", "max_pool2d_grad", "avg_pool2d_grad", "slice_grad",
    "pad_grad", "gather_grad", "reduce_extreme_grad", "batch_norm_train", "batch_norm_train_grad",
    "layer_norm_grad", "group_norm_grad", "one_hot", "dropout", "interpolate_grad",
}

def test_registry_holds_exactly_the_op_set():
    assert {s.name for s in all_schemas()} == EXPECTED_OPS


def test_every_schema_is_documented():
    for schema in all_schemas():
        assert schema.doc, schema.name


@pytest.mark.parametrize(
    "op, inputs, attrs",
    [
        ("conv2d", ("x", "weight", "bias"),
         {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}),
        ("conv2d_input_grad", ("weight", "grad_output"),
         {"input_size": REQUIRED, "stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}),
        ("conv2d_weight_grad", ("input", "grad_output"),
         {"weight_size": REQUIRED, "stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}),
        ("max_pool2d", ("x",),
         {"kernel_size": REQUIRED, "stride": REQUIRED, "padding": (0, 0, 0, 0), "dilation": (1, 1), "ceil_mode": False}),
        ("avg_pool2d", ("x",),
         {"kernel_size": REQUIRED, "stride": REQUIRED, "padding": (0, 0, 0, 0), "ceil_mode": False,
          "count_include_pad": True}),
        ("batch_norm", ("x", "running_mean", "running_var", "weight", "bias"), {"eps": 1e-5}),
        ("linear", ("x", "weight", "bias"), {}),
        ("clip", ("x",), {"min": float("-inf"), "max": float("inf")}),
        ("leaky_relu", ("x",), {"negative_slope": 0.01}),
        ("flatten", ("x",), {"start_dim": 1, "end_dim": -1}),
        ("reshape", ("x",), {"shape": REQUIRED}),
        ("transpose", ("x",), {"perm": REQUIRED}),
        ("concat", ("xs",), {"dim": 0}),
        ("softmax", ("x",), {"dim": -1}),
        ("log_softmax", ("x",), {"dim": -1}),
    ],
)
def test_inputs_and_attribute_defaults(op, inputs, attrs):
    schema = get_schema(op)
    assert schema.inputs == inputs
    assert {a.name: a.default for a in schema.attrs} == attrs


def test_only_trailing_operands_are_optional():
    optional = {s.name: s.num_optional for s in all_schemas() if s.num_optional}
    # ... and the affine weight and bias of the normalisations, and attention's mask.
    assert optional == {"conv2d": 1, "linear": 1, "conv_transpose2d": 1, "layer_norm": 2, "group_norm": 2,
                        "scaled_dot_product_attention": 1,
                        "layer_norm_grad": 1, "group_norm_grad": 1}  # backward ops: the optional weight


# -- element-wise -----------------------------------------------------------------------


def test_binary_broadcasts():
    assert shape_of("add", T(2, 1, 5), T(4, 1)) == (2, 4, 5)
    assert infer("mul", T(3, dtype="i64"), T(3, dtype="i64")) == [T(3, dtype="i64")]


def test_binary_errors():
    fails("add", "add: shapes [2, 3] and [4] do not broadcast", T(2, 3), T(4))
    fails("sub", "sub: b has dtype f64 but a has dtype f32", T(3), T(3, dtype="f64"))
    fails("div", "div: a must be a float tensor (f16, f32 or f64), got i32[3]", T(3, dtype="i32"), T(3, dtype="i32"))


@pytest.mark.parametrize("op", ["sigmoid", "tanh", "exp", "log", "sqrt", "clip", "leaky_relu"])
def test_float_activations_reject_ints(op):
    fails(op, f"{op}: x must be a float tensor", T(3, dtype="i64"))


@pytest.mark.parametrize("op", ["relu", "relu6", "neg", "sigmoid", "leaky_relu"])
def test_unary_keeps_type(op):
    assert infer(op, T(2, 3, dtype="f64")) == [T(2, 3, dtype="f64")]


# -- linear -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, out",
    [((3, 4), (4, 5), (3, 5)), ((4,), (4, 5), (5,)), ((2, 3, 4), (4,), (2, 3)), ((4,), (4,), ()),
     ((2, 1, 3, 4), (5, 4, 2), (2, 5, 3, 2))],
)
def test_matmul_shapes(a, b, out):
    assert shape_of("matmul", T(*a), T(*b)) == out


def test_matmul_errors():
    fails("matmul", "matmul: a has 4 columns (shape [3, 4]) but b has 5 rows (shape [5, 2])", T(3, 4), T(5, 2))
    fails("matmul", "matmul: batch dims [2] and [3] do not broadcast", T(2, 3, 4), T(3, 4, 5))
    fails("matmul", "matmul: operands must have rank >= 1", T(), T(3))


def test_linear():
    assert shape_of("linear", T(2, 7, 6), T(5, 6), T(5)) == (2, 7, 5)
    assert shape_of("linear", T(6), T(5, 6)) == (5,)
    fails("linear", "linear: x has 4 features in its last dim but weight expects 6", T(2, 4), T(5, 6))
    fails("linear", "linear: bias must have shape [5], got [6]", T(2, 6), T(5, 6), T(6))
    fails("linear", "linear: weight must be [out_features, in_features], got f32[6]", T(2, 6), T(6))


# -- convolution ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, w, attrs, out",
    [
        ((1, 3, 224, 224), (64, 3, 7, 7), {"stride": (2, 2), "padding": (3, 3, 3, 3)}, (1, 64, 112, 112)),
        ((2, 8, 9, 9), (8, 1, 3, 3), {"groups": 8, "padding": (1, 1, 1, 1)}, (2, 8, 9, 9)),
        ((1, 4, 10, 11), (6, 2, 3, 3), {"groups": 2, "dilation": (2, 2), "stride": (2, 1)}, (1, 6, 3, 7)),
        # asymmetric: H = 8 + 0 + 1 = 9 padded rows, W = 7 + 2 + 0
        ((1, 1, 8, 7), (1, 1, 2, 2), {"stride": (2, 2), "padding": (0, 2, 1, 0)}, (1, 1, 4, 4)),
    ],
)
def test_conv2d_shapes(x, w, attrs, out):
    assert shape_of("conv2d", T(*x), T(*w), T(w[0]), **attrs) == out


def test_conv2d_errors():
    fails("conv2d", "conv2d: weight has 4 input channels per group but input has 3 channels / groups 1",
          T(1, 3, 8, 8), T(8, 4, 3, 3))
    fails("conv2d", "conv2d: input has 6 channels, not divisible by groups 4", T(1, 6, 8, 8), T(8, 1, 3, 3), groups=4)
    fails("conv2d", "conv2d: weight has 6 output channels, not divisible by groups 4",
          T(1, 8, 8, 8), T(6, 2, 3, 3), groups=4)
    fails("conv2d", "conv2d: kernel 5x5 with dilation [1, 1] does not fit input 3x3 with padding [0, 0, 0, 0]",
          T(1, 1, 3, 3), T(1, 1, 5, 5))
    fails("conv2d", "conv2d: padding must have 4 values, got [1, 1]", T(1, 1, 3, 3), T(1, 1, 3, 3), padding=(1, 1))
    fails("conv2d", "conv2d: stride values must be >= 1, got [0, 1]", T(1, 1, 3, 3), T(1, 1, 3, 3), stride=(0, 1))
    fails("conv2d", "conv2d: bias must have shape [8], got [4]", T(1, 3, 8, 8), T(8, 3, 3, 3), T(4))
    fails("conv2d", "conv2d: x must have rank 4, got f32[3, 8, 8]", T(3, 8, 8), T(8, 3, 3, 3))
    fails("conv2d", "conv2d: weight has dtype f64 but x has dtype f32", T(1, 3, 8, 8), T(8, 3, 3, 3, dtype="f64"))


def test_conv2d_input_grad():
    # stride 2 leaves the last input row/column unread: input_size still decides the shape
    attrs = {"stride": (2, 2), "padding": (1, 1, 0, 0)}
    assert shape_of("conv2d_input_grad", T(4, 4, 3, 3), T(2, 4, 5, 4), input_size=(2, 4, 10, 9), **attrs) == (2, 4, 10, 9)
    fails("conv2d_input_grad", "conv2d_input_grad: grad_output has shape [2, 4, 6, 4] but the convolution of "
          "input_size [2, 4, 10, 9] gives [2, 4, 5, 4]",
          T(4, 4, 3, 3), T(2, 4, 6, 4), input_size=(2, 4, 10, 9), **attrs)
    fails("conv2d_input_grad", "conv2d_input_grad: input_size must have 4 values, got [10, 9]",
          T(4, 4, 3, 3), T(2, 4, 5, 4), input_size=(10, 9))


def test_conv2d_weight_grad():
    assert shape_of("conv2d_weight_grad", T(2, 6, 8, 8), T(2, 6, 8, 8), weight_size=(6, 1, 3, 3),
                    groups=6, padding=(1, 1, 1, 1)) == (6, 1, 3, 3)
    fails("conv2d_weight_grad", "conv2d_weight_grad: weight has 2 input channels per group but input has 6 "
          "channels / groups 6", T(2, 6, 8, 8), T(2, 6, 8, 8), weight_size=(6, 2, 3, 3), groups=6)


# -- pooling ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, attrs, out",
    [
        ((1, 64, 112, 112), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1)}, (1, 64, 56, 56)),
        ((1, 1, 7, 7), {"kernel_size": (2, 2), "stride": (2, 2)}, (1, 1, 3, 3)),
        ((1, 1, 7, 7), {"kernel_size": (2, 2), "stride": (2, 2), "ceil_mode": True}, (1, 1, 4, 4)),
        # ceil would give 5, but the 5th window would start at 8 >= 7 + 1 (input + top padding)
        ((1, 1, 7, 7), {"kernel_size": (2, 2), "stride": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": True}, (1, 1, 4, 4)),
        ((1, 1, 8, 8), {"kernel_size": (3, 3), "stride": (3, 3), "ceil_mode": True}, (1, 1, 3, 3)),
        ((1, 1, 9, 9), {"kernel_size": (3, 3), "stride": (2, 2), "dilation": (2, 2)}, (1, 1, 3, 3)),
        ((1, 1, 8, 7), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (0, 1, 2, 1)}, (1, 1, 4, 4)),
    ],
)
def test_max_pool2d_shapes(x, attrs, out):
    assert shape_of("max_pool2d", T(*x), **attrs) == out


def test_avg_pool2d_shapes():
    assert shape_of("avg_pool2d", T(3, 2, 9, 8), kernel_size=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1),
                    ceil_mode=True, count_include_pad=False) == (3, 2, 5, 5)


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
def test_pool_errors(op):
    fails(op, f"{op}: kernel_size must have 2 values, got [2]", T(1, 1, 4, 4), kernel_size=(2,), stride=(2, 2))
    fails(op, f"{op}: padding [0, 0, 0, 2] must be smaller than the window extent [2, 2]",
          T(1, 1, 4, 4), kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 2))
    fails(op, f"{op}: window 5x5 does not fit input 4x4", T(1, 1, 4, 4), kernel_size=(5, 5), stride=(1, 1))
    fails(op, f"{op}: x must be a float tensor", T(1, 1, 4, 4, dtype="i32"), kernel_size=(2, 2), stride=(2, 2))


def test_pool_requires_kernel_and_stride():
    with pytest.raises(TypeError, match="max_pool2d needs attribute 'stride'"):
        get_schema("max_pool2d").normalize_attrs({"kernel_size": (2, 2)})


def test_global_avg_pool2d():
    assert shape_of("global_avg_pool2d", T(2, 512, 7, 7)) == (2, 512, 1, 1)
    fails("global_avg_pool2d", "global_avg_pool2d: x must have rank 4, got f32[2, 512]", T(2, 512))


# -- normalisation, softmax, shape ------------------------------------------------------


def test_batch_norm():
    c = T(16)
    assert shape_of("batch_norm", T(2, 16, 5, 5), c, c, c, c) == (2, 16, 5, 5)
    fails("batch_norm", "batch_norm: running_var must have shape [16] (x has 16 channels), got [8]",
          T(2, 16, 5, 5), c, T(8), c, c)
    fails("batch_norm", "batch_norm: x must have rank >= 2", T(16), c, c, c, c)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op):
    assert shape_of(op, T(2, 10), dim=0) == (2, 10)
    fails(op, f"{op}: dim=2 is out of range for rank 2", T(2, 10), dim=2)
    fails(op, f"{op}: x must be a float tensor", T(2, 10, dtype="i64"))


def test_flatten():
    assert shape_of("flatten", T(2, 3, 4, 5)) == (2, 60)
    assert shape_of("flatten", T(2, 3, 4, 5), start_dim=0, end_dim=1) == (6, 4, 5)
    assert shape_of("flatten", T(2, 3, 4, 5), start_dim=-2) == (2, 3, 20)
    fails("flatten", "flatten: start_dim 2 comes after end_dim 1", T(2, 3, 4), start_dim=2, end_dim=1)
    fails("flatten", "flatten: end_dim=4 is out of range for rank 3", T(2, 3, 4), end_dim=4)


def test_reshape():
    assert shape_of("reshape", T(2, 3, 10), shape=(-1, 5)) == (12, 5)
    assert shape_of("reshape", T(2, 3, 10), shape=(6, 10)) == (6, 10)
    fails("reshape", "reshape: shape may hold at most one -1, got [-1, -1]", T(4), shape=(-1, -1))
    fails("reshape", "reshape: cannot reshape [2, 3] (6 elements) to [4] (4 elements)", T(2, 3), shape=(4,))
    fails("reshape", "reshape: cannot reshape [2, 3] (6 elements) to [4, -1]", T(2, 3), shape=(4, -1))
    fails("reshape", "reshape: shape entries must be >= 0 or -1, got [-2, 3]", T(2, 3), shape=(-2, 3))


def test_transpose():
    assert shape_of("transpose", T(2, 3, 4), perm=(2, 0, 1)) == (4, 2, 3)
    fails("transpose", "transpose: perm must be a permutation of 0..2, got [0, 0, 1]", T(2, 3, 4), perm=(0, 0, 1))


def test_concat():
    assert shape_of("concat", T(2, 3), T(2, 5), dim=1) == (2, 8)
    assert shape_of("concat", T(2, 3), T(4, 3)) == (6, 3)
    fails("concat", "concat: input 1 has shape [3, 5] but input 0 has [2, 3]; they may differ only in dim 1",
          T(2, 3), T(3, 5), dim=-1)
    fails("concat", "concat: input 1 has dtype f64 but input 0 has f32", T(2, 3), T(2, 3, dtype="f64"))
    fails("concat", "concat: needs at least one input")
