"""PyTorch ResNet-18 -> ONNX -> lowerkit -> backends -> file -> run, against ONNX Runtime."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import lowerkit  # noqa: E402
import lowerkit.onnx  # noqa: E402

nn = torch.nn

# Smaller than ImageNet's 224 so the suite stays fast; the graph is the same.
SIZE = 64
BACKEND_LISTS = [["reference"], ["nnpack", "glow_like"], ["nnpack", "reference"]]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _randomize_batch_norms(model: nn.Module, gen: torch.Generator) -> None:
    # Fresh batch norms are identities; random statistics make the test meaningful.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=gen) * 0.1)


def _export_torch(model: nn.Module, x: torch.Tensor, path, *, dynamic_batch: bool) -> None:
    kwargs = {"dynamic_axes": {"x": {0: "batch"}, "y": {0: "batch"}}} if dynamic_batch else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated
        # The dynamo exporter needs onnxscript, which lowerkit does not require.
        torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"],
                          opset_version=17, dynamo=False, **kwargs)


@pytest.fixture(scope="module")
def resnet_onnx(tmp_path_factory):
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model = ResNet18()
        _randomize_batch_norms(model, gen)
    model.eval()
    x = torch.rand(1, 3, SIZE, SIZE, generator=gen)
    path = tmp_path_factory.mktemp("onnx") / "resnet18.onnx"
    _export_torch(model, x, path, dynamic_batch=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x_np = x.numpy()
    expected = session.run(None, {"x": x_np})[0]
    return path, x_np, expected


def _require_backends(names: list[str]) -> None:
    installed = {b.name for b in lowerkit.backends(check=False) if not b.broken}
    missing = [n for n in names if n not in installed]
    if missing:
        pytest.skip(f"backend(s) {missing} not installed")


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-4) -> None:
    # 1e-4 relative to the output's scale (individual logits near zero have no useful rtol).
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def test_dynamic_models_keep_a_symbolic_batch_unless_pinned(resnet_onnx) -> None:
    path, x, _ = resnet_onnx
    free = lowerkit.onnx.load(path)
    assert free.signature("forward").inputs[0][1].shape == ("batch",) + x.shape[1:]
    assert free.signature("forward").outputs[0].shape == ("batch", 1000)
    pinned = lowerkit.onnx.load(path, input_shapes={"x": list(x.shape)})
    assert pinned.signature("forward").inputs[0][1].shape == x.shape


@pytest.mark.parametrize("backends", BACKEND_LISTS, ids="+".join)
def test_resnet18_import_lower_save_load_matches_onnxruntime(resnet_onnx, backends, tmp_path) -> None:
    _require_backends(backends)
    path, x, expected = resnet_onnx
    module = lowerkit.onnx.load(path, input_shapes={"x": list(x.shape)})
    lowered = lowerkit.to_backend(module, backends if len(backends) > 1 else backends[0])
    _close(lowered(x), expected)
    saved = tmp_path / "resnet18.lkm"
    lowerkit.save(lowered, saved)
    loaded = lowerkit.load(saved)
    _close(loaded(x), expected)


def test_resnet18_scopes_and_parameters_come_from_the_onnx_names(resnet_onnx) -> None:
    path, x, _ = resnet_onnx
    imported = lowerkit.onnx.import_model(path, input_shapes={"x": list(x.shape)})
    graph = lowerkit.graph_of(imported.module, "forward")
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert len(convs) == 20  # 17 3x3/7x7 convolutions + 3 downsampling 1x1
    assert any(n.scope.startswith("/layer1/") for n in convs)
    assert "fc.weight" in imported.module.parameters
    assert imported.parameter_names["fc.weight"] == "fc.weight"
    assert imported.input_names == ("x",) and imported.output_names == ("y",)


def test_export_round_trip_of_lowerkit_resnet18_through_onnxruntime(tmp_path) -> None:
    from lowerkit import models

    x = models.example_input("resnet18")[:, :, :SIZE, :SIZE].copy()
    module = lowerkit.trace(models.resnet18(), x)
    path = tmp_path / "lk_resnet18.onnx"
    proto = lowerkit.onnx.export(module, path)
    onnx.checker.check_model(str(path), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = module(x)
    _close(session.run(None, {proto.graph.input[0].name: x})[0], expected)
    # ... and back: import the exported file and run it again on the reference backend.
    _close(lowerkit.onnx.load(path)(x), expected)


class _ViewNet(nn.Module):
    """Flattens with x.view(x.size(0), -1): shape arithmetic in the exported graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x)).unsqueeze(1).squeeze(1)
        return torch.log_softmax(self.fc(y.view(y.size(0), -1)), dim=-1)


def test_pytorch_shape_arithmetic_is_folded_per_batch_size(tmp_path) -> None:
    torch.manual_seed(0)
    model = _ViewNet().eval()
    path = tmp_path / "view.onnx"
    _export_torch(model, torch.rand(2, 3, 8, 8), path, dynamic_batch=True)
    ops_in_file = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"Shape", "Gather", "Concat", "Reshape"} <= ops_in_file
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).random((batch, 3, 8, 8), dtype=np.float32)
        module = lowerkit.onnx.load(path, input_shapes={"x": [batch, 3, 8, 8]})
        ops = {n.op for n in lowerkit.graph_of(module).nodes}
        assert ops == {"param", "conv2d", "relu", "reshape", "linear", "log_softmax"}
        np.testing.assert_allclose(module(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


class _MixedNet(nn.Module):
    """Depthwise convs, clipped activations, ceil-mode pools, dropout, cat, two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.dw, self.pw = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 16, 1)
        self.avg = nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False)
        self.max = nn.MaxPool2d(2, ceil_mode=True)
        self.fc, self.drop = nn.Linear(16 * 3 * 3 + 8, 10), nn.Dropout(0.3)

    def forward(self, x):
        y = nn.functional.relu6(self.bn(self.c1(x)))
        z = nn.functional.hardtanh(self.dw(y), -1.0, 2.0)
        z = self.max(self.avg(nn.functional.leaky_relu(self.pw(z), 0.2)))
        pooled = nn.functional.adaptive_avg_pool2d(y, 1).reshape(y.shape[0], -1)
        h = self.drop(torch.cat([torch.flatten(z, 1), pooled], 1))
        return torch.log_softmax(self.fc(h), 1), torch.sigmoid(h).permute(1, 0)


@pytest.mark.parametrize("opset", [11, 17])
def test_mixed_pytorch_model_imports_and_re_exports(tmp_path, opset) -> None:
    torch.manual_seed(opset)
    model = _MixedNet().eval()
    with torch.no_grad():
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.running_mean.normal_()
    x = torch.rand(2, 3, 17, 17)
    path = tmp_path / "mixed.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), input_names=["x"], opset_version=opset, dynamo=False,
                          dynamic_axes={"x": {0: "batch"}})
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    module = lowerkit.onnx.load(path, input_shapes={"x": [2, 3, 17, 17]})
    for actual, wanted in zip(module(x.numpy()), expected):
        _close(actual, wanted, rtol=1e-5)
    proto = lowerkit.onnx.export(module)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for actual, wanted in zip(session.run(None, {proto.graph.input[0].name: x.numpy()}), expected):
        _close(actual, wanted, rtol=1e-5)
