"""Lowering to several backends: results, reports, errors, selective lowering, fallback."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models, nn, ops
from lowerkit.errors import (
    BackendExecutionError,
    BackendNotFoundError,
    BackendUnavailableWarning,
    InputError,
    UnsupportedOperatorError,
)

CONV_OPS = {"conv2d", "relu", "max_pool2d", "linear"}
OTHER_OPS = {"batch_norm", "flatten", "add", "global_avg_pool2d"}


@pytest.fixture(scope="module")
def cnn():
    x = models.example_input("small_cnn") if hasattr(models, "example_input") else None
    x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32) if x is None else x
    return lk.trace(models.small_cnn(), x), x


def test_two_backends_match_unlowered_and_survive_save_load(cnn, subset_backends, tmp_path):
    module, x = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    lowered = lk.to_backend(module, ["convy", "resty"])
    assert lowered.backend == ["convy", "resty"]
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-6, atol=1e-6)
    lk.save(lowered, tmp_path / "p.lkm")
    loaded = lk.load(tmp_path / "p.lkm")
    np.testing.assert_array_equal(loaded(x), lowered(x))
    assert loaded.partition_report() == lowered.partition_report()


def test_report_names_taker_and_decliners(cnn, subset_backends):
    module, _ = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    report = lk.to_backend(module, ["convy", "resty"], optimize=False).partition_report()
    by_op = {n.op: n for n in report.nodes}
    # small_cnn: conv -> bn -> relu -> max_pool -> flatten -> linear (optimize=False: bn not folded)
    assert [n.op for n in report.nodes] == ["conv2d", "batch_norm", "relu", "max_pool2d", "flatten", "linear"]
    assert by_op["conv2d"].backend == "convy" and by_op["conv2d"].declines == ()
    assert by_op["batch_norm"].backend == "resty"
    assert [(d.backend, d.reason) for d in by_op["batch_norm"].declines] == [
        ("convy", "convy has no batch_norm kernel")
    ]
    assert [(r.backend, r.ops) for r in report.regions] == [
        ("convy", ("conv2d",)),
        ("resty", ("batch_norm",)),
        ("convy", ("relu", "max_pool2d")),
        ("resty", ("flatten",)),
        ("convy", ("linear",)),
    ]
    assert by_op["batch_norm"].scope == "bn"
    text = str(report)
    assert "convy: convy has no batch_norm kernel" in text
    dot = report.to_dot()
    assert dot.startswith("digraph") and dot.count("cluster_forward_region") == 5


def test_unsupported_ops_are_all_listed_at_once(cnn, subset_backends):
    module, _ = cnn
    subset_backends("convy", {"conv2d", "linear"})
    with pytest.raises(UnsupportedOperatorError) as info:
        lk.to_backend(module, ["convy"], optimize=False)
    message = str(info.value)
    for op in ("batch_norm", "relu", "max_pool2d", "flatten"):
        assert f"node {op}" in message
    assert "4 node(s)" in message
    assert "convy: convy has no relu kernel" in message
    assert "in bn" in message and ".py:" in message  # scope and source line
    assert "Add 'reference'" in message


def test_reference_runs_the_rest(cnn, subset_backends):
    module, x = cnn
    subset_backends("convy", {"conv2d"})
    lowered = lk.to_backend(module, ["convy", "reference"])
    assert [r.backend for r in lowered.partition_report().regions] == ["convy", "reference"]
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-6, atol=1e-6)


class Branchy(nn.Module):
    """a -> b -> c with a -> c as well: merging a and c in one region would need a cycle."""

    def forward(self, x):
        a = ops.relu(x)
        b = ops.flatten(a, 0)
        b = ops.reshape(b, (1, 4))
        return ops.add(ops.relu(a), b)


def test_regions_never_form_cycles(subset_backends):
    x = np.arange(-2, 2, dtype=np.float32).reshape(1, 4)
    module = lk.trace(Branchy(), x)
    subset_backends("acty", {"relu", "add"})
    subset_backends("shapy", {"flatten", "reshape"})
    lowered = lk.to_backend(module, ["acty", "shapy"])
    regions = lowered.partition_report().regions
    assert [(r.backend, r.ops) for r in regions] == [
        ("acty", ("relu", "relu")),  # the second relu reads only a: it may join
        ("shapy", ("flatten", "reshape")),
        ("acty", ("add",)),  # reads the shapy region, which reads the first: a new region
    ]
    np.testing.assert_array_equal(lowered(x), module(x))


def test_selective_lowering_of_two_submodules_matches(subset_backends):
    x = np.random.default_rng(1).random((1, 3, 32, 32), dtype=np.float32)
    module = lk.trace(models.resnet18(num_classes=10), x)
    subset_backends("everything", {"conv2d", "batch_norm", "relu", "add"})
    lowered = lk.to_backend(module, "everything", submodules=["layer1", "layer2.0"])
    report = lowered.partition_report()
    scopes = {n.scope for n in report.nodes if n.backend == "everything"}
    assert scopes and all(s.startswith(("layer1", "layer2.0")) for s in scopes)
    assert all(n.backend is None for n in report.nodes if n.scope.startswith(("layer3", "conv1", "fc")))
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-5, atol=1e-5)


def test_unknown_submodule_path_lists_valid_ones(cnn, subset_backends):
    module, _ = cnn
    subset_backends("convy", CONV_OPS)
    with pytest.raises(InputError, match=r"submodules \['nope'\].*valid paths are \['bn', 'conv', 'fc'\]"):
        lk.to_backend(module, "convy", submodules=["nope"])


def test_backend_error_names_the_node_and_source_line(cnn, subset_backends):
    module, x = cnn
    subset_backends("convy", CONV_OPS, fail_on="max_pool2d")
    subset_backends("resty", OTHER_OPS)
    lowered = lk.to_backend(module, ["convy", "resty"], optimize=False)
    with pytest.raises(BackendExecutionError) as info:
        lowered(x)
    message = str(info.value)
    assert "region 'forward_region2'" in message and "backend 'convy'" in message
    assert "node max_pool2d" in message and "models/small.py:" in message
    assert "max_pool2d kernel crashed" in message


def test_a_model_one_region_takes_whole_is_called_straight_and_reports_as_the_glue_does(cnn, subset_backends):
    """A method that is one region's call (the glue has nothing else) calls the region
    without the interpreter: the same outputs, and a failure names its region and node."""
    module, x = cnn
    subset_backends("everything", CONV_OPS | OTHER_OPS)
    lowered = lk.to_backend(module, ["everything"], optimize=False)
    assert [r.name for r in lowered.partition_report().regions] == ["forward_region0"]
    assert lowered._whole["forward"] == ("forward_region0", "forward")
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-5, atol=1e-5)
    subset_backends("failing", CONV_OPS | OTHER_OPS, fail_on="max_pool2d")
    failing = lk.to_backend(module, ["failing"], optimize=False)
    assert failing._whole["forward"] is not None
    with pytest.raises(BackendExecutionError) as info:
        failing(x)
    message = str(info.value)
    assert "region 'forward_region0'" in message and "backend 'failing'" in message
    assert "node max_pool2d" in message and "max_pool2d kernel crashed" in message


def test_signatures_are_made_once_and_an_unknown_method_is_named(cnn, subset_backends):
    module, _ = cnn
    subset_backends("everything", CONV_OPS | OTHER_OPS)
    lowered = lk.to_backend(module, ["everything"], optimize=False)
    assert lowered.signature("forward") is lowered.signature("forward")
    assert lowered.signature("forward") == module.signature("forward")
    with pytest.raises(InputError, match="has no method 'nope'"):
        lowered.run("nope")


def test_single_node_region_failure_names_its_node_without_a_handle(cnn, subset_backends):
    module, x = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS, fail_on="batch_norm")
    lowered = lk.to_backend(module, ["convy", "resty"], optimize=False)
    with pytest.raises(BackendExecutionError, match=r"region 'forward_region1'.*node batch_norm #\d+ in bn at .*models/small.py:\d+"):
        lowered(x)


def test_fallback_needs_kept_sources(cnn, subset_backends, tmp_path):
    module, _ = cnn
    subset_backends("convy", CONV_OPS)
    resty = subset_backends("resty", OTHER_OPS)
    lowered = lk.to_backend(module, ["convy", "resty"])
    lk.save(lowered, tmp_path / "p.lkm")
    resty.available = False
    with pytest.raises(lk.BackendNotAvailableError, match="keep_source=True"):
        lk.load(tmp_path / "p.lkm", fallback="reference")


def test_fallback_on_load_reroutes_only_missing_regions(cnn, subset_backends, tmp_path):
    module, x = cnn
    subset_backends("convy", CONV_OPS)
    resty = subset_backends("resty", OTHER_OPS)
    lk.save(lk.to_backend(module, ["convy", "resty"], keep_source=True, optimize=False), tmp_path / "p.lkm")
    resty.available = False
    with pytest.raises(lk.BackendNotAvailableError, match="resty"):
        lk.load(tmp_path / "p.lkm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = lk.load(tmp_path / "p.lkm", fallback="reference")
    relevant = [w for w in caught if issubclass(w.category, BackendUnavailableWarning)]
    assert len(relevant) == 1
    assert "forward_region1" in str(relevant[0].message) and "forward_region3" in str(relevant[0].message)
    assert {n for n, r in loaded.regions.items() if r.is_fallback} == {"forward_region1", "forward_region3"}
    np.testing.assert_allclose(loaded(x), module(x), rtol=1e-6, atol=1e-6)


def test_missing_backend_on_load_names_distribution(cnn, subset_backends, tmp_path):
    from lowerkit.backend import unregister_backend

    module, _ = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    lk.save(lk.to_backend(module, ["convy", "resty"]), tmp_path / "p.lkm")
    unregister_backend("resty")
    with pytest.raises(BackendNotFoundError, match="lowerkit-resty"):
        lk.load(tmp_path / "p.lkm")


def test_compile_spec_per_backend_is_checked(cnn, subset_backends):
    module, _ = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    with pytest.raises(InputError, match=r"names \['glow'\], which are not among"):
        lk.to_backend(module, ["convy", "resty"], {"forward": {"glow": {}}})
    lowered = lk.to_backend(module, ["convy", "resty"], {"forward": {"convy": {"threads": 1}}})
    assert lowered.compile_spec == {"forward": {"convy": {"threads": 1}}}
    assert lowered.regions["forward_region0"].compile_spec == {"forward": {"threads": 1}}


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_copies_share_report_and_compile_their_own_regions(cnn, subset_backends, copier):
    module, x = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    lowered = lk.to_backend(module, ["convy", "resty"])
    twin = copier(lowered)
    assert type(twin) is type(lowered)
    assert twin.backend == lowered.backend and twin.compile_spec == lowered.compile_spec
    assert twin.partition_report() is lowered.partition_report()
    assert sorted(twin.regions) == sorted(lowered.regions)
    assert all(twin.regions[n] is not lowered.regions[n] for n in lowered.regions)
    np.testing.assert_array_equal(twin(x), lowered(x))


def test_package_exports_the_partitioned_module_and_report(cnn, subset_backends):
    import lowerkit.lowering as lowering
    import lowerkit.partition as partition

    module, _ = cnn
    subset_backends("convy", CONV_OPS)
    subset_backends("resty", OTHER_OPS)
    lowered = lk.to_backend(module, ["convy", "resty"])
    assert isinstance(lowered, lowering.PartitionedModule)
    assert isinstance(lowered.partition_report(), partition.PartitionReport)
