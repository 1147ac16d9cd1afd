"""Direct convolution with the output channels in the vector lanes: ``out = act(conv(x, w) +
bias [+ residual])`` with no column matrix, for dense layers of many input channels whose
im2col costs most (stride 2, 7x7 maps).

The panel GEMM (:mod:`.panel`) puts pixels in the lanes: its image rows must be contiguous,
so a strided or padded convolution first writes its im2col (ResNet-50's 128->128 3x3/2 at
56: 1152 rows of 784 columns, 3.6 MB, ~0.27 ms of a 1.4 ms layer on two threads). Here the
lanes hold output channels, read from the weight packed once in strips of :data:`STRIP`
channels (``strips[s, k, j] = w[STRIP*s + j, k]``), and the image supplies one value per
pixel and step, broadcast: any stride, dilation or padding is then just an address. The tile
is :data:`PIXELS` output pixels x :data:`STRIP` channels: with AVX-512's 32 registers 7 x 64
in 28 accumulators of 16 floats (on a CPU that runs 512-bit operations in two halves the FMA
count per cycle is that of 8-float ones, with half the instructions); with AVX2's 16, 6 x 16
in 12 of 8 floats. It starts from the bias, over the image padded once per call into ``xp``
(zeros around it, so a tap never tests its bounds): step k reads the tap offset
``taps[k]``, the tile's pixels at ``xp + offs[r] + taps[k]``, :data:`VECTORS` weight
vectors, and issues PIXELS x VECTORS FMAs. The inner dimension runs in blocks of
:data:`K_BLOCK` steps over a group of :data:`GROUP` tiles (the weight block, 64 KB or 16 KB,
stays in cache while the group's pixels pass over it; partial sums wait in a per-thread
scratch), and the sum over k runs in the panel GEMM's order, so the two give the same bits.
The finished tile adds the residual (lanes gathered from the channel-major output layout),
runs the activation in registers (:mod:`._act_ir`, on 8-float vectors) and scatters its
lanes into ``out`` [OC, OH*OW].

One image, ReLU, the weight from memory as in a model, against im2col then the panel GEMM
(the form before), median of paired ratios (AMD EPYC Zen 4 VM, 2026-12-05; the 6 x 16 tile
on Zen 3: ``lowerkit.backend.cpu.channel_direct``): two threads
0.85-0.94 on 256->256 3x3/2 at 28, 0.80-0.93 on 512->512 3x3/2 at 14, 0.96-1.03 on 128->128
3x3/2 at 56 and on 512x7x7 3x3; one thread 0.82-0.91. With 6 x 32 tiles of 8-float vectors
it lost on 7x7 maps (49 pixels in 6-pixel tiles leave most of a ninth empty); 14 x 32
spilled; 1x1/2 layers lost to the subsampled image on the panel GEMM (1.14 against 1.02 ms).

Kernels:

- :func:`conv` — every image of a batch on the calling thread;
- :func:`team_pad` then :func:`team_conv` — one image as two team regions: the padded copy
  in bands of rows, then each thread's band of the tiles (or of the strips, :func:`_share`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ._act import act_span
from ._act_ir import IR_CODES, activate
from ._simd import _F32, _I32, _I64, _V8, broadcast, const as _const, fmuladd, vector
from ._types import f8, i8, ro, rw
from .layer import team_ready
from .panel import TILE, _close_loop, _merged, _prefetch

team_ready()  # team_pad and team_conv are parallel regions: choose the threading layer first

# The tile: PIXELS output pixels x VECTORS vectors of LANES channels, in PIXELS * VECTORS
# accumulators. With AVX-512's 32 registers (the panel GEMM's wide tile), 7 pixels (a 7x7
# map's row) x 64 channels in 28; with 16 (AVX2), 6 pixels x 16 channels in 12, beside the
# step's two weight vectors and its broadcast.
PIXELS, LANES, VECTORS = (7, 16, 4) if TILE == 32 else (6, 8, 2)
STRIP = LANES * VECTORS  # output channels of a strip (of a tile)
K_BLOCK = 256  # steps of k a group of tiles runs before the next block
GROUP = 16  # tiles that pass over one block of the weight
PREFETCH = 256  # floats of the strip ahead of the step a tile prefetches (4 steps)
# ... unless it is one of the first tiles of its group over a block of k: those fetch the next
# block instead, one 64-byte line a step (tile t its lines [t * K_BLOCK, (t + 1) * K_BLOCK)),
# so the weight streams from memory while the group computes rather than in its first tile.
LINE = 16  # floats of a cache line

_VECTOR = vector(LANES)
_U64 = types.uint64
_FIRST_HALF = ir.Constant(ir.VectorType(_I32, 8), list(range(8)))
_SECOND_HALF = ir.Constant(ir.VectorType(_I32, 8), list(range(8, 16)))


# k0, k1, strip, xp, taps, offs, out (the strip's first channel), hw, pix, bias (the strip's),
# rows, chans, partial, first, last, activation code, p0, p1, residual (like out; 0: none),
# ahead (the lines to prefetch; 0: the strip PREFETCH floats on)
_TILE_SIG = types.void(i8, i8, _U64, _U64, _U64, _U64, _U64, i8, _U64, _U64, i8, i8, _U64, types.boolean,
                       types.boolean, i8, f8, f8, _U64, _U64)


@intrinsic
def _tile(typingctx, k0, k1, strip, xp, taps, offs, out, hw, pix, bias, rows, chans, partial, first, last, code, p0,
          p1, residual, ahead):
    """Steps [k0, k1) of one tile: pixels ``offs[0:7]`` (offsets into ``xp``; rows past
    ``rows`` repeat a valid one and are never stored) x the strip's channels. Starts from
    the ``bias`` where ``first``, else from the tile's ``partial`` sums [PIXELS, STRIP]; ends by
    storing them there, or where ``last`` by adding the ``residual`` (if its address is not 0),
    the activation, and storing pixel r's channel j < ``chans`` at ``out + j*hw + pix[r]``
    (whose lines, and the residual's, it prefetches first). Step i prefetches the line
    ``ahead + 64 i`` bytes where ``ahead`` is not 0, else the strip's row :data:`PREFETCH`
    floats on."""

    def codegen(context, builder, signature, args):
        (k0_, k1_, w_a, x_a, taps_a, offs_a, c_a, hw_, pix_a, b_a, rows_, chans_, part_a, first_, last_, code_, p0_,
         p1_, res_a, ahead_a) = args
        fptr, vptr, iptr = _F32.as_pointer(), _VECTOR.as_pointer(), _I64.as_pointer()
        w_p, x_p, c_p, b_p, part_p, res_p = (builder.inttoptr(a, fptr) for a in (w_a, x_a, c_a, b_a, part_a, res_a))
        taps_p, offs_p, pix_p = (builder.inttoptr(a, iptr) for a in (taps_a, offs_a, pix_a))

        def vec(base, i):
            return builder.bitcast(builder.gep(base, [_const(i)]), vptr)

        pixel_rows = [builder.gep(x_p, [builder.load(builder.gep(offs_p, [_const(r)]))]) for r in range(PIXELS)]
        from_bias = [builder.load(vec(b_p, LANES * v), align=4) for v in range(VECTORS)]
        start = [builder.select(first_, from_bias[v], builder.load(vec(part_p, LANES * (r * VECTORS + v)), align=4))
                 for r in range(PIXELS) for v in range(VECTORS)]
        with builder.if_then(last_):
            _fetch_scatter_lines(builder, c_p, hw_, pix_p, res_a, res_p)
        pre = builder.block
        loop, done = builder.append_basic_block("tile.loop"), builder.append_basic_block("tile.done")
        builder.cbranch(builder.icmp_signed("<", k0_, k1_), loop, done)
        builder.position_at_end(loop)
        idx = builder.phi(_I64)
        idx.add_incoming(k0_, pre)
        acc = []
        for s in start:
            phi = builder.phi(_VECTOR)
            phi.add_incoming(s, pre)
            acc.append(phi)
        tap = builder.load(builder.gep(taps_p, [idx]))
        w_row = builder.gep(w_p, [builder.mul(idx, _const(STRIP))])
        next_line = builder.gep(builder.inttoptr(ahead_a, fptr), [builder.mul(builder.sub(idx, k0_), _const(LINE))])
        _prefetch(builder, builder.select(builder.icmp_unsigned("!=", ahead_a, _const(0)), next_line,
                                          builder.gep(w_row, [_const(PREFETCH)])))
        weights = [builder.load(vec(w_row, LANES * v), align=4) for v in range(VECTORS)]
        new = []
        for r in range(PIXELS):
            value = broadcast(builder, builder.load(builder.gep(pixel_rows[r], [tap])), LANES)
            new.extend(fmuladd(builder, value, weights[v], acc[r * VECTORS + v]) for v in range(VECTORS))
        final = _close_loop(builder, idx, acc, new, k1_, (pre, start), loop, done)
        with builder.if_else(last_) as (finish, keep):
            with keep:
                for i, value in enumerate(final):
                    builder.store(value, vec(part_p, LANES * i), align=4)
            with finish:
                _epilogue(builder, final, c_p, hw_, pix_p, rows_, chans_, code_, p0_, p1_, res_a, res_p)
        return context.get_dummy_value()

    return _TILE_SIG, codegen


def _fetch_scatter_lines(builder, c_p, hw_, pix_p, res_a, res_p):
    """Before the last block of a tile: prefetch the lines its epilogue will write (for
    writing) and, where there is one, the residual's it will read — a strip's channel rows,
    the tile's first and last pixel each, while the block's FMAs run. The epilogue touches a
    line or more of each row, one lane at a time; from another core's cache (a model's arenas are
    shared between its layers and threads) each would wait in turn."""
    ends = [builder.load(builder.gep(pix_p, [_const(r)])) for r in (0, PIXELS - 1)]
    has_res = builder.icmp_unsigned("!=", res_a, _const(0))
    for j in range(STRIP):
        row = builder.mul(_const(j), hw_)
        for end in ends:
            at = builder.add(row, end)
            _prefetch_for(builder, builder.gep(c_p, [at]), write=True)
            _prefetch_for(builder, builder.gep(builder.select(has_res, res_p, c_p), [at]), write=False)


def _prefetch_for(builder, ptr, write: bool):
    """``llvm.prefetch`` of the line at ``ptr`` for writing (``prefetchw``) or reading."""
    i8p = ir.IntType(8).as_pointer()
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32]),
                                        "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(_I32, int(write)), ir.Constant(_I32, 3),
                      ir.Constant(_I32, 1)])


def _epilogue(builder, final, c_p, hw_, pix_p, rows_, chans_, code_, p0_, p1_, res_a, res_p):
    """A finished tile: its accumulators as 8-float vectors (16-float ones in halves), plus
    the residual, through the activation, scattered into the channel-major output (a whole
    strip without a test per lane; the last, partial one with)."""
    halves = list(final)
    if LANES == 16:
        halves = []
        for value in final:
            halves.append(builder.shuffle_vector(value, value, _FIRST_HALF))
            halves.append(builder.shuffle_vector(value, value, _SECOND_HALF))
    per_pixel = STRIP // 8  # 8-float halves (or vectors) a pixel has
    pixel_at = [builder.load(builder.gep(pix_p, [_const(r)])) for r in range(PIXELS)]
    whole = builder.icmp_signed(">=", chans_, _const(STRIP))

    def lane_ptr(base, r, j):  # channel j of pixel r (channel 0 past ``chans``: valid memory)
        channel = builder.select(builder.or_(whole, builder.icmp_signed("<", _const(j), chans_)), _const(j), _const(0))
        return builder.gep(base, [builder.add(builder.mul(channel, hw_), pixel_at[r])])

    before = builder.block
    add, joined = builder.append_basic_block("tile.residual"), builder.append_basic_block("tile.joined")
    builder.cbranch(builder.icmp_unsigned("!=", res_a, _const(0)), add, joined)
    builder.position_at_end(add)
    added = []
    for r in range(PIXELS):
        for h in range(per_pixel):
            lanes = ir.Constant(_V8, ir.Undefined)
            for i in range(8):
                lanes = builder.insert_element(lanes, builder.load(lane_ptr(res_p, r, 8 * h + i)), ir.Constant(_I32, i))
            added.append(builder.fadd(halves[r * per_pixel + h], lanes))
    add_end = builder.block
    builder.branch(joined)
    builder.position_at_end(joined)
    summed = activate(builder, code_, p0_, p1_, _merged(builder, (halves, before), (added, add_end)))

    def store_pixels(checked: bool):
        for r in range(PIXELS):
            with builder.if_then(builder.icmp_signed("<", _const(r), rows_)):
                for h in range(per_pixel):
                    for i in range(8):
                        j = 8 * h + i
                        value = builder.extract_element(summed[r * per_pixel + h], ir.Constant(_I32, i))
                        target = builder.gep(c_p, [builder.add(builder.mul(_const(j), hw_), pixel_at[r])])
                        if checked:
                            with builder.if_then(builder.icmp_signed("<", _const(j), chans_)):
                                builder.store(value, target)
                        else:
                            builder.store(value, target)

    with builder.if_else(whole) as (all_lanes, some_lanes):
        with all_lanes:
            store_pixels(False)
        with some_lanes:
            store_pixels(True)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _pad_rows(x, xp, pt, pl, r0, r1):
    """Rows [r0, r1) of every channel of ``xp`` [C, HP, WP]: ``x`` [C, H, W] placed at
    (``pt``, ``pl``), zeros around. Flat indices, no row views (each view numba makes costs
    two atomic reference-count updates: with them the copy took 0.07-0.11 ms of a ResNet-18
    layer in the model)."""
    c_n, h, w = x.shape[0], x.shape[1], x.shape[2]
    hp, wp = xp.shape[1], xp.shape[2]
    src, dst = x.reshape(-1), xp.reshape(-1)
    left, width, total = np.uint64(pl), np.uint64(w), np.uint64(wp)
    for c in range(c_n):
        for r in range(r0, r1):
            base = np.uint64((c * hp + r) * wp)  # unsigned: no negative-index test, so the loops vectorise
            ih = r - pt
            if ih < 0 or ih >= h:
                for j in range(total):
                    dst[base + j] = 0.0
                continue
            for j in range(left):
                dst[base + j] = 0.0
            row = np.uint64((c * h + ih) * w)
            start = base + left
            for j in range(width):
                dst[start + j] = src[row + j]
            for j in range(left + width, total):
                dst[base + j] = 0.0


# Not inlined into the regions: inlined, the team region ran 1.3x slower loaded from numba's
# cache than freshly compiled (the same source, one process after the other; the serial kernel
# did not differ); as a call of its own, within a few percent.
@njit(nogil=True, cache=True, error_model="numpy")
def _block(strips, bias, xp, taps, offs, pix, out, ra, k, m, code, p0, p1, partial, s0, s1, t0, t1, by_groups):
    """Strips [s0, s1) of output channels x tiles [t0, t1) of one image, from the padded image
    ``xp`` into ``out`` [M, OH*OW], plus the residual at address ``ra`` (shaped like ``out``;
    0: none), in groups of :data:`GROUP` tiles from ``t0``: group by group (every strip over
    a group, then the next group) with ``by_groups``, so that the image's rows are read once;
    else strip by strip (each strip of the weight read once)."""
    hw = out.shape[1]
    groups = -(-(t1 - t0) // GROUP)
    strip_count = s1 - s0
    in_tile = code in IR_CODES
    tile_code = code if in_tile else 0
    f, e = np.uint64(4), np.uint64(8)
    wa, xa, ta, oa, pa = strips.ctypes.data, xp.ctypes.data, taps.ctypes.data, offs.ctypes.data, pix.ctypes.data
    ca, ba, qa = out.ctypes.data, bias.ctypes.data, partial.ctypes.data
    of = out.reshape(-1)
    for u in range(strip_count * groups):
        if by_groups:
            s, g = s0 + u % strip_count, u // strip_count
        else:
            s, g = s0 + u // groups, u % groups
        c0 = s * STRIP
        chans = min(STRIP, m - c0)
        wp = wa + f * np.uint64(c0 * k)
        cp = ca + f * np.uint64(c0 * hw)
        rp = ra + f * np.uint64(c0 * hw) if ra else np.uint64(0)
        bp = ba + f * np.uint64(c0)
        g0, g1 = t0 + g * GROUP, min(t1, t0 + (g + 1) * GROUP)
        for k0 in range(0, k, K_BLOCK):
            k1 = min(k, k0 + K_BLOCK)
            block_end = wp + f * np.uint64(k1 * STRIP)  # the next block: this strip's, or the next one's
            for t in range(g0, g1):
                line = (t - g0) * K_BLOCK
                ahead = block_end + f * np.uint64(line * LINE) if line < K_BLOCK * STRIP // LINE else np.uint64(0)
                _tile(k0, k1, wp, xa, ta, oa + e * np.uint64(t * PIXELS), cp, hw, pa + e * np.uint64(t * PIXELS), bp,
                      min(PIXELS, hw - t * PIXELS), chans, qa + f * np.uint64((t - g0) * PIXELS * STRIP), k0 == 0,
                      k1 == k, tile_code, p0, p1, rp, ahead)
        if code != 0 and not in_tile:
            lo, hi = g0 * PIXELS, min(hw, g1 * PIXELS)
            for j in range(c0, c0 + chans):
                act_span(of, j * hw + lo, j * hw + hi, code, p0, p1)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _image_first(xp, m, k):
    """Whether a layer's image is larger than its weight (the group-by-group order)."""
    return xp.size > m * k


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _share(strip_count, tiles, by_groups, j, ways):
    """Thread ``j``'s rectangle of strips x tiles, ``(s0, s1, t0, t1)``: a band of the strips
    where they divide evenly between the threads and the weight is the larger (each thread
    then reads its share of the weight only), else a band of the tiles (every strip: as
    even as whole tiles allow). Whole (strip, group) units dealt out by count left one thread
    up to a group's work more (ResNet-50's 128->128 3x3/2: 576 against 472 tile-strips)."""
    if not by_groups and strip_count % ways == 0:
        return strip_count * j // ways, strip_count * (j + 1) // ways, 0, tiles
    return 0, strip_count, tiles * j // ways, tiles * (j + 1) // ways


