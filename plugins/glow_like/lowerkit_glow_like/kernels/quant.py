"""Quantized kernels. Activations are uint8 with a per-tensor scale and zero point; weights
are int8, symmetric per output channel; biases int32 at scale x_scale * w_scale.

Integer GEMMs run exactly on the float32 BLAS: operands are integers below 2^8 in
magnitude, and the reduction is cut into chunks of at most 512 terms, so every partial
sum of a chunk stays below 512 * 255 * 127 < 2^24 and is an exact float32 integer,
whatever order BLAS adds in; the chunk results are summed in float64 (exact below 2^53).
The result equals int32 accumulation bit for bit.
Requantization: q_out = clamp(rint((acc + bias) * x_scale * w_scale / out_scale) + out_zp).
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import split

from . import conv
from ._base import kernel, scratch_array
from .conv import Im2col, _batched, _is_pointwise, padded_bytes


K_CHUNK = 512  # 512 * 255 * 127 = 16,581,120 < 2^24 = 16,777,216


def to_float32(array: np.ndarray, attrs: dict) -> np.ndarray:
    """int8 weights as exact float32 GEMM operands (derived once per handle)."""
    return np.asarray(array, dtype=np.float32)


def exact_matmul(a: np.ndarray, b: np.ndarray, acc: np.ndarray, part: np.ndarray) -> None:
    """acc (float64) = a @ b for integer-valued float32 operands, exactly (chunks over K)."""
    k = a.shape[1]
    for k0 in range(0, k, K_CHUNK):
        k1 = min(k, k0 + K_CHUNK)
        np.matmul(a[:, k0:k1], b[k0:k1], out=part)
        if k0 == 0:
            np.copyto(acc, part)
        else:
            np.add(acc, part, out=acc)


def _requantize(acc: np.ndarray, bias, mult, attrs, out: np.ndarray) -> None:
    if bias is not None:
        np.add(acc, bias, out=acc)
    np.multiply(acc, mult, out=acc)
    np.rint(acc, out=acc)
    np.add(acc, attrs["out_zp"], out=acc)
    np.clip(acc, attrs["qmin"], attrs["qmax"], out=acc)
    np.copyto(out, acc, casting="unsafe")


def _quantize_scratch(in_types, out_types, attrs):
    return in_types[0].numel * 4


@kernel("glow.quantize", scratch_bytes=_quantize_scratch)
def _quantize(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    tmp = scratch_array(scratch, np.float32, x.shape)
    scale, zp = np.float32(attrs["scale"]), attrs["zp"]

    def run():
        np.divide(x, scale, out=tmp)
        np.rint(tmp, out=tmp)
        np.add(tmp, zp, out=tmp)
        np.clip(tmp, 0, 255, out=tmp)
        np.copyto(out, tmp, casting="unsafe")

    return run


@kernel("glow.dequantize")
def _dequantize(inputs, outputs, attrs, scratch):
    (q,), (out,) = inputs, outputs
    scale, zp = np.float32(attrs["scale"]), attrs["zp"]

    def run():
        np.subtract(q, zp, out=out, dtype=np.float32)
        np.multiply(out, scale, out=out)

    return run


def _qconv_scratch(in_types, out_types, attrs):
    x, w = in_types[0], in_types[1]
    _, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    _, _, oh, ow = out_types[0].shape
    pad = padded_bytes(cg, (h, wd), tuple(attrs.get("padding", (0, 0, 0, 0))), 4)
    images = x.shape[0] if _batched(x.shape[0], oh, ow, int(attrs.get("groups", 1))) else 1
    return 4 * c * h * wd + (4 * cg * kh * kw + 12 * oc) * images * oh * ow + pad


@kernel("glow.qconv2d", scratch_bytes=_qconv_scratch, derive=((1, to_float32),), parallel=True)
def _qconv(inputs, outputs, attrs, scratch, parallel=None):
    x, w, bias, mult = inputs
    (out,) = outputs
    stride, padding = tuple(attrs.get("stride", (1, 1))), tuple(attrs.get("padding", (0, 0, 0, 0)))
    dilation, groups = tuple(attrs.get("dilation", (1, 1))), int(attrs.get("groups", 1))
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    _, _, oh, ow = out.shape
    ocg, k = oc // groups, cg * kh * kw
    w2 = np.asarray(w, dtype=np.float32).reshape(groups, ocg, k)
    b2 = np.asarray(bias, dtype=np.float64).reshape(oc, 1)
    m2 = np.asarray(mult, dtype=np.float64).reshape(oc, 1)
    pointwise = _is_pointwise(w.shape, stride, padding, dilation)
    if parallel is not None and (groups > 1 or 2 * oc * k * oh * ow < conv.PARALLEL_MIN_FLOPS):
        parallel = None  # the hand-off would cost more than it saves
    if _batched(n, oh, ow, groups):
        return _qconv_batched(x, w, b2, m2, out, attrs, (stride, padding, dilation), scratch, parallel)
    xs = scratch_array(scratch, np.float32, (c, h, wd))
    col = scratch_array(scratch, np.float32, (cg, kh, kw, oh, ow), offset=xs.nbytes)
    acc = scratch_array(scratch, np.float64, (oc, oh * ow), offset=xs.nbytes + col.nbytes)
    part = scratch_array(scratch, np.float32, (ocg, oh * ow), offset=xs.nbytes + col.nbytes + acc.nbytes)
    col2 = col.reshape(k, oh * ow)
    im2col = Im2col(cg, (h, wd), (kh, kw), (oh, ow), stride, padding, dilation, np.float32, scratch,
                    offset=xs.nbytes + col.nbytes + acc.nbytes + part.nbytes)
    x_zp = attrs["x_zp"]
    if parallel is not None:
        # Bands of output pixels: each task multiplies and requantizes its columns.
        src = xs.reshape(c, h * wd) if pointwise else col2
        bands = split(oh * ow, parallel.ways, keep_empty=True)
        image = [0]

        def task(j: int) -> None:
            cols = bands[j]
            exact_matmul(w2[0], src[:, cols], acc[:, cols], part[:, cols])
            _requantize(acc[:, cols], b2, m2, attrs, out[image[0]].reshape(oc, oh * ow)[:, cols])

        def run_parallel():
            for i in range(n):
                np.subtract(x[i], x_zp, out=xs, dtype=np.float32)
                if not pointwise:
                    im2col(xs, col)
                image[0] = i
                parallel(task)

        return run_parallel

    def run():
        for i in range(n):
            np.subtract(x[i], x_zp, out=xs, dtype=np.float32)
            for g in range(groups):
                channels = xs[g * cg : (g + 1) * cg]
                if pointwise:
                    src = channels.reshape(cg, h * wd)
                else:
                    im2col(channels, col)
                    src = col2
                exact_matmul(w2[g], src, acc[g * ocg : (g + 1) * ocg], part)
            _requantize(acc, b2, m2, attrs, out[i].reshape(oc, oh * ow))

    return run


def _qconv_batched(x, w, b2, m2, out, attrs, geometry, scratch, parallel=None):
    """All images in one exact GEMM (late layers): columns [K, N, OH, OW]."""
    stride, padding, dilation = geometry
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    _, _, oh, ow = out.shape
    w2 = np.asarray(w, dtype=np.float32).reshape(oc, -1)
    xs = scratch_array(scratch, np.float32, (c, h, wd))
    col = scratch_array(scratch, np.float32, (c, kh, kw, n, oh, ow), offset=xs.nbytes)
    acc = scratch_array(scratch, np.float64, (oc, n, oh * ow), offset=xs.nbytes + col.nbytes)
    part = scratch_array(scratch, np.float32, (oc, n * oh * ow), offset=xs.nbytes + col.nbytes + acc.nbytes)
    im2col = Im2col(c, (h, wd), (kh, kw), (oh, ow), stride, padding, dilation, np.float32, scratch,
                    offset=xs.nbytes + col.nbytes + acc.nbytes + part.nbytes)
    col2, acc2 = col.reshape(-1, n * oh * ow), acc.reshape(oc, n * oh * ow)
    b3, m3 = b2.reshape(oc, 1, 1), m2.reshape(oc, 1, 1)
    out_t = out.reshape(n, oc, oh * ow).transpose(1, 0, 2)
    x_zp = attrs["x_zp"]

    bands = split(n * oh * ow, parallel.ways if parallel is not None else 1, keep_empty=True)

    def gemm(j: int) -> None:
        cols = bands[j]
        exact_matmul(w2, col2[:, cols], acc2[:, cols], part[:, cols])

    def run():
        for i in range(n):
            np.subtract(x[i], x_zp, out=xs, dtype=np.float32)
            im2col(xs, col[:, :, :, i])
        if parallel is None:
            gemm(0)
        else:
            parallel(gemm)
        _requantize(acc, b3, m3, attrs, out_t)

    return run


def _qfc_scratch(in_types, out_types, attrs):
    x, w = in_types[0], in_types[1]
    m = x.numel // w.shape[0]
    return 4 * m * w.shape[0] + 12 * m * w.shape[1]


@kernel("glow.qfc", scratch_bytes=_qfc_scratch, derive=((1, to_float32),))
def _qfc(inputs, outputs, attrs, scratch):
    x, w, bias, mult = inputs
    (out,) = outputs
    k, nout = w.shape
    x2, out2 = x.reshape(-1, k), out.reshape(-1, nout)
    w32 = np.asarray(w, dtype=np.float32)
    b64, m64 = np.asarray(bias, dtype=np.float64), np.asarray(mult, dtype=np.float64)
    xs = scratch_array(scratch, np.float32, x2.shape)
    acc = scratch_array(scratch, np.float64, out2.shape, offset=xs.nbytes)
    part = scratch_array(scratch, np.float32, out2.shape, offset=xs.nbytes + acc.nbytes)
    x_zp = attrs["x_zp"]

    def run():
        np.subtract(x2, x_zp, out=xs, dtype=np.float32)
        exact_matmul(xs, w32, acc, part)
        _requantize(acc, b64, m64, attrs, out2)

    return run


def _qadd_scratch(in_types, out_types, attrs):
    return 8 * out_types[0].numel


@kernel("glow.qadd", scratch_bytes=_qadd_scratch, inplace=True)
def _qadd(inputs, outputs, attrs, scratch):
    (a, b), (out,) = inputs, outputs
    acc = scratch_array(scratch, np.float32, out.shape)
    tmp = scratch_array(scratch, np.float32, out.shape, offset=acc.nbytes)
    ra = np.float32(attrs["a_scale"] / attrs["out_scale"])
    rb = np.float32(attrs["b_scale"] / attrs["out_scale"])
    a_zp, b_zp = attrs["a_zp"], attrs["b_zp"]

    def run():
        # Both operands are read into float scratch before out (which may alias a) is written.
        np.subtract(a, a_zp, out=acc, dtype=np.float32)
        np.multiply(acc, ra, out=acc)
        np.subtract(b, b_zp, out=tmp, dtype=np.float32)
        np.multiply(tmp, rb, out=tmp)
        np.add(acc, tmp, out=acc)
        np.rint(acc, out=acc)
        np.add(acc, attrs["out_zp"], out=acc)
        np.clip(acc, attrs["qmin"], attrs["qmax"], out=acc)
        np.copyto(out, acc, casting="unsafe")

    return run
