"""Each algorithm against the float64 direct convolution: odd sizes, one-sided padding, strides."""

from __future__ import annotations

import numpy as np
import pytest

from tests.nnpack.oracles import TOLERANCE, naive_conv2d, rel_error
from lowerkit_nnpack.conv import Conv2d, RunOptions, conv2d
from lowerkit_nnpack.geometry import ConvGeometry, GeometryError

CASES = [
    # algorithm, kernel, stride, padding (t, l, b, r), N, C, OC, H, W
    ("wt8x8", 3, (1, 1), (1, 1, 1, 1), 2, 3, 5, 13, 11),
    ("wt8x8", 3, (1, 1), (0, 2, 0, 0), 1, 4, 7, 6, 9),  # padding on one side only
    ("wt8x8", 3, (1, 1), (0, 0, 0, 0), 1, 1, 1, 3, 3),  # single output pixel
    ("wt6x6", 3, (1, 1), (1, 1, 1, 1), 2, 3, 5, 13, 11),
    ("wt6x6", 3, (1, 1), (0, 2, 0, 0), 1, 4, 7, 6, 9),
    ("wt6x6", 3, (1, 1), (0, 0, 0, 0), 1, 1, 1, 3, 3),
    ("wt4x4", 3, (1, 1), (2, 0, 1, 2), 2, 3, 5, 9, 12),
    ("wt4x4", 3, (1, 1), (0, 0, 0, 0), 1, 2, 1, 3, 4),
    ("ft8x8", 5, (1, 1), (2, 0, 4, 1), 3, 3, 4, 13, 10),
    ("ft8x8", 8, (1, 1), (7, 0, 0, 0), 1, 2, 3, 9, 8),
    ("ft16x16", 7, (1, 1), (3, 3, 3, 3), 2, 3, 4, 20, 17),
    ("ft16x16", 16, (1, 1), (0, 15, 0, 0), 1, 2, 2, 17, 16),
    ("ft16x16", 3, (1, 1), (0, 0, 1, 0), 2, 3, 4, 31, 5),
    ("implicit_gemm", 3, (2, 2), (1, 1, 1, 1), 2, 3, 4, 13, 10),
    ("implicit_gemm", 5, (2, 1), (0, 4, 1, 2), 2, 3, 4, 13, 10),
    ("implicit_gemm", 2, (3, 3), (0, 0, 1, 1), 1, 2, 3, 7, 7),
    ("direct", 1, (1, 1), (0, 0, 0, 0), 2, 3, 4, 13, 10),
    ("direct", 1, (2, 3), (0, 0, 0, 0), 2, 3, 4, 13, 10),
]


