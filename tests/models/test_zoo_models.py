"""Every zoo model, through both front ends, against its PyTorch twin.

For each model (small configuration): the zoo model's weights go into a twin written with
plain torch.nn (zoo_twins.py). The twin is imported with ``lowerkit.torch.load``
(torch.export) and with ``lowerkit.onnx.load`` of ``torch.onnx.export(twin, dynamo=False)``;
each import is lowered to ``reference``, ``glow_like`` and ``["nnpack", "glow_like",
"reference"]``, saved and loaded back (``dumps``/``loads``), run, and compared with the twin:
within 1e-4 of the largest output (1e-3 for the transformers). The zoo model traced with
``lowerkit.trace`` is compared with the twin too.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models

torch = pytest.importorskip("torch")
pytest.importorskip("lowerkit_reference")

from tests.models.zoo_twins import build_twin, load_weights  # noqa: E402

PLANS = ("reference", "glow_like", ("nnpack", "glow_like", "reference"))
BATCH = 2


def _kwargs(name: str) -> dict:
    entry = models.info(name)
    kwargs = dict(entry.small)
    if entry.size_kwarg:
        kwargs[entry.size_kwarg] = entry.small_size
    return kwargs


@pytest.fixture(scope="module")
def zoo_cases():
    return {}


def _case(zoo_cases, name):
    """(zoo model, twin, input, twin's output, tolerance) for ``name``, built once per module."""
    if name not in zoo_cases:
        model = models.get(name, small=True)
        twin = build_twin(name, _kwargs(name))
        load_weights(twin, model)
        x = models.example_input(name, batch=BATCH, small=True)
        with torch.no_grad():
            expected = twin(torch.from_numpy(x)).numpy()
        tol = 1e-3 if models.info(name).transformer else 1e-4
        zoo_cases[name] = (model, twin, x, expected, tol)
    return zoo_cases[name]


def _check(got, expected, tol, what):
    scale = float(np.abs(expected).max())
    err = float(np.abs(np.asarray(got) - expected).max())
    assert got.shape == expected.shape, what
    assert err <= tol * scale, f"{what}: max |diff| {err:.3e} > {tol} * {scale:.3e}"


def _lower_all(module, x, expected, tol, label):
    for plan in PLANS:
        backend = list(plan) if isinstance(plan, tuple) else plan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", lk.BackendUnavailableWarning)
            lowered = lk.to_backend(module, backend)
        loaded = lk.loads(lk.dumps(lowered))
        _check(loaded(x), expected, tol, f"{label} on {plan} after dumps/loads")


@pytest.mark.parametrize("name", models.names())
def test_zoo_model_traced_matches_twin(zoo_cases, name):
    model, _, x, expected, tol = _case(zoo_cases, name)
    module = lk.trace(model, x)
    _check(module(x), expected, tol, f"{name} traced")
    restored = lk.loads(lk.dumps(module))
    _check(restored(x), expected, tol, f"{name} traced, after dumps/loads")


@pytest.mark.parametrize("name", models.names())
def test_zoo_model_through_torch_export(zoo_cases, name):
    import lowerkit.torch

    _, twin, x, expected, tol = _case(zoo_cases, name)
    module = lowerkit.torch.load(twin, (torch.from_numpy(x),))
    _lower_all(module, x, expected, tol, f"{name} via torch.export")


@pytest.mark.parametrize("name", models.names())
def test_zoo_model_through_onnx(zoo_cases, name):
    pytest.importorskip("onnx")
    import lowerkit.onnx

    _, twin, x, expected, tol = _case(zoo_cases, name)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(twin, (torch.from_numpy(x),), buffer, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    module = lowerkit.onnx.load(buffer.getvalue())
    _lower_all(module, x, expected, tol, f"{name} via ONNX")
