"""Every op case of the conformance kit at opt_level 0 (one kernel per op, no passes) and
opt_level 1, against the reference backend; plus each registry op has a kernel."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import run_glow

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
    expected = expected if isinstance(expected, tuple) else (expected,)  # split has several outputs
    for level in (0, 1):
        outputs = run_glow(module, *inputs, opt_level=level)
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max(initial=0))))


def _single_op_module(op, x_shape, attrs, weight_shape=None, bias=False):
    from tests.glow_like.helpers import f32, module_of

    from lowerkit.ir import Graph
    from lowerkit.opset import get_schema

    g = Graph()
    x = g.add_input("x", f32(*x_shape))
    ins, params = [x], {}
    rng = np.random.default_rng(3)
    if weight_shape is not None:
        params["w"] = rng.standard_normal(weight_shape).astype(np.float32)
        ins.append(g.add_node("param", [], [f32(*weight_shape)], {"name": "w"}).output)
        if bias:
            params["b"] = rng.standard_normal(weight_shape[0]).astype(np.float32)
            ins.append(g.add_node("param", [], [f32(weight_shape[0])], {"name": "b"}).output)
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs)
    (out_type,) = schema.infer([v.type for v in ins], full)
    g.set_outputs([g.add_node(op, ins, [out_type], full).output])
    return module_of(g, params)


GEOMETRIES = [
    ("max_pool2d", (2, 3, 9, 8), {"kernel_size": [3, 2], "stride": [2, 3], "padding": [1, 0, 0, 1], "dilation": [2, 1], "ceil_mode": True}, None),
    ("max_pool2d", (1, 2, 7, 7), {"kernel_size": [2, 2], "stride": [1, 1], "padding": [1, 1, 0, 0]}, None),
    ("avg_pool2d", (2, 3, 9, 8), {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1], "ceil_mode": True}, None),
    ("conv2d", (2, 4, 9, 8), {"stride": [2, 1], "padding": [2, 0, 1, 3], "dilation": [1, 2], "groups": 2}, (6, 2, 3, 3)),
    ("conv2d", (3, 4, 40, 40), {"stride": [1, 1], "padding": [1, 1, 1, 1]}, (5, 4, 3, 3)),  # per-image GEMMs
    ("conv2d", (3, 4, 6, 6), {"stride": [2, 2], "padding": [0, 1, 1, 0]}, (5, 4, 3, 3)),  # batched GEMM
    ("conv2d", (2, 4, 5, 5), {}, (3, 4, 1, 1)),  # pointwise
    ("conv2d", (1, 4, 40, 40), {"stride": [1, 1], "padding": [1, 1, 1, 1]}, (5, 4, 3, 3)),  # row bands
    ("conv2d", (1, 4, 9, 9), {"stride": [2, 2], "padding": [1, 1, 1, 1]}, (5, 4, 3, 3)),  # channel bands
    ("conv2d", (1, 4, 6, 6), {}, (5, 4, 1, 1)),  # pointwise channel bands
]


@pytest.mark.parametrize("threads", [None, 2])
@pytest.mark.parametrize("op, shape, attrs, weight", GEOMETRIES)
def test_window_geometries_match_reference(op, shape, attrs, weight, threads, monkeypatch):
    from lowerkit_glow_like.kernels import conv, pool

    monkeypatch.setattr(conv, "PARALLEL_MIN_FLOPS", 0)  # exercise the parallel paths on small shapes
    monkeypatch.setattr(pool, "PARALLEL_MIN_ELEMENTS", 0)
    module = _single_op_module(op, shape, attrs, weight, bias=weight is not None)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    expected = module.run("forward", x)
    (got,) = run_glow(module, x, opt_level=0, threads=threads)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(expected).max())))