@pytest.mark.parametrize("algorithm,k,stride,padding,n,c,oc,h,w", CASES)
@pytest.mark.parametrize("strategy", ["precompute", "compute"])
def test_algorithm_matches_direct_convolution(rng, algorithm, k, stride, padding, n, c, oc, h, w, strategy):
    x = rng.uniform(-0.1, 1.0, (n, c, h, w)).astype(np.float32)
    wt = rng.uniform(-0.1, 1.0, (oc, c, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    want = naive_conv2d(x, wt, b, stride, padding)
    got = conv2d(x, wt, b, stride, padding, algorithm=algorithm, transform_strategy=strategy)
    assert got.shape == want.shape and got.dtype == np.float32
    assert rel_error(got, want) < TOLERANCE[algorithm]


@pytest.mark.parametrize("options", [RunOptions(1), RunOptions(2, batch_threshold=2, min_parallel_flops=0), RunOptions(3, batch_threshold=64, min_parallel_flops=0)])
@pytest.mark.parametrize("algorithm", ["wt8x8", "wt6x6", "wt4x4", "ft8x8", "implicit_gemm"])
def test_batched_and_per_image_paths_agree(rng, options, algorithm):
    x = rng.standard_normal((5, 3, 10, 9)).astype(np.float32)
    wt = rng.standard_normal((7, 3, 3, 3)).astype(np.float32)
    geom = ConvGeometry(3, 7, (10, 9), (3, 3), (1, 1), (1, 0, 1, 2))
    got = Conv2d(geom, wt, algorithm=algorithm, options=options)(x)
    assert rel_error(got, naive_conv2d(x, wt, None, (1, 1), (1, 0, 1, 2))) < TOLERANCE[algorithm]


@pytest.mark.parametrize("algorithm", ["wt8x8", "ft16x16", "implicit_gemm"])
def test_fused_relu_clamps_after_bias(rng, algorithm):
    x = rng.standard_normal((2, 2, 8, 8)).astype(np.float32)
    wt = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    b = np.array([-5.0, 0.0, 5.0], np.float32)
    got = conv2d(x, wt, b, padding=(1, 1, 1, 1), algorithm=algorithm, relu=True)
    want = np.maximum(naive_conv2d(x, wt, b, padding=(1, 1, 1, 1)), 0)
    assert got.min() >= 0.0
    assert rel_error(got, want) < TOLERANCE[algorithm]


def test_runtime_weight_overrides_compiled_one(rng):
    geom = ConvGeometry(2, 3, (6, 6), (3, 3))
    w1, w2 = (rng.standard_normal((3, 2, 3, 3)).astype(np.float32) for _ in range(2))
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    conv = Conv2d(geom, None, algorithm="wt8x8")
    assert rel_error(conv(x, w2), naive_conv2d(x, w2)) < 1e-3
    with pytest.raises(GeometryError, match="compiled without a weight"):
        conv(x)
    assert rel_error(Conv2d(geom, w1)(x), naive_conv2d(x, w1)) < 1e-3


@pytest.mark.parametrize(
    "algorithm,kernel,stride,message",
    [
        ("wt8x8", (5, 5), (1, 1), "wt8x8 .* needs a 3x3 kernel, got 5x5"),
        ("wt8x8", (3, 3), (2, 2), "wt8x8 needs stride 1x1, got 2x2"),
        ("ft8x8", (9, 9), (1, 1), "ft8x8 needs a kernel of at most 8x8, got 9x9"),
        ("ft16x16", (3, 3), (1, 2), "ft16x16 needs stride 1x1, got 1x2"),
        ("direct", (3, 3), (1, 1), "direct needs a 1x1 kernel, got 3x3"),
        ("fast", (3, 3), (1, 1), "unknown algorithm 'fast'"),
    ],
)
def test_algorithm_that_cannot_serve_names_the_rule(algorithm, kernel, stride, message):
    geom = ConvGeometry(2, 2, (20, 20), kernel, stride)
    with pytest.raises(GeometryError, match=message):
        Conv2d(geom, np.zeros((2, 2, *kernel), np.float32), algorithm=algorithm)


def test_input_shape_is_checked(rng):
    conv = Conv2d(ConvGeometry(2, 3, (6, 6), (3, 3)), np.zeros((3, 2, 3, 3), np.float32))
    with pytest.raises(GeometryError, match=r"input must have shape \[N, 2, 6, 6\], got \[1, 3, 6, 6\]"):
        conv(np.zeros((1, 3, 6, 6), np.float32))


@pytest.mark.parametrize("algorithm,batch_threshold", [("wt8x8", 2), ("wt8x8", 64), ("implicit_gemm", 64), ("ft16x16", 2)])
def test_eight_threads_sharing_one_kernel_and_its_pool(rng, algorithm, batch_threshold):
    import threading

    geom = ConvGeometry(4, 6, (13, 12), (3, 3), (1, 1), (1, 1, 1, 1))
    conv = Conv2d(geom, rng.standard_normal((6, 4, 3, 3)).astype(np.float32), algorithm=algorithm,
                  options=RunOptions(2, batch_threshold, min_parallel_flops=0))
    inputs = [rng.standard_normal((3, 4, 13, 12)).astype(np.float32) for _ in range(8)]
    serial = [conv(x) for x in inputs]
    results: list = [None] * 8
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait(timeout=60)
        for _ in range(5):
            results[i] = conv(inputs[i])

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(got, want)
