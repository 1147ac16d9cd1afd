"""Depthwise convolution — an extension: NNPACK has none (its convolutions are dense).

Runs on the compiled kernels of ``lowerkit.backend.cpu.jit.conv`` (numba, loaded when the
layer is built, i.e. at compile): flat passes over each plane for 3x3 stride 1 padding 1,
the four phases of each plane for 3x3 stride-2 ones (both on planes above 14x14),
channels-last blocks of 8 planes for every other 3x3, 5x5 or 7x7 stride 1 or 2 kernel, a
channels-last copy for other small planes, the generic direct kernel otherwise (see
``lowerkit.backend.cpu.jit.select``); bias and the fused activation are applied inside.
Work is split over the shared pool by output planes (or channel bands), on the calling
thread alone below ``min(min_parallel_flops, DEPTHWISE_PARALLEL_MIN_FLOPS)`` and
``DEPTHWISE_PARALLEL_MIN_INPUTS`` input floats.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lowerkit.backend.cpu import make_team, run_parallel, split, team_layers
from lowerkit.backend.cpu.jit.depthwise import (
    MEAN_ALGORITHMS,
    NO_BLOCKS,
    NO_MEANS,
    DepthwiseGeometry,
    blocked_weights,
    depthwise_cl_band,
    plane_means,
)
from lowerkit.backend.cpu.jit.select import depthwise_algorithm, padded_hw

from .activations import NONE, RELU, add_activate
from .bound import Call, with_residual
from .conv import RunOptions
from .geometry import ConvGeometry, GeometryError
from .team import TeamDepthwise
from .workspace import Workspace


# A layer goes to the pool's workers from this many FLOPs, or this many input floats (the
# large planes, memory-bound): below, a hand-off costs more than the second core gives back.
# One thread / two workers, µs, batch 1 (the compiled kernels, 2026-12-04): 7x7 384x14x14
# (7.4 MFLOP) 130 / 160, 3x3 32x112x112 141 / 149, 5x5 240x28x28 175 / 177; 7x7 96x56x56
# (29.5 MFLOP) 414 / 292, 3x3 96x112x112 stride 2 (1.2M inputs) 239 / 205. The bound was 3
# MFLOP before the kernels were this fast. Batch 8 (2026-12-05, four runs): 3x3 576x14x14
# stride 2 (4.1 MFLOP, 0.9M inputs) 246-294 / 222-265 (once 377) — the input bound was 1M
# floats; the batch-1 layers of 0.4-0.45M (32x112x112, 144x56x56) stay on one thread, and so
# does 3x3 960x7x7 at batch 8 (0.38M: 258-341 / 200-244) with them.
DEPTHWISE_PARALLEL_MIN_FLOPS = 16_000_000
DEPTHWISE_PARALLEL_MIN_INPUTS = 500_000
_FLOAT32 = np.dtype(np.float32)


class DepthwiseConv2d:
    """A depthwise convolution (weight [C, 1, KH, KW]) compiled for one geometry."""

    def __init__(
        self,
        geom: ConvGeometry,
        weight: np.ndarray | None,
        bias: np.ndarray | None = None,
        *,
        dilation: tuple[int, int] = (1, 1),
        relu: bool = False,
        options: RunOptions = RunOptions(),
        workspace: Workspace | None = None,
        activation: tuple[int, float, float] | None = None,
        team: bool = True,
    ) -> None:
        from lowerkit.backend.cpu import jit

        if geom.in_channels != geom.out_channels:
            raise GeometryError(
                f"depthwise convolution needs as many output as input channels, got "
                f"{geom.in_channels} -> {geom.out_channels}"
            )
        self.kernels = jit.load("conv")
        self.geom, self.dilation, self.options = geom, tuple(dilation), options
        self.activation = activation if activation is not None else (RELU if relu else NONE)
        self.relu = self.activation == RELU
        self._out_hw = geom.out_hw  # computed once: read on every call
        self.algorithm = depthwise_algorithm(geom.out_hw, geom.kernel, geom.stride, self.dilation, geom.padding,
                                             geom.in_hw)
        self.weight = None if weight is None else np.ascontiguousarray(weight, dtype=np.float32)
        self.weight_t = None if self.weight is None else self._channels_last(self.weight)
        self.bias = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)
        self.ws = workspace if workspace is not None else Workspace()
        # depthwise_blocked's pixel table, its (or depthwise_rows's) scratch floats per worker
        self.table, self.scratch_floats = None, 0
        self.blocks = None  # depthwise_blocked's weights and bias in its blocks' layout (the layer's own)
        if self.algorithm in ("depthwise_blocked", "depthwise_rows"):
            self.table, (_, self.scratch_floats) = team_layers.depthwise_scratch(
                self.algorithm, geom.in_hw, geom.out_hw, geom.kernel[0], geom.stride[0], geom.padding, 1)
        if self.algorithm == "depthwise_blocked" and self.weight is not None:
            self.blocks = blocked_weights(self.weight, self.bias)
        # With several workers, a call of at least team_layers.MIN_DEPTHWISE_MACS runs as one
        # team region (bands of planes; lowerkit.backend.cpu.make_team) where team kernels run
        # here: a pool hand-off costs ~0.1 ms on a 2-core VM, a region ~3.5 us, so small layers
        # gain a second core too. Plans pass team=False: they run the layer on one thread or
        # wrap it in their own team form (team.TeamDepthwise), under the plan's stall guard.
        self._macs_per_image = geom.out_channels * geom.out_hw[0] * geom.out_hw[1] * geom.kernel[0] * geom.kernel[1]
        self._team_form: TeamDepthwise | None = None  # the layer's own team form (the kernel API's)
        if team and options.workers > 1 and self.algorithm in team_layers.DEPTHWISE_ALGORITHMS:
            found = make_team(options.workers)
            self._team_form = None if found is None else TeamDepthwise(self, found)

    def output_shape(self, batch: int) -> tuple[int, int, int, int]:
        return (batch, self.geom.out_channels, *self.geom.out_hw)

    @staticmethod
    def _channels_last(weight: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(weight.reshape(weight.shape[0], -1).T)

    def __call__(
        self, x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None,
        residual: np.ndarray | None = None, out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Convolve ``x`` (into ``out`` if given: float32, C order, the output's shape);
        ``residual`` (shaped like the output) is added before the activation."""
        g = self.geom
        if x.ndim != 4 or x.shape[1] != g.in_channels or tuple(x.shape[2:]) != g.in_hw:
            raise GeometryError(
                f"input must have shape [N, {g.in_channels}, {g.in_hw[0]}, {g.in_hw[1]}], got {list(x.shape)}"
            )
        w = self.weight if weight is None else np.ascontiguousarray(weight, dtype=np.float32)
        if w is None:
            raise GeometryError("this convolution was compiled without a weight; pass weight=")
        b = self.bias if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)
        x = np.ascontiguousarray(x, dtype=np.float32)
        n, c = x.shape[0], g.in_channels
        oh, ow = self._out_hw
        if out is None:
            out = np.empty((n, c, oh, ow), dtype=np.float32)
        elif out.shape != (n, c, oh, ow) or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise GeometryError(f"out must be a C-ordered float32 [{n}, {c}, {oh}, {ow}] array, got {out.shape}")
        return self._run(x, w, b, out, residual, self.weight_t if weight is None else None)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None,
                 means: np.ndarray | None = None) -> np.ndarray:
        """A plan's call (the layer's own weight and bias, ``out`` a C-contiguous float32 buffer
        of the output's shape): straight to the kernels, without :meth:`__call__`'s checks.
        ``means`` (float32 [N, C, 1, 1], contiguous; no ``residual`` with it): each output
        plane's mean as well, a squeeze-excitation pool fused into the layer (the plan's)."""
        if means is not None and residual is not None:
            raise GeometryError("a depthwise layer's plane means are of its activated output: no residual with them")
        if x.dtype is not _FLOAT32 or not x.flags.c_contiguous or self.weight is None:
            self(x, residual=residual, out=out)
            if means is not None:
                plane_means(out, means)
            return out
        return self._run(x, self.weight, self.bias, out, residual, self.weight_t, means)

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None,
             means: np.ndarray | None = None) -> Call | None:
        """:meth:`run_into` on these very arrays as a zero-argument call (see :mod:`.bound`):
        the compiled kernel's call with its arguments gathered, for a layer that stays on the
        calling thread on one of the plane kernels; else None."""
        if (x.dtype is not _FLOAT32 or not x.flags.c_contiguous or self.weight is None or self._team_form is not None
                or self._workers_for(x) > 1):
            return None
        n, c = x.shape[0], self.geom.in_channels
        code, p0, p1 = self.activation if residual is None else (0, 0.0, 0.0)
        k, w, b = self.kernels, self.weight, self.bias
        sh, (pt, pl) = self.geom.stride[0], self.geom.padding[:2]
        means = NO_MEANS if means is None else means.reshape(-1)
        if self.algorithm == "depthwise3x3_same":
            call = partial(k.depthwise3x3_same, x, w, b, out, means, code, p0, p1, 0, n * c)
        elif self.algorithm == "depthwise3x3_s2":
            phases = self.ws.get("dw_phases", (1, 4 * self._out_hw[0] * self._out_hw[1]))
            call = partial(k.depthwise3x3_s2, x, w, b, phases[0], out, means, code, p0, p1, 0, n * c)
        elif self.algorithm == "depthwise_blocked":
            buffers = self.ws.get("dw_blocked", (1, self.scratch_floats))
            blocks = NO_BLOCKS if self.blocks is None else self.blocks
            call = partial(k.depthwise_blocked, x, w, b, blocks, self.table, buffers[0], out, means, sh, pt, pl,
                           code, p0, p1, 0, n * c)
        elif self.algorithm == "depthwise_rows":
            buffers = self.ws.get("dw_rows", (1, self.scratch_floats))
            call = partial(k.depthwise_rows, x, w, b, buffers[0], out, means, sh, pt, pl, code, p0, p1, 0, n * c)
        else:
            return None
        return with_residual(call, out, residual, self.activation)

    def _workers_for(self, x: np.ndarray) -> int:
        """The workers a call on ``x`` (checked, float32) splits over: 1 below the pool bounds."""
        least = min(self.options.min_parallel_flops, DEPTHWISE_PARALLEL_MIN_FLOPS)
        large = 2 * x.shape[0] * self._macs_per_image >= least or x.size >= DEPTHWISE_PARALLEL_MIN_INPUTS
        return self.options.workers if large else 1

    def _run(self, x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray, residual: np.ndarray | None,
             wt: np.ndarray | None, means: np.ndarray | None = None) -> np.ndarray:
        """The convolution of a checked, C-contiguous float32 ``x`` into ``out`` (``wt``: ``w``
        channels-last, or None to make it here): one team region where the layer has a team
        and the call is large enough (the team's stall guard times every such call, and
        while it holds the team off the pool's workers take it), else :meth:`_run_pool`."""
        form = self._team_form
        if form is None or x.shape[0] * self._macs_per_image < team_layers.MIN_DEPTHWISE_MACS:
            return self._run_pool(x, w, b, out, residual, wt, means)
        guard = form.team.guard
        start = guard.begin()
        if form.team.usable():
            form._region(x, out, residual, w, b, means)
        else:
            self._run_pool(x, w, b, out, residual, wt, means)
        guard.end(start)
        return out

    def _run_pool(self, x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray, residual: np.ndarray | None,
                  wt: np.ndarray | None, means: np.ndarray | None = None) -> np.ndarray:
        """:meth:`_run` on the calling thread, or in bands on the pool's workers from
        :data:`DEPTHWISE_PARALLEL_MIN_FLOPS` or :data:`DEPTHWISE_PARALLEL_MIN_INPUTS`."""
        kernel_means = NO_MEANS if means is None or self.algorithm not in MEAN_ALGORITHMS else means.reshape(-1)
        g = self.geom
        n, c = x.shape[0], g.in_channels
        (oh, ow), (kh, kw), (sh, sw) = self._out_hw, g.kernel, g.stride
        pt, pl = g.padding[0], g.padding[1]
        dh, dw = self.dilation
        code, p0, p1 = self.activation if residual is None else (0, 0.0, 0.0)
        workers = self._workers_for(x)
        k = self.kernels
        if self.algorithm == "depthwise_cl":
            wt = self._channels_last(w) if wt is None else wt
            hp, wp = padded_hw((oh, ow), (kh, kw), (sh, sw), (dh, dw))
            xp = self.ws.get("dw_pad", (n, hp, wp, c))
            acc = self.ws.get("dw_acc", (n, oh * ow, c))

            geom = DepthwiseGeometry((kh, kw), (sh, sw), (pt, pl), (dh, dw))

            def band(s: slice) -> None:
                depthwise_cl_band(k, x, wt, b, out, xp, acc, geom, (code, p0, p1), s.start, s.stop)

            run_parallel(workers, band, split(c, workers))
        elif self.algorithm == "depthwise3x3_same":
            def same_band(s: slice) -> None:
                k.depthwise3x3_same(x, w, b, out, kernel_means, code, p0, p1, s.start, s.stop)

            run_parallel(workers, same_band, split(n * c, workers))
        elif self.algorithm == "depthwise3x3_s2":
            phases = self.ws.get("dw_phases", (workers, 4 * oh * ow))  # one row per worker
            parts = split(n * c, workers, keep_empty=True)

            def phase_band(j: int) -> None:
                k.depthwise3x3_s2(x, w, b, phases[j], out, kernel_means, code, p0, p1, parts[j].start, parts[j].stop)

            run_parallel(workers, phase_band, range(workers))
        elif self.algorithm == "depthwise_blocked":
            table = self.table
            buffers = self.ws.get("dw_blocked", (workers, self.scratch_floats))  # a row per worker
            blocks = self.blocks if w is self.weight and b is self.bias and self.blocks is not None else NO_BLOCKS
            if workers == 1:  # the small layers: no band machinery (~2 us of Python a call)
                k.depthwise_blocked(x, w, b, blocks, table, buffers[0], out, kernel_means, sh, pt, pl, code, p0, p1, 0,
                                    n * c)
            else:
                cuts = team_layers.plane_cuts(n * c, c, workers)

                def blocked_band(j: int) -> None:
                    k.depthwise_blocked(x, w, b, blocks, table, buffers[j], out, kernel_means, sh, pt, pl, code, p0, p1,
                                        cuts[j], cuts[j + 1])

                run_parallel(workers, blocked_band, range(workers))
        elif self.algorithm == "depthwise_rows":
            buffers = self.ws.get("dw_rows", (workers, self.scratch_floats))  # a row per worker
            cuts = team_layers.plane_cuts(n * c, c, workers)

            def rows_band(j: int) -> None:
                k.depthwise_rows(x, w, b, buffers[j], out, kernel_means, sh, pt, pl, code, p0, p1, cuts[j],
                                 cuts[j + 1])

            run_parallel(workers, rows_band, range(workers))
        else:
            run_parallel(workers, lambda s: k.conv2d_grouped(x, w, b, out, sh, sw, pt, pl, dh, dw, c, code, p0, p1,
                                                             s.start, s.stop), split(n * c, workers))
        if residual is not None:  # the kernels end with the activation: sum, then activate
            add_activate(out, residual, self.activation)
        if means is not None and kernel_means is NO_MEANS:  # a kernel without means
            plane_means(out, means)
        return out

