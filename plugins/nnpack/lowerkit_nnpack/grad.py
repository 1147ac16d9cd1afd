"""Convolution gradients for stride 1 (NNPACK's gradient kernels).

Input gradient: a full correlation of ``grad_output`` with the kernel rotated by 180 degrees
and with in/out channels swapped, i.e. a forward convolution with padding
``kernel - 1 - padding`` on each side, so it reuses every forward algorithm.
Weight gradient: the correlation of the (padded) input with ``grad_output``, computed as
an im2col of the input and one GEMM per image, accumulated over the batch.
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import blas_limit, blas_threads_beside, run_parallel, split

from .algorithms import ImplicitGemm
from .conv import Conv2d, RunOptions
from .geometry import ConvGeometry, GeometryError
from .workspace import Workspace


def _require_stride1(op: str, stride: tuple[int, int]) -> None:
    if tuple(stride) != (1, 1):
        raise GeometryError(f"{op} supports stride 1x1 only (NNPACK's gradient kernels), got {stride[0]}x{stride[1]}")


def _rotate(weight: np.ndarray) -> np.ndarray:
    """[OC, IC, KH, KW] -> [IC, OC, KH, KW] flipped in both spatial axes."""
    return np.ascontiguousarray(weight[:, :, ::-1, ::-1].transpose(1, 0, 2, 3), dtype=np.float32)


class Conv2dInputGrad:
    """``grad_input`` of a stride-1 convolution, as a forward convolution of ``grad_output``."""

    def __init__(
        self,
        geom: ConvGeometry,
        weight: np.ndarray | None,
        *,
        algorithm: str = "auto",
        transform_strategy: str = "precompute",
        options: RunOptions = RunOptions(),
        batch_hint: int = 1,
        workspace: Workspace | None = None,
    ) -> None:
        _require_stride1("conv2d_input_grad", geom.stride)
        geom.check()
        self.geom = geom
        kh, kw = geom.kernel
        t, l, b, r = geom.padding
        self.backward = ConvGeometry(
            geom.out_channels, geom.in_channels, geom.out_hw, geom.kernel, (1, 1),
            (kh - 1 - t, kw - 1 - l, kh - 1 - b, kw - 1 - r),
        )
        if self.backward.out_hw != geom.in_hw:  # cannot happen for stride 1; kept as an invariant
            raise GeometryError(f"input size {geom.in_hw} does not match the gradient geometry")
        self.conv = Conv2d(
            self.backward, None if weight is None else _rotate(weight), algorithm=algorithm,
            transform_strategy=transform_strategy, options=options, batch_hint=batch_hint,
            workspace=workspace,
        )

    def __call__(self, grad_output: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
        """``grad_input`` [N, IC, H, W] from ``grad_output`` [N, OC, OH, OW]."""
        return self.conv(grad_output, None if weight is None else _rotate(weight))


class Conv2dWeightGrad:
    """``grad_weight`` of a stride-1 convolution: im2col(input) times grad_output, summed over the batch."""

    def __init__(
        self, geom: ConvGeometry, *, options: RunOptions = RunOptions(), workspace: Workspace | None = None
    ) -> None:
        _require_stride1("conv2d_weight_grad", geom.stride)
        geom.check()
        self.geom = geom
        self.im2col = ImplicitGemm(geom, None, precompute=False, workspace=workspace)
        self.options = options

    def __call__(self, x: np.ndarray, grad_output: np.ndarray) -> np.ndarray:
        g = self.geom
        oh, ow = g.out_hw
        if x.ndim != 4 or tuple(x.shape[1:]) != (g.in_channels, *g.in_hw):
            raise GeometryError(
                f"input must have shape [N, {g.in_channels}, {g.in_hw[0]}, {g.in_hw[1]}], got {list(x.shape)}"
            )
        n = x.shape[0]
        if tuple(grad_output.shape) != (n, g.out_channels, oh, ow):
            raise GeometryError(
                f"grad_output must have shape {[n, g.out_channels, oh, ow]}, got {list(grad_output.shape)}"
            )
        x = np.ascontiguousarray(x, dtype=np.float32)
        dy = np.ascontiguousarray(grad_output, dtype=np.float32).reshape(n, g.out_channels, oh * ow)
        ckk = g.in_channels * g.kernel[0] * g.kernel[1]
        out = np.zeros((g.out_channels, ckk), dtype=np.float32)
        workers = self.options.workers
        ws = self.im2col.ws

        def run_block(block: slice) -> None:
            dst = out[block]
            if cols.ndim == 2:  # batch folded: one GEMM over all images
                np.matmul(dy_folded[block], cols.T, out=dst)
                return
            part = ws.get("partial", dst.shape)
            for i in range(n):
                np.matmul(dy[i, block], cols[i].T, out=part)
                dst += part

        with blas_limit(blas_threads_beside(workers)):
            cols = self.im2col.transform_input(x)  # [N, C*KH*KW, P] or folded [C*KH*KW, N*P]
            if cols.ndim == 2:
                dy_folded = ws.get("dy_folded", (g.out_channels, n, oh * ow))
                np.copyto(dy_folded, dy.transpose(1, 0, 2))
                dy_folded = dy_folded.reshape(g.out_channels, n * oh * ow)
            if g.flops(n) < self.options.min_parallel_flops:
                workers = 1
            run_parallel(workers, run_block, split(g.out_channels, workers))
        return out.reshape(g.out_channels, g.in_channels, *g.kernel)
