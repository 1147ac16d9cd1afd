"""Every derivative entry agrees with torch.autograd over a sweep of shapes and attributes,
and with central finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.autograd import DERIVATIVES
from lowerkit.opset import all_schemas

from tests.autograd.autograd_cases import CASES, Case, torch
from tests.autograd.autograd_helpers import float_inputs, rel_error, run_grad, single_op_module

pytest.importorskip("lowerkit_reference")


def _cotangents(outputs: list[np.ndarray], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(o.shape).astype(o.dtype) for o in outputs]


def _forward(case: Case, arrays: list[np.ndarray]) -> list[np.ndarray]:
    out = single_op_module(case.op, arrays, case.attrs).run("forward", *arrays)
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_entry_matches_torch(case: Case):
    arrays = case.inputs
    module = single_op_module(case.op, arrays, case.attrs)
    which = float_inputs(arrays)
    outs = _forward(case, arrays)
    cots = _cotangents(outs, 0)
    ours_out, ours = run_grad(module, arrays, cots, [f"in{i}" for i in which])
    tensors = [torch.tensor(a, requires_grad=i in which) for i, a in enumerate(arrays)]
    theirs_out = case.torch_fn(*tensors)
    theirs_out = list(theirs_out) if isinstance(theirs_out, (tuple, list)) else [theirs_out]
    for o, t in zip(ours_out, theirs_out):
        assert rel_error(o, t.detach().numpy()) < 1e-5, case.id
    total = sum((t * torch.tensor(c)).sum() for t, c in zip(theirs_out, cots) if t.requires_grad)
    theirs = torch.autograd.grad(total, [tensors[i] for i in which], allow_unused=True)
    for i, g, t in zip(which, ours, theirs):
        expected = np.zeros_like(arrays[i]) if t is None else t.numpy()
        assert g.shape == arrays[i].shape and g.dtype == arrays[i].dtype
        assert rel_error(g, expected) < 1e-4, f"{case.id}: input {i}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_entry_matches_finite_differences(case: Case):
    arrays = [a.astype(np.float64) if a.dtype == np.float32 else a for a in case.inputs]
    attrs = dict(case.attrs)
    module = single_op_module(case.op, arrays, attrs)
    which = float_inputs(arrays)
    outs = _forward(case, arrays)
    cots = _cotangents(outs, 1)
    if case.op == "batch_norm_train":  # its statistics carry no gradient by definition
        cots = [cots[0]] + [np.zeros_like(c) for c in cots[1:]]
    _, grads = run_grad(module, arrays, cots, [f"in{i}" for i in which])
    rng = np.random.default_rng(2)
    h = 1e-6
    for i, g in zip(which, grads):
        direction = rng.standard_normal(arrays[i].shape)

        def loss(step, i=i, direction=direction):
            moved = list(arrays)
            moved[i] = arrays[i] + step * direction
            return sum(float((o * c).sum()) for o, c in zip(_forward(case, moved), cots))

        numeric = (loss(h) - loss(-h)) / (2 * h)
        analytic = float((g * direction).sum())
        assert abs(numeric - analytic) <= 1e-5 * max(1.0, abs(numeric)), f"{case.id}: input {i}"


def test_every_entry_has_cases():
    tested = {c.op for c in CASES}
    assert set(DERIVATIVES) - tested == {"dropout"}  # dropout: tests/autograd/test_training_ops.py


def test_ops_without_entries_are_the_documented_ones():
    """Forward ops without an entry: the gradient ops themselves (no second order) and a few listed."""
    missing = {s.name for s in all_schemas()} - set(DERIVATIVES) - {"param", "constant", "call"}
    from lowerkit.autograd.coverage import NOT_DIFFERENTIABLE

    assert missing == set(NOT_DIFFERENTIABLE)


def test_missing_entries_are_reported_at_once():
    """Second order: the backward graph of a backward graph needs entries for the backward ops."""
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    module = single_op_module("max_pool2d", [x], {"kernel_size": (2, 2), "stride": (2, 2)})
    first = lk.autograd.grad(module, wrt=["in0"])
    second = lk.Module(methods={"forward": first.methods["forward_grad"]}, name="twice")
    with pytest.raises(lk.UnsupportedOperatorError,
                       match=r"method 'forward': no derivative entry for op\(s\) \['max_pool2d_grad'\] "
                       r"\(lowerkit.autograd.DERIVATIVES\); 1 node\(s\) need one:\n  node max_pool2d_grad #\d+"):
        lk.autograd.grad(second, wrt=["in0"])
