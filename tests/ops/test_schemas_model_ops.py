"""Type inference of the ops of mobile CNNs and transformers: shapes, and precise errors."""

from __future__ import annotations

import numpy as np

from tests.ops.schema_helpers import T, fails, infer, shape_of


def test_reductions():
    assert shape_of("reduce_mean", T(2, 3, 4), dims=(1, -1)) == (2,)
    assert shape_of("reduce_sum", T(2, 3, 4), dims=(1,), keepdim=True) == (2, 1, 4)
    assert shape_of("reduce_max", T(2, 3)) == ()
    assert infer("reduce_sum", T(2, 3, dtype="i64"), dims=(0,)) == [T(3, dtype="i64")]
    fails("reduce_mean", "reduce_mean: dims [1, -1] repeat a dim", T(2, 3), dims=(1, -1))
    fails("reduce_min", "reduce_min: dims=3 is out of range for rank 2", T(2, 3), dims=(3,))
    fails("reduce_max", "reduce_max: cannot reduce an empty dim", T(0, 3), dims=(0,))
    fails("reduce_mean", "reduce_mean: x must be a float tensor", T(2, dtype="i64"))


def test_normalisations():
    assert shape_of("layer_norm", T(2, 5, 8), T(8), T(8)) == (2, 5, 8)
    assert shape_of("layer_norm", T(2, 3, 4), T(3, 4), axis=1) == (2, 3, 4)
    fails("layer_norm", "layer_norm: weight must have shape [8], got [5, 8]", T(2, 5, 8), T(5, 8))
    fails("group_norm", "group_norm: num_groups 4 must be >= 1 and divide the 6 channels", T(1, 6, 2, 2),
          num_groups=4)
    fails("group_norm", "group_norm: bias must have shape [6]", T(1, 6, 2), T(6), T(3), num_groups=3)


def test_selection():
    assert shape_of("slice", T(6, 5), starts=(-1, 1), ends=(-(2**63), 2**62), axes=(0, 1), steps=(-2, 2)) == (3, 2)
    assert shape_of("slice", T(6,), starts=(5,), ends=(1,), axes=(0,), steps=(1,)) == (0,)
    fails("slice", "slice: steps must be non-zero", T(4), starts=(0,), ends=(2,), axes=(0,), steps=(0,))
    fails("slice", "slice: starts, ends, axes and steps must have equal lengths", T(4), starts=(0, 1), ends=(2,),
          axes=(0,), steps=(1,))
    assert [t.shape for t in infer("split", T(2, 5), dim=1, sizes=(2, 3))] == [(2, 2), (2, 3)]
    fails("split", "split: sizes [2, 2] must be >= 0 and add up to dim 1 of f32[2, 5] (5)", T(2, 5), dim=1,
          sizes=(2, 2))
    assert shape_of("gather", T(3, 4, 5), dim=1, indices=np.array([[0, -1]])) == (3, 1, 2, 5)
    assert shape_of("gather", T(3, 4), dim=0, indices=np.array(2)) == (4,)
    fails("gather", "gather: indices must lie in [-4, 3] for dim 1", T(3, 4), dim=1, indices=np.array([4]))
    fails("gather", "gather: indices must be integers", T(3, 4), indices=np.array([0.5]))


def test_pad_and_expand():
    assert shape_of("pad", T(1, 2, 3, 3), pads=(0, 0, 1, 2, 0, 0, 3, 0)) == (1, 2, 7, 5)
    fails("pad", "pad: pads must have 2 * rank = 4 values", T(2, 3), pads=(1, 1))
    fails("pad", "pad: reflect padding of dim 1 must be smaller than its size 3", T(2, 3), pads=(0, 3, 0, 0),
          mode="reflect")
    fails("pad", "pad: mode must be one of ['constant', 'reflect', 'replicate'], got 'wrap'", T(2), pads=(1, 1),
          mode="wrap")
    fails("pad", "pad: pads must be >= 0", T(2), pads=(-1, 0))
    assert shape_of("expand", T(3, 1), shape=(2, 3, 4)) == (2, 3, 4)
    fails("expand", "expand: f32[3, 2] cannot broadcast to [3, 4]", T(3, 2), shape=(3, 4))


def test_interpolate():
    assert shape_of("interpolate", T(1, 2, 3, 4), size=(6, 8), scales=(2.0, 2.0)) == (1, 2, 6, 8)
    fails("interpolate", "interpolate: size and scales need one value per spatial dim (2)", T(1, 2, 3, 4),
          size=(6,), scales=(2.0,))
    fails("interpolate", "interpolate: mode must be one of ['nearest', 'linear'], got 'cubic'", T(1, 1, 2, 2),
          size=(4, 4), scales=(2.0, 2.0), mode="cubic")
    fails("interpolate", "interpolate: x must be [N, C, spatial...]", T(4, 4), size=(), scales=())


def test_attention():
    q, k, v = T(2, 3, 4, 8), T(2, 3, 5, 8), T(2, 3, 5, 6)
    assert shape_of("scaled_dot_product_attention", q, k, v, scale=0.5) == (2, 3, 4, 6)
    assert shape_of("scaled_dot_product_attention", q, k, v, T(4, 5, dtype="bool"), scale=0.5) == (2, 3, 4, 6)
    fails("scaled_dot_product_attention", "query has 8 features but key has 7", q, T(2, 3, 5, 7), v, scale=1.0)
    fails("scaled_dot_product_attention", "shapes do not broadcast", q, k, v, T(3, 5), scale=1.0)
    fails("scaled_dot_product_attention", "attn_mask must be bool or f32", q, k, v, T(4, 5, dtype="i64"), scale=1.0)


def test_conv_transpose2d():
    x, w = T(1, 4, 5, 5), T(4, 3, 3, 3)
    assert shape_of("conv_transpose2d", x, w) == (1, 3, 7, 7)
    assert shape_of("conv_transpose2d", x, T(4, 2, 3, 3), stride=(2, 2), padding=(1, 1, 1, 1), output_padding=(1, 0),
                    groups=2) == (1, 4, 10, 9)
    fails("conv_transpose2d", "output_padding [2, 0] must be smaller than stride or dilation", x, w,
          stride=(2, 2), output_padding=(2, 0))
    fails("conv_transpose2d", "weight is for 3 input channels but x has 4", x, T(3, 3, 3, 3))
    fails("conv_transpose2d", "bias must have shape [3]", x, w, T(4))
