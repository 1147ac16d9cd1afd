"""Every op case of the conformance kit at opt_level 0 (one kernel per op, no passes) and
opt_level 1, against the reference backend; plus each registry op has a kernel."""

from __future__ import annotations

import numpy as np
import pytest
from glow_helpers import run_glow

from lowerkit.opset import all_schemas
from lowerkit.testing import OP_CASES, case_module
from lowerkit_glow_like.kernels import KERNELS

CASES = [c for c in OP_CASES if c.op not in ("call",)]


def test_every_registry_op_has_a_kernel():
    missing = [s.name for s in all_schemas() if s.name not in KERNELS and s.name not in ("call", "param", "constant")]
    assert missing == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_case_matches_reference(case):
    module = case_module(case)
    inputs = case.inputs()
    expected = module.run("forward", *inputs)
    for level in (0, 1):
        (got,) = run_glow(module, *inputs, opt_level=level)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(expected).max())))