_TABLE = types.Array(i8, 1, "C", readonly=True)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _address(residual, i):
    """The address of image ``i``'s residual, or 0 for none (an empty ``residual``)."""
    return residual[i].ctypes.data if residual.shape[0] else np.uint64(0)


@njit(types.void(ro(1), ro(1), ro(4), rw(3), rw(3), ro(3), _TABLE, _TABLE, _TABLE, i8, types.boolean, i8, i8, i8, f8,
                 f8, rw(1)), nogil=True, cache=True, error_model="numpy")
def conv(strips, bias, x, xp, out, residual, taps, offs, pix, m, pad, pt, pl, code, p0, p1, partial):
    """Every image of ``x`` [N, C, H, W] into ``out`` [N, M, OH*OW] on the calling thread:
    ``strips`` and ``bias`` packed (``lowerkit.backend.cpu.channel_direct.StripWeight``),
    ``xp`` [C, HP, WP] the padded-image scratch where ``pad`` (padding ``pt`` top and ``pl``
    left; else the images are read in place and ``xp`` is unused),
    ``residual`` [N, M, OH*OW] or empty for none, the tables of ``ChannelDirectConv``,
    activation ``code``, ``p0``, ``p1``; ``partial`` holds :data:`GROUP` tiles' sums."""
    k = taps.shape[0]
    strip_count, tiles = -(-m // STRIP), offs.shape[0] // PIXELS
    for i in range(x.shape[0]):
        if pad:  # two calls, not one on either array: numba types a read-only and a writable array apart
            _pad_rows(x[i], xp, pt, pl, 0, xp.shape[1])
            _block(strips, bias, xp, taps, offs, pix, out[i], _address(residual, i), k, m, code, p0, p1, partial, 0,
                   strip_count, 0, tiles, _image_first(xp, m, k))
        else:
            _block(strips, bias, x[i], taps, offs, pix, out[i], _address(residual, i), k, m, code, p0, p1, partial, 0,
                   strip_count, 0, tiles, _image_first(x[i], m, k))


@njit(types.void(ro(3), rw(3), i8, i8, i8), nogil=True, cache=True, parallel=True, error_model="numpy")
def team_pad(x, xp, pt, pl, ways):
    """One image ``x`` [C, H, W] into its padded copy ``xp`` in ``ways`` bands of rows (the
    rows a thread's band of the tiles mostly reads), one team region."""
    hp = xp.shape[1]
    for j in prange(ways):
        _pad_rows(x, xp, pt, pl, hp * j // ways, hp * (j + 1) // ways)


@njit(types.void(ro(1), ro(1), ro(3), rw(2), ro(2), _TABLE, _TABLE, _TABLE, i8, i8, f8, f8, rw(2), i8),
      nogil=True, cache=True, parallel=True, error_model="numpy")
def team_conv(strips, bias, xp, out, residual, taps, offs, pix, m, code, p0, p1, partials, ways):
    """One image from its padded copy ``xp`` (:func:`team_pad`; or the image itself where it
    needs no padding) into ``out`` [M, OH*OW] (plus ``residual`` of that shape, or [0, 0] for
    none) on ``ways`` threads, each its rectangle of strips x tiles (:func:`_share`), one team
    region; ``partials`` [ways, ...] holds each thread's partial sums."""
    k = taps.shape[0]
    strip_count, tiles = -(-m // STRIP), offs.shape[0] // PIXELS
    by_groups = _image_first(xp, m, k)
    ra = residual.ctypes.data if residual.shape[0] else np.uint64(0)
    for j in prange(ways):
        s0, s1, t0, t1 = _share(strip_count, tiles, by_groups, j, ways)
        if s1 > s0 and t1 > t0:
            _block(strips, bias, xp, taps, offs, pix, out, ra, k, m, code, p0, p1, partials[j], s0, s1, t0, t1,
                   by_groups)
