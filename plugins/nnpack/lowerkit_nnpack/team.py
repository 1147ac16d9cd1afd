"""Team forms of nnpack's layers, for a plan that runs one image (or fewer images than
workers) on several cores: each layer is one compiled parallel region of the shared CPU
support (``lowerkit.backend.cpu.jit.team``), BLAS at one thread — as glow_like does (see
docs/glow_like.md, "Threads").

- Winograd ``wt6x6`` (F(4x4, 3x3), whose transforms nnpack shares with glow_like): the input
  transform in bands of input channels, then per band of output channels its 36 channel
  GEMMs and output transform;
- implicit GEMM and direct (1x1) convolutions: the GEMM in bands of output channels (or of
  pixels, for few channels over many inputs) with the band's bias and activation on its
  thread; large outputs as implicit GEMM in tiles (im2col of a few output rows, multiplied
  while in cache) — NNPACK's implicit GEMM, split between threads without a pool hand-off;
- depthwise convolutions: bands of planes.

(Fully-connected layers choose their team regions themselves: ``linear_step.LinearStep``.)

A fused residual is added in the region where the form can (Winograd's output transform, the
panel GEMM's tiles), else after it, with the activation, in one compiled pass. Each
form falls back to the layer's own call while the plan's ``StallGuard`` has turned team
regions off, or in a forked child.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lowerkit.backend.cpu import Team, aligned_empty, jit, team_layers
from lowerkit.backend.cpu.calls import on_team, sequence
from lowerkit.backend.cpu.gemm import matmul_into

from .activations import NONE, add_activate
from .bound import Call, with_residual

# The shared choices (sizes below which a layer stays on the calling thread, tiling, column
# bands) are ``lowerkit.backend.cpu.team_layers``'s, as glow_like's team forms use them.

ALGORITHMS = ("implicit_gemm", "direct", "wt6x6")  # the convolutions with a team form
_FLOAT32 = np.dtype(np.float32)
# A gated 1x1 layer off the team whose map dies at it scales the map in place, one panel GEMM
# over its images then, unless its maps have this many pixels per output channel or more:
# then each image's gate scales a copy of the packed weight instead (see _serial_gated).
WEIGHT_GATE_PIXELS_PER_ROW = 8


class TeamConv:
    """An implicit-GEMM, direct or ``wt6x6`` :class:`~lowerkit_nnpack.conv.Conv2d` as team
    regions (one; two for Winograd: its input transform by input channels, then per band of
    output channels the 36 channel GEMMs and the output transform)."""

    def __init__(self, conv, team: Team) -> None:
        g = conv.geom
        self.conv, self.team = conv, team
        self.winograd = conv.algorithm == "wt6x6"
        self.pointwise = False
        # Set by the plan for a gated 1x1 layer whose map dies at it (plan._scales_in_place):
        # off the team, the gate may then scale the map in place (see _serial_gated).
        self.gate_in_place = False
        if self.winograd:
            self._init_winograd(conv, team)
            return
        self.w2 = np.ascontiguousarray(conv.impl.kernel_data(None), dtype=np.float32)
        self.bias = conv.bias if conv.bias is not None else np.empty(0, np.float32)
        self.activation = conv.impl.activation
        oc, k = self.w2.shape
        self.form = team_layers.DenseTeamForm.of(oc, k, g.kernel, g.stride, g.padding, (1, 1), g.out_hw, team.ways,
                                                 in_hw=g.in_hw)
        self.pointwise = self.form.pointwise
        self.packed = self.form.pack(self.w2, self.bias)  # a gated call scales w2: sgemm then
        self.ws = conv.impl.ws  # per-thread scratch: a plan serves concurrent callers

    def output_shape(self, batch: int) -> tuple[int, int, int, int]:
        return self.conv.output_shape(batch)

    def _init_winograd(self, conv, team: Team) -> None:
        g, impl = conv.geom, conv.impl
        self.u = np.ascontiguousarray(impl.kernel_data(None), dtype=np.float32)  # [36, OC, C]
        self.bias = conv.bias if conv.bias is not None else np.empty(0, np.float32)
        self.activation = impl.activation
        self.tiles = impl.tiles
        self.padding = tuple(g.padding)
        self.ws = impl.ws  # per-thread scratch: a plan serves concurrent callers

    def _winograd_buffers(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """This thread's scratch for the Winograd regions of ``x`` (team_layers.winograd_shapes)."""
        th, tw = self.tiles
        shapes = team_layers.winograd_shapes(x.shape[1], self.u.shape[1], x.shape[0] * th * tw, (th, tw),
                                             self.team.ways)
        return {name: self.ws.get("team_" + name, shape) for name, shape in shapes.items()}

    def _winograd_weights(self, x: np.ndarray):
        """``u`` as the regions multiply it for ``x`` (team_layers.winograd_weights)."""
        th, tw = self.tiles
        return team_layers.winograd_weights(self.u, x.shape[0] * th * tw)

    def _winograd(self, x: np.ndarray, out: np.ndarray, act, residual: np.ndarray | None = None) -> None:
        team_layers.run_winograd(self.team, x, self._winograd_weights(x), self.bias, out, self.padding, self.tiles,
                                 act, self._winograd_buffers(x), 0, x.shape[0], residual)

    @staticmethod
    def fits(conv) -> bool:
        """Whether a layer has a team form: implicit GEMM, direct or wt6x6, a constant weight, big enough."""
        return (conv.algorithm in ALGORITHMS and conv.impl.weight is not None
                and conv.geom.flops(1) >= team_layers.MIN_FLOPS)

    def __call__(self, x, weight=None, bias=None, residual=None, out=None, gate=None) -> np.ndarray:
        """The convolution of ``x`` (of ``x * gate`` with a squeeze-excitation ``gate``
        [N, C, 1, 1]: for a 1x1 layer the gate scales the weight instead of the map)."""
        conv = self.conv
        usable = weight is None and bias is None and self.team.usable() and x.dtype == np.float32
        if gate is not None and not (usable and self.pointwise):
            if self.pointwise and weight is None and bias is None and x.dtype == np.float32:
                return self._gated_serial(x, gate, residual, out)
            x = np.multiply(x, gate, dtype=np.float32)
            gate = None
        if not usable:
            return conv(x, weight, bias, residual=residual, out=out)
        x = np.ascontiguousarray(x)
        if out is None:
            out = aligned_empty(conv.output_shape(x.shape[0]))
        return self._regions(x, out, residual, gate)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """A plan's call (the layer's own weight, ``out`` an aligned buffer of the output's
        shape): straight to the team regions when they can run, else :meth:`__call__`, whose
        checks are for any caller (through them and the plan's general step, a MobileNetV2
        layer took ~5-10 µs more than glow_like's bound call; through this, ~3)."""
        if x.dtype is _FLOAT32 and x.flags.c_contiguous:
            if self.team.usable():
                return self._regions(x, out, residual)
            return self.conv.run_into(x, out, residual)  # batch slices, or the stall guard holds the team off
        return self(x, residual=residual, out=out)

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> Call | None:
        """:meth:`run_into` on these very arrays as a zero-argument call (see :mod:`.bound`):
        the team regions with their scratch fetched now, or the layer's serial form while
        the team is off; None for an ``x`` :meth:`run_into` would not take straight."""
        if not (x.dtype is _FLOAT32 and x.flags.c_contiguous):
            return None
        fused = self._fuses(residual)
        act = NONE if residual is not None and not fused else self.activation
        if self.winograd:
            regions = partial(team_layers.run_winograd, self.team, x, self._winograd_weights(x), self.bias, out,
                              self.padding, self.tiles, act, self._winograd_buffers(x), 0, x.shape[0],
                              residual if fused else None)
        else:
            cols = None if self.form.cols_shape is None else self.ws.get("team_cols", self.form.cols_shape)
            regions = self.form.bind(self.team, x, self.w2, self.bias, out, act, cols, self.packed,
                                     residual if fused else None)
        serial = self.conv.bind(x, out, residual) or partial(self.conv.run_into, x, out, residual)
        return on_team(self.team, with_residual(regions, out, None if fused else residual, self.activation), serial)

    def _fuses(self, residual: np.ndarray | None, gate: np.ndarray | None = None) -> bool:
        """Whether the regions add ``residual`` themselves (Winograd's output transform, the
        panel GEMM's tiles, gated or not) rather than in a pass after them."""
        panel = (not self.winograd and self.form.fuses_residual and self.packed is not None
                 and (gate is None or self.form.pointwise))
        return (residual is not None and residual.dtype is _FLOAT32 and residual.flags.c_contiguous
                and ((self.winograd and gate is None) or panel))

    def run_gated_into(self, x: np.ndarray, gate: np.ndarray, out: np.ndarray,
                       residual: np.ndarray | None = None) -> np.ndarray:
        """A plan's call of a 1x1 layer fed by a folded gate multiply (``x * gate``, ``gate``
        [N, C, 1, 1]), as :meth:`run_into`: the gate scales the weight — off the team, the
        form :meth:`_serial_gated` chooses."""
        if x.dtype is _FLOAT32 and x.flags.c_contiguous and gate.dtype is _FLOAT32 and self.pointwise:
            if self.team.usable():
                return self._regions(x, out, residual, gate)
            self._serial_gated(x, gate, out, residual)()
            return out
        return self(x, residual=residual, out=out, gate=gate)

    def bind_gated(self, x: np.ndarray, gate: np.ndarray, out: np.ndarray,
                   residual: np.ndarray | None = None) -> Call | None:
        """:meth:`run_gated_into` on these very arrays as a zero-argument call (as :meth:`bind`):
        on the team, per image the gated panel GEMM's kernel with its arguments gathered
        (else the team regions' call); while the team is off, the serial form bound
        (:meth:`_serial_gated`). None where :meth:`run_gated_into` would not take the layer
        straight."""
        if not (x.dtype is _FLOAT32 and x.flags.c_contiguous and gate.dtype is _FLOAT32 and gate.flags.c_contiguous
                and self.pointwise):
            return None
        packed = self.packed
        if packed is not None:
            fused = self._fuses(residual, gate)
            act = NONE if residual is not None and not fused else self.activation
            n, oc = x.shape[0], self.w2.shape[0]
            copies = self.ws.get("team_gated_copies", (self.team.ways, packed.panels.size))
            regions = with_residual(
                packed.bind_team_gated(gate.reshape(n, -1), copies, x.reshape(n, x.shape[1], -1),
                                       out.reshape(n, oc, -1), act, self.team.ways,
                                       residual.reshape(n, oc, -1) if fused else None),
                out, None if fused else residual, self.activation)
        else:
            regions = partial(self._regions, x, out, residual, gate)
        return on_team(self.team, regions, self._serial_gated(x, gate, out, residual))

    def _serial_gated(self, x: np.ndarray, gate: np.ndarray, out: np.ndarray,
                      residual: np.ndarray | None) -> Call:
        """The layer off the team (batch slices, or while the stall guard holds the team off)
        as a zero-argument call on these arrays, where the panel GEMM takes it on one thread:

        - where the map dies here (:attr:`gate_in_place`) and has fewer than
          :data:`WEIGHT_GATE_PIXELS_PER_ROW` pixels per output channel, the map scaled in
          place while its lines are in cache, then the layer's serial form — every image in
          one compiled GEMM call;
        - else per image the gate scaling a copy of the packed weight, whose tiles add the
          bias and apply the activation (``PackedWeight.bind_gated_images``, glow_like's
          serial form): a copy of ``C x OC`` floats instead of a pass over ``C x H x W``.

        One thread, 4 images, best of 200 (my script), weight / map: 16 -> 16 at 56x56 0.64,
        96 -> 24 at 56x56 0.69, 96 -> 40 at 14x14 0.96, 480 -> 80 at 14x14 1.10, 576 -> 96 at
        7x7 1.76. Inside MobileNetV3-Small's batch-8 slices the 14x14 layers (4-5 pixels per
        output channel) ran 1.15-1.5x slower by the weight; hence the bound of 8. Where the
        panel GEMM does not take the layer: the map scaled in place where it dies here, else
        per image a scaled weight and sgemm (:meth:`_gated_serial`)."""
        packed = self.conv.impl.panel_weight(self.conv.bias)  # a 1x1 layer: implicit GEMM or direct
        if packed is not None and (not self.gate_in_place or x[0, 0].size >= WEIGHT_GATE_PIXELS_PER_ROW * out.shape[1]):
            n, c, oc = x.shape[0], x.shape[1], self.w2.shape[0]
            gemm = packed.bind_gated_images(gate.reshape(n, c), x.reshape(n, c, -1), out.reshape(n, oc, -1),
                                            self.activation if residual is None else NONE)
            return with_residual(gemm, out, residual, self.activation)
        if self.gate_in_place:
            return sequence(scale_planes(x, gate),
                            self.conv.bind(x, out, residual) or partial(self.conv.run_into, x, out, residual))
        return partial(self._gated_serial, x, gate, residual, out)

    def _regions(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None,
                 gate: np.ndarray | None = None) -> np.ndarray:
        """The team regions of each image (float32, C-contiguous ``x``), adding the residual
        there where they can (:meth:`_fuses`), else in a pass after them."""
        fused = self._fuses(residual, gate)
        act = NONE if residual is not None and not fused else self.activation
        if self.winograd:
            self._winograd(x, out, act, residual if fused else None)
        else:
            self._dense_regions(x, out, act, residual if fused else None, gate)
        if residual is not None and not fused:  # the regions ended without the activation: sum, then activate
            add_activate(out, residual, self.activation)
        return out

    def _dense_regions(self, x: np.ndarray, out: np.ndarray, act, residual: np.ndarray | None,
                       gate: np.ndarray | None) -> None:
        form, c = self.form, x.shape[1]
        cols = None if form.cols_shape is None else self.ws.get("team_cols", form.cols_shape)
        if gate is not None and self.packed is not None and form.pointwise:
            # The panel GEMM, each thread scaling its own copy of the packed weight by the gate.
            packed, ways, oc = self.packed, self.team.ways, self.w2.shape[0]
            copies = self.ws.get("team_gated_copies", (ways, packed.panels.size))
            for i in range(x.shape[0]):
                packed.run_team_gated(gate[i].reshape(c), copies, x[i].reshape(c, -1), out[i].reshape(oc, -1), act,
                                      ways, None if residual is None else residual[i].reshape(oc, -1))
            return
        scaled = None if gate is None else self.ws.get("team_gated_weight", self.w2.shape)
        for i in range(x.shape[0]):
            w, packed = self.w2, self.packed
            if scaled is not None:  # only 1x1 layers take a gate
                np.multiply(self.w2, gate[i].reshape(1, c), out=scaled)
                w, packed = scaled, None
            form.run(self.team, x[i], w, self.bias, out[i], act, cols, packed=packed,
                     residual=None if residual is None else residual[i])

    def _gated_serial(self, x: np.ndarray, gate: np.ndarray, residual: np.ndarray | None,
                      out: np.ndarray | None) -> np.ndarray:
        """A gated 1x1 layer off the team (batch slices, or while the stall guard holds the
        team off): per image the weight scaled by the gate, as the team path and glow_like
        do, not the map (a pass over it into a new array of its size: EfficientNet-B0 at
        batch 8, slices of 4 images, its 56x56 projection took 3.3 ms a slice against
        glow_like's 1.8): one sgemm on the calling thread, then bias, residual and
        activation. (Where the map dies here, the map scaled in place instead: :meth:`_serial_gated`.)"""
        impl = self.conv.impl
        oc, c = self.w2.shape
        x = np.ascontiguousarray(x)
        if out is None:
            out = aligned_empty(self.conv.output_shape(x.shape[0]))
        scaled = self.ws.get("team_gated_weight", self.w2.shape)
        bias = self.bias if self.bias.size else None
        for i in range(x.shape[0]):
            np.multiply(self.w2, gate[i].reshape(1, c), out=scaled)
            matmul_into(scaled, x[i].reshape(c, -1), out[i].reshape(oc, -1))
            impl._epilogue(out[i : i + 1], bias, slice(None), None if residual is None else residual[i : i + 1])
        return out


