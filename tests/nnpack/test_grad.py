"""Stride-1 gradient kernels against float64 direct gradients."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit_nnpack.conv import RunOptions
from lowerkit_nnpack.geometry import ConvGeometry, GeometryError
from lowerkit_nnpack.grad import Conv2dInputGrad, Conv2dWeightGrad
from tests.nnpack.oracles import TOLERANCE, naive_input_grad, naive_weight_grad, rel_error

CASES = [
    ("wt8x8", 3, (1, 1, 1, 1), 2, 3, 4, 11, 9),
    ("wt6x6", 3, (1, 0, 1, 2), 2, 3, 4, 10, 9),
    ("wt4x4", 3, (0, 1, 1, 1), 1, 3, 2, 7, 6),
    ("auto", 3, (0, 1, 2, 0), 1, 2, 5, 7, 8),
    ("ft8x8", 5, (2, 0, 4, 1), 2, 3, 4, 9, 10),
    ("ft16x16", 7, (3, 3, 3, 3), 1, 2, 3, 12, 11),
    ("implicit_gemm", 5, (2, 2, 2, 2), 2, 3, 4, 9, 9),
    ("direct", 1, (0, 0, 0, 0), 2, 3, 4, 5, 6),
]


@pytest.mark.parametrize("algorithm,k,padding,n,c,oc,h,w", CASES)
def test_input_and_weight_gradients(rng, algorithm, k, padding, n, c, oc, h, w):
    geom = ConvGeometry(c, oc, (h, w), (k, k), (1, 1), padding)
    weight = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    dy = rng.standard_normal((n, oc, *geom.out_hw)).astype(np.float32)
    grad = Conv2dInputGrad(geom, weight, algorithm=algorithm)
    dx = grad(dy)
    assert dx.shape == (n, c, h, w)
    tol = TOLERANCE.get(grad.conv.algorithm)
    assert rel_error(dx, naive_input_grad(weight, dy, (h, w), padding)) < tol
    # the weight may also arrive at call time
    assert rel_error(Conv2dInputGrad(geom, None, algorithm=algorithm)(dy, weight), dx) < tol
    dw = Conv2dWeightGrad(geom)(x, dy)
    assert dw.shape == weight.shape
    parallel = Conv2dWeightGrad(geom, options=RunOptions(2, min_parallel_flops=0))(x, dy)
    assert rel_error(parallel, dw) < 1e-6
    assert rel_error(dw, naive_weight_grad(x, dy, (k, k), padding)) < 1e-5


@pytest.mark.parametrize("cls", [Conv2dInputGrad, Conv2dWeightGrad])
def test_strided_gradients_are_declined(cls):
    geom = ConvGeometry(2, 2, (8, 8), (3, 3), (2, 2))
    args = (geom, None) if cls is Conv2dInputGrad else (geom,)
    with pytest.raises(GeometryError, match="stride 1x1 only .* got 2x2"):
        cls(*args)


def test_weight_grad_checks_grad_output_shape(rng):
    geom = ConvGeometry(2, 3, (6, 6), (3, 3))
    with pytest.raises(GeometryError, match=r"grad_output must have shape \[1, 3, 4, 4\], got \[1, 3, 5, 5\]"):
        Conv2dWeightGrad(geom)(np.zeros((1, 2, 6, 6), np.float32), np.zeros((1, 3, 5, 5), np.float32))
