"""The stems — convolutions of few input channels — as direct convolutions on the packed
weight (``jit.direct``): no column matrix, the image copied once into its column phases and
the panel GEMM's micro-kernel reading each tap from there.

Plain Python: the rule (:func:`fits`) and :class:`DirectConv`, a layer's geometry, taps and
scratch shape. The kernels load (``jit.load("direct")``) when a :class:`DirectConv` is made,
i.e. while a backend binds a layer.

Measured on an AMD EPYC VM (Zen 4), one image, best of 30, ms, beside ONNX Runtime (2
threads) in the same process — im2col then the panel GEMM (glow_like's and nnpack's team
forms before) / direct, two threads: MobileNetV2's 3->32 3x3/2 at 224 0.33 / 0.17 (ORT
0.16), ResNet's 3->64 7x7/2 2.31 / 1.12 (ORT 1.08-1.19); one thread 0.26 and 2.18 ms direct.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import panels

# Input channels up to which a convolution runs direct: the zoo's stems have 3. With more,
# a tap table entry per (channel, kh, kw) grows and the im2col's GEMM amortises its copy.
MAX_CHANNELS = 4
MAX_INPUTS = 256  # rows of columns (C*KH*KW): one panel's weight slice stays in L1
SLACK = 16  # floats each phase row keeps past its last tap (a 16-float load never leaves it)


def fits(c: int, kernel, stride, dilation, out_hw) -> bool:
    """Whether a dense convolution of ``c`` input channels with this kernel, stride and
    dilation, and output size, runs direct: at most :data:`MAX_CHANNELS` channels and
    :data:`MAX_INPUTS` rows of columns, undilated, its phases no larger than its column
    matrix (a backend's scratch holds either), and where the panel GEMM's rules let it take
    layers (not under the ``avx512`` rule set, ``panels.wide_vectors``)."""
    (kh, kw), (oh, ow) = tuple(kernel), tuple(out_hw)
    k = c * kh * kw
    return (c <= MAX_CHANNELS and k <= MAX_INPUTS and tuple(dilation) == (1, 1)
            and int(np.prod(phases_shape(c, kernel, stride, out_hw))) <= k * oh * ow
            and not panels.wide_vectors())


def phases_shape(c: int, kernel, stride, out_hw) -> tuple[int, int, int, int]:
    """The shape of a direct convolution's phases: [C, rows, stride, row length] — the padded
    input rows the output reads, each split into its ``sw`` column phases, each phase as long
    as the output row plus the kernel's reach and :data:`SLACK`."""
    (kh, kw), (sh, sw), (oh, ow) = tuple(kernel), tuple(stride), tuple(out_hw)
    return c, (oh - 1) * sh + kh, sw, ow + (kw - 1) // sw + SLACK


def tap_table(shape: tuple[int, int, int, int], kernel) -> np.ndarray:
    """The int64 offset, in floats from the first phase of an output row's first input row,
    of each tap (c, kh, kw) in the weight's order (``phases[c, kh, kw % sw, kw // sw]``)."""
    c, rows, sw, length = shape
    kh, kw = tuple(kernel)
    ci, i, j = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    return (((ci * rows + i) * sw + j % sw) * length + j // sw).reshape(-1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class DirectConv:
    """A direct convolution's geometry: ``x`` [C, H, W] -> ``out`` [M, OH, OW] with row stride
    ``sh`` (the column stride is the phases'), padding top ``pt`` and left ``pl`` (bottom and
    right follow from the output size). :meth:`run` and :meth:`run_team` take the weight as a
    ``panels.PackedWeight`` and the scratch ``phases`` (:attr:`phases_shape`, float32)."""

    sh: int
    pt: int
    pl: int
    taps: np.ndarray  # int64, one per row of the weight's columns
    phases_shape: tuple[int, int, int, int]  # C, rows, stride, row length
    kernels: object  # the jit.direct module

    @classmethod
    def of(cls, c: int, kernel, stride, padding, out_hw) -> DirectConv:
        """The layer's geometry, its tap table computed now."""
        from . import jit

        kernels = jit.load("direct")
        shape = phases_shape(c, kernel, stride, out_hw)
        taps = tap_table(shape, kernel)
        taps.flags.writeable = False
        return cls(int(stride[0]), int(padding[0]), int(padding[1]), taps, shape, kernels)

    def new_phases(self) -> np.ndarray:
        """A scratch array of :attr:`phases_shape` for one thread's calls."""
        return np.empty(self.phases_shape, np.float32)

    def run(self, packed: panels.PackedWeight, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
            phases: np.ndarray) -> None:
        """``out`` [N, M, OH, OW] = act(conv(``x`` [N, C, H, W]) + bias), every image on the
        calling thread."""
        self.kernels.direct(packed.panels, packed.bias, x, out, phases, self.taps, packed.k, packed.m, *act,
                            self.sh, self.pt, self.pl)

    def run_team(self, packed: panels.PackedWeight, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
                 phases: np.ndarray, ways: int) -> None:
        """One image, ``x`` [C, H, W] -> ``out`` [M, OH, OW], on ``ways`` threads: two team
        regions, the phases in bands of channels, then bands of output rows."""
        self.kernels.team_phases(x, phases, self.pt, self.pl, ways)
        self.kernels.team_rows(packed.panels, packed.bias, phases, out, self.taps, packed.k, packed.m, *act,
                               self.sh, ways)
