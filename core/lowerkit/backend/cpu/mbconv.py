"""An inverted-residual block — a 1x1 expansion, a 3x3 depthwise convolution, a 1x1 projection
(MobileNetV2's) — as one call, band by band of output rows (``jit.mbconv``; both plugins bind
it, see docs/compiled-kernels.md, "Inverted-residual blocks in bands").

Layer by layer, each of the three writes its whole output before the next reads it; on the
56x56 and 112x112 maps the expanded tensor (1.8 and 4.8 MB an image for MobileNetV2) goes out
to memory and back twice. In bands, it stays in a buffer of a few rows that is reused band
after band, and on a team each thread keeps to its own rows.

Plain Python: the kernels load (numba) when a block is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import panels
from .calls import on_team
from .jit.activation import IR_CODES

BAND = 7  # output rows a band: the depthwise row kernel's group (jit.dwrows.ROWS[3])
# Output rows a map needs: two bands or more. On a 7x7 map a team would leave one thread idle,
# and on one thread (batch slices) MobileNetV2's 7x7 blocks gained nothing: paired handles at
# batch 8, 0.994 / 1.034 (Intel Xeon VM).
MIN_ROWS = 2 * BAND


def pointwise(weight_shape, stride, padding, dilation, groups: int) -> bool:
    """Whether a convolution of this weight shape and geometry can be a block's expansion or
    projection: 1x1, stride 1, unpadded, undilated, ungrouped."""
    return (len(weight_shape) == 4 and tuple(weight_shape[2:]) == (1, 1) and tuple(stride) == (1, 1)
            and not any(padding) and tuple(dilation) == (1, 1) and groups == 1)


def fits(weight_shape, channels: int, stride, padding, dilation, groups: int, out_rows: int,
         depthwise_code: int) -> bool:
    """Whether a depthwise layer of this weight shape and geometry, on ``channels`` planes with
    ``out_rows`` rows of output and activation ``depthwise_code``, lets its block run in bands
    here: 3x3 over every plane (``groups`` = ``channels``), stride 1 or 2 both ways, padding 1
    all round, undilated; at least :data:`MIN_ROWS` rows; an activation of
    ``jit.activation.IR_CODES`` (the row kernel applies it in registers); 16-float vectors
    (``jit.select.rows_wanted``). False without numba."""
    if not (tuple(weight_shape) == (channels, 1, 3, 3) and groups == channels and tuple(stride) in ((1, 1), (2, 2))
            and tuple(padding) == (1, 1, 1, 1) and tuple(dilation) == (1, 1)):
        return False
    if out_rows < MIN_ROWS or depthwise_code not in IR_CODES:
        return False
    try:
        from .jit import select
    except ImportError:
        return False
    return select.rows_wanted()


@dataclass(frozen=True, eq=False)
class InvertedResidual:
    """A block's constants as the kernels take them: both 1x1 weights packed
    (:class:`.panels.PackedWeight`), the depthwise weight [Cexp, 1, 3, 3] and bias (empty:
    none), the depthwise stride, the three activations' codes and parameters (expansion,
    depthwise, projection), and the widths of the input and output maps."""

    expand: panels.PackedWeight
    project: panels.PackedWeight
    depthwise: np.ndarray
    depthwise_bias: np.ndarray
    stride: int
    acts: tuple  # (code, p0, p1) three times
    in_w: int
    out_w: int
    kernels: object  # the jit.mbconv module

    @classmethod
    def shared(cls, we: np.ndarray, be: np.ndarray | None, wd: np.ndarray, bd: np.ndarray | None,
               wp: np.ndarray, bp: np.ndarray | None, stride: int, acts: tuple, in_w: int,
               out_w: int) -> InvertedResidual | None:
        """The block of constant weights ``we`` [Cexp, Cin(, 1, 1)], ``wd`` [Cexp, 1, 3, 3],
        ``wp`` [Cout, Cexp(, 1, 1)] and their biases (or None), packed once for every thread
        that binds the same arrays (:meth:`.panels.PackedWeight.shared`); None where a weight
        or bias is writable (given at call time)."""
        expand, project = panels.PackedWeight.shared(we, be), panels.PackedWeight.shared(wp, bp)
        if expand is None or project is None:
            return None
        return cls._made(expand, project, wd, bd, stride, acts, in_w, out_w)

    @classmethod
    def of(cls, we: np.ndarray, be: np.ndarray | None, wd: np.ndarray, bd: np.ndarray | None, wp: np.ndarray,
           bp: np.ndarray | None, stride: int, acts: tuple, in_w: int, out_w: int) -> InvertedResidual:
        """:meth:`shared`'s block packed now, for this caller only (any arrays)."""
        return cls._made(panels.PackedWeight.of(we, be), panels.PackedWeight.of(wp, bp), wd, bd, stride, acts, in_w,
                         out_w)

    @classmethod
    def _made(cls, expand, project, wd, bd, stride, acts, in_w, out_w) -> InvertedResidual:
        from . import jit

        bias = np.empty(0, np.float32) if bd is None else np.array(bd, dtype=np.float32).reshape(-1)
        return cls(expand, project, np.array(wd, dtype=np.float32), bias, int(stride), tuple(acts), int(in_w),
                   int(out_w), jit.load("mbconv"))

    def scratch_floats(self) -> int:
        """Floats of scratch a thread needs (the band buffers, the depthwise kernel's masks, the
        panel GEMM's strips)."""
        return self.kernels.scratch_floats(self.depthwise.shape[0], self.in_w, self.out_w, BAND, self.stride)

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None, scratch: np.ndarray,
             team=None) -> Callable[[], None]:
        """``out`` [N, Cout, OH, OW] = the block on ``x`` [N, Cin, H, W] (+ ``residual``, shaped
        like ``out``, added before the projection's activation) as a zero-argument call for
        these very arrays (C order, float32; ``out`` must not share memory with ``x``): every
        image on the calling thread, or — with ``team`` (a ``Team``) while it can run — each
        image as one team region. ``scratch``: float32, :meth:`scratch_floats` per thread
        (``team.ways`` of them with a team)."""
        n, cin, h, w = x.shape
        cout, oh, ow = out.shape[1:]
        floats = self.scratch_floats()
        flat_x, flat_out = x.reshape(n, cin, h * w), out.reshape(n, cout, oh * ow)
        added = (residual.reshape(n, cout, oh * ow) if residual is not None else np.empty((0, 0, 0), np.float32))
        head = (self.expand.panels, self.expand.bias, self.expand.columns, self.depthwise, self.depthwise_bias,
                self.project.panels, self.project.bias, self.project.columns)
        tail = (self.stride, 1, 1, w, ow, *self.acts, BAND)
        serial_args = (flat_x, *head, flat_out, added, scratch[:floats], *tail)
        mbconv = self.kernels.mbconv

        def serial() -> None:
            mbconv(*serial_args)

        if team is None:
            return serial
        ways, mbconv_rows = team.ways, team.kernels().mbconv_rows
        rows = scratch[:ways * floats].reshape(ways, floats)
        images = [(flat_x[i], *head, flat_out[i], added[i] if residual is not None else added.reshape(0, 0), rows,
                   *tail, ways) for i in range(n)]

        def regions() -> None:
            for args in images:
                mbconv_rows(*args)

        return on_team(team, regions, serial)
