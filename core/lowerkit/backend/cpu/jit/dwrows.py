"""Depthwise convolution at stride 1 (3x3 also at stride 2) straight on NCHW rows, in masked
vectors.

Where vectors hold 16 floats (AVX-512) a 14x14 plane's row is one vector, and a 28x28 one's
two: the row itself is the unit of work, without the blocked kernel's channels-last turns
(:mod:`.dwblock`: an 8x8 transpose in and one out per 8 pixels of 8 planes, shuffles that on
Intel's cores share one port) or the flat kernel's edge passes (``conv.depthwise3x3_same``).
One thread, four images, µs, blocked or flat -> rows (Intel Xeon VM, AVX-512): 3x3 384x14x14
160 -> 90, 576x14x14 290 -> 138, 192x28x28 254 -> 175, 144x56x56 675 -> 572; 5x5 672x14x14
486 -> 340, 240x28x28 687 -> 464; 7x7 192x28x28 803 -> 704. On 7x7 maps (seven lanes of
sixteen) the blocked kernel stays ahead (960x7x7 3x3: 88 against 122 µs).

How a plane is computed: output rows :data:`ROWS` at a time (the accumulators of one kernel
size's rows fit the registers beside its broadcast weights, and each output row's chain of
k*k dependent FMAs runs beside six others), one vector of columns at a time:

- every input row the group reads is loaded once per tap column as one unaligned vector,
  masked so that the columns outside the row — the padding — read as zeros (a masked-off lane
  touches no memory, so the loads may start before the row or run past it); at stride 2 as
  two vectors, of which one shuffle keeps the even columns;
- an input row above or below the plane is read from a row of zeros (``scratch``);
- the masks depend on the column vector only: :func:`depthwise_rows` makes them once a call;
- bias and activation (:data:`._act_ir.IR_CODES`; the others after each plane) in registers,
  then one masked store per output row.

Each output adds its taps to the bias in the order ``.dwblock.depthwise_blocked`` does (row by
row, column by column, one FMA each): the two give the same bits.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ._act import act_span
from ._act_ir import IR_CODES, activate
from ._simd import _F32, _I32, allow_512_bit, broadcast, const, fmuladd, masked, vector
from ._types import f8, i8, ro, rw
from .pool import plane_mean
from .vectors import host_full_width

LANES = 16 if host_full_width() else 8  # columns of a vector (8 on AVX2: vmaskmovps)
KERNELS = (3, 5, 7)  # square kernel sizes with a compiled routine at stride 1 ...
STRIDE2_KERNELS = (3,)  # ... and at stride 2 (``jit.select`` takes no other: fewer routines to compile)
# Output rows computed together, by kernel size: 7 (every map side of 14 or more in the zoo is a
# multiple of 7: no rows left over) beside 9 or 25 weights in registers; 8 for 7x7 (its 49
# weights are read from memory anyway). Four images, µs: 3x3 384x14x14 R=4 105, R=7 90; 5x5
# 672x14x14 R=4 348, R=7 340; 7x7 384x14x14 R=4 436, R=7 421, R=8 370.
ROWS = {3: 7, 5: 7, 7: 8}
VARIANTS = tuple((k, 1) for k in KERNELS) + tuple((k, 2) for k in STRIDE2_KERNELS)


def _masks_per_vector(kernel: int, stride: int) -> int:
    """Masks a vector of output columns needs: one per tap column (two at stride 2: the two
    input vectors whose even columns it takes), then the store's."""
    return kernel * stride + 1


def _lane_mask(builder, masks_address, index):
    """The mask at ``index`` of the int32 table at ``masks_address``, as LANES booleans."""
    p = builder.inttoptr(builder.add(masks_address, builder.mul(index, const(4))), _I32.as_pointer())
    bits = builder.trunc(builder.load(p, align=4), ir.IntType(LANES))
    return builder.bitcast(bits, ir.VectorType(ir.IntType(1), LANES))


_EVENS = ir.Constant(ir.VectorType(_I32, LANES), list(range(0, 2 * LANES, 2)))


