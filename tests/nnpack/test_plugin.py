"""The nnpack plugin through lowerkit: lowering, options, payload, availability, thread safety."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lowerkit
import lowerkit_nnpack
from lowerkit import nn, ops
from lowerkit.errors import FormatError, InputError, UnsupportedOperatorError
from lowerkit_nnpack import payload, selftest


class _Net(nn.Module):
    """5x5 conv + relu, 3x3 conv + relu (32 inputs: Winograd's), 2x2 max pool, strided 1x1
    conv, linear, softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 5, padding=2)
        self.c2 = nn.Conv2d(32, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 4, 1, stride=2)
        self.fc = nn.Linear(5, 6)

    def forward(self, x):
        x = ops.relu(self.c1(x))
        x = ops.max_pool2d(ops.relu(self.c2(x)), 2)
        return ops.softmax(self.fc(self.c3(x)), -1)


@pytest.fixture(scope="module")
def traced():
    with nn.init_seed(0):
        net = _Net()
    x = np.random.default_rng(0).standard_normal((2, 3, 20, 20)).astype(np.float32)
    return lowerkit.trace(net, x), x


@pytest.mark.parametrize(
    "spec",
    [{}, {"algorithm": "implicit_gemm"}, {"transform_strategy": "compute", "threads": 1},
     {"threads": 2, "batch_threshold": 1}],
)
def test_whole_module_matches_reference(traced, spec):
    module, x = traced
    lowered = lowerkit.to_backend(module, "nnpack", {"forward": spec})
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-6)


def test_save_load_round_trip(traced, tmp_path):
    module, x = traced
    lowered = lowerkit.to_backend(module, "nnpack")
    lowerkit.save(lowered, tmp_path / "m.lk")
    np.testing.assert_array_equal(lowerkit.load(tmp_path / "m.lk")(x), lowered(x))


def test_conv_relu_is_fused(traced):
    module, _ = traced
    handles = lowerkit_nnpack.lowerkit_compile(lowerkit_nnpack.lowerkit_preprocess(module, {}), {})
    ops_run = [step.node.op for step in handles["forward"].plan.steps]
    assert ops_run.count("relu") == 0 and ops_run.count("conv2d") == 3
    assert sorted(set(handles["forward"].plan.algorithms.values())) == ["direct", "implicit_gemm", "wt6x6"]


def test_unknown_option_lists_valid_ones(traced):
    with pytest.raises(InputError, match=r"unknown option\(s\) \['algo'\]; valid options are \['algorithm', 'batch_threshold', 'threads', 'transform_strategy'\]"):
        lowerkit.to_backend(traced[0], "nnpack", {"forward": {"algo": "wt8x8"}})


@pytest.mark.parametrize(
    "spec,message",
    [({"algorithm": "winograd"}, "algorithm must be one of"), ({"threads": -1}, "threads must be an integer >= 0"),
     ({"batch_threshold": 0}, "batch_threshold must be an integer >= 1"),
     ({"transform_strategy": "reuse"}, "transform_strategy must be one of")],
)
def test_bad_option_values(traced, spec, message):
    with pytest.raises(InputError, match=message):
        lowerkit.to_backend(traced[0], "nnpack", {"forward": spec})


def test_algorithm_that_cannot_serve_a_layer_names_it(traced):
    with pytest.raises(InputError, match=r"algorithm 'wt8x8' cannot serve node conv2d #\d+ in c1 .*needs a 3x3 kernel, got 5x5"):
        lowerkit.to_backend(traced[0], "nnpack", {"forward": {"algorithm": "wt8x8"}})


def test_unsupported_op_in_whole_module_names_the_node():
    module = lowerkit.trace(lambda x: ops.tanh(x), np.zeros((2, 3), np.float32))
    with pytest.raises(UnsupportedOperatorError, match=r"node tanh #\d+.*not in NNPACK's layer set"):
        lowerkit.to_backend(module, "nnpack")


def test_payload_is_versioned_and_checked(traced):
    data = lowerkit_nnpack.lowerkit_preprocess(traced[0], {})
    assert data.startswith(payload.MAGIC) and b"pickle" not in data[:200]
    module, options = payload.decode(data)
    assert options["forward"]["algorithm"] == "auto" and options["forward"]["threads"] == 0
    with pytest.raises(FormatError, match="not an nnpack payload"):
        payload.decode(b"X" * 40)
    with pytest.raises(FormatError, match="truncated"):
        payload.decode(data[:10])
    with pytest.raises(FormatError, match="format 9 unsupported"):
        payload.decode(data[:8] + (9).to_bytes(4, "little") + data[12:])


def test_eight_threads_match_serial_results(traced):
    module, x = traced
    lowered = lowerkit.to_backend(module, "nnpack")
    inputs = [np.random.default_rng(i).standard_normal(x.shape).astype(np.float32) for i in range(8)]
    serial = [lowered(v) for v in inputs]
    results: list = [None] * 8
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait(timeout=60)
        for _ in range(3):
            results[i] = lowered(inputs[i])

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(got, want)


def test_disable_env_makes_it_unavailable(monkeypatch):
    monkeypatch.setenv("LOWERKIT_NNPACK_DISABLE", "1")
    answer = lowerkit_nnpack.lowerkit_is_available()
    assert not answer and "LOWERKIT_NNPACK_DISABLE" in answer.reason
    monkeypatch.delenv("LOWERKIT_NNPACK_DISABLE")
    assert lowerkit_nnpack.lowerkit_is_available() is True


def test_failing_self_test_reports_reason(monkeypatch):
    monkeypatch.setattr(selftest, "_result", None)
    monkeypatch.setattr(selftest, "_direct", lambda x, w: np.zeros((2, 4, 9, 10)) + 1.0)
    answer = lowerkit_nnpack.lowerkit_is_available()
    assert not answer and "self-test failed" in answer.reason
    monkeypatch.setattr(selftest, "_result", None)


def test_resnet18_partitioned_with_reference_matches_reference():
    from lowerkit import models

    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    module = lowerkit.trace(models.resnet18(num_classes=10), x)
    lowered = lowerkit.to_backend(module, ["nnpack", "reference"])
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-4)
