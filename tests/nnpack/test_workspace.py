"""Steady-state calls reuse their workspaces: the only large allocation is the output itself."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

from lowerkit_nnpack.conv import Conv2d, RunOptions
from lowerkit_nnpack.geometry import ConvGeometry
from lowerkit_nnpack.grad import Conv2dInputGrad
from lowerkit_nnpack.workspace import Workspace


def _extra_bytes(call) -> int:
    """Peak traced allocation during ``call()`` minus what was allocated before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = call()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return peak - result.nbytes


@pytest.mark.parametrize("algorithm,kernel", [("wt8x8", 3), ("wt6x6", 3), ("wt4x4", 3), ("ft8x8", 3), ("ft16x16", 5), ("implicit_gemm", 3), ("direct", 1)])
@pytest.mark.parametrize("options", [RunOptions(1), RunOptions(2, batch_threshold=2, min_parallel_flops=0), RunOptions(2, batch_threshold=64, min_parallel_flops=0)])
def test_steady_state_call_allocates_only_its_output(rng, algorithm, kernel, options):
    pad = kernel // 2
    geom = ConvGeometry(8, 32, (32, 32), (kernel, kernel), (1, 1), (pad,) * 4)
    conv = Conv2d(geom, rng.standard_normal((32, 8, kernel, kernel)).astype(np.float32),
                  rng.standard_normal(32).astype(np.float32), algorithm=algorithm, options=options)
    x = rng.standard_normal((4, 8, 32, 32)).astype(np.float32)
    for _ in range(8):  # warm up every pool worker's workspaces
        conv(x)
    extra = _extra_bytes(lambda: conv(x))
    # numpy's ufunc buffers (32 KiB per worker thread) are the only other allocation
    out_bytes = 4 * 32 * 32 * 32 * 4
    assert extra < 0.25 * out_bytes, f"{algorithm}: {extra} extra bytes for a {out_bytes}-byte output"


def test_input_gradient_reuses_workspaces_too(rng):
    geom = ConvGeometry(8, 8, (32, 32), (3, 3), (1, 1), (1, 1, 1, 1))
    grad = Conv2dInputGrad(geom, rng.standard_normal((8, 8, 3, 3)).astype(np.float32), options=RunOptions(1))
    dy = rng.standard_normal((2, 8, 32, 32)).astype(np.float32)
    grad(dy)
    assert _extra_bytes(lambda: grad(dy)) < 0.25 * dy.nbytes


def test_workspace_buffers_are_per_thread_and_grow_to_the_largest_request():
    ws = Workspace()
    mine = ws.get("a", (4,))
    assert np.shares_memory(ws.get("a", (2, 2)), mine)  # same buffer, new shape
    bigger = ws.get("a", (5,))
    assert not np.shares_memory(bigger, mine)
    assert np.shares_memory(ws.get("a", (3,)), bigger)  # kept the larger one
    assert not np.shares_memory(ws.get("a", (4,), np.complex64), bigger)
    other = []
    t = threading.Thread(target=lambda: other.append(ws.get("a", (4,))))
    t.start()
    t.join()
    assert not np.shares_memory(other[0], bigger)
    assert ws.total_nbytes() == 5 * 4 + 4 * 8 + 4 * 4


def test_shared_workspace_keeps_padding_correct_across_kernels(rng):
    from lowerkit_nnpack.layers import MaxPool2d
    from tests.nnpack.oracles import naive_conv2d, rel_error

    ws = Workspace()
    geom = ConvGeometry(3, 4, (10, 10), (3, 3), (1, 1), (1, 1, 1, 1))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    conv = Conv2d(geom, w, algorithm="implicit_gemm", options=RunOptions(1), workspace=ws)
    pool = MaxPool2d((3, 3), (1, 1), (1, 1, 1, 1), ws)
    x = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    for _ in range(2):  # the pool's -inf border and the conv's zero border share memory
        y = conv(x)
        assert rel_error(y, naive_conv2d(x, w, None, (1, 1), (1, 1, 1, 1))) < 1e-5
        assert np.isfinite(pool(y)).all()
