"""The quick-start example of issue 2, as written: trace, print, run, save, load."""

from __future__ import annotations

import numpy as np

import lowerkit as lk
from lowerkit import nn, ops


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = ops.max_pool2d(ops.relu(self.bn(self.conv(x))), 2)
        return self.fc(ops.flatten(x, 1))


def test_quickstart(reference, tmp_path):
    x = np.random.rand(1, 3, 8, 8).astype(np.float32)
    m = lk.trace(Net(), x)
    text = str(m)
    assert "method forward(%x: f32[1, 3, 8, 8]) -> f32[1, 10]" in text
    assert 'param(name="conv.weight")' in text and "conv2d(" in text
    y = m(x)
    assert y.shape == (1, 10) and y.dtype == np.float32
    path = tmp_path / "net.lkm"
    lk.save(m, path)
    m2 = lk.load(path)
    assert np.array_equal(m2(x), y)
    assert [n.scope for n in lk.graph_of(m2).nodes] == [n.scope for n in lk.graph_of(m).nodes]


def test_multi_method_module_runs_and_round_trips(reference, tmp_path):
    class Accum(nn.Module):
        def accum(self, x, h):
            return x + h

        def sub_accum(self, x, h):
            return x - h

        def forward(self, x, h):
            return self.accum(x, h), self.sub_accum(x, h)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    h = np.full((2, 3), 0.5, np.float32)
    m = lk.trace(Accum(), methods={"accum": (x, h), "sub_accum": (x, h), "forward": (x, h)})
    a, s = m(x, h)
    np.testing.assert_array_equal(a, x + h)
    np.testing.assert_array_equal(s, x - h)
    np.testing.assert_array_equal(m.accum(x, h), x + h)
    lk.save(m, tmp_path / "accum.lkm")
    m2 = lk.load(tmp_path / "accum.lkm")
    np.testing.assert_array_equal(m2.run("sub_accum", x, h), x - h)
