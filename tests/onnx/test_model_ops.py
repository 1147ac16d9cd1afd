"""ONNX import and export of the ops of mobile CNNs and transformers, against ONNX Runtime.

Import: small hand-built models per op and attribute form (opset 13 attributes, opset 18
inputs), and small blocks exported by ``torch.onnx.export`` the way model zoos are.
Export: every conformance case of a new op, at opsets 13, 17 and 21, run by ONNX Runtime.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("lowerkit_reference")

from onnx import helper  # noqa: E402

import lowerkit  # noqa: E402
import lowerkit.onnx  # noqa: E402
from lowerkit.testing.cases import OP_CASES, case_module  # noqa: E402

from tests.onnx.onnx_helpers import make_model, rand, run_ort  # noqa: E402

node = helper.make_node
I64 = np.int64

# (id, nodes, inputs, initializers, opset)
IMPORTS = [
    ("hardsigmoid", [node("HardSigmoid", ["x"], ["y"])], [("x", [2, 3, 4])], {}, 17),
    ("hardsigmoid-attrs", [node("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.6)], [("x", [2, 3])], {}, 13),
    ("hardswish", [node("HardSwish", ["x"], ["y"])], [("x", [2, 3, 4])], {}, 17),
    ("erf", [node("Erf", ["x"], ["y"])], [("x", [2, 3, 4])], {}, 13),
    ("gelu-20", [node("Gelu", ["x"], ["y"], approximate="tanh")], [("x", [2, 3])], {}, 20),
    ("pow", [node("Pow", ["x", "e"], ["y"])], [("x", [2, 3])], {"e": np.array(2, I64)}, 17),
    ("cast", [node("Cast", ["x"], ["c"], to=onnx.TensorProto.FLOAT16), node("Cast", ["c"], ["y"], to=1)],
     [("x", [2, 3])], {}, 19),
    ("where", [node("Where", ["c", "x", "z"], ["y"])], [("x", [2, 3]), ("z", [3])],
     {"c": np.array([[True, False, True], [False, False, True]])}, 17),
    ("reducemean-attr", [node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)], [("x", [1, 3, 4, 5])], {}, 13),
    ("reducemean-input", [node("ReduceMean", ["x", "a"], ["y"], keepdims=0)], [("x", [1, 3, 4, 5])],
     {"a": np.array([-1, 1], I64)}, 18),
    ("reducesum-input", [node("ReduceSum", ["x", "a"], ["y"])], [("x", [2, 3, 4])], {"a": np.array([0], I64)}, 13),
    ("reducesum-noaxes", [node("ReduceSum", ["x"], ["y"], keepdims=0)], [("x", [2, 3, 4])], {}, 13),
    ("reducemax-attr", [node("ReduceMax", ["x"], ["y"], axes=[1])], [("x", [2, 3, 4])], {}, 13),
    ("reducemin-input", [node("ReduceMin", ["x", "a"], ["y"], keepdims=0)], [("x", [2, 3, 4])],
     {"a": np.array([0, 2], I64)}, 18),
    ("layernorm", [node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-6)], [("x", [2, 5, 8])],
     {"s": rand(8, seed=1), "b": rand(8, seed=2)}, 17),
    ("layernorm-axis", [node("LayerNormalization", ["x", "s"], ["y"], axis=1)], [("x", [2, 3, 4])],
     {"s": rand(3, 4, seed=1)}, 17),
    ("groupnorm-21", [node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)], [("x", [2, 4, 3, 3])],
     {"s": rand(4, seed=1), "b": rand(4, seed=2)}, 21),
    ("instancenorm", [node("InstanceNormalization", ["x", "s", "b"], ["y"])], [("x", [2, 3, 4, 4])],
     {"s": rand(3, seed=1), "b": rand(3, seed=2)}, 17),
    ("slice", [node("Slice", ["x", "s", "e", "a", "st"], ["y"])], [("x", [6, 5, 4])],
     {"s": np.array([-1, 1], I64), "e": np.array([-(2**63), 2**62], I64), "a": np.array([0, -1], I64),
      "st": np.array([-2, 2], I64)}, 17),
    ("slice-noaxes", [node("Slice", ["x", "s", "e"], ["y"])], [("x", [6, 5])],
     {"s": np.array([1, 0], I64), "e": np.array([4, -1], I64)}, 13),
    ("split-sizes", [node("Split", ["x", "sp"], ["y", "z"], axis=1)], [("x", [2, 5])], {"sp": np.array([2, 3], I64)},
     17),
    ("split-equal", [node("Split", ["x"], ["y", "z", "w"], axis=0)], [("x", [6, 2])], {}, 13),
    ("split-num-outputs", [node("Split", ["x"], ["y", "z"], axis=1, num_outputs=2)], [("x", [2, 5])], {}, 18),
    ("gather", [node("Gather", ["x", "i"], ["y"], axis=1)], [("x", [2, 5, 3])], {"i": np.array([[4, 0], [-1, 2]], I64)},
     17),
    ("gather-scalar", [node("Gather", ["x", "i"], ["y"], axis=1)], [("x", [2, 5, 3])], {"i": np.array(0, I64)}, 17),
    ("pad-constant", [node("Pad", ["x", "p", "v"], ["y"])], [("x", [1, 2, 3, 3])],
     {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], I64), "v": np.array(0.5, np.float32)}, 17),
    ("pad-reflect", [node("Pad", ["x", "p"], ["y"], mode="reflect")], [("x", [1, 2, 4, 4])],
     {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], I64)}, 13),
    ("pad-edge-axes", [node("Pad", ["x", "p", "", "a"], ["y"], mode="edge")], [("x", [1, 2, 4, 4])],
     {"p": np.array([1, 0, 2, 3], I64), "a": np.array([2, 3], I64)}, 18),
    ("pad-negative", [node("Pad", ["x", "p"], ["y"])], [("x", [1, 2, 4, 4])],
     {"p": np.array([0, 0, -1, 2, 0, 0, 1, -2], I64)}, 13),
    ("expand", [node("Expand", ["x", "s"], ["y"])], [("x", [3, 1])], {"s": np.array([2, 1, 4], I64)}, 13),
    ("resize-nearest-scales", [node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
     [("x", [1, 2, 3, 4])], {"sc": np.array([1, 1, 2, 2], np.float32)}, 13),
    ("resize-nearest-default", [node("Resize", ["x", "", "sc"], ["y"])], [("x", [1, 2, 3, 4])],
     {"sc": np.array([1, 1, 1.5, 2.5], np.float32)}, 13),
    ("resize-linear-sizes", [node("Resize", ["x", "", "", "sz"], ["y"], mode="linear")], [("x", [1, 2, 3, 5])],
     {"sz": np.array([1, 2, 7, 4], I64)}, 13),
    ("resize-linear-align", [node("Resize", ["x", "", "", "sz"], ["y"], mode="linear",
                                  coordinate_transformation_mode="align_corners")], [("x", [1, 2, 3, 5])],
     {"sz": np.array([1, 2, 6, 9], I64)}, 13),
    ("resize-pytorch-half-pixel", [node("Resize", ["x", "", "sc"], ["y"], mode="linear",
                                        coordinate_transformation_mode="pytorch_half_pixel")],
     [("x", [1, 1, 4, 4])], {"sc": np.array([1, 1, 0.25, 2], np.float32)}, 13),
    ("convtranspose", [node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 1, 1],
                            output_padding=[1, 0])], [("x", [1, 4, 3, 3])],
     {"w": rand(4, 2, 3, 3, seed=1), "b": rand(2, seed=2)}, 17),
    ("convtranspose-output-shape", [node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[7, 8],
                                         group=2)], [("x", [1, 4, 3, 4])], {"w": rand(4, 1, 3, 3, seed=1)}, 17),
    ("convtranspose-1d", [node("ConvTranspose", ["x", "w"], ["y"], strides=[3], dilations=[2])], [("x", [1, 2, 5])],
     {"w": rand(2, 3, 2, seed=1)}, 17),
]


@pytest.mark.parametrize("nodes,inputs,inits,opset", [c[1:] for c in IMPORTS], ids=[c[0] for c in IMPORTS])
def test_import_matches_onnxruntime(nodes, inputs, inits, opset):
    same = nodes[-1].op_type == "GroupNormalization"  # onnx infers no shape for it
    outputs = [(o, inputs[0][1] if same else None) for o in nodes[-1].output]
    model = make_model(nodes, inputs, outputs, inits, opset=opset)
    feeds = {name: rand(*shape, seed=i + 3) for i, (name, shape) in enumerate(inputs)}
    want = run_ort(model, feeds)
    module = lowerkit.onnx.load(model)
    got = module(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_unsupported_configurations_are_named():
    model = make_model([node("Resize", ["x", "", "sc"], ["y"], mode="cubic")], [("x", [1, 1, 4, 4])],
                       [("y", None)], {"sc": np.array([1, 1, 2, 2], np.float32)}, opset=13)
    with pytest.raises(lowerkit.UnsupportedOperatorError, match="Resize mode 'cubic' is not supported"):
        lowerkit.onnx.load(model)
    model = make_model([node("Pad", ["x", "p"], ["y"], mode="wrap")], [("x", [2, 3])], [("y", None)],
                       {"p": np.array([1, 1, 1, 1], I64)}, opset=19)
    with pytest.raises(lowerkit.UnsupportedOperatorError, match="Pad mode 'wrap'"):
        lowerkit.onnx.load(model)


NEW_OPS = {
    "hardsigmoid", "hardswish", "silu", "gelu", "erf", "pow", "where", "reduce_mean", "reduce_sum", "reduce_max",
    "reduce_min", "layer_norm", "group_norm", "slice", "split", "gather", "pad", "expand", "interpolate",
    "scaled_dot_product_attention", "conv_transpose2d", "cast",
}
EXPORT_CASES = [c for c in OP_CASES if c.op in NEW_OPS]


@pytest.mark.parametrize("opset", [13, 17, 21])
@pytest.mark.parametrize("case", EXPORT_CASES, ids=lambda c: c.name)
def test_export_runs_in_onnxruntime(case, opset):
    module = case_module(case)
    inputs = case.inputs()
    model = lowerkit.onnx.export(module, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    want = module(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    feeds = {vi.name: x for vi, x in zip(model.graph.input, inputs)}
    got = run_ort(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    back = lowerkit.onnx.load(model)  # and the export imports back
    again = back(*inputs)
    for g, w in zip(again if isinstance(again, tuple) else (again,), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


# -- blocks of the models people deploy, exported by PyTorch as model zoos do ---------------------------
def _torch_blocks():
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class MobileNetV3Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.se1, self.se2 = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)

        def forward(self, x):
            y = F.hardswish(self.bn(self.conv(x)))
            return y * F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(y, 1)))))

    class ShuffleBlock(nn.Module):
        def forward(self, x):
            a, b = x.chunk(2, dim=1)
            x = torch.cat([a, F.silu(b)], 1)
            n, c, h, w = x.shape
            return x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w).mean([2, 3])

    class ConvNeXtBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw, self.norm = nn.Conv2d(8, 8, 7, padding=3, groups=8), nn.LayerNorm(8)
            self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 8)
            self.gamma = nn.Parameter(torch.full((8,), 0.5))

        def forward(self, x):
            y = self.fc2(F.gelu(self.fc1(self.norm(self.dw(x).permute(0, 2, 3, 1))))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    class ViTBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, 16, 4, 4)
            self.cls, self.pos = nn.Parameter(torch.randn(1, 1, 16)), nn.Parameter(torch.randn(1, 5, 16))
            self.encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True,
                                                      activation="gelu")
            self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 10)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            return self.head(self.norm(self.encoder(x))[:, 0])

    class SwinWindows(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(9, 2))
            self.register_buffer("index", torch.randint(0, 9, (4, 4)))

        def forward(self, x):
            x = torch.roll(F.pad(x, (0, 0, 0, 1, 0, 1)), (-1, -1), (1, 2))
            b, h, w, c = x.shape
            x = x.view(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, c)
            bias = self.table[self.index.view(-1)].view(4, 4, 2).permute(2, 0, 1)
            q = x.reshape(-1, 4, 2, c // 2).transpose(1, 2)
            return F.softmax(q @ q.transpose(-1, -2) + bias, -1) @ q

    class UNetUp(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.bn = nn.ConvTranspose2d(4, 4, 2, 2), nn.BatchNorm2d(4)
            self.conv, self.gn = nn.Conv2d(8, 2, 3, padding=1), nn.GroupNorm(1, 2)

        def forward(self, x):
            y = F.relu(self.bn(self.up(F.max_pool2d(x, 2))))
            z = F.interpolate(F.interpolate(x, scale_factor=2, mode="bilinear"), size=x.shape[2:], mode="nearest")
            return self.gn(self.conv(F.pad(torch.cat([y, z], 1), (1, 1, 1, 1), mode="reflect")))

    return {
        "mobilenetv3": (MobileNetV3Block, (1, 3, 8, 8)), "shufflenet": (ShuffleBlock, (1, 4, 4, 4)),
        "convnext": (ConvNeXtBlock, (1, 8, 6, 6)), "vit": (ViTBlock, (2, 3, 8, 8)),
        "swin": (SwinWindows, (1, 3, 3, 4)), "unet": (UNetUp, (1, 4, 8, 8)),
    }


BLOCKS = ["mobilenetv3", "shufflenet", "convnext", "vit", "swin", "unet"]


@pytest.mark.parametrize("name", BLOCKS)
def test_torch_exported_blocks_match_onnxruntime(name, tmp_path):
    torch = pytest.importorskip("torch")
    make, shape = _torch_blocks()[name]
    torch.manual_seed(0)
    model = make().eval()
    for m in model.modules():  # batch-norm statistics that matter
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(*shape)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notices
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17)
    feeds = {onnx.load(str(path)).graph.input[0].name: x.numpy()}
    want = run_ort(onnx.load(str(path)), feeds)[0]
    module = lowerkit.onnx.load(str(path))
    for backend in ("reference", "glow_like", ["nnpack", "glow_like", "reference"]):
        got = lowerkit.to_backend(module, backend)(x.numpy())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(backend))
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)

