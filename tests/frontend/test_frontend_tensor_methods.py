"""Traced tensors answer the torch.Tensor methods and numpy ufuncs that map to ops; the rest
get an InputError naming what to use instead."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk

X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)


def _softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize(
    "fn, oracle",
    [
        (lambda x: x.transpose(1, 2).permute(0, 2, 1).contiguous().detach(), lambda a: a),
        (lambda x: x.view(2, 12).reshape(6, 4).flatten(), lambda a: a.reshape(-1)),
        (lambda x: x.softmax(-1), lambda a: _softmax(a, -1)),
        (lambda x: x.relu().sigmoid().tanh(), lambda a: np.tanh(1 / (1 + np.exp(-np.maximum(a, 0))))),
        (lambda x: x.add(1.0).mul(2.0).sub(x).div(3.0), lambda a: ((a + 1) * 2 - a) / 3),
        (lambda x: x.clamp(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5)),
        (lambda x: np.tanh(x) + np.exp(x) * 2, lambda a: np.tanh(a) + np.exp(a) * 2),
        (lambda x: np.add(np.ones((2, 3, 4), np.float32), x), lambda a: a + 1),
        (lambda x: np.negative(x) + np.maximum(x, 0.0) + np.minimum(x, 0.0), lambda a: -a + a),
        (lambda x: np.matmul(x, np.ones((4, 2), np.float32)), lambda a: a @ np.ones((4, 2), np.float32)),
    ],
)
def test_mapped_methods_and_ufuncs_match_numpy(fn, oracle):
    m = lk.trace(fn, X)
    np.testing.assert_allclose(m(X), oracle(X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "method, oracle",
    [("sum", lambda a: a.sum(1)), ("mean", lambda a: a.mean(1)), ("amax", lambda a: a.max(1)),
     ("amin", lambda a: a.min(1))],
)
def test_reductions_map_to_ops_when_the_ops_exist(method, oracle):
    if not hasattr(lk.ops, method):
        with pytest.raises(lk.InputError, match=rf"\.{method}\(\) maps to lowerkit.ops.{method}"):
            lk.trace(lambda x: getattr(x, method)(1), X)
        return
    m = lk.trace(lambda x: getattr(x, method)(1), X)
    np.testing.assert_allclose(m(X), oracle(X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda x: x.item(), r"has no method \.item: its data is unknown while tracing"),
        (lambda x: x.argmax(), r"has no method \.argmax: .*use amax"),
        (lambda x: x.softmx(1), r"did you mean \.softmax\(\)\?"),
        (lambda x: x.cuda(), r"drop the device move"),
        (lambda x: np.sin(x), r"numpy's sin has no lowerkit op; traceable ufuncs are"),
        (lambda x: np.add(x, x, out=np.empty((2, 3, 4), np.float32)), r"with \['out'\] is not traceable"),
        (lambda x: np.add.reduce(x), r"numpy's add.reduce is not traceable"),
    ],
)
def test_the_rest_is_an_input_error_naming_the_alternative(fn, message):
    with pytest.raises(lk.InputError, match=message):
        lk.trace(fn, X)


def test_hasattr_still_works_on_traced_tensors():
    seen = {}

    def f(x):
        seen["item"] = hasattr(x, "item")
        seen["sum"] = hasattr(x, "sum")
        return x

    lk.trace(f, X)
    assert seen == {"item": False, "sum": True}


def test_tracing_a_torch_module_says_what_to_use():
    torch = pytest.importorskip("torch")
    with pytest.raises(lk.InputError, match="got the PyTorch module Linear: .*lowerkit.onnx.load"):
        lk.trace(torch.nn.Linear(4, 2), X)


def test_models_is_reachable_from_the_package():
    import subprocess
    import sys

    code = "import lowerkit as lk; print(callable(lk.models.small_cnn))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr
