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
