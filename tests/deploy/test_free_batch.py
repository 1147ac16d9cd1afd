"""A free batch dim: imported or traced once, lowered once, run at any batch size on every plan."""

from __future__ import annotations

import io
import threading
import warnings

import numpy as np
import pytest

import lowerkit as lk
import lowerkit.onnx  # noqa: F401  (lk.onnx)
from lowerkit import models
from lowerkit.errors import InputError

PLANS = ["reference", "glow_like", ["nnpack", "glow_like", "reference"]]


def _installed(plan) -> None:
    names = [plan] if isinstance(plan, str) else plan
    have = {b.name for b in lk.backends(check=False) if not b.broken}
    if set(names) - have:
        pytest.skip(f"backends {sorted(set(names) - have)} not installed")


def _onnx_with_dynamic_batch() -> bytes:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8 * 4 * 4, 5)

        def forward(self, x):
            y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            return torch.softmax(self.fc(y.reshape(y.shape[0], -1)), -1)  # Shape -> Reshape

    torch.manual_seed(0)
    net = Net().eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (torch.randn(2, 3, 8, 8),), buf, input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False,
        )
    return buf.getvalue()


@pytest.fixture(scope="module")
def onnx_module():
    return lk.onnx.load(_onnx_with_dynamic_batch())


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p if isinstance(p, str) else "+".join(p))
def test_onnx_symbolic_batch_runs_any_batch_after_one_lowering(onnx_module, plan, tmp_path) -> None:
    _installed(plan)
    assert str(onnx_module.signature("forward")) == "(x: f32[batch, 3, 8, 8]) -> y: f32[batch, 5]"
    lowered = lk.to_backend(onnx_module, plan)
    lk.save(lowered, tmp_path / "m.lkm")
    loaded = lk.load(tmp_path / "m.lkm")
    assert loaded.signature("forward") == onnx_module.signature("forward")
    for batch in (1, 3, 8):
        x = np.random.default_rng(batch).random((batch, 3, 8, 8), dtype=np.float32)
        expected = onnx_module(x)  # un-lowered: the reference backend
        assert expected.shape == (batch, 5)
        np.testing.assert_allclose(lowered(x), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(loaded(x), expected, rtol=1e-5, atol=1e-6)


def test_onnx_runtime_agrees_at_every_batch(onnx_module) -> None:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(_onnx_with_dynamic_batch())
    for batch in (1, 3):
        x = np.random.default_rng(batch).random((batch, 3, 8, 8), dtype=np.float32)
        np.testing.assert_allclose(onnx_module(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p if isinstance(p, str) else "+".join(p))
def test_traced_dynamic_batch_runs_any_batch(plan) -> None:
    _installed(plan)
    module = lk.trace(models.small_cnn(), models.example_input("small_cnn", 2), dynamic_batch=True)
    assert str(module.signature("forward")) == "(x: f32[N, 3, 8, 8]) -> f32[N, 10]"
    loaded = lk.loads(lk.dumps(lk.to_backend(module, plan)))
    for batch in (1, 3, 8):
        x = models.example_input("small_cnn", batch, seed=batch)
        np.testing.assert_allclose(loaded(x), module(x), rtol=1e-5, atol=1e-6)


def test_trace_rewrites_a_fixed_batch_reshape_and_refuses_batch_mixing() -> None:
    def fn(x):
        return lk.ops.reshape(x, (2, -1))  # written for the example's batch of 2

    module = lk.trace(fn, np.zeros((2, 3, 4), np.float32), dynamic_batch=True)
    x = np.arange(5 * 12, dtype=np.float32).reshape(5, 3, 4)
    np.testing.assert_array_equal(module(x), x.reshape(5, -1))

    def mixes(x):
        return lk.ops.concat([x, x], dim=0)

    with pytest.raises(InputError, match="batch dim cannot stay free.*concat"):
        lk.trace(mixes, np.zeros((2, 3), np.float32), dynamic_batch=True)
    with pytest.raises(InputError, match="same leading"):
        lk.trace(lambda a, b: lk.ops.add(a, lk.ops.reshape(b, (2, 3))), np.zeros((2, 3), np.float32),
                 np.zeros((6,), np.float32), dynamic_batch=True)


def test_glow_like_keeps_a_bounded_lru_of_specialisations() -> None:
    _installed("glow_like")
    module = lk.trace(models.small_cnn(), models.example_input("small_cnn", 1), dynamic_batch=True)
    lowered = lk.to_backend(module, "glow_like", {"forward": {"max_specializations": 2}})
    for batch in (1, 2, 1, 3, 1, 2):
        x = models.example_input("small_cnn", batch, seed=batch)
        np.testing.assert_allclose(lowered(x), module(x), rtol=1e-5, atol=1e-6)
    table = lowered._handles["forward"].table
    assert table.limit == 2
    assert [s["N"] for s in table.sizes()] == [1, 2]  # least recently used first
    assert table.builds == 4  # 1, 2, 3 (evicts 2), 2 again (evicts 3)
    with pytest.raises(InputError, match="max_specializations must be a positive int"):
        lk.to_backend(module, "glow_like", {"forward": {"max_specializations": 0}})


def test_glow_like_specialises_safely_from_many_threads() -> None:
    _installed("glow_like")
    module = lk.trace(models.small_cnn(), models.example_input("small_cnn", 1), dynamic_batch=True)
    lowered = lk.to_backend(module, "glow_like", {"forward": {"threads": 1}})
    inputs = {b: models.example_input("small_cnn", b, seed=b) for b in (1, 2, 3, 4)}
    expected = {b: module(x) for b, x in inputs.items()}
    errors: list[BaseException] = []

    def work(batch: int) -> None:
        try:
            for _ in range(3):
                np.testing.assert_allclose(lowered(inputs[batch]), expected[batch], rtol=1e-5, atol=1e-6)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(b,)) for b in (1, 2, 3, 4, 1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert lowered._handles["forward"].table.builds == 4


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p if isinstance(p, str) else "+".join(p))
def test_torch_export_dynamic_batch_maps_to_the_symbolic_batch(plan) -> None:
    _installed(plan)
    torch = pytest.importorskip("torch")
    import lowerkit.torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 4 * 4, 5)

        def forward(self, x):
            return self.fc(torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2).flatten(1))

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 3, 8, 8)
    program = torch.export.export(net, (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    module = lowerkit.torch.load(program, (x,))
    assert str(module.signature("forward")) == "(x: f32[N, 3, 8, 8]) -> f32[N, 5]"
    assert lowerkit.torch.load(net, (x,)).signature("forward").inputs[0][1].shape == (2, 3, 8, 8)
    loaded = lk.loads(lk.dumps(lk.to_backend(module, plan)))
    for batch in (1, 3, 8):
        xb = torch.randn(batch, 3, 8, 8)
        with torch.no_grad():
            expected = net(xb).numpy()
        np.testing.assert_allclose(loaded(xb.numpy()), expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(loaded(xb.numpy()), module(xb.numpy()), rtol=1e-5, atol=1e-6)
