"""The text form and verifier on traced reference networks (ResNet-18, the small CNN)."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import format_graph, graph_diff, graphs_equal, parse_graph, verify_module

models = pytest.importorskip("lowerkit.models")


@pytest.mark.parametrize(
    "build, shape", [("small_cnn", (1, 3, 8, 8)), ("resnet18", (1, 3, 224, 224))]
)
def test_traced_models_verify_and_round_trip(build, shape):
    module = lk.trace(getattr(models, build)(), np.zeros(shape, np.float32))
    verify_module(module)
    graph = lk.graph_of(module, "forward")
    text = format_graph(graph)
    name, parsed, returns_tuple = parse_graph(text)
    assert (name, returns_tuple) == ("forward", False)
    assert graphs_equal(graph, parsed), graph_diff(graph, parsed)
    assert format_graph(parsed) == text
    assert "method forward(%x: f32[" in str(module)
