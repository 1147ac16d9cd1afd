"""What every convolution algorithm has: geometry, weights, bias, fused ReLU, the kernel-
transform strategy, and the steps the scheduler (``conv.Conv2d``) spreads over threads.

``kernel_data()`` gives the transformed kernel (precomputed once, or per call);
``transform_input(x)`` turns an NCHW batch chunk into the algorithm's domain (or, where
``splits_channels``, ``new_state`` + ``transform_channels`` per input-channel block +
``finish_state``); ``compute_output(state, kernel, bias, block, out)`` does the channel
GEMM for the output-channel ``block`` and the output transform, adding bias and (fused)
ReLU. Every large temporary lives in a per-thread :class:`Workspace` and is written with
``out=``.
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import split

from ..geometry import ConvGeometry, GeometryError
from ..workspace import Workspace

_NO_BIAS = np.empty(0, np.float32)

# Winograd algorithms and their output tile: wt8x8 is NNPACK's; wt6x6 and wt4x4 are extensions.
WINOGRAD_TILES = {"wt8x8": 6, "wt6x6": 4, "wt4x4": 2}
ALGORITHMS = ("auto", "wt8x8", "wt6x6", "wt4x4", "ft8x8", "ft16x16", "implicit_gemm", "direct")


class ConvAlgorithm:
    """Common parts: geometry, weights, bias, fused ReLU and the kernel-transform strategy."""

    name = ""

    def __init__(
        self,
        geom: ConvGeometry,
        weight: np.ndarray | None,
        relu: bool = False,
        precompute: bool = True,
        workspace: Workspace | None = None,
        activation: tuple[int, float, float] | None = None,
    ) -> None:
        from ..activations import NONE, RELU

        check_algorithm(self.name, geom)
        self.geom = geom
        self.out_hw = geom.out_hw  # computed once: read on every call
        self.weight = None if weight is None else np.ascontiguousarray(weight, dtype=np.float32)
        # The fused activation (code, p0, p1); ``relu=True`` is the NNPACK spelling of ReLU.
        self.activation = activation if activation is not None else (RELU if relu else NONE)
        self.relu = self.activation == RELU
        self._bias_act = None
        if self.activation != NONE:
            self.load_epilogue()
        self.ws = workspace if workspace is not None else Workspace()
        self._kernel = None
        if precompute and self.weight is not None:
            self._kernel = self._transform_kernel(None, self.weight)

    def load_epilogue(self) -> None:
        """Load the compiled epilogue (bias + activation in one pass, shared with glow_like;
        imports numba): at build when the layer has a bias or an activation, so that no
        call compiles or loads anything. A layer without either never needs it (the
        availability self-test stays numba-free)."""
        if self._bias_act is None:
            from lowerkit.backend.cpu import jit

            self._bias_act = jit.load("conv").bias_activation

    def kernel_data(self, weight: np.ndarray | None = None) -> np.ndarray:
        """The transformed kernel: precomputed, or transformed now (per call) in this thread's workspace."""
        if weight is None:
            if self._kernel is not None:
                return self._kernel
            weight = self.weight
        return self._transform_kernel(self.ws, np.ascontiguousarray(weight, dtype=np.float32))

    def _transform_kernel(self, ws: Workspace | None, weight: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def transform_input(self, x: np.ndarray) -> np.ndarray:
        """The transformed input for the whole batch; by default every channel in one go."""
        state = self.new_state(x.shape[0])
        self.transform_channels(x, slice(None), state)
        return self.finish_state(state, x.shape[0])

    # Algorithms that can run one image as bands of output rows, one phase (implicit GEMM,
    # direct) set this and implement ``row_window``, ``new_row_columns``, ``compute_rows``.
    splits_rows = False

    # Algorithms whose input transform can be split over input-channel blocks (so the
    # per-image path runs it on every worker) override these three.
    splits_channels = False

    def new_state(self, n: int) -> np.ndarray:
        """The (caller-thread) buffer that :meth:`transform_channels` calls fill."""
        raise NotImplementedError

    def transform_channels(self, x: np.ndarray, channels: slice, state: np.ndarray) -> None:
        """Transform input channels ``channels`` of ``x`` into ``state`` (any thread)."""
        raise NotImplementedError

    def finish_state(self, state: np.ndarray, n: int) -> np.ndarray:
        """``state`` (for ``n`` images) as :meth:`compute_output` reads it."""
        return state

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray,
        residual: np.ndarray | None = None,
    ) -> None:
        """Channel GEMM + output transform for output channels ``block`` of ``out``, then
        bias, ``+ residual`` (an array shaped like ``out``) and the fused activation."""
        raise NotImplementedError

    def output_blocks(self, state: np.ndarray, kernel: np.ndarray, workers: int) -> list[slice]:
        """The output-channel blocks the per-image path hands to ``workers`` workers'
        :meth:`compute_output`: nearly equal parts."""
        return split(self.geom.out_channels, workers)

    def _epilogue(
        self, out_block: np.ndarray, bias: np.ndarray | None, block: slice, residual: np.ndarray | None = None
    ) -> None:
        """Bias, the residual and the fused activation, in place on the block just written
        (still in cache): the residual is one numpy pass, bias and activation one compiled
        pass (``lowerkit.backend.cpu.jit.conv.bias_activation``)."""
        if residual is not None:
            out_block += residual[:, block]
        code, p0, p1 = self.activation
        if bias is None and code == 0:
            return
        b = _NO_BIAS if bias is None else bias[block]
        if self._bias_act is None:  # a bias given only at call time
            self.load_epilogue()
        for image in out_block:  # [OCb, OH, OW]: one image's block of channels, contiguous
            self._bias_act(image.reshape(image.shape[0], -1), b, code, p0, p1)


def check_algorithm(name: str, geom: ConvGeometry) -> None:
    """Raise ``GeometryError`` naming the rule when algorithm ``name`` cannot serve ``geom``."""
    kh, kw = geom.kernel
    strided = geom.stride != (1, 1)
    if name in WINOGRAD_TILES:
        m = WINOGRAD_TILES[name]
        if (kh, kw) != (3, 3):
            raise GeometryError(f"{name} (Winograd F({m}x{m}, 3x3)) needs a 3x3 kernel, got {kh}x{kw}")
        if strided:
            raise GeometryError(f"{name} needs stride 1x1, got {geom.stride[0]}x{geom.stride[1]}")
    elif name in ("ft8x8", "ft16x16"):
        limit = 8 if name == "ft8x8" else 16
        if max(kh, kw) > limit:
            raise GeometryError(f"{name} needs a kernel of at most {limit}x{limit}, got {kh}x{kw}")
        if strided:
            raise GeometryError(f"{name} needs stride 1x1, got {geom.stride[0]}x{geom.stride[1]}")
    elif name == "direct":
        if (kh, kw) != (1, 1):
            raise GeometryError(f"direct needs a 1x1 kernel, got {kh}x{kw}")
    elif name != "implicit_gemm":
        raise GeometryError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHMS)}")
