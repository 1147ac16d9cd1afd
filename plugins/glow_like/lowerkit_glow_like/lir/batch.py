"""Batch slicing: whether a program may run as independent slices of its batch, and how many
of its leading instructions a slice runs image by image (:func:`head_length`).

A program is *batch-sliceable* when images of the batch never meet: every arena buffer
(inputs, activations and their reshape views) has the batch as its leading dimension, and
every instruction computes each sample from that sample alone — convolutions, pools,
element-wise ops whose constants do not vary along the batch, fully-connected layers,
and ``concat``/``split``/``transpose`` away from the leading axis (reshapes are views, whose
shapes must keep the batch leading like every arena buffer's). Such a program computes the same result
when each worker runs the whole instruction list on its own rows ``[a, b)`` of every
buffer, which is how the runtime spreads a batch over its workers (one hand-off per call
instead of one or more per instruction). Anything not known to be per-sample keeps the
program whole: the test is a whitelist.
"""

from __future__ import annotations

from math import prod

from lowerkit.backend.cpu import HEAD_MID_PIXELS, HEAD_MIN_PIXELS
from lowerkit.backend.cpu import head_length as cpu_head_length

from .program import Program

# Ops that compute each sample independently when their constant operands are not
# per-sample (checked below) and their axis attributes (below) leave the batch alone.
_PER_SAMPLE_OPS = frozenset({
    "conv2d", "glow.conv2d", "glow.gated_conv2d", "glow.depthwise_mean", "conv_transpose2d", "max_pool2d", "avg_pool2d",
    "global_avg_pool2d", "glow.fc", "linear", "glow.chain", "glow.add", "add", "sub", "mul", "div",
    "relu", "relu6", "clip", "sigmoid", "tanh", "silu", "gelu", "hardswish", "hardsigmoid",
    "leaky_relu", "erf", "exp", "sqrt", "neg", "batch_norm", "interpolate",
    "concat", "split", "transpose", "softmax", "log_softmax", "layer_norm", "scaled_dot_product_attention",
    "glow.packed_attention",
})
# Ops whose operands after the first must be constants (weights and biases): an activation
# there could be a whole-batch matrix.
_CONSTANT_OPERANDS = frozenset({"conv2d", "glow.conv2d", "glow.depthwise_mean", "conv_transpose2d", "glow.fc", "linear",
                                "batch_norm"})
# Ops with an axis attribute (name, default) that must not be the batch axis.
_AXIS_ATTRS = {"concat": ("dim", 0), "split": ("dim", 0), "softmax": ("dim", -1), "log_softmax": ("dim", -1),
               "layer_norm": ("axis", -1)}


def batch_size(program: Program) -> int:
    """The leading dimension of the program's first input (0 for a program without inputs)."""
    if not program.inputs:
        return 0
    shape = program.buffers[program.inputs[0]].shape
    return shape[0] if shape else 0


def batch_sliceable(program: Program) -> bool:
    """True if running every instruction on rows ``[a, b)`` of every arena buffer, for
    disjoint ``[a, b)`` covering the batch, computes the program's result (see the module)."""
    n = batch_size(program)
    if n < 2:
        return False
    buffers = program.buffers
    if any(b.in_arena and (not b.shape or b.shape[0] != n) for b in buffers):
        return False
    if not all(buffers[b].in_arena for b in program.outputs):
        return False  # a constant output is not the batch's rows
    for ins in program.instructions:
        if ins.op not in _PER_SAMPLE_OPS:
            return False
        out_rank = len(buffers[ins.outputs[0]].shape)
        constants = [buffers[i] for i in ins.inputs if not buffers[i].in_arena]
        if ins.op in _CONSTANT_OPERANDS:
            # A fused residual add's operand (glow.conv2d's fourth) is per sample, like the map.
            weights = ins.inputs[1:3] if ins.attrs.get("residual") else ins.inputs[1:]
            if any(buffers[i].in_arena for i in weights):
                return False
            if ins.attrs.get("residual") and not buffers[ins.inputs[3]].in_arena:
                return False
        elif ins.op == "glow.gated_conv2d":  # weight and bias constant; the gate (and a residual) per sample
            if any(buffers[i].in_arena for i in ins.inputs[1:3]) or not all(buffers[i].in_arena for i in ins.inputs[3:]):
                return False
        elif any(len(c.shape) >= out_rank and c.shape[0] != 1 for c in constants):
            return False  # a constant that differs per sample would need slicing too
        axis_attr = _AXIS_ATTRS.get(ins.op)
        if axis_attr is not None:
            rank = len(buffers[ins.inputs[0]].shape)
            axis = int(ins.attrs.get(*axis_attr))
            if rank == 0 or axis % rank == 0:
                return False
        if ins.op == "transpose":
            perm = tuple(ins.attrs.get("perm", ()))
            if not perm or perm[0] != 0:
                return False
    return True


# The ops whose 4-d operands are maps [N, C, H, W] (others, such as a channels-last
# ``glow.fc`` over [N, H, W, C], have no pixels to count).
_SPATIAL_OPS = frozenset({"conv2d", "glow.conv2d", "glow.gated_conv2d", "glow.depthwise_mean", "conv_transpose2d",
                          "max_pool2d", "avg_pool2d", "global_avg_pool2d", "interpolate"})


def head_length(program: Program, min_pixels: int = HEAD_MIN_PIXELS, mid_pixels: int = HEAD_MID_PIXELS) -> int:
    """How many leading instructions a batch slice runs image by image: through the last
    convolution, pooling or resize whose arena maps [N, C, H, W] are large
    (``lowerkit.backend.cpu.head_length``, which says when and why: at least ``min_pixels``
    pixels, or ``mid_pixels`` over maps of many more values than its constant weights)."""
    buffers = program.buffers

    def step(ins) -> tuple[list, int]:
        if ins.op not in _SPATIAL_OPS:
            return [], 0
        maps = [buffers[b].shape for b in (*ins.inputs, *ins.outputs) if buffers[b].in_arena]
        weights = sum(prod(buffers[b].shape) for b in ins.inputs[1:] if not buffers[b].in_arena)
        return maps, weights

    return cpu_head_length((step(ins) for ins in program.instructions), min_pixels, mid_pixels)
