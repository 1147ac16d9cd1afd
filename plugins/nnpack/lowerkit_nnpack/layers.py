"""NNPACK's other layers: fully connected, max pooling, ReLU, softmax."""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import blas_limit, blas_threads_beside, im2col_view, pad_into, run_parallel, split

from .conv import RunOptions
from .geometry import GeometryError
from .workspace import Workspace


class Linear:
    """``y = x @ weight.T + bias``; the transposed weight is stored once, contiguous."""

    def __init__(self, weight: np.ndarray | None, bias: np.ndarray | None = None, *, options: RunOptions = RunOptions()) -> None:
        self.weight_t = None if weight is None else np.ascontiguousarray(np.asarray(weight, np.float32).T)
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        self.options = options

    def __call__(self, x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None) -> np.ndarray:
        wt = self.weight_t if weight is None else np.asarray(weight, np.float32).T
        if wt is None:
            raise GeometryError("this linear layer was compiled without a weight; pass weight=")
        if x.shape[-1] != wt.shape[0]:
            raise GeometryError(
                f"input must have {wt.shape[0]} features in its last axis, got shape {list(x.shape)}"
            )
        b = self.bias if bias is None else np.asarray(bias, np.float32)
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, wt.shape[0])
        out = np.empty((x2.shape[0], wt.shape[1]), dtype=np.float32)
        workers = self.options.workers

        def rows(block: slice) -> None:
            np.matmul(x2[block], wt, out=out[block])
            if b is not None:
                out[block] += b

        with blas_limit(blas_threads_beside(workers)):
            if 2 * x2.shape[0] * wt.shape[0] * wt.shape[1] < self.options.min_parallel_flops:
                workers = 1
            run_parallel(workers, rows, split(x2.shape[0], workers))
        return out.reshape(*x.shape[:-1], wt.shape[1])


class MaxPool2d:
    """Max pooling as a running maximum over the window's strided views of a -inf-padded input.

    NNPACK itself ships 2x2 stride-2 pooling; windows up to 16x16 with any stride use the
    same strided-view reduction here (dilation 1, floor mode).
    """

    def __init__(
        self, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int, int, int],
        workspace: Workspace | None = None,
    ) -> None:
        kh, kw = kernel
        t, l, b, r = padding
        if min(kernel) < 1 or min(stride) < 1:
            raise GeometryError(f"pooling size and stride must be >= 1, got size {kernel}, stride {stride}")
        for side, pad, k in (("top", t, kh), ("bottom", b, kh), ("left", l, kw), ("right", r, kw)):
            if pad < 0 or pad >= k:
                raise GeometryError(f"{side} padding must be in [0, pooling size - 1] = [0, {k - 1}], got {pad}")
        self.kernel, self.stride, self.padding = (kh, kw), tuple(stride), (t, l, b, r)
        self.ws = workspace if workspace is not None else Workspace()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        (kh, kw), (sh, sw), (t, l, b, r) = self.kernel, self.stride, self.padding
        n, c, h, w = x.shape
        oh, ow = (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1
        if oh < 1 or ow < 1:
            raise GeometryError(f"padded input {h + t + b}x{w + l + r} is smaller than the pooling window {kh}x{kw}")
        x = np.ascontiguousarray(x, dtype=np.float32)
        if any(self.padding):
            src = self.ws.get("pad", (n, c, h + t + b, w + l + r))
            pad_into(x, src, t, l, -np.inf)
        else:
            src = x
        out = np.empty((n, c, oh, ow), dtype=np.float32)
        windows = im2col_view(src, (kh, kw), (oh, ow), (sh, sw))  # [N, C, KH, KW, OH, OW]
        for i in range(kh):
            for j in range(kw):
                view = windows[:, :, i, j]
                if i == 0 and j == 0:
                    np.copyto(out, view)
                else:
                    np.maximum(out, view, out=out)
        return out


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0) into a fresh array."""
    return np.maximum(x, np.float32(0), dtype=np.float32)


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (NNPACK's channel axis), max-subtracted, one compiled pass per
    row (``lowerkit.backend.cpu.jit.norm``, loaded on first use)."""
    from lowerkit.backend.cpu import jit

    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    if x.size:
        rows = x.size // x.shape[-1]
        jit.load("norm").softmax_rows(x.reshape(rows, -1), out.reshape(rows, -1), False, 0, rows)
    return out