def scale_planes(x: np.ndarray, gate: np.ndarray) -> Call:
    """``x *= gate`` (a float32 C-contiguous map [N, C, H, W], ``gate`` [N, C, 1, 1]) as a
    zero-argument call: one compiled pass over the map's planes (``jit.gate_planes``; numpy's
    broadcast multiply for a gate of another dtype or layout) — a gated layer's serial form
    here, the plan's in-place gate multiply."""
    compiled = jit.gate_planes(x, gate, x)
    if compiled is not None:
        return compiled
    rows = x.shape[0] * x.shape[1]
    flat = x.reshape(rows, -1)
    return partial(np.multiply, flat, gate.reshape(rows, 1), out=flat)


class TeamDepthwise:
    """A :class:`~lowerkit_nnpack.depthwise.DepthwiseConv2d` as one team region (bands of planes)."""

    def __init__(self, conv, team: Team) -> None:
        self.conv, self.team = conv, team
        g = conv.geom
        self.table, self.scratch_shape = team_layers.depthwise_scratch(conv.algorithm, g.in_hw, g.out_hw, g.kernel[0],
                                                                       g.stride[0], g.padding, team.ways)
        self.stride, self.padding = g.stride[0], g.padding

    def output_shape(self, batch: int) -> tuple[int, int, int, int]:
        return self.conv.output_shape(batch)

    @staticmethod
    def fits(conv) -> bool:
        g = conv.geom
        macs = g.out_channels * g.out_hw[0] * g.out_hw[1] * g.kernel[0] * g.kernel[1]
        return (conv.weight is not None and macs >= team_layers.MIN_DEPTHWISE_MACS
                and conv.algorithm in team_layers.DEPTHWISE_ALGORITHMS)

    def __call__(self, x, weight=None, bias=None, residual=None, out=None) -> np.ndarray:
        conv = self.conv
        if weight is not None or bias is not None or not self.team.usable() or x.dtype != np.float32:
            return conv(x, weight, bias, residual=residual, out=out)
        x = np.ascontiguousarray(x)
        if out is None:
            out = aligned_empty(conv.output_shape(x.shape[0]))
        return self._region(x, out, residual)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None,
                 means: np.ndarray | None = None) -> np.ndarray:
        """A plan's call, as :meth:`TeamConv.run_into`; ``means`` as the layer's ``run_into``."""
        if x.dtype is _FLOAT32 and x.flags.c_contiguous:
            if self.team.usable():
                return self._region(x, out, residual, means=means)
            return self.conv.run_into(x, out, residual, means)
        if means is None:
            return self(x, residual=residual, out=out)
        return self.conv.run_into(x, out, residual, means)

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None,
             means: np.ndarray | None = None) -> Call | None:
        """:meth:`run_into` on these very arrays as a zero-argument call, as :meth:`TeamConv.bind`."""
        if not (x.dtype is _FLOAT32 and x.flags.c_contiguous):
            return None
        conv = self.conv
        act = NONE if residual is not None else conv.activation
        region = team_layers.bind_depthwise(self.team, conv.algorithm, x, conv.weight, conv.bias, out, self.table,
                                            self._scratch(), self.stride, self.padding, act, conv.blocks,
                                            None if means is None else means.reshape(-1))
        serial = conv.bind(x, out, residual, means) or partial(conv.run_into, x, out, residual, means)
        return on_team(self.team, with_residual(region, out, residual, conv.activation), serial)

    def _scratch(self) -> np.ndarray | None:
        """This thread's scratch for the region (the layer's workspace), None where it needs none."""
        return None if self.scratch_shape is None else self.conv.ws.get("team_dw_scratch", self.scratch_shape)

    def _region(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None,
                weight: np.ndarray | None = None, bias: np.ndarray | None = None,
                means: np.ndarray | None = None) -> np.ndarray:
        """The region on ``x`` (float32, C-contiguous), then the residual; ``weight`` and
        ``bias`` (float32, contiguous) replace the layer's for this call (the kernel API's);
        ``means`` [N, C, 1, 1], where wanted, each output plane's mean (no residual with it)."""
        conv = self.conv
        act = NONE if residual is not None else conv.activation
        w = conv.weight if weight is None else weight
        b = conv.bias if bias is None else bias
        blocks = conv.blocks if weight is None and bias is None else None  # the layer's own weights only
        team_layers.run_depthwise(self.team, conv.algorithm, x, w, b, out, self.table, self._scratch(),
                                  self.stride, self.padding, act, blocks, None if means is None else means.reshape(-1))
        if residual is not None:
            add_activate(out, residual, conv.activation)
        return out
