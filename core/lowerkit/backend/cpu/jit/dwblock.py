"""Depthwise convolution on channels-last blocks of 8 planes (any kernel size, stride 1 or 2).

On NCHW planes a depthwise kernel vectorises along a row, and a small plane's rows are short:
a 7x7 output row is less than one 8-float vector, and whatever the kernel does per plane
(padding, phases, copying out) costs as much as the taps. Here 8 planes at a time are
turned into a zero-bordered channels-last buffer, ``buf[i, j, c]``, so every tap of every
output pixel is one 8-float fused multiply-add whatever the plane's size, and the padding is
zeros written once per call. The turns are 8x8 transposes in registers (8 loads, 24
shuffles, 8 stores), in and out.

- :func:`depthwise_blocked` — planes [first, last) of ``out``, a block of up to 8 at a time;
- :func:`blocked_table` / :func:`blocked_scratch` — its bind-time geometry and scratch size;
- ``blocked_weights`` (:mod:`.depthwise`, plain Python) — the weights and bias in the blocks'
  channel-innermost layout, made once at bind time: a block then reads its 8 channels' taps
  where they are, instead of gathering them plane by plane on every call (on 7x7 maps that
  gather was a third of the kernel: 1152x7x7 5x5, 4 images, 118 of 283 µs).
``lowerkit.backend.cpu.jit.select`` decides where it runs (it replaced a phase kernel for 5x5,
a row kernel for 3x3 and numpy's channels-last copies for 7x7: 1.5-5x faster).

Compute: ``_taps`` produces 8 consecutive output pixels of a row (7 on rows of 7 — every 7x7
map, where two overlapping groups of 4 cost nnpack's 5x5 1152x7x7 at batch 1 62-70 µs against
41 —, 4 on rows of 4-6, else one) in as many accumulators, each input vector loaded once for
all the pixels whose window holds it (8 pixels of a 5x5 stride-1 kernel: 12 input and 5
weight loads per 40 FMAs); the last
group of a row overlaps the one before rather than run short. A partial block (fewer than 8
planes left in the image or the band) reads its last plane in the missing lanes and drops
them on the way out; a plane of fewer than 8 pixels goes lane by lane.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from ._act import act_span
from .pool import plane_mean
from ._simd import _I64, _V8, fmuladd, transpose8
from ._types import f8, i8, ro, rw

LANES = 8  # planes per block: one AVX vector of floats
WIDTHS = (8, 7, 4, 1)  # output pixels of a row computed together (accumulators in registers)
KERNELS = ((3, 3), (5, 5), (7, 7))  # (kh, kw) with a compiled taps routine, strides 1 and 2 each

def _lane_index(builder, i, count):
    """``min(i, count - 1)``: lanes past a partial block's planes repeat its last plane."""
    last = builder.sub(count, ir.Constant(_I64, 1))
    return builder.select(builder.icmp_signed("<", ir.Constant(_I64, i), count), ir.Constant(_I64, i), last)


_U64 = types.uint64


