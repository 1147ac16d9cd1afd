"""Convolution kernels: a compiled ``Conv2d`` (algorithm + scheduling) and the functional forms."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lowerkit.backend.cpu import blas_limit, blas_threads_beside, cpu_count, run_parallel, split

from .algorithms import ALGORITHM_CLASSES, ConvAlgorithm
from .geometry import ConvGeometry, GeometryError
from .selection import select_algorithm
from .workspace import Workspace

# Batches at or above this take the batched ("output") path; see docs/nnpack.md for the measurement.
DEFAULT_BATCH_THRESHOLD = 2
# From this many output pixels, the per-image path of implicit GEMM and direct splits an
# image into bands of output rows (one phase: each worker fills and multiplies its band)
# instead of im2col by input channels then GEMM by output channels (two phases, and every
# worker packs the whole column matrix). glow_like uses the same bound for the same choice.
ROW_SPLIT_PIXELS = 400
# Below this many direct-convolution FLOPs a call runs on the calling thread alone: handing
# work to the pool costs about 0.1 ms per phase here (two phases on the per-image path).
PARALLEL_MIN_FLOPS = 32_000_000
_FLOAT32 = np.dtype(np.float32)


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How a kernel spreads its work: ``threads`` pool workers, batched path from ``batch_threshold``."""

    threads: int = 0  # 0: the machine's cores
    batch_threshold: int = DEFAULT_BATCH_THRESHOLD
    min_parallel_flops: int = PARALLEL_MIN_FLOPS  # smaller calls stay on the calling thread

    @property
    def workers(self) -> int:
        return self.threads if self.threads > 0 else cpu_count()


