"""The reference kernels, one module per op family, joined in :data:`KERNELS`.

Every kernel is ``kernel(args: list[np.ndarray], attrs: dict) -> np.ndarray`` (the
:data:`lowerkit.ir.interpreter.Kernel` signature); attributes arrive normalised, defaults
filled in. Kernels keep the input dtype and never write into their inputs.
"""

from __future__ import annotations

from lowerkit.ir.interpreter import Kernel

from . import conv, elementwise, linear, norm, pool, shape, softmax
from . import activation, attention, conv_transpose, indexing, normalization, reduce, resize
from . import grad, training

KERNELS: dict[str, Kernel] = {}
for _family in (elementwise, linear, conv, pool, norm, shape, softmax, activation, attention,
                conv_transpose, indexing, normalization, reduce, resize, grad, training):
    KERNELS.update(_family.KERNELS)

__all__ = ["KERNELS"]