@intrinsic
def _planes_to_pixels(typingctx, src, plane_bytes, planes, buf, offsets):
    """8 consecutive pixels of ``planes`` (<= 8) planes starting at address ``src``, the planes
    ``plane_bytes`` apart -> pixel j's 8 channels stored at ``buf + 4 * offsets[j]`` (the
    uint64 table at address ``offsets``)."""
    sig = types.void(_U64, _U64, _U64, _U64, _U64)

    def codegen(context, builder, signature, args):
        src_, stride, count, buf_, table = args
        vptr = _V8.as_pointer()
        rows = []
        for i in range(8):
            address = builder.add(src_, builder.mul(_lane_index(builder, i, count), stride))
            rows.append(builder.load(builder.inttoptr(address, vptr), align=4))
        offsets = builder.inttoptr(table, _I64.as_pointer())
        for j, column in enumerate(transpose8(builder, rows)):
            offset = builder.load(builder.gep(offsets, [ir.Constant(_I64, j)]))
            address = builder.add(buf_, builder.mul(offset, ir.Constant(_I64, 4)))
            builder.store(column, builder.inttoptr(address, vptr), align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _pixels_to_planes(typingctx, src, dst, plane_bytes, planes, spill):
    """8 consecutive channels-last pixels at address ``src`` -> 8 consecutive floats of each of
    ``planes`` planes from ``dst`` (``plane_bytes`` apart); the lanes past ``planes`` go to
    the 32 bytes at ``spill``."""
    sig = types.void(_U64, _U64, _U64, _U64, _U64)

    def codegen(context, builder, signature, args):
        src_, dst_, stride, count, spill_ = args
        vptr = _V8.as_pointer()
        base = builder.inttoptr(src_, vptr)
        pixels = [builder.load(builder.gep(base, [ir.Constant(_I64, j)]), align=4) for j in range(8)]
        for i, plane in enumerate(transpose8(builder, pixels)):
            address = builder.add(dst_, builder.mul(ir.Constant(_I64, i), stride))
            inside = builder.icmp_signed("<", ir.Constant(_I64, i), count)
            builder.store(plane, builder.inttoptr(builder.select(inside, address, spill_), vptr), align=4)
        return context.get_dummy_value()

    return sig, codegen


def _emit_taps(builder, args, kh: int, kw: int, stride: int, pixels: int) -> None:
    """``out[j] = bias + sum over taps (a, b) of wt[a * kw + b] * buf[a * row + (j * stride + b)]``
    for j < ``pixels``, every operand an 8-channel vector (``row`` in bytes; addresses as
    integers)."""
    buf_, row_bytes, wt_, bias_, out_ = args
    vptr = _V8.as_pointer()
    wt = builder.inttoptr(wt_, vptr)
    acc = [builder.load(builder.inttoptr(bias_, vptr), align=4)] * pixels
    for a in range(kh):
        base = builder.inttoptr(builder.add(buf_, builder.mul(ir.Constant(_I64, a), row_bytes)), vptr)
        inputs = {}  # column -> its vector, loaded once for every pixel whose window holds it
        for b in range(kw):
            w = builder.load(builder.gep(wt, [ir.Constant(_I64, a * kw + b)]), align=4)
            for j in range(pixels):
                col = j * stride + b
                if col not in inputs:
                    inputs[col] = builder.load(builder.gep(base, [ir.Constant(_I64, col)]), align=4)
                acc[j] = fmuladd(builder, w, inputs[col], acc[j])
    out = builder.inttoptr(out_, vptr)
    for j in range(pixels):
        builder.store(acc[j], builder.gep(out, [ir.Constant(_I64, j)]), align=4)


def _taps_key(kernel: int, stride: int, pixels: int) -> int:
    return (kernel * 4 + stride) * 16 + pixels


@intrinsic
def _taps(typingctx, kernel, stride, pixels, buf, row_bytes, wt, bias, out):
    """``pixels`` (one of ``WIDTHS``) consecutive output pixels of a row for a ``kernel`` x
    ``kernel`` window (one of ``KERNELS``) at ``stride`` 1 or 2: one routine per combination,
    unrolled, chosen by a switch (int64 arguments, addresses as uint64)."""
    sig = types.void(i8, i8, i8, _U64, _U64, _U64, _U64, _U64)

    def codegen(context, builder, signature, args):
        k, s, p = args[:3]
        key = builder.add(builder.mul(builder.add(builder.mul(k, ir.Constant(_I64, 4)), s), ir.Constant(_I64, 16)), p)
        done = builder.append_basic_block("taps.done")
        switch = builder.switch(key, done)
        for (kh, kw) in KERNELS:
            for stride in (1, 2):
                for pixels in WIDTHS:
                    case = builder.append_basic_block(f"taps.{kh}.{stride}.{pixels}")
                    switch.add_case(ir.Constant(_I64, _taps_key(kh, stride, pixels)), case)
                    builder.position_at_end(case)
                    _emit_taps(builder, args[3:], kh, kw, stride, pixels)
                    builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


def _buffer_hw(in_hw, out_hw, kernel: int, stride: int, padding) -> tuple[int, int]:
    """Rows and columns of the channels-last buffer: the windows' extent, and room for every
    input pixel (some lie past the last window when the stride skips them)."""
    pt, pl = padding[0], padding[1]
    return (max((out_hw[0] - 1) * stride + kernel, pt + in_hw[0]),
            max((out_hw[1] - 1) * stride + kernel, pl + in_hw[1]))


def blocked_table(in_hw, out_hw, kernel: int, stride: int, padding) -> np.ndarray:
    """Where each input pixel goes in the buffer, in floats (uint64, one per pixel, row-major)."""
    _, cols = _buffer_hw(in_hw, out_hw, kernel, stride, padding)
    i, j = np.divmod(np.arange(in_hw[0] * in_hw[1]), in_hw[1])
    return (((i + padding[0]) * cols + j + padding[1]) * LANES).astype(np.uint64)


def blocked_scratch(in_hw, out_hw, kernel: int, stride: int, padding) -> int:
    """Floats of scratch one :func:`depthwise_blocked` call needs per thread: the buffer, the
    block's output pixels (channels-last), its weights and bias, and the dropped lanes."""
    rows, cols = _buffer_hw(in_hw, out_hw, kernel, stride, padding)
    return LANES * (rows * cols + out_hw[0] * out_hw[1] + kernel * kernel + 2)


_TABLE = types.Array(types.uint64, 1, "C", readonly=True)
_SIG = types.void(ro(4), ro(4), ro(1), ro(3), _TABLE, rw(1), rw(4), rw(1), i8, i8, i8, i8, f8, f8, i8, i8)


@njit(_SIG, nogil=True, cache=True, error_model="numpy")
def depthwise_blocked(x, w, bias, blocks, table, scratch, out, means, stride, pt, pl, code, p0, p1, first, last):
    """Depthwise ``k`` x ``k`` convolution (``w`` [C, 1, k, k], k in 3, 5, 7), stride 1 or 2,
    padding (pt, pl) at the top and left, with bias (empty: none) and activation ``code``,
    planes [first, last) of ``out`` (plane p = image p // C, channel p % C). ``blocks``:
    ``depthwise.blocked_weights`` of ``w`` and ``bias``, or empty (``depthwise.NO_BLOCKS``:
    each block then gathers its weights from ``w``). ``table`` and ``scratch`` (at least
    :func:`blocked_scratch` floats) from the functions above. ``means`` (one float per plane of
    ``out``, or empty): each plane's mean as well, while the block is in cache."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[2], out.shape[3]
    k, s = w.shape[2], stride
    rows = max((oh - 1) * s + k, pt + h)  # as _buffer_hw
    cols = max((ow - 1) * s + k, pl + wd)
    n_in, n_out, taps = h * wd, oh * ow, k * k
    # scratch, in vectors of 8: the buffer, the block's output pixels, weights, bias, dropped lanes
    at_acc = rows * cols
    at_wt = at_acc + n_out
    at_bias = at_wt + taps
    buf = scratch[:at_acc * 8]
    acc = scratch[at_acc * 8:at_wt * 8]
    wt = scratch[at_wt * 8:at_bias * 8]
    bz = scratch[at_bias * 8:(at_bias + 1) * 8]
    spill = scratch[(at_bias + 1) * 8:(at_bias + 2) * 8]
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    has_bias = bias.shape[0] > 0
    made = blocks.shape[0] > 0
    block_floats = (taps + 1) * 8
    bf = blocks.reshape(-1)
    buf[:] = 0  # the borders stay zero: every block writes the same interior
    u4, u8, u32 = np.uint64(4), np.uint64(8), np.uint64(32)
    xa, ba, aa = np.uint64(xf.ctypes.data), np.uint64(buf.ctypes.data), np.uint64(acc.ctypes.data)
    wa, za, sa = np.uint64(wt.ctypes.data), np.uint64(bz.ctypes.data), np.uint64(spill.ctypes.data)
    ta, oa = np.uint64(table.ctypes.data), np.uint64(of.ctypes.data)
    row_bytes = np.uint64(cols * 32)
    p = first
    while p < last:
        c = p % c_n
        m = min(LANES, last - p, c_n - c)
        if made and c % LANES == 0:  # the block's weights and bias as blocked_weights laid them out
            wb = np.uint64(bf.ctypes.data) + u4 * np.uint64(c // LANES * block_floats)
            zb = wb + u32 * np.uint64(taps)
        else:
            for i in range(LANES):  # the block's weights and bias, channel-innermost
                ci = c + min(i, m - 1)
                for t in range(taps):
                    wt[t * 8 + i] = wf[ci * taps + t]
                bz[i] = bias[ci] if has_bias else np.float32(0)
            wb, zb = wa, za
        um = np.uint64(m)
        src = xa + u4 * np.uint64(p * n_in)
        if n_in >= 8:  # groups of 8 pixels, the last one overlapping the one before
            for g in range(0, n_in, 8):
                g = min(g, n_in - 8)
                _planes_to_pixels(src + u4 * np.uint64(g), u4 * np.uint64(n_in), um, ba, ta + u8 * np.uint64(g))
        else:
            for i in range(LANES):
                plane = (p + min(i, m - 1)) * n_in
                for q in range(n_in):
                    buf[table[q] + np.uint64(i)] = xf[plane + q]
        for r in range(oh):
            top = ba + row_bytes * np.uint64(r * s)
            width = 8 if ow >= 8 else (7 if ow == 7 else (4 if ow >= 4 else 1))
            for j in range(0, ow, width):
                j = min(j, ow - width)  # the last group overlaps the one before
                _taps(k, s, width, top + u32 * np.uint64(j * s), row_bytes, wb, zb, aa + u32 * np.uint64(r * ow + j))
        dst = oa + u4 * np.uint64(p * n_out)
        if n_out >= 8:
            for g in range(0, n_out, 8):
                g = min(g, n_out - 8)
                _pixels_to_planes(aa + u32 * np.uint64(g), dst + u4 * np.uint64(g), u4 * np.uint64(n_out), um, sa)
        else:
            for i in range(m):
                for q in range(n_out):
                    of[(p + i) * n_out + q] = acc[q * 8 + i]
        act_span(of, p * n_out, (p + m) * n_out, code, p0, p1)
        if means.shape[0] > 0:
            for i in range(p, p + m):
                means[i] = plane_mean(of, i * n_out, (i + 1) * n_out)
        p += m
