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
- depthwise convolutions: bands of planes;
- fully-connected layers: bands of output columns.

A fused residual is added after the region, then the activation (one pass each). Each
form falls back to the layer's own call while the plan's ``StallGuard`` has turned team
regions off, or in a forked child.
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import Team, jit

from .activations import NONE

# Below these sizes a layer's region costs more than it splits (a region is ~3.5 us).
MIN_FLOPS = 1_000_000
MIN_DEPTHWISE_MACS = 100_000
MIN_LINEAR_WEIGHTS = 65_536
# Output pixels from which a convolution runs as implicit GEMM in tiles, and the tile size.
TILED_PIXELS = 1024
TILE_BYTES = 384 * 1024
# GEMMs of at most this many output channels over at least twice as many inputs split pixels.
COLUMN_SPLIT_ROWS = 64


ALGORITHMS = ("implicit_gemm", "direct", "wt6x6")  # the convolutions with a team form


class TeamConv:
    """An implicit-GEMM, direct or ``wt6x6`` :class:`~lowerkit_nnpack.conv.Conv2d` as team
    regions (one; two for Winograd: its input transform by input channels, then per band of
    output channels the 36 channel GEMMs and the output transform)."""

    def __init__(self, conv, team: Team) -> None:
        g = conv.geom
        self.conv, self.team, self.kernels = conv, team, team.kernels()
        self.winograd = conv.algorithm == "wt6x6"
        self.pointwise = False
        if self.winograd:
            self._init_winograd(conv, team)
            return
        self.w2 = np.ascontiguousarray(conv.impl.kernel_data(None), dtype=np.float32)
        self.bias = conv.bias if conv.bias is not None else np.empty(0, np.float32)
        self.activation = conv.impl.activation
        (self.kh, self.kw), self.stride, self.padding = g.kernel, tuple(g.stride), tuple(g.padding)
        self.out_hw = tuple(conv.geom.out_hw)
        oc, k = self.w2.shape
        self.pointwise = (self.kh, self.kw) == (1, 1) and self.stride == (1, 1) and not any(self.padding)
        self.by_columns = oc <= COLUMN_SPLIT_ROWS and k >= 2 * oc
        oh, ow = self.out_hw
        self.tiled = not self.pointwise and oh * ow >= TILED_PIXELS
        self.tile_rows = max(1, min(oh, TILE_BYTES // (4 * k * ow)))
        width = k * (self.tile_rows * ow if self.tiled else oh * ow)
        self.cols_shape = (team.ways if self.tiled else 1, width)
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
        self._band_rows = -(-g.out_channels // team.ways)
        self.ws = impl.ws  # per-thread scratch: a plan serves concurrent callers

    def _winograd(self, x: np.ndarray, out: np.ndarray, act) -> None:
        n, c = x.shape[0], x.shape[1]
        th, tw = self.tiles
        k, ways, ws = self.kernels, self.team.ways, self.ws
        t = n * th * tw
        v = ws.get("team_v", (36, c, t))
        m = ws.get("team_m", (ways, 36, self._band_rows, t))
        rows, tmp = ws.get("team_rows", (ways, 6, 4 * tw + 2)), ws.get("team_tmp", (ways, 6, 4 * tw + 2))
        pt, pl = self.padding[:2]
        k.winograd_input(x, v, pt, pl, th, tw, 0, n, rows, tmp, ways)
        k.winograd_products_output(self.u, v, self.bias, out, m, ws.get("team_s", (ways, 6, 4, tw)),
                                   ws.get("team_y", (ways, 4, 4, tw)), 0, n, th, tw, *act, ways, self.team.sgemm)

    @staticmethod
    def fits(conv) -> bool:
        """Whether a layer has a team form: implicit GEMM, direct or wt6x6, a constant weight, big enough."""
        return (conv.algorithm in ALGORITHMS and conv.impl.weight is not None
                and conv.geom.flops(1) >= MIN_FLOPS)

    def __call__(self, x, weight=None, bias=None, residual=None, out=None, gate=None) -> np.ndarray:
        """The convolution of ``x`` (of ``x * gate`` with a squeeze-excitation ``gate``
        [N, C, 1, 1]: for a 1x1 layer the gate scales the weight instead of the map)."""
        conv = self.conv
        usable = weight is None and bias is None and self.team.usable() and x.dtype == np.float32
        if gate is not None and not (usable and self.pointwise):
            x = np.multiply(x, gate, dtype=np.float32)
            gate = None
        if not usable:
            return conv(x, weight, bias, residual=residual, out=out)
        x = np.ascontiguousarray(x)
        if out is None:
            out = np.empty(conv.output_shape(x.shape[0]), np.float32)
        act = NONE if residual is not None else self.activation
        if self.winograd:
            self._winograd(x, out, act)
            if residual is not None:
                _add_then_activate(out, residual, self.activation)
            return out
        n, c = x.shape[0], x.shape[1]
        oc = self.w2.shape[0]
        oh, ow = self.out_hw
        k, ways, sgemm = self.kernels, self.team.ways, self.team.sgemm
        geometry = (self.kh, self.kw, *self.stride, *self.padding[:2], 1, 1)
        cols = None if self.pointwise else self.ws.get("team_cols", self.cols_shape)
        scaled = None if gate is None else self.ws.get("team_gated_weight", self.w2.shape)
        for i in range(n):
            if self.pointwise:
                w = self.w2
                if scaled is not None:
                    np.multiply(self.w2, gate[i].reshape(1, c), out=scaled)
                    w = scaled
                k.gemm_bias_activation(w, x[i].reshape(c, -1), self.bias, out[i].reshape(oc, oh * ow), *act,
                                       ways, self.by_columns, sgemm)
            elif self.tiled:
                k.conv_tiles(x[i], self.w2, self.bias, out[i], *geometry, self.tile_rows, cols, *act, ways, sgemm)
            else:
                image_cols = cols[0].reshape(-1, oh, ow)
                k.im2col(x[i], image_cols, *geometry, ways)
                k.gemm_bias_activation(self.w2, image_cols.reshape(-1, oh * ow), self.bias,
                                       out[i].reshape(oc, oh * ow), *act, ways, self.by_columns, sgemm)
        if residual is not None:
            _add_then_activate(out, residual, self.activation)
        return out


class TeamDepthwise:
    """A :class:`~lowerkit_nnpack.depthwise.DepthwiseConv2d` as one team region (bands of planes)."""

    def __init__(self, conv, team: Team) -> None:
        from lowerkit.backend.cpu.jit.conv import depthwise5x5_rows, depthwise5x5_scratch

        self.conv, self.team, self.kernels = conv, team, team.kernels()
        g = conv.geom
        self.rows = self.phases_shape = None
        if conv.algorithm == "depthwise3x3_s2":
            self.phases_shape = (team.ways, 4 * g.out_hw[0] * g.out_hw[1])
        elif conv.algorithm == "depthwise5x5":
            self.rows = depthwise5x5_rows(g.out_hw, g.stride[0])
            self.phases_shape = (team.ways, depthwise5x5_scratch(g.out_hw, g.stride[0]))

    def output_shape(self, batch: int) -> tuple[int, int, int, int]:
        return self.conv.output_shape(batch)

    @staticmethod
    def fits(conv) -> bool:
        g = conv.geom
        macs = g.out_channels * g.out_hw[0] * g.out_hw[1] * g.kernel[0] * g.kernel[1]
        return (conv.weight is not None and macs >= MIN_DEPTHWISE_MACS
                and conv.algorithm in ("depthwise3x3_same", "depthwise3x3_s2", "depthwise5x5", "depthwise3x3"))

    def __call__(self, x, weight=None, bias=None, residual=None, out=None) -> np.ndarray:
        conv = self.conv
        if weight is not None or bias is not None or not self.team.usable() or x.dtype != np.float32:
            return conv(x, weight, bias, residual=residual, out=out)
        x = np.ascontiguousarray(x)
        g = conv.geom
        n = x.shape[0]
        if out is None:
            out = np.empty(conv.output_shape(n), np.float32)
        act = NONE if residual is not None else conv.activation
        k, w, b, ways = self.kernels, conv.weight, conv.bias, self.team.ways
        (sh, _), (pt, pl) = g.stride, g.padding[:2]
        if conv.algorithm == "depthwise3x3_same":
            k.depthwise3x3_same(x, w, b, conv.edges, out, *act, ways)
        elif conv.algorithm == "depthwise3x3_s2":
            k.depthwise3x3_s2(x, w, b, conv.edges, conv.ws.get("team_phases", self.phases_shape), out, *act, ways)
        elif conv.algorithm == "depthwise5x5":
            k.depthwise5x5(x, w, b, self.rows, conv.ws.get("team_phases", self.phases_shape), out, sh, pt, pl,
                           *act, ways)
        else:
            k.depthwise3x3(x, w, b, out, sh, pt, pl, *act, ways)
        if residual is not None:
            _add_then_activate(out, residual, conv.activation)
        return out


class TeamLinear:
    """A :class:`~lowerkit_nnpack.layers.Linear` with a constant weight as one team region."""

    def __init__(self, layer, team: Team) -> None:
        self.layer, self.team, self.kernels = layer, team, team.kernels()
        self.bias = layer.bias if layer.bias is not None else np.empty(0, np.float32)

    @staticmethod
    def fits(layer) -> bool:
        return layer.weight_t is not None and layer.weight_t.size >= MIN_LINEAR_WEIGHTS

    def __call__(self, x, weight=None, bias=None) -> np.ndarray:
        wt = self.layer.weight_t
        if weight is not None or bias is not None or not self.team.usable() or x.shape[-1] != wt.shape[0]:
            return self.layer(x, weight, bias)
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, wt.shape[0])
        out = np.empty((x2.shape[0], wt.shape[1]), np.float32)
        self.kernels.fc_bias_activation(x2, wt, self.bias, out, *NONE, self.team.ways, self.team.sgemm)
        return out.reshape(*x.shape[:-1], wt.shape[1])


def _add_then_activate(out: np.ndarray, residual: np.ndarray, activation) -> None:
    np.add(out, residual, out=out)
    if activation != NONE:
        jit.load("conv").activate(out.reshape(-1), *activation)
