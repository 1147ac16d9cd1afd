"""Attention is one op a backend may claim; for backends that do not, partitioning decomposes
it into matmul, softmax and friends (lowerkit.opset.decompose), leaving the user's module alone."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import ops
from lowerkit.ir.verify import verify_graph
from lowerkit.opset.decompose import decompose_unclaimed

pytest.importorskip("lowerkit_reference")

BASIC = {"transpose", "matmul", "mul", "add", "where", "softmax"}


def _attention_module(mask: str):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 4, 8)).astype(np.float32) for _ in range(3))
    bool_mask = rng.random((4, 4)) > 0.3
    bool_mask[:, 0] = True
    float_mask = rng.standard_normal((4, 4)).astype(np.float32)

    def attend(a, b, c):
        if mask == "bool":
            return ops.scaled_dot_product_attention(a, b, c, bool_mask)
        if mask == "float":
            return ops.scaled_dot_product_attention(a, b, c, float_mask, scale=0.2)
        return ops.scaled_dot_product_attention(a, b, c, is_causal=True)

    return lk.trace(attend, q, k, v), (q, k, v)


@pytest.mark.parametrize("mask", ["bool", "float", "causal"])
def test_a_backend_without_attention_gets_the_decomposition(subset_backends, mask):
    module, inputs = _attention_module(mask)
    subset_backends("basic", BASIC)
    lowered = lk.to_backend(module, ["basic"])
    np.testing.assert_allclose(lowered(*inputs), module(*inputs), rtol=1e-5, atol=1e-6)
    taken = {op for region in lowered.partition_report().regions for op in region.ops}
    assert "scaled_dot_product_attention" not in taken and {"matmul", "softmax"} <= taken
    assert "scaled_dot_product_attention" in {n.op for n in lk.graph_of(module).nodes}  # untouched


def test_a_backend_that_claims_attention_gets_it_whole(subset_backends):
    module, inputs = _attention_module("bool")
    subset_backends("fused", BASIC | {"scaled_dot_product_attention"})
    lowered = lk.to_backend(module, ["fused"])
    taken = {op for region in lowered.partition_report().regions for op in region.ops}
    assert taken == {"scaled_dot_product_attention"}
    np.testing.assert_allclose(lowered(*inputs), module(*inputs), rtol=1e-5, atol=1e-6)


def test_decompose_unclaimed_copies_and_verifies():
    module, _ = _attention_module("float")
    graph = lk.graph_of(module)
    assert decompose_unclaimed(graph, lambda node: True) is graph  # claimed: nothing to do
    rewritten = decompose_unclaimed(graph, lambda node: False)
    assert rewritten is not graph
    assert [n.op for n in rewritten.nodes if n.op not in ("constant", "param")] == [
        "transpose", "matmul", "mul", "add", "softmax", "matmul"]
    verify_graph(rewritten)
    handles = [n.debug_handle for n in rewritten.nodes]
    assert len(handles) == len(set(handles))
    assert [n.op for n in graph.nodes if n.op != "constant"] == ["scaled_dot_product_attention"]


def test_unclaimed_pieces_are_still_listed(subset_backends):
    module, _ = _attention_module("causal")
    subset_backends("nosoftmax", BASIC - {"softmax"})
    with pytest.raises(lk.UnsupportedOperatorError, match="softmax"):
        lk.to_backend(module, ["nosoftmax"])
