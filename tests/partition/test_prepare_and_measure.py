"""Core passes before partitioning, and the measured plan (plan="measure")."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import graph_of, models
from lowerkit.errors import InputError
from lowerkit.partition.prepare import prepare_module

CONV_OPS = {"conv2d", "relu", "max_pool2d", "linear"}
OTHER_OPS = {"batch_norm", "flatten", "add", "global_avg_pool2d", "relu", "max_pool2d", "linear"}


@pytest.fixture(scope="module")
def cnn():
    x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
    return lk.trace(models.small_cnn(), x), x


@pytest.fixture(scope="module")
def resnet():
    x = np.random.default_rng(1).random((1, 3, 16, 16), dtype=np.float32)
    module = lk.trace(models.resnet18(num_classes=10), x)
    return module, x, module(x)


# -- passes before partitioning -------------------------------------------------------------
def test_prepare_folds_batch_norm_on_a_copy(cnn):
    module, x = cnn
    prepared, fired = prepare_module(module)
    assert "fold_batch_norm" in fired
    assert not any(n.op == "batch_norm" for n in graph_of(prepared).nodes)
    assert any(n.op == "batch_norm" for n in graph_of(module).nodes)  # the input is untouched
    np.testing.assert_allclose(prepared(x), module(x), rtol=1e-5, atol=1e-6)
    # folded weights are parameters of their own; the batch-norm statistics are gone
    assert any(k.endswith("_folded") for k in prepared.parameters)
    assert not any(k.startswith("bn.") for k in prepared.parameters)


def test_passes_run_before_assignment(cnn, subset_backends):
    module, x = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", {"batch_norm", "flatten"})
    lowered = lk.to_backend(module, ["convy", "resty"])
    report = lowered.partition_report()
    assert report.passes[0] == "fold_batch_norm"
    # conv, relu and pooling now meet with no batch norm between them: one region
    assert [(r.backend, r.ops) for r in report.regions] == [
        ("convy", ("conv2d", "relu", "max_pool2d")), ("resty", ("flatten",)), ("convy", ("linear",)),
    ]
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-5, atol=1e-6)
    unoptimized = lk.to_backend(module, ["convy", "resty"], optimize=False).partition_report()
    assert unoptimized.passes == () and any(n.op == "batch_norm" for n in unoptimized.nodes)


def test_resnet_on_nnpack_and_glow_like_folds_every_batch_norm(resnet):
    pytest.importorskip("lowerkit_nnpack")
    pytest.importorskip("lowerkit_glow_like")
    module, x, expected = resnet
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    report = lowered.partition_report()
    assert not any("batch_norm" in r.ops for r in report.regions)
    np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-4 * np.abs(expected).max())


# -- the measured plan ------------------------------------------------------------------------
def test_measured_plan_matches_reference_and_records_timings(cnn, subset_backends, tmp_path):
    module, x = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    lowered = lk.to_backend(module, ["convy", "resty"], plan="measure", example_inputs=(x,))
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-5, atol=1e-6)
    report = lowered.partition_report()
    assert report.plan == "measure"
    plans = [m for m in report.measurements if m.kind == "plan"]
    regions = [m for m in report.measurements if m.kind == "region"]
    assert {"priority", "resty first"} <= {m.name for m in plans}
    assert sum(m.chosen for m in plans) == 1 and all(m.ms > 0 for m in report.measurements)
    # every region of the priority plan was timed on each backend that supports all of it
    assert {m.backend for m in regions} == {"convy", "resty"}
    chosen = next(m for m in plans if m.chosen)
    assert chosen.ms == min(m.ms for m in plans)
    assert "MEASURED" in str(report) and "<- chosen" in str(report)
    # the timings travel with the file
    lk.save(lowered, tmp_path / "m.lkm")
    loaded = lk.load(tmp_path / "m.lkm")
    assert loaded.partition_report().measurements == report.measurements
    np.testing.assert_allclose(loaded(x), module(x), rtol=1e-5, atol=1e-6)


def test_the_chosen_plan_is_lowered_anew_after_the_timings(cnn, subset_backends, monkeypatch):
    """The timed handles adapted on calls broken by pauses (form trials, stall guards): the
    module returned is the winning plan lowered again, none of the handles timed."""
    from lowerkit.lowering import measure

    module, x = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    timed = []
    real_caller = measure._caller
    monkeypatch.setattr(measure, "_caller", lambda part, inputs: (timed.append(part), real_caller(part, inputs))[1])
    monkeypatch.setattr(measure, "SETTLE_S", 0.0)
    lowered = lk.to_backend(module, ["convy", "resty"], plan="measure", example_inputs=(x,))
    assert len(timed) >= 2  # the distinct candidate plans
    assert all(lowered.outer is not part.outer for part in timed)
    assert all(sub is not part.outer.submodules.get(name) for part in timed
               for name, sub in lowered.outer.submodules.items())
    timed_twin = next(part for part in timed if measure._signature_of(part) == measure._signature_of(lowered))
    assert timed_twin.partition_report().regions == lowered.partition_report().regions  # the same plan
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-5, atol=1e-6)


def test_measured_plan_on_real_backends_is_correct(resnet):
    pytest.importorskip("lowerkit_nnpack")
    pytest.importorskip("lowerkit_glow_like")
    module, x, expected = resnet
    lowered = lk.to_backend(module, ["nnpack", "glow_like"], plan="measure", example_inputs={"forward": (x,)})
    np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    names = {m.name for m in lowered.partition_report().measurements if m.kind == "plan"}
    assert "glow_like first" in names  # the whole model on glow_like is always a candidate


def test_measure_without_example_inputs_is_an_input_error(cnn, subset_backends):
    module, _ = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    with pytest.raises(InputError, match=r'plan="measure" needs example_inputs'):
        lk.to_backend(module, ["convy", "resty"], plan="measure")


def test_plan_argument_errors(cnn, subset_backends):
    module, x = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    with pytest.raises(InputError, match=r"plan must be one of \['priority', 'measure'\], got 'fastest'"):
        lk.to_backend(module, ["convy", "resty"], plan="fastest")
    with pytest.raises(InputError, match="chooses between backends: give a list"):
        lk.to_backend(module, "convy", plan="measure", example_inputs=(x,))
    with pytest.raises(InputError, match='used only with plan="measure"'):
        lk.to_backend(module, ["convy", "resty"], example_inputs=(x,))
    with pytest.raises(InputError, match=r"method 'forward', input .*expected f32\[1, 3, 8, 8\], got f32\[2, 3, 8, 8\]"):
        lk.to_backend(module, ["convy", "resty"], plan="measure", example_inputs=(np.zeros((2, 3, 8, 8), np.float32),))
    with pytest.raises(InputError, match="no method 'backward'"):
        lk.to_backend(module, ["convy", "resty"], plan="measure", example_inputs={"backward": (x,)})
    with pytest.raises(InputError, match="does not combine with submodules"):
        lk.to_backend(module, ["convy", "resty"], plan="measure", example_inputs=(x,), submodules=["conv"])


def test_passes_before_partitioning_keep_output_names():
    import numpy as np
    import lowerkit as lk
    from lowerkit import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            return {"features": self.bn(self.conv(x))}

    x = np.ones((1, 3, 6, 6), np.float32)
    lowered = lk.to_backend(lk.trace(Net(), x), ["glow_like", "reference"])
    assert "fold_batch_norm" in lowered.partition_report().passes
    assert lowered.signature("forward").names_out == ("features",)