def _emit_rows(builder, k: int, stride: int, rows: int, y0, x0, masks, store_mask, plane) -> None:
    """Output rows [y0, y0 + rows), the LANES columns from ``x0``: see the module docstring."""
    src, dst, zeros, h, w, ow, pt, pl, weights, bias, act = plane
    vt = vector(LANES)
    zero = ir.Constant(vt, [0.0] * LANES)
    four = const(4)

    def load(address, mask):
        ptr = builder.inttoptr(address, vt.as_pointer())
        return masked(builder, "load", vt, [ptr, ir.Constant(_I32, 4), mask, zero], LANES)

    accs = [bias] * rows
    y_in = builder.mul(y0, const(stride))
    x_in = builder.sub(builder.mul(x0, const(stride)), pl)  # input column of lane 0's first tap (may be < 0)
    for i in range(stride * (rows - 1) + k):  # input row i feeds output row j with its tap row i - stride * j
        r = builder.sub(builder.add(y_in, const(i)), pt)
        inside = builder.and_(builder.icmp_signed(">=", r, const(0)), builder.icmp_signed("<", r, h))
        row = builder.select(inside, builder.add(src, builder.mul(builder.mul(r, w), four)), zeros)
        for b in range(k):
            start = builder.add(row, builder.mul(builder.add(x_in, const(b)), four))
            if stride == 1:
                v = load(start, masks[b])
            else:  # the even columns of two vectors: one shuffle
                lo, hi = load(start, masks[2 * b]), load(builder.add(start, const(4 * LANES)), masks[2 * b + 1])
                v = builder.shuffle_vector(lo, hi, _EVENS)
            for j in range(rows):
                a = i - stride * j
                if 0 <= a < k:
                    accs[j] = fmuladd(builder, v, weights[a * k + b], accs[j])
    accs = activate(builder, *act, accs)
    for j in range(rows):
        o = builder.add(builder.mul(builder.add(y0, const(j)), ow), x0)
        ptr = builder.inttoptr(builder.add(dst, builder.mul(o, four)), vt.as_pointer())
        masked(builder, "store", ir.VoidType(), [accs[j], ptr, ir.Constant(_I32, 4), store_mask], LANES)


def _emit_plane(builder, args, k: int, stride: int) -> None:
    """Output rows [y0, y1) of one plane of a ``k`` x ``k`` kernel at ``stride`` (the arguments
    of :func:`_plane` after the key)."""
    src, dst, wt, bias, zeros, masks_address, h, w, y0, y1, ow, pt, pl, code, p0, p1 = args
    if LANES > 8:
        allow_512_bit(builder)
    fptr = builder.inttoptr(wt, _F32.as_pointer())
    weights = [broadcast(builder, builder.load(builder.gep(fptr, [const(t)])), LANES) for t in range(k * k)]
    plane = (src, dst, zeros, h, w, ow, pt, pl, weights, broadcast(builder, builder.fptrunc(bias, _F32), LANES),
             (code, p0, p1))
    vectors = builder.udiv(builder.add(ow, const(LANES - 1)), const(LANES))
    per_vector = _masks_per_vector(k, stride)
    rows = ROWS[k]
    groups = builder.udiv(builder.sub(y1, y0), const(rows))

    def vector_masks(c):
        first = builder.mul(c, const(per_vector))
        masks = [_lane_mask(builder, masks_address, builder.add(first, const(b))) for b in range(per_vector - 1)]
        return masks, _lane_mask(builder, masks_address, builder.add(first, const(per_vector - 1)))

    with cgutils.for_range(builder, groups) as group:
        with cgutils.for_range(builder, vectors) as column:
            masks, store_mask = vector_masks(column.index)
            _emit_rows(builder, k, stride, rows, builder.add(y0, builder.mul(group.index, const(rows))),
                       builder.mul(column.index, const(LANES)), masks, store_mask, plane)
    y_left = builder.add(y0, builder.mul(groups, const(rows)))
    left = builder.sub(y1, y_left)
    with cgutils.for_range(builder, vectors) as column:  # the last oh % rows rows
        masks, store_mask = vector_masks(column.index)
        done = builder.append_basic_block("rows.done")
        switch = builder.switch(left, done)
        for count in range(1, rows):
            case = builder.append_basic_block(f"rows.{count}")
            switch.add_case(const(count), case)
            builder.position_at_end(case)
            _emit_rows(builder, k, stride, count, y_left, builder.mul(column.index, const(LANES)), masks, store_mask,
                       plane)
            builder.branch(done)
        builder.position_at_end(done)


_U64 = types.uint64


def _plane_routine(variants: tuple[tuple[int, int], ...]):
    """The intrinsic that computes output rows [y0, y1) of one plane (addresses as integers, of
    the plane's row 0 in and out; ``key`` = kernel size * 4 + stride, one of ``variants``),
    chosen by a switch."""

    @intrinsic
    def plane(typingctx, key, src, dst, wt, bias, zeros, masks, h, w, y0, y1, ow, pt, pl, code, p0, p1):
        sig = types.void(i8, _U64, _U64, _U64, f8, _U64, _U64, i8, i8, i8, i8, i8, i8, i8, i8, f8, f8)

        def codegen(context, builder, signature, args):
            done = builder.append_basic_block("kernel.done")
            switch = builder.switch(args[0], done)
            for size, stride in variants:
                case = builder.append_basic_block(f"kernel.{size}.{stride}")
                switch.add_case(const(size * 4 + stride), case)
                builder.position_at_end(case)
                _emit_plane(builder, args[1:], size, stride)
                builder.branch(done)
            builder.position_at_end(done)
            return context.get_dummy_value()

        return sig, codegen

    return plane


