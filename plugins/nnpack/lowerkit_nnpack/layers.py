"""NNPACK's other layers: fully connected, max pooling, ReLU, softmax."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from lowerkit.backend.cpu import blas_limit, blas_threads_beside, panels, run_parallel, split, team_layers
from lowerkit.backend.cpu.calls import on_team
from lowerkit.backend.cpu.jit.select import max_pool3x3_fits

from .activations import NONE, activate_inplace, add_activate
from .bound import with_residual
from .conv import RunOptions
from .geometry import GeometryError
from .workspace import Workspace

_FLOAT32 = np.dtype(np.float32)


class Linear:
    """``y = x @ weight.T + bias``; the transposed weight is stored once, contiguous. Calls of
    2-6 rows on the stored weight (a batch slice's classifier) run on it packed in bands
    (``lowerkit.backend.cpu.panels.PackedBands``, packed on the first such call), which stream
    it once where BLAS's ``sgemm`` copies it first."""

    def __init__(self, weight: np.ndarray | None, bias: np.ndarray | None = None, *, options: RunOptions = RunOptions()) -> None:
        self.weight_t = None if weight is None else np.ascontiguousarray(np.asarray(weight, np.float32).T)
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        self.options = options
        self._bands: panels.PackedBands | None = None
        self._row_bands: panels.PackedBands | None = None

    def bands(self) -> panels.PackedBands:
        """The stored weight and bias packed in bands (on the first call; two threads may both
        pack: the same result, one kept)."""
        if self._bands is None:
            self._bands = panels.PackedBands.of(self.weight_t, self.bias)
        return self._bands

    def row_bands(self) -> panels.PackedBands:
        """The stored weight and bias packed for many rows at a time (``PackedBands.run_rows_team``):
        :meth:`bands` itself where the two packings are the same (``jit.panel.FC_WIDTH`` 16), else
        packed on the first such call."""
        if self._row_bands is None:
            bands = self.bands()
            self._row_bands = (bands if bands.width == bands.kernels.FC_WIDTH
                               else panels.PackedBands.of(self.weight_t, self.bias, many_rows=True))
        return self._row_bands

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
        if weight is None and bias is None and panels.bands_fit(x2.shape[0], wt):
            self.bands().run(x2, out, NONE)
        else:
            self._product(x2, wt, b, out)
        return out.reshape(*x.shape[:-1], wt.shape[1])

    def run_into(self, x2: np.ndarray, out2: np.ndarray) -> None:
        """``out2`` [R, N] = ``x2`` [R, K] @ the stored weight + bias: the product alone (the
        plan's :class:`~lowerkit_nnpack.linear_step.LinearStep` picks the bands itself)."""
        self._product(x2, self.weight_t, self.bias, out2)

    def _product(self, x2: np.ndarray, wt: np.ndarray, b: np.ndarray | None, out: np.ndarray) -> None:
        """``out = x2 @ wt + b``: BLAS, the rows split between the layer's workers when large."""
        workers = self.options.workers

        def rows(block: slice) -> None:
            np.matmul(x2[block], wt, out=out[block])
            if b is not None:
                out[block] += b

        with blas_limit(blas_threads_beside(workers)):
            if 2 * x2.shape[0] * wt.shape[0] * wt.shape[1] < self.options.min_parallel_flops:
                workers = 1
            run_parallel(workers, rows, split(x2.shape[0], workers))


class GlobalAvgPool:
    """A global average pool of float32 maps into a given ``[N, C, 1, 1]`` buffer (a plan's
    pool whose output goes to the spares: a squeeze, or a classifier's before its linear
    layer): ``output_shape``, ``run_into`` and ``bind`` as ``plan._bound_step`` calls a
    layer's. Each plane's mean is one pass of the compiled ``jit.pool`` kernel."""

    def __init__(self, channels: int) -> None:
        from lowerkit.backend.cpu import jit

        self.channels = channels
        self.kernels = jit.load("pool")  # compile (or load from the cache) now, not in the first call

    def output_shape(self, batch: int) -> tuple[int, int, int, int]:
        return (batch, self.channels, 1, 1)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        self.kernels.global_avg_pool2d(x, out, 0, x.shape[0] * x.shape[1])
        return out

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> Callable[[], None] | None:
        """:meth:`run_into` on these very arrays as a zero-argument call (None for an ``x`` it
        would copy)."""
        if not (x.dtype is _FLOAT32 and x.flags.c_contiguous):
            return None
        return partial(self.kernels.global_avg_pool2d, x, out, 0, x.shape[0] * x.shape[1])


class PooledPointwise:
    """A 1x1 convolution of a ``[N, C, 1, 1]`` map — the two layers of a squeeze-excitation
    block — as the matrix product it is: on the compiled panel GEMM with bias and activation
    in the same pass, every image of a batch slice in one call (``lowerkit.backend.cpu.panels``,
    as glow_like runs these layers); a map not C-contiguous as ``[N, C] @ W^T``, then bias,
    residual and activation in place. No
    geometry, algorithm or thread machinery for a few thousand multiply-adds: the general
    convolution path cost 30-55 µs per such layer (EfficientNet-B0 has 32); numpy's
    product and passes ~6 µs at batch 1, the panel GEMM ~3.

    With a ``team`` (a team plan's), one image whose weight ``team_layers.row_on_team`` streams
    on both cores runs as one team region, each thread its band of the weight, as glow_like
    runs it: its matrix-vector product is memory-bound (MobileNetV3-Large's 960x240 layers,
    0.07-0.09 ms each on one thread)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, activation, fallback, team=None) -> None:
        oc = weight.shape[0]
        weight = np.asarray(weight, np.float32).reshape(oc, -1)
        self.weight_t = np.ascontiguousarray(weight.T)  # [C, OC]
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(oc)
        self.packed = panels.PackedWeight.of(weight, self.bias)
        self.activation = activation
        self.fallback = fallback  # the convolution itself: runs weights given at call time
        self.team = team if team is not None and team_layers.row_on_team(1, weight.size) else None

    @staticmethod
    def fits(node_shape: tuple, kernel, stride, padding, groups: int) -> bool:
        """A 1x1 stride-1 unpadded dense convolution of a map whose planes are 1x1."""
        return (len(node_shape) == 4 and tuple(node_shape[2:]) == (1, 1) and tuple(kernel) == (1, 1)
                and tuple(stride) == (1, 1) and not any(padding) and groups == 1)

    def output_shape(self, batch: int) -> tuple[int, int, int, int]:
        return (batch, self.weight_t.shape[1], 1, 1)

    def __call__(self, x, weight=None, bias=None, residual=None, out=None) -> np.ndarray:
        if weight is not None or bias is not None or x.dtype != np.float32:
            return self.fallback(x, weight, bias, residual=residual, out=out)
        if out is None:
            out = np.empty(self.output_shape(x.shape[0]), np.float32)
        return self.run_into(x, out, residual)

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> Callable[[], object] | None:
        """:meth:`run_into` on these very arrays as a zero-argument call (see :mod:`.bound`):
        the panel GEMM (every image of a batch slice in one compiled call), then the residual;
        else None."""
        if x.dtype is not _FLOAT32 or not (x.flags.c_contiguous and out.flags.c_contiguous):
            return None
        act = self.activation if residual is None else NONE
        n = x.shape[0]
        if n > 1:
            gemm = self.packed.bind_images(x.reshape(n, -1, 1), out.reshape(n, -1, 1), act)
            return with_residual(gemm, out, residual, self.activation)
        column, result = x.reshape(-1, 1), out.reshape(-1, 1)
        gemm = self.packed.bind(column, result, act)
        if self.team is not None:
            gemm = on_team(self.team, self.packed.bind_team(column, result, act, self.team.ways), gemm)
        return with_residual(gemm, out, residual, self.activation)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """A plan's call: the layer's own weight, ``out`` a float32 buffer of the output's shape.
        Several images (a batch slice) go to the panel GEMM in one call too, as glow_like runs
        these layers: as numpy's product, bias and activation passes, MobileNetV3-Small's 18
        such layers in batch-8 slices took ~0.25 ms a slice more than glow_like's."""
        if x.dtype is not _FLOAT32:
            return self(x, residual=residual, out=out)
        n = x.shape[0]
        if x.flags.c_contiguous and out.flags.c_contiguous:
            act = self.activation if residual is None else NONE
            if n > 1:
                self.packed.run_images(x.reshape(n, -1, 1), out.reshape(n, -1, 1), act)
            elif self.team is not None and self.team.usable():
                self.packed.run_team(x.reshape(-1, 1), out.reshape(-1, 1), act, self.team.ways)
            else:
                self.packed.run(x.reshape(-1, 1), out.reshape(-1, 1), act)
            if residual is not None:
                add_activate(out, residual, self.activation)
            return out
        flat = out.reshape(n, -1)
        np.matmul(x.reshape(n, -1), self.weight_t, out=flat)
        if self.bias is not None:
            np.add(flat, self.bias, out=flat)
        if residual is not None:
            add_activate(out, residual, self.activation)
        else:
            activate_inplace(out, self.activation)
        return out


# Poolings under this many output elements run on the calling thread (the hand-off to the
# pool costs about 0.1 ms; glow_like's bounds: 100,000 input elements, and 800,000 output
# elements for its 3x3 max pool).
POOL_PARALLEL_MIN = 100_000


class MaxPool2d:
    """Max pooling, one compiled pass per output plane (``lowerkit.backend.cpu.jit.pool``,
    shared with glow_like), split over the pool by planes.

    NNPACK itself ships 2x2 stride-2 pooling; windows up to 16x16 with any stride use the
    compiled window kernel here, 3x3 with stride 1 or 2 the 9-tap ``max_pool3x3`` (dilation
    1, floor mode). Padding never enters a maximum (it acts as
    -inf).
    """

    def __init__(
        self, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int, int, int],
        workspace: Workspace | None = None, *, options: RunOptions = RunOptions(), team=None,
    ) -> None:
        """``team`` (a ``lowerkit.backend.cpu.Team``): the 3x3 max pool runs as one team region
        (bands of planes) while the team is usable."""
        from lowerkit.backend.cpu import jit

        kh, kw = kernel
        t, l, b, r = padding
        if min(kernel) < 1 or min(stride) < 1:
            raise GeometryError(f"pooling size and stride must be >= 1, got size {kernel}, stride {stride}")
        for side, pad, k in (("top", t, kh), ("bottom", b, kh), ("left", l, kw), ("right", r, kw)):
            if pad < 0 or pad >= k:
                raise GeometryError(f"{side} padding must be in [0, pooling size - 1] = [0, {k - 1}], got {pad}")
        self.kernel, self.stride, self.padding = (kh, kw), tuple(stride), (t, l, b, r)
        self.options = options
        self.team = team
        self._kernels = jit.load("pool")  # compiled, or loaded from the cache, at build time
        self._unused = np.empty((1, 1), np.float32)  # the kernel's average divisor, unused for max

    def __call__(self, x: np.ndarray) -> np.ndarray:
        (kh, kw), (sh, sw), (t, l, b, r) = self.kernel, self.stride, self.padding
        n, c, h, w = x.shape
        oh, ow = (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1
        if oh < 1 or ow < 1:
            raise GeometryError(f"padded input {h + t + b}x{w + l + r} is smaller than the pooling window {kh}x{kw}")
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty((n, c, oh, ow), dtype=np.float32)
        planes = n * c
        workers = self.options.workers if out.size >= POOL_PARALLEL_MIN else 1
        k, unused = self._kernels, self._unused
        three = max_pool3x3_fits((kh, kw), (sh, sw), (t, l), (1, 1), (h, w), (oh, ow))
        team = self.team
        if three and team is not None and out.size >= team_layers.MIN_POOL_OUTPUTS and team.usable():
            team.kernels().max_pool3x3(x, out, sh, t, l, team.ways)
            return out
        if three:
            def band(s: slice) -> None:
                k.max_pool3x3(x, out, sh, t, l, s.start, s.stop)
        else:
            def band(s: slice) -> None:
                k.pool2d(x, unused, out, True, kh, kw, sh, sw, t, l, 1, 1, s.start, s.stop)
        run_parallel(workers, band, split(planes, workers))
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
