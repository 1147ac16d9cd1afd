"""wt8x8, wt6x6, wt4x4: Winograd F(m x m, 3x3) on (m + 2)-sized tiles; every transform is a GEMM."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from lowerkit.backend.cpu import (input_scratch_floats, merge_last, output_group_tiles, pad_into, team_layers,
                                  tile_view, winograd_matrices)
from lowerkit.backend.cpu.calls import sequence
from lowerkit.backend.cpu.panels import PackedTuples
from lowerkit.backend.cpu.team_layers import NO_RESIDUAL

from ..tiles import scatter_tiles, tile_counts
from ..workspace import Workspace
from .base import ConvAlgorithm


_NO_BIAS = np.empty(0, np.float32)


class Winograd(ConvAlgorithm):
    """wt8x8: Winograd F(6x6, 3x3) on 8x8 input tiles; transforms are GEMMs with 8x8 matrices.

    Subclasses change the tile (``size``, output tile ``out``) and interpolation points.
    """

    name = "wt8x8"
    size, out = 8, 6
    _AT, _G, _BT = winograd_matrices(6, 3)  # points 0, +-1, +-2, +-1/2 and infinity

    def __init__(self, *args, **kwargs) -> None:
        self.at = self._AT.astype(np.float32)
        self.bt = self._BT.astype(np.float32)
        self.g = self._G.astype(np.float32)
        super().__init__(*args, **kwargs)
        self.tiles = tile_counts(self.geom.out_hw, (self.out, self.out))

    def _transform_kernel(self, ws: Workspace | None, weight: np.ndarray) -> np.ndarray:
        oc, ic = self.geom.out_channels, self.geom.in_channels
        t = self.size
        if ws is None:  # precompute in float64: the G matrix has awkward fractions
            u = np.einsum("ar,ocrs,bs->aboc", self._G, weight.astype(np.float64), self._G)
            u = np.ascontiguousarray(u, dtype=np.float32).reshape(t * t, oc, ic)
            u.flags.writeable = False  # a constant: its panel-GEMM packing is made once (compute_output)
            return u
        t1 = ws.get("kt1", (oc, ic, t, 3))
        np.matmul(self.g, weight, out=t1)
        t2 = ws.get("kt2", (oc, ic, t, t))
        np.matmul(t1, self.g.T, out=t2)
        u = ws.get("kernel", (t, t, oc, ic))
        np.copyto(u, t2.transpose(2, 3, 0, 1))
        return u.reshape(t * t, oc, ic)

    splits_channels = True

    def new_state(self, n: int) -> np.ndarray:
        th, tw = self.tiles
        return self.ws.get("v", (self.size, self.size, self.geom.in_channels, n * th * tw))

    def transform_channels(self, x: np.ndarray, channels: slice, state: np.ndarray) -> None:
        n = x.shape[0]
        xs = x[:, channels]
        c = xs.shape[1]
        th, tw = self.tiles
        t, m = self.size, self.out
        top, left = self.geom.padding[0], self.geom.padding[1]
        padded = self.ws.get("pad", (n, c, m * th + t - m, m * tw + t - m))
        pad_into(xs, padded, top, left)
        rest = c * n * th * tw
        tiles = self.ws.get("tiles", (t, t, c, n, th, tw))
        np.copyto(tiles, tile_view(padded, (t, t), (m, m), (th, tw)))
        # B^T d B as two GEMMs: rows (axis 0) first, then columns (axis 1) per row; the
        # second writes straight into this channel block of the shared state.
        v1 = self.ws.get("v1", (t, t * rest))
        np.matmul(self.bt, tiles.reshape(t, t * rest), out=v1)
        np.matmul(self.bt, v1.reshape(t, t, rest), out=merge_last(state[:, :, channels]))

    def finish_state(self, state: np.ndarray, n: int) -> np.ndarray:
        return state.reshape(self.size * self.size, state.shape[2], state.shape[3])

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray,
        residual: np.ndarray | None = None,
    ) -> None:
        n = out.shape[0]
        t, mo = self.size, self.out
        ocb = len(range(*block.indices(self.geom.out_channels)))
        r = state.shape[2]
        m = self.ws.get("m", (t * t, ocb, r))
        np.matmul(kernel[:, block], state, out=m)
        y1 = self.ws.get("y1", (mo, t * ocb * r))
        np.matmul(self.at, m.reshape(t, t * ocb * r), out=y1)
        y = self.ws.get("y", (mo, mo, ocb * r))
        np.matmul(self.at, y1.reshape(mo, t, ocb * r), out=y)
        th, tw = self.tiles
        out_block = out[:, block]
        scatter_tiles(y.reshape(mo, mo, ocb, n, th, tw), out_block)
        self._epilogue(out_block, bias, block, residual)


class Winograd6(Winograd):
    """wt6x6 (extension, not in NNPACK): Winograd F(4x4, 3x3) on 6x6 tiles, points 0, +-1, +-2, inf.

    The transformed kernel is 36/9 = 4x the weight (wt8x8: 64/9), so it pays off on
    small images where wt8x8 has too few tiles to amortise its kernel.
    """

    name = "wt6x6"
    size, out = 6, 4
    _AT, _G, _BT = winograd_matrices(4, 3)

    # The transforms run as the compiled passes of ``lowerkit.backend.cpu.jit.winograd``
    # (the same matrices): the input transform pads, splits and transforms each channel
    # in one pass; the output transform adds bias and ReLU and writes the cropped tiles
    # straight into the output. The 36 channel GEMMs run on BLAS, or on the packed kernel
    # where ``team_layers.winograd_weights`` packs it (blocks of whole 6-channel panels).
    def __init__(self, *args, **kwargs) -> None:
        from lowerkit.backend.cpu import jit

        self._jit = jit.load("winograd")  # compiled, or loaded from the cache, at build time
        super().__init__(*args, **kwargs)

    def transform_channels(self, x: np.ndarray, channels: slice, state: np.ndarray) -> None:
        n, c = x.shape[0], self.geom.in_channels
        th, tw = self.tiles
        c0, c1, _ = channels.indices(c)
        v = state.reshape(self.size * self.size, c, n * th * tw)
        scratch = self.ws.get("wscratch", (input_scratch_floats(th, tw),))
        top, left = self.geom.padding[0], self.geom.padding[1]
        self._jit.winograd_input(np.ascontiguousarray(x, dtype=np.float32), v, top, left, th, tw, 0, n, c0, c1,
                                 scratch)

    def output_blocks(self, state: np.ndarray, kernel: np.ndarray, workers: int) -> list[slice]:
        """Whole panels of the packed kernel where the channel GEMMs run on it (see
        :meth:`compute_output`), else nearly equal parts."""
        packed = team_layers.winograd_weights(kernel, state.shape[2])
        if isinstance(packed, PackedTuples):
            return [slice(first, last) for first, last in packed.bands(workers)]
        return super().output_blocks(state, kernel, workers)

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray,
        residual: np.ndarray | None = None,
    ) -> None:
        n = out.shape[0]
        o0, o1, _ = block.indices(self.geom.out_channels)
        r = state.shape[2]
        m = self.ws.get("m", (self.size * self.size, o1 - o0, r))
        packed = team_layers.winograd_weights(kernel, r)
        if isinstance(packed, PackedTuples) and packed.takes(o0, o1):
            packed.run(state, m, r, o0, o1)  # the channel GEMMs on the packed kernel
        else:
            np.matmul(kernel[:, block], state, out=m)
        th, tw = self.tiles
        group = output_group_tiles(tw)
        s = self.ws.get("ws", (self.size, self.out, group))
        y = self.ws.get("wy", (self.out, self.out, group))
        b = _NO_BIAS if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
        # The compiled output transform adds the residual (a fused residual add) before the activation.
        added = NO_RESIDUAL if residual is None else np.ascontiguousarray(residual, dtype=np.float32)
        self._jit.winograd_output(m, b, out, o0, o1, 0, n, th, tw, *self.activation, s, y, added)


    def bind_chunk(self, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
                   residual: np.ndarray | None = None) -> Callable[[], object] | None:
        """The whole layer on these very arrays as one zero-argument call (see :mod:`..bound`):
        the input transform, the channel GEMMs (on the packed kernel where it is packed) and
        the output transform, their scratch fetched and the packing looked up once; None for
        arrays that are not C-contiguous float32. Unbound, each call of a batch slice's
        Winograd layer went through a dozen Python frames and workspace lookups."""
        arrays = (x, out) if residual is None else (x, out, residual)
        if not all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays):
            return None
        n, c, oc = x.shape[0], self.geom.in_channels, self.geom.out_channels
        th, tw = self.tiles
        tiles = n * th * tw
        v = self.new_state(n).reshape(self.size * self.size, c, tiles)
        m = self.ws.get("m", (self.size * self.size, oc, tiles))
        group = output_group_tiles(tw)
        top, left = self.geom.padding[0], self.geom.padding[1]
        transform_in = partial(self._jit.winograd_input, x, v, top, left, th, tw, 0, n, 0, c,
                               self.ws.get("wscratch", (input_scratch_floats(th, tw),)))
        packed = team_layers.winograd_weights(kernel, tiles)
        if isinstance(packed, PackedTuples):
            products = partial(packed.run, v, m, tiles, 0, oc)
        else:
            products = partial(np.matmul, kernel, v, out=m)
        b = _NO_BIAS if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
        transform_out = partial(self._jit.winograd_output, m, b, out, 0, oc, 0, n, th, tw, *self.activation,
                                self.ws.get("ws", (self.size, self.out, group)),
                                self.ws.get("wy", (self.out, self.out, group)),
                                NO_RESIDUAL if residual is None else residual)
        return sequence(transform_in, products, transform_out)


class Winograd4(Winograd):
    """wt4x4 (extension, not in NNPACK): Winograd F(2x2, 3x3) on 4x4 tiles, points 0, +-1, inf (16/9 kernel)."""

    name = "wt4x4"
    size, out = 4, 2
    _AT, _G, _BT = winograd_matrices(2, 3)