class Conv2d:
    """A convolution compiled for one geometry: kernel transformed once, workspaces reused.

    ``weight`` may be ``None`` when it only arrives at call time (a graph input rather than
    a parameter); the kernel is then transformed on every call. ``batch_hint`` is the batch
    size ``auto`` selects the algorithm for (any batch size runs). Kernels that run one
    after another (a plan's nodes) may share one ``workspace``.
    """

    def __init__(
        self,
        geom: ConvGeometry,
        weight: np.ndarray | None,
        bias: np.ndarray | None = None,
        *,
        algorithm: str = "auto",
        relu: bool = False,
        transform_strategy: str = "precompute",
        options: RunOptions = RunOptions(),
        batch_hint: int = 1,
        workspace: Workspace | None = None,
        activation: tuple[int, float, float] | None = None,
    ) -> None:
        geom.check()
        if weight is not None:
            self._check_weight(geom, weight)
        if bias is not None:
            self._check_bias(geom, bias)
        if transform_strategy not in ("precompute", "compute"):
            raise GeometryError(
                f"transform_strategy must be 'precompute' or 'compute', got {transform_strategy!r}"
            )
        self.geom = geom
        if algorithm == "auto":
            algorithm = select_algorithm(geom, batch_hint, options.workers, options.batch_threshold)
        self.algorithm = algorithm
        cls = ALGORITHM_CLASSES.get(algorithm)
        if cls is None:
            raise GeometryError(
                f"unknown algorithm {algorithm!r}; expected one of {['auto', *ALGORITHM_CLASSES]}"
            )
        self.impl: ConvAlgorithm = cls(
            geom, weight, relu=relu, precompute=transform_strategy == "precompute", workspace=workspace,
            activation=activation,
        )
        # A private, read-only copy: the compiled bias is fixed at build, like the weight (whose
        # transforms and panel packing are made once).
        self.bias = None if bias is None else np.array(bias, dtype=np.float32)
        if self.bias is not None:
            self.bias.flags.writeable = False
            self.impl.load_epilogue()  # at build: no call loads compiled code
        self.options = options
        # Fixed per layer: computed once, not on every call (a call of a small layer is
        # tens of microseconds; these lookups were a fifth of its Python time).
        self._workers = options.workers
        self._blas_threads = blas_threads_beside(self._workers)
        self._out_hw = geom.out_hw
        self._flops_per_image = geom.flops(1)

    @staticmethod
    def _check_weight(geom: ConvGeometry, weight: np.ndarray) -> None:
        expected = (geom.out_channels, geom.in_channels, *geom.kernel)
        if tuple(weight.shape) != expected:
            raise GeometryError(f"weight must have shape {list(expected)}, got {list(weight.shape)}")

    @staticmethod
    def _check_bias(geom: ConvGeometry, bias: np.ndarray) -> None:
        if tuple(bias.shape) != (geom.out_channels,):
            raise GeometryError(f"bias must have shape [{geom.out_channels}], got {list(bias.shape)}")

    def output_shape(self, batch: int) -> tuple[int, int, int, int]:
        return (batch, self.geom.out_channels, *self._out_hw)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """A plan's call (the layer's own weight and bias, ``out`` a C-contiguous float32 buffer
        of the output's shape, ``residual`` of it or None): a layer that runs on the calling
        thread goes straight to its algorithm; anything else through :meth:`__call__`, whose
        checks, BLAS limit and thread split are for any caller (a plan sets the BLAS limit for
        the whole call)."""
        if not self._on_this_thread(x):
            return self(x, out=out, residual=residual)
        impl = self.impl
        _run_chunk(impl, x, impl.kernel_data(None), self.bias, out, residual)
        return out

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> Callable[[], object] | None:
        """:meth:`run_into` on these very arrays as a zero-argument call (see :mod:`.bound`),
        where the layer runs on the calling thread and its algorithm can bind (a 1x1 layer on
        the panel GEMM); else None."""
        bind_chunk = getattr(self.impl, "bind_chunk", None)
        if bind_chunk is None or not self._on_this_thread(x):
            return None
        return bind_chunk(x, self.impl.kernel_data(None), self.bias, out, residual)

    def _on_this_thread(self, x: np.ndarray) -> bool:
        """Whether a plan's call on ``x`` goes straight to the algorithm on the calling thread:
        float32 and C-contiguous, the compiled weight, and too small to split over workers."""
        return (x.dtype is _FLOAT32 and x.flags.c_contiguous and self.impl.weight is not None
                and (self._workers <= 1 or self._flops_per_image * x.shape[0] < self.options.min_parallel_flops))

    def __call__(
        self,
        x: np.ndarray,
        weight: np.ndarray | None = None,
        bias: np.ndarray | None = None,
        out: np.ndarray | None = None,
        residual: np.ndarray | None = None,
    ) -> np.ndarray:
        """Convolve ``x`` [N, IC, H, W] (float32); returns ``out`` [N, OC, OH, OW].

        ``weight``/``bias`` given here override the compiled ones for this call only.
        ``residual`` (shaped like the output) is added after the bias and before the fused
        activation, block by block while the output is in cache (a fused residual add).
        """
        g = self.geom
        if x.ndim != 4 or x.shape[1] != g.in_channels or tuple(x.shape[2:]) != g.in_hw:
            raise GeometryError(
                f"input must have shape [N, {g.in_channels}, {g.in_hw[0]}, {g.in_hw[1]}], "
                f"got {list(x.shape)}"
            )
        if weight is None and self.impl.weight is None:
            raise GeometryError("this convolution was compiled without a weight; pass weight=")
        if weight is not None:
            self._check_weight(g, weight)
        if bias is not None:
            self._check_bias(g, bias)
            bias = np.ascontiguousarray(bias, dtype=np.float32)
        else:
            bias = self.bias
        x = np.ascontiguousarray(x, dtype=np.float32)
        n = x.shape[0]
        if out is None:
            out = np.empty(self.output_shape(n), dtype=np.float32)
        if residual is not None:
            if residual.shape != out.shape:
                raise GeometryError(f"residual must have the output's shape {list(out.shape)}, got {list(residual.shape)}")
            residual = np.ascontiguousarray(residual, dtype=np.float32)
        workers = self._workers
        impl = self.impl
        with blas_limit(self._blas_threads):
            if self._flops_per_image * n < self.options.min_parallel_flops:
                workers = 1
            kernel = impl.kernel_data(weight)
            if workers <= 1 or (n >= self.options.batch_threshold and n > 1):
                # Batched ("output") path: each worker runs whole chunks of the batch.
                def run_chunk(chunk: slice) -> None:
                    _run_chunk(impl, x[chunk], kernel, bias, out[chunk], None if residual is None else residual[chunk])

                run_parallel(workers, run_chunk, split(n, workers))
            elif impl.splits_rows and self._out_hw[0] * self._out_hw[1] >= ROW_SPLIT_PIXELS:
                # Per-image path, by bands of output rows: one phase per image.
                cols = impl.new_row_columns()
                bands = split(self._out_hw[0], workers)
                for i in range(n):
                    image, dst = x[i], out[i]
                    rsd = None if residual is None else residual[i]
                    window = impl.row_window(image) if cols is not None else None
                    run_parallel(
                        workers, lambda rows: impl.compute_rows(image, window, cols, kernel, bias, rows, dst, rsd),
                        bands,
                    )
            else:
                # Per-image ("inference") path: split the input transform over input-channel
                # blocks and the channel GEMM + output transform over output-channel blocks.
                # Implicit GEMM on small images: im2col on the calling thread, then one
                # parallel phase (a second hand-off to the pool costs more than the copy).
                small = impl.splits_rows and self._out_hw[0] * self._out_hw[1] < ROW_SPLIT_PIXELS
                if impl.splits_channels and not small:
                    buffer = impl.new_state(n)
                    run_parallel(
                        workers, lambda cb: impl.transform_channels(x, cb, buffer),
                        split(g.in_channels, workers),
                    )
                    state = impl.finish_state(buffer, n)
                else:
                    state = impl.transform_input(x)
                blocks = impl.output_blocks(state, kernel, workers)
                run_parallel(workers, lambda b: impl.compute_output(state, kernel, bias, b, out, residual), blocks)
        return out


def _run_chunk(impl: ConvAlgorithm, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
               residual: np.ndarray | None) -> None:
    """Every output channel of the images ``x`` on the calling thread: implicit GEMM and
    direct image by image (their ``run_chunk``), the others' input transform then output."""
    if hasattr(impl, "run_chunk"):
        impl.run_chunk(x, kernel, bias, out, residual)
    else:
        impl.compute_output(impl.transform_input(x), kernel, bias, slice(None), out, residual)


def conv2d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    stride: tuple[int, int] = (1, 1),
    padding: tuple[int, int, int, int] = (0, 0, 0, 0),
    *,
    algorithm: str = "auto",
    relu: bool = False,
    transform_strategy: str = "precompute",
    options: RunOptions = RunOptions(),
) -> np.ndarray:
    """One-shot convolution (NCHW, float32; padding is top, left, bottom, right)."""
    geom = ConvGeometry(
        int(weight.shape[1]), int(weight.shape[0]), (int(x.shape[2]), int(x.shape[3])),
        (int(weight.shape[2]), int(weight.shape[3])), tuple(stride), tuple(padding),
    )
    kernel = Conv2d(
        geom, weight, bias, algorithm=algorithm, relu=relu,
        transform_strategy=transform_strategy, options=options, batch_hint=int(x.shape[0]),
    )
    return kernel(x)
