"""lowerkit.torch.load: torch.export programs imported as lowerkit modules."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk

torch = pytest.importorskip("torch")
pytest.importorskip("lowerkit_reference")

import lowerkit.torch as lt  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 4 * 4, 5))

    def forward(self, x):
        y = F.max_pool2d(F.hardswish(self.bn(self.conv(x))), 2)  # LINE_POOL
        return self.head(y).softmax(-1)


def _line(marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(Net.forward)
    return next(start + i for i, text in enumerate(lines) if marker in text)


@pytest.fixture
def net():
    torch.manual_seed(0)
    model = Net().eval()
    model.bn.running_mean.uniform_(-0.2, 0.2)
    model.bn.running_var.uniform_(0.5, 1.5)
    return model


def test_module_matches_torch_and_keeps_names(net):
    x = torch.rand(2, 3, 8, 8)
    m = lt.load(net, (x,))
    assert isinstance(m, lk.Module) and m.name == "Net"
    with torch.no_grad():
        expected = net(x).numpy()
    np.testing.assert_allclose(m(x.numpy()), expected, rtol=1e-5, atol=1e-6)
    # state-dict names; the unused int64 counter num_batches_tracked is left out
    assert list(m.parameters) == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean",
                                  "bn.running_var", "head.1.weight", "head.1.bias"]
    graph = lk.graph_of(m)
    assert [v.name for v in graph.inputs] == ["x"] and graph.inputs[0].type.shape == (2, 3, 8, 8)
    ops = [n.op for n in graph.nodes if n.op != "param"]
    assert ops == ["conv2d", "batch_norm", "hardswish", "max_pool2d", "reshape", "linear", "softmax"]


def test_nodes_keep_module_scope_and_user_source_line(net):
    m = lt.load(net, torch.rand(1, 3, 8, 8))
    nodes = {n.op: n for n in lk.graph_of(m).nodes}
    assert nodes["conv2d"].scope == "conv" and nodes["linear"].scope == "head.1"
    assert nodes["max_pool2d"].scope == ""
    pool = nodes["max_pool2d"].source
    assert pool.file.endswith("test_torch_load.py") and pool.line == _line("LINE_POOL")
    # a layer's node points at the user's line that called the layer, not into torch
    assert nodes["conv2d"].source.file.endswith("test_torch_load.py")
    assert nodes["conv2d"].source.line == _line("LINE_POOL")


def test_exported_program_is_accepted_and_training_mode_restored(net):
    net.train()
    x = torch.rand(1, 3, 8, 8)
    m = lt.load(net, x)
    assert net.training  # load exported in eval mode and restored the flags
    net.eval()
    program = torch.export.export(net, (x,))
    m2 = lt.load(program)  # example inputs stored in the program
    np.testing.assert_allclose(m2(x.numpy()), m(x.numpy()), rtol=1e-6)


def test_dynamic_batch_becomes_the_symbolic_batch(net):
    x = torch.rand(3, 3, 8, 8)
    batch = torch.export.Dim("batch", min=2, max=16)
    program = torch.export.export(net, (x,), dynamic_shapes=({0: batch},))
    m = lt.load(program, (x,))
    assert lk.graph_of(m).inputs[0].type.shape == ("N", 3, 8, 8)
    for rows in (3, 5):
        xb = torch.rand(rows, 3, 8, 8)
        with torch.no_grad():
            np.testing.assert_allclose(m(xb.numpy()), net(xb).numpy(), rtol=1e-5, atol=1e-6)


class Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        y = torch.cumsum(self.conv(x), 1)  # LINE_CUMSUM
        return torch.sort(y, 1).values  # LINE_SORT


def test_unsupported_aten_ops_are_listed_at_once_with_scope_and_line():
    with pytest.raises(lk.UnsupportedOperatorError) as info:
        lt.load(Unsupported(), torch.rand(1, 3, 4, 4))
    message = str(info.value)
    assert "2 node(s) lowerkit cannot import" in message
    assert "aten.cumsum.default" in message and "aten.sort.default" in message
    assert "test_torch_load.py:" in message and "docs/torch.md" in message


def test_bad_arguments_are_input_errors(net):
    with pytest.raises(lk.InputError, match="needs example_inputs"):
        lt.load(net)
    with pytest.raises(lk.InputError, match="expects a torch.nn.Module or a torch.export.ExportedProgram, got str"):
        lt.load("model.pt", torch.rand(1))
    with pytest.raises(lk.InputError, match="example input 0 must be a torch.Tensor or a numpy array, got list"):
        lt.load(net, ([1.0, 2.0],))
    with pytest.raises(lk.InputError, match="torch.export.export could not export Net"):
        lt.load(net, torch.rand(1, 5, 8, 8))


def test_trace_of_a_torch_module_points_to_lowerkit_torch_load(net):
    with pytest.raises(lk.InputError, match=r"got the PyTorch (module )?Net: import it with lowerkit.torch.load"):
        lk.trace(net, np.zeros((1, 3, 8, 8), np.float32))


def test_supported_aten_ops_lists_the_registry():
    names = lt.supported_aten_ops()
    assert "aten.convolution.default" in names and "aten.native_layer_norm.default" in names
    assert names == sorted(names)


def test_without_torch_the_error_says_how_to_install(monkeypatch):
    import builtins

    from lowerkit.torch import _deps

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(lt.TorchNotInstalledError, match=r"pip install lowerkit\[torch\]"):
        _deps.require_torch()


class Mixed(nn.Module):
    """Constants made from shapes, folded constants, where/pow, views and reductions."""

    def forward(self, x):
        mask = torch.arange(x.shape[-1]) % 2 == 0
        y = torch.where(mask, x, x * 2) ** torch.full_like(x, 2.0) + 2 ** x + torch.zeros_like(x)
        y = y.unsqueeze(1).squeeze(1).transpose(0, 1).contiguous().t()
        y = y.sum(-1, keepdim=True) - y.amax(0) + torch.rsqrt(y + 1).mean()
        return (y.to(torch.float64) * 2).to(torch.float32) + x.long().float()


def test_shape_constants_folding_and_small_ops():
    x = torch.rand(3, 4)
    m = lt.load(Mixed(), x)
    with torch.no_grad():
        np.testing.assert_allclose(m(x.numpy()), Mixed()(x).numpy(), rtol=1e-5, atol=1e-6)
    ops = {n.op for n in lk.graph_of(m).nodes}
    assert {"where", "pow", "reduce_sum", "reduce_max", "cast"} <= ops
    assert "arange" not in str(m)  # evaluated at import time, a constant mask


class ShapeArithmetic(nn.Module):
    """Shape-dependent code a dynamic export records as sym_size arithmetic."""

    def forward(self, x):
        n = x.shape[0]
        pos = torch.arange(x.shape[1] * 2, dtype=x.dtype)[: x.shape[1]]
        return x.reshape(n, -1) * pos + n


def test_symbolic_shape_arithmetic_is_evaluated_with_the_pinned_sizes():
    x = torch.rand(3, 4)
    program = torch.export.export(ShapeArithmetic(), (x,), dynamic_shapes=({0: torch.export.Dim("n", min=2)},))
    m = lt.load(program, (x,))
    np.testing.assert_allclose(m(x.numpy()), ShapeArithmetic()(x).numpy(), rtol=1e-6)
