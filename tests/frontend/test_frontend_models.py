"""lowerkit.models: architecture, names, determinism, and agreement with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from tests.frontend.frontend_helpers import nodes_of, ops_of


def test_small_cnn_structure():
    m = lk.trace(models.small_cnn(), models.example_input("small_cnn"))
    assert [op for op in ops_of(m) if op != "param"] == ["conv2d", "batch_norm", "relu", "max_pool2d", "flatten", "linear"]
    assert lk.graph_of(m).outputs[0].type.shape == (1, 10)
    assert m.name == "SmallCNN"


def test_resnet18_names_and_shapes():
    model = models.resnet18()
    names = [n for n, _ in model.named_parameters()]
    assert len(names) == 102  # 62 learnable + 40 running statistics, torchvision's names
    assert names[:6] == ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var", "layer1.0.conv1.weight"]
    assert "layer2.0.downsample.0.weight" in names and "layer2.0.downsample.1.running_var" in names
    assert "layer1.0.downsample.0.weight" not in names
    assert names[-2:] == ["fc.weight", "fc.bias"]
    m = lk.trace(model, models.example_input("resnet18"))
    g = lk.graph_of(m)
    assert g.inputs[0].type.shape == (1, 3, 224, 224) and g.outputs[0].type.shape == (1, 1000)
    assert len(nodes_of(m, "conv2d")) == 20
    adds = nodes_of(m, "add")
    assert [n.scope for n in adds][:2] == ["layer1.0", "layer1.1"]
    assert adds[0].source.file.endswith("resnet.py")
    assert models.resnet18(num_classes=7).fc.weight.shape == (7, 512)


def test_builders_are_deterministic_per_seed():
    a, b, c = models.small_cnn(seed=1), models.small_cnn(seed=1), models.small_cnn(seed=2)
    for (name, pa), (_, pb), (_, pc) in zip(a.named_parameters(), b.named_parameters(), c.named_parameters()):
        np.testing.assert_array_equal(pa.data, pb.data, err_msg=name)
        assert not np.array_equal(pa.data, pc.data), name
    assert (a.bn.running_var.data > 0).all() and np.abs(a.bn.running_mean.data).max() > 0


def test_example_input():
    x = models.example_input("resnet18", batch=2, seed=3)
    assert x.shape == (2, 3, 224, 224) and x.dtype == np.float32
    np.testing.assert_array_equal(x, models.example_input("resnet18", batch=2, seed=3))
    with pytest.raises(lk.InputError, match="unknown model 'vgg'"):
        models.example_input("vgg")


# -- against PyTorch ----------------------------------------------------------------------
def _torch_resnet18(torch, num_classes: int):
    tnn = torch.nn

    class TorchBasicBlock(tnn.Module):
        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = tnn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = tnn.BatchNorm2d(planes)
            self.relu = tnn.ReLU(inplace=True)
            self.conv2 = tnn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = tnn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(out + identity)

    def layer(inplanes, planes, stride):
        down = None
        if stride != 1 or inplanes != planes:
            down = tnn.Sequential(tnn.Conv2d(inplanes, planes, 1, stride, bias=False), tnn.BatchNorm2d(planes))
        return tnn.Sequential(TorchBasicBlock(inplanes, planes, stride, down), TorchBasicBlock(planes, planes))

    class TorchResNet18(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = tnn.BatchNorm2d(64)
            self.relu = tnn.ReLU(inplace=True)
            self.maxpool = tnn.MaxPool2d(3, 2, 1)
            self.layer1 = layer(64, 64, 1)
            self.layer2 = layer(64, 128, 2)
            self.layer3 = layer(128, 256, 2)
            self.layer4 = layer(256, 512, 2)
            self.avgpool = tnn.AdaptiveAvgPool2d((1, 1))
            self.fc = tnn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return TorchResNet18()


def _load_into_torch(torch, torch_model, state):
    expected = {k for k in torch_model.state_dict() if not k.endswith("num_batches_tracked")}
    assert set(state) == expected  # same parameter names as torchvision's layout
    torch_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    return torch_model.eval()


def test_resnet18_matches_pytorch(reference):
    torch = pytest.importorskip("torch")
    model = models.resnet18(num_classes=100, seed=0)
    x = models.example_input("resnet18", seed=1)[:, :, :64, :64].copy()  # small, to stay fast
    traced = lk.trace(model, x)
    got = traced(x)
    torch_model = _load_into_torch(torch, _torch_resnet18(torch, 100), model.state_dict())
    with torch.no_grad():
        want = torch_model(torch.from_numpy(x)).numpy()
    scale = np.abs(want).max()
    assert scale > 1e-2  # the logits are not vanishingly small
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * scale)


def test_small_cnn_matches_pytorch(reference):
    torch = pytest.importorskip("torch")
    tnn = torch.nn
    model = models.small_cnn(seed=4)
    x = models.example_input("small_cnn", batch=3, seed=5)
    got = lk.trace(model, x)(x)

    class TorchNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.fc = tnn.Conv2d(3, 16, 3, padding=1), tnn.BatchNorm2d(16), tnn.Linear(256, 10)

        def forward(self, t):
            t = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(t))), 2)
            return self.fc(torch.flatten(t, 1))

    torch_model = _load_into_torch(torch, TorchNet(), model.state_dict())
    with torch.no_grad():
        want = torch_model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
