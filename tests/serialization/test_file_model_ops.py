"""Modules using the ops of mobile CNNs and transformers survive save/load (str, float-list and
tensor attributes, several outputs), un-lowered and lowered."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.testing.cases import OP_CASES, case_module

pytest.importorskip("lowerkit_reference")

NEW_OPS = {
    "hardsigmoid", "hardswish", "silu", "gelu", "erf", "pow", "where", "reduce_mean", "reduce_sum", "reduce_max",
    "reduce_min", "layer_norm", "group_norm", "slice", "split", "gather", "pad", "expand", "interpolate",
    "scaled_dot_product_attention", "conv_transpose2d", "cast",
}
CASES = [c for c in OP_CASES if c.op in NEW_OPS]
_INSTALLED = {b.name for b in lk.backends(check=False) if b.error is None}


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_round_trip(case):
    module = case_module(case)
    inputs = case.inputs()
    want = _as_tuple(module(*inputs))
    lowered = [lk.to_backend(module, b) for b in ("reference", "glow_like") if b in _INSTALLED]
    for obj in [module, *lowered]:
        loaded = lk.loads(lk.dumps(obj))
        for got, expected in zip(_as_tuple(loaded(*inputs)), want):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
