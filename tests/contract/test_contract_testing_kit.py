"""The conformance kit run against the test distributions: it passes for a good backend
(toy, claiming a few ops) and for the unavailable case it checks the other branch."""

from __future__ import annotations

import pytest

from lowerkit.testing import OP_CASES, BackendConformance, case_module, cases_for


@pytest.fixture(autouse=True)
def _toy_dists(dists):
    return dists


class TestToyConformance(BackendConformance):
    backend_name = "toy"
    supported_ops = frozenset({"add", "sub", "mul", "neg", "relu"})
    compile_options = {"threads": 2, "note": "any JSON the backend accepts"}


class TestToyUnavailableConformance(BackendConformance):
    backend_name = "toy"
    supported_ops = frozenset({"relu"})

    @pytest.fixture(autouse=True)
    def _switch_off(self, monkeypatch):
        monkeypatch.setenv("LOWERKIT_TOY_UNAVAILABLE", "1")


class TestNoAvailConformance(BackendConformance):
    backend_name = "noavail"
    supported_ops = frozenset({"add", "mul"})


def test_every_op_case_names_a_known_op_and_builds():
    ops = {c.op for c in OP_CASES}
    assert {"conv2d", "batch_norm", "concat", "conv2d_weight_grad"} <= ops
    assert all(any(c.basic for c in OP_CASES if c.op == op) for op in ops)
    for case in cases_for({"conv2d"}):
        module = case_module(case, methods=("forward", "again"))
        assert sorted(module.methods) == ["again", "forward"]
        assert case.inputs(0)[0].dtype.name == "float32"
