"""Grouped and depthwise convolution on the compiled kernels of ``lowerkit.backend.cpu.jit``.

im2col + GEMM loses on these: a depthwise layer is one tiny GEMM per channel. Six
compiled kernels instead, chosen by shape (:func:`grouped_algorithm`,
``lowerkit.backend.cpu.jit.select``):

- ``depthwise_rows`` — depthwise 3x3, 5x5 or 7x7 at stride 1 (outputs at least 12 wide), 3x3 at
  stride 2 (at least 14), where vectors hold 16 floats: straight on each plane's rows, masked
  vectors;
- ``depthwise3x3_same`` — depthwise 3x3, stride 1, padding 1, on planes above 14x14: flat
  passes over each plane;
- ``depthwise3x3_s2`` — depthwise 3x3, stride 2, on the four phases of each plane (outputs
  above 14x14);
- ``depthwise_blocked`` — depthwise 3x3, 5x5 or 7x7, stride 1 or 2, undilated, otherwise: on
  channels-last blocks of 8 planes, one vector FMA per tap and pixel;
- ``depthwise_cl`` — other depthwise (one input channel per output channel) on small planes:
  a channels-last copy, taps vectorised over channels;
- ``grouped`` — any other grouped convolution with at most :data:`DIRECT_MAX_TAPS` taps
  per output (channels per group x kernel area); larger groups keep im2col + GEMM.

Bias and the fused activation are applied in the kernels. numba loads at bind time.
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu.jit.depthwise import (
    MEAN_ALGORITHMS,
    NO_MEANS,
    DepthwiseGeometry,
    blocked_weights,
    copy_in_channels_last,
    copy_out_channels_last,
    depthwise_cl_band,
    plane_means,
)
from lowerkit.backend.cpu import team_layers
from lowerkit.backend.cpu.calls import on_team
from lowerkit.backend.cpu.jit.select import depthwise_algorithm, padded_hw

from ._base import conv_geometry, kernel, scratch_array

DIRECT_MAX_TAPS = 64
PARALLEL_MIN_MACS = 1_500_000  # smaller layers run on the calling thread (team mode: team_layers.MIN_DEPTHWISE_MACS)
ALGORITHMS = ("depthwise_rows", "depthwise3x3_same", "depthwise3x3_s2", "depthwise_blocked", "depthwise_cl",
              "grouped")


def grouped_algorithm(x_shape, w_shape, out_shape, attrs) -> str | None:
    """The compiled kernel for a grouped convolution, or None to keep im2col + GEMM."""
    stride, padding, dilation, groups = conv_geometry(attrs)
    if groups == 1:
        return None
    oc, cg, kh, kw = w_shape
    c = x_shape[1]
    if cg == 1 and oc == c:
        return depthwise_algorithm(out_shape[2:], (kh, kw), stride, dilation, padding, x_shape[2:])
    if cg * kh * kw <= DIRECT_MAX_TAPS:
        return "grouped"
    return None


def grouped_scratch_bytes(x_shape, w_shape, out_shape, attrs) -> int:
    """Scratch of the channels-last kernel (padded copy + accumulator); 0 for the others."""
    algorithm = attrs.get("algo") or grouped_algorithm(x_shape, w_shape, out_shape, attrs)
    if algorithm != "depthwise_cl":
        return 0
    stride, _, dilation, _ = conv_geometry(attrs)
    hp, wp = padded_hw(out_shape[2:], w_shape[2:], stride, dilation)
    n, c = x_shape[0], x_shape[1]
    return 4 * n * c * (hp * wp + out_shape[2] * out_shape[3])


def channels_last_weights(w: np.ndarray) -> np.ndarray:
    """Depthwise weight [C, 1, KH, KW] as [KH*KW, C] for the channels-last kernel."""
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).T, dtype=np.float32)


def prepare_grouped(inputs, outputs, attrs, scratch, parallel=None, algorithm: str | None = None, team=None,
                    means: np.ndarray | None = None):
    """Bind a grouped convolution to the compiled kernel :func:`grouped_algorithm` picks
    (its team form with ``team``, for layers of at least ``team_layers.MIN_DEPTHWISE_MACS``);
    with ``means`` (float32 [N * C]) each output plane's mean too: written by the kernels of
    ``jit.depthwise.MEAN_ALGORITHMS``, by the pool's kernel after the others."""
    algorithm = algorithm or grouped_algorithm(inputs[0].shape, inputs[1].shape, outputs[0].shape, attrs)
    if means is not None and algorithm not in MEAN_ALGORITHMS:
        run = prepare_grouped(inputs, outputs, attrs, scratch, parallel, algorithm, team)

        def run_then_mean() -> None:
            run()
            plane_means(outputs[0], means)

        return run_then_mean
    from lowerkit.backend.cpu import jit

    kernels = jit.load("conv")
    x, w = inputs[0], inputs[1]
    (out,) = outputs
    bias = inputs[2].reshape(-1) if len(inputs) > 2 else np.empty(0, np.float32)
    code, p0, p1 = jit.activation_code(attrs)
    (sh, sw), (pt, pl, _, _), (dh, dw), groups = conv_geometry(attrs)
    n, c = x.shape[0], x.shape[1]
    oc, _, kh, kw = w.shape
    macs = out.size * w[0].size
    ways = parallel.ways if parallel is not None and macs >= PARALLEL_MIN_MACS else 1
    if team is not None and macs >= team_layers.MIN_DEPTHWISE_MACS and x.flags.c_contiguous:
        serial = prepare_grouped(inputs, outputs, attrs, scratch, None, algorithm, means=means)
        return _team_form(inputs, outputs, attrs, scratch, algorithm, team, serial, means)
    means = NO_MEANS if means is None else means

    if algorithm == "depthwise_cl":
        wt = channels_last_weights(w)  # bound once per thread: depthwise weights are small
        hp, wp = padded_hw(out.shape[2:], (kh, kw), (sh, sw), (dh, dw))
        xp = scratch_array(scratch, np.float32, (n, hp, wp, c))
        acc = scratch_array(scratch, np.float32, (n, out.shape[2] * out.shape[3], c), offset=xp.nbytes)
        cut = [c * j // ways for j in range(ways + 1)]

        geom = DepthwiseGeometry((kh, kw), (sh, sw), (pt, pl), (dh, dw))
        act = (code, p0, p1)

        def band(j: int) -> None:
            depthwise_cl_band(kernels, x, wt, bias, out, xp, acc, geom, act, cut[j], cut[j + 1])
    else:
        planes = n * oc
        cut = team_layers.plane_cuts(planes, oc, ways)
        if algorithm == "depthwise3x3_same":
            def band(j: int) -> None:
                kernels.depthwise3x3_same(x, w, bias, out, means, code, p0, p1, cut[j], cut[j + 1])
        elif algorithm == "depthwise3x3_s2":
            phases = [np.empty(4 * out.shape[2] * out.shape[3], np.float32) for _ in range(ways)]

            def band(j: int) -> None:
                kernels.depthwise3x3_s2(x, w, bias, phases[j], out, means, code, p0, p1, cut[j], cut[j + 1])
        elif algorithm == "depthwise_blocked":
            table, shape = team_layers.depthwise_scratch(algorithm, x.shape[2:], out.shape[2:], kh, sh, (pt, pl), ways)
            buffers = np.empty(shape, np.float32)
            blocks = blocked_weights(w, bias)

            def band(j: int) -> None:
                kernels.depthwise_blocked(x, w, bias, blocks, table, buffers[j], out, means, sh, pt, pl, code, p0, p1,
                                          cut[j], cut[j + 1])
        elif algorithm == "depthwise_rows":
            _, shape = team_layers.depthwise_scratch(algorithm, x.shape[2:], out.shape[2:], kh, sh, (pt, pl), ways)
            buffers = np.empty(shape, np.float32)

            def band(j: int) -> None:
                kernels.depthwise_rows(x, w, bias, buffers[j], out, means, sh, pt, pl, code, p0, p1, cut[j],
                                       cut[j + 1])
        else:
            def band(j: int) -> None:
                kernels.conv2d_grouped(x, w, bias, out, sh, sw, pt, pl, dh, dw, groups, code, p0, p1,
                                       cut[j], cut[j + 1])

    if ways == 1:
        return lambda: band(0)
    return lambda: parallel(band)


def _team_form(inputs, outputs, attrs, scratch, algorithm: str, team, serial, means=None):
    """One team region per call (``lowerkit.backend.cpu.jit.team``): bands of planes, or of
    channels for the channels-last kernel, whose copies in and out stay on the calling thread."""
    from lowerkit.backend.cpu import jit

    kernels = team.kernels()
    x, w = inputs[0], inputs[1]
    (out,) = outputs
    bias = inputs[2].reshape(-1) if len(inputs) > 2 else np.empty(0, np.float32)
    code, p0, p1 = jit.activation_code(attrs)
    (sh, sw), (pt, pl, _, _), (dh, dw), groups = conv_geometry(attrs)
    n, c = x.shape[0], x.shape[1]
    _, _, kh, kw = w.shape
    ways = team.ways
    if algorithm == "depthwise_cl":
        wt = channels_last_weights(w)
        hp, wp = padded_hw(out.shape[2:], (kh, kw), (sh, sw), (dh, dw))
        xp = scratch_array(scratch, np.float32, (n, hp, wp, c))
        acc = scratch_array(scratch, np.float32, (n, out.shape[2] * out.shape[3], c), offset=xp.nbytes)
        geom = DepthwiseGeometry((kh, kw), (sh, sw), (pt, pl), (dh, dw))
        oh, ow = out.shape[2], out.shape[3]

        def region():
            copy_in_channels_last(x, xp, geom, 0, c)
            kernels.depthwise_channels_last(xp, wt, bias, acc, oh, ow, kh, kw, sh, sw, dh, dw, code, p0, p1, ways)
            copy_out_channels_last(acc, out, 0, c)
    elif algorithm in team_layers.DEPTHWISE_ALGORITHMS:
        table, shape = team_layers.depthwise_scratch(algorithm, x.shape[2:], out.shape[2:], kh, sh, (pt, pl), ways)
        buffers = None if shape is None else np.empty(shape, np.float32)
        blocks = blocked_weights(w, bias) if algorithm == "depthwise_blocked" else None

        region = team_layers.bind_depthwise(team, algorithm, x, w, bias, out, table, buffers, sh, (pt, pl),
                                            (code, p0, p1), blocks, means)
    else:
        def region():
            kernels.conv2d_grouped(x, w, bias, out, sh, sw, pt, pl, dh, dw, groups, code, p0, p1, ways)

    return on_team(team, region, serial)


def prepare_depthwise_mean(inputs, outputs, attrs, scratch, parallel=None, team=None):
    """``glow.depthwise_mean(x, w[, bias])``: the depthwise convolution into ``outputs[0]`` and
    its planes' means into ``outputs[1]`` [N, C, 1, 1] (``passes.means`` made the instruction
    from a convolution and the global average pool of its output)."""
    out, pooled = outputs
    means = pooled.reshape(-1)
    if not np.shares_memory(means, pooled):
        raise ValueError("glow.depthwise_mean: the means output must be contiguous")
    return prepare_grouped(inputs, [out], attrs, scratch, parallel, team=team, means=means)


def _depthwise_mean_scratch(in_types, out_types, attrs) -> int:
    return grouped_scratch_bytes(in_types[0].shape, in_types[1].shape, out_types[0].shape, attrs)


kernel("glow.depthwise_mean", scratch_bytes=_depthwise_mean_scratch, parallel=True, team=True)(prepare_depthwise_mean)
