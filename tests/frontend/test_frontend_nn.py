"""lowerkit.nn: registration, traversal, state dicts, seeding, layers."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn
from tests.frontend.frontend_helpers import nodes_of, ops_of


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 2))

    def forward(self, x):
        return self.head(nn.ReLU()(self.bn(self.conv(x))))


def test_registration_order_and_names():
    with nn.init_seed(0):
        model = Tiny()
    assert [n for n, _ in model.named_parameters()] == [
        "conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
        "head.1.weight", "head.1.bias",
    ]
    assert [n for n, _ in model.named_modules()] == ["", "conv", "bn", "head", "head.0", "head.1"]
    assert [n for n, _ in model.named_children()] == ["conv", "bn", "head"]
    assert model.conv.weight.shape == (4, 3, 3, 3) and model.conv.weight.dtype == np.float32
    assert isinstance(model.head[1], nn.Linear) and len(model.head) == 2
    assert "Conv2d(3, 4, kernel_size=(3, 3)" in repr(model)


def test_reassigning_and_deleting_attributes_updates_registry():
    m = nn.Module()
    m.w = nn.Parameter(np.zeros(2))
    m.w = np.ones(2)  # a plain array is not a parameter
    assert list(m.named_parameters()) == []
    m.sub = nn.Linear(2, 2)
    del m.sub
    assert list(m.named_children()) == []


def test_missing_super_init_is_reported():
    class Bad(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(lk.InputError, match=r"call super\(\).__init__\(\) before assigning 'fc'"):
        Bad()


def test_seeding_is_deterministic():
    with nn.init_seed(7):
        a = Tiny()
    with nn.init_seed(7):
        b = Tiny()
    with nn.init_seed(8):
        c = Tiny()
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(pa.data, pb.data, err_msg=name)
    assert not np.array_equal(a.conv.weight.data, c.conv.weight.data)
    # layers of one model draw different numbers from the stream
    assert not np.array_equal(a.conv.weight.data.ravel()[:8], a.head[1].weight.data.ravel()[:8])
    # an explicit generator wins over the context
    with nn.init_seed(1):
        d = nn.Linear(3, 3, rng=np.random.default_rng(5))
    e = nn.Linear(3, 3, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(d.weight.data, e.weight.data)


def test_init_scale_follows_torch_default():
    layer = nn.Linear(400, 10, rng=np.random.default_rng(0))
    bound = 1 / np.sqrt(400)  # kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert np.abs(layer.weight.data).max() <= bound
    assert np.abs(layer.weight.data).max() > 0.9 * bound
    assert np.abs(layer.bias.data).max() <= bound


def test_state_dict_round_trip_and_checks():
    with nn.init_seed(0):
        a = Tiny()
    with nn.init_seed(1):
        b = Tiny()
    state = a.state_dict()
    state["conv.weight"][...] = 0  # a copy: the model is unchanged
    assert np.abs(a.conv.weight.data).sum() > 0
    b.load_state_dict(a.state_dict())
    for (_, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(pa.data, pb.data)
    bad = a.state_dict()
    bad["fc.weight"] = bad.pop("head.1.weight")
    with pytest.raises(lk.InputError, match=r"missing keys \['head.1.weight'\], unexpected keys \['fc.weight'\]"):
        b.load_state_dict(bad)
    bad = a.state_dict()
    bad["bn.weight"] = np.ones(5, np.float32)
    with pytest.raises(lk.InputError, match=r"'bn.weight' has shape \[4\], got \[5\]"):
        b.load_state_dict(bad)
    b.load_state_dict({"bn.weight": np.full(4, 3.0)}, strict=False)
    assert b.bn.weight.dtype == np.float32 and b.bn.weight.data[0] == 3.0


def test_calling_a_layer_outside_trace_raises():
    with pytest.raises(lk.InputError, match="Linear was called outside lowerkit.trace"):
        nn.Linear(2, 2)(np.ones((1, 2), np.float32))


def test_layer_arguments_checked():
    with pytest.raises(lk.InputError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(lk.InputError, match="only output_size 1"):
        nn.AdaptiveAvgPool2d(2)
    with pytest.raises(lk.InputError, match="inference"):
        nn.BatchNorm2d(3, track_running_stats=False)
    with pytest.raises(lk.InputError, match="Sequential item 0"):
        nn.Sequential(lambda x: x)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: nn.Linear(-1, 2), r"Linear: in_features must be a positive int, got -1"),
        (lambda: nn.Linear(4, 2.5), r"Linear: out_features must be a positive int, got 2.5"),
        (lambda: nn.Conv2d(3, 0, 3), r"Conv2d: out_channels must be a positive int, got 0"),
        (lambda: nn.Conv2d(3, 4, 3, groups=0), r"Conv2d: groups must be a positive int, got 0"),
        (lambda: nn.Conv2d(3, 4, (3, 0)), r"Conv2d: kernel_width must be a positive int, got 0"),
        (lambda: nn.BatchNorm2d(0), r"BatchNorm2d: num_features must be a positive int, got 0"),
    ],
)
def test_layer_sizes_must_be_positive_ints(build, message):
    with pytest.raises(lk.InputError, match=message):
        build()


def test_layers_trace_to_expected_ops():
    x = np.zeros((1, 4, 8, 8), np.float32)
    model = nn.Sequential(
        nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), nn.BatchNorm2d(4, affine=False), nn.ReLU6(),
        nn.MaxPool2d(2), nn.AvgPool2d(2, stride=1, padding=1), nn.Dropout(0.3), nn.LeakyReLU(0.1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3), nn.Sigmoid(), nn.Tanh(), nn.Identity(),
        nn.Softmax(dim=1), nn.LogSoftmax(1),
    )
    m = lk.trace(model, x)
    assert [op for op in ops_of(m) if op not in ("param", "constant")] == [
        "conv2d", "batch_norm", "relu6", "max_pool2d", "avg_pool2d", "leaky_relu", "global_avg_pool2d",
        "flatten", "linear", "sigmoid", "tanh", "softmax", "log_softmax",
    ]
    assert nodes_of(m, "conv2d")[0].attrs["groups"] == 4
    assert nodes_of(m, "batch_norm")[0].scope == "1"
    assert lk.graph_of(m).outputs[0].type.shape == (1, 3)


def test_traced_module_runs(reference):
    with nn.init_seed(3):
        model = Tiny()
    x = np.random.default_rng(0).random((2, 3, 4, 4), dtype=np.float32)
    m = lk.trace(model, x)
    y = m(x)
    assert y.shape == (2, 2) and np.isfinite(y).all()
    # the traced module keeps its own copy of the weights
    model.head[1].bias.data = model.head[1].bias.data + 1
    np.testing.assert_array_equal(m(x), y)
