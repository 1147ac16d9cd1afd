"""Direct convolution on the packed weight, for layers with few input channels (the stems):
``out = act(conv(x, w) + bias)`` with no column matrix.

An im2col stem writes its columns and reads them back: ResNet's 3->64 7x7/2 at 224 has
147 rows of 12544 columns (7.4 MB), MobileNetV2's 3->32 3x3/2 27 rows (1.4 MB), against
an image of 0.6 MB. Here the image is first copied once into its column *phases*: for
stride ``s``, ``phases[c, r, f, j] = padded x[c, r, j*s + f]`` (zeros on padding), so that
every tap ``(c, kh, kw)`` of output row ``oh`` reads output columns ``ow .. ow+15``
contiguously at ``phases[c, oh*sh + kh, kw % s, ow + kw // s ...]``. The panel GEMM's
micro-kernel (:mod:`.panel`, 6 output channels x 16 columns in registers — x 64 and x 32
first where vectors hold 16 floats —, bias and activation fused) then runs with its image rows
taken from a table of those tap offsets
(its ``gather`` variant) instead of from an im2col matrix. One output row's taps are a few
KB (ResNet's stem: 3 x 7 x 2 phases x 115 floats), so the whole working set is in L1/L2.

Kernels:

- :func:`direct` — every image of a batch, on the calling thread;
- :func:`team_phases` then :func:`team_rows` — one image as two team regions (the phases
  in bands of channels, then bands of output rows).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from ._act import act_span
from ._act_ir import IR_CODES
from ._simd import split_pairs
from ._types import f8, i8, ro, rw
from .layer import team_ready
from .panel import _NONE, _PREFETCH_BYTES, LANES, ROWS, _tile_kernel

team_ready()  # team_phases and team_rows are parallel regions: choose the threading layer first

# In the panel GEMM's vectors (one zmm a row where the CPU runs 512-bit vectors at full width).
_tile16 = _tile_kernel(16 // LANES, edge=False, gather=True, lanes=LANES)
# With 16-float vectors an output row goes 64 and 32 columns at a time first: the 6 x 16 tile
# keeps only six accumulators, too few for two FMA units of four cycles' latency, and loads
# six broadcast weights for six FMAs (the 6 x 64 tile: 24 accumulators, six broadcasts and
# four image vectors for 24 FMAs).
WIDE_ROWS = LANES == 16
_tile64 = _tile_kernel(4, edge=False, gather=True, lanes=16) if WIDE_ROWS else _tile16
_tile32 = _tile_kernel(2, edge=False, gather=True, lanes=16) if WIDE_ROWS else _tile16
_edge16 = _tile_kernel(16 // LANES, edge=True, gather=True, lanes=LANES)
_edge8 = _tile_kernel(1, edge=True, gather=True)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _phase_rows(x, phases, pt, pl, c0, c1):
    """Channels [c0, c1) of ``x`` [C, H, W] into ``phases`` [C, HP, sw, WQ] (zeros outside;
    the stride ``sw`` is the phases' third dimension)."""
    # Stride 2 deinterleaves each row with vector shuffles (``_simd.split_pairs``): as a
    # strided loop the copy of a 224x224 RGB image took 0.13 ms, as long as MobileNetV2's
    # stem on one thread.
    h, w = x.shape[1], x.shape[2]
    hp, sw, wq = phases.shape[1], phases.shape[2], phases.shape[3]
    xf, pf = x.reshape(-1), phases.reshape(-1)
    xa, pa = xf.ctypes.data, pf.ctypes.data
    for c in range(c0, c1):
        for r in range(hp):
            ih = r - pt
            if ih < 0 or ih >= h:
                phases[c, r, :, :] = 0.0
                continue
            if sw == 2:
                # x[2i] lands in phase fe at column i + je, x[2i + 1] in phase 1 - fe at i + jo
                fe = pl % 2
                je, jo = (pl - fe) // 2, (pl + 1 - (1 - fe)) // 2
                evens, odds = (w + 1) // 2, w // 2
                if je + evens > wq or jo + odds > wq:  # the phases end first: the plain copy
                    _copy_phases(x, phases, c, r, ih, pl)
                    continue
                even_row, odd_row = phases[c, r, fe], phases[c, r, 1 - fe]
                even_row[:je] = 0.0
                even_row[je + evens:] = 0.0
                odd_row[:jo] = 0.0
                odd_row[jo + odds:] = 0.0
                base = np.uint64((c * hp + r) * 2 * wq)
                split_pairs(xf, xa, np.uint64((c * h + ih) * w), pf, pa, base + np.uint64(fe * wq + je), pf, pa,
                            base + np.uint64((1 - fe) * wq + jo), np.uint64(odds))
                if evens > odds:
                    even_row[je + odds] = x[c, ih, w - 1]
            else:
                _copy_phases(x, phases, c, r, ih, pl)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _copy_phases(x, phases, c, r, ih, pl):
    """Row ``r`` of channel ``c``'s phases from image row ``ih``, element by element."""
    w, sw, wq = x.shape[2], phases.shape[2], phases.shape[3]
    src = x[c, ih]
    for f in range(sw):
        row = phases[c, r, f]
        # column j holds x[ih, j*sw + f - pl]: inside for lo <= j < hi
        lo = min(wq, max(0, (pl - f + sw - 1) // sw))
        hi = max(lo, min(wq, (w - 1 + pl - f) // sw + 1))
        row[:lo] = 0.0
        first = lo * sw + f - pl
        for j in range(hi - lo):
            row[lo + j] = src[first + j * sw]
        row[hi:] = 0.0


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _rows(panels, bias, phases, out, taps, k, m, code, p0, p1, sh, r0, r1):
    """Output rows [r0, r1) of one image: ``out`` [M, OH, OW] from its ``phases``."""
    oh_n, ow = out.shape[1], out.shape[2]
    ldc = oh_n * ow
    sw, wq = phases.shape[2], phases.shape[3]
    row_step = sh * sw * wq
    full = ow // 16 * 16
    rest = ow - full
    in_tile = code in IR_CODES
    tile_code = code if in_tile else 0
    f = np.uint64(4)
    wa, ba, xa, ca = panels.ctypes.data, bias.ctypes.data, phases.ctypes.data, out.ctypes.data
    table = np.int64(taps.ctypes.data)
    of = out.reshape(-1)
    for oh in range(r0, r1):
        xr = xa + f * np.uint64(oh * row_step)
        cr = ca + f * np.uint64(oh * ow)
        for p in range(-(-m // ROWS)):
            rows = min(ROWS, m - p * ROWS)
            wp = wa + f * np.uint64(p * k * ROWS)
            bp = ba + f * np.uint64(p * ROWS)
            cp = cr + f * np.uint64(p * ROWS * ldc)
            ahead = wp + _PREFETCH_BYTES
            j = 0
            if WIDE_ROWS:
                while j + 64 <= full:
                    u = np.uint64(j)
                    _tile64(k, wp, xr + f * u, table, cp + f * u, ldc, bp, True, rows, tile_code, p0, p1, _NONE, ahead)
                    j += 64
                if j + 32 <= full:
                    u = np.uint64(j)
                    _tile32(k, wp, xr + f * u, table, cp + f * u, ldc, bp, True, rows, tile_code, p0, p1, _NONE, ahead)
                    j += 32
            while j < full:
                u = np.uint64(j)
                _tile16(k, wp, xr + f * u, table, cp + f * u, ldc, bp, True, rows, tile_code, p0, p1, _NONE, ahead)
                j += 16
            u = np.uint64(full)
            if rest > 8:
                _edge16(k, wp, xr + f * u, table, cp + f * u, ldc, bp, True, rows, tile_code, p0, p1, _NONE, rest,
                        ahead)
            elif rest > 0:
                _edge8(k, wp, xr + f * u, table, cp + f * u, ldc, bp, True, rows, tile_code, p0, p1, _NONE, rest, ahead)
            if code != 0 and not in_tile:
                for r in range(p * ROWS, p * ROWS + rows):
                    act_span(of, r * ldc + oh * ow, r * ldc + (oh + 1) * ow, code, p0, p1)


_TAPS = types.Array(i8, 1, "C", readonly=True)


@njit(types.void(ro(1), ro(1), ro(4), rw(4), rw(4), _TAPS, i8, i8, i8, f8, f8, i8, i8, i8), nogil=True, cache=True,
      error_model="numpy")
def direct(panels, bias, x, out, phases, taps, k, m, code, p0, p1, sh, pt, pl):
    """Every image of ``x`` [N, C, H, W] into ``out`` [N, M, OH, OW] on the calling thread:
    ``panels``, ``bias`` as ``panels.PackedWeight`` holds them (``k`` = C*KH*KW, ``m`` = M),
    ``phases`` [C, HP, sw, WQ] (the column stride ``sw`` is its third dimension) and ``taps``
    as ``lowerkit.backend.cpu.direct.DirectConv`` makes them, row stride ``sh``, padding top
    ``pt`` and left ``pl``; activation ``code``, ``p0``, ``p1``."""
    c, oh_n = x.shape[1], out.shape[2]
    for i in range(x.shape[0]):
        _phase_rows(x[i], phases, pt, pl, 0, c)
        _rows(panels, bias, phases, out[i], taps, k, m, code, p0, p1, sh, 0, oh_n)


# Two regions, not two parallel loops in one: numba fuses adjacent loops of one iteration
# space and cannot see that the rows read what the phases' loop writes (through addresses) —
# fused, a thread began its output rows before the other had written its channels' phases;
# with fusion off it dropped the phases' loop (whose writes it cannot see) altogether.
@njit(types.void(ro(3), rw(4), i8, i8, i8), nogil=True, cache=True, parallel=True, error_model="numpy")
def team_phases(x, phases, pt, pl, ways):
    """The phases of one image ``x`` [C, H, W] (see :func:`direct`) in ``ways`` bands of
    channels, one team region."""
    c = x.shape[0]
    for j in prange(ways):
        _phase_rows(x, phases, pt, pl, c * j // ways, c * (j + 1) // ways)


@njit(types.void(ro(1), ro(1), rw(4), rw(3), _TAPS, i8, i8, i8, f8, f8, i8, i8),
      nogil=True, cache=True, parallel=True, error_model="numpy")
def team_rows(panels, bias, phases, out, taps, k, m, code, p0, p1, sh, ways):
    """One image's ``out`` [M, OH, OW] from its filled ``phases`` (:func:`team_phases`) in
    ``ways`` bands of output rows, one team region."""
    oh_n = out.shape[1]
    for j in prange(ways):
        _rows(panels, bias, phases, out, taps, k, m, code, p0, p1, sh, oh_n * j // ways, oh_n * (j + 1) // ways)
