"""grad of ResNet-18 and MobileNetV2 agrees with PyTorch's parameter gradients on the same
weights, on the reference backend and partitioned over ["nnpack", "glow_like", "reference"]
(where nnpack runs the stride-1 convolution gradients)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models

from tests.autograd.autograd_helpers import rel_error

torch = pytest.importorskip("torch")
pytest.importorskip("lowerkit_reference")

PLANS = ("reference", ("nnpack", "glow_like", "reference"))
CONFIGS = {  # name -> (builder kwargs, input size)
    "resnet18": ({"num_classes": 10}, 32),
    "mobilenet_v2": ({"num_classes": 10, "width_mult": 0.25, "depth_mult": 0.34}, 32),
}


def _twins():
    from tests.models import zoo_twins  # imports torch: only after the importorskip above

    return zoo_twins


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request):
    """(grad module, inputs, cotangent, torch parameter gradients) for one model."""
    name = request.param
    kwargs, size = CONFIGS[name]
    model = models.get(name, **kwargs)
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    traced = lk.trace(model, x)
    twins = _twins()
    twin = twins.build_twin(name, kwargs)
    twins.load_weights(twin, model)  # eval mode: batch norm uses the running statistics, as traced
    cot = np.random.default_rng(1).standard_normal((1, 10)).astype(np.float32)
    out = twin(torch.from_numpy(x))
    names = [n for n, _ in twin.named_parameters()]
    theirs = torch.autograd.grad(out, [p for _, p in twin.named_parameters()], torch.from_numpy(cot))
    expected = {n: g.numpy() for n, g in zip(names, theirs)}
    return lk.autograd.grad(traced, wrt=names), names, x, cot, expected


@pytest.mark.parametrize("plan", PLANS, ids=["reference", "nnpack+glow_like+reference"])
def test_parameter_gradients_match_pytorch(case, plan, monkeypatch):
    gm, names, x, cot, expected = case
    monkeypatch.setenv("LOWERKIT_NNPACK_REGION_MACS", "0")  # the small configurations' regions stay nnpack's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = lk.to_backend(gm, plan) if plan != "reference" else gm
    results = runner.run("forward_grad", x, cot)
    grads = dict(zip(names, results[1:]))
    worst = max(names, key=lambda n: rel_error(grads[n], expected[n]))
    assert rel_error(grads[worst], expected[worst]) < 1e-4, worst
    if plan != "reference":
        report = runner.partition_report()
        nnpack_ops = {n.op for n in report.nodes if n.backend == "nnpack" and n.method == "forward_grad"}
        assert {"conv2d_input_grad", "conv2d_weight_grad"} <= nnpack_ops


ZOO = [n for n in models.names() if n not in CONFIGS]


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_model_gradient_matches_pytorch(name):
    """The rest of the zoo (small configurations) on the reference backend: mobile blocks,
    squeeze-excite, channel shuffle, layer norm, attention (decomposed), transposed convs."""
    entry = models.info(name)
    kwargs = dict(entry.small)
    if entry.size_kwarg:
        kwargs[entry.size_kwarg] = entry.small_size
    model = models.get(name, **kwargs)
    size = entry.small_size
    x = np.random.default_rng(0).standard_normal((1, entry.input_chw[0], size, size)).astype(np.float32)
    twins = _twins()
    twin = twins.build_twin(name, kwargs)
    twins.load_weights(twin, model)
    out = twin(torch.from_numpy(x))
    cot = np.random.default_rng(1).standard_normal(tuple(out.shape)).astype(np.float32)
    names = [n for n, _ in twin.named_parameters()]
    theirs = torch.autograd.grad(out, [p for _, p in twin.named_parameters()], torch.from_numpy(cot))
    results = lk.autograd.grad(lk.trace(model, x), wrt=names).run("forward_grad", x, cot)
    errors = {n: rel_error(g, t.numpy()) for n, g, t in zip(names, results[1:], theirs)}
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-4, (worst, errors[worst])
