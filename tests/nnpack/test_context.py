"""nnpack's claims in their graph (lowerkit_nnpack.context): a node that would start a region
in the middle of another backend's work is declined unless it is a dense convolution heavy
enough to pay for the boundary, and so is a group of nodes too light for its region beside
another backend's; the hook sees the graph only where its answer chooses between backends.
The tests' layers are small: most set the bound (``LOWERKIT_NNPACK_REGION_MACS``) to fit
them. No timings."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import TensorType

nnpack = pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("numba")

from lowerkit_nnpack import context  # noqa: E402
from tests.nnpack.test_claims import Builder, _regions  # noqa: E402


_POOL = {"kernel_size": (1, 1), "stride": (1, 1)}


# The bound the tests set: over the 1x1 layers' 2304 multiply-adds, under the 3x3 ones' 20736.
BOUND = "10000"


def _after_an_average_pool(shape, oc, k=1, then_relu=True):
    """x -> 3x3 conv -> relu -> avg_pool2d (nnpack declines it) -> k x k conv (-> relu)."""
    b = Builder(shape)
    y = b.op("avg_pool2d", [b.op("relu", [b.conv(b.x, shape[1], k=3)])], _POOL)
    y = b.conv(y, oc, k=k)
    return b, (b.op("relu", [y]) if then_relu else y)


def _answers(b):
    return {n.debug_handle: lk.backend.get_backend("nnpack").supports(n, b.g) for n in b.g.nodes
            if n.op not in ("param", "constant")}


def test_a_light_convolution_after_a_declined_node_is_declined_with_the_reason(monkeypatch):
    monkeypatch.setenv(context.REGION_MACS_ENV, BOUND)
    b, out = _after_an_average_pool((1, 8, 6, 6), 8)
    module = b.module(out)
    answers = _answers(b)
    ops = {n.debug_handle: n.op for n in b.g.nodes}
    second_conv = max(h for h, op in ops.items() if op == "conv2d")
    ok, reason = answers[second_conv]
    assert not ok and "start a region of its own" in reason and "0.01M multiply-adds an image (this one 0.0023M)" in reason
    assert not answers[max(ops)][0]  # the ReLU after it: its input's producer is declined
    first_conv = min(h for h, op in ops.items() if op == "conv2d")
    assert answers[first_conv][0]  # fed by the method's input
    # Alone, the same nodes are claimed: the rule is about the graph, not the op.
    node = next(n for n in b.g.nodes if n.debug_handle == second_conv)
    assert nnpack.lowerkit_is_supported(node=node, graph=None) is True
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert [r[0] for r in _regions(lowered)] == ["nnpack", "glow_like"]
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-5)


def test_a_heavy_dense_convolution_starts_a_region(monkeypatch):
    monkeypatch.setenv(context.REGION_MACS_ENV, BOUND)
    b, out = _after_an_average_pool((1, 8, 6, 6), 8, k=3)
    module = b.module(out)
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert [r[0] for r in _regions(lowered)] == ["nnpack", "glow_like", "nnpack"]
    assert _regions(lowered)[2][1] == ("conv2d", "relu")


def test_a_second_method_input_lets_nodes_continue(monkeypatch):
    """A node reading a method input continues: the add joins its second operand from the
    input, so the convolution after it is nnpack's again."""
    monkeypatch.setenv(context.REGION_MACS_ENV, BOUND)
    b = Builder((1, 8, 6, 6))
    skip = b.g.add_input("skip", TensorType("f32", (1, 8, 6, 6)))
    y = b.op("avg_pool2d", [b.conv(b.x, 8, k=3)], _POOL)
    y = b.op("relu", [b.conv(b.op("add", [y, skip]), 8, k=3)])
    module = b.module(y)
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert [r[0] for r in _regions(lowered)] == ["nnpack", "glow_like", "nnpack"]
    assert _regions(lowered)[2][1] == ("add", "conv2d", "relu")


def test_the_graph_reaches_the_hook_only_where_the_answer_chooses_a_backend(monkeypatch):
    """assign_backends hands the hook the graph, or None (``with_graph=False``: one backend,
    or chosen submodules — tests/cli's selective lowering keeps nnpack's linear after an
    un-lowered flatten)."""
    monkeypatch.setenv(context.REGION_MACS_ENV, BOUND)
    b, out = _after_an_average_pool((1, 8, 6, 6), 8)
    module = b.module(out)
    part = lk.to_backend(module, ["nnpack", "reference"])
    assert [r[0] for r in _regions(part)] == ["nnpack", "reference"]  # two backends: the graph decides
    seen = []
    original = context.context_reason
    monkeypatch.setattr(context, "context_reason", lambda node, graph: (seen.append(graph), original(node, graph))[1])
    from lowerkit.lowering.partitioned import _support_query
    from lowerkit.partition.assign import Candidate, assign_backends

    query = _support_query(lk.backend.get_backend("nnpack"))
    assign_backends(b.g, [Candidate("nnpack", query)], with_graph=False)
    assert not seen
    assign_backends(b.g, [Candidate("nnpack", query)])
    assert seen and all(g is b.g for g in seen)