_plane = _plane_routine(VARIANTS)
# The 3x3 kernel's routines only, for callers that take no other (less code to compile).
plane3x3 = _plane_routine(tuple((k, s) for k, s in VARIANTS if k == 3))


def rows_scratch(in_hw, out_hw, kernel: int, stride: int = 1) -> int:
    """Floats of scratch one :func:`depthwise_rows` call needs per thread: a row of zeros as wide
    as the input, and the column vectors' masks."""
    vectors = -(-out_hw[1] // LANES)
    return in_hw[1] + vectors * _masks_per_vector(kernel, stride)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def row_masks(scratch, wd, ow, k, stride, pl):
    """A row of ``wd`` zeros at the start of ``scratch``, then the int32 masks of every vector of
    ``ow`` output columns (returned): per load, the lanes whose input column lies inside the
    row; then the store's (see :func:`rows_scratch`)."""
    vectors = (ow + LANES - 1) // LANES
    per_vector = k * stride + 1  # as _masks_per_vector
    scratch[:wd] = 0
    masks = scratch[wd:wd + vectors * per_vector].view(np.int32)
    for c in range(vectors):
        for m in range(per_vector):
            bits = 0
            for lane in range(LANES):
                col = c * LANES + lane
                # load m reads, in lane ``lane``, input column stride * (vector's first) + b - pl + lane
                # (+ LANES for the second load of a tap at stride 2)
                at = stride * c * LANES + m // stride - pl + lane + (m % stride) * LANES
                if (m == per_vector - 1 and col < ow) or (m < per_vector - 1 and 0 <= at < wd):
                    bits |= 1 << lane
            masks[c * per_vector + m] = bits
    return masks


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def ir_code(code):
    """Whether the activation ``code`` runs in registers (:data:`._act_ir.IR_CODES`)."""
    in_ir = False
    for known in IR_CODES:
        in_ir = in_ir or code == known
    return in_ir


_SIG = types.void(ro(4), ro(4), ro(1), rw(1), rw(4), rw(1), i8, i8, i8, i8, f8, f8, i8, i8)


@njit(_SIG, nogil=True, cache=True, error_model="numpy")
def depthwise_rows(x, w, bias, scratch, out, means, stride, pt, pl, code, p0, p1, first, last):
    """Depthwise ``k`` x ``k`` convolution (``w`` [C, 1, k, k]) at ``stride``, (k, stride) one of
    :data:`VARIANTS` (else ``ValueError``), undilated, padding (pt, pl) at the top and left
    (the bottom and right follow from the output's size), with bias (empty: none) and
    activation ``code``, planes [first, last) of ``out`` (plane p = image p // C, channel p %
    C). ``scratch``: at least :func:`rows_scratch` floats. ``means`` (one float per plane of
    ``out``, or empty): each plane's mean as well."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[2], out.shape[3]
    k = w.shape[2]
    known = False
    for size, step in VARIANTS:
        known = known or (k == size and stride == step)
    if not known:
        raise ValueError("depthwise_rows: no routine for this kernel size and stride")
    n_in, n_out = h * wd, oh * ow
    masks = row_masks(scratch, wd, ow, k, stride, pl)
    xa, oa, wa = np.uint64(x.ctypes.data), np.uint64(out.ctypes.data), np.uint64(w.ctypes.data)
    za, ma = np.uint64(scratch.ctypes.data), np.uint64(masks.ctypes.data)
    of = out.reshape(-1)
    in_ir = ir_code(code)
    has_bias = bias.shape[0] > 0
    u4 = np.uint64(4)
    for p in range(first, last):
        c = p % c_n
        b = np.float64(bias[c]) if has_bias else 0.0
        _plane(k * 4 + stride, xa + u4 * np.uint64(p * n_in), oa + u4 * np.uint64(p * n_out),
               wa + u4 * np.uint64(c * k * k), b, za, ma, h, wd, 0, oh, ow, pt, pl, code if in_ir else -1, p0, p1)
        if not in_ir:
            act_span(of, p * n_out, (p + 1) * n_out, code, p0, p1)
        if means.shape[0] > 0:
            means[p] = plane_mean(of, p * n_out, (p + 1) * n_out)
