"""glow_like's ``interpolate``: the compiled 2D kernels (``lowerkit.backend.cpu.jit.resize``)
against the reference over modes, sizes and batches, split between workers or not, and
against glow_like's own numpy form, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import run_glow
from tests.glow_like.kernels.test_kernels import _single_op_module

from lowerkit.opset import get_schema

pytest.importorskip("numba")

CASES = [  # (shape, size, mode, coordinate mode, nearest mode)
    ((2, 3, 5, 7), (10, 14), "linear", "half_pixel", "floor"),  # UNet's 2x upsampling, odd sizes
    ((1, 2, 9, 6), (4, 11), "linear", "half_pixel", "floor"),  # down one axis, up the other
    ((2, 2, 5, 5), (8, 3), "linear", "align_corners", "floor"),
    ((1, 3, 4, 6), (7, 9), "linear", "asymmetric", "floor"),
    ((1, 2, 6, 5), (1, 1), "linear", "pytorch_half_pixel", "floor"),  # one output pixel
    ((2, 3, 5, 7), (10, 14), "nearest", "asymmetric", "floor"),
    ((1, 2, 7, 4), (5, 9), "nearest", "half_pixel", "round_prefer_floor"),
    ((1, 2, 7, 4), (12, 3), "nearest", "align_corners", "ceil"),
]


def _attrs(shape, size, mode, coordinates, nearest):
    scales = [s / d for s, d in zip(size, shape[2:])]
    return get_schema("interpolate").normalize_attrs({
        "size": list(size), "scales": scales, "mode": mode, "coordinate_transformation_mode": coordinates,
        "nearest_mode": nearest,
    })


@pytest.mark.parametrize("threads", [None, 2])
@pytest.mark.parametrize("shape, size, mode, coordinates, nearest", CASES)
def test_compiled_resize_matches_reference(shape, size, mode, coordinates, nearest, threads, monkeypatch):
    from lowerkit_glow_like.kernels import resize

    monkeypatch.setattr(resize, "PARALLEL_MIN_OUTPUTS", 0)  # split even these small resizes
    calls = []
    compiled = resize._compiled
    monkeypatch.setattr(resize, "_compiled", lambda *a: calls.append(a) or compiled(*a))
    module = _single_op_module("interpolate", shape, _attrs(shape, size, mode, coordinates, nearest))
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    expected = module.run("forward", x)
    (got,) = run_glow(module, x, opt_level=0, threads=threads)
    assert calls, "the compiled kernel did not run"
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, size, mode, coordinates, nearest", CASES)
def test_compiled_resize_equals_numpy_form(shape, size, mode, coordinates, nearest):
    """The compiled kernel and the numpy form (taken by an input that is not C-contiguous) do
    the same float32 operations in the same order: equal bits."""
    from lowerkit_glow_like.kernels import KERNELS

    prepare = KERNELS["interpolate"].prepare
    attrs = _attrs(shape, size, mode, coordinates, nearest)
    wide = np.random.default_rng(8).standard_normal(shape[:3] + (2 * shape[3],)).astype(np.float32)
    strided, contiguous = wide[..., ::2], np.ascontiguousarray(wide[..., ::2])
    outs = [np.full(shape[:2] + size, np.nan, np.float32) for _ in range(2)]
    prepare([strided], [outs[0]], attrs, None)()
    prepare([contiguous], [outs[1]], attrs, None)()
    np.testing.assert_array_equal(outs[0], outs[1])