def test_the_memo_follows_an_edited_graph(monkeypatch):
    monkeypatch.setenv(context.REGION_MACS_ENV, BOUND)
    b, out = _after_an_average_pool((1, 8, 6, 6), 8)
    b.module(out)
    conv = [n for n in b.g.nodes if n.op == "conv2d"][1]
    assert context.context_reason(conv, b.g) is not None
    # Feed the second convolution from the first one's ReLU instead: it continues now.
    relu = next(n for n in b.g.nodes if n.op == "relu")
    pool = next(n for n in b.g.nodes if n.op == "avg_pool2d")
    conv.inputs[0] = relu.output
    b.g.nodes.remove(pool)
    assert context.context_reason(conv, b.g) is None


def test_multiply_adds_count_a_symbolic_batch_as_one():
    b = Builder(("N", 4, 5, 5))
    b.conv(b.x, 6, k=3)
    conv = next(n for n in b.g.nodes if n.op == "conv2d")
    assert context.multiply_adds(conv) == 6 * 5 * 5 * 4 * 9


def test_a_group_too_light_for_its_region_goes_with_the_rest(monkeypatch):
    """Beside another backend, the nodes nnpack could run before the average pooling do
    20736 multiply-adds: under a bound of 20737 they are declined too, and glow_like takes
    the whole graph; a graph nnpack takes whole keeps its region whatever its work."""
    b, out = _after_an_average_pool((1, 8, 6, 6), 8)
    module = b.module(out)
    monkeypatch.setenv(context.REGION_MACS_ENV, "20736")
    assert [r[0] for r in _regions(lk.to_backend(module, ["nnpack", "glow_like"]))] == ["nnpack", "glow_like"]
    monkeypatch.setenv(context.REGION_MACS_ENV, "20737")
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert [r[0] for r in _regions(lowered)] == ["glow_like"]
    first_conv = next(n for n in b.g.nodes if n.op == "conv2d")
    ok, reason = lk.backend.get_backend("nnpack").supports(first_conv, b.g)
    assert not ok and "0.0207M multiply-adds an image in all" in reason
    whole = Builder((1, 8, 6, 6))
    small = whole.module(whole.op("relu", [whole.conv(whole.x, 8)]))
    assert [r[0] for r in _regions(lk.to_backend(small, ["nnpack", "glow_like"]))] == ["nnpack"]


@pytest.mark.parametrize("batch", [1, 4])
def test_the_bound_is_per_image_so_a_batch_splits_the_graph_as_one_image_does(monkeypatch, batch):
    """The same graph at batch 1 and 4 under a bound of 20737 (the group does 20736 an
    image): glow_like takes all of it at both — counted over the batch, the group of four
    images would have paid for its boundaries."""
    monkeypatch.setenv(context.REGION_MACS_ENV, "20737")
    b, out = _after_an_average_pool((batch, 8, 6, 6), 8)
    lowered = lk.to_backend(b.module(out), ["nnpack", "glow_like"])
    assert [r[0] for r in _regions(lowered)] == ["glow_like"]
    first_conv = next(n for n in b.g.nodes if n.op == "conv2d")
    assert context.image_multiply_adds(first_conv) == 20736
    assert context.multiply_adds(first_conv) == 20736 * batch


def test_multiply_adds_of_a_linear_layer_and_a_convolution_s_gradients():
    b = Builder((2, 5, 7))
    b.op("linear", [b.x, b.param((3, 7))])
    assert context.multiply_adds(b.g.nodes[-1]) == 2 * 5 * 3 * 7
    conv = Builder((1, 4, 5, 5))
    conv.conv(conv.x, 6, k=3)
    forward = next(n for n in conv.g.nodes if n.op == "conv2d")
    weight, grad_out = forward.inputs[1], forward.outputs[0]
    grad_in = conv.op("conv2d_input_grad", [weight, grad_out],
                      {"input_size": (1, 4, 5, 5), "padding": (1, 1, 1, 1)})
    grad_w = conv.op("conv2d_weight_grad", [conv.x, grad_out], {"weight_size": (6, 4, 3, 3), "padding": (1, 1, 1, 1)})
    macs = [context.multiply_adds(n) for n in conv.g.nodes if n.op.startswith("conv2d")]
    assert macs == [6 * 5 * 5 * 4 * 9] * 3 and grad_in.type.shape == (1, 4, 5, 5) and grad_w.type.shape == (6, 4, 3, 3)


def test_a_bound_that_is_not_a_whole_number_is_an_error_naming_the_variable(monkeypatch):
    """Partitioning reports the hook's error as nnpack's reason for each node it declines."""
    monkeypatch.setenv(context.REGION_MACS_ENV, "1e8")
    b, out = _after_an_average_pool((1, 8, 6, 6), 8)
    lowered = lk.to_backend(b.module(out), ["nnpack", "glow_like"])
    assert [r[0] for r in _regions(lowered)] == ["glow_like"]
    reasons = [d.reason for n in lowered.partition_report().nodes for d in n.declines if d.backend == "nnpack"]
    assert reasons and all("LOWERKIT_NNPACK_REGION_MACS must be a whole number" in r and "'1e8'" in r for r in reasons)
