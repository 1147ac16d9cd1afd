"""Trainer on scikit-learn's 8x8 handwritten digits, partitioned over nnpack, glow_like and
reference: the first five SGD steps match PyTorch's from the same weights on the same batches
(losses, parameters and batch-norm running statistics), and a few epochs reach >= 95% on
held-out digits."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn
from lowerkit.tracing import ops

from tests.autograd.autograd_helpers import rel_error

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("sklearn.datasets")
pytest.importorskip("lowerkit_reference")

BATCH = 50
PLAN = ["nnpack", "glow_like", "reference"]
SGD_ARGS = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}


class DigitsNet(nn.Module):
    """conv 1->8, batch norm, relu, pool, conv 8->16, relu, pool, linear 64->10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 2 * 2, 10)

    def forward(self, x):
        x = ops.max_pool2d(ops.relu(self.bn1(self.conv1(x))), 2)
        x = ops.max_pool2d(ops.relu(self.conv2(x)), 2)
        return self.fc(ops.flatten(x, 1))


class TorchDigitsNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        f = torch.nn.functional
        x = f.max_pool2d(f.relu(self.bn1(self.conv1(x))), 2)
        x = f.max_pool2d(f.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


@pytest.fixture(scope="module")
def digits():
    data = datasets.load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    y = data.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order], y[order]
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def _batches(x, y, epoch):
    order = np.random.default_rng(100 + epoch).permutation(len(y))
    for i in range(0, len(y) - BATCH + 1, BATCH):
        idx = order[i : i + BATCH]
        yield x[idx], y[idx]


@pytest.fixture(scope="module")
def setup(digits):
    (xtr, _), _ = digits
    with nn.init_seed(0):
        net = DigitsNet()
    traced = lk.trace(net, xtr[:BATCH])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = lk.autograd.Trainer(traced, loss="cross_entropy", optimizer=lk.autograd.SGD(**SGD_ARGS),
                                      backend=PLAN)
    return net, trainer


def test_first_steps_match_pytorch(digits, setup):
    (xtr, ytr), _ = digits
    net, trainer = setup
    twin = TorchDigitsNet()
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in net.state_dict().items()}, strict=False)
    twin.train()
    opt = torch.optim.SGD(twin.parameters(), **SGD_ARGS)
    assert trainer.steps == 0
    for x, y in list(_batches(xtr, ytr, 0))[:5]:
        ours = trainer.step(x, y)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        assert abs(ours - loss.item()) <= 1e-4 * abs(loss.item())
        state = twin.state_dict()
        for name, value in trainer.parameters.items():
            assert rel_error(value, state[name].numpy()) < 1e-4, name


def test_a_few_epochs_reach_95_percent(digits, setup):
    (xtr, ytr), (xte, yte) = digits
    _, trainer = setup
    for epoch in range(1, 6):
        for x, y in _batches(xtr, ytr, epoch):
            trainer.step(x, y)
    with nn.init_seed(0):
        evaluator = lk.trace(DigitsNet(), xte)  # same parameter names, batch of the whole test set
    trained = lk.Module(trainer.module.parameters, evaluator.methods, name="DigitsNet")
    accuracy = float((trained(xte).argmax(axis=1) == yte).mean())
    assert accuracy >= 0.95, accuracy
