"""Shape sweep against the reference backend's kernels and PyTorch, within the documented tolerances.

Odd sizes, padding on one side only, stride 2, batch 1 and 16, channels 1..512; large
channel counts only on small images so the sweep stays fast.
"""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit_nnpack.algorithms import check_algorithm
from lowerkit_nnpack.conv import Conv2d
from lowerkit_nnpack.geometry import ConvGeometry, GeometryError
from lowerkit_nnpack.grad import Conv2dInputGrad, Conv2dWeightGrad
from lowerkit_reference.kernels import KERNELS
from tests.nnpack.oracles import TOLERANCE, rel_error

SWEEP = [
    # N, C, OC, H, W, kernel, stride, padding (t, l, b, r)
    (1, 1, 1, 5, 7, 3, 1, (1, 0, 0, 1)),
    (16, 3, 4, 9, 11, 3, 1, (0, 0, 1, 1)),
    (1, 512, 16, 4, 5, 3, 1, (1, 1, 1, 1)),
    (1, 16, 512, 6, 6, 3, 1, (1, 1, 1, 1)),
    (2, 5, 6, 13, 9, 5, 1, (2, 0, 0, 2)),
    (16, 4, 8, 15, 15, 3, 2, (1, 1, 1, 1)),
    (1, 64, 32, 7, 7, 1, 2, (0, 0, 0, 0)),
    (1, 3, 4, 16, 16, 11, 1, (5, 0, 5, 0)),
]
ALGORITHMS = ["wt8x8", "wt6x6", "wt4x4", "ft8x8", "ft16x16", "implicit_gemm", "direct"]


def _serving(geom: ConvGeometry) -> list[str]:
    result = []
    for name in ALGORITHMS:
        try:
            check_algorithm(name, geom)
        except GeometryError:
            continue
        result.append(name)
    return result + ["auto"]


def _attrs(stride, padding, **extra):
    return {"stride": (stride, stride), "padding": padding, "dilation": (1, 1), "groups": 1, **extra}


@pytest.mark.parametrize("n,c,oc,h,w,k,stride,padding", SWEEP)
def test_forward_sweep_against_reference_and_torch(rng, n, c, oc, h, w, k, stride, padding):
    torch = pytest.importorskip("torch")
    x = rng.uniform(-0.1, 1.0, (n, c, h, w)).astype(np.float32)
    weight = rng.uniform(-0.1, 1.0, (oc, c, k, k)).astype(np.float32)
    bias = rng.uniform(-0.1, 1.0, oc).astype(np.float32)
    reference = KERNELS["conv2d"]([x, weight, bias], _attrs(stride, padding))
    t, l, b, r = padding
    xt = torch.nn.functional.pad(torch.from_numpy(x), (l, r, t, b))
    expected = torch.nn.functional.conv2d(xt, torch.from_numpy(weight), torch.from_numpy(bias), stride=stride).numpy()
    geom = ConvGeometry(c, oc, (h, w), (k, k), (stride, stride), padding)
    for algorithm in _serving(geom):
        conv = Conv2d(geom, weight, bias, algorithm=algorithm, batch_hint=n)
        tol = TOLERANCE[conv.algorithm]
        got = conv(x)
        assert rel_error(got, reference) < tol, algorithm
        assert rel_error(got, expected) < tol, algorithm


GRAD_SWEEP = [
    # N, C, OC, H, W, kernel, padding
    (1, 1, 1, 5, 7, 3, (1, 1, 1, 1)),
    (16, 3, 4, 9, 11, 3, (1, 1, 1, 1)),
    (1, 256, 8, 5, 5, 3, (1, 1, 1, 1)),
    (2, 4, 5, 10, 9, 5, (2, 2, 2, 2)),
    (2, 3, 4, 9, 8, 3, (0, 2, 1, 0)),  # one-sided: checked against the reference kernels only
]


@pytest.mark.parametrize("n,c,oc,h,w,k,padding", GRAD_SWEEP)
def test_gradient_sweep_against_reference_and_torch(rng, n, c, oc, h, w, k, padding):
    torch = pytest.importorskip("torch")
    geom = ConvGeometry(c, oc, (h, w), (k, k), (1, 1), padding)
    x = rng.uniform(0.0, 1.0, (n, c, h, w)).astype(np.float32)
    weight = rng.uniform(0.0, 1.0, (oc, c, k, k)).astype(np.float32)
    dy = rng.uniform(0.0, 1.0, (n, oc, *geom.out_hw)).astype(np.float32)
    ref_dx = KERNELS["conv2d_input_grad"]([weight, dy], _attrs(1, padding, input_size=(n, c, h, w)))
    ref_dw = KERNELS["conv2d_weight_grad"]([x, dy], _attrs(1, padding, weight_size=(oc, c, k, k)))
    oracles_dx, oracles_dw = [ref_dx], [ref_dw]
    if len(set(padding)) == 1:
        p = padding[0]
        oracles_dx.append(torch.nn.grad.conv2d_input((n, c, h, w), torch.from_numpy(weight), torch.from_numpy(dy), padding=p).numpy())
        oracles_dw.append(torch.nn.grad.conv2d_weight(torch.from_numpy(x), (oc, c, k, k), torch.from_numpy(dy), padding=p).numpy())
    dw = Conv2dWeightGrad(geom)(x, dy)
    for want in oracles_dw:
        assert rel_error(dw, want) < TOLERANCE["implicit_gemm"]
    backward = Conv2dInputGrad(geom, None).backward
    for algorithm in _serving(backward):
        grad = Conv2dInputGrad(geom, weight, algorithm=algorithm)
        dx = grad(dy)
        for want in oracles_dx:
            assert rel_error(dx, want) < TOLERANCE[grad.conv.algorithm], algorithm
