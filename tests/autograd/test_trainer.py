"""Trainer and the training step: Adam and SGD against torch.optim, mse, dropout with seeds,
the step as a portable .lkm, and errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn
from lowerkit.tracing import ops

from tests.autograd.autograd_helpers import rel_error

torch = pytest.importorskip("torch")
reference = pytest.importorskip("lowerkit_reference")


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x, seed=None):
        h = ops.tanh(self.fc1(x))
        if seed is not None:
            h = ops.dropout(h, seed, 0.3)
        return self.fc2(h)


class TorchMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x, mask=None):
        h = torch.tanh(self.fc1(x))
        if mask is not None:
            h = h * mask / 0.7
        return self.fc2(h)


def _pair(seed_input: bool = False):
    with nn.init_seed(3):
        net = MLP()
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    traced = lk.trace(net, x, np.array(0, np.int64)) if seed_input else lk.trace(net, x)
    twin = TorchMLP()
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in net.state_dict().items()})
    return traced, twin


def _batches(n=4, regression=False):
    rng = np.random.default_rng(7)
    for _ in range(n):
        x = rng.standard_normal((5, 6)).astype(np.float32)
        y = rng.standard_normal((5, 3)).astype(np.float32) if regression else rng.integers(0, 3, 5)
        yield x, y


def _check_params(trainer, twin):
    state = twin.state_dict()
    for name, value in trainer.parameters.items():
        assert rel_error(value, state[name].numpy()) < 1e-5, name


def _step_both(trainer, twin, opt, loss_fn, x, y, *twin_args):
    """One trainer step and the same step in PyTorch: losses and parameters agree."""
    ours = trainer.step(x, y)
    opt.zero_grad()
    loss = loss_fn(twin(torch.from_numpy(x), *twin_args), torch.from_numpy(y))
    loss.backward()
    opt.step()
    assert abs(ours - loss.item()) <= 1e-5 * abs(loss.item())
    _check_params(trainer, twin)


@pytest.mark.parametrize("backend", ["reference", "glow_like"])
def test_adam_matches_torch(backend):
    traced, twin = _pair()
    trainer = lk.autograd.Trainer(traced, "cross_entropy", lk.autograd.Adam(lr=0.01, weight_decay=0.01),
                                  backend=backend)
    opt = torch.optim.Adam(twin.parameters(), lr=0.01, weight_decay=0.01)
    for x, y in _batches():
        _step_both(trainer, twin, opt, torch.nn.functional.cross_entropy, x, y)
    assert trainer.state["step"] == 4


def test_sgd_nesterov_with_mse_matches_torch():
    traced, twin = _pair()
    trainer = lk.autograd.Trainer(traced, "mse", lk.autograd.SGD(lr=0.1, momentum=0.5, nesterov=True))
    opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.5, nesterov=True)
    for x, y in _batches(regression=True):
        _step_both(trainer, twin, opt, torch.nn.functional.mse_loss, x, y)


def test_dropout_masks_come_from_the_step_seed():
    traced, twin = _pair(seed_input=True)
    trainer = lk.autograd.Trainer(traced, "cross_entropy", lk.autograd.SGD(lr=0.2), seed=11)
    assert trainer.layout.seed_input
    opt = torch.optim.SGD(twin.parameters(), lr=0.2)
    for step, (x, y) in enumerate(_batches()):
        keep = reference.kernels.training.dropout_mask((5, 8), 11 + step, 0, 0.3)
        _step_both(trainer, twin, opt, torch.nn.functional.cross_entropy, x, y, torch.from_numpy(keep))


def test_dropout_op_keeps_one_minus_p_and_rescales():
    x = np.ones((200, 50), np.float32)
    y = reference.KERNELS["dropout"]([x, np.array(5, np.int64)], {"p": 0.2, "salt": 0})
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.8)}
    assert abs((y > 0).mean() - 0.8) < 0.01
    again = reference.KERNELS["dropout"]([x, np.array(5, np.int64)], {"p": 0.2, "salt": 0})
    np.testing.assert_array_equal(y, again)


def test_step_is_a_portable_module(tmp_path):
    traced, _ = _pair()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = lk.autograd.Trainer(traced, "cross_entropy", lk.autograd.SGD(lr=0.1, momentum=0.9),
                                      backend=["nnpack", "glow_like", "reference"])
    x, y = next(_batches())
    inputs = trainer.step_inputs(x, y)
    path = tmp_path / "step.lkm"
    lk.save(trainer.lowered, path)
    elsewhere = lk.load(path).run("train_step", *inputs)
    here = trainer.lowered.run("train_step", *inputs)
    plain = trainer.step_module.run("train_step", *inputs)
    for a, b, c in zip(elsewhere, here, plain):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    sig = trainer.step_module.signature("train_step")
    names = [n for n, _ in sig.inputs]
    assert names[:2] == ["x", "target"] and names[-1] == "fc2_bias_momentum_buffer"
    assert len(sig.outputs) == 1 + 2 * len(trainer.parameters)


def test_trained_module_keeps_the_methods():
    traced, _ = _pair()
    trainer = lk.autograd.Trainer(traced, "cross_entropy", lk.autograd.SGD(lr=0.5))
    x, y = next(_batches())
    before = trainer.step(x, y)
    after = trainer.step(x, y)
    assert after < before
    trained = trainer.module
    assert trained.methods is not traced.methods and set(trained.methods) == set(traced.methods)
    assert not np.array_equal(trained.parameters["fc1.weight"], traced.parameters["fc1.weight"])
    assert trained(x).shape == (5, 3)


def test_batch_norm_trains_with_batch_statistics():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 3, 3, padding=1)
            self.bn = nn.BatchNorm2d(3)
            self.fc = nn.Linear(3 * 4 * 4, 2)

        def forward(self, x):
            return self.fc(ops.flatten(ops.relu(self.bn(self.conv(x))), 1))

    with nn.init_seed(1):
        net = Net()
    x = np.random.default_rng(2).standard_normal((4, 2, 4, 4)).astype(np.float32)
    trainer = lk.autograd.Trainer(lk.trace(net, x), "cross_entropy", lk.autograd.SGD(lr=0.1), backend="glow_like")
    assert trainer.layout.trained == ("conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias")
    trainer.step(x, np.array([0, 1, 1, 0]))
    tbn = torch.nn.BatchNorm2d(3)
    conv = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(np.array(net.conv.weight.data)),
                                      torch.from_numpy(np.array(net.conv.bias.data)), padding=1)
    tbn.running_mean.copy_(torch.from_numpy(np.array(net.bn.running_mean.data)))
    tbn.running_var.copy_(torch.from_numpy(np.array(net.bn.running_var.data)))
    tbn.train()(conv)
    np.testing.assert_allclose(trainer.parameters["bn.running_mean"], tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trainer.parameters["bn.running_var"], tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)


def test_errors():
    traced, _ = _pair()
    with pytest.raises(lk.InputError, match=r"unknown loss 'hinge'; expected one of \['cross_entropy', 'mse'\]"):
        lk.autograd.Trainer(traced, "hinge")
    with pytest.raises(lk.InputError, match=r"SGD lr must be > 0, got 0.0"):
        lk.autograd.SGD(lr=0)
    with pytest.raises(lk.InputError, match=r"Trainer expects a lowerkit.Module, got MLP"):
        lk.autograd.Trainer(MLP())
    trainer = lk.autograd.Trainer(traced)
    with pytest.raises(lk.InputError, match=r"input 'x': expected f32\[5, 6\], got f32\[4, 6\]"):
        trainer.step(np.zeros((4, 6), np.float32), np.zeros(4, np.int64))
