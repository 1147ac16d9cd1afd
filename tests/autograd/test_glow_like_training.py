"""glow_like runs training graphs: its conv2d_weight_grad batches images into chunked GEMMs."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk

from tests.autograd.autograd_helpers import rel_error, single_op_module

glow_grad = pytest.importorskip("lowerkit_glow_like.kernels.grad")
pytest.importorskip("lowerkit_reference")


@pytest.mark.parametrize("columns", [1, 200, 1 << 23])  # one image per chunk, two, all
def test_weight_grad_chunks_match_reference(columns, monkeypatch):
    monkeypatch.setattr(glow_grad, "WEIGHT_GRAD_COLUMNS", columns)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4, 7, 6)).astype(np.float32)
    dy = rng.standard_normal((5, 6, 4, 3)).astype(np.float32)
    attrs = {"weight_size": (6, 2, 3, 3), "stride": (2, 2), "padding": (1, 1, 2, 0), "groups": 2}
    module = single_op_module("conv2d_weight_grad", [x, dy], attrs)
    want = module.run("forward", x, dy)
    got = lk.to_backend(module, "glow_like").run("forward", x, dy)
    assert rel_error(got, want) < 1e-5


@pytest.mark.parametrize("groups, cg, ocg", [(4, 1, 1), (2, 2, 3), (3, 1, 2)])  # depthwise, grouped, multiplier
@pytest.mark.parametrize("op", ["conv2d_input_grad", "conv2d_weight_grad"])
def test_grouped_gradients_match_reference(op, groups, cg, ocg):
    rng = np.random.default_rng(1)
    xs, ws = (2, groups * cg, 9, 8), (groups * ocg, cg, 3, 2)
    geometry = {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": groups}
    oh = (9 + 3 - 1 * 2 - 1) // 2 + 1
    ow = (8 + 1 - 2 * 1 - 1) // 1 + 1
    dy = rng.standard_normal((2, groups * ocg, oh, ow)).astype(np.float32)
    if op == "conv2d_input_grad":
        arrays, attrs = [rng.standard_normal(ws).astype(np.float32), dy], {"input_size": xs, **geometry}
    else:
        arrays, attrs = [rng.standard_normal(xs).astype(np.float32), dy], {"weight_size": ws, **geometry}
    module = single_op_module(op, arrays, attrs)
    want = module.run("forward", *arrays)
    got = lk.to_backend(module, "glow_like").run("forward", *arrays)
    assert rel_error(got, want) < 1e-5
